//! The crash cases: a writer child process ([`crate::child`]) is killed with `SIGKILL` inside or
//! between flushes, or around its finalize, and the cache it leaves must keep every flushed
//! sample, hold no partial one, and be complete or resumable.

use crate::cases::{Written, check_samples, put_samples};
use crate::check::ok;
use crate::child::{Child, Mode, die, say};
use crate::generate::{basic_schema, compare_sample, key, sample_for};
use crate::{CaseContext, CaseResult, ChildLauncher, Failure, Outcome, ensure};
use rand::{Rng, SeedableRng, rngs::StdRng};
use std::ffi::OsString;
use std::path::Path;
use std::time::{Duration, Instant};
use stowage_core::{BackendFactory, DynReader, OpenMode, Schema, ValidationLevel};

pub use crate::child::{CHILD_DIR_ENV, child_main};

/// Kills of the flush case.
const TRIALS: u64 = 6;
/// The flush writer stops by itself after this long, so a parent that fails to kill it leaks
/// nothing.
const CHILD_LIFETIME: Duration = Duration::from_secs(60);
/// Samples the finalize writer puts and flushes before it puts more and finalizes.
const FLUSHED_BEFORE_FINALIZE: usize = 30;
/// Samples the finalize writer has put when it calls finalize (the last ones only pending).
const PUT_BEFORE_FINALIZE: usize = 60;

/// The flush writer: creates the cache, then puts generated samples, flushing at random
/// intervals, announcing `flushing` before and `flushed <count>` after each flush, until killed.
pub(crate) fn flush_writer(factory: &dyn BackendFactory, dir: &Path, seed: u64) -> ! {
    let mut rng = StdRng::seed_from_u64(seed);
    let schema = basic_schema(&factory.capabilities());
    let mut cache = factory.create(dir, &schema).unwrap_or_else(|e| die("create", e));
    let started = Instant::now();
    let mut next_flush = rng.random_range(1..40);
    for i in 0.. {
        if let Err(e) = cache.put(&key(i), &sample_for(&schema, i as u64)) {
            die("put", e);
        }
        if i + 1 == next_flush {
            say("flushing");
            cache.flush().unwrap_or_else(|e| die("flush", e));
            say(&format!("flushed {}", i + 1));
            next_flush += rng.random_range(1..40);
        }
        if started.elapsed() > CHILD_LIFETIME {
            break;
        }
    }
    std::process::exit(0)
}

/// The finalize writer: puts and flushes [`FLUSHED_BEFORE_FINALIZE`] samples (`flushed <n>`),
/// puts more up to [`PUT_BEFORE_FINALIZE`] without flushing, announces `finalizing`, finalizes,
/// announces `finalized`, and exits.
pub(crate) fn finalize_writer(factory: &dyn BackendFactory, dir: &Path) -> ! {
    let schema = basic_schema(&factory.capabilities());
    let mut cache = factory.create(dir, &schema).unwrap_or_else(|e| die("create", e));
    for i in 0..PUT_BEFORE_FINALIZE {
        if let Err(e) = cache.put(&key(i), &sample_for(&schema, i as u64)) {
            die("put", e);
        }
        if i + 1 == FLUSHED_BEFORE_FINALIZE {
            cache.flush().unwrap_or_else(|e| die("flush", e));
            say(&format!("flushed {}", i + 1));
        }
    }
    say("finalizing");
    cache.finalize().unwrap_or_else(|e| die("finalize", e));
    say("finalized");
    std::process::exit(0)
}

/// How the parent picks its moment in the flush cases (here and in [`crate::power_loss`]).
#[derive(Debug, Clone, Copy)]
pub(crate) enum KillPoint {
    /// Right after the child announces its n-th flush (inside flush), after a few microseconds.
    InsideFlush { flush: usize, delay_us: u64 },
    /// A random time after the n-th acknowledged flush (usually inside a put).
    AfterFlush { flush: usize, delay_us: u64 },
}

/// Kills a writer child at random points (inside flush and between flushes); after each kill, every
/// sample acknowledged by a completed flush is present and byte-identical, every other visible key
/// holds exactly its sample, `validate(Full)` is clean, and (with `resume`) the cache takes more
/// writes. SKIPPED without a child process, or on a storage the child does not share.
pub fn crash_loses_no_flushed_sample(ctx: &CaseContext<'_>) -> CaseResult {
    if let Some(why) = not_shared(ctx) {
        return Ok(Outcome::Skipped(why));
    }
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
        let stderr = dir.with_extension("stderr");
        let acknowledged = kill_flush_writer(launcher, &dir, &stderr, &[], trial, point)?;
        let what = format!("trial {trial} ({point:?}, {acknowledged} samples acknowledged)");
        let reader = ok("reopen after the crash", ctx.factory.open(&dir, OpenMode::ReadOnly))
            .map_err(|f| f.within(&what))?;
        let visible =
            check_after_crash(&*reader, &schema, acknowledged, "flushed before the crash")
                .map_err(|f| f.within(&what))?;
        let report = ok("validate(Full) after the crash", reader.validate(ValidationLevel::Full))
            .map_err(|f| f.within(&what))?;
        ensure!(
            report.is_clean(),
            format!("{what}: validate(Full) after the crash"),
            expected: "no problem",
            got: format!("{:?}", report.problems)
        );
        drop(reader);
        if ctx.caps().resume {
            finish_by_next_writer(ctx, &dir, &schema, visible).map_err(|f| f.within(&what))?;
        }
    }
    Ok(Outcome::Passed)
}

/// Starts a flush writer on `dir` (its stderr to `stderr`, `env` added to its environment),
/// kills it at `point`, and returns how many samples its completed flushes acknowledged. Never
/// hangs: a child that stops talking is killed and reported.
pub(crate) fn kill_flush_writer(
    launcher: &ChildLauncher,
    dir: &Path,
    stderr: &Path,
    env: &[(OsString, OsString)],
    seed: u64,
    point: KillPoint,
) -> Result<usize, Failure> {
    let mut child = Child::spawn(launcher, Mode::FlushCrash, dir, stderr, seed, env)?;
    let mut acknowledged = 0usize;
    let (mut flushing_seen, mut flushed_seen) = (0, 0);
    let mut reached = false;
    while let Some(line) = child.next_line()? {
        if line == "flushing" {
            flushing_seen += 1;
            if let KillPoint::InsideFlush { flush, delay_us } = point
                && flushing_seen == flush
            {
                std::thread::sleep(Duration::from_micros(delay_us));
                reached = true;
                break;
            }
        } else if let Some(n) = line.strip_prefix("flushed ") {
            acknowledged = parse_count(&line, n)?;
            flushed_seen += 1;
            if let KillPoint::AfterFlush { flush, delay_us } = point
                && flushed_seen == flush
            {
                std::thread::sleep(Duration::from_micros(delay_us));
                reached = true;
                break;
            }
        }
    }
    // A flush that completed before the kill may have been printed after we stopped reading.
    for line in child.kill()? {
        if let Some(n) = line.strip_prefix("flushed ") {
            acknowledged = parse_count(&line, n)?;
        }
    }
    ensure!(
        reached,
        format!("the crash child ({point:?})"),
        expected: "a writer that runs until killed",
        got: format!("it ended before the kill point; its stderr: {}", child.stderr_text())
    );
    Ok(acknowledged)
}

fn parse_count(line: &str, n: &str) -> Result<usize, Failure> {
    n.trim().parse().map_err(|_| Failure::new("the crash child's output", "flushed <n>", line))
}

/// Where the parent kills the finalize writer.
#[derive(Debug, Clone, Copy)]
pub(crate) enum FinalizeKill {
    /// This long after the child announced `finalizing` (it calls finalize right after).
    During { delay_us: u64 },
    /// Once finalize has returned.
    After,
}

/// The moments the finalize case kills at: at once, then later and later into the finalize,
/// then after it returned.
const FINALIZE_KILLS: [FinalizeKill; 6] = [
    FinalizeKill::During { delay_us: 0 },
    FinalizeKill::During { delay_us: 100 },
    FinalizeKill::During { delay_us: 500 },
    FinalizeKill::During { delay_us: 2_000 },
    FinalizeKill::During { delay_us: 8_000 },
    FinalizeKill::After,
];

/// Kills a writer child inside its `finalize` (0 to 8 ms in) and after it. Afterwards the
/// cache opens and is either complete (finalized, every sample put, including those put after
/// the last flush, and `validate(Full)` clean) or resumable: every flushed sample present,
/// every visible key holding exactly its sample, and the next writer (an append-open; with
/// `resume`, more puts and a finalize) leaves it finalized, complete and clean. A cache left
/// unfinished by a backend without `resume` must at least validate clean. SKIPPED without a
/// child process, or on a storage the child does not share.
pub fn crash_during_finalize_leaves_resumable_or_complete(ctx: &CaseContext<'_>) -> CaseResult {
    if let Some(why) = not_shared(ctx) {
        return Ok(Outcome::Skipped(why));
    }
    let Some(launcher) = &ctx.child else {
        return Ok(Outcome::Skipped(
            "needs a child process: runs under backend_conformance!, not run_all".into(),
        ));
    };
    let schema = basic_schema(ctx.caps());
    for (trial, kill) in FINALIZE_KILLS.into_iter().enumerate() {
        let dir = ctx.cache_path(&format!("finalize-crash{trial}"));
        let stderr = dir.with_extension("stderr");
        let returned = kill_finalize_writer(launcher, &dir, &stderr, &[], kill)?;
        let what = format!("trial {trial} (killed {kill:?}, finalize returned: {returned})");
        finalize_crash_trial(ctx, &dir, &schema, returned).map_err(|f| f.within(what))?;
    }
    Ok(Outcome::Passed)
}

/// Checks the cache one killed finalize writer left in `dir`; `returned` says whether its
/// finalize had returned `Ok` before the kill.
pub(crate) fn finalize_crash_trial(
    ctx: &CaseContext<'_>,
    dir: &Path,
    schema: &Schema,
    returned: bool,
) -> Result<(), Failure> {
    let reader = ok("open read-only after the crash", ctx.factory.open(dir, OpenMode::ReadOnly))?;
    let finalized = reader.is_finalized();
    ensure!(
        finalized || !returned,
        "is_finalized() after a crash that came after finalize returned Ok",
        expected: "true",
        got: "false"
    );
    let visible = if finalized {
        let why = "put before a finalize the cache reports as committed";
        check_after_crash(&*reader, schema, PUT_BEFORE_FINALIZE, why)?
    } else {
        check_after_crash(&*reader, schema, FLUSHED_BEFORE_FINALIZE, "flushed before the crash")?
    };
    if finalized {
        ensure!(
            visible.len() == PUT_BEFORE_FINALIZE,
            "keys() of the finalized cache",
            expected: format!("the {PUT_BEFORE_FINALIZE} keys put"),
            got: format!("{} keys", visible.len())
        );
    }
    let report = ok("validate(Full) after the crash", reader.validate(ValidationLevel::Full))?;
    drop(reader);
    if finalized && report.is_clean() {
        return Ok(()); // complete
    }
    if !finalized && !ctx.caps().resume {
        ensure!(
            report.is_clean(),
            "validate(Full) of the unfinished cache (resume not declared)",
            expected: "no problem",
            got: format!("{:?}", report.problems)
        );
        return Ok(());
    }
    // Neither complete nor clean, or unfinished: the next writer must be able to finish it.
    finish_by_next_writer(ctx, dir, schema, visible)
        .map_err(|f| f.within(format!("the next writer (validate before: {:?})", report.problems)))
}

/// Starts a finalize writer on `dir` (its stderr to `stderr`, `env` added to its environment),
/// kills it as `kill` says, and returns whether its finalize had returned.
pub(crate) fn kill_finalize_writer(
    launcher: &ChildLauncher,
    dir: &Path,
    stderr: &Path,
    env: &[(OsString, OsString)],
    kill: FinalizeKill,
) -> Result<bool, Failure> {
    let mut child = Child::spawn(launcher, Mode::FinalizeCrash, dir, stderr, 0, env)?;
    let mut returned = false;
    let mut reached = false;
    while let Some(line) = child.next_line()? {
        match (line.as_str(), kill) {
            ("finalizing", FinalizeKill::During { delay_us }) => {
                std::thread::sleep(Duration::from_micros(delay_us));
                reached = true;
                break;
            }
            ("finalized", _) => {
                returned = true;
                reached = true;
                break;
            }
            _ => {}
        }
    }
    returned |= child.kill()?.iter().any(|line| line == "finalized");
    ensure!(
        reached,
        format!("the finalize crash child ({kill:?})"),
        expected: "a writer that reaches its finalize",
        got: format!("it ended before; its stderr: {}", child.stderr_text())
    );
    Ok(returned)
}

/// The checks after any crash: each of the first `durable` generated samples is present and
/// identical (`why` says why it must be: flushed, or put before a finalize that committed),
/// and every visible key is a generated one holding exactly its sample (never a partial one).
/// Returns the visible samples.
pub(crate) fn check_after_crash(
    reader: &DynReader,
    schema: &Schema,
    durable: usize,
    why: &str,
) -> Result<Written, Failure> {
    for i in 0..durable {
        let k = key(i);
        let got = ok(&format!("get {k:?}"), reader.get(&k));
        got.and_then(|got| compare_sample(&k, &sample_for(schema, i as u64), got.as_ref()))
            .map_err(|f| f.within(format!("after the crash, a sample {why}")))?;
    }
    let keys = ok("keys after the crash", reader.keys())?;
    let mut visible = Vec::with_capacity(keys.len());
    for k in keys {
        let i: usize = k.strip_prefix("sample-").and_then(|n| n.parse().ok()).ok_or_else(|| {
            Failure::new("keys() after the crash", "only keys the writer put", format!("{k:?}"))
        })?;
        let want = sample_for(schema, i as u64);
        let got = ok(&format!("get of visible {k:?}"), reader.get(&k))?;
        compare_sample(&k, &want, got.as_ref())
            .map_err(|f| f.within("a visible sample after the crash (partial?)"))?;
        visible.push((k, want));
    }
    ensure!(
        visible.len() >= durable,
        "keys() after the crash",
        expected: format!("at least the {durable} keys {why}"),
        got: format!("{} keys", visible.len())
    );
    Ok(visible)
}

/// The next writer after a crash: append-opens the cache in `dir`; when it is unfinished
/// (`resume` declared), puts five more samples and finalizes. Then a reader must see a
/// finalized cache holding `visible` and the new samples, and validate it clean.
pub(crate) fn finish_by_next_writer(
    ctx: &CaseContext<'_>,
    dir: &Path,
    schema: &Schema,
    mut expected: Written,
) -> Result<(), Failure> {
    let mut cache = ok("append-open after the crash", ctx.factory.open(dir, OpenMode::Append))?;
    // Opening for writing may finish what the crashed writer left half done (with
    // `concurrent_writers`, a commit it made durable but had not published yet): samples that
    // appear then must each be exactly a sample the crashed writer put, and none may vanish.
    let reopened = check_after_crash(&*cache, schema, 0, "put before the crash")
        .map_err(|f| f.within("the next writer's view"))?;
    for (k, _) in &expected {
        ensure!(
            reopened.iter().any(|(seen, _)| seen == k),
            format!("key {k:?} after the next writer opened"),
            expected: "still visible",
            got: "gone"
        );
    }
    expected = reopened;
    if !cache.is_finalized() {
        let start = expected.len() + 1000;
        expected.extend(put_samples(&mut *cache, schema, start..start + 5)?);
        ok("finalize after resuming", cache.finalize())?;
    }
    drop(cache);
    let reader = ok("reopen after the next writer", ctx.factory.open(dir, OpenMode::ReadOnly))?;
    ensure!(
        reader.is_finalized(),
        "is_finalized() after the next writer",
        expected: "true",
        got: "false"
    );
    check_samples(&*reader, &expected)?;
    let report =
        ok("validate(Full) after the next writer", reader.validate(ValidationLevel::Full))?;
    ensure!(
        report.is_clean(),
        "validate(Full) after the next writer",
        expected: "no problem",
        got: format!("{:?}", report.problems)
    );
    Ok(())
}

/// Why a case whose writer runs in a child process cannot run on the context's storage: the
/// child would write caches this process never sees.
pub(crate) fn not_shared(ctx: &CaseContext<'_>) -> Option<String> {
    let storage = ctx.storage();
    (!storage.shared_between_processes()).then(|| {
        format!(
            "caches on {} are not shared between processes: the writer runs in a child \
             process, whose caches this process would not see",
            storage.name()
        )
    })
}

/// Why a case that interposes libc file calls (the power-loss model, the I/O-error injector)
/// cannot run on the context's storage.
pub(crate) fn not_local_files(ctx: &CaseContext<'_>) -> Option<String> {
    let storage = ctx.storage();
    (!storage.is_local_files()).then(|| {
        format!(
            "caches on {} are not local files: the case interposes the libc file calls of a \
             writer child process, which never reach that storage",
            storage.name()
        )
    })
}
