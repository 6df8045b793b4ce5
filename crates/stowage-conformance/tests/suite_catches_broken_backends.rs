//! Proves that the conformance suite catches broken backends: for each [`Defect`] of the toy
//! backend, the case aimed at it passes on the correct toy and fails on the broken one, for the
//! expected reason. Also checks that `run_all` reports the crash case as SKIPPED, not passed.
//!
//! The crash case needs a child process; its defect is proven in `broken_in_place_writes.rs`.

mod toy;

use stowage_conformance::{CASES, Case, Outcome, run_all, run_case};
use toy::{Defect, ToyFactory};

fn case(name: &str) -> Case {
    *CASES.iter().find(|case| case.name == name).unwrap_or_else(|| panic!("no case named {name}"))
}

/// Runs case `name` on the correct toy (must pass) and on the toy with `defect` (must fail with a
/// message containing `reason`, so that it fails for the right reason).
fn assert_caught(defect: Defect, name: &str, reason: &str) {
    let correct = run_case(&ToyFactory::correct(), case(name), None);
    assert_eq!(correct, Outcome::Passed, "{name} on the correct toy");
    match run_case(&ToyFactory::with_defect(defect), case(name), None) {
        Outcome::Failed(message) => {
            eprintln!("{name} caught {defect:?}: {message}");
            assert!(message.contains(reason), "{name} failed for another reason: {message}");
        }
        other => panic!("{name} did not catch {defect:?}: {other:?}"),
    }
}

#[test]
fn duplicate_key_case_catches_stale_reads() {
    assert_caught(
        Defect::StaleReads,
        "duplicate_key_follows_overwrite_capability",
        "(before flush)",
    );
}

#[test]
fn second_writer_case_catches_an_ignored_lock() {
    assert_caught(Defect::IgnoresLock, "second_writer_is_refused", "expected Error::Locked");
}

#[test]
fn flipped_byte_case_catches_an_unchecked_checksum() {
    assert_caught(
        Defect::NoChecksumCheck,
        "flipped_byte_is_detected",
        "get returned wrong data instead of an error",
    );
}

#[test]
fn nullable_case_catches_an_undeclared_capability() {
    assert_caught(
        Defect::UndeclaredCapability,
        "nullable_fields_follow_capability",
        "capability not declared",
    );
}

#[test]
fn run_all_passes_the_correct_toy_and_skips_the_crash_case() {
    let report = run_all(&ToyFactory::correct());
    eprintln!("{report}");
    assert!(report.is_success(), "{report}");
    assert_eq!(report.results.len(), CASES.len());
    assert!(
        matches!(report.outcome("crash_loses_no_flushed_sample"), Some(Outcome::Skipped(_))),
        "run_all has no child process, so the crash case must be SKIPPED, not passed:\n{report}"
    );
    // The toy declares every capability except zero-copy gets: nothing else may be skipped.
    let skipped: Vec<&str> = report
        .results
        .iter()
        .filter(|(_, outcome)| matches!(outcome, Outcome::Skipped(_)))
        .map(|(name, _)| *name)
        .collect();
    assert_eq!(skipped, ["zero_copy_get_follows_capability", "crash_loses_no_flushed_sample"]);
}
