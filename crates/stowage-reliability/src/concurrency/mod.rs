//! The concurrency campaign: readers while a writer writes, two writers racing for the lock, and a
//! writer killed while it holds the lock, on every backend.
//!
//! Per backend:
//! 1. the conformance suite's single-shot cases `second_writer_is_refused` and
//!    `concurrent_readers_see_identical_samples`, run as they are;
//! 2. on a backend that declares `concurrent_readers`, the [`live`] trial: one writer process,
//!    eight reader threads and two reader processes for `seconds`, every reader checking every
//!    handle against what the writer had acknowledged and announced ([`reader`], [`schedule`]);
//! 3. [`lock_race`] trials: two processes open one cache for append at the same moment;
//! 4. [`killed_writer`] trials: a writer holding the lock is SIGKILLed; the next one gets in;
//! 5. [`finalize_race`] rounds: reader threads opening in a loop while the writer finalizes.
//!
//! What a reader sees: every backend's read-only open reads the commit record it trusts (npy's
//! record log, memmap's `manifest.jsonl` or `_COMPLETE`, arrow's and hdf5's `stowage.log`, the
//! example's journal) once, so a handle shows the samples committed when it opened (a flush
//! that commits during the open may or may not be in) and nothing later: a snapshot. The live
//! trial checks that bound both ways and counts handles whose view grew.

pub mod child;
pub mod finalize_race;
pub mod killed_writer;
pub mod live;
pub mod lock_race;
pub mod process;
pub mod progress;
pub mod reader;
pub mod report;
pub mod schedule;
pub mod writer;

use crate::backends::Subject;
use std::path::Path;
use stowage_conformance::{Outcome, run_subset};

/// The conformance cases this campaign starts from, run once per backend as they are.
pub const SINGLE_SHOT_CASES: [&str; 2] =
    ["second_writer_is_refused", "concurrent_readers_see_identical_samples"];

/// How long and how often.
#[derive(Debug, Clone)]
pub struct Config {
    /// Length of the live trial.
    pub seconds: f64,
    /// Campaign seed: the writer's schedule and every trial's randomness derive from it.
    pub seed: u64,
    /// Two-writer races per backend.
    pub races: u32,
    /// Killed-writer trials per backend.
    pub kills: u32,
    /// Readers-during-finalize rounds per backend.
    pub finalize_rounds: u32,
    /// The realistic form: distinct keys the live writer writes first, at full speed (0: the
    /// quick form). The subjects are then the backends at their default options.
    pub preload: u64,
}

/// One backend's results.
#[derive(Debug)]
pub struct BackendReport {
    /// The backend.
    pub backend: &'static str,
    /// The single-shot conformance cases, by name.
    pub single_shot: Vec<(&'static str, Outcome)>,
    /// The live trial: `None` when the backend does not declare concurrent readers (shown as
    /// SKIPPED), else its report or the error that stopped it.
    pub live: Option<Result<live::LiveReport, String>>,
    /// Each race: `Ok` or what went wrong.
    pub races: Vec<Result<(), String>>,
    /// Each killed-writer trial.
    pub kills: Vec<Result<killed_writer::KilledWriter, String>>,
    /// Each readers-during-finalize round: the readers' opens, or what went wrong.
    pub finalize_rounds: Vec<Result<u64, String>>,
}

impl BackendReport {
    /// Every failure, one message each (reader failures with their first messages).
    pub fn failures(&self) -> Vec<String> {
        let mut out = Vec::new();
        for (name, outcome) in &self.single_shot {
            if let Outcome::Failed(why) = outcome {
                out.push(format!("{}: conformance case {name}: {why}", self.backend));
            }
        }
        match &self.live {
            Some(Ok(live)) => {
                let readers = live.readers();
                if readers.failures > 0 {
                    out.push(format!(
                        "{}: live trial: {} reader failures; first: {}",
                        self.backend,
                        readers.failures,
                        readers.messages.join(" || ")
                    ));
                }
                if readers.finished != live::READER_THREADS as u64 + live::READER_PROCESSES as u64 {
                    out.push(format!(
                        "{}: live trial: only {} of {} readers made their final check",
                        self.backend,
                        readers.finished,
                        live::READER_THREADS + live::READER_PROCESSES as usize
                    ));
                }
            }
            Some(Err(e)) => out.push(e.clone()),
            None => {}
        }
        out.extend(self.races.iter().filter_map(|r| r.clone().err()));
        out.extend(self.kills.iter().filter_map(|r| r.clone().err()));
        out.extend(self.finalize_rounds.iter().filter_map(|r| r.clone().err()));
        out
    }
}

/// Runs the whole campaign on `subject`, children being `exe` (the `concurrency` binary), in
/// the empty directory `work`.
pub fn run_backend(exe: &Path, subject: &Subject, config: &Config, work: &Path) -> BackendReport {
    let single_shot = run_subset(&*subject.factory, &SINGLE_SHOT_CASES).results;
    let live = subject.factory.capabilities().concurrent_readers.then(|| {
        let dir = work.join("live");
        std::fs::create_dir_all(&dir)
            .map_err(|e| format!("{}: creating {}: {e}", subject.name, dir.display()))
            .and_then(|()| {
                live::run(exe, subject, &dir, config.seed, config.seconds, config.preload)
            })
    });
    let races = (0..config.races).map(|t| lock_race::trial(exe, subject, work, t)).collect();
    let kills = (0..config.kills)
        .map(|t| killed_writer::trial(exe, subject, work, config.seed, t))
        .collect();
    let finalize_rounds =
        (0..config.finalize_rounds).map(|r| finalize_race::round(subject, work, r)).collect();
    BackendReport { backend: subject.name, single_shot, live, races, kills, finalize_rounds }
}
