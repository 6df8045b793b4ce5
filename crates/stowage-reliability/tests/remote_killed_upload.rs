//! The quick form of "a kill in the middle of an upload" (issue 18): a writer process stalls in
//! its flush's `.rows`, `.keys`, commit or version put and is killed with `kill -9`; the next
//! writer (same rank) resumes, nothing acknowledged is lost and no partial part is visible (see
//! `stowage_reliability::remote::killed_upload`).
//!
//! One test in a binary of its own: it forks.

use stowage_reliability::remote::killed_upload::{STALLS, run};

#[test]
fn a_writer_killed_mid_upload_is_resumed_by_the_next() {
    let work = tempfile::tempdir().unwrap();
    let mut failures = Vec::new();
    for stall in STALLS {
        let outcome = run(work.path(), *stall);
        eprintln!("killed mid-upload: {outcome:?}");
        if !outcome.problems.is_empty() {
            failures.push(format!("{}: {}", outcome.stall, outcome.problems.join("; ")));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
