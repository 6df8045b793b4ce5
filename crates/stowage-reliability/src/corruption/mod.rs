//! The corruption campaign: single-byte flips and truncations at random offsets of random files
//! of a finalized cache, each on a fresh copy, on every backend.
//!
//! Per trial the damaged copy is opened read-only, every written key is read with `get`, and the
//! cache is checked with `validate(Full)`. The rules:
//! - `get` returns the written sample or an error, never other bytes ([`trial::Verdict::WrongData`]);
//! - damage that makes a `get` fail or lose its key is reported by open or by validate
//!   ([`trial::Verdict::Missed`] otherwise); a truncation is always reported;
//! - nothing panics, aborts or hangs ([`trial::Verdict::Panicked`]).
//!
//! A flip nothing notices and nothing suffers from landed in bytes no reader uses (padding,
//! unused slots) and counts as harmless.
//!
//! [`run_in_process`] catches panics only; the `corruption` binary runs the trials in a child
//! process ([`supervise`]) so that an abort, a signal or a hang is also one failed trial.

pub mod panic_capture;
pub mod pristine;
pub mod report;
pub mod supervise;
pub mod trial;

use crate::backends::Subject;
use pristine::{Pristine, file_kinds};
use report::BackendReport;
use std::path::Path;
use trial::{DamageKind, Trial, TrialId};

/// What a campaign runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// Flip trials per backend.
    pub flips: u64,
    /// Truncation trials per backend.
    pub truncations: u64,
    /// The campaign seed; each trial's choices derive from it and the trial id.
    pub seed: u64,
    /// Run only this trial (to replay a failure), instead of the counts above.
    pub replay: Option<TrialId>,
}

impl Config {
    /// The trials to run, in order: flips `0..flips`, then truncations `0..truncations` (or just
    /// the replayed one).
    ///
    /// ```
    /// use stowage_reliability::corruption::Config;
    /// let config = Config { flips: 2, truncations: 1, seed: 7, replay: None };
    /// let ids: Vec<String> = config.trial_ids().iter().map(|id| id.to_string()).collect();
    /// assert_eq!(ids, ["flip:0", "flip:1", "truncation:0"]);
    /// ```
    pub fn trial_ids(&self) -> Vec<TrialId> {
        if let Some(id) = self.replay {
            return vec![id];
        }
        let flips = (0..self.flips).map(|number| TrialId { kind: DamageKind::Flip, number });
        let truncations =
            (0..self.truncations).map(|number| TrialId { kind: DamageKind::Truncation, number });
        flips.chain(truncations).collect()
    }
}

/// The kind of each file a trial may damage, keyed by relative path.
pub fn kinds_by_file(
    pristine: &Pristine,
) -> std::collections::BTreeMap<std::path::PathBuf, String> {
    let files: Vec<_> = pristine.files.iter().map(|(f, _)| f.clone()).collect();
    let kinds = file_kinds(&files);
    files.into_iter().zip(kinds).collect()
}

/// Builds `subject`'s pristine cache under `work` and runs every trial of `config` in this
/// process, catching panics. An abort or a signal ends the process: use the `corruption` binary
/// for campaigns that must survive them.
///
/// Errors: the pristine cache could not be built, or a copy could not be made or damaged.
pub fn run_in_process(
    subject: &Subject,
    config: &Config,
    work: &Path,
) -> Result<BackendReport, String> {
    let started = std::time::Instant::now();
    let pristine = Pristine::build(&*subject.factory, &work.join("pristine"))?;
    let kinds = kinds_by_file(&pristine);
    let mut report =
        BackendReport::new(subject.name, config.seed, &kinds.values().cloned().collect::<Vec<_>>());
    for id in config.trial_ids() {
        let trial = Trial::plan(config.seed, id, &pristine);
        let verdict = trial::run(&*subject.factory, &pristine, &trial, &work.join("copy"))
            .map_err(|e| format!("{}: {e}", subject.name))?;
        report.record(&kinds[&trial.file], &trial, verdict);
    }
    report.elapsed = started.elapsed();
    Ok(report)
}
