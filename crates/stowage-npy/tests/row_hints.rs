//! Row hints in the key index (index version 2): each run slot also says where its key's first
//! field lies, so that a lookup starts the row's load beside the log record's. The record still
//! decides what is read: version 1 indexes (plain offsets) keep working, and a wrong hint never
//! changes a result.

use std::path::Path;

use stowage_core::file_safety::AppendLog;
use stowage_core::key_runs::{KeyRun, RunSpec, build_run};
use stowage_core::{Backend, Reader, ValidationLevel};
use stowage_npy::{NpyBackend, NpyOptions};

#[path = "common/two_fields.rs"]
mod two_fields;
use two_fields::{sample, schema};

const COLLECTION_SIZE: usize = 16;

fn options() -> NpyOptions {
    NpyOptions { collection_size: COLLECTION_SIZE, ..NpyOptions::default() }
}

/// Keys k0..k{n}, every fifth key put again (value + 1000), in one run. `finished`: flushes of
/// 25, runs of at most 40 tail entries, merged by the finalize; else one flush writes the run.
/// Returns each key's value.
fn write(dir: &Path, n: u32, finished: bool) -> Vec<u32> {
    let mut cache = NpyBackend::create(dir, &schema(), options()).unwrap();
    cache.set_index_tail_entries(if finished { 40 } else { 1 });
    let mut want: Vec<u32> = (0..n).collect();
    for i in 0..n {
        cache.put(&format!("k{i}"), &sample(i)).unwrap();
        if finished && (i + 1) % 25 == 0 {
            cache.flush().unwrap();
        }
    }
    for i in (0..n).step_by(5) {
        cache.put(&format!("k{i}"), &sample(i + 1000)).unwrap();
        want[i as usize] = i + 1000;
    }
    if finished {
        cache.finalize().unwrap();
    } else {
        cache.flush().unwrap();
    }
    want
}

fn check_reads(cache: &NpyBackend, want: &[u32]) {
    assert_eq!(cache.len(), want.len());
    for (i, &value) in want.iter().enumerate() {
        assert_eq!(cache.get(&format!("k{i}")).unwrap(), Some(sample(value)), "k{i}");
    }
    assert_eq!(cache.get("absent").unwrap(), None);
}

fn current(dir: &Path) -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(dir.join("index").join("current")).unwrap()).unwrap()
}

/// The one run `index/current` names, and its path.
fn only_run(dir: &Path) -> (KeyRun, std::path::PathBuf) {
    let runs = current(dir)["runs"].as_array().unwrap().clone();
    assert_eq!(runs.len(), 1, "the cache has one run");
    let path = dir.join("index").join(runs[0]["name"].as_str().unwrap());
    (KeyRun::from_bytes(&path, std::fs::read(&path).unwrap()).unwrap(), path)
}

/// Whether the key index was used at open (not rebuilt from the log).
fn runs_in_use(cache: &NpyBackend) -> bool {
    let described = format!("{:?}", cache.describe().unwrap());
    described.contains("on-disk run") && !described.contains("rebuilt from records.log")
}

/// The payload layout `stowage-npy`'s README documents, decoded independently of the crate:
/// (record offset, hint).
fn decode(payload: u64) -> (u64, Option<u64>) {
    if payload >> 63 == 0 {
        (payload - 1, None)
    } else {
        ((payload & ((1 << 39) - 1)) - 1, Some((payload >> 39) & ((1 << 24) - 1)))
    }
}

/// (first field's uid, row) of the log record at `offset`.
fn first_row(log: &[u8], offset: u64) -> (String, u64) {
    let (entry, _, _) = AppendLog::record_at(log, offset).expect("a record at the offset");
    let entry: Vec<String> = serde_json::from_slice(entry).unwrap();
    let parts: Vec<&str> = entry[1].split(':').collect();
    (parts[1].to_owned(), parts[3].parse().unwrap())
}

#[test]
fn every_slot_of_a_written_index_hints_its_records_row() {
    let dir = tempfile::tempdir().unwrap();
    let want = write(dir.path(), 300, true);
    let current = current(dir.path());
    assert_eq!(current["version"], 2);
    let uids: Vec<String> = serde_json::from_value(current["uids"].clone()).unwrap();
    let (run, _) = only_run(dir.path());
    let log = std::fs::read(dir.path().join("records.log")).unwrap();
    let mut slots = 0;
    for (_, payload) in run.slots() {
        let (offset, hint) = decode(payload);
        let (uid, row) = first_row(&log, offset);
        let file = uids.iter().position(|u| *u == uid).expect("current lists the uid") as u64;
        assert_eq!(hint, Some(file * COLLECTION_SIZE as u64 + row), "record at {offset}");
        slots += 1;
    }
    assert_eq!(slots, want.len());
    let reader = NpyBackend::open_read_only(dir.path(), options()).unwrap();
    assert!(runs_in_use(&reader));
    check_reads(&reader, &want);
    assert!(reader.validate(ValidationLevel::Full).unwrap().is_clean());
}

/// Rewrites the cache's one run with `payload_of` each slot's (offset, hint), and names it in
/// `index/current` with `version`.
fn rewrite_run(dir: &Path, version: u32, payload_of: impl Fn(u64, Option<u64>) -> u64) {
    let (run, path) = only_run(dir);
    let fresh: Vec<(u64, u64)> = run
        .slots()
        .map(|(hash, payload)| {
            let (offset, hint) = decode(payload);
            (hash, payload_of(offset, hint))
        })
        .collect();
    let spec = RunSpec { first: run.first(), through: run.through(), stamp: run.stamp() };
    let bytes = build_run(&[], &fresh, spec, |a, b| a == b, |_, _| false).unwrap();
    let rebuilt = KeyRun::from_bytes(&path, bytes.clone()).unwrap();
    std::fs::write(&path, &bytes).unwrap();
    let mut current = current(dir);
    current["version"] = version.into();
    current["runs"][0]["header_checksum"] = rebuilt.header().header_checksum.into();
    std::fs::write(dir.join("index").join("current"), serde_json::to_vec(&current).unwrap())
        .unwrap();
}

#[test]
fn a_version_1_index_is_still_read_and_the_next_writer_upgrades_it() {
    let dir = tempfile::tempdir().unwrap();
    let mut want = write(dir.path(), 300, false);
    // What stowage-npy wrote before version 2: offset + 1 in every slot.
    rewrite_run(dir.path(), 1, |offset, _| offset + 1);
    let reader = NpyBackend::open_read_only(dir.path(), options()).unwrap();
    assert!(runs_in_use(&reader), "a version 1 index is used, not rebuilt");
    check_reads(&reader, &want);
    assert!(reader.validate(ValidationLevel::Full).unwrap().is_clean());
    drop(reader);

    let mut writer = NpyBackend::open_append(dir.path(), options()).unwrap();
    for i in (0..300).step_by(3) {
        writer.put(&format!("k{i}"), &sample(i + 2000)).unwrap();
        want[i as usize] = i + 2000;
    }
    writer.finalize().unwrap();
    drop(writer);
    assert_eq!(current(dir.path())["version"], 2);
    let (run, _) = only_run(dir.path());
    let hinted = run.slots().filter(|&(_, payload)| decode(payload).1.is_some()).count();
    assert_eq!(hinted, 100, "the keys written since carry hints, the older ones do not");
    let reader = NpyBackend::open_read_only(dir.path(), options()).unwrap();
    assert!(runs_in_use(&reader));
    check_reads(&reader, &want);
    assert!(reader.validate(ValidationLevel::Full).unwrap().is_clean());
}

#[test]
fn a_wrong_hint_never_changes_what_is_read() {
    let dir = tempfile::tempdir().unwrap();
    let want = write(dir.path(), 300, true);
    // Hints to other rows, to rows past every file, and to the largest hint there is.
    for wrong in [|h: u64| h ^ 1, |h: u64| h + 10_000, |_| (1 << 24) - 1] {
        rewrite_run(dir.path(), 2, |offset, hint| {
            1 << 63 | wrong(hint.expect("written hinted")) << 39 | (offset + 1)
        });
        let reader = NpyBackend::open_read_only(dir.path(), options()).unwrap();
        assert!(runs_in_use(&reader));
        check_reads(&reader, &want);
    }
}
