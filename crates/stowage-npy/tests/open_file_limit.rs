//! A cache of more collection files than the process may open files, and than a handle keeps
//! mapped (`NpyOptions::max_open_files`): written, opened read-only and for append, validated and
//! read back whole under `RLIMIT_NOFILE` = 256, holding a bounded number of descriptors and maps
//! throughout (a map outlives its file's descriptor; the bound on maps closes the least recently
//! used).
//!
//! This binary holds this one test only: the limit is the whole process's.

use std::collections::BTreeMap;

use stowage_core::ValidationLevel;
use stowage_core::{Backend, DType, OpenMode, Reader, Sample, Schema, ShapeRule, Tensor};
use stowage_npy::{NpyBackend, NpyOptions};
use stowage_test_support::process::{descriptors, maps_where, set_descriptor_limit};

const LIMIT: u64 = 256;
/// Samples, each in a collection file of its own (one slot per file): more files than the limit
/// and than the usual default limit (1,024).
const SAMPLES: usize = 1200;
/// Descriptors the process may hold at most beyond those it held before the cache: the record
/// log, the owned-files log, the writer lock, the open collection file and a few transient ones.
const MOST_DESCRIPTORS: usize = 16;
/// Collection files each handle keeps mapped: fewer than the cache has.
const MOST_MAPS: usize = 100;

fn options() -> NpyOptions {
    NpyOptions { collection_size: 1, max_open_files: MOST_MAPS, ..NpyOptions::default() }
}

fn sample(i: usize, version: u32) -> Sample {
    let values = [i as f32, version as f32, 1.5, -2.0];
    Sample::new().with("x", Tensor::from_slice(&[4], &values).unwrap())
}

/// Memory maps of collection files in this process.
fn mapped_collections() -> usize {
    maps_where(|line| line.contains("/data/") && line.ends_with(".npy"))
}

/// The process holds no more descriptors and maps than the bounds allow (`at` says where).
fn assert_bounded(baseline: usize, at: &str) {
    let open = descriptors();
    assert!(
        open <= baseline + MOST_DESCRIPTORS,
        "{at}: {open} descriptors open ({baseline} before)"
    );
    let maps = mapped_collections();
    assert!(maps <= MOST_MAPS, "{at}: {maps} collection files mapped");
}

/// Every key of `expected` reads back exactly from `cache`, one at a time and in batches.
fn assert_reads_back(cache: &dyn Reader, expected: &BTreeMap<String, Sample>) {
    assert_eq!(cache.len(), expected.len());
    for (key, want) in expected {
        assert_eq!(cache.get(key).unwrap().as_ref(), Some(want), "key {key}");
    }
    let keys: Vec<&str> = expected.keys().map(String::as_str).collect();
    for batch in keys.chunks(500) {
        let got = cache.get_batch(batch).unwrap();
        for (key, got) in batch.iter().zip(got) {
            assert_eq!(got.as_ref(), expected.get(*key), "key {key} in a batch");
        }
    }
}

#[test]
fn a_cache_of_more_collection_files_than_descriptors_is_written_opened_validated_and_read() {
    set_descriptor_limit(LIMIT);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cache");
    let schema = Schema::new().tensor("x", DType::F32, ShapeRule::Fixed(vec![4]));
    let baseline = descriptors();
    let mut expected = BTreeMap::new();

    // Written in two sessions: a writer that leaves the cache unfinished, then one that
    // resumes it (a finalized npy cache takes no more writes), overwrites keys and finalizes.
    let mut cache = NpyBackend::create(&path, &schema, options()).unwrap();
    let mut write = |cache: &mut NpyBackend, keys: &mut dyn Iterator<Item = usize>, version| {
        for (n, i) in keys.enumerate() {
            let key = format!("key-{i:05}");
            cache.put(&key, &sample(i, version)).unwrap();
            expected.insert(key, sample(i, version));
            if n % 10 == 9 {
                cache.flush().unwrap();
            }
            // The writer reads too, so files are mapped (and closed) while it writes.
            if n % 7 == 6 {
                let key = format!("key-{:05}", (i * 389) % (i + 1));
                let want = expected.get(&key).cloned();
                assert_eq!(cache.get(&key).unwrap(), want, "{key}");
            }
        }
        cache.flush().unwrap();
    };
    write(&mut cache, &mut (0..SAMPLES / 2), 0);
    assert_bounded(baseline, "after the first writer");
    drop(cache);
    let mut cache = NpyBackend::open(&path, OpenMode::Append, options()).unwrap();
    assert_bounded(baseline, "after resuming");
    write(&mut cache, &mut (SAMPLES / 2..SAMPLES), 0);
    write(&mut cache, &mut (0..SAMPLES).step_by(97), 1);
    assert_bounded(baseline, "after writing");
    assert_eq!(cache.validate(ValidationLevel::Full).unwrap().samples_checked, SAMPLES as u64);
    cache.finalize().unwrap();
    drop(cache);

    let reader = NpyBackend::open(&path, OpenMode::ReadOnly, options()).unwrap();
    assert_bounded(baseline, "after opening read-only");
    let report = reader.validate(ValidationLevel::Full).unwrap();
    assert!(report.is_clean(), "{report:?}");
    assert_eq!(report.samples_checked, SAMPLES as u64);
    assert_reads_back(&reader, &expected);
    assert_bounded(baseline, "after validating and reading every key");
    assert!(mapped_collections() >= MOST_MAPS / 2, "files stay mapped up to the bound");
}
