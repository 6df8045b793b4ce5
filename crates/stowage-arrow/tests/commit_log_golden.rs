//! The commit log's bytes did not change when its shared part moved into the core
//! (`stowage_core::segment_log`): `tests/golden/` holds logs and a marker written by the code
//! before the move (stowage-arrow's own `commit_log` of version 3), with every record kind, and
//! a version 2 log. The same records written now give the same bytes, and the old files read.

use std::path::{Path, PathBuf};

use stowage_arrow::BlobEncoding;
use stowage_arrow::OutputStructure;
use stowage_arrow::test_support::commit_log::{
    self, ArrowRecord, CacheHeader, ColumnChoices, CompactedEntry, FinalizedMarker, Record,
    RunEntry, SegmentEntry,
};
use stowage_core::file_safety::AppendLog;
use stowage_core::{DType, Schema, ShapeRule};

fn golden(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/golden").join(name)
}

fn schema() -> Schema {
    Schema::new()
        .tensor("x", DType::F32, ShapeRule::Fixed(vec![2, 3]))
        .nullable_tensor("y", DType::I64, ShapeRule::Any)
        .bytes("b")
}

fn segment(id: u64, rows: u64, bytes: u64) -> SegmentEntry {
    SegmentEntry::synced(id, rows, bytes)
}

/// The records of `arrow_v3.stowage.log`: a header, segments, a key index run, an adoption, a
/// compaction, and an append after finalize.
fn v3_records() -> Vec<Record> {
    let run = RunEntry { first: 0, through: 1, keys: 5, new_keys: 5 };
    let compaction = CompactedEntry { segments: vec![segment(3, 9, 300)], removed: vec![0, 1] };
    vec![
        Record::Cache(commit_log::new_header(
            schema(),
            OutputStructure::Dict,
            BlobEncoding::PickledBytes,
        )),
        Record::Segment(segment(0, 3, 100)),
        Record::Segment(segment(1, 2, 80)),
        Record::Own(ArrowRecord::Run(run)),
        Record::Own(ArrowRecord::Adopted(segment(2, 4, 150))),
        Record::Own(ArrowRecord::Compacted(compaction)),
        Record::Finalized,
        Record::Segment(segment(4, 1, 40)),
        Record::Finalized,
    ]
}

/// The records of `arrow_v2.stowage.log`: a version 2 header has no column choices.
fn v2_records() -> Vec<Record> {
    let header = CacheHeader {
        version: 2,
        extension: ColumnChoices::default(),
        ..commit_log::new_header(schema(), OutputStructure::Dict, BlobEncoding::Raw)
    };
    vec![Record::Cache(header), Record::Segment(segment(0, 7, 1234)), Record::Finalized]
}

/// Writes `records` as a new log the way the backend does, and returns its bytes.
fn written(records: &[Record]) -> Vec<u8> {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("stowage.log");
    let mut log = AppendLog::create_new(&path, &records[0].to_bytes()).unwrap();
    for record in &records[1..] {
        log.append(&record.to_bytes()).unwrap();
    }
    log.sync().unwrap();
    std::fs::read(&path).unwrap()
}

#[test]
fn the_same_records_give_the_same_bytes_as_before() {
    for (name, records) in
        [("arrow_v3.stowage.log", v3_records()), ("arrow_v2.stowage.log", v2_records())]
    {
        let before = std::fs::read(golden(name)).unwrap();
        assert_eq!(written(&records), before, "{name}");
        // Record by record too, so that a difference is shown as text.
        let texts = AppendLog::read_all(golden(name)).unwrap().records;
        let now: Vec<Vec<u8>> = records.iter().map(Record::to_bytes).collect();
        for (old, new) in texts.iter().zip(&now) {
            assert_eq!(String::from_utf8_lossy(new), String::from_utf8_lossy(old), "{name}");
        }
    }
    let marker = FinalizedMarker { log_records: 9 }.to_bytes();
    assert_eq!(marker, std::fs::read(golden("arrow.stowage.complete")).unwrap());
}

#[test]
fn the_logs_written_before_read_as_they_did() {
    let v3 = commit_log::read(&golden("arrow_v3.stowage.log")).unwrap();
    assert_eq!(v3.header.version, 3);
    assert_eq!(v3.header.extension.output_structure, Some(OutputStructure::Dict));
    assert_eq!(v3.header.schema, schema());
    assert_eq!(v3.ids(), [2, 3, 4], "segments 0 and 1 were compacted into 3");
    assert!(v3.finalized && v3.own.runs.is_empty() && v3.own.adopted == [2]);
    assert_eq!((v3.own.removed.as_slice(), v3.records, v3.next_segment_id()), (&[0, 1][..], 9, 5));
    let v2 = commit_log::read(&golden("arrow_v2.stowage.log")).unwrap();
    assert_eq!((v2.header.version, v2.header.extension), (2, ColumnChoices::default()));
    let (_, _, encoding) = commit_log::columns(&v2.header).unwrap();
    assert_eq!(encoding, BlobEncoding::Raw, "version 2 stored bytes raw");
    assert_eq!((v2.ids(), v2.finalized), (vec![0], true));
    let marker = FinalizedMarker::read(&golden("arrow.stowage.complete")).unwrap();
    assert_eq!(marker, Some(v3.marker()));
}
