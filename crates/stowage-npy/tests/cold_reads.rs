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
