//! One headerless `<field>.bin`: `rows` fixed-size C-order rows, memory-mapped read-only on first use.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use memmap2::MmapOptions;
use stowage_core::bytes::Bytes;
use stowage_core::cold_reads::PagePlan;
use stowage_core::{ByteOrder, Error, IoResultExt, Result, Tensor, dtype, shape};

use crate::layout::FieldLayout;

/// How a `.bin` file's size compares with the `rows * row_bytes` it must hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SizeCheck {
    /// Exactly the expected size.
    Exact,
    /// Longer than expected by this many bytes (ignored by the original tool; see
    /// [`crate::MemmapOptions::allow_trailing_bytes`]).
    Trailing(u64),
}

/// A memory-mapped, read-only field file.
///
/// Rows are handed out as tensors that share the map (zero-copy) unless the file is big-endian,
/// in which case each row is copied and converted to little-endian.
///
/// ```no_run
/// use stowage_memmap::test_support::{FieldFile, FieldLayout};
/// let field = FieldLayout::new("scaler", vec![32], "<f4")?;
/// let file = FieldFile::new("cache/scaler.bin", field, 6);
/// assert_eq!(file.read_row(5)?.shape(), &[32]);
/// # Ok::<(), stowage_core::Error>(())
/// ```
#[derive(Debug)]
pub struct FieldFile {
    path: PathBuf,
    field: FieldLayout,
    rows: usize,
    /// The first `rows * row_bytes` bytes of the file, mapped on the first read.
    map: OnceLock<Bytes>,
}

impl FieldFile {
    /// A field file at `path` holding `rows` rows of `field`. Nothing is opened yet.
    pub fn new(path: impl Into<PathBuf>, field: FieldLayout, rows: usize) -> FieldFile {
        FieldFile { path: path.into(), field, rows, map: OnceLock::new() }
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The field this file holds.
    pub fn field(&self) -> &FieldLayout {
        &self.field
    }

    /// Number of rows the reader serves.
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// `rows * row_bytes`; [`Error::Corrupted`] when that overflows.
    pub fn expected_len(&self) -> Result<u64> {
        (self.rows as u64).checked_mul(self.field.row_bytes as u64).ok_or_else(|| {
            Error::corrupted(
                &self.path,
                format!("{} rows of {} bytes overflow", self.rows, self.field.row_bytes),
            )
        })
    }

    /// Compares the file's size on disk with `rows * row_bytes` without mapping it.
    ///
    /// Errors: [`Error::Corrupted`] naming the file, the expected and the actual size when the file
    /// is missing or shorter; a longer file is [`SizeCheck::Trailing`], which the caller judges.
    pub fn check_size(&self) -> Result<SizeCheck> {
        let expected = self.expected_len()?;
        let actual = match std::fs::metadata(&self.path) {
            Ok(meta) => meta.len(),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(Error::corrupted(
                    &self.path,
                    format!(
                        "file is missing; field {:?} needs {expected} bytes ({} rows of {})",
                        self.field.name, self.rows, self.field.row_bytes
                    ),
                ));
            }
            Err(e) => return Err(Error::io(&self.path, e)),
        };
        self.judge_size(expected, actual)
    }

    fn judge_size(&self, expected: u64, actual: u64) -> Result<SizeCheck> {
        if actual < expected {
            return Err(Error::corrupted(
                &self.path,
                format!(
                    "file is {actual} bytes, expected {expected} ({} rows of {} bytes, field {:?} \
                     {} {})",
                    self.rows,
                    self.field.row_bytes,
                    self.field.name,
                    self.field.descr,
                    shape::display(&self.field.shape)
                ),
            ));
        }
        Ok(if actual == expected {
            SizeCheck::Exact
        } else {
            SizeCheck::Trailing(actual - expected)
        })
    }

    /// The mapped rows, mapping them on first use (shared by every thread afterwards).
    fn map(&self) -> Result<&Bytes> {
        if let Some(map) = self.map.get() {
            return Ok(map);
        }
        let expected = self.expected_len()?;
        let len = usize::try_from(expected)
            .map_err(|_| Error::corrupted(&self.path, format!("{expected} bytes do not fit")))?;
        let file = File::open(&self.path).at(&self.path)?;
        let actual = file.metadata().at(&self.path)?.len();
        // Re-checked here: the file may have changed since open.
        self.judge_size(expected, actual)?;
        let bytes = if len == 0 {
            Bytes::new()
        } else {
            // SAFETY: `map` is unsafe because another process could modify or truncate the file
            // while it is mapped, changing the bytes behind the slices we hand out (or raising
            // SIGBUS on truncation). We rely on the cache contract: rows below the committed count
            // are never rewritten (the writer only appends, and finalize does not touch `.bin`
            // files), and a finalized cache is immutable. The map is read-only (PROT_READ), covers
            // only the first `rows * row_bytes` bytes (checked just above to exist), and stowage
            // never writes through it. Callers are documented not to truncate a cache that is open.
            let map = unsafe { MmapOptions::new().len(len).map(&file) }.at(&self.path)?;
            Bytes::from_owner(map)
        };
        let _ = self.map.set(bytes);
        Ok(self.map.get().expect("set just now or by another thread"))
    }

    /// The stored bytes of row `index`, borrowed from the map (no tensor built, no byte-order
    /// conversion). Errors as [`FieldFile::read_row`].
    pub fn row_bytes(&self, index: usize) -> Result<&[u8]> {
        self.check_row(index)?;
        let start = index * self.field.row_bytes;
        Ok(&self.map()?[start..start + self.field.row_bytes])
    }

    /// Adds the bytes of row `index` to `plan` (nothing for a row out of range, an empty row, or a
    /// file that cannot be mapped: the read that follows reports those).
    pub fn plan_row<'a>(&'a self, index: usize, plan: &mut PagePlan<'a>) {
        if index >= self.rows || self.field.row_bytes == 0 {
            return;
        }
        if let Ok(map) = self.map() {
            let start = index * self.field.row_bytes;
            // In range of the map (`rows * row_bytes` bytes), so never refused.
            let _ = plan.add(map, start..start + self.field.row_bytes);
        }
    }

    /// Asks the CPU to start loading the first lines of row `index`, when the file is already
    /// mapped and the row is in range (a hint: otherwise nothing happens). A reader calls it as soon
    /// as it knows the row, so the load overlaps with the rest of the lookup.
    pub fn prefetch_row(&self, index: usize) {
        if let Some(map) = self.map.get().filter(|_| index < self.rows) {
            let start = index * self.field.row_bytes;
            let len = self.field.row_bytes.min(stowage_core::prefetch::PREFETCH_BLOCK);
            stowage_core::prefetch::prefetch(&map[start..start + len]);
        }
    }

    fn check_row(&self, index: usize) -> Result<()> {
        if index >= self.rows {
            return Err(Error::invalid(format!(
                "row {index} out of range for {} rows in {}",
                self.rows,
                self.path.display()
            )));
        }
        Ok(())
    }

    /// Row `index` as a tensor of the field's dtype and shape.
    ///
    /// Little-endian rows share the map (zero-copy, [`Tensor::is_zero_copy`]); big-endian rows are
    /// copied and converted. Errors: [`Error::InvalidArgument`] naming `index` and the row count when
    /// out of range; [`Error::Corrupted`] naming the file when it is shorter than its rows, or a
    /// bool byte is not 0 or 1.
    pub fn read_row(&self, index: usize) -> Result<Tensor> {
        self.check_row(index)?;
        let map = self.map()?;
        let start = index * self.field.row_bytes;
        let bytes = map.slice(start..start + self.field.row_bytes);
        let shape = self.field.shape.clone();
        let tensor = match self.field.byte_order {
            ByteOrder::Little => Tensor::shared(self.field.dtype, shape, bytes),
            ByteOrder::Big => {
                let mut owned = bytes.to_vec();
                dtype::swap_to_little_endian(&mut owned, self.field.dtype)?;
                Tensor::new(self.field.dtype, shape, owned)
            }
        };
        tensor.map_err(|e| {
            Error::corrupted(&self.path, format!("row {index} of field {:?}: {e}", self.field.name))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use stowage_core::DType;

    fn write(dir: &Path, name: &str, bytes: &[u8]) -> PathBuf {
        let path = dir.join(name);
        std::fs::write(&path, bytes).unwrap();
        path
    }

    #[test]
    fn rows_are_zero_copy_slices() {
        let dir = tempfile::tempdir().unwrap();
        let values: Vec<i16> = (0..12).collect();
        let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        let path = write(dir.path(), "data.bin", &bytes);
        let file = FieldFile::new(path, FieldLayout::new("data", vec![2, 3], "<i2").unwrap(), 2);
        assert_eq!(file.check_size().unwrap(), SizeCheck::Exact);
        let row = file.read_row(1).unwrap();
        assert!(row.is_zero_copy());
        assert_eq!(row.dtype(), DType::I16);
        assert_eq!(row.to_vec::<i16>().unwrap(), [6, 7, 8, 9, 10, 11]);
        let err = file.read_row(2).unwrap_err().to_string();
        assert!(err.contains("row 2") && err.contains("2 rows"), "{err}");
    }

    #[test]
    fn big_endian_rows_are_converted() {
        let dir = tempfile::tempdir().unwrap();
        let bytes: Vec<u8> = [1i32, -2].iter().flat_map(|v| v.to_be_bytes()).collect();
        let path = write(dir.path(), "x.bin", &bytes);
        let file = FieldFile::new(path, FieldLayout::new("x", vec![2], ">i4").unwrap(), 1);
        let row = file.read_row(0).unwrap();
        assert!(!row.is_zero_copy());
        assert_eq!(row.to_vec::<i32>().unwrap(), [1, -2]);
    }

    #[test]
    fn short_missing_and_long_files_are_reported() {
        let dir = tempfile::tempdir().unwrap();
        let field = FieldLayout::new("x", vec![4], "|u1").unwrap();
        let short = FieldFile::new(write(dir.path(), "s.bin", &[0; 7]), field.clone(), 2);
        let err = short.check_size().unwrap_err().to_string();
        assert!(err.contains("s.bin") && err.contains("7 bytes, expected 8"), "{err}");
        assert!(short.read_row(0).unwrap_err().to_string().contains("expected 8"));
        let long = FieldFile::new(write(dir.path(), "l.bin", &[0; 9]), field.clone(), 2);
        assert_eq!(long.check_size().unwrap(), SizeCheck::Trailing(1));
        assert_eq!(long.read_row(1).unwrap().bytes(), &[0; 4]);
        let missing = FieldFile::new(dir.path().join("m.bin"), field, 2);
        assert!(missing.check_size().unwrap_err().to_string().contains("missing"));
    }

    #[test]
    fn bad_bool_bytes_are_corruption() {
        let dir = tempfile::tempdir().unwrap();
        let path = write(dir.path(), "b.bin", &[1, 0, 7, 1]);
        let file = FieldFile::new(path, FieldLayout::new("b", vec![2], "|b1").unwrap(), 2);
        assert_eq!(file.read_row(0).unwrap().to_bools().unwrap(), [true, false]);
        assert!(matches!(file.read_row(1).unwrap_err(), Error::Corrupted { .. }));
    }

    #[test]
    fn zero_byte_rows_need_no_map() {
        let dir = tempfile::tempdir().unwrap();
        let path = write(dir.path(), "z.bin", &[]);
        let file = FieldFile::new(path, FieldLayout::new("z", vec![0, 3], "<f4").unwrap(), 3);
        assert_eq!(file.read_row(2).unwrap().shape(), &[0, 3]);
    }
}
