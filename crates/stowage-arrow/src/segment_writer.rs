//! Writing one segment crash-safely: the whole Arrow IPC file goes to a temporary name, is
//! fsynced, renamed to `segment_<id>.arrow` and the directory fsynced (torchcachex does no fsync:
//! a crash could leave a renamed, partly written segment). A reader never sees a partial segment:
//! temporary names are not segment names. The segment's key sidecar
//! ([`crate::key_sidecar`]) is written first, the same way, so a segment in place always has one
//! (a sidecar without its segment is a leftover of a crash, ignored and later replaced).

use std::io;
use std::path::PathBuf;
use std::sync::Arc;

use arrow_ipc::writer::FileWriter;
use arrow_schema::Schema;
use stowage_core::file_safety::{atomic_write_with, fsync_dir};
use stowage_core::{Error, IoResultExt, Result, Sample};

use crate::encode::{FieldColumns, encode_batch};
use crate::key_sidecar;
use crate::layout::Layout;

/// Writes `rows` as segment `id` of the cache at `layout` (one record batch) and returns its path.
///
/// Errors: [`Error::AlreadyExists`] when the segment exists (segments are immutable);
/// [`Error::InvalidArgument`] naming the key and field of a value that does not fit its column;
/// [`Error::Io`] naming the path that failed.
pub fn write_segment(
    layout: &Layout,
    id: u64,
    schema: Arc<Schema>,
    fields: &[FieldColumns],
    rows: &[(&str, &Sample)],
) -> Result<PathBuf> {
    let batch = encode_batch(schema.clone(), fields, rows)?;
    let dir = layout.segments_dir();
    if !dir.is_dir() {
        std::fs::create_dir_all(&dir).at(&dir)?;
        fsync_dir(layout.root())?;
    }
    let path = layout.segment(id);
    if path.try_exists().at(&path)? {
        return Err(Error::AlreadyExists { path });
    }
    key_sidecar::write(&path, &rows.iter().map(|(key, _)| *key).collect::<Vec<_>>())?;
    atomic_write_with(&path, |out| {
        let mut writer = FileWriter::try_new(out, &schema).map_err(io::Error::other)?;
        writer.write(&batch).map_err(io::Error::other)?;
        writer.finish().map_err(io::Error::other)
    })?;
    Ok(path)
}
