//! The crash case: a child process writes and flushes, is killed with SIGKILL at a random point,
//! and every flushed sample must then be present and intact, with no partial sample anywhere.
//!
//! The child is the test executable itself, re-run with `--exact <this test>` and
//! [`CHILD_DIR_ENV`] set; [`crate::run_case_as_test`] sees the variable and calls [`child_main`].

use crate::cases::{check_all, put_generated};
use crate::check::ok;
use crate::generate::{basic_schema, compare, key, sample_for};
use crate::{CaseContext, CaseResult, Outcome, ensure};
use rand::{Rng, SeedableRng, rngs::StdRng};
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use stowage_core::{BackendFactory, OpenMode, ValidationLevel};

/// Set in the child's environment to the cache directory it must write.
pub const CHILD_DIR_ENV: &str = "STOWAGE_CONFORMANCE_CRASH_CHILD";
const CHILD_SEED_ENV: &str = "STOWAGE_CONFORMANCE_CRASH_SEED";
const TRIALS: u64 = 6;
/// The child stops by itself after this long, so a parent that fails to kill it leaks nothing.
const CHILD_LIFETIME: Duration = Duration::from_secs(60);

/// The child's side: create the cache, then put generated samples, flushing at random intervals,
/// announcing `flushing` before and `flushed <count>` after each flush, until killed.
pub fn child_main(factory: &dyn BackendFactory, dir: &Path) -> ! {
    let seed = std::env::var(CHILD_SEED_ENV).ok().and_then(|s| s.parse().ok()).unwrap_or(0);
    let mut rng = StdRng::seed_from_u64(seed);
    let schema = basic_schema(&factory.capabilities());
    let fail = |what: &str, e: stowage_core::Error| -> ! {
        eprintln!("crash child: {what}: {e}");
        std::process::exit(3)
    };
    let mut cache = factory.create(dir, &schema).unwrap_or_else(|e| fail("create", e));
    let mut out = std::io::stdout().lock();
    // libtest has printed "test <name> ... " without a newline: start the protocol on a line of its own.
    let _ = writeln!(out).and_then(|()| out.flush());
    let started = Instant::now();
    let mut next_flush = rng.random_range(1..40);
    for i in 0.. {
        if let Err(e) = cache.put(&key(i), &sample_for(&schema, i as u64)) {
            fail("put", e);
        }
        if i + 1 == next_flush {
            let _ = writeln!(out, "flushing").and_then(|()| out.flush());
            cache.flush().unwrap_or_else(|e| fail("flush", e));
            let _ = writeln!(out, "flushed {}", i + 1).and_then(|()| out.flush());
            next_flush += rng.random_range(1..40);
        }
        if started.elapsed() > CHILD_LIFETIME {
            break;
        }
    }
    std::process::exit(0)
}

/// How the parent picks its moment.
#[derive(Debug, Clone, Copy)]
enum KillPoint {
    /// Right after the child announces its n-th flush (inside flush), after a few microseconds.
    InsideFlush { flush: usize, delay_us: u64 },
    /// A random time after the n-th acknowledged flush (usually inside a put).
    AfterFlush { flush: usize, delay_us: u64 },
}

/// Kills a writer child at random points (inside flush and between flushes); after each kill, every
/// sample acknowledged by a completed flush is present and byte-identical, every other visible key
/// holds exactly its sample, `validate(Full)` is clean, and (with `resume`) the cache takes more
/// writes.
pub fn crash_loses_no_flushed_sample(ctx: &CaseContext<'_>) -> CaseResult {
    let Some(launcher) = &ctx.child else {
        return Ok(Outcome::Skipped(
            "needs a child process: runs under backend_conformance!, not run_all".into(),
        ));
    };
    let schema = basic_schema(ctx.caps());
    let mut rng = StdRng::seed_from_u64(0xC0FFEE ^ std::process::id() as u64);
    for trial in 0..TRIALS {
        let dir = ctx.cache_path(&format!("crash{trial}"));
        let flush = rng.random_range(1..25);
        let point = if trial % 2 == 0 {
            KillPoint::InsideFlush { flush, delay_us: rng.random_range(0..400) }
        } else {
            KillPoint::AfterFlush { flush, delay_us: rng.random_range(0..3000) }
        };
        let acknowledged = run_child(launcher, &dir, trial, point)?;
        let what = format!("trial {trial} ({point:?}, {acknowledged} samples acknowledged)");
        let reader = ok(&format!("{what}: reopen"), ctx.factory.open(&dir, OpenMode::ReadOnly))?;
        for i in 0..acknowledged {
            let k = key(i);
            let got = reader.get(&k).map_err(|e| format!("{what}: get of flushed {k:?}: {e}"))?;
            compare(&k, &sample_for(&schema, i as u64), got.as_ref())
                .map_err(|e| format!("{what}: flushed sample lost: {e}"))?;
        }
        let keys = ok("keys", reader.keys())?;
        for k in &keys {
            let i: usize = k
                .strip_prefix("sample-")
                .and_then(|n| n.parse().ok())
                .ok_or_else(|| format!("{what}: unexpected key {k:?} after the crash"))?;
            let got = reader.get(k).map_err(|e| format!("{what}: get of visible {k:?}: {e}"))?;
            compare(k, &sample_for(&schema, i as u64), got.as_ref())
                .map_err(|e| format!("{what}: partial sample: {e}"))?;
        }
        ensure!(keys.len() >= acknowledged, "{what}: only {} keys listed", keys.len());
        let report = ok("validate", reader.validate(ValidationLevel::Full))?;
        ensure!(
            report.is_clean(),
            "{what}: validate(Full) after the crash reported {:?}",
            report.problems
        );
        drop(reader);
        if ctx.caps().resume {
            let mut cache =
                ok(&format!("{what}: resume"), ctx.factory.open(&dir, OpenMode::Append))?;
            let start = keys.len().max(acknowledged) + 1000;
            let more = put_generated(&mut *cache, &schema, start..start + 5)?;
            ok("finalize after resume", cache.finalize())?;
            drop(cache);
            check_all(&*ok("reopen", ctx.factory.open(&dir, OpenMode::ReadOnly))?, &{
                let mut all: Vec<_> = keys
                    .iter()
                    .map(|k| {
                        let i: usize = k[7..].parse().expect("checked above");
                        (k.clone(), sample_for(&schema, i as u64))
                    })
                    .collect();
                all.extend(more);
                all
            })
            .map_err(|e| format!("{what}: after resume: {e}"))?;
        }
    }
    Ok(Outcome::Passed)
}

/// How long the parent waits for the child's next line before declaring it hung.
const LINE_TIMEOUT: Duration = Duration::from_secs(60);

/// Starts the child, kills it at `point`, and returns how many samples its completed flushes
/// acknowledged. Never hangs: a child that stops talking is killed and reported.
fn run_child(
    launcher: &crate::ChildLauncher,
    dir: &Path,
    seed: u64,
    point: KillPoint,
) -> Result<usize, String> {
    // stderr goes to a file: a pipe nobody drains could fill up and block the child.
    let stderr_path = dir.with_extension("stderr");
    let stderr = std::fs::File::create(&stderr_path)
        .map_err(|e| format!("creating {}: {e}", stderr_path.display()))?;
    let mut child = Command::new(&launcher.exe)
        .args(["--exact", &launcher.test_name, "--nocapture", "--test-threads=1"])
        .env(CHILD_DIR_ENV, dir)
        .env(CHILD_SEED_ENV, seed.to_string())
        .stdout(Stdio::piped())
        .stderr(stderr)
        .spawn()
        .map_err(|e| format!("starting the crash child {}: {e}", launcher.exe.display()))?;
    let stdout = child.stdout.take().expect("piped");
    let (sender, lines) = std::sync::mpsc::channel();
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if sender.send(line).is_err() {
                break;
            }
        }
    });
    let mut acknowledged = 0usize;
    let (mut flushing_seen, mut flushed_seen) = (0, 0);
    let mut outcome = Err("the crash child ended before the kill point".to_string());
    loop {
        let line = match lines.recv_timeout(LINE_TIMEOUT) {
            Ok(line) => line,
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                outcome = Err(format!("the crash child printed nothing for {LINE_TIMEOUT:?}"));
                break;
            }
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => break,
        };
        // libtest may print "test <name> ... " on the same line before the child's first word.
        if line.ends_with("flushing") {
            flushing_seen += 1;
            if let KillPoint::InsideFlush { flush, delay_us } = point
                && flushing_seen == flush
            {
                std::thread::sleep(Duration::from_micros(delay_us));
                outcome = Ok(());
                break;
            }
        } else if let Some(n) = line.split("flushed ").nth(1) {
            acknowledged = n.trim().parse().map_err(|_| format!("crash child printed {line:?}"))?;
            flushed_seen += 1;
            if let KillPoint::AfterFlush { flush, delay_us } = point
                && flushed_seen == flush
            {
                std::thread::sleep(Duration::from_micros(delay_us));
                outcome = Ok(());
                break;
            }
        }
    }
    child.kill().map_err(|e| format!("killing the crash child: {e}"))?;
    let _ = child.wait();
    let _ = reader.join();
    // A flush that completed before the kill may have been printed after we stopped reading.
    for line in lines.try_iter() {
        if let Some(n) = line.split("flushed ").nth(1) {
            acknowledged = n.trim().parse().map_err(|_| format!("crash child printed {line:?}"))?;
        }
    }
    outcome.map_err(|why| {
        let err = std::fs::read_to_string(&stderr_path).unwrap_or_default();
        format!("{why} {point:?}; its stderr: {err}")
    })?;
    Ok(acknowledged)
}
