//! The resource-fault campaign: disk full (ENOSPC), EIO and EMFILE on writes, fsyncs,
//! ftruncates, fallocates, renames, mkdirs and creating opens, injected by an `LD_PRELOAD`
//! interposer ([`stowage_conformance::injector`]) into a child process that resumes a cache and
//! writes to it
//! ([`trial`]), under the power-loss model of the crash campaign (a failed fsync drops the
//! dirty pages it could not write, see [`stowage_conformance::durable_image`]), so that a backend
//! that
//! acknowledges data after a failed fsync is caught.
//!
//! Per backend and [`FaultKind`]: a dry run counts the matching calls the child makes
//! (the interposer only counts); the trials then fail the call at chosen points among them, from
//! the first (inside the open) to the last (inside finalize), so the fault lands in every kind
//! of file and step the backend has. A point the child never reaches is reported, never passed.

pub mod report;
pub mod trial;

use crate::backends::Subject;
use rand::{Rng, SeedableRng, rngs::StdRng};
use std::path::{Path, PathBuf};
use stowage_conformance::injector::{FaultKind, Injection, InjectionLog};
use trial::{Launch, Verdict};

/// How many trials.
#[derive(Debug, Clone)]
pub struct Config {
    /// Seed of the points chosen between the evenly spread ones.
    pub seed: u64,
    /// Fault points per backend and fault kind: every call when the child makes at most this
    /// many, else this many spread over them (the first and the last always among them).
    pub points: u64,
    /// Start each trial from a realistic cache ([`REALISTIC_SAMPLES`] samples, flushed in
    /// batches that make thousands of files on Arrow) instead of a small one; run the
    /// subjects of [`crate::backends::defaults`] for the defaults.
    pub realistic: bool,
}

/// Samples of the base cache of a realistic run.
pub const REALISTIC_SAMPLES: usize = 100_000;

/// Writes the realistic base cache of `subject` at `dir`: samples `0..REALISTIC_SAMPLES`.
///
/// Errors: the backend's, naming the step.
pub fn write_realistic_base(subject: &Subject, dir: &Path) -> Result<(), String> {
    let factory = &*subject.factory;
    // The child and the checks use this schema too (they know no backend name): the npy base
    // keeps its 2 fields, some 400 collection files, not the 2,000 of the other campaigns.
    let schema = crate::concurrency::schedule::schema(&factory.capabilities());
    let mut cache = factory.create(dir, &schema).map_err(|e| format!("create: {e}"))?;
    let every = crate::backends::realistic_flush_every(subject.name);
    let mut start = 0;
    while start < REALISTIC_SAMPLES {
        let end = (start + every).min(REALISTIC_SAMPLES);
        stowage_conformance::cases::put_generated(&mut *cache, &schema, start..end)?;
        cache.flush().map_err(|e| format!("flush: {e}"))?;
        start = end;
    }
    Ok(())
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

impl KindReport {
    /// The backend never makes the calls of this fault (the dry run counted none) and need not
    /// ([`stowage_conformance::injector::Op::always_called`]): reported as such, neither passed nor failed.
    pub fn not_called(&self) -> bool {
        self.error.is_none() && self.calls == 0 && !self.kind.op.always_called()
    }
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
            if kind.not_called() {
                continue;
            }
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
    let pristine = work.join("pristine");
    let base = match config.realistic {
        true => match write_realistic_base(subject, &pristine) {
            Ok(()) => Some((pristine.as_path(), REALISTIC_SAMPLES)),
            Err(e) => {
                let error =
                    Some(format!("{}: writing the realistic base cache: {e}", subject.name));
                let kinds = FaultKind::all()
                    .into_iter()
                    .map(|kind| KindReport {
                        kind,
                        calls: 0,
                        trials: Vec::new(),
                        error: error.clone(),
                    })
                    .collect();
                return BackendReport { backend: subject.name, kinds };
            }
        },
        false => None,
    };
    let kinds = FaultKind::all()
        .into_iter()
        .enumerate()
        .map(|(k, kind)| {
            let seed = config.seed ^ (kind.errno as u64) << 8 ^ kind.op as u64;
            let work = work.join(format!("kind-{k}"));
            let choose = |calls| points(calls, config.points, seed);
            run_kind_from(exe, library, subject, config.seed, &work, kind, base, &choose)
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
    run_kind_from(exe, library, subject, seed, work, kind, None, choose)
}

/// As [`run_kind_at`], each trial starting from a copy of `base` (a cache and its number of
/// samples) when given.
#[allow(clippy::too_many_arguments)]
pub fn run_kind_from(
    exe: &Path,
    library: &Path,
    subject: &Subject,
    seed: u64,
    work: &Path,
    kind: FaultKind,
    base: Option<(&Path, usize)>,
    choose: &dyn Fn(u64) -> Vec<u64>,
) -> KindReport {
    let config = Config { seed, points: 0, realistic: base.is_some() };
    let (base, base_samples) = (base.map(|(dir, _)| dir), base.map_or(0, |(_, n)| n));
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
        let launch = Launch { exe, library, work: &dir, base, base_samples };
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
            let launch = Launch { exe, library, work: &dir, base, base_samples };
            let label = format!("{label} at call {point}");
            let outcome = trial::run(&launch, subject, injection(Some(point)), &label);
            // A passed trial's copies of the cache are not needed (realistic ones are big).
            if let Ok((Verdict::Passed { .. }, _)) = &outcome {
                let _ = std::fs::remove_dir_all(&dir);
            }
            outcome
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

/// The failed-fsync demonstration of the power-loss model: run in a process under both
/// interposers with the first fsync below `dir` failing once, it leaves `dir/file` holding
/// `A` x 4096 then `B` x 4096, while a power cut leaves [`FSYNC_DEMO_DURABLE`]: the first fsync
/// failed and dropped both pages of `A`s, the retried fsync "succeeded" without them, and only
/// the rewritten second page reached the disk.
///
/// Errors: any file operation's but the failing fsync's (which must fail).
pub fn fsync_demo(dir: &Path) -> std::io::Result<()> {
    use std::io::{Seek, SeekFrom, Write};
    let mut file = std::fs::File::create(dir.join("file"))?;
    file.write_all(&[b'A'; 8192])?;
    if file.sync_all().is_ok() {
        return Err(std::io::Error::other("the first fsync should have failed"));
    }
    file.sync_all()?;
    file.seek(SeekFrom::Start(4096))?;
    file.write_all(&[b'B'; 4096])?;
    file.sync_all()?;
    std::fs::File::open(dir)?.sync_all()
}

/// What a power cut leaves of `file` after [`fsync_demo`]: the dropped first page reads as
/// zeros (it was never durable), the rewritten second page as `B`s.
pub const FSYNC_DEMO_DURABLE: [u8; 8192] = {
    let mut bytes = [0u8; 8192];
    let mut i = 4096;
    while i < 8192 {
        bytes[i] = b'B';
        i += 1;
    }
    bytes
};
