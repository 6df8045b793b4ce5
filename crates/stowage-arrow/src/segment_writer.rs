//! Writing one segment crash-safely: the Arrow IPC file, its key sidecar ([`crate::key_sidecar`])
//! and its row checksums ([`crate::row_sums`]) are written under temporary names and fsynced
//! together (one journal commit instead of three); the sidecars are renamed into place, then the
//! segment gets its name *without replacing anything* ([`stowage_core::file_safety::publish_no_replace`]), and the directory
//! is fsynced once. torchcachex does no fsync: a crash could leave a renamed, partly written
//! segment. A reader never sees a partial segment (temporary names are not segment names), and a
//! segment in place always has its sidecars (a sidecar without its segment is a leftover of a
//! crash, ignored and deleted by the next writer).
//!
//! Another writer (torchcachex) may take a segment id at any moment: it numbers its segments from
//! the directory listing. So the final name is never replaced: if it exists, the write fails with
//! [`Error::AlreadyExists`] and removes what it published, and [`write_next_segment`] lists the
//! directory again and takes an id above everything there. Before the segment becomes visible,
//! torchcachex's `index.pkl` is removed ([`crate::pickled_index`]), so that torchcachex sees the
//! new segment. Each segment's schema metadata and sidecars carry the writer session
//! ([`crate::ownership`]), which proves a segment whose commit record a crash lost to be stowage's.

use std::fs::File;
use std::io::{self, BufWriter};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use arrow_ipc::writer::{FileWriter, IpcWriteOptions};
use arrow_schema::Schema;
use stowage_core::file_safety::{
    create_dir_within_durably, fsync_dir, refuse_symlink, sync_together,
};
use stowage_core::{Error, IoResultExt, Result, Sample};

use crate::encode::{FieldColumns, encode_batch};
use crate::error::ArrowCacheError;
use crate::key_sidecar;
use crate::layout::Layout;
use crate::options::Compression;
use crate::row_sums;

/// What a segment needs to be written: where, in which columns, and how.
#[derive(Debug, Clone)]
pub struct SegmentFormat {
    /// The cache.
    pub layout: Layout,
    /// The segments' Arrow schema (from [`crate::encode::arrow_schema`]).
    pub arrow_schema: Arc<Schema>,
    /// The sample fields as columns.
    pub fields: Vec<FieldColumns>,
    /// Largest payload of one segment.
    pub max_segment_bytes: u64,
    /// Fsync the files before and the directory after publishing them.
    pub durable: bool,
    /// IPC buffer compression, `None` for torchcachex's uncompressed files.
    pub compression: Option<Compression>,
    /// The writer session's nonce, recorded in every segment and sidecar it writes
    /// (`crate::ownership`).
    pub session: u64,
}

impl SegmentFormat {
    /// Durable, uncompressed segments of at most 256 MiB in `layout` with `arrow_schema` and
    /// `fields` (the defaults of [`crate::ArrowOptions`]), written by a new writer session.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use stowage_arrow::test_support::encode::{arrow_schema, columns_for};
    /// use stowage_arrow::test_support::layout::Layout;
    /// use stowage_arrow::test_support::segment_writer::{SegmentFormat, write_segment};
    /// use stowage_core::{DType, Sample, Schema, ShapeRule, Tensor};
    /// let dir = tempfile::tempdir()?;
    /// let (structure, fields) =
    ///     columns_for(&Schema::new().tensor("tensor", DType::F32, ShapeRule::Any));
    /// let schema = Arc::new(arrow_schema(structure, &fields));
    /// let format = SegmentFormat::new(Layout::new(dir.path()), schema, fields);
    /// let sample = Sample::new().with("tensor", Tensor::from_slice(&[2], &[1f32, 2.0])?);
    /// let path = write_segment(&format, 0, &[("a", &sample)])?;
    /// assert!(path.ends_with("segments/segment_000000.arrow"));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[cfg(any(test, feature = "fuzzing", feature = "test-support"))]
    pub fn new(layout: Layout, arrow_schema: Arc<Schema>, fields: Vec<FieldColumns>) -> Self {
        let defaults = crate::ArrowOptions::default();
        SegmentFormat {
            layout,
            arrow_schema,
            fields,
            max_segment_bytes: defaults.max_segment_bytes,
            durable: defaults.durable,
            compression: defaults.compression,
            session: crate::ownership::new_session(),
        }
    }

    /// The same format, fsyncing whatever `durable` says: for segments a synced record commits
    /// (a compaction's), which must never be lost when the records before it survive.
    pub fn synced(&self) -> SegmentFormat {
        SegmentFormat { durable: true, ..self.clone() }
    }
}

/// Writes `rows` as segment `id` (one record batch) and returns its path. Removes torchcachex's
/// `index.pkl` before the segment becomes visible.
///
/// Errors: [`Error::AlreadyExists`] when the segment exists, also when another writer takes the
/// name while this one writes (segments are immutable; nothing of this write is left in place
/// then); [`Error::InvalidArgument`] naming the key and field of a value that does not fit its
/// column; [`Error::Io`] naming the path that failed, or `segments/` when it is a symbolic link
/// (never written through).
pub fn write_segment(format: &SegmentFormat, id: u64, rows: &[(&str, &Sample)]) -> Result<PathBuf> {
    let layout = &format.layout;
    let dir = layout.segments_dir();
    // Checked at every segment, not only at open: a link made meanwhile must not take the
    // segment (and its sidecars) out of the cache either.
    refuse_symlink(&dir)?;
    if !dir.is_dir() {
        create_dir_within_durably(layout.root(), &dir)?;
    }
    let path = layout.segment(id);
    if path.try_exists().at(&path)? {
        return Err(Error::AlreadyExists { path });
    }
    let options = IpcWriteOptions::default()
        .try_with_compression(format.compression.map(Compression::ipc))
        .map_err(|source| match format.compression {
            Some(codec) => Error::from(ArrowCacheError::Compression { codec, source }),
            None => {
                Error::from(ArrowCacheError::Arrow { what: "IPC write options".into(), source })
            }
        })?;
    let mut metadata = format.arrow_schema.metadata().clone();
    metadata.extend(crate::ownership::segment_metadata(id, format.session));
    let schema = Arc::new(format.arrow_schema.as_ref().clone().with_metadata(metadata));
    // The row checksums and the key sidecar are built on a second core while this one encodes
    // the batch: both read every row, and a flush is on the caller's critical path.
    let (batch, sidecars) = std::thread::scope(|scope| {
        let sidecars = scope.spawn(|| sidecar_bytes(&format.fields, rows, format.session));
        let batch = encode_batch(schema.clone(), &format.fields, rows);
        let sidecars = sidecars.join().unwrap_or_else(|_| {
            let task = "building a segment's key sidecar and checksums";
            Err(ArrowCacheError::Panicked { task, cache: layout.root().to_path_buf() }.into())
        });
        (batch, sidecars)
    });
    let (batch, (sidecar, sums)) = (batch?, sidecars?);
    let mut staged = Staged::default();
    let keys_path = key_sidecar::sidecar_path(&path);
    let sums_path = row_sums::sums_path(&path);
    staged.stage(&keys_path, |out| io::Write::write_all(out, &sidecar))?;
    staged.stage(&sums_path, |out| io::Write::write_all(out, &sums))?;
    staged.stage(&path, |out| {
        let mut writer =
            FileWriter::try_new_with_options(out, &schema, options).map_err(io::Error::other)?;
        writer.write(&batch).map_err(io::Error::other)?;
        writer.finish().map_err(io::Error::other)
    })?;
    if format.durable {
        staged.sync()?;
    }
    // The sidecars first: a segment in place always has them. Their names are stowage's alone.
    staged.rename_next()?;
    staged.rename_next()?;
    crate::pickled_index::remove(layout, format.durable)?;
    let (temp, _, file) = staged.files.remove(0);
    drop(file);
    let published = stowage_core::file_safety::publish_no_replace(&temp, &path);
    let _ = std::fs::remove_file(&temp);
    if let Err(e) = published {
        // Another writer took the name: what this write published goes, before anyone reads it
        // (a reader ignores sidecars of segments the commit log does not list).
        let _ = std::fs::remove_file(&keys_path);
        let _ = std::fs::remove_file(&sums_path);
        return Err(match e.kind() {
            io::ErrorKind::AlreadyExists => Error::AlreadyExists { path },
            _ => Error::io(&path, e),
        });
    }
    if format.durable {
        fsync_dir(&dir)?;
    }
    Ok(path)
}

/// How many times [`write_next_segment`] lists the directory again after another writer took
/// the id it chose, before giving up.
const ID_ATTEMPTS: usize = 16;

/// Writes `rows` as a new segment with the id `next_id` holds, or above when another writer
/// took it meanwhile (the directory is listed again: the new id is above every id there); leaves
/// `next_id` at the id after the one written. Returns the id and path.
///
/// Errors: as [`write_segment`]; [`Error::Unsupported`] when the id no longer fits the 32 bits a
/// key index run holds; [`Error::Backend`] when another writer took every id tried.
///
/// ```
/// use std::sync::{Arc, atomic::AtomicU64};
/// use stowage_arrow::test_support::encode::{arrow_schema, columns_for};
/// use stowage_arrow::test_support::layout::Layout;
/// use stowage_arrow::test_support::segment_writer::{SegmentFormat, write_next_segment};
/// use stowage_core::{DType, Sample, Schema, ShapeRule, Tensor};
/// let dir = tempfile::tempdir()?;
/// let (structure, fields) =
///     columns_for(&Schema::new().tensor("tensor", DType::F32, ShapeRule::Any));
/// let format = SegmentFormat::new(Layout::new(dir.path()), Arc::new(arrow_schema(structure, &fields)), fields);
/// std::fs::create_dir(dir.path().join("segments"))?;
/// std::fs::write(dir.path().join("segments/segment_000004.arrow"), b"another writer's")?;
/// let next = AtomicU64::new(4);
/// let sample = Sample::new().with("tensor", Tensor::from_slice(&[1], &[1f32])?);
/// let (id, _) = write_next_segment(&format, &next, &[("a", &sample)])?;
/// assert_eq!((id, next.into_inner()), (5, 6));
/// assert_eq!(std::fs::read(dir.path().join("segments/segment_000004.arrow"))?, b"another writer's");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn write_next_segment(
    format: &SegmentFormat,
    next_id: &AtomicU64,
    rows: &[(&str, &Sample)],
) -> Result<(u64, PathBuf)> {
    for _ in 0..ID_ATTEMPTS {
        let id = next_id.load(Ordering::Acquire);
        if id > u64::from(u32::MAX) {
            let segments = Some(format.layout.segments_dir());
            return Err(ArrowCacheError::SegmentIdBeyond32Bits { id, segments }.into());
        }
        match write_segment(format, id, rows) {
            Ok(path) => {
                next_id.store(id + 1, Ordering::Release);
                return Ok((id, path));
            }
            Err(Error::AlreadyExists { .. }) => {
                let highest = crate::ownership::highest_id(&format.layout)?;
                let next = highest.map_or(id + 1, |h| h.max(id) + 1);
                next_id.store(next, Ordering::Release);
            }
            Err(e) => return Err(e),
        }
    }
    let segments = format.layout.segments_dir();
    Err(ArrowCacheError::SegmentIdsTaken { segments, attempts: ID_ATTEMPTS }.into())
}

/// Files written under temporary names in their final directory, renamed into place one by one;
/// dropping it removes every temporary file not renamed.
#[derive(Default)]
pub(crate) struct Staged {
    /// (temporary path, final path, the open file), in staging order.
    files: Vec<(PathBuf, PathBuf, File)>,
}

impl Staged {
    /// Writes what `write` streams into a new temporary file beside `path`.
    pub(crate) fn stage(
        &mut self,
        path: &Path,
        write: impl FnOnce(&mut BufWriter<File>) -> io::Result<()>,
    ) -> Result<()> {
        let (temp, file) = stowage_core::file_safety::create_temp_beside(path).at(path)?;
        // Registered before writing so that a failure removes it on drop.
        self.files.push((temp, path.to_path_buf(), file));
        let (_, _, file) = self.files.last().expect("pushed just now");
        let mut out = BufWriter::new(file.try_clone().at(path)?);
        write(&mut out).and_then(|()| io::Write::flush(&mut out)).at(path)
    }

    /// fdatasyncs every staged file, together.
    pub(crate) fn sync(&self) -> Result<()> {
        let files: Vec<(&Path, &File)> =
            self.files.iter().map(|(_, path, file)| (path.as_path(), file)).collect();
        sync_together(&files, &[])
    }

    /// Renames the first staged file into place (replacing a file of that name: only for names
    /// no other writer uses, such as sidecars).
    pub(crate) fn rename_next(&mut self) -> Result<()> {
        let (temp, path, file) = self.files.remove(0);
        drop(file);
        std::fs::rename(&temp, &path).map_err(|e| {
            let _ = std::fs::remove_file(&temp);
            Error::io(&path, e)
        })
    }
}

impl Drop for Staged {
    fn drop(&mut self) {
        for (temp, _, _) in &self.files {
            let _ = std::fs::remove_file(temp);
        }
    }
}

/// The bytes of the key sidecar and of the row checksum file of a segment of `rows`; each
/// checksum is of the row as a reader decodes it back (exactly the stored fields, a missing one
/// as null).
fn sidecar_bytes(
    fields: &[FieldColumns],
    rows: &[(&str, &Sample)],
    session: u64,
) -> Result<(Vec<u8>, Vec<u8>)> {
    let keys: Vec<&str> = rows.iter().map(|(key, _)| *key).collect();
    let mut names: Vec<&str> = fields.iter().map(FieldColumns::name).collect();
    names.sort_unstable();
    let sums: Vec<u64> =
        rows.iter().map(|(key, sample)| row_sums::of_stored_row(key, &names, sample)).collect();
    Ok((
        key_sidecar::build_in_session(&keys, session)?,
        row_sums::encode_in_session(&sums, session),
    ))
}
