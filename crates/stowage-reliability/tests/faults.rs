//! The quick form of the resource-fault campaign: on every backend, each fault (ENOSPC, EIO and
//! EMFILE on writes, fsyncs, ftruncates, fallocates, renames, mkdirs and creating opens) at the
//! first, a middle and the last matching call; every call point for the faults that found bugs
//! (hdf5's swallowed segment write, arrow's and the example's failed finalize, arrow's failed
//! index merge); the power-loss model's failed fsync (it drops the pages it could not write); and
//! a check that an unreached fault point is reported, never passed. The long form is the `faults`
//! binary.

use std::path::Path;
use stowage_conformance::durable_image::{DurableImage, files_under};
use stowage_conformance::injector::{EIO, FaultKind, Injection, InjectionLog, Op, library};
use stowage_reliability::backends::{Subject, all};
use stowage_reliability::faults::trial::Verdict;
use stowage_reliability::faults::{
    BackendReport, Config, FSYNC_DEMO_DURABLE, KindReport, run_backend, run_kind_at,
};

const EXE: &str = env!("CARGO_BIN_EXE_faults");

fn interposer() -> std::path::PathBuf {
    // Linux CI builds it; a missing interposer is a failure, not a skipped campaign.
    library().expect("stowage-conformance's build.rs did not build faultinject/faultinject.c")
}

fn subject(name: &str) -> Subject {
    all().into_iter().find(|s| s.name == name).unwrap()
}

fn assert_all_passed(report: &BackendReport) {
    assert!(report.failures().is_empty(), "{:#?}", report.failures());
    for kind in &report.kinds {
        // Only a call a backend need not make may be missing, and then no trial passed.
        if kind.not_called() {
            assert!(kind.trials.is_empty() && !kind.kind.op.always_called(), "{kind:?}");
            continue;
        }
        let passed =
            kind.trials.iter().filter(|(_, v)| matches!(v, Verdict::Passed { .. })).count();
        assert!(passed > 0 && kind.calls > 0, "{} {}: {kind:?}", report.backend, kind.kind.label());
    }
}

#[test]
fn every_backend_reports_each_fault_and_keeps_what_it_acknowledged() {
    let library = interposer();
    let config = Config { seed: 1, points: 3, realistic: false };
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

/// Every backend writes files with creating opens and renames them into place, and some of the
/// new fault kinds must reach each backend: a campaign whose new ops all read "not called"
/// would test nothing.
#[test]
fn the_new_fault_kinds_reach_the_backends() {
    let library = interposer();
    let work = tempfile::tempdir().unwrap();
    let mut reached = Vec::new();
    for subject in all() {
        for kind in FaultKind::all().into_iter().filter(|k| matches!(k.op, Op::Open | Op::Rename)) {
            let dir = work.path().join(format!("{}-{}", subject.name, kind.op.name()));
            let report =
                run_kind_at(Path::new(EXE), &library, &subject, 1, &dir, kind, &|_| Vec::new());
            assert_eq!(report.error, None, "{} {}", subject.name, kind.label());
            if report.calls > 0 {
                reached.push(format!("{} {}", subject.name, kind.op.name()));
            }
        }
    }
    for name in ["npy", "memmap", "arrow", "hdf5", "example-journal"] {
        assert!(reached.iter().any(|r| r.starts_with(&format!("{name} "))), "{reached:?}");
    }
}

/// The power-loss model of a failed fsync: the pages it could not write are lost even after a
/// retried fsync "succeeds", and a page written again reaches the disk.
#[test]
fn a_failed_fsync_drops_the_pages_it_could_not_write() {
    let library = interposer();
    let work = tempfile::tempdir().unwrap();
    let work = work.path().canonicalize().unwrap();
    let image = DurableImage::prepare(&work.join("image")).unwrap();
    let injection = Injection {
        kind: FaultKind { op: Op::Fsync, errno: EIO, sticky: false, short: false },
        after: Some(0),
        dir: image.root().to_path_buf(),
        stop: work.join("stop"),
        log: work.join("faultinject.log"),
    };
    let mut env = injection.env(&library);
    env.retain(|(name, _)| name != "LD_PRELOAD");
    env.extend(image.env(&library.display().to_string()).unwrap());
    let output = std::process::Command::new(EXE)
        .arg("--fsync-demo")
        .arg(image.root())
        .envs(env)
        .output()
        .unwrap();
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let log = InjectionLog::read(&injection.log);
    assert_eq!(log.fired.len(), 1, "{log:?}");
    assert!(image.was_loaded() && image.unmodeled().is_empty(), "{:?}", image.unmodeled());
    let dropped = image.dropped();
    assert_eq!(dropped.len(), 1, "{dropped:?}");
    assert_eq!(dropped[0].split(' ').nth(2), Some("2"), "{dropped:?}");
    let mut live = vec![b'A'; 4096];
    live.extend([b'B'; 4096]);
    assert_eq!(files_under(image.root()).unwrap(), [("file".to_string(), live)]);
    image.cut_power().unwrap();
    let after = files_under(image.root()).unwrap();
    assert_eq!(after, [("file".to_string(), FSYNC_DEMO_DURABLE.to_vec())]);
}
