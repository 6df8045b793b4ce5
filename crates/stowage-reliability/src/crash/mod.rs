//! The **crash** campaign: per backend, trials in which a child process writes a generated
//! workload (random batches, random flushes, compactions on Arrow, then finalize) and is killed
//! with SIGKILL at a random moment, aimed inside create, a put batch, flush, compaction or
//! finalize. Under the [`FailureModel::PowerLoss`] model the cache is then cut back to what was
//! fsynced ([`stowage_conformance::durable_image`], the model the conformance suite's power-loss
//! cases use too), which tests the order of the fsyncs and not only of the renames.
//!
//! A trial passes when, on reopening (read-only, then in append mode): every sample acknowledged
//! by a completed flush is present and byte-identical; every present sample equals one value
//! that was put for its key (none is partial); `validate(Full)` is clean; and the cache takes
//! more writes (resume, flush, finalize, all read back) — or, finalized on a backend that cannot
//! append, refuses them with `Error::Finalized`.
//!
//! Each trial's workload and kill plan come from its seed, so a failing trial is replayed with
//! `crash --backends <name> --models <model> --seed <seed> --trials 1` (the kill lands at a
//! slightly different instant: timing is not replayable).
//!
//! Kills in sequences where an original tool writes the same cache between stowage's sessions
//! are the mixed campaign's ([`crate::mixed`], `crash --mixed`), which reuses this campaign's
//! child protocol ([`child::Line`]) and killing parent ([`kill::run_child`]).

pub mod child;
pub mod kill;
pub mod report;
pub mod subject;
pub mod trial;
pub mod verify;
pub mod workload;

pub use report::{CampaignReport, Tally};
pub use subject::CrashSubject;
pub use trial::{FailureModel, TrialReport, TrialSetup, run_trial};

use std::path::PathBuf;

/// How a campaign runs.
#[derive(Debug, Clone)]
pub struct CampaignOptions {
    /// Trials per backend and model.
    pub trials: u64,
    /// The first trial's seed; trial `i` uses `seed + i`.
    pub seed: u64,
    /// The failure models, each run `trials` times per backend.
    pub models: Vec<FailureModel>,
    /// The executable that runs the child (`--child <label> <dir> <seed>`, see
    /// [`child::child_main`]): the `crash` binary.
    pub exe: PathBuf,
    /// Where trial directories go (each removed after its trial).
    pub scratch: PathBuf,
    /// Keep failing trials' directories under `scratch`.
    pub keep_failed: bool,
}

/// Runs every trial of every subject and model, calling `progress` after each.
pub fn run_campaign(
    subjects: &[CrashSubject],
    options: &CampaignOptions,
    mut progress: impl FnMut(&CrashSubject, FailureModel, &TrialReport),
) -> CampaignReport {
    let mut report = CampaignReport::default();
    for subject in subjects {
        for &model in &options.models {
            for i in 0..options.trials {
                let seed = options.seed.wrapping_add(i);
                let setup = TrialSetup {
                    exe: &options.exe,
                    scratch: &options.scratch,
                    keep_failed: options.keep_failed,
                };
                let trial = run_trial(subject, model, seed, setup, None);
                progress(subject, model, &trial);
                report.tally(subject.label, model).add(&trial);
            }
        }
    }
    report
}
