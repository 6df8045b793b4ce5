//! The crash campaign's quick form: a few kill and power-cut trials per backend, the power-loss
//! model's own check, and a negative control that the power-cut trials must catch.

use std::path::Path;
use std::process::Command;
use stowage_conformance::durable_image::{DEMO_EXPECTED, DurableImage, files_under};
use stowage_reliability::crash::kill::KillPlan;
use stowage_reliability::crash::workload::{Op, Workload};
use stowage_reliability::crash::{
    CampaignOptions, CrashSubject, FailureModel, TrialSetup, run_campaign, run_trial,
};

const EXE: &str = env!("CARGO_BIN_EXE_crash");
const TRIALS: u64 = 4;

/// Held by each test that starts children. A child forked by one test's thread inherits, until
/// it execs, the descriptors another test's thread has open, writer lock files included (flock
/// locks belong to the open file, which the child then shares): the other test could find
/// the cache it just closed still locked. One test at a time rules that out.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Runs [`TRIALS`] trials of `backend` under both failure models and fails with every failing
/// trial's message (each names its seed).
fn campaign(backend: &str) {
    let _alone = one_at_a_time();
    let subjects = CrashSubject::select(&[backend.to_owned()]).unwrap();
    let scratch = tempfile::tempdir().unwrap();
    let options = CampaignOptions {
        trials: TRIALS,
        seed: 7_000,
        models: FailureModel::ALL.to_vec(),
        exe: EXE.into(),
        scratch: scratch.path().to_path_buf(),
        keep_failed: false,
    };
    let report = run_campaign(&subjects, &options, |_, _, _| {});
    println!("{}", report.render(false));
    let failures: Vec<&str> = report.failures().collect();
    assert!(failures.is_empty(), "{backend}: {failures:#?}");
    assert_eq!(report.rows.len(), 2);
    for (_, model, tally) in &report.rows {
        assert_eq!(tally.trials, TRIALS, "{backend} {}", model.name());
        assert!(tally.samples_checked > 0, "{backend} {}: nothing was read", model.name());
    }
}

#[test]
fn npy_keeps_every_acknowledged_sample_through_kills_and_power_cuts() {
    campaign("npy");
}

#[test]
fn memmap_keeps_every_acknowledged_sample_through_kills_and_power_cuts() {
    campaign("memmap");
}

#[test]
fn arrow_keeps_every_acknowledged_sample_through_kills_and_power_cuts() {
    campaign("arrow");
}

#[test]
fn hdf5_keeps_every_acknowledged_sample_through_kills_and_power_cuts() {
    campaign("hdf5");
}

#[test]
fn example_journal_keeps_every_acknowledged_sample_through_kills_and_power_cuts() {
    campaign("example-journal");
}

#[test]
fn power_cut_keeps_exactly_what_was_synced() {
    let _alone = one_at_a_time();
    let dir = tempfile::tempdir().unwrap();
    let image = DurableImage::prepare(dir.path()).unwrap();
    let mut command = Command::new(EXE);
    command.arg("--faultfs-demo").arg(image.root());
    image.attach(&mut command).unwrap();
    let output = command.output().unwrap();
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    assert!(image.was_loaded(), "the interposer did not load");
    assert_eq!(image.unmodeled(), Vec::<String>::new());
    let before = files_under(image.root()).unwrap();
    assert!(before.iter().any(|(name, _)| name == "sub/inner"), "{before:?}");
    image.cut_power().unwrap();
    let after = files_under(image.root()).unwrap();
    let expected: Vec<(String, Vec<u8>)> =
        DEMO_EXPECTED.iter().map(|(n, b)| (n.to_string(), b.to_vec())).collect();
    assert_eq!(after, expected);
}

/// Arrow with `durable: false` fsyncs nothing on flush: a kill loses no acknowledged sample,
/// a power cut must.
#[test]
fn power_cut_catches_a_flush_that_does_not_fsync() {
    let _alone = one_at_a_time();
    let subject = CrashSubject::not_durable_arrow();
    let seed = 3;
    let workload = Workload::generate(&subject.factory.capabilities(), seed, true);
    let flushes = workload.indexes_of(|op| *op == Op::Flush);
    assert!(flushes.len() >= 2, "seed {seed} has {} flushes", flushes.len());
    // At the start of the second flush: the first is acknowledged.
    let plan = KillPlan { op: flushes[1], fraction: 0.0 };
    let scratch = tempfile::tempdir().unwrap();
    let setup = TrialSetup { exe: Path::new(EXE), scratch: scratch.path(), keep_failed: false };
    let killed = run_trial(&subject, FailureModel::Kill, seed, setup, Some(plan));
    assert_eq!(killed.failure, None);
    let cut = run_trial(&subject, FailureModel::PowerLoss, seed, setup, Some(plan));
    assert!(cut.acknowledged > 0);
    let failure = cut.failure.expect("a power cut must lose the unsynced acknowledged samples");
    assert!(failure.contains("power-loss trial seed 3"), "{failure}");
    assert!(failure.contains("acknowledged"), "{failure}");
}
