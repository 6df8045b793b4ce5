//! Issue 17, "writes keep their rate": a flush that fills the tail writes a run of the tail
//! alone (work that grows with the flushed rows, never with the cache); runs are merged on a
//! background thread and installed by later flushes; finalize merges everything into one run;
//! a writer dropped (or killed) during a merge leaves a cache that opens and reads right.

use std::path::Path;

use stowage_core::key_runs::KeyRun;
use stowage_core::{Backend, DType, Reader, Sample, Schema, ShapeRule, Tensor, ValidationLevel};
use stowage_npy::{NpyBackend, NpyOptions};

fn schema() -> Schema {
    Schema::new().tensor("x", DType::U32, ShapeRule::Fixed(vec![1]))
}

fn sample(value: u32) -> Sample {
    Sample::new().with("x", Tensor::from_slice(&[1], &[value]).unwrap())
}

fn options() -> NpyOptions {
    NpyOptions { collection_size: 256, ..NpyOptions::default() }
}

/// The runs `index/current` names, oldest first, opened.
fn named_runs(dir: &Path) -> Vec<KeyRun> {
    let text = std::fs::read(dir.join("index").join("current")).unwrap();
    let current: serde_json::Value = serde_json::from_slice(&text).unwrap();
    current["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|run| {
            let path = dir.join("index").join(run["name"].as_str().unwrap());
            KeyRun::from_bytes(&path, std::fs::read(&path).unwrap()).unwrap()
        })
        .collect()
}

fn check_reads(cache: &NpyBackend, want: &[u32]) {
    assert_eq!(cache.len(), want.len());
    for (i, &value) in want.iter().enumerate() {
        assert_eq!(cache.get(&format!("k{i}")).unwrap(), Some(sample(value)), "k{i}");
    }
    assert_eq!(cache.get("absent").unwrap(), None);
}

/// Fails on the code before issue 17's merge work: its flush merged the tail with every run
/// no larger than what it gathered, so the newest run grew with the cache.
#[test]
fn a_flush_writes_a_run_of_its_tail_alone_and_merges_in_the_background() {
    let dir = tempfile::tempdir().unwrap();
    let mut cache = NpyBackend::create(dir.path(), &schema(), options()).unwrap();
    let tail = 100;
    cache.set_index_tail_entries(tail);
    let mut want = Vec::new();
    let mut most_runs = 0;
    for flush in 0..40u32 {
        for i in 0..tail as u32 {
            let key = flush * tail as u32 + i;
            cache.put(&format!("k{key}"), &sample(key)).unwrap();
            want.push(key);
        }
        cache.flush().unwrap();
        let runs = named_runs(dir.path());
        let newest = runs.last().unwrap();
        assert_eq!(newest.keys(), tail as u64, "flush {flush}: the newest run is the tail's");
        assert_eq!(newest.version(), stowage_core::key_runs::VERSION);
        most_runs = most_runs.max(runs.len());
        // The tail, the runs and a merge running in the background answer together.
        if flush % 8 == 7 {
            check_reads(&cache, &want);
        }
    }
    assert!(most_runs <= 17, "runs are merged as they pile up: {most_runs}");
    // Every key overwritten once more, then finalize: one run of every key.
    for (i, value) in want.iter_mut().enumerate() {
        *value += 1_000_000;
        cache.put(&format!("k{i}"), &sample(*value)).unwrap();
    }
    cache.finalize().unwrap();
    let runs = named_runs(dir.path());
    assert_eq!(runs.len(), 1);
    assert_eq!(runs[0].keys(), want.len() as u64);
    runs[0].verify().unwrap();
    check_reads(&cache, &want);
    drop(cache);
    let files: Vec<String> = std::fs::read_dir(dir.path().join("index"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(files.len(), 2, "current and the one run, no leftovers: {files:?}");
    let reader = NpyBackend::open_read_only(dir.path(), options()).unwrap();
    check_reads(&reader, &want);
    assert!(reader.validate(ValidationLevel::Full).unwrap().is_clean());
}

/// A writer dropped while merges run (as a process killed mid-merge): the merge's run is named by
/// no `current`, the cache opens and reads every flushed key, and the next writer goes on.
#[test]
fn a_writer_dropped_during_a_merge_leaves_a_cache_that_reads_right() {
    for stop_after in [3u32, 4, 7, 12] {
        let dir = tempfile::tempdir().unwrap();
        let mut cache = NpyBackend::create(dir.path(), &schema(), options()).unwrap();
        cache.set_index_tail_entries(50);
        let mut want = Vec::new();
        for flush in 0..stop_after {
            for i in 0..50 {
                let key = flush * 50 + i;
                cache.put(&format!("k{key}"), &sample(key)).unwrap();
                want.push(key);
            }
            cache.flush().unwrap();
        }
        drop(cache);
        let reader = NpyBackend::open_read_only(dir.path(), options()).unwrap();
        check_reads(&reader, &want);
        let report = reader.validate(ValidationLevel::Full).unwrap();
        assert!(report.is_clean(), "{report:?}");
        drop(reader);
        let mut writer = NpyBackend::open_append(dir.path(), options()).unwrap();
        check_reads(&writer, &want);
        writer.put("k0", &sample(77)).unwrap();
        want[0] = 77;
        writer.finalize().unwrap();
        check_reads(&writer, &want);
        assert_eq!(named_runs(dir.path()).len(), 1);
    }
}

/// A merged run a crashed writer left under its final name, but not named by `current`, is
/// never used and is removed by the next writer.
#[test]
fn a_merged_run_current_does_not_name_is_ignored_and_removed() {
    let dir = tempfile::tempdir().unwrap();
    let mut cache = NpyBackend::create(dir.path(), &schema(), options()).unwrap();
    cache.set_index_tail_entries(30);
    for key in 0..90u32 {
        cache.put(&format!("k{key}"), &sample(key)).unwrap();
        if key % 30 == 29 {
            cache.flush().unwrap();
        }
    }
    drop(cache);
    let index = dir.path().join("index");
    let stray = index.join("run_8_999999.bin");
    std::fs::write(&stray, b"not a run").unwrap();
    let reader = NpyBackend::open_read_only(dir.path(), options()).unwrap();
    check_reads(&reader, &(0..90).collect::<Vec<_>>());
    drop(reader);
    let writer = NpyBackend::open_append(dir.path(), options()).unwrap();
    assert!(!stray.exists());
    check_reads(&writer, &(0..90).collect::<Vec<_>>());
}
