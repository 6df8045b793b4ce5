//! The on-disk key index (`index/`, issue 17): a writer turns its tail into runs as it flushes and
//! merges them at finalize; an open maps the runs and replays only the records after them; a
//! missing, damaged or outdated index is never trusted: the log is replayed, `validate` says why,
//! and no `get` returns another key's sample.

use std::path::Path;

use stowage_core::{Backend, Reader, ValidationLevel};
use stowage_npy::{NpyBackend, NpyOptions};

#[path = "common/two_fields.rs"]
mod two_fields;
use two_fields::{sample, schema};

fn options() -> NpyOptions {
    NpyOptions { collection_size: 64, ..NpyOptions::default() }
}

/// Writes keys k0..k{n} in flushes of `per_flush`, with a tail bound of `tail`, overwriting every
/// seventh key once more at the end (value + 1000); returns the expected value of each key.
fn write(dir: &Path, n: u32, per_flush: u32, tail: usize, finalize: bool) -> Vec<u32> {
    let mut cache = NpyBackend::create(dir, &schema(), options()).unwrap();
    cache.set_index_tail_entries(tail);
    let mut want: Vec<u32> = (0..n).collect();
    for i in 0..n {
        cache.put(&format!("k{i}"), &sample(i)).unwrap();
        if (i + 1) % per_flush == 0 {
            cache.flush().unwrap();
        }
    }
    for i in (0..n).step_by(7) {
        cache.put(&format!("k{i}"), &sample(i + 1000)).unwrap();
        want[i as usize] = i + 1000;
    }
    if finalize {
        cache.finalize().unwrap();
    } else {
        cache.flush().unwrap();
    }
    want
}

fn check_reads(cache: &NpyBackend, want: &[u32]) {
    assert_eq!(cache.len(), want.len());
    for (i, &value) in want.iter().enumerate() {
        let key = format!("k{i}");
        assert_eq!(cache.get(&key).unwrap(), Some(sample(value)), "{key}");
        assert!(cache.contains(&key).unwrap());
        assert_eq!(
            cache.record(&key, "x").unwrap().checksum,
            stowage_npy::test_support::xxh64(&bytes_of(&[value, value + 1])),
            "{key}"
        );
    }
    assert_eq!(cache.get("absent").unwrap(), None);
    let keys: Vec<String> = (0..want.len()).map(|i| format!("k{i}")).collect();
    assert_eq!(cache.keys().unwrap(), keys, "first-put order");
}

fn bytes_of(values: &[u32]) -> Vec<u8> {
    values.iter().flat_map(|v| v.to_le_bytes()).collect()
}

fn run_files(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir.join("index"))
        .map(|entries| {
            entries.map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect()
        })
        .unwrap_or_default();
    names.retain(|n| n.starts_with("run_"));
    names.sort();
    names
}

#[test]
fn flushes_write_runs_and_opens_read_through_them() {
    let dir = tempfile::tempdir().unwrap();
    let want = write(dir.path(), 1000, 50, 120, false);
    let runs = run_files(dir.path());
    assert!(runs.len() > 1 && runs.len() <= 6, "geometric merges keep few runs: {runs:?}");
    let reader = NpyBackend::open_read_only(dir.path(), options()).unwrap();
    check_reads(&reader, &want);
    let report = reader.validate(ValidationLevel::Full).unwrap();
    assert!(report.is_clean(), "{report:?}");
    // A writer resumes from the index and goes on.
    let mut writer = NpyBackend::open_append(dir.path(), options()).unwrap();
    writer.set_index_tail_entries(120);
    check_reads(&writer, &want);
    writer.put("k3", &sample(3333)).unwrap();
    writer.put("k1000", &sample(1000)).unwrap();
    writer.finalize().unwrap();
    assert_eq!(run_files(dir.path()).len(), 1, "finalize merges into one run");
    let mut want = want;
    want[3] = 3333;
    want.push(1000);
    let reader = NpyBackend::open_read_only(dir.path(), options()).unwrap();
    check_reads(&reader, &want);
    assert!(reader.is_finalized());
    assert!(reader.validate(ValidationLevel::Full).unwrap().is_clean());
}

#[test]
fn a_missing_or_outdated_index_is_rebuilt_from_the_log_and_reported() {
    let dir = tempfile::tempdir().unwrap();
    let want = write(dir.path(), 300, 40, 64, true);
    let current = dir.path().join("index").join("current");
    let original = std::fs::read(&current).unwrap();

    std::fs::remove_file(&current).unwrap();
    let reader = NpyBackend::open_read_only(dir.path(), options()).unwrap();
    check_reads(&reader, &want);
    let report = reader.validate(ValidationLevel::Structure).unwrap();
    assert!(
        report.problems.iter().any(|p| p.path.as_deref() == Some(current.as_path())),
        "{report:?}"
    );
    // A writer repairs it.
    drop(NpyBackend::open_append(dir.path(), options()).unwrap());
    assert!(current.exists());
    let reader = NpyBackend::open_read_only(dir.path(), options()).unwrap();
    check_reads(&reader, &want);
    assert!(reader.validate(ValidationLevel::Structure).unwrap().is_clean());

    // A `current` that names a log end the log does not have there (the log changed under it).
    let mut value: serde_json::Value = serde_json::from_slice(&original).unwrap();
    value["last_record"]["checksum"] = serde_json::json!(12345);
    std::fs::write(&current, serde_json::to_vec(&value).unwrap()).unwrap();
    let reader = NpyBackend::open_read_only(dir.path(), options()).unwrap();
    check_reads(&reader, &want);
    assert!(!reader.validate(ValidationLevel::Structure).unwrap().is_undamaged());
    // Garbage.
    std::fs::write(&current, b"{not json").unwrap();
    let reader = NpyBackend::open_read_only(dir.path(), options()).unwrap();
    check_reads(&reader, &want);
}

#[test]
fn a_damaged_run_never_returns_another_keys_sample() {
    let dir = tempfile::tempdir().unwrap();
    let want = write(dir.path(), 200, 200, 1_000_000, true);
    let runs = run_files(dir.path());
    assert_eq!(runs.len(), 1);
    let path = dir.path().join("index").join(&runs[0]);
    let good = std::fs::read(&path).unwrap();
    // Every 8th byte of the slots, one at a time: payload and hash bytes alike.
    for at in (80..good.len()).step_by(37) {
        let mut bad = good.clone();
        bad[at] ^= 0x5a;
        std::fs::write(&path, &bad).unwrap();
        let reader = NpyBackend::open_read_only(dir.path(), options()).unwrap();
        for (i, &value) in want.iter().enumerate() {
            match reader.get(&format!("k{i}")) {
                Ok(Some(got)) => assert_eq!(got, sample(value), "byte {at}, k{i}"),
                Ok(None) => {} // a damaged slot may hide a key
                Err(e) => panic!("byte {at}, k{i}: {e}"),
            }
        }
        let report = reader.validate(ValidationLevel::Structure).unwrap();
        if bad[at] != good[at] {
            assert!(
                report.problems.iter().any(|p| p.path.as_deref() == Some(path.as_path())),
                "byte {at}: {report:?}"
            );
        }
    }
    // A damaged header: the run is not used, the log is replayed.
    let mut bad = good.clone();
    bad[20] ^= 1;
    std::fs::write(&path, &bad).unwrap();
    let reader = NpyBackend::open_read_only(dir.path(), options()).unwrap();
    check_reads(&reader, &want);
    assert!(!reader.validate(ValidationLevel::Structure).unwrap().is_undamaged());
}

#[test]
fn a_crash_before_current_names_a_run_leaves_the_old_index_in_use() {
    let dir = tempfile::tempdir().unwrap();
    let want = write(dir.path(), 300, 30, 64, false);
    // A run a crashed writer left beside the ones in use: ignored by readers, removed by writers.
    let stray = dir.path().join("index").join("run_8_99999.bin");
    std::fs::write(&stray, b"half a run").unwrap();
    let reader = NpyBackend::open_read_only(dir.path(), options()).unwrap();
    check_reads(&reader, &want);
    assert!(reader.validate(ValidationLevel::Structure).unwrap().is_clean());
    drop(NpyBackend::open_append(dir.path(), options()).unwrap());
    assert!(!stray.exists());
}

#[test]
fn caches_without_an_index_still_open() {
    // What the code before the index wrote: records.log only.
    let dir = tempfile::tempdir().unwrap();
    let want = write(dir.path(), 100, 10, 1_000_000, false);
    assert!(!dir.path().join("index").exists(), "a small unfinished cache stays in the tail");
    let reader = NpyBackend::open_read_only(dir.path(), options()).unwrap();
    check_reads(&reader, &want);
    assert!(reader.validate(ValidationLevel::Full).unwrap().is_clean());
}

/// The open is constant: records before the index's end are not read at open (a byte flipped in
/// one of them does not stop the open, as it did when every open replayed the log); the damaged
/// record's key is hidden, never misread, and `validate` reports the damage.
#[test]
fn an_open_reads_only_the_records_after_the_index() {
    let dir = tempfile::tempdir().unwrap();
    let want = write(dir.path(), 300, 100, 64, true);
    let log = dir.path().join("records.log");
    let mut bytes = std::fs::read(&log).unwrap();
    // The first record ("k0", later overwritten) starts after the 8-byte header and its 12-byte
    // frame; k1's record is the second one.
    let k1 = 8 + 12 + (u32::from_le_bytes(bytes[8..12].try_into().unwrap()) as usize);
    let k1_payload = k1 + 12;
    assert!(bytes[k1_payload..k1_payload + 6].starts_with(b"[\"k1\""));
    bytes[k1_payload + 10] ^= 1;
    std::fs::write(&log, &bytes).unwrap();

    let reader = NpyBackend::open_read_only(dir.path(), options()).unwrap();
    assert_eq!(reader.get("k1").unwrap(), None, "hidden, never misread");
    for (i, &value) in want.iter().enumerate().skip(2) {
        assert_eq!(reader.get(&format!("k{i}")).unwrap(), Some(sample(value)));
    }
    assert_eq!(reader.get("k0").unwrap(), Some(sample(1000)), "its latest record is intact");
    let report = reader.validate(ValidationLevel::Structure).unwrap();
    assert!(report.problems.iter().any(|p| p.path.as_deref() == Some(log.as_path())), "{report:?}");
}

/// A create over the leftovers of a crashed create (an `index/` of no cache) starts without an
/// index, and a small unfinished cache reads clean.
#[test]
fn a_new_cache_drops_a_stale_index() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("index")).unwrap();
    std::fs::write(dir.path().join("index").join("current"), b"{}").unwrap();
    std::fs::write(dir.path().join("index").join("run_8_100.bin"), b"junk").unwrap();
    let mut cache = NpyBackend::create(dir.path(), &schema(), options()).unwrap();
    cache.put("a", &sample(1)).unwrap();
    cache.flush().unwrap();
    assert!(!dir.path().join("index").exists());
    let reader = NpyBackend::open_read_only(dir.path(), options()).unwrap();
    assert_eq!(reader.get("a").unwrap(), Some(sample(1)));
    assert!(reader.validate(ValidationLevel::Full).unwrap().is_clean());
}
