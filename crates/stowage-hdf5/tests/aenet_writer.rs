//! Caches stowage writes into an aenet dataset file: read back with the same arrays (cast on
//! load), the dataset's own content untouched, the replaced file published atomically, and the
//! format errors aenet raises for foreign versions and signatures.

mod common;

use common::{
    atoms, compat, derivatives, features, root_attribute, structures, write_cache,
    write_plain_dataset,
};
use stowage_core::{DType, Error};
use stowage_hdf5::test_support::ffi::{self, AttributeValue};
use stowage_hdf5::{CacheSections, StorageDtype, TorchCache, TorchCacheWriter};

#[test]
fn cache_written_into_a_dataset_reads_back_and_leaves_the_dataset_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("dataset.h5");
    write_plain_dataset(&path);
    let before = structures(&path);
    write_cache(&path, StorageDtype::Float32);
    // Another storage dtype cannot join the cache's datasets: refused, the file as it was.
    let bytes = std::fs::read(&path).unwrap();
    let refused =
        TorchCacheWriter::create(&path, &compat(), StorageDtype::Float64, CacheSections::default())
            .err()
            .expect("float64 rows cannot join a float32 cache");
    assert!(matches!(refused, Error::Incompatible { .. }), "{refused}");
    let text = refused.to_string();
    assert!(text.contains("float32") && text.contains("float64"), "{text}");
    assert!(text.contains(path.to_str().unwrap()), "{text}");
    assert_eq!(std::fs::read(&path).unwrap(), bytes);
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
    assert!(cache.unchecked_entries().is_empty(), "every row is stowage's");
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
        let file = open_unlocked(&path);
        change(file.group("torch_cache").unwrap().id());
    }
    match TorchCache::open(&path) {
        Err(error) => error,
        Ok(_) => panic!("the changed cache opened"),
    }
}

/// `path` opened for writing without libhdf5's file lock: libhdf5 does not set close-on-exec,
/// so a Python peer another test spawns meanwhile would inherit the descriptor and keep the
/// exclusive lock after the file is closed here, refusing the reads that follow.
fn open_unlocked(path: &std::path::Path) -> hdf5::File {
    hdf5::File::with_options().with_fapl(|fapl| fapl.file_locking(false)).open_rw(path).unwrap()
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

/// A writable copy of `aenet-torch-cache/<file>` as `dataset.h5` in `dir`, or `None` when the
/// reference set is absent (printed as SKIPPED; a failure in CI).
fn reference_copy(file: &str, dir: &std::path::Path) -> Option<std::path::PathBuf> {
    let set = stowage_test_support::reference::reference_set("aenet-torch-cache")?;
    let path = dir.join("dataset.h5");
    common::writable_copy(&set.join(file), &path);
    Some(path)
}

#[test]
fn a_legacy_v1_cache_is_carried_into_v2_and_its_group_kept() {
    let dir = tempfile::tempdir().unwrap();
    let Some(path) = reference_copy("v1_legacy.h5", dir.path()) else { return };
    let before = TorchCache::open(&path).unwrap().unwrap();
    let old: Vec<_> = [0, 2].map(|e| before.derivatives(e).unwrap().unwrap()).to_vec();
    assert!(before.unchecked().is_some_and(|u| u.next_step.contains("legacy v1")));
    drop(before);
    let mut writer =
        TorchCacheWriter::create(&path, &compat(), StorageDtype::Float64, CacheSections::default())
            .unwrap();
    writer.add_features(1, &features(1)).unwrap();
    writer.add_derivatives(1, &derivatives(1)).unwrap();
    writer.finish().unwrap();
    let cache = TorchCache::open(&path).unwrap().unwrap();
    assert_eq!(cache.version(), stowage_hdf5::CacheVersion::V2);
    assert_eq!(cache.derivative_entries(), vec![0, 1, 2]);
    for (entry, want) in [0, 2].into_iter().zip(&old) {
        assert_eq!(&cache.derivatives(entry).unwrap().unwrap(), want, "v1 entry {entry}");
    }
    assert_eq!(cache.derivatives(1).unwrap().unwrap(), derivatives(1));
    assert_eq!(cache.unchecked_entries(), vec![0, 2], "the v1 rows are aenet's");
    // The v1 group is still there, as it was (aenet reads /torch_cache first).
    let file = hdf5::File::open(&path).unwrap();
    let legacy = file.group("force_derivatives").unwrap();
    assert_eq!(legacy.member_names().unwrap(), vec!["angular", "index", "radial"]);
    assert_eq!(
        ffi::read_attribute(legacy.id(), "schema_version").unwrap(),
        Some(AttributeValue::Int(1))
    );
    drop((legacy, file, cache));
    // Adopting checksums the carried v1 rows.
    assert_eq!(TorchCacheWriter::adopt(&path).unwrap().samples, 2);
    assert!(TorchCache::open(&path).unwrap().unwrap().unchecked_entries().is_empty());
}

#[test]
fn a_node_stowage_does_not_know_is_never_dropped() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("dataset.h5");
    write_cache(&path, StorageDtype::Float64);
    {
        let file = open_unlocked(&path);
        file.group("torch_cache").unwrap().create_group("positions").unwrap();
    }
    let bytes = std::fs::read(&path).unwrap();
    let refused =
        TorchCacheWriter::create(&path, &compat(), StorageDtype::Float64, CacheSections::default())
            .err()
            .expect("refused");
    assert!(matches!(refused, Error::Incompatible { .. }), "{refused}");
    assert!(refused.to_string().contains("/torch_cache/positions"), "{refused}");
    assert_eq!(std::fs::read(&path).unwrap(), bytes);
    let adopt = TorchCacheWriter::adopt(&path);
    assert!(adopt.is_ok_and(|a| a.is_empty()), "nothing to adopt, nothing rebuilt");
}

#[test]
fn a_rebuild_over_a_file_replaced_meanwhile_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("dataset.h5");
    write_plain_dataset(&path);
    let only_features = CacheSections { features: true, derivatives: false };
    let mut first =
        TorchCacheWriter::create(&path, &compat(), StorageDtype::Float64, only_features).unwrap();
    let mut second =
        TorchCacheWriter::create(&path, &compat(), StorageDtype::Float64, only_features).unwrap();
    first.add_features(0, &features(0)).unwrap();
    second.add_features(1, &features(1)).unwrap();
    second.finish().unwrap();
    // The first build carried the file as it was before the second one's rows.
    let error = first.finish().unwrap_err().to_string();
    assert!(error.contains("replaced or changed while the cache was rebuilt"), "{error}");
    assert!(error.contains("nothing was written"), "{error}");
    let cache = TorchCache::open(&path).unwrap().unwrap();
    assert_eq!(cache.feature_entries(), vec![1], "the second writer's rows are kept");
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1, "no temporary file is left");
}

/// Whether PyTables (aenet's writer) can open `path` in mode "a" right now.
fn pytables_can_append(python: &str, path: &std::path::Path) -> bool {
    let script = "import sys, tables\ntry:\n    tables.open_file(sys.argv[1], 'a').close()\n    \
                  print('opened')\nexcept Exception:\n    print('refused')";
    stowage_test_support::python::run_script(python, script, &[path.to_str().unwrap()], b"", "open")
        == "opened"
}

#[test]
fn libhdf5_file_locks_keep_stowage_and_aenet_writers_apart() {
    use std::io::{BufRead, BufReader};
    use std::process::{Command, Stdio};
    let _serial = common::one_at_a_time();
    let Some(python) = stowage_test_support::python::python_with(
        "libhdf5_file_locks_keep_stowage_and_aenet_writers_apart",
        &["tables"],
    ) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("dataset.h5");
    write_cache(&path, StorageDtype::Float64);
    assert!(pytables_can_append(python, &path));

    // aenet's writer holds the file: stowage refuses to rebuild it (it would lose the rows).
    let holder = "import sys, tables\nf = tables.open_file(sys.argv[1], 'a')\nprint('open', \
                  flush=True)\nsys.stdin.read()\nf.close()";
    let mut child = Command::new(python)
        .args(["-c", holder, path.to_str().unwrap()])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.as_mut().unwrap()).read_line(&mut line).unwrap();
    assert_eq!(line.trim(), "open");
    let refused =
        TorchCacheWriter::create(&path, &compat(), StorageDtype::Float64, CacheSections::default())
            .err()
            .expect("the file is open for writing");
    assert!(matches!(refused, Error::Locked { .. }), "{refused}");
    drop(child.stdin.take());
    assert!(child.wait().unwrap().success());

    // While stowage rebuilds the file, aenet's writer cannot open it; afterwards it can.
    let writer =
        TorchCacheWriter::create(&path, &compat(), StorageDtype::Float64, CacheSections::default())
            .unwrap();
    assert!(!pytables_can_append(python, &path));
    writer.finish().unwrap();
    assert!(pytables_can_append(python, &path));
}
