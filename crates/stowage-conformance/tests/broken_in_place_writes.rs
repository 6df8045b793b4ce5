//! Proves that the crash case catches a backend that rewrites its files in place
//! (`Defect::InPlaceWrites`), and passes the correct toy.
//!
//! The crash case kills a writer child process, so it cannot run through `run_all`. Without the
//! `backend_conformance!` macro, each test here does the macro's work by hand: in the child (the
//! crash case re-runs this binary with `--exact <test>` and `CHILD_DIR_ENV` set) it becomes the
//! writer; in the parent it runs the case with a `ChildLauncher` naming itself.

mod toy;

use std::path::Path;
use stowage_conformance::{CASES, ChildLauncher, Outcome, crash, run_case};
use toy::{Defect, ToyFactory};

const CRASH_CASE: &str = "crash_loses_no_flushed_sample";

/// Runs the crash case on `factory`; `test_name` must be the calling test's name.
fn run_crash_case(factory: &ToyFactory, test_name: &str) -> Outcome {
    if let Some(dir) = std::env::var_os(crash::CHILD_DIR_ENV) {
        crash::child_main(factory, Path::new(&dir));
    }
    let case = *CASES.iter().find(|case| case.name == CRASH_CASE).expect("the crash case exists");
    let exe = std::env::current_exe().expect("the test executable");
    run_case(factory, case, Some(ChildLauncher { exe, test_name: test_name.into() }))
}

#[test]
fn crash_case_catches_in_place_writes() {
    let outcome = run_crash_case(
        &ToyFactory::with_defect(Defect::InPlaceWrites),
        "crash_case_catches_in_place_writes",
    );
    match outcome {
        Outcome::Failed(failure) => {
            eprintln!("{CRASH_CASE} caught InPlaceWrites: {failure}");
            assert_eq!(failure.clause, Some("flush.crash-keeps-flushed"), "{failure}");
        }
        other => panic!("{CRASH_CASE} did not catch InPlaceWrites: {other:?}"),
    }
}

#[test]
fn crash_case_passes_the_correct_toy() {
    let outcome = run_crash_case(&ToyFactory::correct(), "crash_case_passes_the_correct_toy");
    assert_eq!(outcome, Outcome::Passed);
}
