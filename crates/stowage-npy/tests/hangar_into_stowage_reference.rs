//! The `mixed/hangar-into-stowage` reference set: two caches stowage wrote (one finalized, one
//! not) into which hangar 0.5.2 then wrote three samples of its own, in a collection file of its
//! own with a staging marker.
//!
//! stowage must read every key and every hangar record, report hangar's file as unchecked (never
//! as a problem), and, resuming the unfinished cache, append and finalize without touching
//! hangar's data file or marker or reusing its uid.

#[path = "common/mixed.rs"]
mod mixed;

use mixed::{Expected, assert_unchanged, snapshot, uids_in};
use serde_json::Value;
use std::path::{Path, PathBuf};
use stowage_core::{Backend, Error, Reader, Sample, Tensor, ValidationLevel};
use stowage_npy::Numpy10Record;
use stowage_npy::{NpyBackend, NpyOptions, read_hangar_record};

const SET: &str = "mixed/hangar-into-stowage";

struct Cache {
    name: &'static str,
    dir: PathBuf,
    /// (key, record, expected value) of every key stowage wrote.
    keys: Vec<(String, String, Expected)>,
    /// (record, expected value) of every sample hangar wrote.
    hangar: Vec<(String, Expected)>,
}

impl Cache {
    fn hangar_uid(&self) -> String {
        Numpy10Record::parse(&self.hangar[0].0).unwrap().uid
    }
}

fn caches(set: &Path) -> Vec<Cache> {
    let text = std::fs::read_to_string(set.join("manifest.json")).unwrap();
    let manifest: Value = serde_json::from_str(&text).unwrap();
    ["finalized", "unfinished"]
        .into_iter()
        .map(|name| {
            let m = &manifest["caches"][name];
            let keys: Vec<_> = m["keys"]
                .as_object()
                .unwrap()
                .iter()
                .map(|(key, k)| {
                    let x = &k["fields"]["x"];
                    let expected = Expected::read(&set.join(x["expected_file"].as_str().unwrap()));
                    (key.clone(), x["record"].as_str().unwrap().to_owned(), expected)
                })
                .collect();
            let hangar: Vec<_> = m["hangar_records"]
                .as_object()
                .unwrap()
                .iter()
                .map(|(record, r)| {
                    let expected = Expected::read(&set.join(r["expected_file"].as_str().unwrap()));
                    (record.clone(), expected)
                })
                .collect();
            assert_eq!((keys.len(), hangar.len()), (if name == "finalized" { 4 } else { 3 }, 3));
            Cache { name, dir: set.join(m["cache_path"].as_str().unwrap()), keys, hangar }
        })
        .collect()
}

/// Every key and record reads as expected through `cache`, and hangar's records also through
/// `read_hangar_record` (which requires hangar's marker).
fn assert_reads_everything(cache: &NpyBackend, c: &Cache, when: &str) {
    for (key, record, expected) in &c.keys {
        let what = format!("{} {when}: key {key}", c.name);
        let sample = cache.get(key).unwrap().unwrap_or_else(|| panic!("{what}: missing"));
        expected.assert_read(sample.tensor("x").unwrap(), &what);
        assert_eq!(cache.record(key, "x").unwrap().to_string(), *record, "{what}");
    }
    for (record, expected) in &c.hangar {
        let what = format!("{} {when}: hangar record {record}", c.name);
        let parsed = Numpy10Record::parse(record).unwrap();
        let got = cache.read_record("x", &parsed, true).unwrap_or_else(|e| panic!("{what}: {e}"));
        expected.assert_read(&got, &what);
        let got = read_hangar_record(cache.path(), record, true)
            .unwrap_or_else(|e| panic!("{what} (read_hangar_record): {e}"));
        expected.assert_read(&got, &what);
    }
}

/// validate reports hangar's file, and only it, as unchecked, and no problem.
fn assert_hangar_file_unchecked(cache: &NpyBackend, c: &Cache, when: &str) {
    for level in [ValidationLevel::Structure, ValidationLevel::Full] {
        let report = cache.validate(level).unwrap();
        let what = format!("{} {when}: validate({level:?})", c.name);
        assert!(report.problems.is_empty(), "{what}: {:?}", report.problems);
        assert!(report.is_undamaged() && !report.is_clean(), "{what}");
        assert_eq!(report.unchecked.len(), 1, "{what}: {:?}", report.unchecked);
        let unchecked = &report.unchecked[0];
        assert_eq!(unchecked.path, cache.layout().data_file(&c.hangar_uid()), "{what}");
        assert_eq!(unchecked.writer, "hangar", "{what}");
        // hangar's records are in its LMDB, not in the cache: no count is invented.
        assert_eq!(unchecked.samples, 0, "{what}");
        for needle in ["LMDB", "staged", "--record", "read_record"] {
            assert!(unchecked.next_step.contains(needle), "{what}: {needle:?} in {unchecked}");
        }
        assert!(unchecked.next_step.contains("1000 slots of <f4 (3, 4)"), "{what}: {unchecked}");
        assert!(unchecked.next_step.contains("field \"x\""), "{what}: {unchecked}");
    }
}

#[test]
fn every_key_and_every_hangar_record_reads_as_expected() {
    let Some(set) = stowage_test_support::reference::reference_set(SET) else { return };
    for c in caches(&set) {
        // Read-only: takes no lock and changes no file of the set.
        let cache = NpyBackend::open_read_only(&c.dir, NpyOptions::default()).unwrap();
        assert_eq!(cache.is_finalized(), c.name == "finalized");
        let mut keys = cache.keys().unwrap();
        keys.sort();
        let mut want: Vec<String> = c.keys.iter().map(|(k, ..)| k.clone()).collect();
        want.sort();
        assert_eq!(keys, want, "{}: stowage lists exactly its own keys", c.name);
        assert_reads_everything(&cache, &c, "as published");
        assert_hangar_file_unchecked(&cache, &c, "as published");
    }
}

fn sample(i: usize) -> Sample {
    let rows = 1 + i % 3;
    let values: Vec<f32> = (0..rows * 4).map(|v| (i * 100 + v) as f32 - 0.5).collect();
    Sample::new().with("x", Tensor::from_slice(&[rows, 4], &values).unwrap())
}

#[test]
fn resuming_the_unfinished_cache_leaves_hangars_file_alone() {
    let Some(set) = stowage_test_support::reference::reference_set(SET) else { return };
    let c = caches(&set).into_iter().find(|c| c.name == "unfinished").unwrap();
    let copy = tempfile::tempdir().unwrap();
    stowage_conformance::corrupt::copy_tree(&c.dir, copy.path()).unwrap();
    let c = Cache { dir: copy.path().to_path_buf(), ..c };
    let uid = c.hangar_uid();
    let mut layout = stowage_npy::test_support::Layout::new(copy.path());
    let hangars = snapshot(&[layout.data_file(&uid), layout.stage_marker(&uid)]);
    let stowage_uid = "myfucnxi";

    let mut cache = NpyBackend::open_append(copy.path(), NpyOptions::default()).unwrap();
    layout = cache.layout().clone();
    assert_unchanged(&hangars, "open_append");
    assert_reads_everything(&cache, &c, "after open_append");
    let mut added = Vec::new();
    for i in 0..5 {
        let key = format!("resumed{i}");
        cache.put(&key, &sample(i)).unwrap();
        added.push((key, Expected::of(sample(i).tensor("x").unwrap())));
    }
    cache.flush().unwrap();
    assert_unchanged(&hangars, "put and flush");
    let new_uid = cache.record("resumed0", "x").unwrap().uid;
    assert_ne!(new_uid, uid, "hangar's uid is never reused");
    assert_ne!(new_uid, stowage_uid, "a resumed session starts a new file");
    assert_reads_everything(&cache, &c, "after flush");
    assert_hangar_file_unchecked(&cache, &c, "after flush");

    cache.finalize().unwrap();
    assert_unchanged(&hangars, "finalize");
    assert!(!layout.store_marker(&uid).exists(), "hangar's file is not committed by stowage");
    for own in [stowage_uid, new_uid.as_str()] {
        assert!(layout.store_marker(own).exists(), "{own}: stowage commits its own file");
        assert!(!layout.stage_marker(own).exists(), "{own}: and clears its staging marker");
    }
    assert_eq!(uids_in(&layout.stage_dir()), [uid], "only hangar's marker is staged");
    drop(cache);

    let cache = NpyBackend::open_read_only(copy.path(), NpyOptions::default()).unwrap();
    assert!(cache.is_finalized());
    assert_reads_everything(&cache, &c, "after finalize");
    for (key, expected) in &added {
        expected.assert_read(cache.get(key).unwrap().unwrap().tensor("x").unwrap(), key);
    }
    assert_hangar_file_unchecked(&cache, &c, "after finalize");
    assert_unchanged(&hangars, "validate");
}

#[test]
fn a_writer_on_the_finalized_cache_refuses_puts_and_leaves_hangars_file_alone() {
    let Some(set) = stowage_test_support::reference::reference_set(SET) else { return };
    let c = caches(&set).into_iter().find(|c| c.name == "finalized").unwrap();
    let copy = tempfile::tempdir().unwrap();
    stowage_conformance::corrupt::copy_tree(&c.dir, copy.path()).unwrap();
    let c = Cache { dir: copy.path().to_path_buf(), ..c };
    let uid = c.hangar_uid();
    let layout = stowage_npy::test_support::Layout::new(copy.path());
    let hangars = snapshot(&[layout.data_file(&uid), layout.stage_marker(&uid)]);

    let mut cache = NpyBackend::open_append(copy.path(), NpyOptions::default()).unwrap();
    let err = cache.put("late", &sample(0)).unwrap_err();
    assert!(matches!(err, Error::Finalized { .. }), "{err}");
    cache.finalize().unwrap();
    assert_reads_everything(&cache, &c, "after a writer's finalize");
    assert_hangar_file_unchecked(&cache, &c, "after a writer's finalize");
    drop(cache);
    assert_unchanged(&hangars, "a writer's open, refused put and finalize");
    assert!(!layout.store_marker(&uid).exists());
    assert_eq!(uids_in(&layout.data_dir()).len(), 2, "no file was added");
}
