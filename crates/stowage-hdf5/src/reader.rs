//! Reading the `/torch_cache` of an aenet dataset file (v2) or its legacy `/force_derivatives`
//! (v1), the way aenet's PyTables loader does: index row by entry, then the payload rows, reshaped
//! with the index counts.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use hdf5::Group;
use stowage_core::{Error, Result, Tensor};

use crate::attributes::Attributes;
use crate::columns::{ColumnReader, i64s};
use crate::compat::{DescriptorCompat, StorageDtype};
use crate::derivatives::{AngularDerivatives, LocalDerivatives, RadialDerivatives};
use crate::direct::MappedFile;
use crate::error::read_error;
use crate::ffi::Element;
use crate::index_tables::{DerivativeIndexRow, FeatureIndexRow, read_index};
use crate::layout::{self, attr};

/// Which layout a file's cache has.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CacheVersion {
    /// `/torch_cache` (schema version 2): features and/or derivatives.
    V2,
    /// Legacy `/force_derivatives` at the root (schema version 1): derivatives only.
    V1Legacy,
}

/// The compatibility signature and storage type a cache was written with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CacheSignature {
    /// `descriptor_compat_json`.
    pub compat_json: String,
    /// `descriptor_compat_sha256`.
    pub compat_sha256: String,
    /// `storage_dtype`.
    pub storage_dtype: StorageDtype,
}

/// The derivative section's own attributes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DerivativeLayout {
    /// `n_radial_features`.
    pub n_radial_features: usize,
    /// `n_angular_features`.
    pub n_angular_features: usize,
    /// `multi`: typespin arrays are stored (and returned).
    pub multi: bool,
}

/// How [`TorchCache`] reads the variable-length rows.
///
/// ```
/// assert_eq!(stowage_hdf5::ReadPath::default(), stowage_hdf5::ReadPath::Direct);
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum ReadPath {
    /// From a memory map of the file, chunks and global heap decoded by stowage with every byte
    /// bounds-checked (see [`crate::ffi::storage`] for what libhdf5 is still asked); datasets in
    /// a layout it does not decode are read through libhdf5.
    #[default]
    Direct,
    /// Every row through libhdf5's `H5Dread` conversion path: slower, for cross-checks.
    Libhdf5,
}

/// The element type rows of `dtype` are read as.
fn float_element(dtype: StorageDtype) -> Element {
    match dtype {
        StorageDtype::Float32 => Element::F32,
        StorageDtype::Float64 => Element::F64,
    }
}

/// Row `row` of a float column as a tensor of `dtype` and `shape` (element count checked).
fn read_floats(
    column: &ColumnReader,
    row: u64,
    dtype: StorageDtype,
    shape: Vec<usize>,
    what: &str,
) -> Result<Tensor> {
    let bytes = column.read_exact(row, float_element(dtype), shape.iter().product(), what)?;
    Tensor::new(dtype.dtype(), shape, bytes)
}

struct FeatureSection {
    by_entry: HashMap<i64, FeatureIndexRow>,
    values: ColumnReader,
}

struct DerivativeSection {
    layout: DerivativeLayout,
    by_entry: HashMap<i64, DerivativeIndexRow>,
    index_columns: [ColumnReader; 5],
    float_columns: [ColumnReader; 6],
}

/// Whether a float column is read without libhdf5 at both dtypes.
fn floats_read_directly(column: &ColumnReader) -> bool {
    column.reads_directly(Element::F32) && column.reads_directly(Element::F64)
}

/// An open torch cache: look up cached features and derivatives by entry index.
///
/// ```no_run
/// use stowage_hdf5::{DescriptorCompat, StorageDtype, TorchCache};
/// let cache = TorchCache::open("dataset.h5")?.expect("the file holds a cache");
/// cache.check_compatible(&DescriptorCompat::chebyshev(&["A", "B"], 1, 2.0, 0, 2.0, 0.1))?;
/// if let Some(features) = cache.features_as(0, StorageDtype::Float32)? {
///     println!("{:?}", features.shape()); // (n_atoms, n_features)
/// }
/// # Ok::<(), stowage_core::Error>(())
/// ```
pub struct TorchCache {
    path: PathBuf,
    version: CacheVersion,
    signature: CacheSignature,
    features: Option<FeatureSection>,
    derivatives: Option<DerivativeSection>,
    // Declared last: the datasets above close before the file.
    _file: hdf5::File,
}

/// Opens the payload datasets of one file, to be read from its map when there is one.
struct Columns<'a> {
    path: &'a Path,
    mapped: Option<&'a Arc<MappedFile>>,
}

impl Columns<'_> {
    fn open(&self, group: &Group, name: &str) -> Result<ColumnReader> {
        ColumnReader::open(self.path, group, name, self.mapped)
    }
}

/// Parses `storage_dtype` with the error naming the file.
fn storage_dtype(file: &Path, attributes: &Attributes<'_>) -> Result<StorageDtype> {
    let name = attributes.text(attr::STORAGE_DTYPE)?;
    StorageDtype::from_name(&name).map_err(|e| Error::corrupted(file, e.to_string()))
}

fn signature(file: &Path, attributes: &Attributes<'_>) -> Result<CacheSignature> {
    Ok(CacheSignature {
        compat_json: attributes.text(attr::COMPAT_JSON)?,
        compat_sha256: attributes.text(attr::COMPAT_SHA256)?,
        storage_dtype: storage_dtype(file, attributes)?,
    })
}

fn unsupported_version(file: &Path, found: i64, expected: i64) -> Error {
    Error::Incompatible {
        path: file.to_path_buf(),
        detail: format!("Unsupported torch cache schema version {found}; expected {expected}"),
    }
}

/// Counts from an index row as sizes; negative counts are damage.
fn count(file: &Path, value: i32, what: &str, entry: i64) -> Result<usize> {
    usize::try_from(value)
        .map_err(|_| Error::corrupted(file, format!("entry {entry}: {what} is {value}")))
}

/// Maps entry index -> index row, checking each row points at an existing payload row.
fn by_entry<T: Copy>(
    file: &Path,
    section: &str,
    rows: Vec<T>,
    payload_rows: u64,
    key: impl Fn(&T) -> (i64, i64),
) -> Result<HashMap<i64, T>> {
    let mut map = HashMap::with_capacity(rows.len());
    for row in rows {
        let (entry, cache_row) = key(&row);
        if cache_row < 0 || cache_row as u64 >= payload_rows {
            return Err(Error::corrupted(
                file,
                format!(
                    "{section}/index: entry {entry} has cache_row {cache_row}, the payload has \
                     {payload_rows} rows"
                ),
            ));
        }
        if map.insert(entry, row).is_some() {
            return Err(Error::corrupted(
                file,
                format!("{section}/index lists entry {entry} twice"),
            ));
        }
    }
    Ok(map)
}

impl TorchCache {
    /// Opens the cache in the HDF5 file at `path`: `Ok(None)` when the file holds none (neither
    /// `/torch_cache` nor a legacy `/force_derivatives`).
    ///
    /// Errors: `Error::Incompatible` with aenet's messages for a wrong `schema_version`
    /// ("Unsupported torch cache schema version X; expected 2") or `cache_format`
    /// ("Unsupported torch cache format '...'"), or an unknown derivative `payload_format`;
    /// `Error::Corrupted` naming the file for anything libhdf5 or the layout checks refuse;
    /// `Error::NotFound` when the file does not exist.
    pub fn open(path: impl AsRef<Path>) -> Result<Option<TorchCache>> {
        Self::open_with(path, ReadPath::Direct)
    }

    /// Like [`TorchCache::open`], reading rows the way `read_path` says.
    pub fn open_with(path: impl AsRef<Path>, read_path: ReadPath) -> Result<Option<TorchCache>> {
        let path = path.as_ref();
        if !path.is_file() {
            return Err(Error::NotFound { what: format!("HDF5 file {}", path.display()) });
        }
        let file = hdf5::File::open(path).map_err(|e| read_error(path, "opening", e))?;
        let mapped = match read_path {
            ReadPath::Direct => MappedFile::open(path, &file)?,
            ReadPath::Libhdf5 => None,
        };
        let columns = Columns { path, mapped: mapped.as_ref() };
        let exists = |name: &str| file.link_exists(name);
        let (version, group) = if exists(layout::TORCH_CACHE) {
            (CacheVersion::V2, layout::TORCH_CACHE)
        } else if exists(layout::LEGACY_DERIVATIVES) {
            (CacheVersion::V1Legacy, layout::LEGACY_DERIVATIVES)
        } else {
            return Ok(None);
        };
        let root = file.group(group).map_err(|e| read_error(path, group, e))?;
        let attributes = Attributes { file: path, object: &root };
        let (signature, features, derivatives) = match version {
            CacheVersion::V2 => {
                let found = attributes.int(attr::SCHEMA_VERSION)?;
                if found != layout::CACHE_SCHEMA_VERSION {
                    return Err(unsupported_version(path, found, layout::CACHE_SCHEMA_VERSION));
                }
                let format = attributes.text(attr::CACHE_FORMAT)?;
                if format != layout::CACHE_FORMAT_V2 {
                    return Err(Error::Incompatible {
                        path: path.to_path_buf(),
                        detail: format!("Unsupported torch cache format '{format}'"),
                    });
                }
                let signature = signature(path, &attributes)?;
                let features = if attributes.flag(attr::CONTAINS_FEATURES)? {
                    let group = root
                        .group(layout::FEATURES)
                        .map_err(|e| read_error(path, "contains_features is true but", e))?;
                    Some(Self::open_features(&columns, &group)?)
                } else {
                    None
                };
                let derivatives = if attributes.flag(attr::CONTAINS_DERIVATIVES)? {
                    let group = root.group(layout::DERIVATIVES).map_err(|e| {
                        read_error(path, "contains_force_derivatives is true but", e)
                    })?;
                    Some(Self::open_derivatives(&columns, &group)?)
                } else {
                    None
                };
                (signature, features, derivatives)
            }
            CacheVersion::V1Legacy => {
                let found = attributes.int(attr::SCHEMA_VERSION)?;
                if found != layout::DERIVATIVE_SCHEMA_VERSION {
                    return Err(unsupported_version(
                        path,
                        found,
                        layout::DERIVATIVE_SCHEMA_VERSION,
                    ));
                }
                (
                    signature(path, &attributes)?,
                    None,
                    Some(Self::open_derivatives(&columns, &root)?),
                )
            }
        };
        Ok(Some(TorchCache {
            path: path.to_path_buf(),
            version,
            signature,
            // A section with zero rows reports absent, as aenet's loader does.
            features: features.filter(|s| !s.by_entry.is_empty()),
            derivatives: derivatives.filter(|s| !s.by_entry.is_empty()),
            _file: file,
        }))
    }

    fn open_features(columns: &Columns<'_>, group: &Group) -> Result<FeatureSection> {
        let path = columns.path;
        let values = columns.open(group, layout::VALUES)?;
        let rows = read_index::<FeatureIndexRow>(path, group)?;
        let by_entry =
            by_entry(path, "features", rows, values.rows(), |r| (r.entry_idx, r.cache_row))?;
        Ok(FeatureSection { by_entry, values })
    }

    fn open_derivatives(columns: &Columns<'_>, group: &Group) -> Result<DerivativeSection> {
        let path = columns.path;
        let attributes = Attributes { file: path, object: group };
        let format = attributes.text(attr::PAYLOAD_FORMAT)?;
        if format != layout::DERIVATIVE_PAYLOAD_FORMAT {
            return Err(Error::Incompatible {
                path: path.to_path_buf(),
                detail: format!(
                    "Unsupported force derivative payload format '{format}'; expected '{}'",
                    layout::DERIVATIVE_PAYLOAD_FORMAT
                ),
            });
        }
        let feature_count = |name| {
            let value = attributes.int(name)?;
            usize::try_from(value).ok().filter(|&n| n > 0).ok_or_else(|| {
                Error::corrupted(path, format!("{} attribute {name} is {value}", group.name()))
            })
        };
        let layout = DerivativeLayout {
            n_radial_features: feature_count(attr::N_RADIAL_FEATURES)?,
            n_angular_features: feature_count(attr::N_ANGULAR_FEATURES)?,
            multi: attributes.flag(attr::MULTI)?,
        };
        let [c, n, dg, nts, ac, aj, ak, gi, gj, gk, tts] = layout::DERIVATIVE_ARRAYS;
        let open = |name| columns.open(group, name);
        let index_columns = [open(c)?, open(n)?, open(ac)?, open(aj)?, open(ak)?];
        let float_columns = [open(dg)?, open(nts)?, open(gi)?, open(gj)?, open(gk)?, open(tts)?];
        // The 11 datasets and the index stay in lockstep: a shorter one is damage.
        let payload_rows =
            index_columns.iter().chain(&float_columns).map(ColumnReader::rows).min().unwrap_or(0);
        let rows = read_index::<DerivativeIndexRow>(path, group)?;
        let by_entry =
            by_entry(path, &group.name(), rows, payload_rows, |r| (r.entry_idx, r.cache_row))?;
        Ok(DerivativeSection { layout, by_entry, index_columns, float_columns })
    }

    /// Whether every row of the cache is read without libhdf5 ([`ReadPath::Direct`] on a file in
    /// the layout aenet and stowage write), at the stored dtype and cast.
    pub fn reads_directly(&self) -> bool {
        let features = self.features.as_ref().is_none_or(|s| floats_read_directly(&s.values));
        let derivatives = self.derivatives.as_ref().is_none_or(|s| {
            s.index_columns.iter().all(|c| c.reads_directly(Element::I64))
                && s.float_columns.iter().all(floats_read_directly)
        });
        (self.features.is_some() || self.derivatives.is_some()) && features && derivatives
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// v2 or legacy v1.
    pub fn version(&self) -> CacheVersion {
        self.version
    }

    /// The stored compatibility signature and storage dtype (from the root in v2, from the
    /// derivative group in v1).
    pub fn signature(&self) -> &CacheSignature {
        &self.signature
    }

    /// The derivative section's attributes, when it is present.
    pub fn derivative_layout(&self) -> Option<DerivativeLayout> {
        self.derivatives.as_ref().map(|d| d.layout)
    }

    /// Whether a feature section with at least one row is present.
    pub fn has_features(&self) -> bool {
        self.features.is_some()
    }

    /// Whether a derivative section with at least one row is present.
    pub fn has_derivatives(&self) -> bool {
        self.derivatives.is_some()
    }

    /// Entry indices with cached features, ascending.
    pub fn feature_entries(&self) -> Vec<i64> {
        sorted_keys(self.features.as_ref().map(|s| &s.by_entry))
    }

    /// Entry indices with cached derivatives, ascending.
    pub fn derivative_entries(&self) -> Vec<i64> {
        sorted_keys(self.derivatives.as_ref().map(|s| &s.by_entry))
    }

    /// Compares the stored `descriptor_compat_sha256` with `compat`'s (dtype is not part of it).
    ///
    /// Errors: `Error::Incompatible` starting with aenet's message "incompatible persisted
    /// cache; rebuild with matching species/order/cutoff settings", then both signatures.
    pub fn check_compatible(&self, compat: &DescriptorCompat) -> Result<()> {
        let expected = compat.sha256();
        if self.signature.compat_sha256 == expected {
            return Ok(());
        }
        Err(Error::Incompatible {
            path: self.path.clone(),
            detail: format!(
                "incompatible persisted cache; rebuild with matching species/order/cutoff \
                 settings (stored descriptor_compat_sha256 {} for {}, descriptor {expected} for {})",
                self.signature.compat_sha256,
                self.signature.compat_json,
                compat.json()
            ),
        })
    }

    /// Entry `entry_idx`'s feature matrix `(n_atoms, n_features)` at the stored dtype, or `None`
    /// when the entry has no cached row.
    pub fn features(&self, entry_idx: i64) -> Result<Option<Tensor>> {
        self.features_as(entry_idx, self.signature.storage_dtype)
    }

    /// Like [`TorchCache::features`], cast to `dtype` (float32 <-> float64).
    pub fn features_as(&self, entry_idx: i64, dtype: StorageDtype) -> Result<Option<Tensor>> {
        let Some(section) = &self.features else { return Ok(None) };
        let Some(row) = section.by_entry.get(&entry_idx).copied() else { return Ok(None) };
        let what = format!("features of entry {entry_idx}");
        let n_atoms = count(&self.path, row.n_atoms, "n_atoms", entry_idx)?;
        let n_features = count(&self.path, row.n_features, "n_features", entry_idx)?;
        let shape = vec![n_atoms, n_features];
        read_floats(&section.values, row.cache_row as u64, dtype, shape, &what).map(Some)
    }

    /// Entry `entry_idx`'s local derivatives at the stored dtype, or `None` when the entry has no
    /// cached row. Typespin arrays are returned only when the section's `multi` is true.
    pub fn derivatives(&self, entry_idx: i64) -> Result<Option<LocalDerivatives>> {
        self.derivatives_as(entry_idx, self.signature.storage_dtype)
    }

    /// Like [`TorchCache::derivatives`], float arrays cast to `dtype`.
    pub fn derivatives_as(
        &self,
        entry_idx: i64,
        dtype: StorageDtype,
    ) -> Result<Option<LocalDerivatives>> {
        let Some(section) = &self.derivatives else { return Ok(None) };
        let Some(row) = section.by_entry.get(&entry_idx).copied() else { return Ok(None) };
        let path = &self.path;
        let cache_row = row.cache_row as u64;
        let e = count(path, row.n_radial_edges, "n_radial_edges", entry_idx)?;
        let t = count(path, row.n_angular_triplets, "n_angular_triplets", entry_idx)?;
        let n_atoms = count(path, row.n_atoms, "n_atoms", entry_idx)?;
        let DerivativeLayout { n_radial_features: nr, n_angular_features: na, multi } =
            section.layout;
        let what = format!("derivatives of entry {entry_idx}");
        let ints = |i: usize, n: usize| -> Result<Vec<i64>> {
            let column = &section.index_columns[i];
            Ok(i64s(&column.read_exact(cache_row, Element::I64, n, &what)?))
        };
        let floats = |i: usize, shape: Vec<usize>| {
            read_floats(&section.float_columns[i], cache_row, dtype, shape, &what)
        };
        let typespin = |i: usize, n: usize| multi.then(|| floats(i, vec![n])).transpose();
        Ok(Some(LocalDerivatives {
            n_atoms,
            radial: RadialDerivatives {
                center_idx: ints(0, e)?,
                neighbor_idx: ints(1, e)?,
                dg_drij: floats(0, vec![e, nr, 3])?,
                neighbor_typespin: typespin(1, e)?,
            },
            angular: AngularDerivatives {
                center_idx: ints(2, t)?,
                neighbor_j_idx: ints(3, t)?,
                neighbor_k_idx: ints(4, t)?,
                grads_i: floats(2, vec![t, na, 3])?,
                grads_j: floats(3, vec![t, na, 3])?,
                grads_k: floats(4, vec![t, na, 3])?,
                triplet_typespin: typespin(5, t)?,
            },
        }))
    }
}

fn sorted_keys<T>(map: Option<&HashMap<i64, T>>) -> Vec<i64> {
    let mut keys: Vec<i64> = map.map(|m| m.keys().copied().collect()).unwrap_or_default();
    keys.sort_unstable();
    keys
}
