//! Samples by key, whatever the format: [`SampleSource`] over the [`Backend`] trait (the stowage
//! caches and DNANet's), torchcachex's caches ([`CacheReader`]) and aenet's HDF5 torch caches
//! ([`TorchCache`], keyed by entry index).

use std::path::{Path, PathBuf};

use stowage_arrow::reader::CacheReader;
use stowage_core::{
    Backend, DType, FieldKind, FieldSpec, Sample, Schema, ShapeRule, Tensor, Value,
};
use stowage_hdf5::TorchCache;

use crate::detect::CacheKind;
use crate::error::CliError;

/// A cache opened read-only for reading samples by key.
pub trait SampleSource: Send + Sync {
    /// The kind of cache.
    fn kind(&self) -> CacheKind;

    /// The cache's path.
    fn path(&self) -> &Path;

    /// The schema: recorded by the cache, or what its format implies when it records none
    /// (torchcachex, aenet: the loosest it allows, any or ragged shapes, nullable; the shapes
    /// really stored are only known by reading the samples).
    fn schema(&self) -> &Schema;

    /// Every key, in the order of first put (entry order for aenet).
    fn keys(&self) -> Result<Vec<String>, CliError>;

    /// The sample stored under `key`, `None` when absent; corrupted bytes are an error naming
    /// the file and the key.
    fn get(&self, key: &str) -> Result<Option<Sample>, CliError>;
}

/// A cache behind the [`Backend`] trait.
pub struct BackendSource {
    /// Which kind it is.
    pub kind: CacheKind,
    /// The backend, opened read-only.
    pub backend: Box<dyn Backend>,
}

impl SampleSource for BackendSource {
    fn kind(&self) -> CacheKind {
        self.kind
    }
    fn path(&self) -> &Path {
        self.backend.path()
    }
    fn schema(&self) -> &Schema {
        self.backend.schema()
    }
    fn keys(&self) -> Result<Vec<String>, CliError> {
        Ok(self.backend.keys()?)
    }
    fn get(&self, key: &str) -> Result<Option<Sample>, CliError> {
        Ok(self.backend.get(key)?)
    }
}

/// A cache torchcachex wrote, read through stowage's reader (segments scanned, `index.pkl`
/// never trusted).
pub struct TorchcachexSource {
    path: PathBuf,
    /// The reader.
    pub reader: CacheReader,
    schema: Schema,
}

impl TorchcachexSource {
    /// Opens the cache in `dir`; the schema comes from the first segment's columns.
    pub fn open(dir: &Path) -> Result<TorchcachexSource, CliError> {
        let reader = CacheReader::open(dir)?;
        let schema = torchcachex_schema(&reader)?;
        Ok(TorchcachexSource { path: dir.to_path_buf(), reader, schema })
    }
}

/// The sample fields of a torchcachex cache, from its first segment's columns: tensors of the
/// column's element type and any shape, pickled values as bytes, stowage's JSON columns as JSON;
/// every field nullable (torchcachex stores a missing value as an empty placeholder).
pub fn torchcachex_schema(reader: &CacheReader) -> Result<Schema, CliError> {
    let Some((id, path)) = reader.segment_paths().next() else { return Ok(Schema::new()) };
    let segment = stowage_arrow::segment::Segment::open(id, path)?;
    let structure = reader.output_structure()?;
    let groups = stowage_arrow::decode::column_groups(segment.schema(), structure)
        .map_err(|why| CliError::new(format!("{}: {why}", path.display())))?;
    let fields = groups
        .iter()
        .map(|group| {
            let kind = match group {
                stowage_arrow::decode::ColumnGroup::Tensor { dtype, .. } => {
                    FieldKind::Tensor { dtype: *dtype, shape: ShapeRule::Any }
                }
                stowage_arrow::decode::ColumnGroup::Blob { .. } => FieldKind::Bytes,
                stowage_arrow::decode::ColumnGroup::Json { .. } => {
                    FieldKind::Json { deduplicate: false }
                }
            };
            FieldSpec { name: group.name().to_owned(), kind, nullable: true }
        })
        .collect();
    Ok(Schema { fields })
}

impl SampleSource for TorchcachexSource {
    fn kind(&self) -> CacheKind {
        CacheKind::Torchcachex
    }
    fn path(&self) -> &Path {
        &self.path
    }
    fn schema(&self) -> &Schema {
        &self.schema
    }
    fn keys(&self) -> Result<Vec<String>, CliError> {
        Ok(self.reader.keys()?)
    }
    fn get(&self, key: &str) -> Result<Option<Sample>, CliError> {
        Ok(self.reader.get(key)?)
    }
}

/// The feature matrix's field name in an aenet sample.
pub const AENET_FEATURES: &str = "features";

/// The field names of the 11 derivative arrays: aenet's dataset names with `/` as `_`
/// (`radial_dG_drij`), in [`stowage_hdf5::layout::DERIVATIVE_ARRAYS`] order.
pub fn aenet_derivative_fields() -> [String; 11] {
    stowage_hdf5::layout::DERIVATIVE_ARRAYS.map(|name| name.replace('/', "_"))
}

/// An aenet dataset file's torch cache. Keys are the entry indices with a cached row (features,
/// derivatives or both), in decimal; a sample holds `features` and the 11 derivative arrays,
/// null where the entry has no row of that section.
pub struct AenetSource {
    /// The cache.
    pub cache: TorchCache,
    entries: Vec<i64>,
    schema: Schema,
}

impl AenetSource {
    /// Opens the torch cache of the HDF5 file `path`.
    ///
    /// Errors: the file holds no torch cache, or it cannot be opened (naming the file).
    pub fn open(path: &Path) -> Result<AenetSource, CliError> {
        let cache = TorchCache::open(path)?.ok_or_else(|| {
            CliError::new(format!(
                "{}: an HDF5 file without /torch_cache or /force_derivatives",
                path.display()
            ))
        })?;
        let (features, derivatives) = (cache.feature_entries(), cache.derivative_entries());
        let mut entries: Vec<i64> = features.iter().chain(&derivatives).copied().collect();
        entries.sort_unstable();
        entries.dedup();
        let schema = aenet_schema(&cache, &features, &derivatives, entries.len())?;
        Ok(AenetSource { cache, entries, schema })
    }

    /// The entry indices with a cached row, ascending.
    pub fn entries(&self) -> &[i64] {
        &self.entries
    }
}

/// What an aenet cache's samples hold: features `(n_atoms, F)` and the derivative arrays, each
/// ragged in its leading dimension (atoms, edges or triplets), at the storage dtype; a section
/// some entries lack is nullable.
fn aenet_schema(
    cache: &TorchCache,
    features: &[i64],
    derivatives: &[i64],
    entries: usize,
) -> Result<Schema, CliError> {
    let float = cache.signature().storage_dtype.dtype();
    let mut fields = Vec::new();
    let mut field = |name: &str, dtype: DType, rest: Vec<usize>, nullable: bool| {
        fields.push(FieldSpec {
            name: name.to_owned(),
            kind: FieldKind::Tensor { dtype, shape: ShapeRule::RaggedLeading(rest) },
            nullable,
        });
    };
    if let Some(&first) = features.first() {
        // The width from the first row that reads: one damaged row must not keep `keys` or
        // `verify` from the others (verify reports it).
        let mut rows = features.iter().take(16).map(|&entry| cache.features(entry));
        let read = rows.find(Result::is_ok).unwrap_or_else(|| cache.features(first))?;
        let width = read.map_or(0, |t| t.shape().get(1).copied().unwrap_or(0));
        field(AENET_FEATURES, float, vec![width], features.len() < entries);
    }
    if let Some(layout) = cache.derivative_layout() {
        let nullable = derivatives.len() < entries;
        let (nr, na) = (layout.n_radial_features, layout.n_angular_features);
        let rests: [(DType, Vec<usize>); 11] = [
            (DType::I64, vec![]),
            (DType::I64, vec![]),
            (float, vec![nr, 3]),
            (float, vec![]),
            (DType::I64, vec![]),
            (DType::I64, vec![]),
            (DType::I64, vec![]),
            (float, vec![na, 3]),
            (float, vec![na, 3]),
            (float, vec![na, 3]),
            (float, vec![]),
        ];
        for (name, (dtype, rest)) in aenet_derivative_fields().iter().zip(rests) {
            field(name, dtype, rest, nullable);
        }
    }
    Ok(Schema { fields })
}

impl SampleSource for AenetSource {
    fn kind(&self) -> CacheKind {
        CacheKind::AenetHdf5
    }
    fn path(&self) -> &Path {
        self.cache.path()
    }
    fn schema(&self) -> &Schema {
        &self.schema
    }
    fn keys(&self) -> Result<Vec<String>, CliError> {
        Ok(self.entries.iter().map(i64::to_string).collect())
    }
    fn get(&self, key: &str) -> Result<Option<Sample>, CliError> {
        let Ok(entry) = key.parse::<i64>() else { return Ok(None) };
        if self.entries.binary_search(&entry).is_err() {
            return Ok(None);
        }
        let float = self.cache.signature().storage_dtype;
        let mut sample = Sample::new();
        if self.cache.has_features() {
            let features = self.cache.features(entry)?;
            sample.insert(AENET_FEATURES, features.map_or(Value::Null, Value::Tensor));
        }
        if self.cache.has_derivatives() {
            let names = aenet_derivative_fields();
            match self.cache.derivatives(entry)? {
                Some(d) => {
                    for (name, (_, array)) in names.iter().zip(d.named_arrays()) {
                        // A single-species descriptor stores no typespin: an empty (0,) array,
                        // as aenet's loader returns it.
                        let array = match array {
                            Some(array) => array,
                            None => Tensor::zeros(float.dtype(), &[0])?,
                        };
                        sample.insert(name.as_str(), array);
                    }
                }
                None => names.iter().for_each(|name| sample.insert(name.as_str(), Value::Null)),
            }
        }
        Ok(Some(sample))
    }
}
