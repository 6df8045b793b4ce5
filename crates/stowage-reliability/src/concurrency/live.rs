//! The live trial: one writer process, [`READER_THREADS`] reader threads in the campaign process
//! and [`READER_PROCESSES`] reader processes, for the configured time, on one cache.

use super::child::{ChildArgs, READER_SLACK, Role};
use super::process::Child;
use super::progress::ProgressWriter;
use super::reader::{ReaderSetup, ReaderStats, read_until_done};
use super::writer::WriterSummary;
use crate::backends::Subject;
use std::path::Path;
use std::time::{Duration, Instant};

/// Reader threads sharing the campaign process (each opens its own handles).
pub const READER_THREADS: usize = 8;
/// Reader processes.
pub const READER_PROCESSES: u32 = 2;

/// What the live trial measured.
#[derive(Debug, Clone, Default)]
pub struct LiveReport {
    /// Wall time from the writer's `created` to the last reader's final check.
    pub elapsed: Duration,
    /// The writer's own count.
    pub writer: WriterSummary,
    /// The reader threads, summed.
    pub threads: ReaderStats,
    /// The reader processes, summed.
    pub processes: ReaderStats,
}

impl LiveReport {
    /// Every reader, summed.
    pub fn readers(&self) -> ReaderStats {
        let mut all = self.threads.clone();
        all.merge(&self.processes);
        all
    }
}

/// Runs the live trial of `subject` under `work` for `seconds`, the children being `exe`.
///
/// Errors: a child could not be started, or the writer failed (its message names the put);
/// reader failures are counted in the report, not errors.
pub fn run(
    exe: &Path,
    subject: &Subject,
    work: &Path,
    seed: u64,
    seconds: f64,
    preload: u64,
) -> Result<LiveReport, String> {
    let label = format!("{} live trial (seed {seed})", subject.name);
    let dir = work.join("live");
    let progress = work.join("live.progress");
    let args = |role: Role, id: u32| ChildArgs {
        role,
        backend: subject.name.into(),
        dir: dir.clone(),
        progress: progress.clone(),
        seed,
        seconds,
        id,
        preload,
    };
    let stderr = work.join("live-writer.stderr");
    let mut writer = Child::spawn(
        &format!("{label}: writer"),
        exe,
        &args(Role::Writer, 0).to_args(),
        &[],
        &stderr,
    )?;
    writer.expect("created", Duration::from_secs(120))?;
    let started = Instant::now();
    let mut processes = Vec::new();
    for id in 0..READER_PROCESSES {
        let stderr = work.join(format!("live-reader-{id}.stderr"));
        let what = format!("{label}: reader process {id}");
        processes.push(Child::spawn(&what, exe, &args(Role::Reader, id).to_args(), &[], &stderr)?);
    }
    let deadline = started
        + Duration::from_secs_f64(seconds)
        + READER_SLACK
        + super::child::preload_slack(preload);
    let (threads, summary) = std::thread::scope(|scope| {
        // Waits for the writer; if it fails, tells the readers to stop instead of waiting for a
        // `done` that will never come.
        let watcher = scope.spawn(|| {
            let wait = deadline.saturating_duration_since(Instant::now()) + Duration::from_secs(10);
            let summary = writer.expect("summary", wait);
            if summary.is_err() {
                let _ = ProgressWriter::append_to(&progress).and_then(|mut p| p.abort());
            }
            summary
        });
        let handles: Vec<_> = (0..READER_THREADS)
            .map(|t| {
                let setup = ReaderSetup {
                    factory: &*subject.factory,
                    dir: &dir,
                    progress: &progress,
                    seed,
                    name: format!("thread {t}"),
                    deadline,
                };
                scope.spawn(move || read_until_done(&setup))
            })
            .collect();
        let mut sum = ReaderStats::default();
        for handle in handles {
            match handle.join() {
                Ok(stats) => sum.merge(&stats),
                Err(_) => sum.merge(&ReaderStats {
                    failures: 1,
                    messages: vec![format!("{label}: a reader thread panicked")],
                    ..ReaderStats::default()
                }),
            }
        }
        let summary = watcher.join().unwrap_or_else(|_| Err(format!("{label}: watcher panicked")));
        (sum, summary)
    });
    let summary = summary?;
    let status = writer.wait(Duration::from_secs(60))?;
    if !status.success() {
        return Err(format!("{label}: the writer exited with {status}; {}", writer.stderr_tail()));
    }
    let mut report = LiveReport {
        elapsed: started.elapsed(),
        writer: WriterSummary::parse(&summary)?,
        threads,
        processes: ReaderStats::default(),
    };
    for process in &mut processes {
        let wait = deadline.saturating_duration_since(Instant::now()) + Duration::from_secs(10);
        let stats = ReaderStats::from_json(&process.expect("summary", wait)?)?;
        report.processes.merge(&stats);
        process.wait(Duration::from_secs(60))?;
    }
    report.elapsed = started.elapsed();
    Ok(report)
}
