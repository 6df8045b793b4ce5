//! Writing segments and commit records, in order, on the caller's thread or on a background one.
//!
//! Every write the writer makes goes through one [`Committer`] as a [`Work`] item: a batch of
//! pending samples (written as one segment per chunk, each committed by a log record) or a bare
//! log record (a merged index, finalize). Items are done strictly in submission order, so "last
//! write wins" holds whichever thread writes. In the background mode the caller keeps going while
//! a thread writes; each outcome comes back through [`Committer::outcomes`], an error included,
//! so the writer reports it on its next call. Dropping the committer waits for every queued
//! item: nothing queued is lost at shutdown (torchcachex drops queued rows).

use std::collections::VecDeque;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicU64;
use std::sync::mpsc::{Receiver, Sender, channel};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use stowage_core::file_safety::{AppendLog, sync_together};
use stowage_core::{IoResultExt, Result};

use crate::commit_log::{Record, SegmentEntry};
use crate::error::ArrowCacheError;
use crate::layout::Layout;
use crate::pending::Pending;
use crate::segment_writer::{SegmentFormat, write_next_segment};
use crate::{key_sidecar, row_sums};

/// One item of work.
#[derive(Debug)]
pub enum Work {
    /// Write `rows` as new segments, one per chunk of [`Pending::chunks`] (each with the next
    /// free id, [`write_next_segment`]), and commit each.
    Segments {
        /// The samples.
        rows: Arc<Pending>,
    },
    /// Append a record and make it durable.
    Record(Record),
}

/// The outcome of one item: the segments it committed, or why it failed.
pub type Outcome = Result<Vec<SegmentEntry>>;

/// Does [`Work`] in order, inline or on a background thread.
#[derive(Debug)]
pub struct Committer {
    mode: Mode,
}

#[derive(Debug)]
enum Mode {
    Inline {
        state: State,
        outcomes: VecDeque<Outcome>,
    },
    Background {
        layout: Layout,
        work: Option<Sender<Work>>,
        // In a mutex only to make the committer `Sync` (a `Backend` is); always reached
        // through `&mut self`, so never contended.
        outcomes: Mutex<Receiver<Outcome>>,
        thread: Option<JoinHandle<()>>,
    },
}

/// What doing the work needs: the format, the log and the next segment id (shared with the
/// writer, which compacts on its own thread when no work is queued).
#[derive(Debug)]
struct State {
    format: SegmentFormat,
    log: AppendLog,
    next_id: Arc<AtomicU64>,
    /// Once an item failed, later items are not attempted: what reached the disk is unknown.
    failed: Option<String>,
    /// Segments written without fsync since the last synced record; they and their sidecars
    /// are synced before the next one, which makes every record before it durable.
    unsynced: Vec<PathBuf>,
}

impl State {
    fn run(&mut self, work: Work) -> Outcome {
        if let Some(why) = &self.failed {
            let cache = self.format.layout.root().to_path_buf();
            return Err(ArrowCacheError::EarlierWriteFailed { cache, cause: why.clone() }.into());
        }
        let outcome = self.attempt(work);
        if let Err(e) = &outcome {
            self.failed = Some(e.to_string());
        }
        outcome
    }

    fn attempt(&mut self, work: Work) -> Result<Vec<SegmentEntry>> {
        match work {
            Work::Record(record) => {
                self.sync_segments()?;
                self.log.append(&record.to_bytes())?;
                self.log.sync()?;
                Ok(Vec::new())
            }
            Work::Segments { rows } => {
                let format = &self.format;
                let mut entries = Vec::new();
                for chunk in rows.chunks(format.max_segment_bytes) {
                    let (id, path) = write_next_segment(format, &self.next_id, &chunk)?;
                    let bytes = std::fs::metadata(&path).at(&path)?.len();
                    let rows = chunk.len() as u64;
                    let entry = SegmentEntry { id, rows, bytes, unsynced: !format.durable };
                    self.log.append(&Record::Segment(entry).to_bytes())?;
                    // Without durability the record still reaches the OS (a killed process loses
                    // nothing) but a power loss may lose it, or keep it and lose the files: the
                    // entry says so (`crate::lost_segments`). Other records (compaction's above
                    // all) are always synced, as they decide which older files may be deleted.
                    if format.durable {
                        self.log.sync()?;
                    } else {
                        self.log.flush()?;
                        self.unsynced.push(path);
                    }
                    entries.push(entry);
                }
                Ok(entries)
            }
        }
    }
}

impl State {
    /// Syncs the files of the segments written without fsync, and the directories that name
    /// them: a synced record makes the records before it durable, so their files must be first.
    fn sync_segments(&mut self) -> Result<()> {
        if self.unsynced.is_empty() {
            return Ok(());
        }
        let layout = &self.format.layout;
        let paths: Vec<PathBuf> = self
            .unsynced
            .iter()
            .flat_map(|segment| {
                [key_sidecar::sidecar_path(segment), row_sums::sums_path(segment), segment.clone()]
            })
            .collect();
        let files: Vec<(&Path, File)> = paths
            .iter()
            .map(|path| Ok((path.as_path(), File::open(path).at(path)?)))
            .collect::<Result<_>>()?;
        let files: Vec<(&Path, &File)> = files.iter().map(|(path, file)| (*path, file)).collect();
        sync_together(&files, &[layout.segments_dir().as_path(), layout.root()])?;
        self.unsynced.clear();
        Ok(())
    }
}

impl Committer {
    /// A committer appending to `log`, taking segment ids from `next_id`; with `background`,
    /// on a thread of its own.
    pub fn new(
        format: SegmentFormat,
        log: AppendLog,
        next_id: Arc<AtomicU64>,
        background: bool,
    ) -> Committer {
        let mut state = State { format, log, next_id, failed: None, unsynced: Vec::new() };
        if !background {
            return Committer { mode: Mode::Inline { state, outcomes: VecDeque::new() } };
        }
        let layout = state.format.layout.clone();
        let (work, queue) = channel::<Work>();
        let (report, outcomes) = channel();
        let thread = std::thread::spawn(move || {
            for item in queue {
                if report.send(state.run(item)).is_err() {
                    return;
                }
            }
        });
        let thread = Some(thread);
        let outcomes = Mutex::new(outcomes);
        Committer { mode: Mode::Background { layout, work: Some(work), outcomes, thread } }
    }

    /// Queues `work` (does it at once when inline). Its outcome comes from
    /// [`Committer::outcomes`].
    pub fn submit(&mut self, work: Work) {
        match &mut self.mode {
            Mode::Inline { state, outcomes } => outcomes.push_back(state.run(work)),
            Mode::Background { work: sender, .. } => {
                // A send fails only when the thread is gone; `outcomes` then reports it.
                let _ = sender.as_ref().map(|s| s.send(work));
            }
        }
    }

    /// The outcomes of finished items, in submission order; with `wait`, of `expected` items
    /// (blocking until they are done).
    pub fn outcomes(&mut self, wait: bool, expected: usize) -> Vec<Outcome> {
        let layout = self.layout().clone();
        match &mut self.mode {
            Mode::Inline { outcomes, .. } => outcomes.drain(..).collect(),
            Mode::Background { outcomes, .. } => {
                let outcomes = outcomes.get_mut().unwrap_or_else(|e| e.into_inner());
                let mut done: Vec<Outcome> = outcomes.try_iter().collect();
                while wait && done.len() < expected {
                    match outcomes.recv() {
                        Ok(outcome) => done.push(outcome),
                        Err(_) => {
                            while done.len() < expected {
                                let cache = layout.root().to_path_buf();
                                let stopped = ArrowCacheError::BackgroundWriterStopped { cache };
                                done.push(Err(stopped.into()));
                            }
                        }
                    }
                }
                done
            }
        }
    }

    fn layout(&self) -> &Layout {
        match &self.mode {
            Mode::Inline { state, .. } => &state.format.layout,
            Mode::Background { layout, .. } => layout,
        }
    }

    /// Waits for every queued item; the outcomes not yet collected are returned.
    pub fn shutdown(&mut self) -> Vec<Outcome> {
        match &mut self.mode {
            Mode::Inline { outcomes, .. } => outcomes.drain(..).collect(),
            Mode::Background { work, outcomes, thread, .. } => {
                drop(work.take());
                if let Some(thread) = thread.take() {
                    let _ = thread.join();
                }
                outcomes.get_mut().unwrap_or_else(|e| e.into_inner()).try_iter().collect()
            }
        }
    }
}

impl Drop for Committer {
    fn drop(&mut self) {
        for outcome in self.shutdown() {
            if let Err(e) = outcome {
                // Drop cannot return it: the writer reports errors on every call before this,
                // and `flush` waits for everything, so this is only reached by a handle dropped
                // with background work that failed after its last call.
                eprintln!("stowage-arrow: a background write failed at shutdown: {e}");
            }
        }
    }
}
