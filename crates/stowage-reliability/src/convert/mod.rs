//! The **convert** crash campaign: `stowage convert` — the binary, run as users run it, with its
//! default options unless told otherwise — killed with SIGKILL inside each of its steps (create,
//! copy, flush, finalize), then the same command run again.
//!
//! A trial passes when the rerun exits 0 and leaves what an uninterrupted run leaves: the target
//! finalized, `validate(Full)` clean, `stowage verify` exit 0, exactly the source's keys, each
//! with the source's sample, and no temporary file behind.
//!
//! Where the kill lands comes from the command's own step trace
//! (`STOWAGE_PHASE_TRACE`, see `stowage convert --help`): the parent waits until the chosen
//! step starts, then kills after a random fraction of the time such a step took in an
//! uninterrupted run of the same conversion ([`timeline`]). The step the trace shows last is
//! the one the kill landed in, reported per step.

pub mod report;
pub mod source;
pub mod timeline;
pub mod trial;

use rand::{SeedableRng, rngs::StdRng};
use std::path::Path;

use report::TargetReport;
use timeline::Timeline;
use trial::Verdict;

/// The backends `convert` writes, by their `--to` name.
pub const TARGETS: [&str; 4] = ["memmap", "arrow", "hdf5", "npy"];

/// How the campaign runs.
#[derive(Debug, Clone)]
pub struct Config {
    /// Trials per target.
    pub trials: u64,
    /// Samples in the source cache.
    pub samples: usize,
    /// `--flush-every` of the command; `None` runs it with its default.
    pub flush_every: Option<usize>,
    /// Seed of the kill points.
    pub seed: u64,
}

/// Runs `config.trials` trials converting one source into each of `targets`, in `work`.
///
/// Errors: the source cannot be built, or an uninterrupted conversion fails (then no kill
/// could be judged).
pub fn run(
    config: &Config,
    targets: &[&'static str],
    work: &Path,
) -> Result<Vec<TargetReport>, String> {
    let source = source::build(&work.join("source"), config.samples)?;
    let mut reports = Vec::new();
    for (t, &target) in targets.iter().enumerate() {
        let uninterrupted = work.join(format!("{target}-uninterrupted"));
        let timeline = Timeline::measure(&source, &uninterrupted, target, config)?;
        let mut rng = StdRng::seed_from_u64(config.seed ^ ((t as u64 + 1) << 32));
        let mut report = TargetReport::new(target);
        for number in 0..config.trials {
            let dst = work.join(format!("{target}-trial"));
            let _ = std::fs::remove_dir_all(&dst);
            let plan = timeline.plan(&mut rng);
            let verdict = trial::run(&source, &dst, target, config, &plan)
                .unwrap_or_else(|e| Verdict::failed(plan.step, format!("trial {number}: {e}")));
            report.add(number, verdict);
        }
        reports.push(report);
    }
    Ok(reports)
}
