//! Read-only access to one NUMPY_10 collection file: a `.npy` array of shape
//! `(rows, *slot_shape)` whose row `i` (a slot) holds one sample in its leading corner.

use std::fmt;
use std::fs::File;
use std::path::{Path, PathBuf};

use memmap2::Mmap;
use stowage_core::bytes::Bytes;
use stowage_core::{ByteOrder, Error, IoResultExt, Result, Tensor, dtype, shape};

use crate::cold_hash::xxh64_cold;
use crate::error::NpyError;
use crate::record::Numpy10Record;
use stowage_core::npy_header::{self, NpyHeader};

/// Collection files up to this size are read whole by the page fault that reads their header
/// (the kernel's read-around); larger ones read the header's page alone when the cold-read
/// advice is on ([`CollectionFile::open_with`]).
pub(crate) const READ_WHOLE: usize = 256 << 10;

/// A memory-mapped, read-only collection file.
///
/// Reads hand out tensors that share the map where the sample is contiguous inside its slot
/// (zero-copy); the map stays alive as long as any such tensor.
///
/// ```no_run
/// use stowage_npy::test_support::CollectionFile;
/// let file = CollectionFile::open("repo/data/10/4ujrcb35.npy")?;
/// let sample = file.read_slot(3, &[10, 10], Some(0xfd40def8890c87db))?;
/// assert_eq!(sample.shape(), &[10, 10]);
/// # Ok::<(), stowage_core::Error>(())
/// ```
#[derive(Clone)]
pub struct CollectionFile {
    path: PathBuf,
    header: NpyHeader,
    /// The whole file, mapped.
    map: Bytes,
}

impl CollectionFile {
    /// Maps the file at `path` read-only and checks its header and size.
    ///
    /// Errors: [`Error::NotFound`] when the file does not exist; [`Error::Corrupted`] for a bad
    /// header or a file shorter than header + data (naming both sizes); [`Error::Incompatible`] for
    /// dtypes or layouts stowage does not read and for a 0-d array, which has no slots.
    ///
    /// The file must not be modified or truncated while it is open (see the safety note in the
    /// source): NUMPY_10 data files are never changed in place after they are committed.
    pub fn open(path: impl AsRef<Path>) -> Result<CollectionFile> {
        CollectionFile::open_with(path.as_ref(), false)
    }

    /// [`CollectionFile::open`]; with `header_alone`, a file larger than [`READ_WHOLE`] is
    /// mapped `MADV_RANDOM` while its header is read, so that a cold open reads the header's
    /// page, not the kernel's read-around of it (up to `read_ahead_kb`, 8 MiB on the scale
    /// suite's disk, for the one row a get wants), then handed back to the default advice (rows
    /// are advised by the reads, `stowage_core::cold_reads`). A smaller file is read whole by its
    /// first fault, in one request, rows included.
    pub(crate) fn open_with(path: &Path, header_alone: bool) -> Result<CollectionFile> {
        let file = match File::open(path) {
            Ok(file) => file,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(Error::NotFound {
                    what: format!("collection file {}", path.display()),
                });
            }
            Err(e) => return Err(Error::io(path, e)),
        };
        // SAFETY: `Mmap::map` is unsafe because another process could modify or truncate the file
        // while it is mapped, which would change bytes behind the `&[u8]` we hand out (or raise
        // SIGBUS on truncation). We rely on the NUMPY_10 contract: a data file is written only by
        // the writer session that created it, and once committed it is never modified, truncated
        // or moved (new samples go to new files). The map is read-only (PROT_READ), stowage itself
        // never writes through it, and callers are documented not to open a file that a writer is
        // still filling. Within those rules the mapped bytes are immutable for the map's lifetime.
        let map = unsafe { Mmap::map(&file) }.at(path)?;
        let header_alone = header_alone && map.len() > READ_WHOLE;
        #[cfg(unix)]
        if header_alone {
            // Hints only: a refusal leaves the default read-around, and reads stay the same.
            let _ = map.advise(memmap2::Advice::Random);
        }
        let header = npy_header::parse(&map).map_err(|e| e.into_error(path));
        #[cfg(unix)]
        if header_alone {
            let _ = map.advise(memmap2::Advice::Normal);
        }
        let header = header?;
        if header.shape.is_empty() {
            return Err(NpyError::NoSlots { path: path.to_path_buf() }.into());
        }
        let data_len = header.data_len()?;
        let needed = header
            .data_offset
            .checked_add(data_len)
            .ok_or_else(|| NpyError::DataSizeOverflow { path: path.to_path_buf(), data_len })?;
        if map.len() < needed {
            return Err(NpyError::ShortCollectionFile {
                path: path.to_path_buf(),
                len: map.len(),
                needed,
                header_len: header.data_offset,
                data_len,
                descr: header.descr.clone(),
                shape: header.shape.clone(),
            }
            .into());
        }
        Ok(CollectionFile { path: path.to_path_buf(), header, map: Bytes::from_owner(map) })
    }

    /// The file's path (the fuzz targets' and tests' view; the backend knows its paths).
    #[cfg(any(test, feature = "fuzzing", feature = "test-support"))]
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The parsed `.npy` header.
    pub fn header(&self) -> &NpyHeader {
        &self.header
    }

    /// Number of slots (the first dimension).
    pub fn rows(&self) -> usize {
        self.header.shape[0]
    }

    /// The shape of one slot: the column's maximum sample shape.
    pub fn slot_shape(&self) -> &[usize] {
        &self.header.shape[1..]
    }

    /// Reads the sample of shape `sample_shape` stored in the leading corner
    /// `[index, 0:s0, 0:s1, ...]` of slot `index`.
    ///
    /// The tensor shares the map (zero-copy) when that corner is contiguous in the slot; otherwise,
    /// and for big-endian files (converted to little-endian), it is a C-order copy. With
    /// `verify: Some(expected)`, the xxh64 of exactly the sample's C-order bytes, as stored in the
    /// file, must equal `expected`, else [`Error::Corrupted`] names the slot and both digests
    /// (`checksum <got> != recorded <want>`); no data is returned then.
    ///
    /// Errors: [`Error::InvalidArgument`] when `index` is not below [`CollectionFile::rows`], the
    /// rank differs from the slot's or a dimension exceeds the slot's; [`Error::Corrupted`] on a
    /// checksum mismatch or a bool byte that is not 0 or 1.
    #[cfg(any(test, feature = "fuzzing", feature = "test-support"))]
    pub fn read_slot(
        &self,
        index: u64,
        sample_shape: &[usize],
        verify: Option<u64>,
    ) -> Result<Tensor> {
        self.read(index, sample_shape, verify, &format_args!("slot {index}"))
    }

    /// Reads the sample `record` addresses in this file (the caller opened `data/10/<uid>.npy`),
    /// verifying its checksum when `verify` is set. Like [`CollectionFile::read_slot`], with the
    /// record named in every error.
    pub fn read_record(&self, record: &Numpy10Record, verify: bool) -> Result<Tensor> {
        let checksum = verify.then_some(record.checksum);
        self.read(
            record.collection_index,
            &record.shape,
            checksum,
            &format_args!("record {record}"),
        )
    }

    /// The map and the byte range of slot `index` in it (`None` past the file's slots): what a
    /// read of that slot touches, for planning a batch's page reads.
    pub(crate) fn slot_range(&self, index: u64) -> Option<(&Bytes, std::ops::Range<usize>)> {
        let row = usize::try_from(index).ok().filter(|&i| i < self.rows())?;
        let item = self.header.dtype.item_size();
        let slot_len = shape::byte_count(self.slot_shape(), item).ok()?;
        let start = self.header.data_offset + row * slot_len;
        Some((&self.map, start..start + slot_len))
    }

    /// Like [`CollectionFile::read_slot`], naming the sample as `what` in errors (formatted only
    /// on error).
    pub(crate) fn read(
        &self,
        index: u64,
        sample_shape: &[usize],
        verify: Option<u64>,
        what: &dyn fmt::Display,
    ) -> Result<Tensor> {
        let h = &self.header;
        let slot_shape = self.slot_shape();
        let item = h.dtype.item_size();
        if sample_shape.len() != slot_shape.len() {
            return Err(Error::invalid(format!(
                "{what}: sample rank {} (shape {}) != slot rank {} (slot shape {}) of {}",
                sample_shape.len(),
                shape::display(sample_shape),
                slot_shape.len(),
                shape::display(slot_shape),
                self.path.display()
            )));
        }
        if let Some(axis) = (0..slot_shape.len()).find(|&a| sample_shape[a] > slot_shape[a]) {
            return Err(Error::invalid(format!(
                "{what}: sample shape {} exceeds slot shape {} on axis {axis} in {}",
                shape::display(sample_shape),
                shape::display(slot_shape),
                self.path.display()
            )));
        }
        let rows = self.rows();
        let Some(row) = usize::try_from(index).ok().filter(|&i| i < rows) else {
            return Err(Error::invalid(format!(
                "{what}: slot index {index} is out of range: {} has {rows} slots",
                self.path.display()
            )));
        };
        // All in range: parse checked that rows * slot bytes fits and open that the file holds it.
        let slot_len = shape::byte_count(slot_shape, item)?;
        let slot_start = h.data_offset + row * slot_len;
        let sample_len = shape::byte_count(sample_shape, item)?;

        let (stored, shared) = if is_contiguous_corner(sample_shape, slot_shape) {
            (self.map.slice(slot_start..slot_start + sample_len), true)
        } else {
            let slot = &self.map[slot_start..slot_start + slot_len];
            (Bytes::from(gather_corner(slot, slot_shape, sample_shape, item, sample_len)), false)
        };
        if let Some(want) = verify {
            // Hash the bytes as stored, before any byte-order conversion: that is what the writer
            // hashed.
            let got = xxh64_cold(&stored);
            if got != want {
                let sample = what.to_string();
                return Err(NpyError::ChecksumMismatch {
                    path: self.path.clone(),
                    sample,
                    got,
                    want,
                }
                .into());
            }
        }
        let tensor = match h.byte_order {
            ByteOrder::Little if shared => Tensor::shared(h.dtype, sample_shape.to_vec(), stored),
            ByteOrder::Little => Tensor::new(h.dtype, sample_shape.to_vec(), stored),
            ByteOrder::Big => {
                let mut bytes = stored.to_vec();
                dtype::swap_to_little_endian(&mut bytes, h.dtype)?;
                Tensor::new(h.dtype, sample_shape.to_vec(), bytes)
            }
        };
        // Tensor construction only fails on content here (a bool byte other than 0/1).
        tensor.map_err(|e| Error::corrupted(&self.path, format!("{what}: {e}")))
    }
}

impl fmt::Debug for CollectionFile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CollectionFile")
            .field("path", &self.path)
            .field("header", &self.header)
            .finish_non_exhaustive()
    }
}

/// Whether the corner `[0:s0, 0:s1, ...]` of a C-order block of shape `slot` is one contiguous
/// run starting at the block's first byte: after the leading length-1 axes, the first longer axis
/// may be partial but every axis after it must be full. An empty corner is trivially contiguous.
fn is_contiguous_corner(sample: &[usize], slot: &[usize]) -> bool {
    if sample.contains(&0) {
        return true;
    }
    match sample.iter().position(|&d| d != 1) {
        None => true,
        Some(first) => sample[first + 1..] == slot[first + 1..],
    }
}

/// Copies the corner `[0:s0, 0:s1, ...]` of `slot` (C order, shape `slot_shape`) into a new C-order
/// buffer of `len` bytes. Trailing axes the sample fills completely are copied as one run.
fn gather_corner(
    slot: &[u8],
    slot_shape: &[usize],
    sample: &[usize],
    item: usize,
    len: usize,
) -> Vec<u8> {
    let mut out = Vec::with_capacity(len);
    if len == 0 {
        return out;
    }
    // Byte strides of the slot.
    let mut strides = vec![item; slot_shape.len()];
    for axis in (0..slot_shape.len().saturating_sub(1)).rev() {
        strides[axis] = strides[axis + 1] * slot_shape[axis + 1];
    }
    // `full` = first axis from which the sample covers the slot completely; the axis before it is
    // the last one that needs its own loop level, and its whole extent is one contiguous run.
    let full = (0..sample.len())
        .rev()
        .take_while(|&a| sample[a] == slot_shape[a])
        .last()
        .unwrap_or(sample.len());
    let run_axis = full.saturating_sub(1);
    let run = sample[run_axis..].iter().product::<usize>() * item;
    let outer = &sample[..run_axis];
    let mut idx = vec![0usize; outer.len()];
    loop {
        let offset: usize = idx.iter().zip(&strides).map(|(i, s)| i * s).sum();
        out.extend_from_slice(&slot[offset..offset + run]);
        // Advance the odometer over the outer axes, last axis fastest.
        let mut axis = outer.len();
        loop {
            if axis == 0 {
                return out;
            }
            axis -= 1;
            idx[axis] += 1;
            if idx[axis] < outer[axis] {
                break;
            }
            idx[axis] = 0;
        }
    }
}

/// Reads the sample a NUMPY_10 `record` addresses in a hangar-style data directory.
///
/// `repo_dir` is the directory that holds `data/10/` (hangar's `.hangar` directory; the reference
/// set's `repo/`). The record is parsed, `data/10/<uid>.npy` is mapped and the slot read as
/// a collection file's own record read does, verifying the checksum when `verify` is set.
///
/// hangar marks a data file visible with an empty file of the same name in `store_data/10/`
/// (committed) or `stage_data/10/` (staged, uncommitted). When `repo_dir` has a `store_data` or a
/// `stage_data` directory, one of those markers is required and a file without one is
/// [`Error::NotFound`]; a bare data directory without either is read as is. The uid is validated
/// (`[a-z0-9]{8}`) before it becomes part of a path.
///
/// ```no_run
/// let t = stowage_npy::read_hangar_record(
///     "reference/hangar-numpy10/repo".as_ref(),
///     "10:4ujrcb35:fd40def8890c87db:3:10 10",
///     true,
/// )?;
/// assert_eq!(t.shape(), &[10, 10]);
/// # Ok::<(), stowage_core::Error>(())
/// ```
pub fn read_hangar_record(repo_dir: &Path, record: &str, verify: bool) -> Result<Tensor> {
    let parsed = Numpy10Record::parse(record)?;
    let file_name = format!("{}.npy", parsed.uid);
    let stored = repo_dir.join("store_data");
    let staged = repo_dir.join("stage_data");
    if stored.try_exists().at(&stored)? || staged.try_exists().at(&staged)? {
        let committed_marker = stored.join("10").join(&file_name);
        let staged_marker = staged.join("10").join(&file_name);
        let marked = committed_marker.try_exists().at(&committed_marker)?
            || staged_marker.try_exists().at(&staged_marker)?;
        if !marked {
            return Err(Error::NotFound {
                what: format!(
                    "record {parsed}: collection file {file_name} has no marker in {} or {} (it \
                     was neither committed nor staged)",
                    stored.join("10").display(),
                    staged.join("10").display()
                ),
            });
        }
    }
    CollectionFile::open(repo_dir.join("data").join("10").join(&file_name))?
        .read_record(&parsed, verify)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::xxh64;
    use stowage_core::DType;
    use stowage_core::npy_header::write_header;

    /// Writes a collection file of `dtype` with shape `(rows, *slot)` whose bytes count up.
    fn collection(dir: &Path, name: &str, dtype: DType, shape: &[usize]) -> (PathBuf, Vec<u8>) {
        let data: Vec<u8> = (0..shape::byte_count(shape, dtype.item_size()).unwrap())
            .map(|i| (i % 251) as u8)
            .collect();
        let mut bytes = write_header(dtype, shape);
        bytes.extend_from_slice(&data);
        let path = dir.join(name);
        std::fs::write(&path, &bytes).unwrap();
        (path, data)
    }

    /// The reference gather: element by element.
    fn naive_corner(data: &[u8], slot: &[usize], sample: &[usize], item: usize) -> Vec<u8> {
        let count: usize = sample.iter().product();
        let mut out = Vec::new();
        for flat in 0..count {
            let (mut rem, mut offset, mut stride) = (flat, 0, item);
            for axis in (0..sample.len()).rev() {
                offset += (rem % sample[axis]) * stride;
                rem /= sample[axis];
                stride *= slot[axis];
            }
            out.extend_from_slice(&data[offset..offset + item]);
        }
        out
    }

    #[test]
    fn corners_match_a_naive_gather() {
        let dir = tempfile::tempdir().unwrap();
        let slot = [4usize, 3, 5];
        let (path, data) = collection(dir.path(), "a.npy", DType::I16, &[3, 4, 3, 5]);
        let file = CollectionFile::open(&path).unwrap();
        let slot_len = 4 * 3 * 5 * 2;
        for row in 0..3u64 {
            for s0 in 0..=4 {
                for s1 in 0..=3 {
                    for s2 in 0..=5 {
                        let sample = [s0, s1, s2];
                        let start = row as usize * slot_len;
                        let want = naive_corner(&data[start..start + slot_len], &slot, &sample, 2);
                        let got = file.read_slot(row, &sample, Some(xxh64(&want))).unwrap();
                        assert_eq!(got.bytes(), want, "row {row} {sample:?}");
                        assert_eq!(got.shape(), sample);
                        let expect_shared = is_contiguous_corner(&sample, &slot);
                        assert_eq!(got.is_zero_copy(), expect_shared, "{sample:?}");
                    }
                }
            }
        }
    }

    #[test]
    fn contiguity_rule() {
        assert!(is_contiguous_corner(&[2, 2, 3], &[20, 2, 3]));
        assert!(is_contiguous_corner(&[1, 2, 3], &[20, 2, 3]));
        assert!(is_contiguous_corner(&[1, 1, 2], &[20, 2, 3]));
        assert!(is_contiguous_corner(&[0, 2, 3], &[20, 2, 3]));
        assert!(is_contiguous_corner(&[], &[]));
        assert!(!is_contiguous_corner(&[20, 2, 1], &[20, 2, 3]));
        assert!(!is_contiguous_corner(&[5, 1, 1], &[20, 2, 3]));
        assert!(!is_contiguous_corner(&[1, 2, 2], &[20, 2, 3]));
    }

    #[test]
    fn scalar_columns_and_addressing_errors() {
        let dir = tempfile::tempdir().unwrap();
        let (path, data) = collection(dir.path(), "s.npy", DType::I64, &[10]);
        let file = CollectionFile::open(&path).unwrap();
        assert_eq!((file.rows(), file.slot_shape()), (10, &[][..]));
        let t = file.read_slot(9, &[], None).unwrap();
        assert_eq!(t.bytes(), &data[72..80]);
        assert!(t.is_zero_copy());
        let err = file.read_slot(10, &[], None).unwrap_err().to_string();
        assert!(err.contains("slot index 10") && err.contains("10 slots"), "{err}");
        assert!(file.read_slot(u64::MAX, &[], None).is_err());
        let err = file.read_slot(0, &[1], None).unwrap_err().to_string();
        assert!(err.contains("rank"), "{err}");

        let (path, _) = collection(dir.path(), "v.npy", DType::U8, &[2, 3, 4]);
        let err = CollectionFile::open(&path).unwrap().read_slot(0, &[3, 5], None).unwrap_err();
        assert!(err.to_string().contains("exceeds slot shape (3, 4) on axis 1"), "{err}");
    }

    #[test]
    fn checksum_mismatch_names_both_digests() {
        let dir = tempfile::tempdir().unwrap();
        let (path, _) = collection(dir.path(), "c.npy", DType::F32, &[2, 2]);
        let err =
            CollectionFile::open(&path).unwrap().read_slot(1, &[2], Some(0x1234)).unwrap_err();
        let msg = err.to_string();
        assert!(matches!(err, Error::Corrupted { .. }));
        assert!(msg.contains("c.npy") && msg.contains("!= recorded 0000000000001234"), "{msg}");
    }

    #[test]
    fn short_and_bad_files_are_errors() {
        let dir = tempfile::tempdir().unwrap();
        let (path, _) = collection(dir.path(), "t.npy", DType::F64, &[10, 3]);
        let full = std::fs::read(&path).unwrap();
        std::fs::write(&path, &full[..full.len() - 1]).unwrap();
        let msg = CollectionFile::open(&path).unwrap_err().to_string();
        assert!(msg.contains("t.npy") && msg.contains("367") && msg.contains("368"), "{msg}");
        for len in [0, 5, 64, 127] {
            std::fs::write(&path, &full[..len]).unwrap();
            assert!(matches!(CollectionFile::open(&path), Err(Error::Corrupted { .. })), "{len}");
        }
        let (path, _) = collection(dir.path(), "z.npy", DType::F64, &[]);
        assert!(matches!(CollectionFile::open(&path), Err(Error::Incompatible { .. })));
        assert!(matches!(
            CollectionFile::open(dir.path().join("nope.npy")),
            Err(Error::NotFound { .. })
        ));
    }

    #[test]
    fn big_endian_files_are_converted() {
        let dir = tempfile::tempdir().unwrap();
        let text = "{'descr': '>i4', 'fortran_order': False, 'shape': (2, 3), }";
        let mut bytes = write_header(DType::I32, &[2, 3]);
        let at = bytes.windows(3).position(|w| w == b"<i4").unwrap();
        bytes[at] = b'>';
        assert!(String::from_utf8_lossy(&bytes).contains(text));
        let values: [i32; 6] = [1, -2, 3, 0x01020304, 5, i32::MIN];
        let stored: Vec<u8> = values.iter().flat_map(|v| v.to_be_bytes()).collect();
        bytes.extend_from_slice(&stored);
        let path = dir.path().join("be.npy");
        std::fs::write(&path, &bytes).unwrap();
        let file = CollectionFile::open(&path).unwrap();
        // The checksum covers the bytes as stored (big-endian).
        let t = file.read_slot(1, &[2], Some(xxh64(&stored[12..20]))).unwrap();
        assert_eq!(t.to_vec::<i32>().unwrap(), vec![0x01020304, 5]);
        assert!(!t.is_zero_copy());
    }

    #[test]
    fn invalid_bool_bytes_are_corruption() {
        let dir = tempfile::tempdir().unwrap();
        let mut bytes = write_header(DType::Bool, &[2, 2]);
        bytes.extend_from_slice(&[0, 1, 2, 0]);
        let path = dir.path().join("b.npy");
        std::fs::write(&path, &bytes).unwrap();
        let file = CollectionFile::open(&path).unwrap();
        assert_eq!(file.read_slot(0, &[2], None).unwrap().to_bools().unwrap(), [false, true]);
        assert!(matches!(file.read_slot(1, &[2], None), Err(Error::Corrupted { .. })));
    }

    #[test]
    fn markers_gate_hangar_reads() {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("data/10");
        std::fs::create_dir_all(&data).unwrap();
        let (_, bytes) = collection(&data, "abcd1234.npy", DType::U8, &[2, 3]);
        let record = format!("10:abcd1234:{:016x}:1:2", xxh64(&bytes[3..5]));
        // No marker directories: a bare data directory is read as is.
        assert_eq!(read_hangar_record(dir.path(), &record, true).unwrap().bytes(), &bytes[3..5]);
        std::fs::create_dir_all(dir.path().join("store_data/10")).unwrap();
        let err = read_hangar_record(dir.path(), &record, true).unwrap_err();
        assert!(matches!(err, Error::NotFound { .. }), "{err}");
        std::fs::create_dir_all(dir.path().join("stage_data/10")).unwrap();
        std::fs::write(dir.path().join("stage_data/10/abcd1234.npy"), b"").unwrap();
        assert!(read_hangar_record(dir.path(), &record, true).is_ok());
        let missing = "10:zzzz9999:0000000000000000:0:1";
        std::fs::write(dir.path().join("store_data/10/zzzz9999.npy"), b"").unwrap();
        assert!(matches!(
            read_hangar_record(dir.path(), missing, true),
            Err(Error::NotFound { .. })
        ));
        assert!(matches!(
            read_hangar_record(dir.path(), "10:../../x:0000000000000000:0:1", true),
            Err(Error::InvalidArgument { .. })
        ));
    }
}
