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

use hdf5::{Group, H5Type};
use stowage_core::bytes::Bytes;
use stowage_core::{DType, Error, FieldKind, IoResultExt, Result, Sample, Schema, Tensor, Value};
use xxhash_rust::xxh3::Xxh3;

use crate::columns::{ColumnReader, ColumnWriter, i64s, le_bytes_i64};
use crate::commit_log::SegmentEntry;
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

/// The size and xxh3-64 of the file at `path`, streamed, and its stamp (taken before the bytes
/// are read, so a change while they are read shows as a changed stamp later).
pub(crate) fn file_checksum(path: &Path) -> Result<(u64, u64, FileStamp)> {
    let mut file = open_std(path)?;
    let stamp = FileStamp::of(&file.metadata().at(path)?);
    let (bytes, xxh3) = hash(&mut file, path)?;
    Ok((bytes, xxh3, stamp))
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
    checksums: Vec<u64>,
    keys: ColumnReader,
    shapes: ColumnReader,
    /// Each field's column and the element type its values are read as.
    columns: Vec<(ColumnReader, Element)>,
    /// `None` once every column reads from the map alone: libhdf5 closed the file.
    _file: Option<hdf5::File>,
}

impl Segment {
    /// Opens the segment at `path` committed as `entry`. Its size, and its whole-file xxh3
    /// unless the file still has the stamp `verified` (of the last time its checksum matched),
    /// are checked before libhdf5 parses it, then that it holds `entry.rows` samples of
    /// `schema`. Returns the segment and the stamp its checksum now holds for.
    ///
    /// Errors: `Error::Corrupted` for damage; `Error::Io` when the operating system refuses the
    /// file (missing, no permission, no descriptor left, libhdf5's lock held elsewhere).
    pub fn open(
        path: &Path,
        schema: &Schema,
        entry: &SegmentEntry,
        verified: Option<FileStamp>,
    ) -> Result<(Segment, FileStamp)> {
        let mut opened = open_std(path)?;
        let stamp = FileStamp::of(&opened.metadata().at(path)?);
        if stamp.size != entry.bytes {
            return Err(Error::corrupted(
                path,
                format!("segment holds {} bytes, the commit log says {}", stamp.size, entry.bytes),
            ));
        }
        if verified != Some(stamp) {
            let (bytes, xxh3) = hash(&mut opened, path)?;
            if (bytes, xxh3) != (entry.bytes, entry.xxh3) {
                return Err(Error::corrupted(
                    path,
                    format!(
                        "segment of {bytes} bytes with xxh3 {xxh3:016x}, the commit log records \
                         {} bytes with xxh3 {:016x}",
                        entry.bytes, entry.xxh3
                    ),
                ));
            }
        }
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
        let mut segment = Segment {
            path: path.to_path_buf(),
            checksums: index.iter().map(|r| r.checksum).collect(),
            keys,
            shapes,
            columns,
            _file: Some(file),
        };
        segment.detach()?;
        Ok((segment, stamp))
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

    /// The keys, by row, read from the segment.
    pub fn keys(&self) -> Result<Vec<String>> {
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

    /// The key of row `row`, read from the segment.
    ///
    /// Errors: `Error::Corrupted` naming the segment when the row is missing or the key is not
    /// UTF-8.
    pub fn key(&self, row: usize) -> Result<String> {
        let bytes = self.keys.read(row as u64, Element::U8, "key row")?;
        String::from_utf8(bytes)
            .map_err(|_| Error::corrupted(&self.path, format!("key of row {row} is not UTF-8")))
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
        let fields: Vec<Vec<u8>> = self
            .columns
            .iter()
            .zip(&schema.fields)
            .map(|((column, element), spec)| {
                column.read(row as u64, *element, &format!("field {:?}", spec.name))
            })
            .collect::<Result<_>>()?;
        let shape_bytes = self.shapes.read(row as u64, Element::I64, "shape row")?;
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
        let entry = SegmentEntry { id: 0, rows: 2, bytes, xxh3 };
        let (mut segment, _) = Segment::open(&path, &schema, &entry, None).unwrap();

        assert_eq!(segment.read_if_key(&schema, 0, "a").unwrap(), Some(a));
        assert_eq!(segment.read_if_key(&schema, 1, "b").unwrap(), Some(b));
        assert_eq!(segment.read_if_key(&schema, 0, "b").unwrap(), None, "another key's row");

        segment.checksums[0] ^= 1;
        let err = segment.read_if_key(&schema, 0, "a").unwrap_err();
        assert!(matches!(&err, Error::Corrupted { key: Some(key), .. } if key == "a"), "{err}");
        assert_eq!(segment.read_if_key(&schema, 0, "b").unwrap(), None);
    }
}
