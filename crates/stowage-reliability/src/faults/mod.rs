//! The resource-fault campaign: disk full (ENOSPC) and EIO, on writes and on fsyncs, injected by
//! an `LD_PRELOAD` interposer ([`injector`]) into a child process that resumes a cache and writes
//! to it ([`trial`]).
//!
//! Per backend and [`injector::FaultKind`]: a dry run counts the matching calls the child makes
//! (the interposer only counts); the trials then fail the call at chosen points among them, from
//! the first (inside the open) to the last (inside finalize), so the fault lands in every kind
//! of file and step the backend has. A point the child never reaches is reported, never passed.

pub mod injector;
pub mod report;
pub mod trial;

use crate::backends::Subject;
use injector::{FaultKind, Injection, InjectionLog};
use rand::{Rng, SeedableRng, rngs::StdRng};
use std::path::{Path, PathBuf};
use trial::{Launch, Verdict};

/// How many trials.
#[derive(Debug, Clone)]
pub struct Config {
    /// Seed of the points chosen between the evenly spread ones.
    pub seed: u64,
    /// Fault points per backend and fault kind: every call when the child makes at most this
    /// many, else this many spread over them (the first and the last always among them).
    pub points: u64,
}

/// The trials of one backend and fault kind.
#[derive(Debug, Clone)]
pub struct KindReport {
    /// The fault.
    pub kind: FaultKind,
    /// Matching calls of the dry run.
    pub calls: u64,
    /// Each trial: its point and verdict.
    pub trials: Vec<(u64, Verdict)>,
    /// What stopped the kind's trials (the dry run failed, a child could not start).
    pub error: Option<String>,
}

/// One backend's results.
#[derive(Debug, Clone)]
pub struct BackendReport {
    /// The backend.
    pub backend: &'static str,
    /// Per fault kind.
    pub kinds: Vec<KindReport>,
}

impl BackendReport {
    /// Every failure (failed trials, unreached points, a kind without trials, errors), one
    /// message each.
    pub fn failures(&self) -> Vec<String> {
        let mut out = Vec::new();
        for kind in &self.kinds {
            out.extend(kind.error.clone());
            if kind.error.is_none() && kind.trials.is_empty() {
                out.push(format!(
                    "{} {}: no trial ran ({} matching calls in the dry run)",
                    self.backend,
                    kind.kind.label(),
                    kind.calls
                ));
            }
            for (point, verdict) in &kind.trials {
                match verdict {
                    Verdict::Failed(why) => out.push(why.clone()),
                    Verdict::NotReached => out.push(format!(
                        "{} {}: the fault at call {point} never fired ({} calls in the dry run)",
                        self.backend,
                        kind.kind.label(),
                        kind.calls
                    )),
                    Verdict::Passed { .. } => {}
                }
            }
        }
        out
    }
}

/// The points of `calls` matching calls to fail at.
///
/// ```
/// use stowage_reliability::faults::points;
/// assert_eq!(points(4, 10, 1), [0, 1, 2, 3]);
/// let chosen = points(100, 5, 1);
/// assert_eq!((chosen.len(), chosen[0], chosen[4]), (5, 0, 99));
/// ```
pub fn points(calls: u64, wanted: u64, seed: u64) -> Vec<u64> {
    // At least one point: a kind without trials would read as passed.
    let wanted = wanted.max(1);
    if calls <= wanted {
        return (0..calls).collect();
    }
    let mut rng = StdRng::seed_from_u64(seed);
    let step = calls as f64 / (wanted - 1).max(1) as f64;
    let mut chosen: Vec<u64> = (0..wanted)
        .map(|j| {
            if j == 0 || j + 1 == wanted {
                return if j == 0 { 0 } else { calls - 1 };
            }
            let base = (j as f64 * step) as u64;
            (base + rng.random_range(0..step.max(1.0) as u64)).min(calls - 1)
        })
        .collect();
    chosen.dedup();
    chosen
}

/// Runs every fault kind on `subject` in the empty directory `work`.
pub fn run_backend(
    exe: &Path,
    library: &Path,
    subject: &Subject,
    config: &Config,
    work: &Path,
) -> BackendReport {
    let kinds = FaultKind::all()
        .into_iter()
        .enumerate()
        .map(|(k, kind)| {
            run_kind(exe, library, subject, config, &work.join(format!("kind-{k}")), kind)
        })
        .collect();
    BackendReport { backend: subject.name, kinds }
}

/// Runs the dry run and the trials of one fault `kind` on `subject` in the directory `work`, at
/// [`points`] of the calls the dry run counted.
pub fn run_kind(
    exe: &Path,
    library: &Path,
    subject: &Subject,
    config: &Config,
    work: &Path,
    kind: FaultKind,
) -> KindReport {
    let seed = config.seed ^ (kind.errno as u64) << 8 ^ kind.op as u64;
    run_kind_at(exe, library, subject, config.seed, work, kind, &|calls| {
        points(calls, config.points, seed)
    })
}

/// As [`run_kind`], at the points `choose` picks given the number of calls the dry run counted.
pub fn run_kind_at(
    exe: &Path,
    library: &Path,
    subject: &Subject,
    seed: u64,
    work: &Path,
    kind: FaultKind,
    choose: &dyn Fn(u64) -> Vec<u64>,
) -> KindReport {
    let config = Config { seed, points: 0 };
    let mut report = KindReport { kind, calls: 0, trials: Vec::new(), error: None };
    let label = format!("{} {} (seed {})", subject.name, kind.label(), config.seed);
    let injection = |after| Injection {
        kind,
        after,
        dir: PathBuf::new(),
        stop: PathBuf::new(),
        log: PathBuf::new(),
    };
    let trial_dir = |name: &str| -> Result<PathBuf, String> {
        let dir = work.join(name);
        std::fs::create_dir_all(&dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
        Ok(dir)
    };
    let dry = trial_dir("dry-run").and_then(|dir| {
        let launch = Launch { exe, library, work: &dir };
        trial::run(&launch, subject, injection(None), &format!("{label} dry run"))
    });
    match dry {
        Ok((Verdict::NotReached, InjectionLog { calls: Some(calls), .. })) => report.calls = calls,
        Ok((verdict, log)) => {
            report.error = Some(format!(
                "{label}: the dry run (no fault) should count calls and fire nothing; got {verdict:?}, log {log:?}"
            ));
            return report;
        }
        Err(e) => {
            report.error = Some(e);
            return report;
        }
    }
    for point in choose(report.calls) {
        let outcome = trial_dir(&format!("at-{point}")).and_then(|dir| {
            let launch = Launch { exe, library, work: &dir };
            trial::run(
                &launch,
                subject,
                injection(Some(point)),
                &format!("{label} at call {point}"),
            )
        });
        match outcome {
            Ok((verdict, _)) => report.trials.push((point, verdict)),
            Err(e) => {
                report.error = Some(e);
                break;
            }
        }
    }
    report
}
