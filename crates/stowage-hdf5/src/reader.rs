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
use crate::ffi::helper::ChildFailure;
use crate::index_tables::{DerivativeIndexRow, FeatureIndexRow, read_index};
use crate::layout::{self, attr};
use crate::row_checksums::{self, Coverage};

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
    /// bounds-checked (see `crate::ffi::storage` for what libhdf5 is still asked); datasets in
    /// a layout it does not decode are read through libhdf5.
    #[default]
    Direct,
    /// Every row through libhdf5's `H5Dread` conversion path: slower, for cross-checks. Each
    /// row's global heap reference is checked by stowage before libhdf5 follows it (a damaged
    /// one is `Error::Corrupted`, never a crash in libhdf5); rows in a layout stowage cannot
    /// check (other filters, contiguous storage, other drivers) are refused.
    Libhdf5,
}

/// The element type rows of `dtype` are read as.
pub(crate) fn float_element(dtype: StorageDtype) -> Element {
    match dtype {
        StorageDtype::Float32 => Element::F32,
        StorageDtype::Float64 => Element::F64,
    }
}

/// Float `bytes` stored as `from` as the bytes of `to` values (cast as torch's `.to(dtype)`
/// does: rounding to nearest, overflow to infinity).
pub(crate) fn cast_floats(bytes: Vec<u8>, from: StorageDtype, to: StorageDtype) -> Vec<u8> {
    match (from, to) {
        (StorageDtype::Float64, StorageDtype::Float32) => bytes
            .chunks_exact(8)
            .flat_map(|c| (f64::from_le_bytes(c.try_into().expect("8 bytes")) as f32).to_le_bytes())
            .collect(),
        (StorageDtype::Float32, StorageDtype::Float64) => bytes
            .chunks_exact(4)
            .flat_map(|c| {
                f64::from(f32::from_le_bytes(c.try_into().expect("4 bytes"))).to_le_bytes()
            })
            .collect(),
        _ => bytes,
    }
}

/// The element type array `i` of [`layout::DERIVATIVE_ARRAYS`] is stored as: int64 indices,
/// floats of the storage dtype.
pub(crate) fn derivative_element(i: usize, storage: StorageDtype) -> Element {
    if layout::DERIVATIVE_ARRAYS[i].ends_with("_idx") {
        Element::I64
    } else {
        float_element(storage)
    }
}

/// One section of the cache: its index table in stored order, the entry each index row is for,
/// and which rows stowage's checksums cover.
pub(crate) struct SectionIndex<T> {
    /// The index table, in stored order.
    pub rows: Vec<T>,
    /// Entry index -> position in `rows`.
    pub by_entry: HashMap<i64, usize>,
    /// Per position in `rows`: the checksum stowage recorded, `None` where another writer
    /// added the row.
    pub coverage: Coverage,
}

impl<T> SectionIndex<T> {
    fn uncovered(&self) -> impl Iterator<Item = usize> + '_ {
        self.coverage.iter().enumerate().filter(|(_, sum)| sum.is_none()).map(|(row, _)| row)
    }
}

pub(crate) struct FeatureSection {
    pub index: SectionIndex<FeatureIndexRow>,
    pub values: ColumnReader,
}

pub(crate) struct DerivativeSection {
    pub layout: DerivativeLayout,
    pub index: SectionIndex<DerivativeIndexRow>,
    /// In [`layout::DERIVATIVE_ARRAYS`] order.
    pub columns: [ColumnReader; 11],
}

/// One derivative index row's payload, as stored.
pub(crate) struct DerivativeRow {
    /// Each array's shape, in [`layout::DERIVATIVE_ARRAYS`] order (`None` for typespin when not
    /// `multi`: aenet ignores it then).
    pub shapes: [Option<Vec<usize>>; 11],
    /// Each array's bytes at the stored element type.
    pub arrays: Vec<Vec<u8>>,
}

/// Whether a float column is read without libhdf5 at both dtypes.
fn floats_read_directly(column: &ColumnReader) -> bool {
    column.reads_directly(Element::F32) && column.reads_directly(Element::F64)
}

/// An open torch cache: look up cached features and derivatives by entry index.
///
/// Rows stowage wrote carry its checksums (in a group aenet ignores): reading one checks its
/// bytes, and damage is `Error::Corrupted`, never data. Rows another writer added (aenet's own
/// per-entry appends, or a file aenet built) are read as aenet reads them and listed by
/// [`TorchCache::unchecked_entries`] until adopted ([`crate::TorchCacheWriter::adopt`]).
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
    /// Present when the cache declares the section, even without rows.
    pub(crate) features: Option<FeatureSection>,
    /// Present when the cache declares the section, even without rows.
    pub(crate) derivatives: Option<DerivativeSection>,
    has_checksums: bool,
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

/// The section index of `rows`: entry -> position, checking each row points at an existing
/// payload row and no entry is listed twice.
fn section_index<T: Copy>(
    file: &Path,
    section: &str,
    rows: Vec<T>,
    payload_rows: u64,
    coverage: Coverage,
    key: impl Fn(&T) -> (i64, i64),
) -> Result<SectionIndex<T>> {
    let mut by_entry = HashMap::with_capacity(rows.len());
    for (position, row) in rows.iter().enumerate() {
        let (entry, cache_row) = key(row);
        if cache_row < 0 || cache_row as u64 >= payload_rows {
            return Err(Error::corrupted(
                file,
                format!(
                    "{section}/index: entry {entry} has cache_row {cache_row}, the payload has \
                     {payload_rows} rows"
                ),
            ));
        }
        if by_entry.insert(entry, position).is_some() {
            return Err(Error::corrupted(
                file,
                format!("{section}/index lists entry {entry} twice"),
            ));
        }
    }
    Ok(SectionIndex { rows, by_entry, coverage })
}

/// The entries of `sections` that have a row stowage's checksums do not cover, ascending.
fn uncovered_entries(
    features: Option<&FeatureSection>,
    derivatives: Option<&DerivativeSection>,
) -> Vec<i64> {
    let mut entries: Vec<i64> = features
        .into_iter()
        .flat_map(|s| s.index.uncovered().map(|row| s.index.rows[row].entry_idx))
        .chain(
            derivatives
                .into_iter()
                .flat_map(|s| s.index.uncovered().map(|row| s.index.rows[row].entry_idx)),
        )
        .collect();
    entries.sort_unstable();
    entries.dedup();
    entries
}

impl TorchCache {
    /// Opens the cache in the HDF5 file at `path`: `Ok(None)` when the file holds none (neither
    /// `/torch_cache` nor a legacy `/force_derivatives`).
    ///
    /// Errors: `Error::Incompatible` with aenet's messages for a wrong `schema_version`
    /// ("Unsupported torch cache schema version X; expected 2") or `cache_format`
    /// ("Unsupported torch cache format '...'"), or an unknown derivative `payload_format` or
    /// stowage checksum format; `Error::Corrupted` naming the file for anything libhdf5 or the
    /// layout checks refuse; `Error::NotFound` when the file does not exist.
    pub fn open(path: impl AsRef<Path>) -> Result<Option<TorchCache>> {
        Self::open_with(path, ReadPath::Direct)
    }

    /// Like [`TorchCache::open`], reading rows the way `read_path` says.
    ///
    /// The file's metadata (superblock, groups, attributes, dataset headers, index tables) is
    /// parsed by libhdf5, which no stowage checksum protects in a file aenet or PyTables wrote,
    /// and which crashes on some damage (use after free, null pointers, endless loops). So the
    /// open is tried first in a forked child process (`ffi::helper`): a crash there is
    /// `Error::Corrupted` naming the file, and only a file the child opened is opened here.
    pub fn open_with(path: impl AsRef<Path>, read_path: ReadPath) -> Result<Option<TorchCache>> {
        let path = path.as_ref();
        if !path.is_file() {
            return Err(Error::NotFound { what: format!("HDF5 file {}", path.display()) });
        }
        // The operating system's refusals first, as `Error::Io` (missing, no permission, no
        // descriptor left), before the child's trial could be read as damage.
        drop(crate::open_file::open_std(path)?);
        crate::ffi::locked(|| {
            crate::ffi::helper::survives_in_child("opening the torch cache", None, || {
                let _ = Self::open_unprobed(path, read_path);
            })
        })
        .map_err(|e| match e {
            // No process or pipe to try it in: a resource error, not the file's.
            ChildFailure::Start(error, _) => Error::io(path, error),
            ChildFailure::Read(failure) => Error::corrupted(path, failure.to_string()),
        })?;
        Self::open_unprobed(path, read_path)
    }

    /// [`TorchCache::open_with`] without the trial in a child process.
    fn open_unprobed(path: &Path, read_path: ReadPath) -> Result<Option<TorchCache>> {
        let file = crate::open_file::open_checked(path, "the dataset file")?;
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
        let (signature, features, derivatives, has_checksums) = match version {
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
                    Some(Self::open_features(&columns, &root, &group)?)
                } else {
                    None
                };
                let derivatives = if attributes.flag(attr::CONTAINS_DERIVATIVES)? {
                    let group = root.group(layout::DERIVATIVES).map_err(|e| {
                        read_error(path, "contains_force_derivatives is true but", e)
                    })?;
                    Some(Self::open_derivatives(&columns, Some(&root), &group)?)
                } else {
                    None
                };
                (signature, features, derivatives, root.link_exists(layout::CHECKSUMS))
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
                // stowage never writes v1: nothing in it is covered by its checksums.
                let derivatives = Self::open_derivatives(&columns, None, &root)?;
                (signature(path, &attributes)?, None, Some(derivatives), false)
            }
        };
        Ok(Some(TorchCache {
            path: path.to_path_buf(),
            version,
            signature,
            features,
            derivatives,
            has_checksums,
            _file: file,
        }))
    }

    fn open_features(
        columns: &Columns<'_>,
        cache: &Group,
        group: &Group,
    ) -> Result<FeatureSection> {
        let path = columns.path;
        let values = columns.open(group, layout::VALUES)?;
        let rows = read_index::<FeatureIndexRow>(path, group)?;
        let coverage = row_checksums::read(path, cache, layout::FEATURES, rows.len())?;
        let index = section_index(path, "features", rows, values.rows(), coverage, |r| {
            (r.entry_idx, r.cache_row)
        })?;
        Ok(FeatureSection { index, values })
    }

    /// The derivative section `group`; `cache` is the v2 root holding stowage's checksums (none
    /// for a legacy v1 group).
    fn open_derivatives(
        columns: &Columns<'_>,
        cache: Option<&Group>,
        group: &Group,
    ) -> Result<DerivativeSection> {
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
        let columns: Vec<ColumnReader> = layout::DERIVATIVE_ARRAYS
            .iter()
            .map(|name| columns.open(group, name))
            .collect::<Result<_>>()?;
        let columns: [ColumnReader; 11] = columns.try_into().ok().expect("11 arrays");
        // The 11 datasets and the index stay in lockstep: a shorter one is damage.
        let payload_rows = columns.iter().map(ColumnReader::rows).min().unwrap_or(0);
        let rows = read_index::<DerivativeIndexRow>(path, group)?;
        let coverage = match cache {
            Some(cache) => row_checksums::read(path, cache, layout::DERIVATIVES, rows.len())?,
            None => vec![None; rows.len()],
        };
        let index = section_index(path, &group.name(), rows, payload_rows, coverage, |r| {
            (r.entry_idx, r.cache_row)
        })?;
        Ok(DerivativeSection { layout, index, columns })
    }

    /// Whether every row of the cache is read without libhdf5 ([`ReadPath::Direct`] on a file in
    /// the layout aenet and stowage write), at the stored dtype and cast.
    pub fn reads_directly(&self) -> bool {
        let features = self.features.as_ref().is_none_or(|s| floats_read_directly(&s.values));
        let derivatives = self.derivatives.as_ref().is_none_or(|s| {
            s.columns.iter().enumerate().all(|(i, c)| {
                match derivative_element(i, StorageDtype::Float64) {
                    Element::I64 => c.reads_directly(Element::I64),
                    _ => floats_read_directly(c),
                }
            })
        });
        (self.has_features() || self.has_derivatives()) && features && derivatives
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

    /// The derivative section's attributes, when it holds at least one row.
    pub fn derivative_layout(&self) -> Option<DerivativeLayout> {
        self.derivatives.as_ref().filter(|d| !d.index.rows.is_empty()).map(|d| d.layout)
    }

    /// Whether a feature section with at least one row is present (aenet's
    /// `has_persisted_features`).
    pub fn has_features(&self) -> bool {
        self.features.as_ref().is_some_and(|s| !s.index.rows.is_empty())
    }

    /// Whether a derivative section with at least one row is present (aenet's
    /// `has_persisted_force_derivatives`).
    pub fn has_derivatives(&self) -> bool {
        self.derivatives.as_ref().is_some_and(|s| !s.index.rows.is_empty())
    }

    /// Entry indices with cached features, ascending.
    pub fn feature_entries(&self) -> Vec<i64> {
        sorted_keys(self.features.as_ref().map(|s| &s.index.by_entry))
    }

    /// Entry indices with cached derivatives, ascending.
    pub fn derivative_entries(&self) -> Vec<i64> {
        sorted_keys(self.derivatives.as_ref().map(|s| &s.index.by_entry))
    }

    /// Entry indices with a feature or derivative row, ascending.
    pub fn entries(&self) -> Vec<i64> {
        let mut entries = self.feature_entries();
        entries.extend(self.derivative_entries());
        entries.sort_unstable();
        entries.dedup();
        entries
    }

    /// Whether the file holds stowage's row checksums (`/torch_cache/stowage_checksums`): false
    /// for a cache only aenet wrote, or stowage before it kept them.
    pub fn has_checksums(&self) -> bool {
        self.has_checksums
    }

    /// Entries with a row (features or derivatives) that stowage's checksums do not cover: rows
    /// another writer added, read as stored but not checked. Ascending.
    ///
    /// ```no_run
    /// let cache = stowage_hdf5::TorchCache::open("dataset.h5")?.expect("a cache");
    /// for entry in cache.unchecked_entries() {
    ///     println!("entry {entry} was written by another writer");
    /// }
    /// # Ok::<(), stowage_core::Error>(())
    /// ```
    pub fn unchecked_entries(&self) -> Vec<i64> {
        uncovered_entries(self.features.as_ref(), self.derivatives.as_ref())
    }

    /// Rows stowage's checksums do not cover: `(feature rows, derivative rows)`.
    pub fn unchecked_rows(&self) -> (usize, usize) {
        let features = self.features.as_ref().map_or(0, |s| s.index.uncovered().count());
        let derivatives = self.derivatives.as_ref().map_or(0, |s| s.index.uncovered().count());
        (features, derivatives)
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
    ///
    /// Errors: `Error::Corrupted` naming the file and the entry when the row's values do not
    /// fill its index counts, or (for a row stowage wrote) do not match its checksum.
    pub fn features_as(&self, entry_idx: i64, dtype: StorageDtype) -> Result<Option<Tensor>> {
        let Some(section) = &self.features else { return Ok(None) };
        let Some(&position) = section.index.by_entry.get(&entry_idx) else { return Ok(None) };
        let (shape, bytes) = self.feature_row(section, position)?;
        let bytes = cast_floats(bytes, self.signature.storage_dtype, dtype);
        Tensor::new(dtype.dtype(), shape, bytes).map(Some)
    }

    /// Index row `position` of the feature section: its shape and its values at the stored
    /// dtype, checked against stowage's checksum when it has one.
    pub(crate) fn feature_row(
        &self,
        section: &FeatureSection,
        position: usize,
    ) -> Result<(Vec<usize>, Vec<u8>)> {
        let row = section.index.rows[position];
        let entry = row.entry_idx;
        let what = format!("features of entry {entry}");
        let n_atoms = count(&self.path, row.n_atoms, "n_atoms", entry)?;
        let n_features = count(&self.path, row.n_features, "n_features", entry)?;
        let elements = n_atoms.checked_mul(n_features).ok_or_else(|| {
            Error::corrupted(&self.path, format!("{what}: {n_atoms} x {n_features} values"))
        })?;
        let stored = float_element(self.signature.storage_dtype);
        let bytes = section.values.read_exact(row.cache_row as u64, stored, elements, &what)?;
        if let Some(recorded) = section.index.coverage[position] {
            let computed = row_checksums::feature_checksum(&row, &bytes);
            self.check_sum(&what, "features/index", position, computed, recorded)?;
        }
        Ok((vec![n_atoms, n_features], bytes))
    }

    fn check_sum(
        &self,
        what: &str,
        table: &str,
        position: usize,
        computed: u64,
        recorded: u64,
    ) -> Result<()> {
        if computed == recorded {
            return Ok(());
        }
        Err(Error::corrupted(
            &self.path,
            format!(
                "{what}: xxh3 {computed:016x} of the stored row (index row {position} of \
                 {table}) != {recorded:016x} recorded in {}/{}",
                layout::TORCH_CACHE,
                layout::CHECKSUMS
            ),
        ))
    }

    /// Entry `entry_idx`'s local derivatives at the stored dtype, or `None` when the entry has no
    /// cached row. Typespin arrays are returned only when the section's `multi` is true.
    pub fn derivatives(&self, entry_idx: i64) -> Result<Option<LocalDerivatives>> {
        self.derivatives_as(entry_idx, self.signature.storage_dtype)
    }

    /// Like [`TorchCache::derivatives`], float arrays cast to `dtype`.
    ///
    /// Errors: `Error::Corrupted` naming the file and the entry when an array does not fill its
    /// index counts, or (for a row stowage wrote) the row does not match its checksum.
    pub fn derivatives_as(
        &self,
        entry_idx: i64,
        dtype: StorageDtype,
    ) -> Result<Option<LocalDerivatives>> {
        let Some(section) = &self.derivatives else { return Ok(None) };
        let Some(&position) = section.index.by_entry.get(&entry_idx) else { return Ok(None) };
        let DerivativeRow { shapes, arrays } = self.derivative_row(section, position)?;
        let row = section.index.rows[position];
        let n_atoms = count(&self.path, row.n_atoms, "n_atoms", entry_idx)?;
        let storage = self.signature.storage_dtype;
        let mut ints = Vec::with_capacity(5);
        let mut floats = Vec::with_capacity(6);
        for (i, (bytes, shape)) in arrays.into_iter().zip(shapes).enumerate() {
            match derivative_element(i, storage) {
                Element::I64 => ints.push(i64s(&bytes)),
                // Typespin has no shape unless `multi`: aenet's loader returns None then.
                _ => floats.push(
                    shape
                        .map(|shape| {
                            Tensor::new(dtype.dtype(), shape, cast_floats(bytes, storage, dtype))
                        })
                        .transpose()?,
                ),
            }
        }
        let [center_idx, neighbor_idx, a_center, a_j, a_k]: [Vec<i64>; 5] =
            ints.try_into().expect("5 index arrays");
        let [dg_drij, neighbor_typespin, grads_i, grads_j, grads_k, triplet_typespin]: [Option<
            Tensor,
        >;
            6] = floats.try_into().expect("6 float arrays");
        let shaped = "every float array but typespin has a shape";
        Ok(Some(LocalDerivatives {
            n_atoms,
            radial: RadialDerivatives {
                center_idx,
                neighbor_idx,
                dg_drij: dg_drij.expect(shaped),
                neighbor_typespin,
            },
            angular: AngularDerivatives {
                center_idx: a_center,
                neighbor_j_idx: a_j,
                neighbor_k_idx: a_k,
                grads_i: grads_i.expect(shaped),
                grads_j: grads_j.expect(shaped),
                grads_k: grads_k.expect(shaped),
                triplet_typespin,
            },
        }))
    }

    /// Index row `position` of the derivative section, checked against stowage's checksum when
    /// it has one.
    pub(crate) fn derivative_row(
        &self,
        section: &DerivativeSection,
        position: usize,
    ) -> Result<DerivativeRow> {
        let row = section.index.rows[position];
        let entry = row.entry_idx;
        let path = &self.path;
        let e = count(path, row.n_radial_edges, "n_radial_edges", entry)?;
        let t = count(path, row.n_angular_triplets, "n_angular_triplets", entry)?;
        count(path, row.n_atoms, "n_atoms", entry)?;
        let DerivativeLayout { n_radial_features: nr, n_angular_features: na, multi } =
            section.layout;
        let typespin = |n: usize| multi.then(|| vec![n]);
        let shapes: [Option<Vec<usize>>; 11] = [
            Some(vec![e]),
            Some(vec![e]),
            Some(vec![e, nr, 3]),
            typespin(e),
            Some(vec![t]),
            Some(vec![t]),
            Some(vec![t]),
            Some(vec![t, na, 3]),
            Some(vec![t, na, 3]),
            Some(vec![t, na, 3]),
            typespin(t),
        ];
        let what = format!("derivatives of entry {entry}");
        let storage = self.signature.storage_dtype;
        let cache_row = row.cache_row as u64;
        let arrays = section
            .columns
            .iter()
            .zip(&shapes)
            .enumerate()
            .map(|(i, (column, shape))| {
                let element = derivative_element(i, storage);
                match shape {
                    Some(shape) => {
                        let elements = shape.iter().try_fold(1usize, |n, &d| n.checked_mul(d));
                        let elements = elements.ok_or_else(|| {
                            Error::corrupted(path, format!("{what}: shape {shape:?} overflows"))
                        })?;
                        column.read_exact(cache_row, element, elements, &what)
                    }
                    None => column.read(cache_row, element, &what),
                }
            })
            .collect::<Result<Vec<_>>>()?;
        if let Some(recorded) = section.index.coverage[position] {
            let parts: Vec<&[u8]> = arrays.iter().map(Vec::as_slice).collect();
            let computed = row_checksums::derivative_checksum(&row, &parts);
            self.check_sum(&what, "force_derivatives/index", position, computed, recorded)?;
        }
        Ok(DerivativeRow { shapes, arrays })
    }
}

fn sorted_keys<T>(map: Option<&HashMap<i64, T>>) -> Vec<i64> {
    let mut keys: Vec<i64> = map.map(|m| m.keys().copied().collect()).unwrap_or_default();
    keys.sort_unstable();
    keys
}
