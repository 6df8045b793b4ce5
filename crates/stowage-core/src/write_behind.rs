//! Write-behind: a thread that performs a writer's batched file writes, so that the kernel's copy
//! into the page cache overlaps with the caller hashing and indexing the next samples.
//!
//! It is only an overlap: [`BackgroundWriter::wait_for`] returns once a write (and every one sent
//! before it) is in the page cache, or reports the first failure; durability still comes from the
//! caller's fsyncs after it. A failed write is reported by every later wait; the caller must then
//! stop writing (its handle is poisoned) and reopen.
//!
//! ```
//! use std::sync::Arc;
//! use stowage_core::bytes::Bytes;
//! use stowage_core::write_behind::{BackgroundWriter, Job};
//!
//! let dir = tempfile::tempdir()?;
//! let path = dir.path().join("rows.bin");
//! let file = Arc::new(std::fs::File::create(&path)?);
//! let writer = BackgroundWriter::start("example")?;
//! let parts = vec![Bytes::from_static(b"row 0 "), Bytes::from_static(b"row 1")];
//! let ticket = writer.send(Job { file: Arc::clone(&file), path: path.clone(), offset: 0, parts })?;
//! writer.wait_for(ticket)?;
//! assert_eq!(std::fs::read(&path)?, b"row 0 row 1");
//! file.sync_data()?; // durability is still the caller's
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

use crate::{Error, Result};
use bytes::Bytes;
use std::fs::File;
use std::io::{IoSlice, Seek, SeekFrom, Write};
use std::path::PathBuf;
use std::sync::mpsc::{Receiver, SyncSender, sync_channel};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;

/// Batches queued before `send` blocks: bounds the memory held by pending writes.
const QUEUE: usize = 4;

/// One gathering write: `parts` back to back at `offset` of `file`.
pub struct Job {
    /// The file (shared with the writer that appends to it).
    pub file: Arc<File>,
    /// Its path, for errors.
    pub path: PathBuf,
    /// Byte offset of the first part.
    pub offset: u64,
    /// The parts (rows, slot images), in file order.
    pub parts: Vec<Bytes>,
}

#[derive(Default)]
struct Progress {
    sent: u64,
    done: u64,
    /// The first failure: path and the OS error's kind and text (io::Error is not Clone).
    failure: Option<(PathBuf, std::io::ErrorKind, String)>,
}

/// The background thread and its progress counters. Dropping it waits for the writes already
/// queued.
pub struct BackgroundWriter {
    jobs: Option<SyncSender<Job>>,
    thread: Option<JoinHandle<()>>,
    progress: Arc<(Mutex<Progress>, Condvar)>,
}

impl BackgroundWriter {
    /// Starts the thread; `backend` names the caller in the error if the OS cannot start it.
    pub fn start(backend: &'static str) -> Result<BackgroundWriter> {
        let (jobs, queue) = sync_channel(QUEUE);
        let progress = Arc::new((Mutex::new(Progress::default()), Condvar::new()));
        let shared = Arc::clone(&progress);
        let thread = std::thread::Builder::new()
            .name(format!("{backend}-writer"))
            .spawn(move || run(queue, &shared))
            .map_err(|e| Error::Backend { backend, source: Box::new(e) })?;
        Ok(BackgroundWriter { jobs: Some(jobs), thread: Some(thread), progress })
    }

    /// Queues a write and returns its ticket: the write is done once
    /// [`BackgroundWriter::wait_for`] of the ticket returns. Blocks while 4 writes are pending,
    /// which bounds the memory they hold.
    pub fn send(&self, job: Job) -> Result<u64> {
        let path = job.path.clone();
        let ticket = {
            let mut progress = self.progress.0.lock().expect("progress lock poisoned");
            progress.sent += 1;
            progress.sent
        };
        let sender = self.jobs.as_ref().expect("the sender lives until drop");
        if sender.send(job).is_err() {
            // Count the job as done and failed, so that no wait blocks on it.
            let text = "the background writer thread has stopped";
            let (lock, done) = &*self.progress;
            let mut progress = lock.lock().expect("progress lock poisoned");
            progress.done += 1;
            let kind = std::io::ErrorKind::Other;
            progress.failure.get_or_insert_with(|| (path.clone(), kind, text.into()));
            done.notify_all();
            return Err(Error::io(path, std::io::Error::other(text)));
        }
        Ok(ticket)
    }

    /// Waits until every queued write is done; the first failure, if any.
    pub fn wait_idle(&self) -> Result<()> {
        let sent = self.progress.0.lock().expect("progress lock poisoned").sent;
        self.wait_for(sent)
    }

    /// Waits until the write with `ticket` and every one queued before it are done; the first
    /// failure, if any.
    pub fn wait_for(&self, ticket: u64) -> Result<()> {
        let (lock, done) = &*self.progress;
        let mut progress = lock.lock().expect("progress lock poisoned");
        while progress.done < ticket {
            progress = done.wait(progress).expect("progress lock poisoned");
        }
        match &progress.failure {
            Some((path, kind, text)) => {
                Err(Error::io(path, std::io::Error::new(*kind, text.clone())))
            }
            None => Ok(()),
        }
    }
}

impl Drop for BackgroundWriter {
    fn drop(&mut self) {
        // Closing the queue ends the thread after the writes already queued.
        drop(self.jobs.take());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn run(queue: Receiver<Job>, progress: &(Mutex<Progress>, Condvar)) {
    for job in queue {
        let result = write_parts(&job);
        let (lock, done) = progress;
        let mut state = lock.lock().expect("progress lock poisoned");
        if let Err(e) = result
            && state.failure.is_none()
        {
            state.failure = Some((job.path.clone(), e.kind(), e.to_string()));
        }
        state.done += 1;
        done.notify_all();
    }
}

/// Seeks to the offset and writes every part with `writev`, resuming after partial writes.
fn write_parts(job: &Job) -> std::io::Result<()> {
    let mut file = &*job.file;
    let mut slices: Vec<IoSlice<'_>> =
        job.parts.iter().filter(|p| !p.is_empty()).map(|p| IoSlice::new(p)).collect();
    let mut remaining: &mut [IoSlice<'_>] = &mut slices;
    file.seek(SeekFrom::Start(job.offset))?;
    while !remaining.is_empty() {
        match file.write_vectored(remaining) {
            Ok(0) => return Err(std::io::ErrorKind::WriteZero.into()),
            Ok(n) => IoSlice::advance_slices(&mut remaining, n),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}
