//! One segment of a generic cache: an HDF5 file in the `/torch_cache` container style holding any
//! stowage schema as one section.
//!
//! ```text
//! /torch_cache                 attrs: cache_format "stowage.hdf5.samples.v1", schema_json
//! /torch_cache/samples/index   compound {cache_row i64, checksum u64}, one row per sample
//! /torch_cache/samples/keys    VLEN<u8>: the key's UTF-8 bytes
//! /torch_cache/samples/shapes  VLEN<i64>: per field, -1 for null, else the rank then the dims
//! /torch_cache/samples/fields/<i>  VLEN<element>: field i's C-order values (bytes and JSON as u8)
//! ```
//!
//! Every dataset is chunked and extendible with shuffle + deflate 5 + Fletcher32, so damage to a
//! chunk is an error when it is read. Variable-length values live in HDF5's global heap, which has
//! no checksum: `checksum` (xxh3-64 over the key, the shape row and every field's bytes, in the
//! Fletcher32-protected index) covers them, so damaged bytes are never returned as data.

use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use hdf5::{Group, H5Type};
use stowage_core::bytes::Bytes;
use stowage_core::cold_reads::{ColdReadAdvisor, PagePlan};
use stowage_core::{DType, Error, FieldKind, IoResultExt, Result, Sample, Schema, Tensor, Value};
use xxhash_rust::xxh3::Xxh3;

use crate::columns::{ColumnReader, ColumnWriter, i64s, le_bytes_i64};
use crate::commit_log::{MetaRegions, SegmentEntry};
use crate::direct::{HeapFile, MappedFile};
use crate::error::{read_error, write_error};
use crate::ffi::{self, Element};
use crate::index_tables::{read_index, write_index};
use crate::layout::{INDEX_CHUNK_ROWS, TORCH_CACHE, VLEN_CHUNK_ROWS};
use crate::open_file::{open_hdf5, open_std};

/// `cache_format` of a generic segment.
pub const SAMPLES_FORMAT: &str = "stowage.hdf5.samples.v1";
/// The section's group inside `/torch_cache`.
pub const SAMPLES: &str = "samples";

/// One row of `samples/index`.
#[derive(H5Type, Debug, Clone, Copy, PartialEq, Eq)]
#[repr(C, packed)]
pub(crate) struct SampleIndexRow {
    pub cache_row: i64,
    pub checksum: u64,
}

/// How field values are stored: the element type of their variable-length dataset.
fn element(kind: &FieldKind) -> Element {
    match kind {
        FieldKind::Tensor { dtype, .. } => match dtype {
            DType::Bool | DType::U8 => Element::U8,
            DType::U16 | DType::F16 | DType::BF16 => Element::U16,
            DType::U32 => Element::U32,
            DType::U64 => Element::U64,
            DType::I8 => Element::I8,
            DType::I16 => Element::I16,
            DType::I32 => Element::I32,
            DType::I64 => Element::I64,
            DType::F32 => Element::F32,
            DType::F64 => Element::F64,
        },
        FieldKind::Bytes | FieldKind::Json { .. } => Element::U8,
    }
}

/// The shape row and the field bytes of one sample, and their checksum.
fn encode(schema: &Schema, key: &str, sample: &Sample) -> (Vec<i64>, Vec<Vec<u8>>, u64) {
    let mut shapes = Vec::new();
    let mut fields = Vec::with_capacity(schema.fields.len());
    for spec in &schema.fields {
        let bytes: Vec<u8> = match sample.get(&spec.name) {
            None | Some(Value::Null) => {
                shapes.push(-1);
                Vec::new()
            }
            Some(Value::Tensor(t)) => {
                shapes.push(t.shape().len() as i64);
                shapes.extend(t.shape().iter().map(|&d| d as i64));
                t.bytes().to_vec()
            }
            Some(Value::Bytes(b)) => {
                shapes.extend([1, b.len() as i64]);
                b.to_vec()
            }
            Some(Value::Json(text)) => {
                shapes.extend([1, text.len() as i64]);
                text.as_bytes().to_vec()
            }
        };
        fields.push(bytes);
    }
    let checksum = checksum(key.as_bytes(), &le_bytes_i64(&shapes), &fields);
    (shapes, fields, checksum)
}

/// xxh3-64 over the key, the shape row and each field's bytes, each length-prefixed.
fn checksum(key: &[u8], shapes: &[u8], fields: &[Vec<u8>]) -> u64 {
    let mut hasher = Xxh3::new();
    for part in
        std::iter::once(key).chain(std::iter::once(shapes)).chain(fields.iter().map(Vec::as_slice))
    {
        hasher.update(&(part.len() as u64).to_le_bytes());
        hasher.update(part);
    }
    hasher.digest()
}

/// Writes `rows` (already validated against `schema`) as a segment file at `path` (built by the
/// caller under a temporary name).
pub(crate) fn write(path: &Path, schema: &Schema, rows: &[(&str, &Sample)]) -> Result<()> {
    let failed = |what: &str| {
        let what = what.to_owned();
        move |e| write_error(path, &what, e)
    };
    let file = hdf5::File::with_options()
        // No libhdf5 file lock on a file nobody else can see yet: a child process forked
        // meanwhile would inherit the descriptor (libhdf5 does not set close-on-exec) and keep
        // the exclusive lock, refusing readers of the published segment until it exits.
        .with_fapl(|fapl| fapl.libver_v110().file_locking(false))
        .create(path)
        .map_err(failed("creating"))?;
    let root = file.create_group(TORCH_CACHE).map_err(failed("creating /torch_cache"))?;
    let schema_json = serde_json::to_string(schema).expect("schemas serialize");
    ffi::write_utf8_attribute(root.id(), "cache_format", SAMPLES_FORMAT)
        .and_then(|()| ffi::write_utf8_attribute(root.id(), "schema_json", &schema_json))
        .map_err(|e| write_error(path, "/torch_cache attributes", e))?;
    let section = root.create_group(SAMPLES).map_err(failed("creating the section"))?;
    let fields = section.create_group("fields").map_err(failed("creating fields"))?;
    let heap = HeapFile::open(path, &file)?;
    // A segment's rows are all known now: chunks no larger than the segment (here and for the
    // index table). A chunk is stored whole (padded), and PyTables' 8192 rows would make a flush
    // of a few rows shuffle, deflate and write 128 KiB per dataset, and every open of the
    // segment inflate (and Fletcher32-check) a 43 KiB index chunk.
    let chunk_rows = rows.len().clamp(1, VLEN_CHUNK_ROWS);
    let create = |group: &Group, name: &str, element: Element| {
        ColumnWriter::create_chunked(path, group, name, element, heap.as_ref(), chunk_rows)
    };
    let mut keys = create(&section, "keys", Element::U8)?;
    let mut shapes = create(&section, "shapes", Element::I64)?;
    let mut columns = schema
        .fields
        .iter()
        .enumerate()
        .map(|(i, spec)| create(&fields, &i.to_string(), element(&spec.kind)))
        .collect::<Result<Vec<_>>>()?;
    let mut index = Vec::with_capacity(rows.len());
    for (row, (key, sample)) in rows.iter().enumerate() {
        let (shape_row, field_rows, checksum) = encode(schema, key, sample);
        keys.push(key.as_bytes().to_vec())?;
        shapes.push(le_bytes_i64(&shape_row))?;
        for (column, bytes) in columns.iter_mut().zip(field_rows) {
            column.push(bytes)?;
        }
        index.push(SampleIndexRow { cache_row: row as i64, checksum });
    }
    for column in columns.iter_mut().chain([&mut keys, &mut shapes]) {
        column.finish()?;
    }
    let index_chunk_rows = rows.len().clamp(1, INDEX_CHUNK_ROWS);
    let index_table = write_index(path, &section, &index, true, index_chunk_rows)?;
    // Everything is flushed while it is still open: a dataset closed by its drop writes what it
    // caches, and a failed write there would be lost (a drop cannot fail), leaving a flush that
    // reports success over a write that failed.
    file.flush().map_err(failed("flushing"))?;
    drop((index_table, keys, shapes, columns, fields, section, root));
    file.close().map_err(failed("closing"))
}

/// What identifies the bytes of a segment file as those once hashed: device, inode, size, and
/// modification and status-change times (nanoseconds). A file rewritten in place changes its
/// mtime and ctime; one replaced changes its inode. Not detected: a rewrite of the same size
/// within one tick of the file system's clock after the stamp was taken, or damage below the
/// file system (bit rot changes no time); `validate` hashes every segment again, whatever its
/// stamp. Stowage never rewrites a segment: a segment is written under another name and renamed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct FileStamp {
    dev: u64,
    ino: u64,
    size: u64,
    mtime: (i64, i64),
    ctime: (i64, i64),
}

impl FileStamp {
    fn of(metadata: &std::fs::Metadata) -> FileStamp {
        use std::os::unix::fs::MetadataExt;
        FileStamp {
            dev: metadata.dev(),
            ino: metadata.ino(),
            size: metadata.len(),
            mtime: (metadata.mtime(), metadata.mtime_nsec()),
            ctime: (metadata.ctime(), metadata.ctime_nsec()),
        }
    }
}

/// What a handle checked of a segment file, and the stamp it holds for: its whole-file xxh3
/// (`whole`), or only its [`MetaRegions`] (its rows are then checked as they are read).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Verified {
    pub stamp: FileStamp,
    pub whole: bool,
}

/// The commit log entry of segment `id` of `rows` rows just published at `path` (by this
/// process): its size and whole-file xxh3, and its [`MetaRegions`] when every column is read by
/// stowage (the file is opened to find its chunks and collections). Also what was checked.
pub(crate) fn commit_entry(
    path: &Path,
    schema: &Schema,
    id: u64,
    rows: u64,
) -> Result<(SegmentEntry, Verified)> {
    let (bytes, xxh3, stamp) = file_checksum(path)?;
    let mut entry = SegmentEntry { id, rows, bytes, xxh3, meta: None };
    let verified = Verified { stamp, whole: true };
    let (segment, _) = Segment::open(path, schema, &entry, Some(verified), false, None)?;
    if let Some(data) = segment.data_ranges()? {
        let ranges = complement(data, bytes);
        let mut file = open_std(path)?;
        let xxh3 = hash_ranges(&mut file, path, &ranges)?;
        entry.meta = Some(MetaRegions { ranges, xxh3 });
    }
    Ok((entry, verified))
}

/// The ranges of `0..len` that none of `data` covers, sorted.
fn complement(mut data: Vec<std::ops::Range<u64>>, len: u64) -> Vec<[u64; 2]> {
    data.sort_unstable_by_key(|range| range.start);
    let mut ranges = Vec::new();
    let mut at = 0;
    for range in data {
        if range.start > at {
            ranges.push([at, range.start.min(len)]);
        }
        at = at.max(range.end);
    }
    if at < len {
        ranges.push([at, len]);
    }
    ranges.retain(|[start, end]| start < end);
    ranges
}

/// xxh3-64 of the bytes of `ranges` (sorted, within the file) of `file`, concatenated in order.
/// The kernel is asked for every range first (`POSIX_FADV_WILLNEED`), so that the few small
/// ranges of a cold segment are read together, not one after another.
fn hash_ranges(file: &mut std::fs::File, path: &Path, ranges: &[[u64; 2]]) -> Result<u64> {
    use std::os::unix::fs::FileExt;
    use std::os::unix::io::AsRawFd;
    for &[start, end] in ranges {
        let len = end.saturating_sub(start);
        // SAFETY: a hint on a descriptor this function borrows; no memory is passed.
        unsafe {
            libc::posix_fadvise(
                file.as_raw_fd(),
                start as libc::off_t,
                len as libc::off_t,
                libc::POSIX_FADV_WILLNEED,
            );
        }
    }
    let mut hasher = Xxh3::new();
    let mut buffer = Vec::new();
    for &[start, end] in ranges {
        let len = usize::try_from(end.saturating_sub(start))
            .map_err(|_| Error::corrupted(path, format!("range {start}..{end} is too large")))?;
        buffer.resize(len, 0);
        file.read_exact_at(&mut buffer, start).map_err(|e| {
            if e.kind() == std::io::ErrorKind::UnexpectedEof {
                Error::corrupted(path, format!("bytes {start}..{end} lie past the file's end"))
            } else {
                Error::io(path, e)
            }
        })?;
        hasher.update(&buffer);
    }
    Ok(hasher.digest())
}

/// The size and xxh3-64 of the file at `path`, streamed, and its stamp (taken before the bytes
/// are read, so a change while they are read shows as a changed stamp later).
pub(crate) fn file_checksum(path: &Path) -> Result<(u64, u64, FileStamp)> {
    let mut file = open_std(path)?;
    let stamp = FileStamp::of(&file.metadata().at(path)?);
    let (bytes, xxh3) = hash(&mut file, path)?;
    Ok((bytes, xxh3, stamp))
}

/// Checks that `file` (named `path`, read from its current offset) holds `entry.bytes` bytes
/// with xxh3 `entry.xxh3`.
fn check_whole(file: &mut std::fs::File, path: &Path, entry: &SegmentEntry) -> Result<()> {
    let (bytes, xxh3) = hash(file, path)?;
    if (bytes, xxh3) != (entry.bytes, entry.xxh3) {
        return Err(Error::corrupted(
            path,
            format!(
                "segment of {bytes} bytes with xxh3 {xxh3:016x}, the commit log records {} bytes \
                 with xxh3 {:016x}",
                entry.bytes, entry.xxh3
            ),
        ));
    }
    Ok(())
}

/// The size and xxh3-64 of the bytes of `file` (named `path`), from its current offset.
fn hash(file: &mut std::fs::File, path: &Path) -> Result<(u64, u64)> {
    use std::io::Read;
    let mut hasher = Xxh3::new();
    let mut buffer = vec![0u8; 1 << 20];
    let mut total = 0u64;
    loop {
        let n = file.read(&mut buffer).at(path)?;
        if n == 0 {
            return Ok((total, hasher.digest()));
        }
        hasher.update(&buffer[..n]);
        total += n as u64;
    }
}

/// An open segment: its index table's checksums in memory, every dataset open, keys, shape rows
/// and field values read when asked. Holds one map, and one libhdf5 file (a descriptor) unless
/// every column is read without libhdf5 (it is then [detached](Segment::is_detached)): the
/// backend keeps a bounded set of each.
pub(crate) struct Segment {
    path: PathBuf,
    /// The file's stamp when it was opened, and the size and whole-file xxh3 the commit log
    /// records: a read of every key checks the whole file first unless `whole` says it was.
    stamp: FileStamp,
    recorded: (u64, u64),
    /// Set once the whole file's xxh3 matched (at open, or before every key was read).
    whole: OnceLock<()>,
    /// Set when the segment is read a row at a time (see [`Segment::open`]'s `random`): the
    /// handle's advisor, which says when a row's pages are advised before it is read.
    advisor: Option<Arc<ColdReadAdvisor>>,
    /// The map the direct readers share, for advice; `None` when libhdf5 reads the rows.
    mapped: Option<Arc<MappedFile>>,
    checksums: Vec<u64>,
    keys: ColumnReader,
    shapes: ColumnReader,
    /// Each field's column and the element type its values are read as.
    columns: Vec<(ColumnReader, Element)>,
    /// `None` once every column reads from the map alone: libhdf5 closed the file.
    _file: Option<hdf5::File>,
}

impl Segment {
    /// Opens the segment at `path` committed as `entry`. Its size, and (unless the file still
    /// has the stamp of `verified`, the last check that passed) what the commit log records of
    /// its bytes, are checked before libhdf5 parses it: the xxh3 of its [`MetaRegions`] when
    /// the entry has them and `whole` is false (its rows are then checked as they are read, and
    /// every key before [`Segment::keys`] reads them all), else the whole file's xxh3. Then that
    /// it holds `entry.rows` samples of `schema`. Returns the segment and what its check now
    /// holds for.
    ///
    /// With `random` (a reader of a cache too large to be read whole soon: the handle's advisor,
    /// shared by its segments), a detached segment is read a row at a time: its map advised `MADV_RANDOM`, its rows found one at a time
    /// ([`ColumnReader::resolve_on_read`]), its descriptor chunks advised now and each row's
    /// pages before the row is read. Without it the first fault's read-around brings the whole
    /// file in, and a chunk's rows are all resolved at its first read (faster warm reads).
    ///
    /// Errors: `Error::Corrupted` for damage; `Error::Io` when the operating system refuses the
    /// file (missing, no permission, no descriptor left, libhdf5's lock held elsewhere).
    pub fn open(
        path: &Path,
        schema: &Schema,
        entry: &SegmentEntry,
        verified: Option<Verified>,
        whole: bool,
        random: Option<&Arc<ColdReadAdvisor>>,
    ) -> Result<(Segment, Verified)> {
        let mut opened = open_std(path)?;
        let stamp = FileStamp::of(&opened.metadata().at(path)?);
        if stamp.size != entry.bytes {
            return Err(Error::corrupted(
                path,
                format!("segment holds {} bytes, the commit log says {}", stamp.size, entry.bytes),
            ));
        }
        let verified = match verified.filter(|v| v.stamp == stamp && (v.whole || !whole)) {
            Some(verified) => verified,
            None => match entry.meta.as_ref().filter(|_| !whole) {
                Some(meta) => {
                    let xxh3 = hash_ranges(&mut opened, path, &meta.ranges)?;
                    if xxh3 != meta.xxh3 {
                        let bytes: u64 = meta.ranges.iter().map(|[s, e]| e - s).sum();
                        return Err(Error::corrupted(
                            path,
                            format!(
                                "the segment's metadata ({bytes} bytes in {} ranges) has xxh3 \
                                 {xxh3:016x}, the commit log records {:016x}",
                                meta.ranges.len(),
                                meta.xxh3
                            ),
                        ));
                    }
                    Verified { stamp, whole: false }
                }
                None => {
                    check_whole(&mut opened, path, entry)?;
                    Verified { stamp, whole: true }
                }
            },
        };
        // Closed before libhdf5 opens the file: one descriptor per open segment, not two.
        drop(opened);
        let file = open_hdf5(path, "the segment")?;
        // The file libhdf5 opened must be the one checked (the path could name another by now).
        match ffi::storage::file_storage(file.id()) {
            Ok(Some(storage)) if storage.identity != (stamp.dev, stamp.ino) => {
                return Err(Error::corrupted(
                    path,
                    format!(
                        "the segment was replaced while it was opened: inode {} was checked, \
                         libhdf5 opened inode {}",
                        stamp.ino, storage.identity.1
                    ),
                ));
            }
            Ok(_) => {}
            Err(e) => return Err(read_error(path, "the segment's storage", e)),
        }
        let rows = entry.rows;
        let section: Group = file
            .group(&format!("{TORCH_CACHE}/{SAMPLES}"))
            .map_err(|e| read_error(path, "opening the samples section", e))?;
        let fields = section.group("fields").map_err(|e| read_error(path, "fields", e))?;
        let mapped = MappedFile::open(path, &file)?;
        let index = read_index::<SampleIndexRow>(path, &section)?;
        let open =
            |group: &Group, name: &str| ColumnReader::open(path, group, name, mapped.as_ref());
        let keys = open(&section, "keys")?;
        let shapes = open(&section, "shapes")?;
        let columns = schema
            .fields
            .iter()
            .enumerate()
            .map(|(i, spec)| Ok((open(&fields, &i.to_string())?, element(&spec.kind))))
            .collect::<Result<Vec<_>>>()?;
        let counts = [index.len() as u64, keys.rows(), shapes.rows()];
        let short = columns.iter().map(|(c, _)| c.rows()).chain(counts).find(|&n| n != rows);
        if let Some(found) = short {
            return Err(Error::corrupted(
                path,
                format!("a dataset of the segment holds {found} rows, the commit log says {rows}"),
            ));
        }
        // Every group closed: once the columns detach, nothing of the file is open in libhdf5.
        drop((fields, section));
        let whole_checked = OnceLock::new();
        if verified.whole {
            let _ = whole_checked.set(());
        }
        let mut segment = Segment {
            path: path.to_path_buf(),
            stamp,
            recorded: (entry.bytes, entry.xxh3),
            whole: whole_checked,
            advisor: random.cloned(),
            mapped,
            checksums: index.iter().map(|r| r.checksum).collect(),
            keys,
            shapes,
            columns,
            _file: Some(file),
        };
        segment.detach()?;
        if !segment.is_detached() {
            segment.advisor = None;
        }
        if segment.advisor.is_some() {
            // Rows are found one at a time, each checked by its checksum: a get reads its
            // row's pages, not the segment (see `MetaRegions`).
            for column in segment.all_columns_mut() {
                column.resolve_on_read();
            }
            if let Some(mapped) = &segment.mapped {
                mapped.advise_random();
            }
            // The descriptor chunks a get reads next, read now together (a few KiB each,
            // beside the metadata just read).
            segment.shapes.will_need_chunks();
            segment.columns.iter().for_each(|(column, _)| column.will_need_chunks());
        }
        Ok((segment, verified))
    }

    /// Every column: keys, shapes, fields.
    fn all_columns_mut(&mut self) -> impl Iterator<Item = &mut ColumnReader> {
        [&mut self.keys, &mut self.shapes]
            .into_iter()
            .chain(self.columns.iter_mut().map(|(column, _)| column))
    }

    /// The file byte ranges stowage's own readers parse (every chunk and collection of every
    /// column), `None` when a column is read through libhdf5. For a file this process wrote.
    fn data_ranges(&self) -> Result<Option<Vec<std::ops::Range<u64>>>> {
        let mut ranges = Vec::new();
        let columns = [(&self.keys, Element::U8), (&self.shapes, Element::I64)]
            .into_iter()
            .chain(self.columns.iter().map(|(column, element)| (column, *element)));
        for (column, element) in columns {
            match column.data_ranges(element)? {
                Some(found) => ranges.extend(found),
                None => return Ok(None),
            }
        }
        Ok(Some(ranges))
    }

    /// Checks the whole file's xxh3 against the commit log, unless done already (at open, or
    /// before): what a read of every key needs, as its keys are not read with their rows.
    fn check_whole(&self) -> Result<()> {
        if self.whole.get().is_some() {
            return Ok(());
        }
        let mut file = open_std(&self.path)?;
        let stamp = FileStamp::of(&file.metadata().at(&self.path)?);
        if stamp != self.stamp {
            return Err(Error::corrupted(
                &self.path,
                "the segment file changed since it was opened (its size, times or inode)",
            ));
        }
        let (bytes, xxh3) = self.recorded;
        let entry = SegmentEntry { id: 0, rows: 0, bytes, xxh3, meta: None };
        check_whole(&mut file, &self.path, &entry)?;
        let _ = self.whole.set(());
        Ok(())
    }

    /// Closes the libhdf5 file when every column reads from the map alone (stowage's own
    /// layout does), each column's chunks located first: the segment then holds no descriptor,
    /// so far more segments than descriptors can stay open.
    fn detach(&mut self) -> Result<()> {
        let mut detached = self.keys.detach(Element::U8)? & self.shapes.detach(Element::I64)?;
        for (column, element) in &mut self.columns {
            detached &= column.detach(*element)?;
        }
        if detached {
            self._file = None;
        }
        Ok(())
    }

    /// Whether the segment holds no libhdf5 file (and so no descriptor): every read is from
    /// its map.
    pub fn is_detached(&self) -> bool {
        self._file.is_none()
    }

    /// The keys, by row, read from the segment, once the whole file's xxh3 matched the commit
    /// log (keys read alone are covered by no other check). The file is then in the page cache
    /// (its map is advised to be read whole: it was advised `MADV_RANDOM`).
    pub fn keys(&self) -> Result<Vec<String>> {
        self.check_whole()?;
        if let Some(mapped) = &self.mapped {
            mapped.will_need(0..mapped.len());
        }
        let path = &self.path;
        self.keys
            .read_all(Element::U8)?
            .into_iter()
            .enumerate()
            .map(|(row, bytes)| {
                String::from_utf8(bytes)
                    .map_err(|_| Error::corrupted(path, format!("key of row {row} is not UTF-8")))
            })
            .collect()
    }

    /// The key of row `row`, read from the segment: checked against the row's checksum (with
    /// the row's shape row and values) unless the whole file was checked.
    ///
    /// Errors: `Error::Corrupted` naming the segment when the row is missing or damaged or the
    /// key is not UTF-8.
    pub fn key(&self, row: usize) -> Result<String> {
        let bytes = self.keys.read(row as u64, Element::U8, "key row")?;
        if self.whole.get().is_none() {
            let (shape_bytes, fields) = self.row_bytes(row, None)?;
            let stored = *self.checksums.get(row).ok_or_else(|| {
                Error::corrupted(&self.path, format!("row {row} is past the index table"))
            })?;
            let computed = checksum(&bytes, &shape_bytes, &fields);
            if computed != stored {
                return Err(Error::corrupted(
                    &self.path,
                    format!(
                        "row {row}: checksum {computed:016x} of the stored key and values != \
                         recorded {stored:016x}"
                    ),
                ));
            }
        }
        String::from_utf8(bytes)
            .map_err(|_| Error::corrupted(&self.path, format!("key of row {row} is not UTF-8")))
    }

    /// Adds to `plan` the pages a read of row `row` starts with (each column's collection
    /// page; the columns' chunks are decoded now, read from the map): a batch advises every
    /// row's together before reading them.
    pub fn plan_row<'a>(&'a self, row: usize, plan: &mut PagePlan<'a>) {
        let Some(mapped) = &self.mapped else { return };
        let columns = std::iter::once(&self.shapes).chain(self.columns.iter().map(|(c, _)| c));
        for column in columns {
            if let Some(range) = column.row_page(row as u64) {
                let _ = plan.add(mapped.whole(), range);
            }
        }
    }

    /// Row `row`'s shape row and field bytes as stored (unchecked), its pages advised together
    /// first when they may be cold ([`ColdReadAdvisor`]: each column's collection page).
    fn row_bytes(&self, row: usize, schema: Option<&Schema>) -> Result<(Vec<u8>, Vec<Vec<u8>>)> {
        if let Some(advisor) = self.advisor.as_ref().filter(|a| a.get_wants_probe()) {
            let mut plan = PagePlan::with_capacity(1 + self.columns.len());
            self.plan_row(row, &mut plan);
            advisor.before_get(&mut plan);
        }
        let fields: Vec<Vec<u8>> = self
            .columns
            .iter()
            .enumerate()
            .map(|(i, (column, element))| {
                let what = match schema.and_then(|schema| schema.fields.get(i)) {
                    Some(spec) => format!("field {:?}", spec.name),
                    None => format!("field {i}"),
                };
                column.read(row as u64, *element, &what)
            })
            .collect::<Result<_>>()?;
        let shape_bytes = self.shapes.read(row as u64, Element::I64, "shape row")?;
        Ok((shape_bytes, fields))
    }

    /// The sample of row `row`, whose key is `key` (as [`Segment::keys`] read it), checked
    /// against its checksum, which covers the key. Damage is `Error::Corrupted` naming the
    /// segment file and the key.
    pub fn read(&self, schema: &Schema, row: usize, key: &str) -> Result<Sample> {
        self.read_row(schema, row, key).map_err(|e| e.for_key(key))
    }

    /// The sample of row `row` if that row holds `key`, `Ok(None)` if it holds another key: the
    /// row is read and checked against its checksum computed with `key` (the checksum covers
    /// the key), and only when they differ is the stored key read, to tell another key's row
    /// (`None`) from damage to this key's row (the error). A lookup confirms a key index
    /// candidate this way without reading its key first.
    ///
    /// Errors: as [`Segment::read`], when the row's key is `key`; the key's own read error.
    pub fn read_if_key(&self, schema: &Schema, row: usize, key: &str) -> Result<Option<Sample>> {
        match self.read_row(schema, row, key) {
            Ok(sample) => Ok(Some(sample)),
            Err(e) if self.key(row)? == key => Err(e.for_key(key)),
            Err(_) => Ok(None),
        }
    }

    /// [`Segment::read`], its errors not yet naming the key.
    fn read_row(&self, schema: &Schema, row: usize, key: &str) -> Result<Sample> {
        let corrupted = |detail: String| Error::corrupted(&self.path, detail);
        let (shape_bytes, fields) = self.row_bytes(row, Some(schema))?;
        let stored = self.checksums[row];
        let computed = checksum(key.as_bytes(), &shape_bytes, &fields);
        if computed != stored {
            return Err(corrupted(format!(
                "checksum {computed:016x} of the stored bytes != recorded {stored:016x}"
            )));
        }
        let shapes = i64s(&shape_bytes);
        let mut dims = shapes.iter().copied();
        let mut sample = Sample::new();
        for (spec, bytes) in schema.fields.iter().zip(fields) {
            let rank = dims.next().ok_or_else(|| corrupted("shape row too short".into()))?;
            if rank < 0 {
                sample.insert(spec.name.as_str(), Value::Null);
                continue;
            }
            let shape = (0..rank)
                .map(|_| dims.next().and_then(|d| usize::try_from(d).ok()))
                .collect::<Option<Vec<usize>>>()
                .ok_or_else(|| corrupted(format!("field {:?}: bad shape row", spec.name)))?;
            let value = match &spec.kind {
                FieldKind::Tensor { dtype, .. } => Value::Tensor(
                    Tensor::new(*dtype, shape, bytes)
                        .map_err(|e| corrupted(format!("field {:?}: {e}", spec.name)))?,
                ),
                FieldKind::Bytes => Value::Bytes(Bytes::from(bytes)),
                FieldKind::Json { .. } => {
                    Value::Json(String::from_utf8(bytes).map_err(|_| {
                        corrupted(format!("field {:?}: JSON is not UTF-8", spec.name))
                    })?)
                }
            };
            sample.insert(spec.name.as_str(), value);
        }
        Ok(sample)
    }
}

#[cfg(test)]
mod tests {
    use stowage_core::{DType, ShapeRule, Tensor};

    use super::*;

    fn sample(value: u32) -> Sample {
        Sample::new().with("x", Tensor::from_slice(&[1], &[value]).unwrap())
    }

    fn advisor() -> Arc<ColdReadAdvisor> {
        Arc::new(ColdReadAdvisor::new(stowage_core::cold_reads::ColdReadAdvice::Adaptive))
    }

    /// A segment of 3 rows of `x: u32[1]` whose values are `0xA5A5_0000 + row`, written and
    /// committed as the writer does; its path, schema and entry.
    fn committed(dir: &Path) -> (PathBuf, Schema, SegmentEntry) {
        let path = dir.join("segment_000000.h5");
        let schema = Schema::new().tensor("x", DType::U32, ShapeRule::Fixed(vec![1]));
        let samples: Vec<Sample> = (0..3).map(|row| sample(0xA5A5_0000 + row)).collect();
        let rows: Vec<(String, &Sample)> =
            samples.iter().enumerate().map(|(row, s)| (format!("key{row}"), s)).collect();
        let rows: Vec<(&str, &Sample)> = rows.iter().map(|(k, s)| (k.as_str(), *s)).collect();
        write(&path, &schema, &rows).unwrap();
        let (entry, verified) = commit_entry(&path, &schema, 0, 3).unwrap();
        assert!(verified.whole, "the writer hashed the whole file");
        (path, schema, entry)
    }

    /// Flips one bit of byte `at` of the file at `path` (a rewrite in place: a new stamp).
    fn flip(path: &Path, at: usize) {
        let mut bytes = std::fs::read(path).unwrap();
        bytes[at] ^= 0x10;
        std::fs::write(path, bytes).unwrap();
    }

    /// Where row `row`'s value (`0xA5A5_0000 + row`, little-endian) lies in the file.
    fn value_at(path: &Path, row: u32) -> usize {
        let bytes = std::fs::read(path).unwrap();
        let value = (0xA5A5_0000u32 + row).to_le_bytes();
        let found: Vec<usize> =
            bytes.windows(4).enumerate().filter(|(_, w)| *w == value).map(|(i, _)| i).collect();
        assert_eq!(found.len(), 1, "row {row}'s value is stored once");
        found[0]
    }

    fn corrupted_naming(result: Result<impl std::fmt::Debug>, path: &Path, what: &str) {
        match result {
            Err(Error::Corrupted { path: named, detail, .. }) => {
                assert_eq!(named, path, "{detail}");
                assert!(detail.contains(what), "{detail}");
            }
            other => panic!("expected Error::Corrupted naming {}, got {other:?}", path.display()),
        }
    }

    /// The writer records the metadata regions: the heap collections and descriptor chunks
    /// (what stowage's own readers parse) are outside them, the superblock and the index table
    /// inside, and the row values of a 3-row segment are not hashed at first use.
    #[test]
    fn meta_regions_leave_out_the_rows_and_cover_the_rest() {
        let dir = tempfile::tempdir().unwrap();
        let (path, _, entry) = committed(dir.path());
        let meta = entry.meta.as_ref().expect("stowage's own layout has meta regions");
        let inside = |at: u64| meta.ranges.iter().any(|[s, e]| (*s..*e).contains(&at));
        assert!(inside(0), "the superblock is metadata");
        assert!(inside(entry.bytes - 1), "the file's last byte (metadata) is covered");
        for row in 0..3 {
            assert!(!inside(value_at(&path, row) as u64), "row {row}'s value is row data");
        }
        assert!(meta.ranges.windows(2).all(|w| w[0][1] < w[1][0]), "sorted, disjoint");
        let hashed: u64 = meta.ranges.iter().map(|[s, e]| e - s).sum();
        assert!(hashed < entry.bytes, "{hashed} of {} bytes", entry.bytes);
    }

    /// A flipped byte in the metadata is an error at first use, before libhdf5 opens the file,
    /// naming the file.
    #[test]
    fn a_damaged_metadata_byte_is_an_error_at_first_use() {
        let dir = tempfile::tempdir().unwrap();
        let (path, schema, entry) = committed(dir.path());
        let meta = entry.meta.clone().unwrap();
        // A byte in every metadata range in turn (its middle), each on a fresh copy.
        let original = std::fs::read(&path).unwrap();
        for [start, end] in meta.ranges {
            std::fs::write(&path, &original).unwrap();
            flip(&path, ((start + end) / 2) as usize);
            let opened =
                Segment::open(&path, &schema, &entry, None, false, Some(&advisor())).map(drop);
            corrupted_naming(opened, &path, "metadata");
        }
    }

    /// A flipped byte in a row's value, outside the metadata: the segment opens (only its
    /// metadata is checked), the damaged row is `Error::Corrupted` naming the file when read
    /// (its key's lookup, its key, every key), the other rows read as written, and the whole
    /// file check (`validate`'s, and an old entry's without meta regions) fails at open.
    #[test]
    fn a_damaged_row_byte_is_an_error_when_its_row_is_read() {
        let dir = tempfile::tempdir().unwrap();
        let (path, schema, entry) = committed(dir.path());
        flip(&path, value_at(&path, 1));
        let (segment, verified) =
            Segment::open(&path, &schema, &entry, None, false, Some(&advisor())).unwrap();
        assert!(!verified.whole);
        assert_eq!(segment.read(&schema, 0, "key0").unwrap(), sample(0xA5A5_0000));
        assert_eq!(segment.read(&schema, 2, "key2").unwrap(), sample(0xA5A5_0002));
        corrupted_naming(segment.read(&schema, 1, "key1"), &path, "checksum");
        corrupted_naming(segment.read_if_key(&schema, 1, "key1"), &path, "checksum");
        assert_eq!(segment.key(0).unwrap(), "key0");
        corrupted_naming(segment.key(1), &path, "checksum");
        corrupted_naming(segment.keys(), &path, "xxh3");

        corrupted_naming(
            Segment::open(&path, &schema, &entry, None, true, Some(&advisor())).map(drop),
            &path,
            "xxh3",
        );
        let old = SegmentEntry { meta: None, ..entry.clone() };
        corrupted_naming(
            Segment::open(&path, &schema, &old, None, false, Some(&advisor())).map(drop),
            &path,
            "xxh3",
        );
    }

    /// A damaged key byte (outside the metadata): reading the key checks its row's checksum.
    #[test]
    fn a_damaged_key_byte_is_an_error_when_the_key_is_read() {
        let dir = tempfile::tempdir().unwrap();
        let (path, schema, entry) = committed(dir.path());
        let bytes = std::fs::read(&path).unwrap();
        let at = bytes.windows(4).position(|w| w == b"key2").unwrap();
        assert!(
            !entry
                .meta
                .as_ref()
                .unwrap()
                .ranges
                .iter()
                .any(|[s, e]| (*s..*e).contains(&(at as u64)))
        );
        flip(&path, at + 3);
        let (segment, _) =
            Segment::open(&path, &schema, &entry, None, false, Some(&advisor())).unwrap();
        corrupted_naming(segment.key(2), &path, "checksum");
        // The row's own values, checked with the key asked for, are intact: read as written.
        assert_eq!(segment.read_if_key(&schema, 2, "key2").unwrap(), Some(sample(0xA5A5_0002)));
        assert_eq!(segment.key(0).unwrap(), "key0");
    }

    /// Old entries (no meta regions) still open, checked whole; entries written now still read
    /// as the code before them read entries (the new field is ignored).
    #[test]
    fn entries_without_meta_regions_open_and_new_entries_read_as_old_ones() {
        let dir = tempfile::tempdir().unwrap();
        let (path, schema, entry) = committed(dir.path());
        let old = SegmentEntry { meta: None, ..entry.clone() };
        let (segment, verified) =
            Segment::open(&path, &schema, &old, None, false, Some(&advisor())).unwrap();
        assert!(verified.whole);
        assert_eq!(segment.keys().unwrap(), ["key0", "key1", "key2"]);

        let json = serde_json::to_string(&entry).unwrap();
        assert!(json.contains("\"meta\""), "{json}");
        let old_json = serde_json::to_string(&old).unwrap();
        assert!(!old_json.contains("meta"), "absent when None: {old_json}");
        assert_eq!(serde_json::from_str::<SegmentEntry>(&old_json).unwrap(), old);
        /// The segment entry of the code before meta regions.
        #[derive(serde::Deserialize, Debug, PartialEq)]
        struct Previous {
            id: u64,
            rows: u64,
            bytes: u64,
            xxh3: u64,
        }
        let previous: Previous = serde_json::from_str(&json).unwrap();
        let expected =
            Previous { id: entry.id, rows: entry.rows, bytes: entry.bytes, xxh3: entry.xxh3 };
        assert_eq!(previous, expected);
    }

    /// `read_if_key` confirms a candidate row by its checksum: the row of the key asked for is
    /// returned, another key's row is `None`, and a damaged row of the key asked for is an error
    /// naming it, never `None` (a lookup would then call a present key absent).
    #[test]
    fn read_if_key_tells_another_keys_row_from_a_damaged_one() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("segment_000000.h5");
        let schema = Schema::new().tensor("x", DType::U32, ShapeRule::Fixed(vec![1]));
        let (a, b) = (sample(7), sample(9));
        write(&path, &schema, &[("a", &a), ("b", &b)]).unwrap();
        let (bytes, xxh3) = hash(&mut std::fs::File::open(&path).unwrap(), &path).unwrap();
        let entry = SegmentEntry { id: 0, rows: 2, bytes, xxh3, meta: None };
        let (mut segment, _) =
            Segment::open(&path, &schema, &entry, None, false, Some(&advisor())).unwrap();

        assert_eq!(segment.read_if_key(&schema, 0, "a").unwrap(), Some(a));
        assert_eq!(segment.read_if_key(&schema, 1, "b").unwrap(), Some(b));
        assert_eq!(segment.read_if_key(&schema, 0, "b").unwrap(), None, "another key's row");

        segment.checksums[0] ^= 1;
        let err = segment.read_if_key(&schema, 0, "a").unwrap_err();
        assert!(matches!(&err, Error::Corrupted { key: Some(key), .. } if key == "a"), "{err}");
        assert_eq!(segment.read_if_key(&schema, 0, "b").unwrap(), None);
    }
}
