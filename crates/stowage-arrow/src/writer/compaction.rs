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
//!
//! The kept rows stream: the replaced segments are read one after another and their winning
//! rows written into new segments as they gather (at most [`BATCH_BYTES`] of payload or
//! [`BATCH_ROWS`] rows in memory at once), so a compaction's memory does not grow with the
//! cache. A kept row that does not read (it fails its checksum) stops the compaction before its
//! record: the new segments written so far are removed, and the cache and the writer are as they
//! were.

use stowage_core::{Error, Result};

use super::Writer;
use crate::commit_log::{ArrowRecord, CompactedEntry, Record, SegmentEntry};
use crate::layout::Layout;
use crate::pending::Pending;
use crate::reader::CacheReader;
use crate::segment::Segment;
use crate::segment_writer::{SegmentFormat, write_next_segment};

/// Payload bytes of kept rows gathered before they are written as a segment (fewer when
/// `ArrowOptions::max_segment_bytes` is smaller).
pub const BATCH_BYTES: u64 = 16 << 20;
/// Kept rows gathered before they are written as a segment: small rows cost more memory than
/// their payload (each is a decoded sample).
pub const BATCH_ROWS: usize = 65_536;

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

/// The segments a compaction replaces.
#[derive(Debug)]
pub struct CompactionPlan {
    /// The segments replaced, ascending.
    victims: Vec<u64>,
}

/// Kept rows gathered, and the new segments written from them so far (uncommitted).
struct KeptRows<'a> {
    format: &'a SegmentFormat,
    next_id: &'a std::sync::atomic::AtomicU64,
    max_segment_bytes: u64,
    batch: Pending,
    written: Vec<SegmentEntry>,
}

impl KeptRows<'_> {
    fn push(&mut self, key: &str, sample: &stowage_core::Sample) -> Result<()> {
        self.batch.insert(key, sample);
        if self.batch.bytes() >= self.max_segment_bytes.min(BATCH_BYTES)
            || self.batch.len() >= BATCH_ROWS
        {
            self.write_batch()?;
        }
        Ok(())
    }

    /// Writes the gathered rows as new segments (one per `max_segment_bytes`).
    fn write_batch(&mut self) -> Result<()> {
        let batch = std::mem::take(&mut self.batch);
        for chunk in batch.chunks(self.max_segment_bytes) {
            let (id, path) = write_next_segment(self.format, self.next_id, &chunk)?;
            let bytes = std::fs::metadata(&path).map_err(|e| Error::io(&path, e))?.len();
            self.written.push(SegmentEntry::synced(id, chunk.len() as u64, bytes));
        }
        Ok(())
    }

    /// Removes the segments written so far (none is committed).
    fn remove_written(&self) {
        for entry in &self.written {
            let _ = delete_segment_files(&self.format.layout, entry.id);
        }
    }
}

impl Writer {
    /// The committed segments smaller than `small_bytes` (never an adopted segment, whose file
    /// is another writer's); `None` when fewer than two are that small. Reads the segments'
    /// sizes only.
    ///
    /// Errors: `Io` naming a segment whose size cannot be read.
    pub fn plan_compaction(&self, small_bytes: u64) -> Result<Option<CompactionPlan>> {
        let mut victims = Vec::new();
        for &id in self.committed.iter().filter(|id| !self.adopted.contains(id)) {
            let path = self.layout.segment(id);
            let bytes = std::fs::metadata(&path).map_err(|e| Error::io(&path, e))?.len();
            if bytes < small_bytes {
                victims.push(id);
            }
        }
        Ok((victims.len() >= 2).then_some(CompactionPlan { victims }))
    }

    /// Deletes the files earlier compactions replaced, then carries out `plan` (from
    /// [`Writer::plan_compaction`], with no write since): writes the winning rows of the
    /// replaced segments' keys as new segments, streaming, and commits them in place of the
    /// replaced ones. `reader` must see every committed segment (the caller settled the writer);
    /// afterwards the caller opens a new one (the segment list changed).
    ///
    /// Errors: `Corrupted` naming the segment and key of a row to keep that does not read
    /// (read through the checksums: a compaction never copies damage forward); nothing is
    /// committed then and the new segments are removed, so the writer goes on as before. Any
    /// other error is a failed write, after which what reached the disk is unknown (the handle
    /// poisons itself).
    pub fn compact(
        &mut self,
        reader: &mut CacheReader,
        plan: Option<CompactionPlan>,
    ) -> Result<Compaction> {
        let mut report =
            Compaction { files_deleted: self.delete_replaced()?, ..Compaction::default() };
        let Some(CompactionPlan { victims }) = plan else {
            return Ok(report);
        };
        // Synced even in a cache written without fsync: the `compacted` record is synced and
        // the replaced segments go, so the new ones must survive a power cut.
        let format = self.format.synced();
        let mut kept = KeptRows {
            format: &format,
            next_id: &self.next_id,
            max_segment_bytes: self.format.max_segment_bytes,
            batch: Pending::default(),
            written: Vec::new(),
        };
        let gathered = gather_kept(&self.layout, reader, &victims, &mut kept, &mut report)
            .and_then(|()| kept.write_batch());
        if let Err(e) = gathered {
            kept.remove_written();
            return Err(e);
        }
        let segments = kept.written;
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

/// Reads `victims` one after another and hands each key's winning row (read through the
/// checksums) to `kept`, counting kept and shadowed rows in `report`.
fn gather_kept(
    layout: &Layout,
    reader: &CacheReader,
    victims: &[u64],
    kept: &mut KeptRows<'_>,
    report: &mut Compaction,
) -> Result<()> {
    for &id in victims {
        let segment = Segment::open(id, &layout.segment(id))?;
        for (row, key) in segment.keys()?.into_iter().enumerate() {
            if reader.locate(key)? == Some((id, row)) {
                kept.push(key, &reader.read_row(key, id, row)?)?;
                report.rows_kept += 1;
            } else {
                report.rows_dropped += 1;
            }
        }
    }
    Ok(())
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
