//! The generic cache's on-disk key index: runs written at flush once the tail of unindexed
//! segments is long, folded geometrically, merged into one at finalize; a reopened cache (read
//! only and for appending) answers every key with its latest sample, counts distinct keys and
//! lists them in first-put order without reading the segments the runs cover.

use std::collections::HashMap;
use std::path::Path;

use stowage_core::{
    Backend, DType, OpenMode, Reader, Sample, Schema, ShapeRule, Tensor, ValidationLevel,
};
use stowage_hdf5::Hdf5Backend;

fn schema() -> Schema {
    Schema::new().tensor("x", DType::U32, ShapeRule::Fixed(vec![1]))
}

fn sample(value: u32) -> Sample {
    Sample::new().with("x", Tensor::from_slice(&[1], &[value]).unwrap())
}

/// What the cache must hold: each key's latest value, and the keys in first-put order.
#[derive(Default)]
struct Expected {
    latest: HashMap<String, u32>,
    order: Vec<String>,
}

impl Expected {
    fn put(&mut self, cache: &mut Hdf5Backend, key: String, value: u32) {
        cache.put(&key, &sample(value)).unwrap();
        if self.latest.insert(key.clone(), value).is_none() {
            self.order.push(key);
        }
    }

    fn check(&self, cache: &Hdf5Backend) {
        assert_eq!(cache.len(), self.latest.len());
        assert_eq!(cache.keys().unwrap(), self.order);
        for (key, value) in &self.latest {
            let got = cache.get(key).unwrap().unwrap_or_else(|| panic!("{key} is missing"));
            assert_eq!(got.tensor("x").unwrap().to_vec::<u32>().unwrap(), [*value], "{key}");
        }
        assert_eq!(cache.get("never-put").unwrap(), None);
        assert!(!cache.contains("never-put").unwrap());
    }
}

/// Flushes `segments` segments of 3 puts each, numbered from `from`: a new key, an overwrite
/// of a key about half as old, and an overwrite within the same segment.
fn write_segments(cache: &mut Hdf5Backend, expected: &mut Expected, from: u32, segments: u32) {
    for s in from..from + segments {
        expected.put(cache, format!("k{s}"), s);
        expected.put(cache, format!("k{}", s / 2), 1000 + s);
        expected.put(cache, format!("k{s}"), 2000 + s);
        cache.flush().unwrap();
    }
}

fn runs(dir: &Path) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir(dir.join("index")) else { return Vec::new() };
    let mut names: Vec<String> =
        entries.map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    names.sort();
    names
}

#[test]
fn runs_answer_for_every_key_across_reopens_and_finalize_leaves_one() {
    let dir = tempfile::tempdir().unwrap();
    let mut expected = Expected::default();
    let mut cache = Hdf5Backend::create(dir.path(), &schema()).unwrap();
    // 100 segments: runs are written every 32 flushes, the last 4 segments stay in the tail.
    write_segments(&mut cache, &mut expected, 0, 100);
    expected.check(&cache);
    assert!(runs(dir.path()).len() >= 2, "{:?}", runs(dir.path()));
    drop(cache);

    let reader = Hdf5Backend::open(dir.path(), OpenMode::ReadOnly).unwrap();
    expected.check(&reader);
    drop(reader);

    let mut cache = Hdf5Backend::open(dir.path(), OpenMode::Append).unwrap();
    expected.check(&cache);
    write_segments(&mut cache, &mut expected, 100, 40);
    // A pending overwrite and a pending new key count before their flush.
    expected.put(&mut cache, "k3".into(), 7);
    expected.put(&mut cache, "pending".into(), 8);
    expected.check(&cache);
    cache.finalize().unwrap();
    drop(cache);
    assert_eq!(runs(dir.path()), ["run_000000_000140.bin"], "finalize merges into one run");

    let reader = Hdf5Backend::open(dir.path(), OpenMode::ReadOnly).unwrap();
    expected.check(&reader);
    let report = reader.validate(ValidationLevel::Full).unwrap();
    assert!(report.is_clean(), "{report:?}");
}

#[test]
fn open_reads_no_segment_a_run_covers() {
    let dir = tempfile::tempdir().unwrap();
    let mut expected = Expected::default();
    let mut cache = Hdf5Backend::create(dir.path(), &schema()).unwrap();
    write_segments(&mut cache, &mut expected, 0, 5);
    cache.finalize().unwrap();
    drop(cache);
    // Segment 3 holds the latest k3 and k1. Removing it would fail any open that reads it; this
    // one reads none: the first read of k3 finds it missing, naming the file.
    let segment = dir.path().join("segments/segment_000003.h5");
    std::fs::remove_file(&segment).unwrap();
    let reader = Hdf5Backend::open(dir.path(), OpenMode::ReadOnly).unwrap();
    assert_eq!(reader.len(), expected.latest.len());
    let k4 = reader.get("k4").unwrap().expect("in segment 4");
    assert_eq!(k4.tensor("x").unwrap().to_vec::<u32>().unwrap(), [2004]);
    match reader.get("k3").unwrap_err() {
        stowage_core::Error::Io { path, source } => {
            assert_eq!((path, source.kind()), (segment, std::io::ErrorKind::NotFound));
        }
        other => panic!("expected the missing segment, got {other:?}"),
    }
    let report = reader.validate(ValidationLevel::Structure).unwrap();
    assert!(!report.is_clean());
}

/// A cache resumed with segments no run covers takes its number of keys from the log's count
/// after the last segment, instead of looking each of those segments' keys up in the runs (a
/// page of a large run each). A count that is not the truth is what `validate` reports; with
/// no count for the last segment (an older cache's log), the keys are counted as before.
#[test]
fn the_logs_key_count_is_used_at_open_and_checked_by_validate() {
    use stowage_core::file_safety::AppendLog;
    use stowage_hdf5::test_support::commit_log::{Hdf5Record, Record};

    let dir = tempfile::tempdir().unwrap();
    let mut expected = Expected::default();
    let mut cache = Hdf5Backend::create(dir.path(), &schema()).unwrap();
    write_segments(&mut cache, &mut expected, 0, 40); // a run over 32, 8 in the tail
    drop(cache);
    let log = dir.path().join("stowage.log");
    let records = AppendLog::read_all(&log).unwrap().records;
    let last = records.last().unwrap();
    let truth = expected.latest.len() as u64;
    assert_eq!(
        String::from_utf8_lossy(last),
        String::from_utf8_lossy(
            &Record::Own(Hdf5Record::Keys { through: 39, keys: truth }).to_bytes()
        ),
        "each segment is followed by the count"
    );
    for mode in [OpenMode::ReadOnly, OpenMode::Append] {
        let reader = Hdf5Backend::open(dir.path(), mode).unwrap();
        expected.check(&reader);
    }

    // A wrong count (in a well-formed record) is what open reports; validate says it is wrong.
    let (mut appender, _) = AppendLog::open(&log, false).unwrap();
    let wrong = Record::Own(Hdf5Record::Keys { through: 39, keys: truth + 5 });
    appender.append(&wrong.to_bytes()).unwrap();
    appender.sync().unwrap();
    drop(appender);
    let reader = Hdf5Backend::open(dir.path(), OpenMode::ReadOnly).unwrap();
    assert_eq!(reader.len() as u64, truth + 5, "the count is taken, not recomputed");
    let report = reader.validate(ValidationLevel::Full).unwrap();
    let problems: Vec<&str> = report.problems.iter().map(|p| p.detail.as_str()).collect();
    assert!(
        problems.iter().any(|p| p.contains(&format!("counts {} distinct keys", truth + 5))),
        "{problems:?}"
    );

    // A count below what the runs alone hold is not used: the keys are counted.
    let (mut appender, _) = AppendLog::open(&log, false).unwrap();
    appender.append(&Record::Own(Hdf5Record::Keys { through: 39, keys: 1 }).to_bytes()).unwrap();
    appender.sync().unwrap();
    drop(appender);
    expected.check(&Hdf5Backend::open(dir.path(), OpenMode::ReadOnly).unwrap());
}

/// A key index run a killed merge was writing (its temporary, in `index/`) is removed by the next
/// writer's open; a reader leaves it.
#[test]
fn a_killed_merges_temporary_run_is_removed_by_the_next_writer() {
    let dir = tempfile::tempdir().unwrap();
    let mut expected = Expected::default();
    let mut cache = Hdf5Backend::create(dir.path(), &schema()).unwrap();
    write_segments(&mut cache, &mut expected, 0, 33);
    drop(cache);
    let temp = dir.path().join("index").join(".run_000000_000040.bin.tmp-1-7");
    std::fs::write(&temp, b"half a run").unwrap();
    expected.check(&Hdf5Backend::open(dir.path(), OpenMode::ReadOnly).unwrap());
    assert!(temp.exists(), "a reader removes nothing");
    expected.check(&Hdf5Backend::open(dir.path(), OpenMode::Append).unwrap());
    assert!(!temp.exists());
}
