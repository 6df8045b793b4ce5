//! `stowage.log`: what a generic cache has committed, as the core's checksummed append-only log.
//!
//! ```text
//! record 0   {"cache": {"format": "stowage-hdf5", "version": 1, "schema": {...}}}
//! then       {"segment": {"id": 0, "rows": 2048, "bytes": 4251832, "xxh3": ...}}   per segment
//!            {"finalized": null}                                      after finalize
//! ```
//!
//! A segment is committed once its record is durable; its file is written, fsynced and renamed
//! into place before. A crash between the two leaves a file no reader uses (the next writer
//! overwrites it). The schema lives here, under the log's checksums, so a damaged segment can
//! never change a field's dtype. `stowage.complete` holds the record count at finalize, so a log
//! cut short is damage `validate` reports, not an unfinished cache.

use std::path::Path;

use serde::{Deserialize, Serialize};
use stowage_core::file_safety::Recovered;
use stowage_core::{Error, Result, Schema};

/// The log's format name.
pub const FORMAT_NAME: &str = "stowage-hdf5";
/// The log's format version.
pub const FORMAT_VERSION: u32 = 1;

/// The first record.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CacheHeader {
    /// [`FORMAT_NAME`].
    pub format: String,
    /// [`FORMAT_VERSION`].
    pub version: u32,
    /// The schema the cache was created with.
    pub schema: Schema,
}

/// One committed segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct SegmentEntry {
    /// `segments/segment_<id:06>.h5`.
    pub id: u64,
    /// Samples in it.
    pub rows: u64,
    /// Its size in bytes.
    pub bytes: u64,
    /// xxh3-64 of the whole file, checked before libhdf5 parses it: libhdf5's global heap (where
    /// variable-length values live) has no checksum, and libhdf5 1.10 can crash on a damaged one.
    pub xxh3: u64,
}

/// One log record.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Record {
    /// The header, always first.
    Cache(CacheHeader),
    /// A committed segment.
    Segment(SegmentEntry),
    /// The cache was finalized.
    Finalized(()),
}

impl Record {
    /// The record as stored.
    pub fn to_bytes(&self) -> Vec<u8> {
        serde_json::to_vec(self).expect("records serialize")
    }
}

/// `stowage.complete`: the log's record count when the cache was last finalized.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct CompleteMarker {
    /// Records in the log then.
    pub log_records: u64,
}

impl CompleteMarker {
    /// Reads the marker at `path`: `Ok(None)` when absent, `Error::Corrupted` when unreadable.
    pub fn read(path: &Path) -> Result<Option<CompleteMarker>> {
        match std::fs::read(path) {
            Ok(bytes) => serde_json::from_slice(&bytes).map(Some).map_err(|e| {
                Error::corrupted(path, format!("does not parse as a completion marker: {e}"))
            }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(Error::io(path, e)),
        }
    }
}

/// What the log says.
#[derive(Debug, Clone, PartialEq)]
pub struct Committed {
    /// The header.
    pub header: CacheHeader,
    /// Committed segments, ids increasing.
    pub segments: Vec<SegmentEntry>,
    /// Whether the last record is `finalized`.
    pub finalized: bool,
    /// Records in the log.
    pub records: u64,
}

impl Committed {
    /// The id of the next segment.
    pub fn next_segment_id(&self) -> u64 {
        self.segments.last().map_or(0, |s| s.id + 1)
    }
}

/// Interprets the records `recovered` from the log at `path`; a torn last record (a crash while
/// appending) is not committed.
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
        Some(other) => return Err(Error::corrupted(path, format!("starts with {other:?}"))),
        None => return Err(Error::corrupted(path, "holds no header record")),
    };
    if header.format != FORMAT_NAME || header.version != FORMAT_VERSION {
        return Err(Error::Incompatible {
            path: path.to_path_buf(),
            detail: format!(
                "format {:?} version {}, this reader handles {FORMAT_NAME:?} version {FORMAT_VERSION}",
                header.format, header.version
            ),
        });
    }
    let mut committed = Committed {
        header,
        segments: Vec::new(),
        finalized: false,
        records: recovered.records.len() as u64,
    };
    for (i, record) in records.enumerate() {
        match record? {
            Record::Segment(entry) => {
                if entry.id < committed.next_segment_id() {
                    return Err(Error::corrupted(
                        path,
                        format!(
                            "record {}: segment {} is not after the previous one",
                            i + 1,
                            entry.id
                        ),
                    ));
                }
                committed.segments.push(entry);
                committed.finalized = false;
            }
            Record::Finalized(()) => committed.finalized = true,
            Record::Cache(_) => {
                return Err(Error::corrupted(path, format!("record {}: a second header", i + 1)));
            }
        }
    }
    Ok(committed)
}

/// The problem with the completion marker, if any: a log cut short, or a marker lost.
pub fn marker_problem(committed: &Committed, marker: Option<CompleteMarker>) -> Option<String> {
    match marker {
        Some(m) if m.log_records > committed.records => Some(format!(
            "stowage.complete records {} log records, the log holds {}: the log was cut short",
            m.log_records, committed.records
        )),
        Some(m) if committed.finalized && m.log_records != committed.records => Some(format!(
            "stowage.complete records {} log records, the finalized log holds {}",
            m.log_records, committed.records
        )),
        None if committed.finalized => {
            Some("the log is finalized but stowage.complete is missing".to_owned())
        }
        _ => None,
    }
}
