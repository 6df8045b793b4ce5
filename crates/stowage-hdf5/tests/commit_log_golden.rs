//! The commit log's bytes did not change when its shared part moved into the core
//! (`stowage_core::segment_log`): `tests/golden/` holds a log and a marker written by the code
//! before the move (stowage-hdf5's own `commit_log`). The same records written now give the
//! same bytes, and the old files read.

use std::path::Path;

use stowage_core::file_safety::AppendLog;
use stowage_core::{DType, Schema, ShapeRule};
use stowage_hdf5::test_support::commit_log::{self, FinalizedMarker, Record, SegmentEntry};

/// The log and the marker the code before wrote.
const LOG: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/golden/hdf5.stowage.log");
const MARKER: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/golden/hdf5.stowage.complete");

/// The records of the golden log: a header (of a schema with a fixed, a nullable and a bytes
/// field), and two segments each followed by a finalize.
fn records() -> Vec<Record> {
    let schema = Schema::new()
        .tensor("x", DType::F32, ShapeRule::Fixed(vec![2, 3]))
        .nullable_tensor("y", DType::I64, ShapeRule::Any)
        .bytes("b");
    vec![
        Record::Cache(commit_log::new_header(schema)),
        Record::Segment(SegmentEntry {
            id: 0,
            rows: 3,
            bytes: 4096,
            xxh3: 0x0123_4567_89ab_cdef,
            meta: None,
        }),
        Record::Finalized,
        Record::Segment(SegmentEntry { id: 1, rows: 2, bytes: 2048, xxh3: u64::MAX, meta: None }),
        Record::Finalized,
    ]
}

#[test]
fn the_same_records_give_the_same_bytes_as_before() {
    let records = records();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("stowage.log");
    // As the backend writes them: the header through `create_new`, each later record appended.
    let (header, later) = records.split_first().unwrap();
    let mut log = AppendLog::create_new(&path, &header.to_bytes()).unwrap();
    later.iter().try_for_each(|record| log.append(&record.to_bytes())).unwrap();
    log.sync().unwrap();
    let before = std::fs::read(LOG).unwrap();
    let texts = AppendLog::read_all(LOG).unwrap().records;
    for (old, new) in texts.iter().zip(records.iter().map(Record::to_bytes)) {
        assert_eq!(String::from_utf8_lossy(&new), String::from_utf8_lossy(old));
    }
    assert_eq!(std::fs::read(&path).unwrap(), before);
    let marker = FinalizedMarker { log_records: 5 }.to_bytes();
    assert_eq!(marker, std::fs::read(MARKER).unwrap());
}

#[test]
fn the_log_written_before_reads_as_it_did() {
    let path = Path::new(LOG);
    let committed = commit_log::interpret(path, &AppendLog::read_all(path).unwrap()).unwrap();
    assert_eq!(committed.header.format, commit_log::FORMAT_NAME);
    assert_eq!(Record::Cache(committed.header.clone()), records()[0]);
    assert_eq!(committed.segments[1].xxh3, u64::MAX);
    assert_eq!((committed.ids(), committed.finalized, committed.records), (vec![0, 1], true, 5));
    assert_eq!(committed.next_segment_id(), 2);
    let marker = FinalizedMarker::read(Path::new(MARKER)).unwrap();
    assert_eq!(marker, Some(committed.marker()));
}
