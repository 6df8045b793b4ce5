//! Writing one segment crash-safely: the Arrow IPC file, its key sidecar ([`crate::key_sidecar`])
//! and its row checksums ([`crate::row_sums`]) are written under temporary names, fsynced together
//! (one journal commit instead of three), renamed into place sidecars first, and the directory
//! fsynced once ([`StagedFiles`]). torchcachex does no fsync: a crash could leave a renamed, partly
//! written segment. A reader never sees a partial segment (temporary names are not segment
//! names), and a segment in place always has its sidecars (a sidecar without its segment is a
//! leftover of a crash, ignored and later replaced).

use std::io;
use std::path::PathBuf;
use std::sync::Arc;

use arrow_ipc::writer::{FileWriter, IpcWriteOptions};
use arrow_schema::Schema;
use stowage_core::file_safety::{StagedFiles, fsync_dir};
use stowage_core::{Error, IoResultExt, Result, Sample};

use crate::encode::{FieldColumns, encode_batch};
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
}

impl SegmentFormat {
    /// Durable, uncompressed segments of at most 256 MiB in `layout` with `arrow_schema` and
    /// `fields` (the defaults of [`crate::ArrowOptions`]).
    ///
    /// ```
    /// use std::sync::Arc;
    /// use stowage_arrow::encode::{arrow_schema, columns_for};
    /// use stowage_arrow::layout::Layout;
    /// use stowage_arrow::segment_writer::{SegmentFormat, write_segment};
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
    pub fn new(layout: Layout, arrow_schema: Arc<Schema>, fields: Vec<FieldColumns>) -> Self {
        let defaults = crate::ArrowOptions::default();
        SegmentFormat {
            layout,
            arrow_schema,
            fields,
            max_segment_bytes: defaults.max_segment_bytes,
            durable: defaults.durable,
            compression: defaults.compression,
        }
    }
}

/// Writes `rows` as segment `id` (one record batch) and returns its path.
///
/// Errors: [`Error::AlreadyExists`] when the segment exists (segments are immutable);
/// [`Error::InvalidArgument`] naming the key and field of a value that does not fit its column;
/// [`Error::Io`] naming the path that failed.
pub fn write_segment(format: &SegmentFormat, id: u64, rows: &[(&str, &Sample)]) -> Result<PathBuf> {
    let layout = &format.layout;
    let dir = layout.segments_dir();
    if !dir.is_dir() {
        std::fs::create_dir_all(&dir).at(&dir)?;
        fsync_dir(layout.root())?;
    }
    let path = layout.segment(id);
    if path.try_exists().at(&path)? {
        return Err(Error::AlreadyExists { path });
    }
    let options = IpcWriteOptions::default()
        .try_with_compression(format.compression.map(Compression::ipc))
        .map_err(|e| Error::invalid(format!("IPC compression: {e}")))?;
    // The row checksums and the key sidecar are built on a second core while this one encodes
    // the batch: both read every row, and a flush is on the caller's critical path.
    let (batch, sidecars) = std::thread::scope(|scope| {
        let sidecars = scope.spawn(|| sidecar_bytes(&format.fields, rows));
        let batch = encode_batch(format.arrow_schema.clone(), &format.fields, rows);
        let sidecars = sidecars.join().unwrap_or_else(|_| {
            Err(Error::invalid("building a segment's key sidecar and checksums panicked"))
        });
        (batch, sidecars)
    });
    let (batch, (sidecar, sums)) = (batch?, sidecars?);
    let mut staged = StagedFiles::new(format.durable);
    staged.stage(key_sidecar::sidecar_path(&path), |out| io::Write::write_all(out, &sidecar))?;
    staged.stage(row_sums::sums_path(&path), |out| io::Write::write_all(out, &sums))?;
    staged.stage(&path, |out| {
        let schema = &format.arrow_schema;
        let mut writer =
            FileWriter::try_new_with_options(out, schema, options).map_err(io::Error::other)?;
        writer.write(&batch).map_err(io::Error::other)?;
        writer.finish().map_err(io::Error::other)
    })?;
    staged.publish()?;
    Ok(path)
}

/// The bytes of the key sidecar and of the row checksum file of a segment of `rows`; each
/// checksum is of the row as a reader decodes it back (exactly the stored fields, a missing one
/// as null).
fn sidecar_bytes(fields: &[FieldColumns], rows: &[(&str, &Sample)]) -> Result<(Vec<u8>, Vec<u8>)> {
    let keys: Vec<&str> = rows.iter().map(|(key, _)| *key).collect();
    let mut names: Vec<&str> = fields.iter().map(FieldColumns::name).collect();
    names.sort_unstable();
    let sums: Vec<u64> =
        rows.iter().map(|(key, sample)| row_sums::of_stored_row(key, &names, sample)).collect();
    Ok((key_sidecar::build(&keys)?, row_sums::encode(&sums)))
}
