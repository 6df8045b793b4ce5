//! The writing half of an [`crate::ArrowBackend`]: the writer lock, the segments being written,
//! the background merge of the key index and the completion marker.
//!
//! Pending samples handed to [`Writer::submit`] stay readable (as in flight) until the outcome of
//! their write comes back; then their segments join the reader. After a failed write what reached
//! the disk is unknown: the handle poisons itself ([`stowage_core::WriteState::poison_on_error`],
//! around every call below that writes) and refuses further writes, saying why.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::thread::JoinHandle;

use stowage_core::file_safety::{AppendLog, WriterLock, fsync_dir};
use stowage_core::{Error, Result, Sample};

use crate::commit_log::{ArrowRecord, FinalizedMarker, Record, RunEntry};
use crate::committer::{Committer, Work};
use crate::error::ArrowCacheError;
use crate::layout::Layout;
use crate::merged_index::{MergedIndex, SegmentKeys, merge_run, plan_merge};
use crate::pending::Pending;
use crate::reader::CacheReader;
use crate::segment_writer::SegmentFormat;

mod adoption;
mod compaction;

pub use adoption::Checked;
pub use compaction::Compaction;
pub(crate) use compaction::delete_segment_files;

/// The writer rank's state.
#[derive(Debug)]
pub struct Writer {
    layout: Layout,
    format: SegmentFormat,
    committer: Committer,
    merge_after: usize,
    /// Fresh keys (rows of segments no run covers) one merge gathers at most
    /// ([`crate::ArrowOptions::merge_rows`]): a merge holds them in memory.
    merge_rows: u64,
    /// The id the next segment gets (or above, when another writer took it), shared with the
    /// committer.
    next_id: Arc<AtomicU64>,
    /// The committed segments, ascending.
    committed: Vec<u64>,
    /// The committed segments another writer wrote (adopted): never compacted away.
    adopted: Vec<u64>,
    /// The key index runs the commit log vouches for, oldest first.
    runs: Vec<RunEntry>,
    /// Submitted items whose outcome has not come back, oldest first (`None`: a bare record).
    in_flight: VecDeque<Option<Arc<Pending>>>,
    /// The key index run being built in the background.
    merging: Option<JoinHandle<Result<RunEntry>>>,
    /// The commit log's last word is a `finalized` record: the cache is finalized, until the
    /// first segment committed after it.
    finalized: bool,
    /// `stowage.complete` is in place (removed by the first commit after a finalize).
    complete_marker: bool,
    /// Segments compactions replaced whose files are still there for readers that opened
    /// before (deleted by the next compaction).
    replaced: Vec<u64>,
    /// Declared last, so dropped last: released only after the background work above has
    /// stopped (the committer's thread joined, the merge joined by `Drop`), so that the next
    /// writer never runs beside it.
    _lock: WriterLock,
}

impl Drop for Writer {
    fn drop(&mut self) {
        // A merge still running writes a key index run file: let it finish before the lock goes
        // (a run no record vouches for is deleted by the next writer).
        if let Some(merging) = self.merging.take() {
            let _ = merging.join();
        }
    }
}

/// How a [`Writer`] is set up.
#[derive(Debug)]
pub struct WriterSetup {
    /// The lock, held for the writer's life.
    pub lock: WriterLock,
    /// The commit log, open for appending.
    pub log: AppendLog,
    /// Where and how segments are written.
    pub format: SegmentFormat,
    /// Write on a background thread.
    pub background: bool,
    /// Unmerged segments that start a merge.
    pub merge_after: usize,
    /// Fresh keys one merge gathers at most.
    pub merge_rows: u64,
    /// The id of the next segment: above every id in the log and in `segments/`.
    pub next_id: u64,
    /// The committed segments, ascending.
    pub committed: Vec<u64>,
    /// The committed segments another writer wrote (adopted).
    pub adopted: Vec<u64>,
    /// The key index runs the commit log vouches for, oldest first.
    pub runs: Vec<RunEntry>,
    /// Whether the commit log's last word is a `finalized` record.
    pub finalized: bool,
    /// Whether `stowage.complete` is in place.
    pub complete_marker: bool,
    /// Segments earlier compactions replaced.
    pub replaced: Vec<u64>,
}

impl Writer {
    /// A writer from `setup`.
    pub fn new(setup: WriterSetup) -> Writer {
        let layout = setup.format.layout.clone();
        let next_id = Arc::new(AtomicU64::new(setup.next_id));
        Writer {
            _lock: setup.lock,
            layout,
            format: setup.format.clone(),
            committer: Committer::new(setup.format, setup.log, next_id.clone(), setup.background),
            merge_after: setup.merge_after,
            merge_rows: setup.merge_rows.max(1),
            next_id,
            committed: setup.committed,
            adopted: setup.adopted,
            runs: setup.runs,
            in_flight: VecDeque::new(),
            merging: None,
            finalized: setup.finalized,
            complete_marker: setup.complete_marker,
            replaced: setup.replaced,
        }
    }

    /// Whether the cache is finalized: its commit log's last word is a `finalized` record (a
    /// segment committed after it, an append, unfinalizes it).
    pub fn is_finalized(&self) -> bool {
        self.finalized
    }

    /// Queues `rows` to be written as segments (one per `max_segment_bytes` chunk).
    pub fn submit(&mut self, rows: Pending) {
        if rows.is_empty() {
            return;
        }
        let rows = Arc::new(rows);
        self.committer.submit(Work::Segments { rows: rows.clone() });
        self.in_flight.push_back(Some(rows));
    }

    /// Waits for every queued write and for a background merge, taking in their outcomes: no
    /// work runs when it returns.
    ///
    /// Errors: the first failed write or merge.
    pub fn settle(&mut self, reader: &mut CacheReader) -> Result<()> {
        self.collect(true, reader)?;
        self.finish_merge(true, reader)
    }

    fn submit_record(&mut self, record: Record) {
        self.committer.submit(Work::Record(record));
        self.in_flight.push_back(None);
    }

    /// The in-flight sample of `key`, newest first.
    pub fn get(&self, key: &str) -> Option<&Sample> {
        self.in_flight.iter().rev().flatten().find_map(|rows| rows.get(key))
    }

    /// Keys of the in-flight samples, oldest first (a key may repeat).
    pub fn in_flight_keys(&self) -> impl Iterator<Item = &str> {
        self.in_flight.iter().flatten().flat_map(|rows| rows.keys())
    }

    /// Takes in the outcomes of finished writes (waiting for all when `wait`): committed
    /// segments join `reader`; returns how many did. Then takes in a finished merge and starts
    /// one when enough segments are unmerged.
    ///
    /// Errors: the first failed write or merge.
    pub fn collect(&mut self, wait: bool, reader: &mut CacheReader) -> Result<usize> {
        let committed = self.collect_outcomes(wait, reader)?;
        self.finish_merge(false, reader)?;
        self.start_merge(reader);
        Ok(committed)
    }

    fn collect_outcomes(&mut self, wait: bool, reader: &mut CacheReader) -> Result<usize> {
        let mut committed = 0;
        let mut first_error = None;
        for outcome in self.committer.outcomes(wait, self.in_flight.len()) {
            self.in_flight.pop_front();
            match outcome {
                Ok(entries) => {
                    for entry in entries {
                        reader.push_segment(entry.id)?;
                        self.committed.push(entry.id);
                        committed += 1;
                    }
                }
                Err(e) => {
                    first_error.get_or_insert(e);
                }
            }
        }
        if let Some(e) = first_error {
            return Err(e);
        }
        if committed > 0 {
            self.finalized = false;
        }
        if committed > 0 && self.complete_marker {
            // Appended after a finalize: the cache is no longer complete.
            remove_marker(&self.layout)?;
            self.complete_marker = false;
        }
        Ok(committed)
    }

    /// Starts building a key index run once `merge_after` segments are in none: over those
    /// segments and the newest runs no larger than what it gathers ([`plan_merge`]).
    fn start_merge(&mut self, reader: &CacheReader) {
        if self.merging.is_some() || reader.unmerged_segments() < self.merge_after {
            return;
        }
        let job = self.bounded_merge_job(reader.unmerged_rows());
        self.merging = Some(std::thread::spawn(move || job.run()));
    }

    /// The next merge of the segments no run covers (`fresh_rows` keys): all of them when they
    /// hold at most `merge_rows` keys, else the first ones that do (at least one segment),
    /// with the newest runs no larger than what it gathers ([`plan_merge`]).
    fn bounded_merge_job(&self, fresh_rows: u64) -> MergeJob {
        let run_keys: Vec<u64> = self.runs.iter().map(|run| run.keys).collect();
        if fresh_rows <= self.merge_rows {
            return self.merge_job(plan_merge(&run_keys, fresh_rows));
        }
        let (segments, rows) = self.merge_job(0).fresh_within(self.merge_rows);
        let mut job = self.merge_job(plan_merge(&run_keys, rows));
        job.fresh.truncate(segments);
        job
    }

    /// The merge of the `taken` newest runs and every segment no run covers.
    fn merge_job(&self, taken: usize) -> MergeJob {
        let split = self.runs.len() - taken;
        let through = self.runs.last().map(|run| run.through);
        MergeJob {
            layout: self.layout.clone(),
            committed: self.committed.clone(),
            older: self.runs[..split].to_vec(),
            inputs: self.runs[split..].to_vec(),
            fresh: self
                .committed
                .iter()
                .copied()
                .filter(|&id| through.is_none_or(|t| id > t))
                .collect(),
        }
    }

    /// Takes in a finished background merge (waits for it when `wait`): records it in the log
    /// and points `reader` at it.
    fn finish_merge(&mut self, wait: bool, reader: &mut CacheReader) -> Result<()> {
        let done = self.merging.as_ref().is_some_and(JoinHandle::is_finished);
        if !(done || wait) {
            return Ok(());
        }
        let Some(merging) = self.merging.take() else { return Ok(()) };
        match merging.join() {
            Ok(Ok(run)) => self.record_run(run, reader),
            // A failed merge loses nothing (the sidecars still find every key); say why. The
            // handle then refuses further writes, as after any failed write: an I/O error here
            // (a failed fsync above all) says the disk is failing.
            Ok(Err(e)) => Err(e),
            Err(_) => Err(ArrowCacheError::Panicked {
                task: "the background merge of the key index",
                cache: self.layout.root().to_path_buf(),
            }
            .into()),
        }
    }

    /// Commits `run`, which replaces the runs inside its range (as the commit log replays it),
    /// points `reader` at the runs and deletes the replaced runs' files (readers that mapped
    /// them keep their maps).
    fn record_run(&mut self, run: RunEntry, reader: &mut CacheReader) -> Result<()> {
        self.submit_record(Record::Own(ArrowRecord::Run(run)));
        self.collect_outcomes(true, reader)?;
        let inside = |old: &RunEntry| old.first >= run.first && old.through <= run.through;
        let (replaced, kept): (Vec<RunEntry>, Vec<RunEntry>) =
            self.runs.iter().partition(|old| inside(old));
        self.runs = kept;
        self.runs.push(run);
        reader.reload_runs(&self.runs)?;
        for old in
            replaced.iter().filter(|old| (old.first, old.through) != (run.first, run.through))
        {
            remove_run_file(&self.layout, old)?;
        }
        Ok(())
    }

    /// Merges every committed segment and run into one run now, on this thread (nothing to do
    /// when one run already covers them all).
    ///
    /// Fresh segments of more than `merge_rows` keys are first folded in steps (each recorded
    /// like a background merge), so that no merge holds more fresh keys than that in memory;
    /// the last step merges every run (streamed) with the last of them.
    pub fn merge_now(&mut self, reader: &mut CacheReader) -> Result<()> {
        self.settle(reader)?;
        let Some(&through) = self.committed.last() else { return Ok(()) };
        if self.runs.len() == 1 && self.runs[0].through == through {
            return Ok(());
        }
        loop {
            let job = self.bounded_merge_job(reader.unmerged_rows());
            if job.fresh.last().is_none_or(|&last| last == through) {
                break;
            }
            let run = job.run()?;
            self.record_run(run, reader)?;
        }
        let run = self.merge_job(self.runs.len()).run()?;
        self.record_run(run, reader)
    }

    /// Waits for every write, merges every segment into one key index run (so that a lookup in
    /// a finalized cache probes one table, not several runs and sidecars), then commits the
    /// `finalized` record and writes `stowage.complete`.
    ///
    /// Errors: any failed step; like a failed flush it leaves what reached the disk unknown
    /// (the `finalized` record may already be committed).
    pub fn finalize(&mut self, reader: &mut CacheReader) -> Result<()> {
        self.merge_now(reader)?;
        self.submit_record(Record::Finalized);
        self.collect(true, reader)?;
        self.finalized = true;
        // The log counts records through the committer; ask the file.
        let records = crate::commit_log::read(&self.layout.commit_log())?.records;
        FinalizedMarker { log_records: records }.write(&self.layout.complete_marker())?;
        self.complete_marker = true;
        Ok(())
    }
}

/// A merge to run off the writer's thread: everything it needs, owned.
struct MergeJob {
    layout: Layout,
    /// Every committed segment, ascending (whose keys a merge may read).
    committed: Vec<u64>,
    /// The runs before the inputs, oldest first.
    older: Vec<RunEntry>,
    /// The runs folded in, oldest first.
    inputs: Vec<RunEntry>,
    /// The segments no run covers, ascending.
    fresh: Vec<u64>,
}

impl MergeJob {
    /// How many of the first fresh segments hold at most `most` keys together (at least one,
    /// when there is one), and their keys. A segment whose key sidecar does not read counts as
    /// `most` (the merge reads it and reports it).
    fn fresh_within(&self, most: u64) -> (usize, u64) {
        let mut rows = 0;
        for (taken, &id) in self.fresh.iter().enumerate() {
            let sidecar = crate::key_sidecar::sidecar_path(&self.layout.segment(id));
            let its =
                crate::key_sidecar::KeySidecar::open(&sidecar).map_or(most, |s| s.rows() as u64);
            if taken > 0 && rows + its > most {
                return (taken, rows);
            }
            rows += its;
        }
        (self.fresh.len(), rows)
    }

    /// Builds and writes the run ([`merge_run`]). An input run that does not open as recorded
    /// or fails its checksum is rebuilt from its segments instead, and a damaged older run makes
    /// it a rebuild of the whole index: a merge never carries damage forward.
    fn run(mut self) -> Result<RunEntry> {
        let open = |runs: &[RunEntry], verify: bool| -> Option<Vec<MergedIndex>> {
            runs.iter()
                .map(|run| {
                    let index = MergedIndex::open_entry(&self.layout, run).ok()?;
                    (!verify || index.verify().is_ok()).then_some(index)
                })
                .collect()
        };
        let (inputs, older) = match (open(&self.inputs, true), open(&self.older, false)) {
            (Some(inputs), Some(older)) => (inputs, older),
            (None, Some(older)) => {
                let first = self.inputs.first().map_or(0, |run| run.first);
                self.fresh = self.committed.iter().copied().filter(|&id| id >= first).collect();
                (Vec::new(), older)
            }
            (_, None) => {
                self.fresh = self.committed.clone();
                (Vec::new(), Vec::new())
            }
        };
        let segments = SegmentKeys::of_ids(&self.layout, &self.committed);
        merge_run(&self.layout, &segments, &inputs, &self.fresh, &older)
    }
}

/// Deletes the file of a run the commit log no longer vouches for (gone already is fine). Not
/// synced: a crash that brings it back leaves a stale run the next writer deletes.
fn remove_run_file(layout: &Layout, run: &RunEntry) -> Result<()> {
    let path = layout.index_run(run.first, run.through);
    match std::fs::remove_file(&path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(Error::io(path, e)),
        _ => Ok(()),
    }
}

/// Removes `stowage.complete`, durably.
pub fn remove_marker(layout: &Layout) -> Result<()> {
    let path = layout.complete_marker();
    match std::fs::remove_file(&path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(Error::io(path, e)),
        _ => {}
    }
    fsync_dir(layout.root())
}
