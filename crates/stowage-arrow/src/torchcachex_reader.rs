//! [`TorchcachexReader`]: a cache torchcachex wrote on its own (no `stowage.log`), read through
//! the [`Reader`] trait like any stowage cache.
//!
//! torchcachex records no schema of its samples, only the columns of its segments: the schema
//! is what those columns hold, as loosely as torchcachex allows (a tensor of any shape per tensor
//! entry, bytes per pickled entry, every field nullable: torchcachex stores a missing value as an
//! empty placeholder). Its `index.pkl` is never read ([`CacheReader`] scans the segments), and it
//! writes no checksums, so `validate` decodes every row but cannot vouch for the bytes.

use std::path::{Path, PathBuf};

use stowage_core::{
    Capabilities, DType, Error, FieldKind, FieldSpec, Format, Reader, Result, Sample, Schema,
    ShapeRule, ValidationLevel, ValidationReport,
};

use crate::decode::{ColumnGroup, column_groups};
use crate::reader::CacheReader;
use crate::segment::Segment;

/// A cache torchcachex wrote, opened read-only: its segments scanned (`index.pkl` is never
/// trusted), the schema taken from the first segment's columns.
///
/// ```no_run
/// use stowage_core::Reader;
/// // A cache torchcachex wrote: ArrowIPCCacheBackend(cache_dir="cache", module_id="encoder").
/// let cache = stowage_arrow::TorchcachexReader::open(std::path::Path::new("cache/encoder"))?;
/// for key in cache.keys()? {
///     let sample = cache.get(&key)?.expect("a listed key");
///     println!("{key}: {:?}", sample.fields().map(|(name, _)| name).collect::<Vec<_>>());
/// }
/// # Ok::<(), stowage_core::Error>(())
/// ```
#[derive(Debug)]
pub struct TorchcachexReader {
    path: PathBuf,
    reader: CacheReader,
    schema: Schema,
    capabilities: Capabilities,
}

impl TorchcachexReader {
    /// Opens the cache torchcachex wrote in `dir` (`<cache_dir>/<module_id>`).
    ///
    /// Errors: as [`CacheReader::open`]; [`Error::Corrupted`] naming the first segment when its
    /// columns are not torchcachex's (a `_data` without its `_shape`, a column of no known type).
    pub fn open(dir: &Path) -> Result<TorchcachexReader> {
        let reader = CacheReader::open(dir)?;
        let schema = torchcachex_schema(&reader)?;
        Ok(TorchcachexReader {
            path: dir.to_path_buf(),
            reader,
            schema,
            capabilities: read_capabilities(),
        })
    }

    /// The reader of the segments, for what the [`Reader`] trait does not say (the output
    /// structure, the segment files).
    pub fn reader(&self) -> &CacheReader {
        &self.reader
    }
}

/// What a torchcachex cache offers when read: fields of any shape and any dtype its columns hold,
/// bytes and (in a cache stowage once wrote) JSON, nullable; zero-copy gets and concurrent
/// readers. No checksums (torchcachex writes none), and nothing of writing: stowage writes such
/// a cache only after [`crate::ArrowBackend::attach`] starts its log in it.
fn read_capabilities() -> Capabilities {
    let mut caps = Capabilities::none();
    caps.variable_shapes = true;
    caps.ragged = true;
    caps.nullable = true;
    caps.bytes_fields = true;
    caps.json_fields = true;
    caps.zero_copy_get = true;
    caps.concurrent_readers = true;
    caps.dtypes = DType::ALL.to_vec();
    caps
}

/// The sample fields of a torchcachex cache, from its first segment's columns: tensors of the
/// column's element type and any shape, pickled values as bytes, stowage's JSON columns as JSON;
/// every field nullable (torchcachex stores a missing value as an empty placeholder). No segment:
/// no field.
fn torchcachex_schema(reader: &CacheReader) -> Result<Schema> {
    let Some((id, path)) = reader.segment_paths().next() else { return Ok(Schema::new()) };
    let segment = Segment::open(id, path)?;
    let structure = reader.output_structure()?;
    let groups = column_groups(segment.schema(), structure).map_err(|why| {
        Error::corrupted(path, format!("its columns are not a torchcachex segment's: {why}"))
    })?;
    let fields = groups
        .iter()
        .map(|group| {
            let kind = match group {
                ColumnGroup::Tensor { dtype, .. } => {
                    FieldKind::Tensor { dtype: *dtype, shape: ShapeRule::Any }
                }
                ColumnGroup::Blob { .. } => FieldKind::Bytes,
                ColumnGroup::Json { .. } => FieldKind::Json { deduplicate: false },
            };
            FieldSpec { name: group.name().to_owned(), kind, nullable: true }
        })
        .collect();
    Ok(Schema { fields })
}

impl Reader for TorchcachexReader {
    fn name(&self) -> &'static str {
        crate::BACKEND_NAME
    }

    fn format(&self) -> &'static Format {
        &crate::FORMATS[1]
    }

    fn capabilities(&self) -> &Capabilities {
        &self.capabilities
    }

    fn schema(&self) -> &Schema {
        &self.schema
    }

    fn path(&self) -> &Path {
        &self.path
    }

    fn get(&self, key: &str) -> Result<Option<Sample>> {
        self.reader.get(key)
    }

    /// Segment by segment in row order ([`CacheReader::get_batch`]).
    fn get_batch(&self, keys: &[&str]) -> Result<Vec<Option<Sample>>> {
        self.reader.get_batch(keys)
    }

    fn contains(&self, key: &str) -> Result<bool> {
        Ok(self.reader.locate(key)?.is_some())
    }

    fn len(&self) -> usize {
        self.reader.len()
    }

    fn keys(&self) -> Result<Vec<String>> {
        self.reader.keys()
    }

    /// Never: torchcachex has no notion of a complete cache.
    fn is_finalized(&self) -> bool {
        false
    }

    /// Every segment decoded row by row, every sidecar and key index run found beside it
    /// checked ([`CacheReader::validate`]); both levels decode every row, as no checksum covers
    /// the bytes.
    /// The data is listed as unchecked: torchcachex writes no checksums, so a decoded row says
    /// nothing of its bytes' integrity and the cache is never reported clean.
    fn validate(&self, level: ValidationLevel) -> Result<ValidationReport> {
        let _ = level;
        let mut report = self.reader.validate()?;
        if !self.reader.is_empty() {
            report.unchecked.push(stowage_core::Unchecked {
                path: self.path().to_path_buf(),
                writer: "torchcachex".to_owned(),
                samples: self.reader.len() as u64,
                next_step: "torchcachex writes no checksums: every row was decoded, not checked; \
                    `stowage adopt` starts stowage's log beside torchcachex's files and checksums \
                    every segment (torchcachex's files are not changed)"
                    .to_owned(),
            });
        }
        Ok(report)
    }

    /// `schema.json` and the absence of stowage's files checked once, then one unit per segment
    /// (`check_plan` module).
    fn check_plan(
        &self,
        selection: &stowage_core::check_plan::Selection,
    ) -> Result<stowage_core::check_plan::CheckPlan<'_>> {
        crate::check_plan::torchcachex_plan(self, selection)
    }

    /// The segments, `index.pkl` and the shapes seen (torchcachex records none).
    fn describe(&self) -> Result<stowage_core::describe::Description> {
        crate::describe::describe_torchcachex(self)
    }
}
