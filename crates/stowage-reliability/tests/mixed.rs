//! The mixed-sequence crash campaign's quick form: per format pair, one trial with a kill aimed
//! inside each kind of step the pair's stowage sessions have (open, put, flush, adopt,
//! finalize), the two orders of the first writes alternating; and negative controls that the
//! checks catch a damaged file of the tool's and a lost acknowledged sample. The long form is
//! `crash --mixed`.
//!
//! The tools run as their peers (`xtask/py/`): `python3` with numpy, pyarrow and tables, and for
//! hangar the Python named by `STOWAGE_HANGAR_PYTHON`. A missing one prints `SKIPPED` on the
//! real stderr, or fails with `STOWAGE_REQUIRE_PYTHON=1`.

use std::path::Path;
use stowage_reliability::mixed::pair::Pair;
use stowage_reliability::mixed::peer::ToolPeer;
use stowage_reliability::mixed::report::STEP_KINDS;
use stowage_reliability::mixed::session::Session;
use stowage_reliability::mixed::trial::tool_writes_first;
use stowage_reliability::mixed::{Sabotage, TrialReport, TrialSetup, run_trial};

const EXE: &str = env!("CARGO_BIN_EXE_crash");

/// The first seed searched for each aimed trial.
const BASE_SEED: u64 = 14_000;

/// Held by each test. A child forked by one test's thread inherits, until it execs, the
/// descriptors another test's thread has open, writer lock files included; and libhdf5 opens
/// files without close-on-exec, so a Python peer started meanwhile would keep an aenet file
/// locked for its whole life. One test at a time rules both out.
static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn setup(scratch: &Path) -> TrialSetup<'_> {
    TrialSetup { exe: Path::new(EXE), scratch, keep_failed: false }
}

/// One trial per step kind `pair`'s sessions have, the kill aimed 30% into the first such step
/// of a seed that has one, alternating which tool writes first where both can.
/// Fails with every failing trial's message; checks that the kinds are `kinds`.
fn aimed_trials(pair: Pair, kinds: &[&str]) {
    let _alone = one_at_a_time();
    let test = format!("mixed crash trials of {}", pair.label());
    let Some(tool) = ToolPeer::for_test(pair, &test) else { return };
    let scratch = tempfile::tempdir().unwrap();
    let mut trials: Vec<(&str, TrialReport)> = Vec::new();
    for kind in STEP_KINDS {
        let tool_first = pair.tool_can_start() && trials.len().is_multiple_of(2);
        let found = (BASE_SEED..BASE_SEED + 500).find_map(|seed| {
            let plan = Session::generate(pair, seed).aimed_at(kind, 0.3)?;
            (tool_writes_first(pair, seed) == tool_first).then_some((seed, plan))
        });
        let Some((seed, plan)) = found else { continue };
        let trial = run_trial(pair, &tool, seed, setup(scratch.path()), Some(plan), Sabotage::None);
        println!(
            "{} seed {seed}: aimed at {kind}, killed {:?}; acknowledged {} by stowage, {} by {}; \
             {} compared; recovery cleared {:?}",
            pair.label(),
            trial.inside,
            trial.stowage_acknowledged,
            trial.tool_acknowledged,
            pair.tool(),
            trial.compared,
            trial.cleared_by_recovery
        );
        trials.push((kind, trial));
    }
    let failures: Vec<&String> = trials.iter().filter_map(|(_, t)| t.failure.as_ref()).collect();
    assert!(failures.is_empty(), "{failures:#?}");
    let ran: Vec<&str> = trials.iter().map(|(kind, _)| *kind).collect();
    assert_eq!(ran, kinds, "{}: the step kinds of its sessions", pair.label());
    for (kind, trial) in &trials {
        assert!(trial.tool_acknowledged > 0 && trial.compared > 0, "{kind}: {trial:?}");
    }
    if pair.tool_can_start() {
        assert!(
            trials.iter().any(|(_, t)| t.tool_first),
            "{}: the tool never wrote first",
            pair.label()
        );
    }
    assert!(
        trials.iter().any(|(_, t)| !t.tool_first),
        "{}: stowage never wrote first",
        pair.label()
    );
}

#[test]
fn npy_and_hangar_lose_nothing_either_acknowledged_through_kills() {
    aimed_trials(Pair::Npy, &["open", "put", "flush", "finalize"]);
}

#[test]
fn memmap_and_dnanet_lose_nothing_either_acknowledged_through_kills() {
    aimed_trials(Pair::Memmap, &["open", "put", "flush", "adopt"]);
}

#[test]
fn arrow_and_torchcachex_lose_nothing_either_acknowledged_through_kills() {
    aimed_trials(Pair::Arrow, &["open", "put", "flush", "adopt", "finalize"]);
}

#[test]
fn hdf5_and_aenet_lose_nothing_either_acknowledged_through_kills() {
    aimed_trials(Pair::Hdf5, &["open", "put", "flush", "adopt"]);
}

/// Runs a trial of `pair` with `sabotage` and returns its failure, which it must have.
fn sabotaged(pair: Pair, sabotage: Sabotage) -> Option<String> {
    let _alone = one_at_a_time();
    let tool = ToolPeer::for_test(pair, &format!("sabotaged {} trial", pair.label()))?;
    let scratch = tempfile::tempdir().unwrap();
    let seed = BASE_SEED;
    let trial = run_trial(pair, &tool, seed, setup(scratch.path()), None, sabotage);
    let failure = trial.failure.expect("the sabotaged trial must fail");
    assert!(failure.contains(&format!("{} mixed trial seed {seed}", pair.label())), "{failure}");
    Some(failure)
}

/// A "stowage step" deletes torchcachex's first segment: the trial names the file.
#[test]
fn a_deleted_segment_of_torchcachex_fails_the_trial() {
    let Some(failure) = sabotaged(Pair::Arrow, Sabotage::DamageToolFile) else { return };
    assert!(failure.contains(".arrow (the tool's file) is gone"), "{failure}");
}

/// A "stowage step" overwrites the first byte of one of DNANet's row files (which DNANet then
/// appends to again): the trial names the file and where it changed.
#[test]
fn an_overwritten_row_of_dnanet_fails_the_trial() {
    let Some(failure) = sabotaged(Pair::Memmap, Sabotage::DamageToolFile) else { return };
    assert!(failure.contains(".bin (the tool's file) (its first"), "{failure}");
    assert!(failure.contains("first difference at byte 0"), "{failure}");
}

/// The checks are fed an acknowledged sample nobody wrote: both the key and who acknowledged
/// it are named.
#[test]
fn a_lost_acknowledged_sample_fails_the_trial() {
    let Some(failure) = sabotaged(Pair::Hdf5, Sabotage::LoseAcknowledged) else { return };
    assert!(failure.contains("stowage does not find \"290\""), "{failure}");
    assert!(failure.contains("acknowledged it in the killed stowage session"), "{failure}");
}
