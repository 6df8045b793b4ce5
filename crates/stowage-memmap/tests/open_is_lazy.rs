//! Opening a finalized cache read-only reads `shapes.json`, not `index.parquet`: the index is
//! loaded on the first call that needs it. (How long an open takes is measured by benchmarks,
//! never asserted here.)

use std::path::Path;

use stowage_core::{Backend, BackendExt, Error, Reader, Sample, Tensor, ValidationLevel, Value};
use stowage_memmap::{MemmapBackend, MemmapOptions, dnanet};

const ROWS: usize = 20_000;

fn key(i: usize) -> String {
    format!("/r/{i:05}.hid")
}

fn row(i: usize) -> Sample {
    Sample::new()
        .with("data", Tensor::from_slice(&[1, 1], &[i as i16]).unwrap())
        .with("scaler", Tensor::from_slice(&[1], &[i as f32]).unwrap())
        .with("meta_json", Value::Json("{}".into()))
}

/// A finalized cache of `ROWS` one-scan-point rows.
fn write_cache(dir: &Path) {
    let mut cache = MemmapBackend::create(dir, &dnanet(1, 1), MemmapOptions::default()).unwrap();
    for i in 0..ROWS {
        cache.put(&key(i), &row(i)).unwrap();
    }
    cache.finalize().unwrap();
}

fn open(dir: &Path) -> MemmapBackend {
    MemmapBackend::open_read_only(dir, MemmapOptions::default()).unwrap()
}

#[test]
fn open_reads_no_index_and_len_needs_none() {
    let tmp = tempfile::tempdir().unwrap();
    write_cache(tmp.path());

    let cache = open(tmp.path());
    assert!(!cache.index_loaded(), "open_read_only must not load index.parquet");
    assert_eq!(cache.len(), ROWS);
    assert!(!cache.is_empty());
    assert!(cache.is_finalized());
    assert_eq!(cache.schema(), &dnanet(1, 1));
    assert!(!cache.index_loaded(), "len, schema and is_finalized need no index");

    // Reads by key and by number go through stowage's key index: index.parquet stays unread.
    assert!(cache.uses_key_index());
    let got = cache.get(&key(12_345)).unwrap().unwrap();
    assert_eq!(got.tensor("data").unwrap().to_vec::<i16>().unwrap(), [12_345]);
    assert_eq!(cache.len(), ROWS);
    assert_eq!(
        cache.get_row(-1).unwrap().tensor("data").unwrap().to_vec::<i16>().unwrap(),
        [(ROWS - 1) as i16]
    );
    assert!(cache.get("/nope").unwrap().is_none());
    assert!(!cache.index_loaded(), "get and get_row read the key index, not index.parquet");
}

#[test]
fn without_the_key_index_the_first_get_loads_index_parquet() {
    let tmp = tempfile::tempdir().unwrap();
    write_cache(tmp.path());
    std::fs::remove_dir_all(tmp.path().join("stowage_index")).unwrap();
    let cache = open(tmp.path());
    assert!(!cache.uses_key_index() && !cache.index_loaded());
    let got = cache.get(&key(12_345)).unwrap().unwrap();
    assert!(cache.index_loaded());
    assert_eq!(got.tensor("data").unwrap().to_vec::<i16>().unwrap(), [12_345]);
    assert!(cache.validate(ValidationLevel::Full).unwrap().is_clean(), "no index is no damage");
}

#[test]
fn every_call_that_needs_the_index_loads_it() {
    let tmp = tempfile::tempdir().unwrap();
    write_cache(tmp.path());
    type Call = fn(&MemmapBackend);
    let calls: [(&str, Call); 6] = [
        ("get", |c| assert!(c.get(&key(7)).unwrap().is_some())),
        ("contains", |c| assert!(c.contains(&key(7)).unwrap())),
        ("keys", |c| assert_eq!(c.keys().unwrap().len(), ROWS)),
        ("get_row", |c| assert_eq!(c.get_row(7).unwrap().tensor("data"), row(7).tensor("data"))),
        ("validate", |c| assert!(c.validate(ValidationLevel::Structure).unwrap().is_clean())),
        ("try_index", |c| assert_eq!(c.try_index().unwrap().find(&key(7)), Some(7))),
    ];
    // With stowage's key index, only validate and try_index read index.parquet.
    for (name, call) in &calls {
        let cache = open(tmp.path());
        assert!(!cache.index_loaded(), "{name}");
        call(&cache);
        let loads = matches!(*name, "validate" | "try_index");
        assert_eq!(cache.index_loaded(), loads, "{name}");
    }
    std::fs::remove_dir_all(tmp.path().join("stowage_index")).unwrap();
    for (name, call) in calls {
        let cache = open(tmp.path());
        assert!(!cache.index_loaded(), "{name}");
        call(&cache);
        assert!(cache.index_loaded(), "{name} must load the index");
    }
}

#[test]
fn a_bad_index_is_refused_at_first_use_by_readers_and_at_open_by_writers() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    write_cache(dir);
    std::fs::write(dir.join("index.parquet"), b"not parquet").unwrap();

    let cache = open(dir);
    assert_eq!(cache.len(), ROWS);
    assert!(!cache.index_loaded());
    for _ in 0..2 {
        let err = cache.get(&key(0)).unwrap_err();
        assert!(matches!(err, Error::Corrupted { .. }), "{err}");
        assert!(err.to_string().contains("index.parquet"), "{err}");
    }
    let err = cache.get_row(0).unwrap_err();
    assert!(matches!(err, Error::Corrupted { .. }) && err.to_string().contains("index.parquet"));

    // A writer checks the index at open.
    let err = MemmapBackend::open_append(dir, MemmapOptions::default()).err().unwrap();
    assert!(matches!(err, Error::Corrupted { .. }), "{err}");
    assert!(err.to_string().contains("index.parquet"), "{err}");
}

#[test]
fn an_index_of_the_wrong_row_count_is_refused_at_first_use() {
    let small = tempfile::tempdir().unwrap();
    let mut cache =
        MemmapBackend::create(small.path(), &dnanet(1, 1), MemmapOptions::default()).unwrap();
    cache.put(&key(0), &row(0)).unwrap();
    cache.finalize().unwrap();
    drop(cache);
    let tmp = tempfile::tempdir().unwrap();
    write_cache(tmp.path());
    std::fs::copy(small.path().join("index.parquet"), tmp.path().join("index.parquet")).unwrap();

    let cache = open(tmp.path());
    assert_eq!(cache.len(), ROWS, "len is shapes.json's n");
    let err = cache.keys().unwrap_err();
    assert!(matches!(err, Error::Corrupted { .. }), "{err}");
    let message = err.to_string();
    assert!(message.contains("index.parquet") && message.contains("holds 1 rows"), "{message}");
}

#[test]
fn writers_and_unfinished_caches_keep_only_their_tail_in_memory() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let mut cache = MemmapBackend::create(dir, &dnanet(1, 1), MemmapOptions::default()).unwrap();
    assert!(!cache.index_loaded());
    cache.put(&key(0), &row(0)).unwrap();
    cache.flush().unwrap();
    assert!(!cache.index_loaded(), "put checks the key through the tail");
    drop(cache);
    let unfinished = open(dir);
    assert!(!unfinished.index_loaded(), "the manifest's rows are the tail");
    assert_eq!(unfinished.len(), 1);
    assert!(unfinished.contains(&key(0)).unwrap() && !unfinished.index_loaded());
    let writer = MemmapBackend::open_append(dir, MemmapOptions::default()).unwrap();
    assert!(!writer.index_loaded());
    assert_eq!(writer.len(), 1);
    assert_eq!(writer.keys().unwrap(), [key(0)]);
    assert!(!writer.index_loaded(), "keys reads every row once, keeping none");
}
