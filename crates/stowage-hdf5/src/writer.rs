//! Writing a `/torch_cache` (v2) into an aenet dataset file, atomically: the new file is built
//! beside the target (the dataset's own groups and root attributes copied as stored, then the
//! cache written), fsynced and renamed over it. A crash leaves the old file or the new one. The
//! file is written back to disk in the background while it is built, so the final fsync is short.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use hdf5::Group;
use stowage_core::bytes::Bytes;
use stowage_core::{DType, Error, Result, Tensor};

use crate::columns::{ColumnWriter, le_bytes_i64};
use crate::compat::{DescriptorCompat, StorageDtype};
use crate::derivatives::LocalDerivatives;
use crate::direct::HeapFile;
use crate::error::{read_error, write_error};
use crate::ffi::{self, Element};
use crate::index_tables::{DerivativeIndexRow, FeatureIndexRow, write_index};
use crate::layout::{self, attr};
use crate::publish::{TempBeside, Writeback};

/// Which sections a new cache holds.
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

fn storage_element(storage: StorageDtype) -> Element {
    match storage {
        StorageDtype::Float32 => Element::F32,
        StorageDtype::Float64 => Element::F64,
    }
}

struct FeatureWriter {
    group: Group,
    index: Vec<FeatureIndexRow>,
    values: ColumnWriter,
    entries: HashSet<i64>,
}

struct DerivativeWriter {
    group: Group,
    index: Vec<DerivativeIndexRow>,
    /// In [`layout::DERIVATIVE_ARRAYS`] order.
    columns: Vec<ColumnWriter>,
    entries: HashSet<i64>,
}

/// Builds a v2 torch cache for one aenet dataset file, entry by entry, and publishes it atomically
/// with [`TorchCacheWriter::finish`]. Dropping it unfinished leaves the file untouched.
///
/// An existing target keeps everything that is not the cache exactly as stored (`/entries`,
/// `/descriptor_manifest`, every root attribute such as `energy_filter_*`); its old cache
/// (`/torch_cache`, or a legacy `/force_derivatives`) is replaced. A target that does not exist
/// gets a file holding only the cache (aenet's own loader refuses files without
/// `/entries/structures`; stowage reads them).
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
/// let cache = TorchCache::open(&path)?.expect("a cache");
/// let features = cache.features_as(0, StorageDtype::Float32)?.expect("entry 0 is cached");
/// assert_eq!(features.to_vec::<f32>()?, vec![0.5f32; 12]);
/// assert!(cache.features(1)?.is_none());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct TorchCacheWriter {
    target: PathBuf,
    compat: DescriptorCompat,
    storage: StorageDtype,
    features: Option<FeatureWriter>,
    derivatives: Option<DerivativeWriter>,
    cache: Group,
    file: hdf5::File,
    writeback: Writeback,
    // Last: removed on drop (after the file is closed) unless published.
    temp: TempBeside,
}

impl TorchCacheWriter {
    /// Starts a new cache for the dataset file `target` with `compat`'s signature, storing floats
    /// as `storage`. Nothing is visible at `target` until [`TorchCacheWriter::finish`].
    pub fn create(
        target: impl AsRef<Path>,
        compat: &DescriptorCompat,
        storage: StorageDtype,
        sections: CacheSections,
    ) -> Result<TorchCacheWriter> {
        let target = target.as_ref().to_path_buf();
        let temp = TempBeside::new(&target)?;
        let path = temp.path().to_path_buf();
        // No libhdf5 file lock on the private temporary file: a child process forked meanwhile
        // would inherit the descriptor (libhdf5 does not set close-on-exec) and keep the
        // exclusive lock, refusing readers (aenet's too) of the published file until it exits.
        let file = hdf5::File::with_options()
            .with_fapl(|fapl| fapl.file_locking(false))
            .create(&path)
            .map_err(|e| write_error(&path, "creating", e))?;
        let writeback = Writeback::start(&path)?;
        let heap = HeapFile::open(&path, &file)?;
        if target.exists() {
            copy_dataset_content(&target, &file, &path)?;
        }
        let cache = file
            .create_group(layout::TORCH_CACHE)
            .map_err(|e| write_error(&path, "creating /torch_cache", e))?;
        let element = storage_element(storage);
        let features = if sections.features {
            let group = cache
                .create_group(layout::FEATURES)
                .map_err(|e| write_error(&path, "creating the feature group", e))?;
            let values =
                ColumnWriter::create(&path, &group, layout::VALUES, element, heap.as_ref())?;
            Some(FeatureWriter { group, index: Vec::new(), values, entries: HashSet::new() })
        } else {
            None
        };
        let derivatives = if sections.derivatives {
            let group = cache
                .create_group(layout::DERIVATIVES)
                .map_err(|e| write_error(&path, "creating the derivative group", e))?;
            for sub in ["radial", "angular"] {
                group.create_group(sub).map_err(|e| write_error(&path, sub, e))?;
            }
            let columns = layout::DERIVATIVE_ARRAYS
                .iter()
                .map(|name| {
                    let is_index = name.ends_with("_idx");
                    let element = if is_index { Element::I64 } else { element };
                    ColumnWriter::create(&path, &group, name, element, heap.as_ref())
                })
                .collect::<Result<Vec<_>>>()?;
            Some(DerivativeWriter { group, index: Vec::new(), columns, entries: HashSet::new() })
        } else {
            None
        };
        Ok(TorchCacheWriter {
            target,
            compat: compat.clone(),
            storage,
            features,
            derivatives,
            cache,
            file,
            writeback,
            temp,
        })
    }

    /// Adds entry `entry_idx`'s feature matrix `(n_atoms, n_features)` (float32 or float64; cast to
    /// the storage dtype). Its `cache_row` is the number of feature rows before it.
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
        if !section.entries.insert(entry_idx) {
            return Err(Error::invalid(format!("{what}: the entry already has a feature row")));
        }
        let row = FeatureIndexRow {
            cache_row: section.values.rows() as i64,
            entry_idx,
            n_atoms: as_i32(n_atoms, "n_atoms")?,
            n_features: as_i32(n_features, "n_features")?,
        };
        section.values.push(float_bytes(features, self.storage, &what)?)?;
        section.index.push(row);
        Ok(())
    }

    /// Adds entry `entry_idx`'s local derivatives, checked against the descriptor's feature counts
    /// and species (typespin exactly when more than one species; an empty row is stored when not).
    pub fn add_derivatives(
        &mut self,
        entry_idx: i64,
        derivatives: &LocalDerivatives,
    ) -> Result<()> {
        let (nr, na, multi) = (
            self.compat.n_radial_features(),
            self.compat.n_angular_features(),
            self.compat.multi(),
        );
        let section = self.derivatives.as_mut().ok_or_else(|| {
            Error::invalid("this cache was created without the force-derivative section")
        })?;
        let what = format!("derivatives of entry {entry_idx}");
        derivatives.check(nr, na, multi).map_err(|e| Error::invalid(format!("{what}: {e}")))?;
        if section.entries.contains(&entry_idx) {
            return Err(Error::invalid(format!("{what}: the entry already has a derivative row")));
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
            cache_row: section.index.len() as i64,
            entry_idx,
            n_angular_triplets: as_i32(derivatives.n_angular_triplets(), "n_angular_triplets")?,
            n_atoms: as_i32(derivatives.n_atoms, "n_atoms")?,
            n_radial_edges: as_i32(derivatives.n_radial_edges(), "n_radial_edges")?,
        };
        for (column, row) in section.columns.iter_mut().zip(rows) {
            column.push(row)?;
        }
        section.entries.insert(entry_idx);
        section.index.push(index_row);
        Ok(())
    }

    /// Writes the index tables and attributes, closes the file, fsyncs it and renames it over the
    /// target (then fsyncs the directory).
    pub fn finish(mut self) -> Result<()> {
        let path = self.temp.path().to_path_buf();
        let signature_attributes = |object: Hid| -> ffi::Outcome<()> {
            ffi::write_utf8_attribute(object, attr::COMPAT_JSON, &self.compat.json())?;
            ffi::write_utf8_attribute(object, attr::COMPAT_SHA256, &self.compat.sha256())?;
            ffi::write_utf8_attribute(object, attr::STORAGE_DTYPE, self.storage.name())
        };
        if let Some(section) = &mut self.features {
            section.values.finish()?;
            write_index(&path, &section.group, &section.index, false)?;
        }
        if let Some(section) = &mut self.derivatives {
            for column in &mut section.columns {
                column.finish()?;
            }
            write_index(&path, &section.group, &section.index, false)?;
            let id = section.group.id();
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
                    ffi::write_i64_attribute(
                        id,
                        attr::N_RADIAL_FEATURES,
                        self.compat.n_radial_features() as i64,
                    )
                })
                .and_then(|()| {
                    ffi::write_i64_attribute(
                        id,
                        attr::N_ANGULAR_FEATURES,
                        self.compat.n_angular_features() as i64,
                    )
                })
                .and_then(|()| ffi::write_bool_attribute(id, attr::MULTI, self.compat.multi()))
                .and_then(|()| ffi::write_bool_attribute(id, attr::CONTAINS_FEATURES, false))
                .and_then(|()| ffi::write_bool_attribute(id, attr::CONTAINS_POSITIONS, false));
            written.map_err(|e| write_error(&path, "derivative section attributes", e))?;
        }
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
            features, derivatives, cache, file, writeback, temp, target, ..
        } = self;
        drop((features, derivatives, cache));
        file.close().map_err(|e| write_error(&path, "closing", e))?;
        writeback.finish()?;
        temp.publish(true).map_err(|e| match e {
            Error::Io { source, .. } => Error::io(&target, source),
            other => other,
        })
    }
}

/// An HDF5 identifier.
type Hid = hdf5_sys::h5i::hid_t;

/// Copies what belongs to the dataset from `source` into the new file: every root attribute and
/// every root object except the cache groups, as stored (H5Ocopy keeps types, filters, chunking
/// and attributes).
fn copy_dataset_content(source: &Path, target: &hdf5::File, target_path: &Path) -> Result<()> {
    let old = hdf5::File::open(source).map_err(|e| read_error(source, "opening", e))?;
    let names = old.attr_names().map_err(|e| read_error(source, "listing root attributes", e))?;
    for name in names {
        ffi::copy_attribute(old.id(), target.id(), &name)
            .map_err(|e| write_error(target_path, &format!("copying root attribute {name}"), e))?;
    }
    let members = old.member_names().map_err(|e| read_error(source, "listing root objects", e))?;
    for name in members {
        if name == layout::TORCH_CACHE || name == layout::LEGACY_DERIVATIVES {
            continue;
        }
        ffi::copy_object(old.id(), &name, target.id())
            .map_err(|e| write_error(target_path, &format!("copying /{name}"), e))?;
    }
    Ok(())
}
