//! `stowage.log`: what a cache stowage writes has committed, as a checksummed append-only log
//! (the core's [`AppendLog`]) that torchcachex never reads.
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
//! A segment is committed once its record is durable; it is written, fsynced and renamed into
//! place before. So a crash between the rename and the record leaves a segment that is not
//! committed: readers ignore it and the next writer deletes it (its flush never returned). The
//! log is also what makes every loss visible: a committed segment whose file is missing, shorter
//! or longer than recorded is damage, not an empty cache. The schema lives here, under the log's
//! checksums, so a flipped byte can never rename a field or change a dtype.
//!
//! The cache is finalized when its last record is `finalized`; a segment committed after it (an
//! append to a finalized cache) makes it unfinalized again until the next finalize. Finalize then
//! writes `stowage.complete` ([`CompleteMarker`]) with the number of records, so that a log cut
//! short (which would silently drop the `finalized` record and later commits) is damage that
//! `validate` reports, not an unfinished cache. A `run` record says a merged key index run
//! exists ([`crate::merged_index`]) and replaces the runs inside its range, so that its loss is
//! reported too (nothing is lost with it: the sidecars find every key).
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
use stowage_core::file_safety::{AppendLog, Recovered};
use stowage_core::{Error, Result, Schema};

use crate::blob_encoding::BlobEncoding;
use crate::encode::FieldColumns;
use crate::schema_json::OutputStructure;

/// The log's format name.
pub const FORMAT_NAME: &str = "stowage-arrow";
/// The log's format version.
pub const FORMAT_VERSION: u32 = 3;
/// The oldest format version still read (and appended to as it is).
pub const OLDEST_VERSION: u32 = 2;

/// The first record: what the cache is.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CacheHeader {
    /// Always [`FORMAT_NAME`].
    pub format: String,
    /// [`FORMAT_VERSION`] for caches this version creates; [`OLDEST_VERSION`] and up are read.
    pub version: u32,
    /// The stowage schema the cache was created with.
    pub schema: Schema,
    /// How samples are split into columns (version 3 on; version 2 inferred it from the schema).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_structure: Option<OutputStructure>,
    /// How bytes fields are stored (version 3 on; version 2 stored them raw).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub blob_encoding: Option<BlobEncoding>,
}

impl CacheHeader {
    /// The header of a new cache of `schema` with the given structure and blob encoding.
    ///
    /// ```
    /// use stowage_arrow::blob_encoding::BlobEncoding;
    /// use stowage_arrow::commit_log::CacheHeader;
    /// use stowage_arrow::schema_json::OutputStructure;
    /// use stowage_core::{DType, Schema, ShapeRule};
    /// let schema = Schema::new().tensor("tensor", DType::F32, ShapeRule::Any);
    /// let header = CacheHeader::new(schema, OutputStructure::Tensor, BlobEncoding::PickledBytes);
    /// assert_eq!(header.columns().unwrap().0, OutputStructure::Tensor);
    /// ```
    pub fn new(schema: Schema, structure: OutputStructure, encoding: BlobEncoding) -> CacheHeader {
        CacheHeader {
            format: FORMAT_NAME.into(),
            version: FORMAT_VERSION,
            schema,
            output_structure: Some(structure),
            blob_encoding: Some(encoding),
        }
    }

    /// The output structure, columns and blob encoding the cache's segments are written in.
    ///
    /// Errors: [`Error::InvalidArgument`] when the recorded structure does not fit the schema
    /// (a damaged or hostile header; [`crate::encode::columns_with`]).
    pub fn columns(&self) -> Result<(OutputStructure, Vec<FieldColumns>, BlobEncoding)> {
        match (self.output_structure, self.blob_encoding) {
            (Some(structure), Some(encoding)) => {
                let (structure, fields) =
                    crate::encode::columns_with(&self.schema, Some(structure), encoding)?;
                Ok((structure, fields, encoding))
            }
            _ => {
                let (structure, fields) = crate::encode::legacy_columns(&self.schema);
                Ok((structure, fields, BlobEncoding::Raw))
            }
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

/// `stowage.complete`: written after the `finalized` record, with the log's record count then.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct CompleteMarker {
    /// Records in the log when the cache was finalized.
    pub log_records: u64,
}

impl CompleteMarker {
    /// Reads the marker at `path`; `Ok(None)` when there is none.
    ///
    /// Errors: [`Error::Corrupted`] naming it when it does not parse.
    pub fn read(path: &Path) -> Result<Option<CompleteMarker>> {
        match std::fs::read(path) {
            Ok(bytes) => serde_json::from_slice(&bytes).map(Some).map_err(|e| {
                Error::corrupted(path, format!("does not parse as a completion marker: {e}"))
            }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(Error::io(path, e)),
        }
    }

    /// The marker's bytes.
    pub fn to_bytes(&self) -> Vec<u8> {
        serde_json::to_vec(self).expect("markers serialize")
    }
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

/// One log record.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Record {
    /// The header, always first.
    Cache(CacheHeader),
    /// A committed segment.
    Segment(SegmentEntry),
    /// A merged key index run was written; it replaces the runs inside its range.
    Run(RunEntry),
    /// Segments were compacted (no key index run holds any longer).
    Compacted(CompactedEntry),
    /// A segment another writer added was adopted: its sidecars are in place, and it is committed
    /// from here on (the key index runs reaching its id are withdrawn).
    Adopted(SegmentEntry),
    /// The cache was finalized.
    Finalized(()),
}

impl Record {
    /// The record as the log stores it.
    pub fn to_bytes(&self) -> Vec<u8> {
        serde_json::to_vec(self).expect("records serialize")
    }
}

/// What a log says: the header, the committed segments in id order, and whether the cache is
/// finalized.
#[derive(Debug, Clone, PartialEq)]
pub struct Committed {
    /// The first record.
    pub header: CacheHeader,
    /// Every committed segment, ids increasing.
    pub segments: Vec<SegmentEntry>,
    /// Whether the last record is `finalized`.
    pub finalized: bool,
    /// The key index runs the log vouches for, oldest first: each run's record replaced the
    /// runs inside its range, and a compaction drops them all.
    pub runs: Vec<RunEntry>,
    /// Segments compactions replaced, oldest first (their files may linger for readers that
    /// opened before; the next compaction deletes them).
    pub removed: Vec<u64>,
    /// The committed segments another writer wrote and stowage adopted, in adoption order
    /// (compaction never replaces them: their files are not stowage's to delete).
    pub adopted: Vec<u64>,
    /// Records in the log.
    pub records: u64,
}

impl Committed {
    /// The state of a log that holds only `header`: nothing committed yet.
    ///
    /// ```
    /// use stowage_arrow::blob_encoding::BlobEncoding;
    /// use stowage_arrow::commit_log::{CacheHeader, Committed};
    /// use stowage_arrow::schema_json::OutputStructure;
    /// use stowage_core::{DType, Schema, ShapeRule};
    /// let schema = Schema::new().tensor("tensor", DType::F32, ShapeRule::Any);
    /// let header = CacheHeader::new(schema, OutputStructure::Tensor, BlobEncoding::PickledBytes);
    /// let committed = Committed::empty(header);
    /// assert!(committed.segments.is_empty() && !committed.finalized);
    /// ```
    pub fn empty(header: CacheHeader) -> Committed {
        Committed {
            header,
            segments: Vec::new(),
            finalized: false,
            runs: Vec::new(),
            removed: Vec::new(),
            adopted: Vec::new(),
            records: 0,
        }
    }

    /// Adds a committed segment; ids only grow, even past compacted ones.
    fn add(&mut self, path: &Path, record: usize, entry: SegmentEntry) -> Result<()> {
        let last = self
            .segments
            .last()
            .map(|s| s.id)
            .into_iter()
            .chain(self.removed.iter().copied())
            .max();
        if last.is_some_and(|last| last >= entry.id) {
            return Err(Error::corrupted(
                path,
                format!(
                    "record {record}: segment {} after segment {}",
                    entry.id,
                    last.expect("some")
                ),
            ));
        }
        self.segments.push(entry);
        Ok(())
    }

    /// Adds `entry`, replacing the runs inside its range; it must end at a committed segment
    /// and follow the runs it does not replace.
    fn add_run(&mut self, path: &Path, record: usize, entry: RunEntry) -> Result<()> {
        self.runs.retain(|run| run.first < entry.first || run.through > entry.through);
        let follows = self.runs.last().is_none_or(|run| run.through < entry.first);
        let ends_at_segment = self.segments.iter().any(|s| s.id == entry.through);
        if entry.first > entry.through || !follows || !ends_at_segment {
            return Err(Error::corrupted(
                path,
                format!("record {record}: run {entry:?} does not follow {:?}", self.runs),
            ));
        }
        self.runs.push(entry);
        Ok(())
    }

    /// Commits `entry`, another writer's segment, at its place among the committed ones; the
    /// runs reaching its id are withdrawn.
    fn adopt(&mut self, path: &Path, record: usize, entry: SegmentEntry) -> Result<()> {
        let known =
            self.segments.iter().any(|s| s.id == entry.id) || self.removed.contains(&entry.id);
        if known {
            return Err(Error::corrupted(
                path,
                format!("record {record}: adopts segment {}, which the log already has", entry.id),
            ));
        }
        let at = self.segments.partition_point(|s| s.id < entry.id);
        self.segments.insert(at, entry);
        self.adopted.push(entry.id);
        self.runs.retain(|run| run.through < entry.id);
        Ok(())
    }

    /// The committed segment ids, ascending.
    pub fn ids(&self) -> Vec<u64> {
        self.segments.iter().map(|s| s.id).collect()
    }

    /// The id the next segment gets.
    pub fn next_segment_id(&self) -> u64 {
        let last =
            self.segments.last().map(|s| s.id).into_iter().chain(self.removed.iter().copied());
        last.max().map_or(0, |id| id + 1)
    }
}

/// Reads the log at `path` without changing it. A torn last record (a writer appending, or a
/// crash) is not committed and is left alone.
///
/// Errors: [`Error::NotFound`] when there is no log (not a stowage Arrow cache);
/// [`Error::Corrupted`] naming the log when a record before the last is damaged or does not
/// parse, the header is missing, or segment ids do not increase; [`Error::Incompatible`] for
/// another format or version.
pub fn read(path: &Path) -> Result<Committed> {
    let recovered = match AppendLog::read_all(path) {
        Err(Error::NotFound { .. }) => {
            return Err(Error::NotFound {
                what: format!("stowage Arrow cache (no {})", path.display()),
            });
        }
        other => other?,
    };
    interpret(path, &recovered)
}

/// The committed state of the records `recovered` from the log at `path` (see [`read`]).
pub fn interpret(path: &Path, recovered: &Recovered) -> Result<Committed> {
    if let Some(damage) = recovered.damage.as_ref().filter(|d| d.is_mid_log()) {
        return Err(Error::corrupted(path, damage.to_string()));
    }
    let mut records = recovered.records.iter().enumerate().map(|(i, bytes)| {
        serde_json::from_slice::<Record>(bytes)
            .map_err(|e| Error::corrupted(path, format!("record {i} does not parse: {e}")))
    });
    let header = match records.next().transpose()? {
        Some(Record::Cache(header)) => header,
        Some(other) => {
            return Err(Error::corrupted(path, format!("starts with {other:?}, not the header")));
        }
        None => return Err(Error::corrupted(path, "holds no header record")),
    };
    if header.format != FORMAT_NAME || !(OLDEST_VERSION..=FORMAT_VERSION).contains(&header.version)
    {
        return Err(Error::Incompatible {
            path: path.to_path_buf(),
            detail: format!(
                "format {:?} version {}, this reader handles {FORMAT_NAME:?} versions \
                 {OLDEST_VERSION} to {FORMAT_VERSION}",
                header.format, header.version
            ),
        });
    }
    let described = header.output_structure.is_some() && header.blob_encoding.is_some();
    let undescribed = header.output_structure.is_none() && header.blob_encoding.is_none();
    let fits = header.columns().map_err(|e| e.to_string());
    if (header.version >= 3 && !described) || (header.version < 3 && !undescribed) || fits.is_err()
    {
        let why = fits.err().unwrap_or_else(|| {
            "the output structure and blob encoding must be recorded from version 3 on, and \
             only then"
                .into()
        });
        return Err(Error::corrupted(path, format!("header of version {}: {why}", header.version)));
    }
    let mut committed = Committed::empty(header);
    committed.records = recovered.records.len() as u64;
    for (i, record) in records.enumerate() {
        match record? {
            Record::Segment(entry) => {
                committed.add(path, i + 1, entry)?;
                committed.finalized = false;
            }
            Record::Compacted(compaction) => {
                for id in &compaction.removed {
                    let Some(at) = committed.segments.iter().position(|s| s.id == *id) else {
                        return Err(Error::corrupted(
                            path,
                            format!("record {}: compaction removes segment {id}, not in it", i + 1),
                        ));
                    };
                    committed.segments.remove(at);
                    committed.removed.push(*id);
                    committed.adopted.retain(|adopted| adopted != id);
                }
                for entry in compaction.segments {
                    committed.add(path, i + 1, entry)?;
                }
                committed.runs.clear();
            }
            Record::Run(entry) => committed.add_run(path, i + 1, entry)?,
            Record::Adopted(entry) => committed.adopt(path, i + 1, entry)?,
            Record::Finalized(()) => committed.finalized = true,
            Record::Cache(_) => {
                return Err(Error::corrupted(path, format!("record {}: a second header", i + 1)));
            }
        }
    }
    Ok(committed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use stowage_core::{DType, ShapeRule};

    fn header() -> Record {
        let schema = Schema::new().tensor("x", DType::F32, ShapeRule::Any);
        Record::Cache(CacheHeader::new(schema, OutputStructure::Dict, BlobEncoding::PickledBytes))
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
        let segment = |id| Record::Segment(SegmentEntry { id, rows: 3, bytes: 100 });
        write(&path, &[header(), segment(0), segment(1), Record::Finalized(())]);
        let committed = read(&path).unwrap();
        assert_eq!(committed.segments.len(), 2);
        assert!(committed.finalized);
        assert_eq!(committed.next_segment_id(), 2);
        write(&path, &[header(), segment(0), Record::Finalized(()), segment(1)]);
        assert!(!read(&path).unwrap().finalized, "an append after finalize unfinalizes");
        write(&path, &[header(), segment(1), segment(1)]);
        assert!(read(&path).unwrap_err().to_string().contains("segment 1 after segment 1"));
        write(&path, &[segment(0)]);
        assert!(matches!(read(&path).unwrap_err(), Error::Corrupted { .. }));
        let other = Record::Cache(CacheHeader {
            version: 99,
            ..CacheHeader::new(Schema::new(), OutputStructure::Dict, BlobEncoding::Raw)
        });
        write(&path, &[other]);
        assert!(matches!(read(&path).unwrap_err(), Error::Incompatible { .. }));
    }

    /// A run record replaces the runs inside its range and must follow the others and end at a
    /// committed segment; a compaction withdraws every run.
    #[test]
    fn runs_replace_the_runs_inside_their_range() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("stowage.log");
        let segments: Vec<Record> =
            (0..6).map(|id| Record::Segment(SegmentEntry { id, rows: 3, bytes: 100 })).collect();
        let run = |first, through| Record::Run(RunEntry { first, through, keys: 3, new_keys: 3 });
        let mut records = vec![header()];
        records.extend(segments.iter().cloned());
        records.extend([run(0, 1), run(2, 3), run(4, 4), run(2, 5)]);
        write(&path, &records);
        let ranges: Vec<(u64, u64)> =
            read(&path).unwrap().runs.iter().map(|r| (r.first, r.through)).collect();
        assert_eq!(ranges, [(0, 1), (2, 5)]);
        for bad in [run(1, 2), run(3, 2), run(2, 9)] {
            let mut records = records.clone();
            records.push(bad);
            write(&path, &records);
            let err = read(&path).unwrap_err();
            assert!(err.to_string().contains("does not follow"), "{err}");
        }
        records.push(Record::Compacted(CompactedEntry { segments: Vec::new(), removed: vec![0] }));
        write(&path, &records);
        assert!(read(&path).unwrap().runs.is_empty());
    }
}
