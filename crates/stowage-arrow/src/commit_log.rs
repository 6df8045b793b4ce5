//! `stowage.log`: what a cache stowage writes has committed, as the core's segment commit log
//! ([`stowage_core::segment_log`]) that torchcachex never reads. This module adds what is
//! Arrow's own: the header's column choices, and the records of key index runs, compactions and
//! adoptions.
//!
//! ```text
//! record 0   {"cache": {"format": "stowage-arrow", "version": 3, "schema": {...},
//!                       "output_structure": "dict", "blob_encoding": "pickled_bytes"}}
//! then       {"segment": {"id": 0, "rows": 2048, "bytes": 4251832}}   one per committed segment
//!            {"adopted": {"id": 7, "rows": 512, "bytes": 1040000}}     another writer's segment,
//!                                                                     checksummed and committed
//!            {"run": {"first": 0, "through": 31, "keys": 65536, "new_keys": 65536}}
//!                                                                     a merged key index run
//!            {"compacted": {"segments": [...], "removed": [0, 1, 2]}}  a compaction
//!            {"finalized": null}                                      after finalize
//! ```
//!
//! A committed segment whose file is missing, shorter or longer than recorded is damage, not an
//! empty cache; so is a log cut short of its `finalized` record ([`FinalizedMarker`]). Arrow's own
//! records leave the finalized state as it is. A `run` record says a merged key index run exists
//! ([`crate::merged_index`]) and replaces the runs inside its range, so that its loss is reported
//! too (nothing is lost with it: the sidecars find every key).
//!
//! An `adopted` record commits a segment another writer (torchcachex) added, once its key sidecar
//! and row checksums are in place ([`crate::ArrowBackend::adopt`]). Its id may lie below
//! committed ones (torchcachex wrote it between two stowage sessions), so it withdraws every key
//! index run reaching that id (they were built without its keys); the writer merges again.
//!
//! Version 3 records in the header how samples map to torchcachex's columns: the output
//! structure and the [`BlobEncoding`], and it gives nullable fields null columns
//! ([`crate::encode`]). Version 2 (read and appended to as it is) inferred the structure, stored
//! bytes raw and had no null columns. Version 1 had one merged index (`merged` records) instead
//! of runs.

use std::path::Path;

use serde::{Deserialize, Serialize};
use stowage_core::file_safety::Recovered;
use stowage_core::segment_log::{self, CommittedSegment, SegmentLog};
use stowage_core::{Result, Schema};

use crate::blob_encoding::BlobEncoding;
use crate::encode::FieldColumns;
use crate::schema_json::OutputStructure;

pub use stowage_core::segment_log::FinalizedMarker;

/// The log's format name (its versions: [`ArrowLog`]).
pub const FORMAT_NAME: &str = ArrowLog::FORMAT_NAME;

/// The first record: what the cache is.
pub type CacheHeader = segment_log::CacheHeader<ColumnChoices>;
/// One log record.
pub type Record = segment_log::Record<ArrowLog>;
/// What a log says: the header, the committed segments in id order, whether the cache is
/// finalized, and the key index runs, compactions and adoptions ([`ArrowCommits`]).
pub type Committed = segment_log::Committed<ArrowLog>;

/// How samples map to torchcachex's columns, in the header from version 3 on (version 2 inferred
/// it from the schema and stored bytes raw).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct ColumnChoices {
    /// How samples are split into columns.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_structure: Option<OutputStructure>,
    /// How bytes fields are stored.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub blob_encoding: Option<BlobEncoding>,
}

/// The header of a new cache of `schema` with the given structure and blob encoding.
///
/// ```
/// use stowage_arrow::BlobEncoding;
/// use stowage_arrow::test_support::commit_log::{columns, new_header};
/// use stowage_arrow::OutputStructure;
/// use stowage_core::{DType, Schema, ShapeRule};
/// let schema = Schema::new().tensor("tensor", DType::F32, ShapeRule::Any);
/// let header = new_header(schema, OutputStructure::Tensor, BlobEncoding::PickledBytes);
/// assert_eq!(columns(&header).unwrap().0, OutputStructure::Tensor);
/// ```
pub fn new_header(
    schema: Schema,
    structure: OutputStructure,
    encoding: BlobEncoding,
) -> CacheHeader {
    let choices =
        ColumnChoices { output_structure: Some(structure), blob_encoding: Some(encoding) };
    ArrowLog::new_header(schema, choices)
}

/// The output structure, columns and blob encoding the segments of the cache of `header` are
/// written in.
///
/// Errors: [`stowage_core::Error::InvalidArgument`] when the recorded structure does not fit
/// the schema (a damaged or hostile header; [`crate::encode::columns_with`]).
pub fn columns(header: &CacheHeader) -> Result<(OutputStructure, Vec<FieldColumns>, BlobEncoding)> {
    match (header.extension.output_structure, header.extension.blob_encoding) {
        (Some(structure), Some(encoding)) => {
            let (structure, fields) =
                crate::encode::columns_with(&header.schema, Some(structure), encoding)?;
            Ok((structure, fields, encoding))
        }
        _ => {
            let (structure, fields) = crate::encode::legacy_columns(&header.schema);
            Ok((structure, fields, BlobEncoding::Raw))
        }
    }
}

/// One committed segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct SegmentEntry {
    /// The segment id (`segments/segment_<id>.arrow`).
    pub id: u64,
    /// Rows in the segment.
    pub rows: u64,
    /// The segment file's size in bytes.
    pub bytes: u64,
    /// Written without fsync (`ArrowOptions::durable` off) and committed by a record that was
    /// not synced either: a power cut may keep the record and lose the files
    /// (`crate::lost_segments`). Absent from the record when false, so a durable cache's log
    /// is byte-identical to one written before this field existed.
    #[serde(default, skip_serializing_if = "is_false")]
    pub unsynced: bool,
}

fn is_false(flag: &bool) -> bool {
    !flag
}

impl SegmentEntry {
    /// The entry of a segment written with fsync (or whose record is synced after it).
    pub fn synced(id: u64, rows: u64, bytes: u64) -> SegmentEntry {
        SegmentEntry { id, rows, bytes, unsynced: false }
    }
}

impl CommittedSegment for SegmentEntry {
    fn id(&self) -> u64 {
        self.id
    }
}

/// A merged key index run over the segments `first..=through`
/// ([`crate::merged_index::MergedIndex`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunEntry {
    /// The lowest segment id it covers.
    pub first: u64,
    /// The highest segment id it covers.
    pub through: u64,
    /// Distinct keys in it.
    pub keys: u64,
    /// Its keys that no older run holds.
    pub new_keys: u64,
}

/// A compaction: `segments` (new, ids above every earlier one) hold the winning rows of the
/// `removed` segments, which stop being part of the cache at this record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CompactedEntry {
    /// The segments written.
    pub segments: Vec<SegmentEntry>,
    /// The segments they replace.
    pub removed: Vec<u64>,
}

/// The record kinds of Arrow's own.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ArrowRecord {
    /// A merged key index run was written; it replaces the runs inside its range.
    Run(RunEntry),
    /// Segments were compacted (no key index run holds any longer).
    Compacted(CompactedEntry),
    /// A segment another writer added was adopted: its sidecars are in place, and it is committed
    /// from here on (the key index runs reaching its id are withdrawn).
    Adopted(SegmentEntry),
    /// Segments written without fsync whose files a power cut took
    /// (`crate::lost_segments`): withdrawn, their ids never used again.
    Lost(Vec<u64>),
}

/// What Arrow's own records build beside the committed segments.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ArrowCommits {
    /// The key index runs the log vouches for, oldest first: each run's record replaced the
    /// runs inside its range, and a compaction drops them all.
    pub runs: Vec<RunEntry>,
    /// Segments compactions replaced, oldest first (their files may linger for readers that
    /// opened before; the next compaction deletes them).
    pub removed: Vec<u64>,
    /// The committed segments another writer wrote and stowage adopted, in adoption order
    /// (compaction never replaces them: their files are not stowage's to delete).
    pub adopted: Vec<u64>,
    /// The highest segment id committed when the last record of Arrow's own kinds was replayed:
    /// the writer syncs every segment before such a record (`crate::committer`), so no
    /// segment up to it can have been lost to a power cut.
    pub synced_through: Option<u64>,
    /// Committed segments written without fsync whose files a power cut lost
    /// (`crate::lost_segments`): withdrawn by a `lost` record, or set aside by a reader
    /// before a writer recorded the loss; never read.
    pub lost: Vec<SegmentEntry>,
}

/// The Arrow segment log's format: its name and versions, header fields and record kinds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ArrowLog {}

impl SegmentLog for ArrowLog {
    const FORMAT_NAME: &'static str = "stowage-arrow";
    /// Version 3 records the column choices and gives nullable fields null columns.
    const FORMAT_VERSION: u32 = 3;
    /// Version 2 (read and appended to as it is) inferred the columns and stored bytes raw.
    const OLDEST_VERSION: u32 = 2;
    const CACHE_NAME: &'static str = "stowage Arrow cache";
    type HeaderExtension = ColumnChoices;
    type Segment = SegmentEntry;
    type Record = ArrowRecord;
    type State = ArrowCommits;

    /// The column choices are recorded from version 3 on, and only then, and fit the schema.
    fn check_header(header: &CacheHeader) -> std::result::Result<(), String> {
        let choices = &header.extension;
        let described = choices.output_structure.is_some() && choices.blob_encoding.is_some();
        let undescribed = choices.output_structure.is_none() && choices.blob_encoding.is_none();
        columns(header).map_err(|e| e.to_string())?;
        match (header.version >= 3 && !described) || (header.version < 3 && !undescribed) {
            true => Err("the output structure and blob encoding must be recorded from version 3 \
                         on, and only then"
                .into()),
            false => Ok(()),
        }
    }

    fn replay(committed: &mut Committed, record: ArrowRecord) -> std::result::Result<(), String> {
        let synced_through = committed.segments.last().map(|s| s.id);
        committed.own.synced_through = committed.own.synced_through.max(synced_through);
        match record {
            ArrowRecord::Run(entry) => add_run(committed, entry),
            ArrowRecord::Adopted(entry) => adopt(committed, entry),
            ArrowRecord::Lost(ids) => lose(committed, &ids),
            ArrowRecord::Compacted(compaction) => {
                for id in &compaction.removed {
                    let Some(at) = committed.segments.iter().position(|s| s.id == *id) else {
                        return Err(format!("compaction removes segment {id}, not in it"));
                    };
                    committed.segments.remove(at);
                    committed.own.removed.push(*id);
                    committed.own.adopted.retain(|adopted| adopted != id);
                }
                for entry in compaction.segments {
                    committed.commit_segment(entry)?;
                }
                committed.own.runs.clear();
                Ok(())
            }
        }
    }

    fn highest_retired(state: &ArrowCommits) -> Option<u64> {
        let lost = state.lost.iter().map(|s| s.id);
        state.removed.iter().copied().chain(lost).max()
    }
}

/// Adds `entry`, replacing the runs inside its range; it must end at a committed segment and
/// follow the runs it does not replace.
fn add_run(committed: &mut Committed, entry: RunEntry) -> std::result::Result<(), String> {
    let runs = &mut committed.own.runs;
    runs.retain(|run| run.first < entry.first || run.through > entry.through);
    let follows = runs.last().is_none_or(|run| run.through < entry.first);
    let ends_at_segment = committed.segments.iter().any(|s| s.id == entry.through);
    if entry.first > entry.through || !follows || !ends_at_segment {
        return Err(format!("run {entry:?} does not follow {runs:?}"));
    }
    runs.push(entry);
    Ok(())
}

/// Withdraws the segments `ids`, each committed without fsync, as lost.
fn lose(committed: &mut Committed, ids: &[u64]) -> std::result::Result<(), String> {
    for id in ids {
        let at = committed.segments.iter().position(|s| s.id == *id && s.unsynced);
        let Some(at) = at else {
            return Err(format!("declares segment {id} lost, not committed without fsync"));
        };
        committed.own.lost.push(committed.segments.remove(at));
    }
    Ok(())
}

/// Commits `entry`, another writer's segment, at its place among the committed ones; the runs
/// reaching its id are withdrawn.
fn adopt(committed: &mut Committed, entry: SegmentEntry) -> std::result::Result<(), String> {
    let known = committed.segments.iter().any(|s| s.id == entry.id)
        || committed.own.removed.contains(&entry.id);
    if known {
        return Err(format!("adopts segment {}, which the log already has", entry.id));
    }
    let at = committed.segments.partition_point(|s| s.id < entry.id);
    committed.segments.insert(at, entry);
    committed.own.adopted.push(entry.id);
    committed.own.runs.retain(|run| run.through < entry.id);
    Ok(())
}

/// Reads the log at `path` without changing it ([`segment_log::read`]).
///
/// Errors: [`stowage_core::Error::NotFound`] when there is no log (not a stowage Arrow cache);
/// [`stowage_core::Error::Corrupted`] naming the log when it is damaged before its end or its
/// records do not fit together; [`stowage_core::Error::Incompatible`] for another format or
/// version.
pub fn read(path: &Path) -> Result<Committed> {
    segment_log::read(path)
}

/// The committed state of the records `recovered` from the log at `path` (see [`read`]).
pub fn interpret(path: &Path, recovered: &Recovered) -> Result<Committed> {
    segment_log::interpret(path, recovered)
}

#[cfg(test)]
mod tests {
    use super::*;
    use stowage_core::Error;
    use stowage_core::file_safety::AppendLog;
    use stowage_core::{DType, ShapeRule};

    fn header() -> Record {
        let schema = Schema::new().tensor("x", DType::F32, ShapeRule::Any);
        Record::Cache(new_header(schema, OutputStructure::Dict, BlobEncoding::PickledBytes))
    }

    fn write(path: &Path, records: &[Record]) {
        let _ = std::fs::remove_file(path);
        let (mut log, _) = AppendLog::open(path, true).unwrap();
        for record in records {
            log.append(&record.to_bytes()).unwrap();
        }
        log.sync().unwrap();
    }

    #[test]
    fn segments_and_finalize_are_read_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("stowage.log");
        assert!(matches!(read(&path).unwrap_err(), Error::NotFound { .. }));
        let segment = |id| Record::Segment(SegmentEntry::synced(id, 3, 100));
        write(&path, &[header(), segment(0), segment(1), Record::Finalized]);
        let committed = read(&path).unwrap();
        assert_eq!(committed.segments.len(), 2);
        assert!(committed.finalized);
        assert_eq!(committed.next_segment_id(), 2);
        write(&path, &[header(), segment(0), Record::Finalized, segment(1)]);
        assert!(!read(&path).unwrap().finalized, "an append after finalize unfinalizes");
        write(&path, &[header(), segment(1), segment(1)]);
        assert!(read(&path).unwrap_err().to_string().contains("segment 1 after segment 1"));
        write(&path, &[segment(0)]);
        assert!(matches!(read(&path).unwrap_err(), Error::Corrupted { .. }));
        let other = Record::Cache(CacheHeader {
            version: 99,
            ..new_header(Schema::new(), OutputStructure::Dict, BlobEncoding::Raw)
        });
        write(&path, &[other]);
        assert!(matches!(read(&path).unwrap_err(), Error::Incompatible { .. }));
    }

    /// Version 3 records the column choices and version 2 does not; either way round is damage.
    #[test]
    fn column_choices_belong_to_version_3() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("stowage.log");
        let v3 = new_header(Schema::new(), OutputStructure::Dict, BlobEncoding::Raw);
        let bare = CacheHeader { extension: ColumnChoices::default(), ..v3.clone() };
        let v2_choices = CacheHeader { version: 2, ..v3.clone() };
        for header in [bare, v2_choices] {
            write(&path, &[Record::Cache(header)]);
            let err = read(&path).unwrap_err();
            assert!(matches!(err, Error::Corrupted { .. }), "{err}");
            assert!(err.to_string().contains("only then"), "{err}");
        }
        let v2 = CacheHeader { version: 2, extension: ColumnChoices::default(), ..v3 };
        write(&path, &[Record::Cache(v2)]);
        assert_eq!(read(&path).unwrap().header.version, 2);
    }

    /// A run record replaces the runs inside its range and must follow the others and end at a
    /// committed segment; a compaction withdraws every run.
    #[test]
    fn runs_replace_the_runs_inside_their_range() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("stowage.log");
        let segments: Vec<Record> =
            (0..6).map(|id| Record::Segment(SegmentEntry::synced(id, 3, 100))).collect();
        let run = |first, through| {
            Record::Own(ArrowRecord::Run(RunEntry { first, through, keys: 3, new_keys: 3 }))
        };
        let mut records = vec![header()];
        records.extend(segments.iter().cloned());
        records.extend([run(0, 1), run(2, 3), run(4, 4), run(2, 5)]);
        write(&path, &records);
        let ranges: Vec<(u64, u64)> =
            read(&path).unwrap().own.runs.iter().map(|r| (r.first, r.through)).collect();
        assert_eq!(ranges, [(0, 1), (2, 5)]);
        for bad in [run(1, 2), run(3, 2), run(2, 9)] {
            let mut records = records.clone();
            records.push(bad);
            write(&path, &records);
            let err = read(&path).unwrap_err();
            assert!(err.to_string().contains("does not follow"), "{err}");
        }
        let compaction = CompactedEntry { segments: Vec::new(), removed: vec![0] };
        records.push(Record::Own(ArrowRecord::Compacted(compaction)));
        write(&path, &records);
        assert!(read(&path).unwrap().own.runs.is_empty());
    }

    /// A `lost` record withdraws segments committed without fsync, whose ids stay used; one
    /// naming a segment committed with fsync (or none) is damage. An own record marks every
    /// segment before it synced.
    #[test]
    fn lost_records_withdraw_only_unsynced_segments() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("stowage.log");
        let unsynced = |id| SegmentEntry { unsynced: true, ..SegmentEntry::synced(id, 3, 100) };
        let records = vec![
            header(),
            Record::Segment(SegmentEntry::synced(0, 3, 100)),
            Record::Segment(unsynced(1)),
            Record::Segment(unsynced(2)),
        ];
        write(&path, &records);
        assert_eq!(read(&path).unwrap().own.synced_through, None);
        let mut lost = records.clone();
        lost.push(Record::Own(ArrowRecord::Lost(vec![2])));
        write(&path, &lost);
        let committed = read(&path).unwrap();
        assert_eq!((committed.ids(), committed.own.lost.clone()), (vec![0, 1], vec![unsynced(2)]));
        assert_eq!((committed.own.synced_through, committed.next_segment_id()), (Some(2), 3));
        for bad in [0, 7] {
            let mut records = records.clone();
            records.push(Record::Own(ArrowRecord::Lost(vec![bad])));
            write(&path, &records);
            let err = read(&path).unwrap_err();
            assert!(err.to_string().contains(&format!("declares segment {bad} lost")), "{err}");
        }
    }

    /// An adopted segment takes its place among the committed ones and withdraws the runs
    /// reaching it; adopting a known id is damage. A compaction's ids stay used.
    #[test]
    fn adoptions_and_compactions_keep_ids_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("stowage.log");
        let entry = |id| SegmentEntry::synced(id, 3, 100);
        let run = RunEntry { first: 0, through: 4, keys: 6, new_keys: 6 };
        let mut records = vec![
            header(),
            Record::Segment(entry(0)),
            Record::Segment(entry(4)),
            Record::Own(ArrowRecord::Run(run)),
            Record::Own(ArrowRecord::Adopted(entry(2))),
        ];
        write(&path, &records);
        let committed = read(&path).unwrap();
        assert_eq!((committed.ids(), committed.own.adopted.clone()), (vec![0, 2, 4], vec![2]));
        assert!(committed.own.runs.is_empty(), "the run reaching segment 2 is withdrawn");
        let mut again = records.clone();
        again.push(Record::Own(ArrowRecord::Adopted(entry(2))));
        write(&path, &again);
        assert!(read(&path).unwrap_err().to_string().contains("record 5: adopts segment 2"));
        let compaction = CompactedEntry { segments: vec![entry(5)], removed: vec![2, 4] };
        records.push(Record::Own(ArrowRecord::Compacted(compaction)));
        write(&path, &records);
        let committed = read(&path).unwrap();
        assert_eq!(committed.ids(), [0, 5]);
        assert!(committed.own.adopted.is_empty());
        assert_eq!(committed.next_segment_id(), 6);
    }
}
