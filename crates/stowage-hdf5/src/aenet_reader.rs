//! [`AenetReader`]: an aenet dataset file's torch cache behind the core's [`Reader`], so that a
//! tool reads it by key like any other cache.
//!
//! Keys are the entry indices with a cached row (features, derivatives or both), in decimal. A
//! sample holds [`AENET_FEATURES`] and the 11 derivative arrays ([`aenet_derivative_fields`]),
//! null where the entry has no row of that section.

use std::path::Path;

use stowage_core::{
    Capabilities, DType, Error, FieldKind, FieldSpec, Format, Reader, Result, Sample, Schema,
    ShapeRule, Tensor, ValidationLevel, ValidationReport, Value,
};

use crate::error::BACKEND;
use crate::formats::{AENET_HDF5, is_hdf5_file};
use crate::layout::DERIVATIVE_ARRAYS;
use crate::reader::TorchCache;

/// The feature matrix's field name in an aenet sample.
pub const AENET_FEATURES: &str = "features";

/// The field names of the 11 derivative arrays: aenet's dataset names with `/` as `_`
/// (`radial_dG_drij`), in [`crate::layout::DERIVATIVE_ARRAYS`] order.
///
/// ```
/// assert_eq!(stowage_hdf5::aenet_derivative_fields()[2], "radial_dG_drij");
/// ```
pub fn aenet_derivative_fields() -> [String; 11] {
    DERIVATIVE_ARRAYS.map(|name| name.replace('/', "_"))
}

/// An aenet dataset file's torch cache, read by key.
///
/// ```
/// use stowage_core::{Reader, Tensor};
/// use stowage_hdf5::{AenetReader, CacheSections, DescriptorCompat, StorageDtype, TorchCacheWriter};
///
/// let dir = tempfile::tempdir()?;
/// let path = dir.path().join("dataset.h5");
/// let compat = DescriptorCompat::chebyshev(&["A", "B"], 1, 2.0, 0, 2.0, 0.1);
/// let mut writer =
///     TorchCacheWriter::create(&path, &compat, StorageDtype::Float64, CacheSections::default())?;
/// writer.add_features(4, &Tensor::from_slice(&[2, 6], &[0.5f64; 12])?)?;
/// writer.finish()?;
///
/// let reader = AenetReader::open(&path)?;
/// assert_eq!(reader.keys()?, ["4"]);
/// let sample = reader.get("4")?.expect("entry 4 is cached");
/// assert_eq!(sample.tensor(stowage_hdf5::AENET_FEATURES).unwrap().shape(), &[2, 6]);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct AenetReader {
    cache: TorchCache,
    /// Entries with a feature or derivative row, ascending.
    entries: Vec<i64>,
    schema: Schema,
    capabilities: Capabilities,
}

impl AenetReader {
    /// Opens the torch cache of the HDF5 dataset file `path`.
    ///
    /// Errors: `Error::NotFound` when the file does not exist, is not an HDF5 file or holds no
    /// torch cache; the errors of [`TorchCache::open`] when its cache does not open;
    /// `Error::Corrupted` naming the file and the entry when no feature row of the first 16
    /// reads (the feature width comes from one).
    pub fn open(path: &Path) -> Result<AenetReader> {
        let len = std::fs::metadata(path).map(|m| m.len()).unwrap_or(0);
        if path.is_file() {
            // A file the operating system refuses is `Error::Io`, not one without the signature.
            drop(crate::open_file::open_std(path)?);
        }
        if path.is_file() && !is_hdf5_file(path, len) {
            return Err(Error::NotFound {
                what: format!(
                    "{} in {}: the file does not start with the HDF5 signature",
                    AENET_HDF5.description,
                    path.display()
                ),
            });
        }
        let cache = TorchCache::open(path)?.ok_or_else(|| Error::NotFound {
            what: format!(
                "{} in {} (an HDF5 file without /torch_cache or /force_derivatives)",
                AENET_HDF5.description,
                path.display()
            ),
        })?;
        let (features, derivatives) = (cache.feature_entries(), cache.derivative_entries());
        let mut entries: Vec<i64> = features.iter().chain(&derivatives).copied().collect();
        entries.sort_unstable();
        entries.dedup();
        let schema = aenet_schema(&cache, &features, &derivatives, entries.len())?;
        Ok(AenetReader { cache, entries, schema, capabilities: aenet_capabilities() })
    }

    /// The entry indices with a cached row, ascending.
    pub fn entries(&self) -> &[i64] {
        &self.entries
    }

    /// The torch cache, for what only aenet's layout has (signature, derivative layout, rows by
    /// entry at another dtype).
    pub fn cache(&self) -> &TorchCache {
        &self.cache
    }

    /// The entry `key` names, when it is one with a cached row. Only the decimal form
    /// [`Reader::keys`] lists names it (`"7"`, not `"07"` or `"+7"`).
    fn entry(&self, key: &str) -> Option<i64> {
        let entry = key.parse::<i64>().ok()?;
        let canonical = entry.to_string() == key;
        (canonical && self.entries.binary_search(&entry).is_ok()).then_some(entry)
    }

    /// The sample of `entry`, which has a cached row.
    fn sample(&self, entry: i64) -> Result<Sample> {
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
        Ok(sample)
    }
}

/// What reading an aenet cache supports: ragged float and index arrays, null sections, several
/// threads at once. It writes nothing, and only the rows stowage wrote carry checksums, so
/// `checksums` is not declared.
fn aenet_capabilities() -> Capabilities {
    let mut capabilities = Capabilities::none();
    capabilities.ragged = true;
    capabilities.nullable = true;
    capabilities.concurrent_readers = true;
    capabilities.dtypes = vec![DType::F32, DType::F64, DType::I64];
    capabilities
}

/// What an aenet cache's samples hold: features `(n_atoms, F)` and the derivative arrays, each
/// ragged in its leading dimension (atoms, edges or triplets), at the storage dtype; a section
/// some entries lack is nullable.
fn aenet_schema(
    cache: &TorchCache,
    features: &[i64],
    derivatives: &[i64],
    entries: usize,
) -> Result<Schema> {
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
        // `validate` from the others (validate reports it).
        let mut rows = features.iter().take(16).map(|&entry| cache.features(entry));
        let read = rows
            .find(Result::is_ok)
            .unwrap_or_else(|| cache.features(first).map_err(|e| e.for_key(&first.to_string())))?;
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

impl Reader for AenetReader {
    fn name(&self) -> &'static str {
        BACKEND
    }

    fn format(&self) -> &'static Format {
        &AENET_HDF5
    }

    fn capabilities(&self) -> &Capabilities {
        &self.capabilities
    }

    fn schema(&self) -> &Schema {
        &self.schema
    }

    fn path(&self) -> &Path {
        self.cache.path()
    }

    fn get(&self, key: &str) -> Result<Option<Sample>> {
        match self.entry(key) {
            Some(entry) => self.sample(entry).map(Some).map_err(|e| e.for_key(key)),
            None => Ok(None),
        }
    }

    fn contains(&self, key: &str) -> Result<bool> {
        Ok(self.entry(key).is_some())
    }

    fn len(&self) -> usize {
        self.entries.len()
    }

    fn keys(&self) -> Result<Vec<String>> {
        Ok(self.entries.iter().map(i64::to_string).collect())
    }

    /// Always true: an aenet cache has no finalize step, the rows the file holds are the cache.
    fn is_finalized(&self) -> bool {
        true
    }

    fn validate(&self, level: ValidationLevel) -> Result<ValidationReport> {
        Ok(self.cache.check(level))
    }

    /// The structure check once, then every selected entry's features and derivatives read, in
    /// runs of entries (`check_plan` module).
    fn check_plan(
        &self,
        selection: &stowage_core::check_plan::Selection,
    ) -> Result<stowage_core::check_plan::CheckPlan<'_>> {
        crate::check_plan::aenet_plan(self, selection)
    }

    /// The torch cache's version, signature, sections and checksums.
    fn describe(&self) -> Result<stowage_core::describe::Description> {
        crate::describe::describe_aenet(self)
    }
}
