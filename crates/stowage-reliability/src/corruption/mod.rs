//! The corruption campaign: single-byte flips and truncations at random offsets of random files
//! of a finalized cache, each on a fresh copy, on every backend.
//!
//! Per trial the damaged copy is opened read-only, every written key is read with `get`, its
//! `keys()` and `len()` are compared with what was written, and the cache is checked with
//! `validate(Full)`. The rules:
//! - `get` returns the written sample or an error, never other bytes ([`trial::Verdict::WrongData`]);
//! - damage that makes a `get` fail or lose its key, or makes `keys()` fail, lose a key or list
//!   one never written, is reported by open or by validate ([`trial::Verdict::Missed`]
//!   otherwise); a truncation is always reported;
//! - `len()` equals the number of keys `keys()` lists ([`trial::Verdict::Inconsistent`]);
//! - nothing panics, aborts or hangs ([`trial::Verdict::Panicked`]).
//!
//! Then the `stowage` command runs on the same copy (`verify`, and `get` of every key or a
//! sample of them) and is scored by the rules of [`cli_check`].
//!
//! Two forms ([`scale::Scale`]): the quick one (48 samples at the small settings of
//! [`crate::backends::all`]) and the realistic one (each backend's default options, 100,000
//! samples, 2,000 files and more for Arrow and npy), each reported as its own table.
//!
//! A flip nothing notices and nothing suffers from landed in bytes no reader uses (padding,
//! unused slots) and counts as harmless.
//!
//! [`run_in_process`] catches panics only; the `corruption` binary runs the trials in a child
//! process ([`supervise`]) so that an abort, a signal or a hang is also one failed trial.

pub mod cli_check;
pub mod panic_capture;
pub mod pristine;
pub mod report;
pub mod scale;
pub mod supervise;
pub mod trial;

use crate::backends::Subject;
use cli_check::{CLI_BACKENDS, CliConfig, check_pristine};
use pristine::{Pristine, file_kinds};
use report::BackendReport;
use scale::{Layout, Scale};
use std::path::Path;
use trial::{DamageKind, Trial, TrialId};

/// What a campaign runs.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Config {
    /// Flip trials per backend.
    pub flips: u64,
    /// Truncation trials per backend.
    pub truncations: u64,
    /// The campaign seed; each trial's choices derive from it and the trial id.
    pub seed: u64,
    /// Run only this trial (to replay a failure), instead of the counts above.
    pub replay: Option<TrialId>,
    /// The quick or the realistic form.
    pub scale: Scale,
    /// How to run the `stowage` command on each damaged copy; `None` runs the library checks
    /// alone (the command's column then counts every trial as not run).
    pub cli: Option<CliConfig>,
}

impl Config {
    /// The trials to run, in order: flips `0..flips`, then truncations `0..truncations` (or just
    /// the replayed one).
    ///
    /// ```
    /// use stowage_reliability::corruption::Config;
    /// let config = Config { flips: 2, truncations: 1, seed: 7, ..Config::default() };
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

/// Builds `subject`'s pristine cache at `work/pristine` as `config.scale` says, and an empty
/// report for it (noting the cache's size, and any failure of the `stowage` command on the
/// undamaged cache, see [`cli_check::check_pristine`]).
///
/// Errors: the pristine cache could not be built.
pub fn build_pristine(
    subject: &Subject,
    config: &Config,
    work: &Path,
) -> Result<(Pristine, BackendReport), String> {
    let started = std::time::Instant::now();
    let layout = Layout::of(config.scale, subject.name, &subject.factory.capabilities());
    let pristine = Pristine::build_with(&*subject.factory, &work.join("pristine"), &layout)?;
    let kinds = kinds_by_file(&pristine);
    let mut report =
        BackendReport::new(subject.name, config.seed, &kinds.values().cloned().collect::<Vec<_>>());
    let bytes: u64 = pristine.files.iter().map(|(_, len)| len).sum();
    report.pristine = format!(
        "Pristine cache: {} samples of {} fields, {} files, {:.1} MB, written in {} flushed \
         batches at {} options in {:.1} s.",
        layout.samples,
        layout.schema.fields.len(),
        pristine.files.len(),
        bytes as f64 / 1e6,
        layout.batches.len(),
        match config.scale {
            Scale::Quick => "the campaign's small",
            Scale::Realistic => "the default",
        },
        started.elapsed().as_secs_f64()
    );
    if let Some(cli) = &config.cli
        && CLI_BACKENDS.contains(&subject.name)
    {
        let output = cli_check::output_dir(work);
        let checked = check_pristine(cli, &pristine.path, &pristine.written, &output);
        let _ = std::fs::remove_dir_all(&output);
        if let Err(e) = checked {
            report.setup_failures.push(format!("the stowage command {e}"));
        }
    }
    Ok((pristine, report))
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
    let (pristine, mut report) = build_pristine(subject, config, work)?;
    let kinds = kinds_by_file(&pristine);
    for id in config.trial_ids() {
        let trial = Trial::plan(config.seed, id, &pristine);
        let outcome = trial::run(
            &*subject.factory,
            &pristine,
            &trial,
            &work.join("copy"),
            config.cli.as_ref(),
        )
        .map_err(|e| format!("{}: {e}", subject.name))?;
        report.record(&kinds[&trial.file], &trial, outcome);
    }
    report.elapsed = started.elapsed();
    Ok(report)
}
