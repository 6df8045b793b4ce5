//! `stowage.log`: what a generic cache has committed, as the core's segment commit log
//! ([`stowage_core::segment_log`]). HDF5 adds nothing to it but a checksum in its segment entry.
//!
//! ```text
//! record 0   {"cache": {"format": "stowage-hdf5", "version": 1, "schema": {...}}}
//! then       {"segment": {"id": 0, "rows": 2048, "bytes": 4251832, "xxh3": ...}}   per segment
//!            {"finalized": null}                                      after finalize
//! ```
//!
//! A crash between a segment's rename and its record leaves a file no reader uses (the next
//! writer overwrites it). `stowage.complete` ([`FinalizedMarker`]) holds the record count at
//! finalize, so a log cut short is damage `validate` reports, not an unfinished cache.

use std::path::Path;

use serde::{Deserialize, Serialize};
use stowage_core::file_safety::Recovered;
use stowage_core::segment_log::{self, CommittedSegment, NoExtension, NoRecords, SegmentLog};
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

impl CommittedSegment for SegmentEntry {
    fn id(&self) -> u64 {
        self.id
    }
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
    type Record = NoRecords;
    type State = ();

    fn replay(_: &mut Committed, record: NoRecords) -> std::result::Result<(), String> {
        match record {}
    }
}

/// Interprets the records `recovered` from the log at `path` ([`segment_log::interpret`]); a
/// torn last record (a crash while appending) is not committed.
pub fn interpret(path: &Path, recovered: &Recovered) -> Result<Committed> {
    segment_log::interpret(path, recovered)
}
