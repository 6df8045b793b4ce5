//! The failed-flush case (`flush.failure-poisons`): a writer child process whose syncs are made
//! to fail by a [`FaultInjector`] must report the failed flush and then refuse every write with
//! `Error::Poisoned`, even once the fault is gone.
//!
//! A failed `fsync` cannot be provoked from inside a test without help (no full disk, no failing
//! device without root), so the case runs its writer under an injector:
//! [`crate::injector::Faultinject`], the `LD_PRELOAD` interposer this crate builds, unless the
//! harness gives its own (`backend_conformance!(factory, faults = injector)`). Where the injector
//! cannot run (the interposer is Linux-only) or never makes a flush fail, the case reports
//! SKIPPED, never a pass.

use crate::check::ok;
use crate::child::{Child, Mode, die, say};
use crate::generate::{basic_schema, compare_sample, key, sample_for};
use crate::{CaseContext, CaseResult, Failure, Outcome};
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use stowage_core::{BackendFactory, Error, OpenMode};

/// Makes the file-system calls of a writer child process fail.
///
/// The suite runs the writer in a copy of the test executable and adds the environment this
/// returns; an `LD_PRELOAD` interposer of libc's `fsync`/`fdatasync` implements it by returning
/// its variables ([`crate::injector::Faultinject`], the built-in one, does exactly that). A
/// backend whose writes bypass libc brings its own: a test hook the variables arm, say.
pub trait FaultInjector: Send + Sync {
    /// What it is, for SKIPPED and failure messages: `faultinject (LD_PRELOAD)`.
    fn name(&self) -> &str;

    /// Why it cannot make a call fail here (`None`: it can); the cases that need it then report
    /// SKIPPED with this reason.
    fn unavailable(&self) -> Option<String> {
        None
    }

    /// The environment that makes, in a child process, every call that makes a file's data
    /// durable (`fsync`, `fdatasync`) on a file or directory below `dir` fail with `EIO`: the
    /// first `after` such calls succeed, then every one fails (sticky, like a disk that went
    /// bad), until the file `stop` exists, after which every call succeeds again.
    fn fail_syncs(&self, dir: &Path, after: u64, stop: &Path) -> Vec<(OsString, OsString)>;
}

/// Set in the failed-flush child's environment to the stop file it creates once a flush
/// failed.
const STOP_ENV: &str = "STOWAGE_CONFORMANCE_FAULT_STOP";
/// Put-and-flush rounds the child tries before it reports that no flush failed.
const MAX_ROUNDS: usize = 200;
/// Syncs to let succeed before the first failure, tried in turn until one lands in a flush
/// (smaller ones hit `create`).
const AFTER: [u64; 10] = [0, 1, 2, 4, 8, 16, 32, 64, 128, 256];

/// The failed-flush writer: creates the cache (`create-failed <error>` if it cannot), then puts
/// two samples and flushes (`flushed <count>`) until a flush fails (`flush-failed <error>`) or a
/// put does (`put-failed <error>`). After a failed flush it creates the stop file (the fault is
/// gone) and tries a put, a flush and a finalize, printing `<operation>-after <verdict>` for
/// each: `poisoned`, `ok`, or `error <text>`.
pub(crate) fn failed_flush_writer(factory: &dyn BackendFactory, dir: &Path) -> ! {
    let stop = std::env::var_os(STOP_ENV).map(PathBuf::from);
    let schema = basic_schema(&factory.capabilities());
    let mut cache = match factory.create(dir, &schema) {
        Ok(cache) => cache,
        Err(e) => {
            say(&format!("create-failed {}", one_line(&e)));
            std::process::exit(0)
        }
    };
    let mut count = 0;
    let mut failed = false;
    for _ in 0..MAX_ROUNDS {
        for _ in 0..2 {
            if let Err(e) = cache.put(&key(count), &sample_for(&schema, count as u64)) {
                say(&format!("put-failed {}", one_line(&e)));
                std::process::exit(0)
            }
            count += 1;
        }
        match cache.flush() {
            Ok(()) => say(&format!("flushed {count}")),
            Err(e) => {
                say(&format!("flush-failed {}", one_line(&e)));
                failed = true;
                break;
            }
        }
    }
    if !failed {
        say(&format!("no-failure {MAX_ROUNDS}"));
        std::process::exit(0)
    }
    // The fault is gone: a handle that did not poison itself would now write again.
    if let Some(stop) = stop {
        std::fs::write(&stop, b"").unwrap_or_else(|e| die("creating the stop file", e));
    }
    let verdict = |result: stowage_core::Result<()>| match result {
        Ok(()) => "ok".to_string(),
        Err(Error::Poisoned { .. }) => "poisoned".to_string(),
        Err(e) => format!("error {}", one_line(&e)),
    };
    say(&format!("put-after {}", verdict(cache.put(&key(count), &sample_for(&schema, 0)))));
    say(&format!("flush-after {}", verdict(cache.flush())));
    say(&format!("finalize-after {}", verdict(cache.finalize())));
    std::process::exit(0)
}

/// `e` as one protocol line's worth of text.
pub(crate) fn one_line(e: &impl std::fmt::Display) -> String {
    e.to_string().replace('\n', " ")
}

/// What one failed-flush child reported.
#[derive(Debug, Default)]
struct Report {
    acknowledged: usize,
    flush_failed: Option<String>,
    /// `(operation, verdict)` after the failed flush.
    after: Vec<(String, String)>,
    /// Why the run did not reach a failed flush.
    inconclusive: Option<String>,
}

/// A flush that fails (its syncs made to fail by the harness's [`FaultInjector`], in a writer
/// child process) is reported as an error; after it, even once the fault is gone, `put`,
/// `flush` and `finalize` on that handle return `Error::Poisoned`; and every sample an earlier
/// flush acknowledged is still there on reopening.
///
/// Needs a fault injector (the built-in [`crate::injector::Faultinject`] under
/// [`crate::backend_conformance!`]), a child process and caches the child shares; SKIPPED
/// without any of them, or where the injector cannot run.
pub fn failed_flush_poisons_the_handle(ctx: &CaseContext<'_>) -> CaseResult {
    if let Some(why) = crate::crash::not_shared(ctx) {
        return Ok(Outcome::Skipped(why));
    }
    let Some(faults) = ctx.faults else {
        return Ok(Outcome::Skipped(
            "needs a fault injector to make a flush fail (none given: run the case with \
             run_case_with(.., Some(&stowage_conformance::injector::Faultinject)), as \
             backend_conformance! does)"
                .into(),
        ));
    };
    if let Some(why) = faults.unavailable() {
        return Ok(Outcome::Skipped(format!(
            "needs {} to make a flush fail: {why}",
            faults.name()
        )));
    }
    let Some(launcher) = &ctx.child else {
        return Ok(Outcome::Skipped(
            "needs a child process: runs under backend_conformance!, not run_all".into(),
        ));
    };
    let mut tried = Vec::new();
    for (attempt, after) in AFTER.into_iter().enumerate() {
        let dir = ctx.cache_path(&format!("poison{attempt}"));
        let stop = dir.with_extension("stop");
        let mut env = faults.fail_syncs(&dir, after, &stop);
        env.push((STOP_ENV.into(), stop.into_os_string()));
        let stderr = dir.with_extension("stderr");
        let mut child = Child::spawn(launcher, Mode::FailedFlush, &dir, &stderr, 0, &env)?;
        let mut lines = Vec::new();
        while let Some(line) = child.next_line()? {
            lines.push(line);
        }
        lines.extend(child.finish());
        let report = read_report(&lines);
        let what =
            format!("{}: every sync below the cache fails after the first {after}", faults.name());
        if let Some(why) = report.inconclusive {
            tried.push(format!("after {after}: {why}"));
            continue;
        }
        let Some(flush_error) = report.flush_failed else {
            return Err(Failure::new(
                format!("the failed-flush child ({what})"),
                "a protocol line for every step",
                format!("{lines:?}; its stderr: {}", child.stderr_text()),
            ));
        };
        let context = format!("{what}; the flush failed with: {flush_error}");
        check_poisoned(&report.after, "flush", &context)?;
        let reader =
            ok("reopen after the failed flush", ctx.factory.open(&dir, OpenMode::ReadOnly))
                .map_err(|f| f.within(&context))?;
        let schema = basic_schema(ctx.caps());
        for i in 0..report.acknowledged {
            let k = key(i);
            let got = ok(&format!("get {k:?}"), reader.get(&k));
            got.and_then(|got| compare_sample(&k, &sample_for(&schema, i as u64), got.as_ref()))
                .map_err(|f| {
                    f.within(format!(
                        "a sample a flush acknowledged before the failed one ({context})"
                    ))
                    .clause("flush.crash-keeps-flushed")
                })?;
        }
        return Ok(Outcome::Passed);
    }
    Ok(Outcome::Skipped(format!("{} never made a flush fail: {}", faults.name(), tried.join("; "))))
}

/// Reads the child's protocol lines.
fn read_report(lines: &[String]) -> Report {
    let mut report = Report::default();
    for line in lines {
        let (word, rest) = line.split_once(' ').unwrap_or((line, ""));
        match word {
            "flushed" => report.acknowledged = rest.parse().unwrap_or(report.acknowledged),
            "flush-failed" => report.flush_failed = Some(rest.to_owned()),
            "create-failed" => report.inconclusive = Some(format!("create failed ({rest})")),
            "put-failed" => report.inconclusive = Some(format!("a put failed first ({rest})")),
            "no-failure" => {
                report.inconclusive = Some(format!("no flush failed in {rest} rounds"));
            }
            operation if operation.ends_with("-after") => {
                let operation = operation.trim_end_matches("-after");
                report.after.push((operation.to_owned(), rest.to_owned()));
            }
            _ => {}
        }
    }
    report
}

/// Every write after the failed `failed` (`flush`, `finalize`) must have been refused with
/// `Error::Poisoned`: `after` holds `(operation, verdict)` for `put`, `flush` and `finalize`.
pub(crate) fn check_poisoned(
    after: &[(String, String)],
    failed: &str,
    context: &str,
) -> Result<(), Failure> {
    for operation in ["put", "flush", "finalize"] {
        let verdict = after.iter().find(|(op, _)| op == operation).map(|(_, v)| v.as_str());
        let failure = |got: String| {
            let f = Failure::new(
                format!("{operation} on the handle after its {failed} failed ({context})"),
                "Error::Poisoned",
                got,
            );
            // A put that returns Ok where it cannot be made durable breaks a clause of its own.
            if operation == "put" && verdict == Some("ok") {
                f.clause("put.not-durable-is-error")
            } else {
                f.clause("flush.failure-poisons")
            }
        };
        match verdict {
            Some("poisoned") => {}
            Some("ok") => return Err(failure("Ok, once the fault was gone".into())),
            Some(other) => {
                let text = other.strip_prefix("error ").unwrap_or(other);
                return Err(failure(format!("a different error: {text}")));
            }
            None => return Err(failure("no answer from the child".into())),
        }
    }
    Ok(())
}
