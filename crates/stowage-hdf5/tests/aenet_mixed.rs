//! stowage and aenet writing the same dataset file (issue 14): the reference file stowage and
//! aenet wrote together reads exactly and validates honestly; stowage appends keep aenet's rows;
//! stowage and aenet's own read and append paths (`xtask/py/aenet_peer.py`) take turns in both
//! orders and after every step both read every entry; the descriptor manifest aenet needs is
//! written, and a contradicting one refused before anything is written.

mod common;

use std::path::{Path, PathBuf};

use common::peer::{self, Expected};
use common::{compat, derivatives, features, npy, writable_copy};
use serde_json::{Value, json};
use stowage_core::{Error, ValidationLevel};
use stowage_hdf5::{
    CacheSections, DescriptorConfig, DescriptorManifest, LocalDerivatives, StorageDtype,
    TorchCache, TorchCacheWriter,
};

/// A writable copy of `set/file` in `dir`, or `None` when the reference set is absent (printed
/// as SKIPPED; a failure in CI).
fn reference_copy(set: &str, file: &str, dir: &Path) -> Option<PathBuf> {
    let set = stowage_test_support::reference::reference_set(set)?;
    let path = dir.join("dataset.h5");
    writable_copy(&set.join(file), &path);
    Some(path)
}

/// Asserts stowage reads exactly `expected` (every entry with a row, every array equal).
fn assert_stowage_reads(path: &Path, expected: &Expected) {
    let cache = TorchCache::open(path).unwrap().expect("a cache");
    assert_eq!(cache.entries(), expected.keys().copied().collect::<Vec<_>>(), "{}", path.display());
    for (entry, (features, derivatives)) in expected {
        let got = cache.features_as(*entry, StorageDtype::Float64).unwrap();
        assert_eq!(got.as_ref(), features.as_ref(), "stowage's features of entry {entry}");
        let got = cache.derivatives_as(*entry, StorageDtype::Float64).unwrap();
        assert_eq!(got.as_ref(), derivatives.as_ref(), "stowage's derivatives of entry {entry}");
    }
}

/// Writes `features` and `derivatives` with stowage (float64, both sections).
fn stowage_append(path: &Path, features: &[i64], derivatives: &[i64]) {
    let mut writer =
        TorchCacheWriter::create(path, &compat(), StorageDtype::Float64, CacheSections::default())
            .unwrap();
    for &i in features {
        writer.add_features(i, &common::features(i)).unwrap();
    }
    for &i in derivatives {
        writer.add_derivatives(i, &common::derivatives(i)).unwrap();
    }
    writer.finish().unwrap();
}

/// Appends with aenet's per-entry append functions (the peer).
fn aenet_append(python: &str, path: &Path, features: &[i64], derivatives: &[i64]) {
    let descriptor = peer::descriptor(&compat(), StorageDtype::Float64);
    let f: Vec<_> = features.iter().map(|&i| (i, common::features(i))).collect();
    let d: Vec<_> = derivatives.iter().map(|&i| (i, common::derivatives(i))).collect();
    let out = peer::run(python, "append", path, &peer::append_request(&descriptor, &f, &d));
    assert!(out.get("error").is_none(), "aenet refused to append: {}", out["error"]);
}

/// The expected reading of entries 0..3 given which have features and which derivatives.
fn expected(features: &[i64], derivatives: &[i64]) -> Expected {
    (0..3)
        .map(|i| {
            let f = features.contains(&i).then(|| common::features(i));
            let d = derivatives.contains(&i).then(|| common::derivatives(i));
            (i, (f, d))
        })
        .filter(|(_, (f, d))| f.is_some() || d.is_some())
        .collect()
}

/// Both readers read every entry of `path` as `expected`: stowage, and aenet (the peer) with the
/// descriptor recovered from the file's manifest and with it given explicitly.
fn assert_both_read(python: &str, path: &Path, expected: &Expected) {
    assert_stowage_reads(path, expected);
    let given = peer::descriptor(&compat(), StorageDtype::Float64);
    let compared = peer::assert_peer_reads(python, path, &Value::Null, expected);
    assert_eq!(compared, peer::assert_peer_reads(python, path, &given, expected));
    let arrays: usize = expected
        .values()
        .map(|(f, d)| usize::from(f.is_some()) + if d.is_some() { 11 } else { 0 })
        .sum();
    assert_eq!(compared, arrays);
}

/// The unchecked part of `validate` at `Full`: (entries, next step), asserting nothing is damaged.
fn unchecked(path: &Path) -> Option<(u64, String)> {
    let report = TorchCache::validate(path, ValidationLevel::Full).unwrap();
    assert!(report.is_undamaged(), "{:?}", report.problems);
    assert!(report.unchecked.len() <= 1, "{:?}", report.unchecked);
    assert_eq!(report.is_clean(), report.unchecked.is_empty());
    report.unchecked.first().map(|u| {
        assert_eq!((u.writer.as_str(), u.path.as_path()), ("aenet", path));
        (u.samples, u.next_step.clone())
    })
}

/// The reference file's expected arrays (`expected/features_entry<E>.npy`,
/// `expected/deriv_entry<E>_<group>_<name>.npy`).
fn reference_expected(set: &Path) -> Expected {
    let dir = set.join("expected");
    let derivative = |entry: i64| {
        let array = |name: &str| {
            npy(&dir.join(format!("deriv_entry{entry}_{}.npy", name.replace('/', "_"))))
        };
        let ints = |name: &str| array(name).to_vec::<i64>().unwrap();
        LocalDerivatives {
            n_atoms: 3,
            radial: stowage_hdf5::RadialDerivatives {
                center_idx: ints("radial/center_idx"),
                neighbor_idx: ints("radial/neighbor_idx"),
                dg_drij: array("radial/dG_drij"),
                neighbor_typespin: Some(array("radial/neighbor_typespin")),
            },
            angular: stowage_hdf5::AngularDerivatives {
                center_idx: ints("angular/center_idx"),
                neighbor_j_idx: ints("angular/neighbor_j_idx"),
                neighbor_k_idx: ints("angular/neighbor_k_idx"),
                grads_i: array("angular/grads_i"),
                grads_j: array("angular/grads_j"),
                grads_k: array("angular/grads_k"),
                triplet_typespin: Some(array("angular/triplet_typespin")),
            },
        }
    };
    (0..3)
        .map(|entry| {
            let features = npy(&dir.join(format!("features_entry{entry}.npy")));
            (entry, (Some(features), (entry != 1).then(|| derivative(entry))))
        })
        .collect()
}

#[test]
fn the_reference_file_aenet_appended_to_reads_exactly_and_is_reported_unchecked() {
    let _serial = common::one_at_a_time();
    let Some(set) = stowage_test_support::reference::reference_set("mixed/aenet-append") else {
        return;
    };
    let path = set.join("cache/dataset.h5");
    let before = std::fs::read(&path).unwrap();
    let expected = reference_expected(&set);
    assert_stowage_reads(&path, &expected);
    let cache = TorchCache::open(&path).unwrap().unwrap();
    assert!(cache.derivatives(1).unwrap().is_none(), "entry 1 has no forces");
    // stowage 9e4830f kept no checksums in aenet files: no row of this one is covered.
    assert!(!cache.has_checksums());
    assert_eq!(cache.unchecked_entries(), vec![0, 1, 2]);
    assert_eq!(cache.unchecked_rows(), (3, 2));
    for level in [ValidationLevel::Structure, ValidationLevel::Full] {
        let report = TorchCache::validate(&path, level).unwrap();
        assert!(report.is_undamaged() && !report.is_clean(), "{report:?}");
        let [unchecked] = report.unchecked.as_slice() else { panic!("{report:?}") };
        assert_eq!((unchecked.writer.as_str(), unchecked.samples), ("aenet", 3));
        assert!(unchecked.next_step.contains("3 feature rows and 2 force-derivative rows"));
        assert!(unchecked.next_step.contains("stowage adopt"), "{}", unchecked.next_step);
        let read = if level == ValidationLevel::Full { 3 } else { 0 };
        assert_eq!(report.samples_checked, read);
    }
    assert_eq!(std::fs::read(&path).unwrap(), before, "reading changed the reference file");
}

#[test]
fn stowage_appends_to_the_reference_file_keep_aenets_rows() {
    let _serial = common::one_at_a_time();
    let dir = tempfile::tempdir().unwrap();
    let Some(path) = reference_copy("mixed/aenet-append", "cache/dataset.h5", dir.path()) else {
        return;
    };
    let set = stowage_test_support::reference::reference_set("mixed/aenet-append").unwrap();
    let mut expected = reference_expected(&set);
    let mut writer =
        TorchCacheWriter::create(&path, &compat(), StorageDtype::Float64, CacheSections::default())
            .unwrap();
    // aenet's row for entry 1 stays aenet's: stowage never replaces a row.
    let twice = writer.add_features(1, &features(1)).unwrap_err().to_string();
    assert!(twice.contains("features of entry 1: the entry already has a feature row"), "{twice}");
    for entry in [3, 4] {
        writer.add_features(entry, &features(entry)).unwrap();
    }
    writer.add_derivatives(3, &derivatives(3)).unwrap();
    writer.finish().unwrap();
    expected.insert(3, (Some(features(3)), Some(derivatives(3))));
    expected.insert(4, (Some(features(4)), None));
    assert_stowage_reads(&path, &expected);
    // The old rows are still unchecked; stowage's new ones are covered.
    assert_eq!(TorchCache::open(&path).unwrap().unwrap().unchecked_entries(), vec![0, 1, 2]);
    let (samples, next) = unchecked(&path).expect("aenet's rows are unchecked");
    assert_eq!(samples, 3);
    assert!(next.contains("3 feature rows and 2 force-derivative rows"), "{next}");

    // The file had no manifest: stowage wrote aenet's, so aenet recovers the descriptor.
    let manifest = DescriptorManifest::read(&path).unwrap().expect("a manifest");
    let config = DescriptorConfig::new(&compat(), StorageDtype::Float64);
    assert_eq!(manifest, DescriptorManifest::of(&config));
    if let Some(python) = peer::python("stowage_appends_to_the_reference_file_keep_aenets_rows") {
        let given = peer::descriptor(&compat(), StorageDtype::Float64);
        for descriptor in [Value::Null, given] {
            let compared = peer::assert_peer_reads(python, &path, &descriptor, &expected);
            assert_eq!(compared, 5 + 11 * 3);
        }
    }

    // Adopting checks and checksums aenet's rows; then nothing is unchecked and all reads alike.
    let adoption = TorchCacheWriter::adopt(&path).unwrap();
    assert_eq!((adoption.files, adoption.samples), (vec![path.clone()], 3));
    assert_eq!(unchecked(&path), None);
    assert_stowage_reads(&path, &expected);
    let bytes = std::fs::read(&path).unwrap();
    assert!(TorchCacheWriter::adopt(&path).unwrap().is_empty());
    assert_eq!(std::fs::read(&path).unwrap(), bytes, "nothing to adopt: the file is untouched");
}

/// A copy of aenet's own plain dataset file (3 entries, no cache, no manifest).
fn plain_dataset(dir: &Path) -> Option<PathBuf> {
    reference_copy("aenet-torch-cache", "plain.h5", dir)
}

#[test]
fn stowage_then_aenet_then_stowage_both_read_every_entry() {
    let _serial = common::one_at_a_time();
    let Some(python) = peer::python("stowage_then_aenet_then_stowage_both_read_every_entry") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let Some(path) = plain_dataset(dir.path()) else { return };

    stowage_append(&path, &[0], &[0]);
    assert_both_read(python, &path, &expected(&[0], &[0]));
    assert_eq!(unchecked(&path), None, "every row is stowage's");

    aenet_append(python, &path, &[1], &[2]);
    assert_both_read(python, &path, &expected(&[0, 1], &[0, 2]));
    let (samples, next) = unchecked(&path).expect("aenet's rows");
    assert_eq!(samples, 2);
    assert!(next.contains("1 feature row and 1 force-derivative row were appended"), "{next}");

    stowage_append(&path, &[2], &[]);
    assert_both_read(python, &path, &expected(&[0, 1, 2], &[0, 2]));
    assert_eq!(unchecked(&path).map(|u| u.0), Some(2), "aenet's rows are still unchecked");

    assert_eq!(TorchCacheWriter::adopt(&path).unwrap().samples, 2);
    assert_eq!(unchecked(&path), None);
    assert_both_read(python, &path, &expected(&[0, 1, 2], &[0, 2]));
}

#[test]
fn aenet_then_stowage_then_aenet_both_read_every_entry() {
    let _serial = common::one_at_a_time();
    let Some(python) = peer::python("aenet_then_stowage_then_aenet_both_read_every_entry") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let Some(path) = plain_dataset(dir.path()) else { return };
    // aenet's build creates the manifest and both sections, then appends per entry.
    let descriptor = peer::descriptor(&compat(), StorageDtype::Float64);
    let request = json!({"descriptor": descriptor, "features": true, "derivatives": true});
    let created = peer::run(python, "create", &path, &request);
    assert!(created.get("error").is_none(), "{created}");
    aenet_append(python, &path, &[0], &[0]);
    assert_both_read(python, &path, &expected(&[0], &[0]));
    let cache = TorchCache::open(&path).unwrap().unwrap();
    assert!(!cache.has_checksums());
    assert_eq!(unchecked(&path).map(|u| u.0), Some(1));

    stowage_append(&path, &[1], &[2]);
    assert_both_read(python, &path, &expected(&[0, 1], &[0, 2]));
    assert_eq!(TorchCache::open(&path).unwrap().unwrap().unchecked_entries(), vec![0]);

    aenet_append(python, &path, &[2], &[]);
    assert_both_read(python, &path, &expected(&[0, 1, 2], &[0, 2]));
    assert_eq!(TorchCache::open(&path).unwrap().unwrap().unchecked_entries(), vec![0, 2]);
    // aenet's manifest was kept as aenet wrote it.
    let manifest = DescriptorManifest::read(&path).unwrap().unwrap();
    assert_eq!(
        manifest,
        DescriptorManifest::of(&DescriptorConfig::new(&compat(), StorageDtype::Float64))
    );
}

#[test]
fn a_contradicting_manifest_is_refused_before_anything_is_written() {
    let _serial = common::one_at_a_time();
    let dir = tempfile::tempdir().unwrap();
    // aenet's own file: its manifest describes rad_cutoff 2.0, and so does its cache.
    let Some(path) = reference_copy("aenet-torch-cache", "v2_both_f64.h5", dir.path()) else {
        return;
    };
    let bytes = std::fs::read(&path).unwrap();
    let mut other = compat();
    other.rad_cutoff = 3.0;
    let refused =
        TorchCacheWriter::create(&path, &other, StorageDtype::Float64, CacheSections::default())
            .err()
            .expect("refused");
    assert!(matches!(refused, Error::Incompatible { .. }), "{refused}");
    let text = refused.to_string();
    assert!(text.contains("Persisted descriptor manifest is incompatible"), "{text}");
    assert!(text.contains(path.to_str().unwrap()), "names the file: {text}");
    assert!(text.contains(&compat().json()) && text.contains(&other.json()), "both sides: {text}");
    assert_eq!(std::fs::read(&path).unwrap(), bytes, "the file is byte-identical");
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1, "no temporary file is left");

    // A manifest stowage wrote is held to the same rule.
    let fresh = dir.path().join("fresh.h5");
    stowage_append(&fresh, &[0], &[]);
    let bytes = std::fs::read(&fresh).unwrap();
    let refused =
        TorchCacheWriter::create(&fresh, &other, StorageDtype::Float64, CacheSections::default());
    assert!(refused.err().unwrap().to_string().contains("Persisted descriptor manifest"));
    assert_eq!(std::fs::read(&fresh).unwrap(), bytes);
}

#[test]
fn a_cache_with_another_signature_is_refused_naming_both() {
    let _serial = common::one_at_a_time();
    let dir = tempfile::tempdir().unwrap();
    // No manifest here (stowage 9e4830f wrote none): the cache's signature is what refuses.
    let Some(path) = reference_copy("mixed/aenet-append", "cache/dataset.h5", dir.path()) else {
        return;
    };
    let bytes = std::fs::read(&path).unwrap();
    let mut other = compat();
    other.species = vec!["A".into()];
    let refused =
        TorchCacheWriter::create(&path, &other, StorageDtype::Float64, CacheSections::default())
            .err()
            .expect("refused");
    let text = refused.to_string();
    assert!(text.contains("incompatible persisted cache"), "{text}");
    assert!(text.contains(&compat().sha256()) && text.contains(&other.sha256()), "{text}");
    let refused =
        TorchCacheWriter::create(&path, &compat(), StorageDtype::Float32, CacheSections::default())
            .err()
            .expect("refused");
    let text = refused.to_string();
    assert!(text.contains("stores its rows as float64") && text.contains("float32"), "{text}");
    assert_eq!(std::fs::read(&path).unwrap(), bytes);
}

#[test]
fn a_missing_manifest_is_written_as_aenet_writes_it_and_aenet_loads_without_a_descriptor() {
    let _serial = common::one_at_a_time();
    let dir = tempfile::tempdir().unwrap();
    let Some(path) = plain_dataset(dir.path()) else { return };
    stowage_append(&path, &[0, 1], &[0]);
    let written = DescriptorManifest::read(&path).unwrap().expect("a manifest");
    // Byte for byte the manifest aenet itself wrote for this descriptor.
    let set = stowage_test_support::reference::reference_set("aenet-torch-cache").unwrap();
    let aenets = DescriptorManifest::read(set.join("v2_both_f64.h5")).unwrap().unwrap();
    assert_eq!(written, aenets);
    let Some(python) = peer::python("a_missing_manifest_is_written") else { return };
    let out = peer::run(python, "load", &path, &json!({"descriptor": null, "entries": [0, 1]}));
    assert!(out.get("error").is_none(), "{out}");
    assert_eq!(out["descriptor"], peer::descriptor(&compat(), StorageDtype::Float64));
    assert_eq!(peer::decode(&out["features"]["1"]), features(1));
    // Without stowage's manifest aenet could not: the same cache in a file without one.
    let bare = dir.path().join("bare.h5");
    let set = stowage_test_support::reference::reference_set("mixed/aenet-append").unwrap();
    writable_copy(&set.join("cache/dataset.h5"), &bare);
    let out = peer::run(python, "load", &bare, &json!({"descriptor": null, "entries": [0]}));
    assert!(out["error"].as_str().unwrap().contains("requires a descriptor"), "{out}");
}

#[test]
fn a_damaged_stowage_row_is_an_error_never_data() {
    let _serial = common::one_at_a_time();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("dataset.h5");
    stowage_append(&path, &[0, 1, 2], &[0]);
    // Entry 2's features are 10.0, 10.25, ...: find them in the file and change one value.
    let mut bytes = std::fs::read(&path).unwrap();
    let needle: Vec<u8> = [20.0f64, 20.25, 20.5].iter().flat_map(|v| v.to_le_bytes()).collect();
    let at = bytes.windows(needle.len()).position(|w| w == needle).expect("entry 2's values");
    bytes[at + 8] ^= 0x01;
    std::fs::write(&path, &bytes).unwrap();
    let cache = TorchCache::open(&path).unwrap().unwrap();
    let error = cache.features(2).unwrap_err();
    assert!(matches!(error, Error::Corrupted { .. }), "{error}");
    let text = error.to_string();
    assert!(text.contains("features of entry 2") && text.contains("xxh3"), "{text}");
    assert_eq!(cache.features(1).unwrap().unwrap(), features(1), "other rows still read");
    let report = TorchCache::validate(&path, ValidationLevel::Full).unwrap();
    assert_eq!(report.problems.len(), 1, "{report:?}");
    assert_eq!(report.problems[0].key.as_deref(), Some("2"));
    assert!(report.unchecked.is_empty());
    // Neither a write nor an adoption carries a damaged row into a new file.
    let bytes = std::fs::read(&path).unwrap();
    let refused =
        TorchCacheWriter::create(&path, &compat(), StorageDtype::Float64, CacheSections::default());
    assert!(refused.err().unwrap().to_string().contains("features of entry 2"));
    assert_eq!(std::fs::read(&path).unwrap(), bytes);
}
