//! `get_batch` tells the kernel the pages it will read (`NpyOptions::cold_read_advice`): the key
//! index runs' slots, the log records they name and the rows. Advice changes when pages are
//! read, never what is read: a batch returns what `get` returns for every key, whatever the
//! policy, from the runs, the in-memory tail, and for keys that are not there.

use stowage_core::cold_reads::ColdReadAdvice;
use stowage_core::{Backend, Reader};
use stowage_npy::{NpyBackend, NpyOptions};

#[path = "common/two_fields.rs"]
mod two_fields;
use two_fields::{sample, schema};

fn options(advice: ColdReadAdvice) -> NpyOptions {
    NpyOptions { collection_size: 64, cold_read_advice: advice, ..NpyOptions::default() }
}

#[test]
fn a_batch_reads_what_get_reads_under_every_advice_policy() {
    let dir = tempfile::tempdir().unwrap();
    let mut cache =
        NpyBackend::create(dir.path(), &schema(), options(ColdReadAdvice::Never)).unwrap();
    cache.set_index_tail_entries(40);
    for i in 0..500u32 {
        cache.put(&format!("k{i}"), &sample(i)).unwrap();
        if i % 25 == 24 {
            cache.flush().unwrap();
        }
    }
    // Overwrites, some of them left in the tail (no run covers the last flush).
    for i in (0..500u32).step_by(9) {
        cache.put(&format!("k{i}"), &sample(i + 1000)).unwrap();
    }
    cache.flush().unwrap();
    drop(cache);
    let keys: Vec<String> = (0..520u32).rev().map(|i| format!("k{i}")).collect();
    let keys: Vec<&str> = keys.iter().map(String::as_str).collect();
    for advice in [ColdReadAdvice::Always, ColdReadAdvice::Adaptive, ColdReadAdvice::Never] {
        let reader = NpyBackend::open_read_only(dir.path(), options(advice)).unwrap();
        let runs = std::fs::read_dir(dir.path().join("index")).unwrap().count();
        assert!(runs >= 2, "runs and the tail are both read ({runs} index files)");
        let batch = reader.get_batch(&keys).unwrap();
        for (key, got) in keys.iter().zip(&batch) {
            assert_eq!(got, &reader.get(key).unwrap(), "{key} under {advice:?}");
        }
        assert_eq!(batch.iter().filter(|s| s.is_some()).count(), 500);
        let k9 = keys.iter().position(|&key| key == "k9").unwrap();
        assert_eq!(batch[k9], Some(sample(1009)), "an overwrite's latest value");
    }
}

/// The `VmFlags` of every map of a file under `dir` whose name starts with `prefix`, from
/// `/proc/self/smaps` (`rr`: `MADV_RANDOM`).
fn map_flags(dir: &std::path::Path, prefix: &str) -> Vec<String> {
    let smaps = std::fs::read_to_string("/proc/self/smaps").unwrap();
    let mut flags = Vec::new();
    let mut current: Option<bool> = None;
    for line in smaps.lines() {
        if let Some(rest) = line.strip_prefix("VmFlags:") {
            if current == Some(true) {
                flags.push(rest.trim().to_owned());
            }
            current = None;
        } else if current.is_none() && line.contains('-') && line.contains(' ') {
            let path = line.split_whitespace().nth(5).map(std::path::Path::new);
            current = Some(path.is_some_and(|p| {
                p.starts_with(dir)
                    && p.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with(prefix))
            }));
        }
    }
    flags
}

fn random(flags: &[String]) -> Vec<bool> {
    flags.iter().map(|f| f.split_whitespace().any(|flag| flag == "rr")).collect()
}

#[test]
#[cfg(target_os = "linux")]
fn a_small_cache_keeps_the_read_around_and_validate_leaves_the_advice_as_it_was() {
    use stowage_core::ValidationLevel;
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path().canonicalize().unwrap();
    let mut cache = NpyBackend::create(&dir, &schema(), options(ColdReadAdvice::Never)).unwrap();
    for i in 0..300u32 {
        cache.put(&format!("k{i}"), &sample(i)).unwrap();
    }
    cache.finalize().unwrap();
    drop(cache);

    // Runs and logs of at most 64 MiB are read whole by a few faults' read-around
    // (`MADV_RANDOM` is for larger ones: the runs module's unit tests): no `rr` on any map.
    for advice in [ColdReadAdvice::Always, ColdReadAdvice::Adaptive, ColdReadAdvice::Never] {
        let reader = NpyBackend::open_read_only(&dir, options(advice)).unwrap();
        assert_eq!(random(&map_flags(&dir, "records.log")), [false]);
        assert_eq!(random(&map_flags(&dir, "run_")), [false]);
        assert!(reader.validate(ValidationLevel::Full).unwrap().problems.is_empty());
        assert_eq!(random(&map_flags(&dir, "run_")), [false]);
        assert_eq!(reader.get("k7").unwrap(), Some(sample(7)));
        reader.get_batch(&["k1", "k200"]).unwrap();
        let maps = random(&map_flags(&dir, ""));
        assert!(maps.len() >= 6 && maps.iter().all(|&r| !r), "{maps:?}");
        drop(reader);
    }
    let writer = NpyBackend::open_append(&dir, options(ColdReadAdvice::Always)).unwrap();
    assert_eq!(random(&map_flags(&dir, "run_")), [false]);
    drop(writer);
}
