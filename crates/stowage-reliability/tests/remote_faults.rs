//! The quick form of the remote fault campaign (issue 18): every fault kind aimed at every kind
//! of object a writer's flush, finalize, open and get touch, on an in-memory store: no
//! acknowledged sample lost, no torn version, and the writer resumes or its error names the
//! object (see `stowage_reliability::remote::faults`).

use stowage_reliability::remote::faults::{self, Mode, Outcome, memory_store, run_all, totals};

#[test]
fn every_fault_on_every_object_loses_no_acknowledged_sample() {
    let work = tempfile::tempdir().unwrap();
    let scenarios = faults::all();
    let outcomes = run_all(&scenarios, 0, work.path(), &memory_store, &mut |_| {});
    let failed: Vec<&Outcome> = outcomes.iter().filter(|o| !o.problems.is_empty()).collect();
    let totals = totals(&outcomes);
    eprintln!("remote faults: {totals:?}");
    for o in &outcomes {
        eprintln!(
            "  {:<40} fired {:>3} acked {} errors {} resumes {} reader errors {}{}",
            o.name,
            o.fired,
            o.acked_flushes,
            o.writer_errors.len(),
            o.resumes,
            o.reader_errors,
            o.writer_errors.first().map(|e| format!(" | {e}")).unwrap_or_default()
        );
    }
    assert!(
        failed.is_empty(),
        "{} of {} scenarios failed:\n{}",
        failed.len(),
        outcomes.len(),
        failed
            .iter()
            .map(|o| format!("{}:\n    {}", o.name, o.problems.join("\n    ")))
            .collect::<Vec<_>>()
            .join("\n")
    );
    // Every fault aimed at the first matching request, or at every one, strikes: each object
    // kind is touched by each request kind the campaign aims at it.
    let unreached: Vec<&str> = outcomes
        .iter()
        .zip(&scenarios)
        .filter(|(o, s)| o.fired == 0 && s.mode != Mode::Later)
        .map(|(o, _)| o.name.as_str())
        .collect();
    assert!(unreached.is_empty(), "faults that never struck: {unreached:?}");
    assert!(totals.writer_errors > 0 && totals.resumes > 0, "{totals:?}");
}
