//! A merge of key index runs ([`crate::key_runs`]) on a background thread, so that a writer's
//! flush writes only the run of its own rows (work that grows with the flushed rows) and the
//! geometric merges that keep the run count logarithmic happen beside the writes.
//!
//! The writer starts a merge of consecutive runs it holds ([`BackgroundMerge::start`]), keeps
//! answering lookups from those inputs, and at a later flush installs the merged run in their
//! place ([`BackgroundMerge::install_into`]) before it records which runs are in use. Until the
//! record names the merged run, its file is unnamed: a crash leaves it for the next writer to
//! remove, and a reader never sees it. One merge runs at a time per writer.
//!
//! ```
//! use std::sync::Arc;
//! use stowage_core::background_merge::BackgroundMerge;
//! use stowage_core::key_runs::{KeyRun, RunSpec, build_run};
//!
//! let run = |first: u64, entries: &[(u64, u64)]| -> stowage_core::Result<Arc<KeyRun>> {
//!     let spec = RunSpec { first, through: first, stamp: 0 };
//!     let bytes = build_run(&[], entries, spec, |a, b| a == b, |_, _| false)?;
//!     Ok(Arc::new(KeyRun::from_bytes(format!("run-{first}"), bytes)?))
//! };
//! let mut runs = vec![run(0, &[(1, 1)])?, run(1, &[(2, 2)])?];
//! let merge = BackgroundMerge::start("example-merge", runs.clone(), |inputs, _cancel| {
//!     let inputs: Vec<&KeyRun> = inputs.iter().map(|r| &**r).collect();
//!     let spec = RunSpec { first: 0, through: 1, stamp: 0 };
//!     let bytes = build_run(&inputs, &[], spec, |a, b| a == b, |_, _| false)?;
//!     KeyRun::from_bytes("run-0-1", bytes)
//! });
//! let replaced = merge.install_into(&mut runs)?;
//! assert_eq!(replaced.len(), 2);
//! assert_eq!(runs.len(), 1);
//! assert_eq!(runs[0].keys(), 2);
//! # Ok::<(), stowage_core::Error>(())
//! ```

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;

use crate::Result;
use crate::key_runs::{KeyRun, plan_merge};

/// The runs to merge next, oldest first: the newest run of `runs` (oldest first) and the runs
/// before it that [`plan_merge`] folds into it (those no larger than what they gather); `None`
/// when there are none (the newest run is smaller than the one before it, or alone).
///
/// ```
/// use std::sync::Arc;
/// use stowage_core::background_merge::runs_to_merge;
/// use stowage_core::key_runs::{KeyRun, RunSpec, build_run};
/// let run = |n: u64| -> stowage_core::Result<Arc<KeyRun>> {
///     let entries: Vec<(u64, u64)> = (1..=n).map(|i| (i, i)).collect();
///     let spec = RunSpec { first: 0, through: 0, stamp: 0 };
///     Ok(Arc::new(KeyRun::from_bytes("r", build_run(&[], &entries, spec, |a, b| a == b, |_, _| false)?)?))
/// };
/// assert!(runs_to_merge(&[run(8)?, run(2)?]).is_none(), "smaller than the run before it");
/// assert_eq!(runs_to_merge(&[run(8)?, run(2)?, run(2)?]).map(|r| r.len()), Some(2));
/// # Ok::<(), stowage_core::Error>(())
/// ```
pub fn runs_to_merge(runs: &[Arc<KeyRun>]) -> Option<Vec<Arc<KeyRun>>> {
    let (newest, older) = runs.split_last()?;
    let keys: Vec<u64> = older.iter().map(|run| run.keys()).collect();
    let taken = plan_merge(&keys, newest.keys());
    (taken > 0).then(|| runs[runs.len() - 1 - taken..].to_vec())
}

/// A merge of consecutive runs, running on its own thread (or done on the caller's when no
/// thread could be started). Dropping it stops the merge at its next buffer written and waits
/// for the thread, so that no run file is written after the writer (and its lock) is gone.
#[derive(Debug)]
pub struct BackgroundMerge {
    /// The runs merged, oldest first: consecutive runs of the writer's, which stay in place
    /// (later runs are only appended after them) until the merge is installed.
    inputs: Vec<Arc<KeyRun>>,
    thread: Option<JoinHandle<Result<KeyRun>>>,
    /// The outcome of a merge done on the caller's thread.
    done: Option<Result<KeyRun>>,
    /// Set to stop the merge at its next buffer written.
    cancel: Arc<AtomicBool>,
}

impl BackgroundMerge {
    /// Starts `merge(inputs, cancel)` on a thread named `thread_name`: it writes the merged run
    /// durably (stopping with an error once `cancel` is set, e.g. by passing it to
    /// [`crate::key_runs::write_run_file`]) and returns it, mapped. When no thread can be
    /// started, the merge runs now, on this thread.
    pub fn start<F>(thread_name: &str, inputs: Vec<Arc<KeyRun>>, merge: F) -> BackgroundMerge
    where
        F: Fn(&[Arc<KeyRun>], &AtomicBool) -> Result<KeyRun> + Send + Sync + 'static,
    {
        let merge = Arc::new(merge);
        let cancel = Arc::new(AtomicBool::new(false));
        let (work, stop, job) = (inputs.clone(), Arc::clone(&cancel), Arc::clone(&merge));
        let spawned =
            std::thread::Builder::new().name(thread_name.into()).spawn(move || job(&work, &stop));
        match spawned {
            Ok(thread) => BackgroundMerge { inputs, thread: Some(thread), done: None, cancel },
            Err(_) => {
                let done = merge(&inputs, &cancel);
                BackgroundMerge { inputs, thread: None, done: Some(done), cancel }
            }
        }
    }

    /// The runs being merged, oldest first.
    pub fn inputs(&self) -> &[Arc<KeyRun>] {
        &self.inputs
    }

    /// Whether the merge is done (installing it will not wait).
    pub fn is_finished(&self) -> bool {
        self.thread.as_ref().is_none_or(JoinHandle::is_finished)
    }

    /// Waits for the merged run.
    ///
    /// Errors: the merge's (a panic in it is resumed here).
    pub fn wait(mut self) -> Result<KeyRun> {
        if let Some(done) = self.done.take() {
            return done;
        }
        let thread = self.thread.take().expect("a merge runs on a thread or is done");
        match thread.join() {
            Ok(outcome) => outcome,
            Err(panic) => std::panic::resume_unwind(panic),
        }
    }

    /// Stops the merge and waits for its thread; its run, partial or (had it just finished)
    /// whole, is removed: nothing names it.
    pub fn cancel(self) {
        self.cancel.store(true, Ordering::Relaxed);
        if let Ok(run) = self.wait() {
            let _ = std::fs::remove_file(run.path());
        }
    }

    /// Waits for the merged run and puts it into `runs` (the writer's runs, oldest first) in
    /// place of its inputs; returns the inputs' paths, for the caller to remove once the record
    /// of runs in use names the merged run instead.
    ///
    /// Errors: the merge's; `runs` is unchanged then.
    ///
    /// # Panics
    /// When `runs` does not hold the inputs in a row (they were moved or removed meanwhile).
    pub fn install_into(self, runs: &mut Vec<Arc<KeyRun>>) -> Result<Vec<PathBuf>> {
        let inputs = self.inputs.clone();
        let merged = self.wait()?;
        let at = runs
            .iter()
            .position(|run| Arc::ptr_eq(run, &inputs[0]))
            .filter(|&at| {
                runs.len() >= at + inputs.len()
                    && runs[at..at + inputs.len()]
                        .iter()
                        .zip(&inputs)
                        .all(|(a, b)| Arc::ptr_eq(a, b))
            })
            .expect("a merge's inputs stay in place until it is installed");
        Ok(runs
            .splice(at..at + inputs.len(), [Arc::new(merged)])
            .map(|run| run.path().to_path_buf())
            .collect())
    }
}

impl Drop for BackgroundMerge {
    fn drop(&mut self) {
        if let Some(thread) = self.thread.take() {
            // Its run, if written, is named by no record: the next writer removes it.
            self.cancel.store(true, Ordering::Relaxed);
            let _ = thread.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::key_runs::{RunSpec, build_run, write_run_file};

    fn run(name: &str, first: u64, entries: &[(u64, u64)]) -> Arc<KeyRun> {
        let spec = RunSpec { first, through: first, stamp: 0 };
        let bytes = build_run(&[], entries, spec, |a, b| a == b, |_, _| false).unwrap();
        Arc::new(KeyRun::from_bytes(name, bytes).unwrap())
    }

    #[test]
    fn an_installed_merge_replaces_exactly_its_inputs() {
        let mut runs = vec![run("a", 0, &[(1, 1)]), run("b", 1, &[(2, 2)]), run("c", 2, &[(3, 3)])];
        let inputs = runs[1..].to_vec();
        let merge = BackgroundMerge::start("t", inputs, |inputs, _| {
            let inputs: Vec<&KeyRun> = inputs.iter().map(|r| &**r).collect();
            let spec = RunSpec { first: 1, through: 2, stamp: 0 };
            KeyRun::from_bytes("bc", build_run(&inputs, &[], spec, |a, b| a == b, |_, _| false)?)
        });
        assert_eq!(merge.inputs().len(), 2);
        runs.push(run("d", 3, &[(4, 4)])); // appended while the merge runs
        let replaced = merge.install_into(&mut runs).unwrap();
        assert_eq!(replaced, [PathBuf::from("b"), PathBuf::from("c")]);
        let names: Vec<_> = runs.iter().map(|r| r.path().to_path_buf()).collect();
        assert_eq!(names, ["a", "bc", "d"].map(PathBuf::from));
        assert_eq!(runs[1].find(3, |_| true), Some(3));
    }

    #[test]
    fn a_failed_merge_leaves_the_runs_as_they_were() {
        let mut runs = vec![run("a", 0, &[(1, 1)]), run("b", 1, &[(2, 2)])];
        let merge = BackgroundMerge::start("t", runs.clone(), |_, _| {
            Err(crate::Error::invalid("disk full"))
        });
        assert!(merge.install_into(&mut runs).unwrap_err().to_string().contains("disk full"));
        assert_eq!(runs.len(), 2);
    }

    #[test]
    fn cancelling_stops_the_build_and_removes_its_file() {
        let dir = tempfile::tempdir().unwrap();
        let entries: Vec<(u64, u64)> =
            (1..50_000u64).map(|i| (i.wrapping_mul(0x9e37), i)).collect();
        let big = run("big", 0, &entries);
        let path = dir.path().join("merged.run");
        let out = path.clone();
        let started = Arc::new(AtomicBool::new(false));
        let seen = Arc::clone(&started);
        let merge = BackgroundMerge::start("t", vec![big], move |inputs, cancel| {
            seen.store(true, Ordering::Relaxed);
            // Waits for the cancel, so that the build below sees it.
            while !cancel.load(Ordering::Relaxed) {
                std::thread::yield_now();
            }
            let inputs: Vec<&KeyRun> = inputs.iter().map(|r| &**r).collect();
            let spec = RunSpec { first: 0, through: 0, stamp: 0 };
            write_run_file(&out, &inputs, &[], spec, |a, b| a == b, |_, _| false, Some(cancel))?;
            KeyRun::from_bytes(&out, std::fs::read(&out).map_err(|e| crate::Error::io(&out, e))?)
        });
        while !started.load(Ordering::Relaxed) {
            std::thread::yield_now();
        }
        merge.cancel();
        assert!(!path.exists(), "a cancelled merge leaves no run");
    }
}
