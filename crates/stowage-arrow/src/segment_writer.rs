//! Writing one segment crash-safely: the whole Arrow IPC file goes to a temporary name, is
//! fsynced, renamed to `segment_<id>.arrow` and the directory fsynced (torchcachex does no fsync:
//! a crash could leave a renamed, partly written segment). A reader never sees a partial segment:
//! temporary names are not segment names. The segment's key sidecar
//! ([`crate::key_sidecar`]) is written first, the same way, so a segment in place always has one
//! (a sidecar without its segment is a leftover of a crash, ignored and later replaced), and so is
//! its row checksum file ([`crate::row_sums`]).

use std::io;
use std::path::PathBuf;
use std::sync::Arc;

use arrow_ipc::writer::FileWriter;
use arrow_schema::Schema;
use stowage_core::bytes::Bytes;
use stowage_core::file_safety::{atomic_write_with, fsync_dir};
use stowage_core::{Error, IoResultExt, Result, Sample, Value};

use crate::encode::{FieldColumns, encode_batch};
use crate::key_sidecar;
use crate::layout::Layout;
use crate::row_sums;

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
    let sums: Vec<u64> = rows
        .iter()
        .map(|(key, sample)| row_sums::of_sample(key, &stored_form(fields, sample)))
        .collect();
    row_sums::write(&path, &sums)?;
    atomic_write_with(&path, |out| {
        let mut writer = FileWriter::try_new(out, &schema).map_err(io::Error::other)?;
        writer.write(&batch).map_err(io::Error::other)?;
        writer.finish().map_err(io::Error::other)
    })?;
    Ok(path)
}

/// `sample` as a reader decodes it back: exactly the stored fields, a missing tensor as null and a
/// missing or null blob as empty bytes (torchcachex's placeholders), so the row checksum a writer
/// records is the one a reader recomputes.
fn stored_form(fields: &[FieldColumns], sample: &Sample) -> Sample {
    let mut stored = Sample::new();
    for field in fields {
        let (name, value) = match field {
            FieldColumns::Tensor { name, .. } => match sample.get(name) {
                Some(Value::Tensor(tensor)) => (name, Value::Tensor(tensor.clone())),
                _ => (name, Value::Null),
            },
            FieldColumns::Blob { name } => match sample.get(name) {
                Some(Value::Bytes(bytes)) => (name, Value::Bytes(bytes.clone())),
                _ => (name, Value::Bytes(Bytes::new())),
            },
        };
        stored.insert(name.as_str(), value);
    }
    stored
}
