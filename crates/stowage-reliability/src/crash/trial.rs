//! One crash trial: a child writes the workload of the trial's seed and is killed at a random
//! moment; under [`FailureModel::PowerLoss`] the cache is then cut back to its durable image;
//! then every check of [`crate::crash::verify`] runs.

use crate::crash::kill::{KillPlan, Killed, Moment, run_child};
use crate::crash::subject::CrashSubject;
use crate::crash::verify::{Expectations, Verified, verify};
use crate::crash::workload::Workload;
use rand::{SeedableRng, rngs::StdRng};
use std::path::Path;
use std::process::Command;
use stowage_conformance::durable_image::{DurableImage, Rebuilt, Tearing};

/// What the crash does to the files the child wrote.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum FailureModel {
    /// SIGKILL: every write the child made stays (the page cache survives).
    Kill,
    /// SIGKILL, then a power cut: only what was fsynced stays ([`DurableImage`]), and of each
    /// file's unsynced bytes a prefix of whole 512- or 4096-byte blocks the trial's seed picks
    /// ([`Tearing`]: none, some, or all of them).
    PowerLoss,
}

impl FailureModel {
    /// Both, in report order.
    pub const ALL: [FailureModel; 2] = [FailureModel::Kill, FailureModel::PowerLoss];

    /// The name on the command line and in reports.
    pub fn name(self) -> &'static str {
        match self {
            FailureModel::Kill => "kill",
            FailureModel::PowerLoss => "power-loss",
        }
    }

    /// The model called `name`.
    pub fn named(name: &str) -> Option<FailureModel> {
        FailureModel::ALL.into_iter().find(|m| m.name() == name)
    }
}

/// Everything one trial found.
#[derive(Debug, Clone)]
pub struct TrialReport {
    /// The trial's seed (replay it with `crash --seed <seed> --trials 1`).
    pub seed: u64,
    /// Where the kill was aimed.
    pub plan: KillPlan,
    /// The op kind the child was inside when it died (`None`: between ops or after them).
    pub inside: Option<&'static str>,
    /// Samples acknowledged by a completed flush before the kill.
    pub acknowledged: usize,
    /// The checks' counts, when they passed.
    pub verified: Option<Verified>,
    /// What the power cut dropped (power-loss trials).
    pub rebuilt: Option<Rebuilt>,
    /// Why the trial failed, naming the backend, seed and model.
    pub failure: Option<String>,
}

/// Salt of the kill plan's generator, so that it is independent of the workload's.
const PLAN_SALT: u64 = 0x6B69_6C6C_706C_616E;

/// The command that starts the child: `exe --child <label> <dir> <seed>`.
pub fn child_command(exe: &Path, label: &str, dir: &Path, seed: u64) -> Command {
    let mut command = Command::new(exe);
    command.arg("--child").arg(label).arg(dir).arg(seed.to_string());
    command
}

/// Where and how a trial runs.
#[derive(Debug, Clone, Copy)]
pub struct TrialSetup<'a> {
    /// The executable started as the child ([`child_command`]).
    pub exe: &'a Path,
    /// Where the trial's directory goes.
    pub scratch: &'a Path,
    /// Keep the directory of a failing trial (the killed tree, the durable image and the child's
    /// stderr) for inspection; it is removed otherwise.
    pub keep_failed: bool,
}

/// Runs one trial in a fresh directory under `setup.scratch`; `plan` overrides the kill plan
/// the seed would choose.
pub fn run_trial(
    subject: &CrashSubject,
    model: FailureModel,
    seed: u64,
    setup: TrialSetup<'_>,
    plan: Option<KillPlan>,
) -> TrialReport {
    let workload = subject.workload(seed);
    let plan = plan.unwrap_or_else(|| {
        KillPlan::random(&workload, &mut StdRng::seed_from_u64(seed ^ PLAN_SALT))
    });
    let mut report = TrialReport {
        seed,
        plan,
        inside: None,
        acknowledged: 0,
        verified: None,
        rebuilt: None,
        failure: None,
    };
    let dir = setup.scratch.join(format!("{}-{}-{seed}", subject.label, model.name()));
    let result = attempt(subject, model, &workload, setup.exe, &dir, &mut report);
    if result.is_ok() || !setup.keep_failed {
        let _ = std::fs::remove_dir_all(&dir);
    }
    if let Err(why) = result {
        let inside = report.inside.map_or("between ops".to_string(), |op| format!("inside {op}"));
        report.failure = Some(format!(
            "{} {} trial seed {seed} (killed {inside}, {} samples acknowledged): {why}",
            subject.label,
            model.name(),
            report.acknowledged,
        ));
    }
    report
}

fn attempt(
    subject: &CrashSubject,
    model: FailureModel,
    workload: &Workload,
    exe: &Path,
    dir: &Path,
    report: &mut TrialReport,
) -> Result<(), String> {
    let _ = std::fs::remove_dir_all(dir);
    let image = match model {
        FailureModel::Kill => None,
        FailureModel::PowerLoss => Some(
            DurableImage::prepare(dir).map_err(|e| format!("preparing {}: {e}", dir.display()))?,
        ),
    };
    let root = dir.join("fs");
    std::fs::create_dir_all(&root).map_err(|e| format!("creating {}: {e}", root.display()))?;
    let cache = root.join("cache");
    let mut command = child_command(exe, subject.label, &cache, workload.seed);
    if let Some(image) = &image {
        image.attach(&mut command)?;
    }
    let killed: Killed = run_child(command, &workload.ops, report.plan, &dir.join("child.stderr"))?;
    report.inside = match killed.moment {
        Moment::Inside(n) => Some(workload.ops[n].name()),
        Moment::After(_) | Moment::Done | Moment::Start => None,
    };
    let expect = Expectations::new(workload, &killed);
    report.acknowledged = expect.acknowledged();
    if let Some(image) = &image {
        if !image.was_loaded() {
            return Err("the faultfs interposer did not load in the child".into());
        }
        let unmodeled = image.unmodeled();
        if !unmodeled.is_empty() {
            return Err(format!("writes the power-loss model cannot follow: {unmodeled:?}"));
        }
        // Each power cut also tears unsynced writes at block boundaries the seed picks.
        let rebuilt = image
            .cut_power_torn(Some(Tearing::for_trial(workload.seed)))
            .map_err(|e| format!("rebuilding the durable image: {e}"))?;
        report.rebuilt = Some(rebuilt);
    }
    report.verified = Some(verify(&*subject.factory, &cache, workload, &expect)?);
    Ok(())
}
