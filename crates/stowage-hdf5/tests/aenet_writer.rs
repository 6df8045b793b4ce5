//! Caches stowage writes into an aenet dataset file: read back with the same arrays (cast on
//! load), the dataset's own content untouched, the replaced file published atomically, and the
//! format errors aenet raises for foreign versions and signatures.

mod common;

use common::{
    atoms, compat, derivatives, features, root_attribute, structures, write_plain_dataset,
};
use stowage_core::{DType, Error};
use stowage_hdf5::ffi::{self, AttributeValue};
use stowage_hdf5::{CacheSections, StorageDtype, TorchCache, TorchCacheWriter};

fn write_cache(path: &std::path::Path, storage: StorageDtype) {
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

#[test]
fn cache_written_into_a_dataset_reads_back_and_leaves_the_dataset_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("dataset.h5");
    write_plain_dataset(&path);
    let before = structures(&path);
    write_cache(&path, StorageDtype::Float64);
    // Rewriting replaces the cache (now float32) and still keeps the dataset.
    write_cache(&path, StorageDtype::Float32);
    assert_eq!(structures(&path), before);
    assert_eq!(
        root_attribute(&path, "energy_filter_semantics"),
        Some(AttributeValue::Text("referenced_energy_per_atom".into()))
    );
    assert_eq!(
        root_attribute(&path, "energy_filter_atomic_energies_json"),
        Some(AttributeValue::Text(String::new()))
    );
    assert_eq!(root_attribute(&path, "energy_filter_enabled"), Some(AttributeValue::Bool(false)));
    let leftovers: Vec<_> =
        std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(leftovers.len(), 1, "no temporary file is left: {leftovers:?}");

    let cache = TorchCache::open(&path).unwrap().expect("a cache");
    assert_eq!(cache.signature().storage_dtype, StorageDtype::Float32);
    cache.check_compatible(&compat()).unwrap();
    for i in 0..3 {
        let got = cache.features_as(i, StorageDtype::Float64).unwrap().unwrap();
        assert_eq!(got, features(i), "entry {i}");
        assert_eq!(cache.features(i).unwrap().unwrap().dtype(), DType::F32);
    }
    for i in [0, 2] {
        let got = cache.derivatives_as(i, StorageDtype::Float64).unwrap().unwrap();
        assert_eq!(got, derivatives(i), "entry {i}");
        assert_eq!(got.n_atoms, atoms(i));
    }
    assert!(cache.derivatives(1).unwrap().is_none(), "entry 1 has no forces");
}

#[test]
fn abandoned_writer_leaves_the_file_as_it_was() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("dataset.h5");
    write_plain_dataset(&path);
    let bytes = std::fs::read(&path).unwrap();
    let mut writer =
        TorchCacheWriter::create(&path, &compat(), StorageDtype::Float64, CacheSections::default())
            .unwrap();
    writer.add_features(0, &features(0)).unwrap();
    drop(writer);
    assert_eq!(std::fs::read(&path).unwrap(), bytes);
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
    assert!(TorchCache::open(&path).unwrap().is_none(), "no cache was published");
}

#[test]
fn bad_inputs_are_refused_naming_the_entry() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("dataset.h5");
    let only_features = CacheSections { features: true, derivatives: false };
    let mut writer =
        TorchCacheWriter::create(&path, &compat(), StorageDtype::Float64, only_features).unwrap();
    writer.add_features(0, &features(0)).unwrap();
    let twice = writer.add_features(0, &features(0)).unwrap_err().to_string();
    assert!(
        twice.contains("entry 0 already has a feature row")
            || twice.contains("features of entry 0"),
        "{twice}"
    );
    let no_section = writer.add_derivatives(0, &derivatives(0)).unwrap_err().to_string();
    assert!(no_section.contains("without the force-derivative section"), "{no_section}");
    let mut single = compat();
    single.species = vec!["A".into()];
    let mut writer =
        TorchCacheWriter::create(&path, &single, StorageDtype::Float64, CacheSections::default())
            .unwrap();
    let typespin = writer.add_derivatives(2, &derivatives(2)).unwrap_err().to_string();
    assert!(typespin.contains("entry 2") && typespin.contains("one species"), "{typespin}");
}

/// Writes a valid cache, then changes one root attribute of `/torch_cache` and opens it.
fn open_with_root_attribute(change: impl Fn(hdf5_sys::h5i::hid_t)) -> Error {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("dataset.h5");
    write_cache(&path, StorageDtype::Float64);
    {
        let file = hdf5::File::open_rw(&path).unwrap();
        change(file.group("torch_cache").unwrap().id());
    }
    match TorchCache::open(&path) {
        Err(error) => error,
        Ok(_) => panic!("the changed cache opened"),
    }
}

#[test]
fn foreign_versions_give_aenets_errors() {
    let version =
        open_with_root_attribute(|id| ffi::write_i64_attribute(id, "schema_version", 3).unwrap());
    assert!(matches!(version, Error::Incompatible { .. }), "{version}");
    assert!(
        version.to_string().ends_with("Unsupported torch cache schema version 3; expected 2"),
        "{version}"
    );
    let format = open_with_root_attribute(|id| {
        ffi::write_utf8_attribute(id, "cache_format", "aenet.torch_training.cache.v9").unwrap()
    });
    assert!(
        format
            .to_string()
            .ends_with("Unsupported torch cache format 'aenet.torch_training.cache.v9'"),
        "{format}"
    );
    let missing = open_with_root_attribute(|id| {
        ffi::write_bool_attribute(id, "contains_features", true).unwrap();
        ffi::write_i64_attribute(id, "storage_dtype", 5).unwrap()
    });
    assert!(matches!(missing, Error::Corrupted { .. }), "{missing}");
    assert!(
        missing.to_string().contains("storage_dtype is int (Int(5)), expected a string"),
        "{missing}"
    );
}

#[test]
fn a_signature_mismatch_names_both_signatures() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("dataset.h5");
    write_cache(&path, StorageDtype::Float64);
    let cache = TorchCache::open(&path).unwrap().unwrap();
    let mut other = compat();
    other.rad_cutoff = 3.0;
    let error = cache.check_compatible(&other).unwrap_err().to_string();
    assert!(error.contains(&compat().sha256()) && error.contains(&other.sha256()), "{error}");
    assert!(error.contains(
        "incompatible persisted cache; rebuild with matching species/order/cutoff settings"
    ));
}
