//! Compaction: the winning rows of the small segments rewritten into new ones, shadowed rows
//! (a key written again later) dropped.
//!
//! Readers are never blocked and never see a half-done compaction:
//! 1. the new segments are written under ids above every existing one (a crash here leaves
//!    uncommitted segments, deleted by the next writer). They only hold keys whose winning row
//!    is in a replaced segment, so giving them the highest ids changes no winner;
//! 2. one `compacted` record commits them and retires the replaced segments at once; it also
//!    withdraws the key index runs (they point into the replaced segments), so readers opened
//!    from here on find keys through the sidecars until the writer merges again;
//! 3. the replaced segments' files stay, so readers that opened before keep reading them; the
//!    next compaction deletes them.

use stowage_core::{Error, Result};

use super::Writer;
use crate::commit_log::{ArrowRecord, CompactedEntry, Record};
use crate::layout::Layout;
use crate::pending::Pending;
use crate::reader::CacheReader;
use crate::segment::Segment;
use crate::segment_writer::write_next_segment;

/// What a compaction did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Compaction {
    /// The segments replaced.
    pub removed: Vec<u64>,
    /// The segments written.
    pub written: Vec<u64>,
    /// Rows kept (each key's winning row).
    pub rows_kept: u64,
    /// Shadowed rows dropped.
    pub rows_dropped: u64,
    /// Files of earlier compactions' replaced segments deleted.
    pub files_deleted: u64,
}

/// What a compaction keeps, read before anything is written: the segments it replaces and the
/// winning rows of their keys.
#[derive(Debug)]
pub struct CompactionPlan {
    /// The segments replaced, ascending.
    victims: Vec<u64>,
    /// Each of their keys' winning row, read through the checksums.
    kept: Pending,
    /// Rows kept.
    rows_kept: u64,
    /// Shadowed rows dropped.
    rows_dropped: u64,
}

impl Writer {
    /// Reads what a compaction of every committed segment smaller than `small_bytes` keeps
    /// (never an adopted segment, whose file is another writer's); `None` when fewer than two
    /// are that small. Writes nothing, so a failure (a row to keep that fails its checksum)
    /// leaves the writer as it was. `reader` must see every committed segment (the caller
    /// settled the writer).
    ///
    /// Errors: `Corrupted` naming the segment and key of a row to keep that does not read;
    /// `Io` naming a segment whose size cannot be read.
    pub fn plan_compaction(
        &self,
        reader: &CacheReader,
        small_bytes: u64,
    ) -> Result<Option<CompactionPlan>> {
        let mut victims = Vec::new();
        for &id in self.committed.iter().filter(|id| !self.adopted.contains(id)) {
            let path = self.layout.segment(id);
            let bytes = std::fs::metadata(&path).map_err(|e| Error::io(&path, e))?.len();
            if bytes < small_bytes {
                victims.push(id);
            }
        }
        if victims.len() < 2 {
            return Ok(None);
        }
        let mut plan =
            CompactionPlan { victims, kept: Pending::default(), rows_kept: 0, rows_dropped: 0 };
        for &id in &plan.victims {
            let segment = Segment::open(id, &self.layout.segment(id))?;
            for (row, key) in segment.keys()?.into_iter().enumerate() {
                if reader.locate(key)? == Some((id, row)) {
                    // Read through the checksums: a compaction never copies damage forward.
                    plan.kept.insert(key, &reader.read_row(key, id, row)?);
                    plan.rows_kept += 1;
                } else {
                    plan.rows_dropped += 1;
                }
            }
        }
        Ok(Some(plan))
    }

    /// Deletes the files earlier compactions replaced, then carries out `plan` (from
    /// [`Writer::plan_compaction`], with no write since): writes the kept rows as new segments
    /// and commits them in place of the replaced ones. `reader` must see every committed
    /// segment; afterwards the caller opens a new one (the segment list changed).
    ///
    /// Errors: any failed write, after which what reached the disk is unknown (the handle
    /// poisons itself).
    pub fn compact(
        &mut self,
        reader: &mut CacheReader,
        plan: Option<CompactionPlan>,
    ) -> Result<Compaction> {
        let mut report =
            Compaction { files_deleted: self.delete_replaced()?, ..Compaction::default() };
        let Some(CompactionPlan { victims, kept, rows_kept, rows_dropped }) = plan else {
            return Ok(report);
        };
        report.rows_kept = rows_kept;
        report.rows_dropped = rows_dropped;
        let mut segments = Vec::new();
        // Synced even in a cache written without fsync: the `compacted` record is synced and
        // the replaced segments go, so the new ones must survive a power cut.
        let format = self.format.synced();
        for chunk in kept.chunks(self.format.max_segment_bytes) {
            let (id, path) = write_next_segment(&format, &self.next_id, &chunk)?;
            let bytes = std::fs::metadata(&path).map_err(|e| Error::io(&path, e))?.len();
            segments.push(crate::commit_log::SegmentEntry::synced(id, chunk.len() as u64, bytes));
        }
        report.written = segments.iter().map(|s| s.id).collect();
        let record = CompactedEntry { segments, removed: victims.clone() };
        self.submit_record(Record::Own(ArrowRecord::Compacted(record)));
        self.collect_outcomes(true, reader)?;
        self.committed.retain(|id| !victims.contains(id));
        self.committed.extend(&report.written);
        // The runs point into the replaced segments: withdrawn by the record, their files go
        // (readers that mapped them keep their maps).
        for run in std::mem::take(&mut self.runs) {
            super::remove_run_file(&self.layout, &run)?;
        }
        self.replaced.extend(&victims);
        report.removed = victims;
        Ok(report)
    }

    /// Deletes the files of the segments earlier compactions replaced; returns how many.
    /// torchcachex's `index.pkl` goes first: it may point into them.
    fn delete_replaced(&mut self) -> Result<u64> {
        if !self.replaced.is_empty() {
            crate::pickled_index::remove(&self.layout, true)?;
        }
        let mut deleted = 0;
        for id in std::mem::take(&mut self.replaced) {
            deleted += delete_segment_files(&self.layout, id)?;
        }
        if deleted > 0 {
            stowage_core::file_safety::fsync_dir(self.layout.segments_dir())?;
        }
        Ok(deleted)
    }
}

/// Deletes a segment and its sidecars, whichever are there; returns how many were.
pub(crate) fn delete_segment_files(layout: &Layout, id: u64) -> Result<u64> {
    let segment = layout.segment(id);
    let mut deleted = 0;
    for path in [segment.with_extension("keys"), segment.with_extension("sums"), segment] {
        match std::fs::remove_file(&path) {
            Ok(()) => deleted += 1,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(Error::io(path, e)),
        }
    }
    Ok(deleted)
}
