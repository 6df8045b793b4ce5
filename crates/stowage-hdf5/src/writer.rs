//! Writing a `/torch_cache` (v2) into an aenet dataset file, atomically: the new file is built
//! beside the target (the dataset's own groups and root attributes copied as stored, the
//! existing cache's rows carried over, then the new rows), fsynced and renamed over it. A crash
//! leaves the old file or the new one, and the unfinished copy beside it, which the next writer
//! of the file removes (never while its builder lives). The file is written back to disk in the
//! background while it is built, so the final fsync is short.
//!
//! libhdf5 cannot append to a file crash-safely in place (a crash in the middle of an update of
//! its metadata can leave the whole file unreadable), so every write is a rebuild: the cost of a
//! write is the size of the file.

use std::collections::HashSet;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use hdf5::Group;
use stowage_core::bytes::Bytes;
use stowage_core::{Adoption, DType, Error, Result, Tensor};

use crate::carry;
use crate::columns::{ColumnWriter, le_bytes_i64};
use crate::compat::{DescriptorCompat, StorageDtype};
use crate::derivatives::LocalDerivatives;
use crate::direct::HeapFile;
use crate::error::{Hdf5Error, read_error, write_error};
use crate::ffi::{self, Element};
use crate::index_tables::{DerivativeIndexRow, FeatureIndexRow, write_index};
use crate::layout::{self, attr};
use crate::manifest::{DescriptorConfig, DescriptorManifest};
use crate::publish::{TempBeside, Writeback, remove_abandoned_builds};
use crate::reader::{CacheVersion, DerivativeLayout, TorchCache, float_element};
use crate::row_checksums::{self, ChecksumRow, Coverage};

/// Which sections a new cache holds (sections the file's existing cache holds are always kept).
///
/// ```
/// let both = stowage_hdf5::CacheSections::default();
/// assert!(both.features && both.derivatives);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CacheSections {
    /// Write the feature section (`contains_features`).
    pub features: bool,
    /// Write the force-derivative section (`contains_force_derivatives`).
    pub derivatives: bool,
}

impl Default for CacheSections {
    fn default() -> Self {
        CacheSections { features: true, derivatives: true }
    }
}

/// aenet stores the AtomicEnvironment ids as i32 counts; larger values cannot be stored.
fn as_i32(value: usize, what: &str) -> Result<i32> {
    i32::try_from(value).map_err(|_| Error::invalid(format!("{what} {value} does not fit an i32")))
}

/// The bytes of a float tensor as `storage` elements: the tensor's own bytes when the dtypes
/// match (shared, not copied), else cast.
fn float_bytes(tensor: &Tensor, storage: StorageDtype, what: &str) -> Result<Bytes> {
    match (tensor.dtype(), storage) {
        (DType::F64, StorageDtype::Float64) | (DType::F32, StorageDtype::Float32) => {
            Ok(tensor.to_shared_bytes())
        }
        (DType::F32, StorageDtype::Float64) => Ok(tensor
            .to_vec::<f32>()?
            .into_iter()
            .flat_map(|v| f64::from(v).to_le_bytes())
            .collect::<Vec<u8>>()
            .into()),
        (DType::F64, StorageDtype::Float32) => Ok(tensor
            .to_vec::<f64>()?
            .into_iter()
            .flat_map(|v| (v as f32).to_le_bytes())
            .collect::<Vec<u8>>()
            .into()),
        (other, _) => {
            Err(Error::invalid(format!("{what} is {other}, expected float32 or float64")))
        }
    }
}

struct FeatureWriter {
    group: Group,
    index: Vec<FeatureIndexRow>,
    /// Per index row: stowage's checksum, `None` for a carried row another writer added.
    coverage: Coverage,
    values: ColumnWriter,
    entries: HashSet<i64>,
}

struct DerivativeWriter {
    group: Group,
    index: Vec<DerivativeIndexRow>,
    coverage: Coverage,
    /// In [`layout::DERIVATIVE_ARRAYS`] order.
    columns: Vec<ColumnWriter>,
    entries: HashSet<i64>,
}

/// What identifies a file's contents between two looks: replaced (another inode) or written to
/// (size or modification time) in between.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct FileIdentity {
    device: u64,
    inode: u64,
    size: u64,
    modified: (i64, i64),
}

impl FileIdentity {
    fn of(path: &Path) -> Result<Option<FileIdentity>> {
        match std::fs::metadata(path) {
            Ok(m) => Ok(Some(FileIdentity {
                device: m.dev(),
                inode: m.ino(),
                size: m.size(),
                modified: (m.mtime(), m.mtime_nsec()),
            })),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(Error::io(path, e)),
        }
    }
}

/// The target file as the writer found it: held open read-only until the new file is published,
/// so that libhdf5's shared file lock refuses writers that take the exclusive one (aenet's
/// PyTables in mode `'a'`, which would otherwise append rows the rebuild does not carry).
struct Source {
    file: hdf5::File,
}

impl Source {
    /// Opens the target; `Error::Locked` when another process has it open for writing.
    fn open(path: &Path) -> Result<Source> {
        match crate::open_file::open_checked(path, "the dataset file") {
            Ok(file) => Ok(Source { file }),
            // libhdf5's lock refused (`open_file`): a writer of the file is what this writer
            // waits for.
            Err(Error::Io { source, .. }) if source.kind() == std::io::ErrorKind::WouldBlock => {
                Err(Error::Locked { cache: path.to_path_buf(), lock_file: path.to_path_buf() })
            }
            Err(e) => Err(e),
        }
    }
}

/// Builds a v2 torch cache for one aenet dataset file, entry by entry, and publishes it atomically
/// with [`TorchCacheWriter::finish`]. Dropping it unfinished leaves the file untouched.
/// Starting one (and [`TorchCacheWriter::adopt`], when it rebuilds) removes the copies that killed
/// writers of the file left beside it (`.<name>.tmp-<pid>-<n>`), never one a live writer, in any
/// process, is still building.
///
/// An existing target keeps everything, byte for byte as aenet reads it:
/// - what belongs to the dataset (`/entries`, `/descriptor_manifest`, every root attribute such
///   as `energy_filter_*`, a legacy `/force_derivatives`) is copied as stored;
/// - the rows of its cache, aenet's and stowage's, are carried over as stored (same `cache_row`s,
///   same index rows), and new rows are appended after them. An entry that already has a row in
///   a section is refused: stowage never replaces a row. A legacy v1 cache's rows become the
///   derivative section of the new v2 cache (the v1 group is kept as it was; aenet reads v2
///   first).
///
/// Refused before anything is written (`Error::Incompatible`, naming the file and both sides): a
/// `/descriptor_manifest` that contradicts the descriptor (aenet would refuse the file: "Persisted
/// descriptor manifest is incompatible"), an existing cache with another signature, schema
/// version or storage dtype, or one the rebuild could not carry whole (nodes stowage does not
/// know, derivative datasets of unequal lengths). `Error::Locked` when another process has the
/// file open for writing (libhdf5's file lock); the lock stowage then holds keeps aenet's
/// writers out until the new file is published.
///
/// A file without `/descriptor_manifest` gets aenet's manifest of the descriptor
/// ([`DescriptorConfig`]), so that aenet can load the cache without being given a descriptor.
/// Every row stowage writes gets a checksum in `/torch_cache/stowage_checksums`, a group aenet
/// never reads. A target that does not exist gets a file holding only the manifest and the cache
/// (aenet's own loader refuses files without `/entries/structures`; stowage reads them).
///
/// ```
/// use stowage_core::Tensor;
/// use stowage_hdf5::{CacheSections, DescriptorCompat, StorageDtype, TorchCache, TorchCacheWriter};
/// let dir = tempfile::tempdir()?;
/// let path = dir.path().join("dataset.h5");
/// let compat = DescriptorCompat::chebyshev(&["A", "B"], 1, 2.0, 0, 2.0, 0.1);
/// let only_features = CacheSections { features: true, derivatives: false };
/// let mut writer = TorchCacheWriter::create(&path, &compat, StorageDtype::Float64, only_features)?;
/// writer.add_features(0, &Tensor::from_slice(&[2, 6], &[0.5f64; 12])?)?;
/// writer.finish()?;
///
/// // A second writer appends; the first one's row is kept.
/// let mut writer = TorchCacheWriter::create(&path, &compat, StorageDtype::Float64, only_features)?;
/// writer.add_features(1, &Tensor::from_slice(&[1, 6], &[1.5f64; 6])?)?;
/// writer.finish()?;
///
/// let cache = TorchCache::open(&path)?.expect("a cache");
/// let features = cache.features_as(0, StorageDtype::Float32)?.expect("entry 0 is cached");
/// assert_eq!(features.to_vec::<f32>()?, vec![0.5f32; 12]);
/// assert_eq!(cache.feature_entries(), vec![0, 1]);
/// assert!(cache.unchecked_entries().is_empty(), "stowage checksummed both rows");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct TorchCacheWriter {
    target: PathBuf,
    /// `descriptor_compat_json` and `descriptor_compat_sha256`, written as they are.
    signature: (String, String),
    layout: DerivativeLayout,
    storage: StorageDtype,
    features: Option<FeatureWriter>,
    derivatives: Option<DerivativeWriter>,
    /// Entries whose carried rows were newly checksummed (adoption).
    adopted: HashSet<i64>,
    cache: Group,
    file: hdf5::File,
    writeback: Writeback,
    /// The target when the writer started (`None`: it did not exist), held open until publish.
    source: Option<Source>,
    identity: Option<FileIdentity>,
    // Last: removed on drop (after the file is closed) unless published.
    temp: TempBeside,
}

/// What a rebuild is for.
enum Purpose<'a> {
    /// Adding rows for a descriptor.
    Write { config: &'a DescriptorConfig, sections: CacheSections },
    /// Checksumming the rows stowage's checksums do not cover, adding nothing.
    Adopt,
}

impl TorchCacheWriter {
    /// Starts writing the cache of the dataset file `target` for the descriptor `compat`,
    /// storing floats as `storage`; a file without `/descriptor_manifest` gets aenet's manifest
    /// of `compat`'s `ChebyshevDescriptor` on the CPU with dtype `storage`
    /// ([`DescriptorConfig::new`]). See [`TorchCacheWriter::for_descriptor`].
    pub fn create(
        target: impl AsRef<Path>,
        compat: &DescriptorCompat,
        storage: StorageDtype,
        sections: CacheSections,
    ) -> Result<TorchCacheWriter> {
        Self::for_descriptor(target, &DescriptorConfig::new(compat, storage), sections)
    }

    /// Starts writing the cache of the dataset file `target` for the descriptor `config`
    /// describes, storing floats as `config.dtype` (as aenet does). Nothing is visible at
    /// `target` until [`TorchCacheWriter::finish`]; the checks listed on [`TorchCacheWriter`]
    /// run here, before anything is written.
    ///
    /// ```
    /// use stowage_hdf5::{CacheSections, DescriptorCompat, DescriptorConfig, DescriptorManifest};
    /// use stowage_hdf5::{StorageDtype, TorchCacheWriter};
    /// let dir = tempfile::tempdir()?;
    /// let path = dir.path().join("dataset.h5");
    /// let compat = DescriptorCompat::chebyshev(&["A"], 3, 4.0, 2, 3.0, 0.5);
    /// let mut config = DescriptorConfig::new(&compat, StorageDtype::Float32);
    /// config.device = "cuda:0".into();
    /// TorchCacheWriter::for_descriptor(&path, &config, CacheSections::default())?.finish()?;
    /// let manifest = DescriptorManifest::read(&path)?.expect("written with the cache");
    /// assert!(manifest.config_json.contains(r#""device":"cuda:0","dtype":"float32""#));
    ///
    /// // Another descriptor contradicts the file's manifest: refused, nothing written.
    /// let other = DescriptorCompat::chebyshev(&["A"], 3, 5.0, 2, 3.0, 0.5);
    /// let config = DescriptorConfig::new(&other, StorageDtype::Float32);
    /// let refused = TorchCacheWriter::for_descriptor(&path, &config, CacheSections::default());
    /// assert!(refused.is_err());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn for_descriptor(
        target: impl AsRef<Path>,
        config: &DescriptorConfig,
        sections: CacheSections,
    ) -> Result<TorchCacheWriter> {
        Self::rebuild(target.as_ref(), Purpose::Write { config, sections })
    }

    /// Adopts the rows of the cache in `path` that stowage's checksums do not cover (rows aenet
    /// appended, or a cache aenet built): every row is read and checked (rows stowage covers
    /// against their checksums, the others against their index counts), then the file is
    /// rebuilt as [`TorchCacheWriter::finish`] publishes it, with a checksum for every row. From
    /// then on [`TorchCache`] checks them like stowage's own rows: adoption vouches for the bytes
    /// as they are now. Nothing else changes (no manifest is added, no row is added or
    /// replaced); a legacy v1 cache becomes a v2 `/torch_cache` holding its rows (the v1 group is
    /// kept). A cache with nothing to adopt is left untouched.
    ///
    /// Returns the file and the number of entries adopted.
    ///
    /// Errors: `Error::NotFound` when the file or its cache does not exist; `Error::Corrupted`
    /// naming the entry when a row is damaged (nothing is written then); the refusals of
    /// [`TorchCacheWriter::for_descriptor`] for a cache the rebuild could not carry whole.
    ///
    /// ```
    /// use stowage_core::Tensor;
    /// use stowage_hdf5::{CacheSections, DescriptorCompat, StorageDtype, TorchCache, TorchCacheWriter};
    /// let dir = tempfile::tempdir()?;
    /// let path = dir.path().join("dataset.h5");
    /// let compat = DescriptorCompat::chebyshev(&["A", "B"], 1, 2.0, 0, 2.0, 0.1);
    /// let mut writer =
    ///     TorchCacheWriter::create(&path, &compat, StorageDtype::Float64, CacheSections::default())?;
    /// writer.add_features(0, &Tensor::from_slice(&[2, 6], &[0.5f64; 12])?)?;
    /// writer.finish()?;
    /// // Every row is stowage's: nothing to adopt, the file is not rewritten.
    /// assert!(TorchCacheWriter::adopt(&path)?.is_empty());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn adopt(path: impl AsRef<Path>) -> Result<Adoption> {
        let path = path.as_ref();
        let cache = TorchCache::open(path)?.ok_or_else(|| Error::NotFound {
            what: format!(
                "torch cache in {} (neither /torch_cache nor /force_derivatives)",
                path.display()
            ),
        })?;
        if cache.unchecked_entries().is_empty() {
            return Ok(Adoption::default());
        }
        drop(cache);
        let writer = Self::rebuild(path, Purpose::Adopt)?;
        let samples = writer.adopted.len() as u64;
        writer.finish()?;
        Ok(Adoption { files: vec![path.to_path_buf()], samples })
    }

    fn rebuild(target: &Path, purpose: Purpose<'_>) -> Result<TorchCacheWriter> {
        let target = target.to_path_buf();
        let source = match FileIdentity::of(&target)? {
            Some(_) => Some(Source::open(&target)?),
            None => None,
        };
        // Whole copies of the file that killed builds left; a live build's temporary is locked.
        remove_abandoned_builds(&target)?;
        // Taken under the lock the source holds: aenet's writers cannot change it any more.
        let identity = match &source {
            Some(_) => FileIdentity::of(&target)?,
            None => None,
        };
        let existing = match &source {
            Some(_) => TorchCache::open(&target)?,
            None => None,
        };
        let manifest = match &source {
            Some(source) => DescriptorManifest::read_from(&target, &source.file)?,
            None => None,
        };
        let (signature, layout, storage, new_manifest, mut sections, adopt) = match purpose {
            Purpose::Write { config, sections } => {
                let compat = &config.compat;
                if let Some(manifest) = &manifest {
                    manifest.check_matches(&target, compat)?;
                }
                if let Some(cache) = &existing {
                    carry::check_joinable(cache, compat, config.dtype)?;
                }
                let layout = DerivativeLayout {
                    n_radial_features: compat.n_radial_features(),
                    n_angular_features: compat.n_angular_features(),
                    multi: compat.multi(),
                };
                let new_manifest = manifest.is_none().then(|| DescriptorManifest::of(config));
                let signature = (compat.json(), compat.sha256());
                (signature, layout, config.dtype, new_manifest, sections, false)
            }
            Purpose::Adopt => {
                let cache = existing.as_ref().ok_or_else(|| Error::NotFound {
                    what: format!("torch cache in {}", target.display()),
                })?;
                let stored = cache.signature();
                // Without a derivative section none is written, and its layout is never used.
                let layout = cache.derivatives.as_ref().map_or(
                    DerivativeLayout { n_radial_features: 1, n_angular_features: 1, multi: false },
                    |d| d.layout,
                );
                let signature = (stored.compat_json.clone(), stored.compat_sha256.clone());
                let none = CacheSections { features: false, derivatives: false };
                (signature, layout, stored.storage_dtype, None, none, true)
            }
        };
        if let (Some(cache), Some(source)) = (&existing, &source) {
            carry::check_carriable(&source.file, cache)?;
            sections.features |= cache.features.is_some();
            sections.derivatives |= cache.derivatives.is_some();
        }

        let mut temp = TempBeside::new(&target)?;
        let path = temp.path().to_path_buf();
        temp.before_libhdf5_opens()?;
        // No libhdf5 file lock on the private temporary file: a child process forked meanwhile
        // would inherit the descriptor (libhdf5 does not set close-on-exec) and keep the
        // exclusive lock, refusing readers (aenet's too) of the published file until it exits.
        let file = hdf5::File::with_options()
            .with_fapl(|fapl| fapl.file_locking(false))
            .create(&path)
            .map_err(|e| write_error(&path, "creating", e))?;
        let writeback = Writeback::start(&path)?;
        let heap = HeapFile::open(&path, &file)?;
        if let Some(source) = &source {
            copy_dataset_content(&target, &source.file, &file, &path)?;
        }
        if let Some(manifest) = new_manifest {
            manifest.write_to(&path, &file)?;
        }
        let v2_source = source
            .as_ref()
            .filter(|_| existing.as_ref().is_some_and(|c| c.version() == CacheVersion::V2));
        let carry_attributes = |name: &str, group: &Group| match v2_source {
            Some(source) => carry::copy_group_attributes(&source.file, name, group, &path),
            None => Ok(()),
        };
        let cache = file
            .create_group(layout::TORCH_CACHE)
            .map_err(|e| write_error(&path, "creating /torch_cache", e))?;
        carry_attributes(layout::TORCH_CACHE, &cache)?;
        let element = float_element(storage);
        let mut adopted = HashSet::new();
        let features = if sections.features {
            let group = cache
                .create_group(layout::FEATURES)
                .map_err(|e| write_error(&path, "creating the feature group", e))?;
            carry_attributes("torch_cache/features", &group)?;
            let mut values =
                ColumnWriter::create(&path, &group, layout::VALUES, element, heap.as_ref())?;
            let (index, coverage) = match existing.as_ref().filter(|c| c.features.is_some()) {
                Some(cache) => {
                    let carried = carry::features(cache, &mut values, adopt)?;
                    adopted.extend(carried.adopted);
                    (carried.index, carried.coverage)
                }
                None => (Vec::new(), Vec::new()),
            };
            let entries = index.iter().map(|r| r.entry_idx).collect();
            Some(FeatureWriter { group, index, coverage, values, entries })
        } else {
            None
        };
        let derivatives = if sections.derivatives {
            let group = cache
                .create_group(layout::DERIVATIVES)
                .map_err(|e| write_error(&path, "creating the derivative group", e))?;
            carry_attributes("torch_cache/force_derivatives", &group)?;
            for sub in layout::DERIVATIVE_SUBGROUPS {
                let subgroup = group.create_group(sub).map_err(|e| write_error(&path, sub, e))?;
                carry_attributes(&format!("torch_cache/force_derivatives/{sub}"), &subgroup)?;
            }
            let mut columns = layout::DERIVATIVE_ARRAYS
                .iter()
                .map(|name| {
                    let is_index = name.ends_with("_idx");
                    let element = if is_index { Element::I64 } else { element };
                    ColumnWriter::create(&path, &group, name, element, heap.as_ref())
                })
                .collect::<Result<Vec<_>>>()?;
            let (index, coverage) = match existing.as_ref().filter(|c| c.derivatives.is_some()) {
                Some(cache) => {
                    let carried = carry::derivatives(cache, &mut columns, adopt)?;
                    adopted.extend(carried.adopted);
                    (carried.index, carried.coverage)
                }
                None => (Vec::new(), Vec::new()),
            };
            let entries = index.iter().map(|r| r.entry_idx).collect();
            Some(DerivativeWriter { group, index, coverage, columns, entries })
        } else {
            None
        };
        drop(existing);
        Ok(TorchCacheWriter {
            target,
            signature,
            layout,
            storage,
            features,
            derivatives,
            adopted,
            cache,
            file,
            writeback,
            source,
            identity,
            temp,
        })
    }

    /// Adds entry `entry_idx`'s feature matrix `(n_atoms, n_features)` (float32 or float64; cast to
    /// the storage dtype). Its `cache_row` is the number of feature payload rows before it.
    ///
    /// Errors: `Error::InvalidArgument` for another shape or dtype, a cache without the feature
    /// section, or an entry that already has a feature row (in this writer or in the file).
    pub fn add_features(&mut self, entry_idx: i64, features: &Tensor) -> Result<()> {
        let section = self
            .features
            .as_mut()
            .ok_or_else(|| Error::invalid("this cache was created without the feature section"))?;
        let what = format!("features of entry {entry_idx}");
        let &[n_atoms, n_features] = features.shape() else {
            return Err(Error::invalid(format!(
                "{what}: shape {:?}, expected (n_atoms, n_features)",
                features.shape()
            )));
        };
        if section.entries.contains(&entry_idx) {
            return Err(Error::invalid(format!(
                "{what}: the entry already has a feature row in {} (stowage never replaces a row)",
                self.target.display()
            )));
        }
        let row = FeatureIndexRow {
            cache_row: section.values.rows() as i64,
            entry_idx,
            n_atoms: as_i32(n_atoms, "n_atoms")?,
            n_features: as_i32(n_features, "n_features")?,
        };
        let bytes = float_bytes(features, self.storage, &what)?;
        let checksum = row_checksums::feature_checksum(&row, &bytes);
        section.values.push(bytes)?;
        section.entries.insert(entry_idx);
        section.index.push(row);
        section.coverage.push(Some(checksum));
        Ok(())
    }

    /// Adds entry `entry_idx`'s local derivatives, checked against the descriptor's feature counts
    /// and species (typespin exactly when more than one species; an empty row is stored when not).
    ///
    /// Errors: `Error::InvalidArgument` for arrays that do not fit the descriptor, a cache
    /// without the derivative section, or an entry that already has a derivative row.
    pub fn add_derivatives(
        &mut self,
        entry_idx: i64,
        derivatives: &LocalDerivatives,
    ) -> Result<()> {
        let DerivativeLayout { n_radial_features: nr, n_angular_features: na, multi } = self.layout;
        let section = self.derivatives.as_mut().ok_or_else(|| {
            Error::invalid("this cache was created without the force-derivative section")
        })?;
        let what = format!("derivatives of entry {entry_idx}");
        derivatives.check(nr, na, multi).map_err(|e| Error::invalid(format!("{what}: {e}")))?;
        if section.entries.contains(&entry_idx) {
            return Err(Error::invalid(format!(
                "{what}: the entry already has a derivative row in {} (stowage never replaces a \
                 row)",
                self.target.display()
            )));
        }
        let storage = self.storage;
        let floats = |tensor: Option<&Tensor>| -> Result<Bytes> {
            tensor.map_or(Ok(Bytes::new()), |t| float_bytes(t, storage, &what))
        };
        let ints = |values: &[i64]| Bytes::from(le_bytes_i64(values));
        let (r, a) = (&derivatives.radial, &derivatives.angular);
        let rows = [
            ints(&r.center_idx),
            ints(&r.neighbor_idx),
            floats(Some(&r.dg_drij))?,
            floats(r.neighbor_typespin.as_ref())?,
            ints(&a.center_idx),
            ints(&a.neighbor_j_idx),
            ints(&a.neighbor_k_idx),
            floats(Some(&a.grads_i))?,
            floats(Some(&a.grads_j))?,
            floats(Some(&a.grads_k))?,
            floats(a.triplet_typespin.as_ref())?,
        ];
        let index_row = DerivativeIndexRow {
            cache_row: section.columns[0].rows() as i64,
            entry_idx,
            n_angular_triplets: as_i32(derivatives.n_angular_triplets(), "n_angular_triplets")?,
            n_atoms: as_i32(derivatives.n_atoms, "n_atoms")?,
            n_radial_edges: as_i32(derivatives.n_radial_edges(), "n_radial_edges")?,
        };
        let parts: Vec<&[u8]> = rows.iter().map(|row| &row[..]).collect();
        let checksum = row_checksums::derivative_checksum(&index_row, &parts);
        for (column, row) in section.columns.iter_mut().zip(rows) {
            column.push(row)?;
        }
        section.entries.insert(entry_idx);
        section.index.push(index_row);
        section.coverage.push(Some(checksum));
        Ok(())
    }

    /// Writes the index tables, stowage's checksums and the attributes, closes the file, fsyncs
    /// it and renames it over the target (then fsyncs the directory).
    ///
    /// Errors: as for any write, naming the file; and, with nothing published, when the target
    /// was replaced or changed since the writer started (another writer that does not take
    /// libhdf5's file lock): the rows it added would be lost.
    pub fn finish(mut self) -> Result<()> {
        let path = self.temp.path().to_path_buf();
        let (json, sha256) = &self.signature;
        let signature_attributes = |object: Hid| -> ffi::Outcome<()> {
            ffi::write_utf8_attribute(object, attr::COMPAT_JSON, json)?;
            ffi::write_utf8_attribute(object, attr::COMPAT_SHA256, sha256)?;
            ffi::write_utf8_attribute(object, attr::STORAGE_DTYPE, self.storage.name())
        };
        let mut checksum_tables: Vec<(&str, Vec<ChecksumRow>)> = Vec::new();
        if let Some(section) = &mut self.features {
            section.values.finish()?;
            write_index(&path, &section.group, &section.index, false, layout::INDEX_CHUNK_ROWS)?;
            checksum_tables.push((layout::FEATURES, row_checksums::rows_of(&section.coverage)));
        }
        if let Some(section) = &mut self.derivatives {
            for column in &mut section.columns {
                column.finish()?;
            }
            write_index(&path, &section.group, &section.index, false, layout::INDEX_CHUNK_ROWS)?;
            checksum_tables.push((layout::DERIVATIVES, row_checksums::rows_of(&section.coverage)));
            let id = section.group.id();
            let DerivativeLayout { n_radial_features, n_angular_features, multi } = self.layout;
            let written = signature_attributes(id)
                .and_then(|()| {
                    ffi::write_i64_attribute(
                        id,
                        attr::SCHEMA_VERSION,
                        layout::DERIVATIVE_SCHEMA_VERSION,
                    )
                })
                .and_then(|()| {
                    ffi::write_utf8_attribute(
                        id,
                        attr::PAYLOAD_FORMAT,
                        layout::DERIVATIVE_PAYLOAD_FORMAT,
                    )
                })
                .and_then(|()| {
                    ffi::write_i64_attribute(id, attr::N_RADIAL_FEATURES, n_radial_features as i64)
                })
                .and_then(|()| {
                    ffi::write_i64_attribute(
                        id,
                        attr::N_ANGULAR_FEATURES,
                        n_angular_features as i64,
                    )
                })
                .and_then(|()| ffi::write_bool_attribute(id, attr::MULTI, multi))
                .and_then(|()| ffi::write_bool_attribute(id, attr::CONTAINS_FEATURES, false))
                .and_then(|()| ffi::write_bool_attribute(id, attr::CONTAINS_POSITIONS, false));
            written.map_err(|e| write_error(&path, "derivative section attributes", e))?;
        }
        let tables: Vec<(&str, &[ChecksumRow])> =
            checksum_tables.iter().map(|(name, rows)| (*name, rows.as_slice())).collect();
        row_checksums::write(&path, &self.cache, &tables)?;
        let id = self.cache.id();
        signature_attributes(id)
            .and_then(|()| {
                ffi::write_i64_attribute(id, attr::SCHEMA_VERSION, layout::CACHE_SCHEMA_VERSION)
            })
            .and_then(|()| {
                ffi::write_utf8_attribute(id, attr::CACHE_FORMAT, layout::CACHE_FORMAT_V2)
            })
            .and_then(|()| {
                ffi::write_bool_attribute(id, attr::CONTAINS_FEATURES, self.features.is_some())
            })
            .and_then(|()| {
                ffi::write_bool_attribute(
                    id,
                    attr::CONTAINS_DERIVATIVES,
                    self.derivatives.is_some(),
                )
            })
            .map_err(|e| write_error(&path, "/torch_cache attributes", e))?;
        let TorchCacheWriter {
            features,
            derivatives,
            cache,
            file,
            writeback,
            mut temp,
            target,
            source,
            identity,
            ..
        } = self;
        drop((features, derivatives, cache));
        file.close().map_err(|e| write_error(&path, "closing", e))?;
        temp.after_libhdf5_closed()?;
        writeback.finish()?;
        // The file this build carried must still be the one at the target: a writer that takes
        // no libhdf5 lock (another stowage writer renaming its own rebuild) would otherwise lose
        // its rows to this rename.
        let now = FileIdentity::of(&target)?;
        if now != identity {
            return Err(Hdf5Error::TargetChanged { target, before: identity, now }.into());
        }
        let published = temp.publish(true).map_err(|e| match e {
            Error::Io { source, .. } => Error::io(&target, source),
            other => other,
        });
        drop(source);
        published
    }
}

/// An HDF5 identifier.
type Hid = hdf5_sys::h5i::hid_t;

/// Copies what is not the v2 cache from `old` (the file at `source`) into the new file: every
/// root attribute and every root object but `/torch_cache`, as stored (H5Ocopy keeps types,
/// filters, chunking and attributes). A legacy `/force_derivatives` is kept too.
fn copy_dataset_content(
    source: &Path,
    old: &hdf5::File,
    target: &hdf5::File,
    target_path: &Path,
) -> Result<()> {
    let names = old.attr_names().map_err(|e| read_error(source, "listing root attributes", e))?;
    for name in names {
        ffi::copy_attribute(old.id(), target.id(), &name)
            .map_err(|e| write_error(target_path, &format!("copying root attribute {name}"), e))?;
    }
    let members = old.member_names().map_err(|e| read_error(source, "listing root objects", e))?;
    for name in members {
        if name == layout::TORCH_CACHE {
            continue;
        }
        ffi::copy_object(old.id(), &name, target.id())
            .map_err(|e| write_error(target_path, &format!("copying /{name}"), e))?;
    }
    Ok(())
}
