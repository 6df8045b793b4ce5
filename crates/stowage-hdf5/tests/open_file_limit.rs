//! A generic cache of more segments than the process may open files: written, opened read-only
//! and for append, validated and read back whole under `RLIMIT_NOFILE` = 256, holding a bounded
//! number of descriptors and maps throughout (segments detach from libhdf5 once open, so they
//! hold no descriptor: the bound on maps closes them).
//!
//! This binary holds this one test only: the limit is the whole process's.

use std::collections::BTreeMap;

use stowage_core::{
    Backend, DType, OpenMode, Reader, Sample, Schema, ShapeRule, Tensor, ValidationLevel,
};
use stowage_hdf5::{Hdf5Backend, Hdf5Options};
use stowage_test_support::process::{descriptors, maps_where, set_descriptor_limit};

const LIMIT: u64 = 256;
/// More segments than this limit, and than the usual default limit (1,024), where the issue saw
/// opens fail: the code before the bound failed writing the 248th. About 5 s in a debug build.
const SEGMENTS: usize = 1200;
const ROWS_PER_SEGMENT: usize = 3;
/// Descriptors the process may hold at most, beyond those it held before the cache: the default
/// 64 segments open in libhdf5, the commit log, the writer lock and a few transient ones.
const MOST_DESCRIPTORS: usize = 64 + 16;
/// Segments each handle keeps mapped: fewer than the cache has, so that the bound closes some.
const MOST_MAPS: usize = 500;

fn options() -> Hdf5Options {
    Hdf5Options { max_mapped_segments: MOST_MAPS, ..Hdf5Options::default() }
}

fn schema() -> Schema {
    Schema::new().tensor("x", DType::F32, ShapeRule::Max(vec![4]))
}

fn sample(i: usize, version: u32) -> Sample {
    let values: Vec<f32> =
        (0..=i % 4).map(|j| i as f32 * 0.5 + j as f32 + version as f32).collect();
    Sample::new().with("x", Tensor::from_slice(&[values.len()], &values).unwrap())
}

/// Memory maps of segment files in this process.
fn mapped_segments() -> usize {
    maps_where(|line| line.contains("/segments/segment_"))
}

/// The process holds no more descriptors and maps than the bound allows (`at` says where).
fn assert_bounded(baseline: usize, at: &str) {
    let open = descriptors();
    assert!(
        open <= baseline + MOST_DESCRIPTORS,
        "{at}: {open} descriptors open ({baseline} before)"
    );
    let maps = mapped_segments();
    assert!(maps <= MOST_MAPS, "{at}: {maps} segment maps");
}

/// Every key of `expected` reads back exactly from `cache`, and nothing else is in it.
fn assert_reads_back(cache: &dyn Reader, expected: &BTreeMap<String, Sample>) {
    assert_eq!(cache.len(), expected.len());
    for (key, want) in expected {
        assert_eq!(cache.get(key).unwrap().as_ref(), Some(want), "key {key}");
    }
}

#[test]
fn a_cache_of_more_segments_than_descriptors_is_written_opened_validated_and_read() {
    set_descriptor_limit(LIMIT);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cache");
    let baseline = descriptors();
    let mut expected = BTreeMap::new();

    let mut cache = Hdf5Backend::create_with(&path, &schema(), &options()).unwrap();
    for segment in 0..SEGMENTS {
        for row in 0..ROWS_PER_SEGMENT {
            let i = segment * ROWS_PER_SEGMENT + row;
            let key = format!("key-{i:05}");
            cache.put(&key, &sample(i, 0)).unwrap();
            expected.insert(key, sample(i, 0));
        }
        cache.flush().unwrap();
        // The writer reads too: an earlier segment's key every few flushes, so segments are
        // opened (and evicted) while it writes.
        if segment % 7 == 6 {
            let i = (segment * 389) % ((segment + 1) * ROWS_PER_SEGMENT);
            let key = format!("key-{i:05}");
            assert_eq!(cache.get(&key).unwrap().as_ref(), expected.get(&key), "{key}");
        }
    }
    assert_bounded(baseline, "after writing");
    cache.finalize().unwrap();
    drop(cache);

    let reader = Hdf5Backend::open_with(&path, OpenMode::ReadOnly, &options()).unwrap();
    assert_bounded(baseline, "after opening read-only");
    let report = reader.validate(ValidationLevel::Full).unwrap();
    assert!(report.is_clean(), "{report:?}");
    assert_eq!(report.samples_checked, (SEGMENTS * ROWS_PER_SEGMENT) as u64);
    assert_reads_back(&reader, &expected);
    assert_bounded(baseline, "after validating and reading every key");
    assert!(mapped_segments() >= 64, "segments stay open past the bound on descriptors");
    drop(reader);

    // Append: overwrite some keys, add new ones, a few segments more, all read back.
    let mut appender = Hdf5Backend::open_with(&path, OpenMode::Append, &options()).unwrap();
    assert_bounded(baseline, "after opening for append");
    for i in (0..SEGMENTS * ROWS_PER_SEGMENT + 30).step_by(97) {
        let key = format!("key-{i:05}");
        appender.put(&key, &sample(i, 1)).unwrap();
        expected.insert(key, sample(i, 1));
        if i % 3 == 0 {
            appender.flush().unwrap();
        }
    }
    appender.finalize().unwrap();
    assert_reads_back(&appender, &expected);
    assert!(appender.validate(ValidationLevel::Full).unwrap().is_clean());
    assert_bounded(baseline, "at the end");
}
