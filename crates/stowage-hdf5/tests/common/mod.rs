//! A small aenet dataset for the writer tests: a file with `/entries` and root `energy_filter_*`
//! attributes, and deterministic features and derivatives for the reference descriptor
//! (species A, B; rad_order 1; ang_order 0).

#![allow(dead_code)] // Each test file uses part of it.

use std::path::{Path, PathBuf};

use hdf5::types::VarLenArray;
use stowage_core::Tensor;
use stowage_hdf5::test_support::ffi;
use stowage_hdf5::{
    AngularDerivatives, CacheSections, DescriptorCompat, LocalDerivatives, RadialDerivatives,
    StorageDtype, TorchCacheWriter,
};

pub mod peer;

/// The reference descriptor.
pub fn compat() -> DescriptorCompat {
    DescriptorCompat::chebyshev(&["A", "B"], 1, 2.0, 0, 2.0, 0.1)
}

/// Atoms of entry `i` (3, 2, 4, 3, 2, 4, ...).
pub fn atoms(i: i64) -> usize {
    [3, 2, 4][(i % 3) as usize]
}

/// Entry `i`'s features (n_atoms, 6), float64, exact in float32 too.
pub fn features(i: i64) -> Tensor {
    let n = atoms(i);
    let values: Vec<f64> = (0..n * 6).map(|j| i as f64 * 10.0 + j as f64 * 0.25).collect();
    Tensor::from_slice(&[n, 6], &values).unwrap()
}

/// Entry `i`'s derivatives: 2 edges per atom, 1 triplet per atom.
pub fn derivatives(i: i64) -> LocalDerivatives {
    let n = atoms(i);
    let (e, t) = (2 * n, n);
    let floats = |count: usize, base: f64| -> Vec<f64> {
        (0..count).map(|j| base + i as f64 + j as f64 * 0.5).collect()
    };
    let idx = |count: usize, shift: usize| -> Vec<i64> {
        (0..count).map(|j| ((j + shift) % n) as i64).collect()
    };
    let tensor = |dims: &[usize], base: f64| {
        Tensor::from_slice(dims, &floats(dims.iter().product(), base)).unwrap()
    };
    LocalDerivatives {
        n_atoms: n,
        radial: RadialDerivatives {
            center_idx: idx(e, 0),
            neighbor_idx: idx(e, 1),
            dg_drij: tensor(&[e, 2, 3], 1.0),
            neighbor_typespin: Some(tensor(&[e], -1.0)),
        },
        angular: AngularDerivatives {
            center_idx: idx(t, 0),
            neighbor_j_idx: idx(t, 1),
            neighbor_k_idx: idx(t, 2),
            grads_i: tensor(&[t, 1, 3], 2.0),
            grads_j: tensor(&[t, 1, 3], 3.0),
            grads_k: tensor(&[t, 1, 3], 4.0),
            triplet_typespin: Some(tensor(&[t], 5.0)),
        },
    }
}

/// Writes a dataset file without a cache: `/entries/structures` (3 opaque rows) and root
/// attributes like aenet's, including an empty string with a NULL dataspace. Without libhdf5's
/// file lock: a Python peer another test spawns meanwhile would inherit the descriptor (libhdf5
/// does not set close-on-exec) and keep the exclusive lock after the file is closed.
pub fn write_plain_dataset(path: &Path) {
    let file =
        hdf5::File::with_options().with_fapl(|fapl| fapl.file_locking(false)).create(path).unwrap();
    let entries = file.create_group("entries").unwrap();
    let rows: Vec<VarLenArray<u8>> =
        (0..3u8).map(|i| VarLenArray::from_slice(&[i, 0x80, 0x04, i])).collect();
    entries.new_dataset_builder().with_data(&rows).chunk(2).create("structures").unwrap();
    ffi::write_utf8_attribute(file.id(), "energy_filter_semantics", "referenced_energy_per_atom")
        .unwrap();
    ffi::write_utf8_attribute(file.id(), "energy_filter_atomic_energies_json", "").unwrap();
    ffi::write_bool_attribute(file.id(), "energy_filter_enabled", false).unwrap();
}

/// The `/entries/structures` rows of the file at `path`.
pub fn structures(path: &Path) -> Vec<Vec<u8>> {
    let file = hdf5::File::open(path).unwrap();
    let rows = file.dataset("entries/structures").unwrap().read_raw::<VarLenArray<u8>>().unwrap();
    rows.iter().map(|r| r.to_vec()).collect()
}

/// Root attribute `name` of the file at `path`.
pub fn root_attribute(path: &Path, name: &str) -> Option<ffi::AttributeValue> {
    let file = hdf5::File::open(path).unwrap();
    ffi::read_attribute(file.id(), name).unwrap()
}

/// A `.npy` file as a tensor.
pub fn npy(path: &Path) -> Tensor {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let header = stowage_core::npy_header::parse(&bytes).unwrap();
    let data = bytes[header.data_offset..].to_vec();
    Tensor::new(header.dtype, header.shape, data).unwrap()
}

/// Copies `from` to `to`, writable (reference files are read-only).
pub fn writable_copy(from: &Path, to: &Path) {
    std::fs::copy(from, to)
        .unwrap_or_else(|e| panic!("{} -> {}: {e}", from.display(), to.display()));
    let mut permissions = std::fs::metadata(to).unwrap().permissions();
    #[allow(clippy::permissions_set_readonly_false)]
    permissions.set_readonly(false);
    std::fs::set_permissions(to, permissions).unwrap();
}

/// Runs the tests of one binary that start Python one at a time. libhdf5 opens files without
/// close-on-exec, so a child process started while another test has an HDF5 file open inherits
/// the descriptor and its shared file lock, and aenet's exclusive open of that file (PyTables
/// mode "a") fails until the child exits.
pub fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    static LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());
    LOCK.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Writes the cache of the reference descriptor into the dataset file at `path`: features for
/// entries 0, 1, 2 and derivatives for 0 and 2, stored as `storage`.
pub fn write_cache(path: &Path, storage: StorageDtype) {
    let mut writer =
        TorchCacheWriter::create(path, &compat(), storage, CacheSections::default()).unwrap();
    for i in 0..3 {
        writer.add_features(i, &features(i)).unwrap();
    }
    for i in [0, 2] {
        writer.add_derivatives(i, &derivatives(i)).unwrap();
    }
    writer.finish().unwrap();
}

/// `dir/dataset.h5`: a plain dataset ([`write_plain_dataset`]) with the float64 cache of
/// [`write_cache`].
pub fn write_aenet_file(dir: &Path) -> PathBuf {
    let path = dir.join("dataset.h5");
    write_plain_dataset(&path);
    write_cache(&path, StorageDtype::Float64);
    path
}
