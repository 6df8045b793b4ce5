//! The quick form of the resource-fault campaign: on every backend, each fault (ENOSPC and EIO on
//! writes and on fsyncs) at the first, a middle and the last matching call; every call point for
//! the faults that found bugs (hdf5's swallowed segment write, arrow's and the example's failed
//! finalize, arrow's failed index merge); and a check that an unreached fault point is reported, never passed. The long form
//! is the `faults` binary.

use std::path::Path;
use stowage_reliability::backends::{Subject, all};
use stowage_reliability::faults::injector::{EIO, FaultKind, Op, library};
use stowage_reliability::faults::trial::Verdict;
use stowage_reliability::faults::{BackendReport, Config, KindReport, run_backend, run_kind_at};

const EXE: &str = env!("CARGO_BIN_EXE_faults");

fn interposer() -> std::path::PathBuf {
    // Linux CI builds it; a missing interposer is a failure, not a skipped campaign.
    library().expect("build.rs did not build faultinject/faultinject.c")
}

fn subject(name: &str) -> Subject {
    all().into_iter().find(|s| s.name == name).unwrap()
}

fn assert_all_passed(report: &BackendReport) {
    assert!(report.failures().is_empty(), "{:#?}", report.failures());
    for kind in &report.kinds {
        let passed =
            kind.trials.iter().filter(|(_, v)| matches!(v, Verdict::Passed { .. })).count();
        assert!(passed > 0 && kind.calls > 0, "{} {}: {kind:?}", report.backend, kind.kind.label());
    }
}

#[test]
fn every_backend_reports_each_fault_and_keeps_what_it_acknowledged() {
    let library = interposer();
    let config = Config { seed: 1, points: 3 };
    for subject in all() {
        let work = tempfile::tempdir().unwrap();
        assert_all_passed(&run_backend(Path::new(EXE), &library, &subject, &config, work.path()));
    }
}

#[test]
fn every_call_point_of_the_faults_that_found_bugs() {
    let library = interposer();
    let write_eio = FaultKind { op: Op::Write, errno: EIO, sticky: false, short: false };
    let work = tempfile::tempdir().unwrap();
    // hdf5: a write of the first segment that failed while a dataset was closed by its drop was
    // lost (calls 0..22: the segment's writes, then its commit record).
    let hdf5 = subject("hdf5");
    let first_flush = |calls: u64| (0..calls.min(22)).collect();
    let kind = run_kind_at(
        Path::new(EXE),
        &library,
        &hdf5,
        1,
        &work.path().join("hdf5"),
        write_eio,
        &first_flush,
    );
    assert_all_passed(&BackendReport { backend: hdf5.name, kinds: vec![kind] });
    // arrow and the example: a failed finalize (its index merge, its marker) left the handle
    // writable; arrow's also stayed writable after a background index merge failed its fsync.
    let every = |calls: u64| (0..calls).collect();
    let fsync_eio = FaultKind { op: Op::Fsync, errno: EIO, sticky: false, short: false };
    for (name, kind) in [("arrow", write_eio), ("arrow", fsync_eio), ("example-journal", write_eio)]
    {
        let s = subject(name);
        let dir = work.path().join(format!("{name}-{}", kind.op.name()));
        let kind = run_kind_at(Path::new(EXE), &library, &s, 1, &dir, kind, &every);
        assert_all_passed(&BackendReport { backend: s.name, kinds: vec![kind] });
    }
}

#[test]
fn an_unreached_fault_point_or_a_kind_without_trials_is_a_failure_not_a_pass() {
    let kind = FaultKind::all()[0];
    let report = BackendReport {
        backend: "npy",
        kinds: vec![KindReport {
            kind,
            calls: 5,
            trials: vec![(9, Verdict::NotReached)],
            error: None,
        }],
    };
    let failures = report.failures();
    assert_eq!(failures.len(), 1);
    assert!(failures[0].contains("never fired"), "{failures:?}");
    let empty = BackendReport {
        backend: "npy",
        kinds: vec![KindReport { kind, calls: 0, trials: Vec::new(), error: None }],
    };
    assert!(empty.failures()[0].contains("no trial ran"), "{:?}", empty.failures());
}
