//! `stowage.log`: what a generic cache has committed, as the core's segment commit log
//! ([`stowage_core::segment_log`]). HDF5 adds a checksum to its segment entry and one record
//! kind: a key index run ([`crate::key_index`]) was written.
//!
//! ```text
//! record 0   {"cache": {"format": "stowage-hdf5", "version": 1, "schema": {...}}}
//! then       {"segment": {"id": 0, "rows": 2048, "bytes": 4251832, "xxh3": ...,
//!                         "meta": {"ranges": [[0, 2048], ...], "xxh3": ...}}}   per segment
//!            {"run": {"first": 0, "through": 31, "keys": 65536, "new_keys": 65536,
//!                     "header_xxh3": ...}}             a key index run over segments 0..=31
//!            {"finalized": null}                                      after finalize
//! ```
//!
//! A crash between a segment's rename and its record leaves a file no reader uses (the next
//! writer overwrites it). `stowage.complete` ([`FinalizedMarker`]) holds the record count at
//! finalize, so a log cut short is damage `validate` reports, not an unfinished cache.

use std::path::Path;

use serde::{Deserialize, Serialize};
use stowage_core::file_safety::Recovered;
use stowage_core::segment_log::{self, CommittedSegment, NoExtension, SegmentLog};
use stowage_core::{Result, Schema};

pub use stowage_core::segment_log::FinalizedMarker;

/// The log's format name (its version: [`Hdf5Log`]).
pub const FORMAT_NAME: &str = Hdf5Log::FORMAT_NAME;

/// One log record.
pub type Record = segment_log::Record<Hdf5Log>;
/// What the log says.
pub type Committed = segment_log::Committed<Hdf5Log>;

/// The header of a new cache of `schema`: HDF5 adds no fields to it.
pub fn new_header(schema: Schema) -> segment_log::CacheHeader<NoExtension> {
    Hdf5Log::new_header(schema, NoExtension {})
}

/// One committed segment.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SegmentEntry {
    /// `segments/segment_<id:06>.h5`.
    pub id: u64,
    /// Samples in it.
    pub rows: u64,
    /// Its size in bytes.
    pub bytes: u64,
    /// xxh3-64 of the whole file, checked before libhdf5 parses it: libhdf5's global heap (where
    /// variable-length values live) has no checksum, and libhdf5 1.10 can crash on a damaged one.
    /// Checked on a segment's first use when the entry has no [`SegmentEntry::meta`] (written
    /// before it existed), and by every `validate`.
    pub xxh3: u64,
    /// What a first use checks instead of the whole file (absent in entries written before it
    /// existed, and for segments of a layout stowage does not read itself): see [`MetaRegions`].
    /// Absent from the record when `None`, so such records read as before; the code before it
    /// reads records that have it (serde ignores the field) and checks the whole file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub meta: Option<MetaRegions>,
}

/// The bytes of a segment file that anything parses before stowage's own checked readers take
/// over, and their xxh3-64: every byte outside the global heap collections and the descriptor
/// chunks of the variable-length columns (superblock, object headers, chunk indexes, the index
/// table with the rows' checksums). A first use reads and hashes only these (about 10 KiB of a
/// 330 KiB segment of 2,048 16-byte rows) before libhdf5 opens the file.
///
/// The bytes left out are never trusted unchecked: descriptor chunks are inflated by stowage
/// (every size bounded, `crate::direct`) and only say where a row's values lie; collections are
/// parsed by stowage's bounds-checked parser (`crate::direct::global_heap`); and what a row read
/// returns (key, shape row, field bytes) is checked against the row's xxh3 in the index table,
/// which is inside these regions. So a damaged byte there is an error when its row is read (or
/// is in free space no read uses), never wrong data; `validate` hashes the whole file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MetaRegions {
    /// File byte ranges `[start, end)`, sorted and disjoint.
    pub ranges: Vec<[u64; 2]>,
    /// xxh3-64 of the bytes of `ranges`, concatenated in order.
    pub xxh3: u64,
}

impl CommittedSegment for SegmentEntry {
    fn id(&self) -> u64 {
        self.id
    }
}

/// The record kinds HDF5 adds to the segment log.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Hdf5Record {
    /// A key index run was written; it replaces the runs inside its range.
    Run(RunEntry),
    /// The distinct keys of the cache once the segment at position `through` was committed
    /// (written after each segment): an open whose last segment it counts need not look the
    /// keys of the segments no run covers up in the runs to count them.
    Keys {
        /// The position of the last segment counted.
        through: u64,
        /// Distinct keys in the segments up to it.
        keys: u64,
    },
}

/// What the HDF5 records of a segment log say, replayed ([`Hdf5Log`]'s state).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Hdf5State {
    /// The key index runs the log vouches for, oldest first.
    pub runs: Vec<RunEntry>,
    /// The latest key count: (position of the last segment counted, distinct keys).
    pub keys: Option<(u64, u64)>,
}

/// A key index run over the segments at positions `first..=through` of the log
/// ([`crate::key_index`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunEntry {
    /// The position (in commit order, from 0) of the first segment it covers.
    pub first: u64,
    /// The position of the last segment it covers.
    pub through: u64,
    /// Distinct keys in it.
    pub keys: u64,
    /// Its keys that no older run holds.
    pub new_keys: u64,
    /// The run file's header checksum: a different file under the run's name is not used.
    pub header_xxh3: u64,
}

/// The HDF5 segment log's format: its name, version and segment entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hdf5Log {}

impl SegmentLog for Hdf5Log {
    const FORMAT_NAME: &'static str = "stowage-hdf5";
    const FORMAT_VERSION: u32 = 1;
    const CACHE_NAME: &'static str = "stowage HDF5 cache";
    type HeaderExtension = NoExtension;
    type Segment = SegmentEntry;
    type Record = Hdf5Record;
    type State = Hdf5State;

    fn replay(committed: &mut Committed, record: Hdf5Record) -> std::result::Result<(), String> {
        let entry = match record {
            Hdf5Record::Run(entry) => entry,
            Hdf5Record::Keys { through, keys } => {
                if usize::try_from(through).is_ok_and(|t| t < committed.segments.len()) {
                    committed.own.keys = Some((through, keys));
                    return Ok(());
                }
                return Err(format!(
                    "key count after segment {through}, beyond the {} committed segments",
                    committed.segments.len()
                ));
            }
        };
        let runs = &mut committed.own.runs;
        runs.retain(|run| run.first < entry.first || run.through > entry.through);
        let follows = match runs.last() {
            Some(run) => run.through + 1 == entry.first,
            None => entry.first == 0,
        };
        let covered = usize::try_from(entry.through).is_ok_and(|t| t < committed.segments.len());
        if entry.first > entry.through || !follows || !covered {
            return Err(format!(
                "key index run over segments {} to {} does not follow the runs before it                  ({runs:?}) within the {} committed segments",
                entry.first,
                entry.through,
                committed.segments.len()
            ));
        }
        runs.push(entry);
        Ok(())
    }
}

/// Interprets the records `recovered` from the log at `path` ([`segment_log::interpret`]); a
/// torn last record (a crash while appending) is not committed.
pub fn interpret(path: &Path, recovered: &Recovered) -> Result<Committed> {
    segment_log::interpret(path, recovered)
}
