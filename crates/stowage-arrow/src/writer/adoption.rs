//! Adoption: another writer's segment (torchcachex appended it) made a committed segment like
//! stowage's own, without touching the segment file.
//!
//! Per segment, in id order, each step crash-safe on its own:
//! 1. its key sidecar and row checksums (of the rows as stowage decodes them, checked before any
//!    file is written) are written under temporary names, fsynced, renamed into place and the
//!    directory fsynced. A crash here leaves sidecars of a segment the log does not list: readers
//!    ignore them, the next writer deletes them, and the segment is still foreign;
//! 2. an `adopted` record is appended to the commit log and fsynced: the commit point. From here
//!    on the segment is committed; the key index runs reaching its id are withdrawn (their files
//!    deleted after the record), and the next merge covers it.
//!
//! So a crash leaves each segment foreign or adopted, never half of either.

use std::io::Write;
use std::path::PathBuf;

use stowage_core::file_safety::fsync_dir;
use stowage_core::{IoResultExt, Result};

use super::Writer;
use crate::commit_log::{ArrowRecord, Record, SegmentEntry};
use crate::key_sidecar;
use crate::reader::CacheReader;
use crate::row_sums;
use crate::segment_writer::Staged;

/// A segment to adopt, read and checked: its keys and the checksum of every row.
#[derive(Debug, Clone)]
pub struct Checked {
    /// The segment id.
    pub id: u64,
    /// The segment file.
    pub path: PathBuf,
    /// Every row's key, in row order.
    pub keys: Vec<String>,
    /// Every row's checksum ([`row_sums::of_sample`] of the row as stowage decodes it).
    pub sums: Vec<u64>,
}

impl Writer {
    /// Adopts `segment` (see the module docs). `reader` must have no work in flight (the caller
    /// settled the writer); the caller reopens it afterwards (the segment's origin changed).
    ///
    /// Errors: any failed step, after which what reached the disk is unknown (the record may be
    /// durable): the handle poisons itself.
    pub fn adopt(&mut self, segment: &Checked, reader: &mut CacheReader) -> Result<SegmentEntry> {
        let keys: Vec<&str> = segment.keys.iter().map(String::as_str).collect();
        let session = self.format.session;
        let sidecar = key_sidecar::build_in_session(&keys, session)?;
        let sums = row_sums::encode_in_session(&segment.sums, session);
        let mut staged = Staged::default();
        staged.stage(&key_sidecar::sidecar_path(&segment.path), |out| out.write_all(&sidecar))?;
        staged.stage(&row_sums::sums_path(&segment.path), |out| out.write_all(&sums))?;
        // Synced even in a cache written without fsync: the `adopted` record below is synced,
        // and a durable record must never vouch for files a power cut can take.
        staged.sync()?;
        staged.rename_next()?;
        staged.rename_next()?;
        fsync_dir(self.layout.segments_dir())?;
        let bytes = std::fs::metadata(&segment.path).at(&segment.path)?.len();
        let entry = SegmentEntry::synced(segment.id, keys.len() as u64, bytes);
        self.submit_record(Record::Own(ArrowRecord::Adopted(entry)));
        self.collect_outcomes(true, reader)?;
        let at = self.committed.partition_point(|&id| id < segment.id);
        self.committed.insert(at, segment.id);
        self.adopted.push(segment.id);
        // The log withdrew the runs reaching this id: they were built without its keys.
        let (kept, withdrawn): (Vec<_>, Vec<_>) =
            self.runs.iter().partition(|run| run.through < segment.id);
        self.runs = kept;
        for run in &withdrawn {
            super::remove_run_file(&self.layout, run)?;
        }
        Ok(entry)
    }
}
