//! The I/O-error case (`flush.io-failure-is-error`): a writer child process opens a cache, puts,
//! flushes and finalizes while the `faultinject` interposer ([`crate::injector`]) makes one
//! `fsync` fail with `EIO` (once: a retry would "succeed", the trap), or fills the disk in the
//! middle of a `write` (`ENOSPC` until freed), at a handful of points of that sequence. The
//! `faultfs` interposer runs too ([`crate::durable_image`]): a failed fsync drops the pages it
//! could not write, as Linux does, and a power cut right after the child is checked as well.
//!
//! Per fault, a dry run counts the calls the child makes (nothing fails); the trials then fail
//! the first, a middle and the last of them. In each trial:
//!
//! 1. no call panics or crashes the child, and the fault is reported: some open, put, flush or
//!    finalize returns an error (a fault that fired under nothing but `Ok` is a silent success);
//! 2. after a failed flush or finalize, the same handle refuses a put, a flush and a finalize
//!    with `Error::Poisoned`, even once the fault is over (`flush.failure-poisons`); after any
//!    failed fsync it acknowledges nothing more (`put.not-durable-is-error`);
//! 3. a fresh read-only open finds every sample whose flush (or finalize) returned `Ok` exact,
//!    and every other key it lists holds exactly its sample (never a partial one);
//! 4. so does the cache a power cut right after the child leaves (`flush.crash-keeps-flushed`).
//!
//! Needs a child process and both interposers (Linux); SKIPPED without them, or when no fault
//! fired (a backend whose writes bypass libc), never a pass.

use crate::check::ok;
use crate::child::{Child, Mode, die, say};
use crate::durable_image::{self, DurableImage};
use crate::faults::{check_poisoned, one_line};
use crate::generate::{basic_schema, compare_sample, key, sample_for};
use crate::injector::{
    self, EIO, ENOSPC, FaultKind, Injection, InjectionLog, Op, canonical, preload_env,
};
use crate::runner::panic_text;
use crate::{CaseContext, CaseResult, ChildLauncher, Failure, Outcome};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};
use stowage_core::{BackendFactory, DynBackend, Error, OpenMode, Schema};

/// Set in the child's environment to the samples the cache holds when the child starts; `0`:
/// the child creates the cache.
const BASE_ENV: &str = "STOWAGE_CONFORMANCE_IO_BASE";
/// Set in the child's environment to the file the child creates once a call failed: the fault
/// is then over (the disk was freed), so only the handle itself can refuse what follows.
const STOP_ENV: &str = "STOWAGE_CONFORMANCE_IO_STOP";
/// Samples flushed into the cache before the child opens it (with `resume`).
const BASE: usize = 6;
/// Puts between the child's flushes.
const BATCH: usize = 5;
/// Flushes of the child before its finalize.
const ROUNDS: usize = 3;
/// The faults: an fsync that fails once with `EIO`, and a disk that fills up in the middle of a
/// write and stays full until the child frees it.
const FAULTS: [FaultKind; 2] = [
    FaultKind { op: Op::Fsync, errno: EIO, sticky: false, short: false },
    FaultKind { op: Op::Write, errno: ENOSPC, sticky: true, short: true },
];

/// What one backend call did, in the child.
type Guarded<T> = Result<stowage_core::Result<T>, String>;

/// Runs one backend call in the child, turning a panic into its message.
fn guarded<T>(call: impl FnOnce() -> stowage_core::Result<T>) -> Guarded<T> {
    catch_unwind(AssertUnwindSafe(call)).map_err(|panic| panic_text(&*panic))
}

/// The child's answer to one call: `ok`, `poisoned`, `error <text>` or `panicked <text>`.
fn verdict(result: &Guarded<()>) -> String {
    match result {
        Ok(Ok(())) => "ok".into(),
        Ok(Err(Error::Poisoned { .. })) => "poisoned".into(),
        Ok(Err(e)) => format!("error {}", one_line(e)),
        Err(panic) => format!("panicked {}", one_line(panic)),
    }
}

/// The I/O-error writer: opens the cache in `dir` for appending ([`BASE_ENV`] samples in it), or
/// creates it; then [`ROUNDS`] times [`BATCH`] puts and a flush, then a finalize, printing
/// `acknowledged <i,j,..>` for the samples each flush or finalize that returned `Ok` vouched
/// for. At the first error it prints `failed <step> <error>`, creates the stop file and tries a
/// put, a flush and a finalize on the same handle (`after <operation> <verdict>`). A panic is
/// `panicked <step> <message>`; the last line is `done`.
pub(crate) fn io_errors_writer(factory: &dyn BackendFactory, dir: &Path) -> ! {
    let base: usize = std::env::var(BASE_ENV).ok().and_then(|n| n.parse().ok()).unwrap_or(0);
    let stop = std::env::var_os(STOP_ENV)
        .map(PathBuf::from)
        .unwrap_or_else(|| die("the I/O-error child", format!("{STOP_ENV} is not set")));
    let fault_over = || {
        std::fs::write(&stop, b"").unwrap_or_else(|e| die("creating the stop file", e));
    };
    let panicked = |step: &str, message: String| -> ! {
        say(&format!("panicked {step} {}", one_line(&message)));
        std::process::exit(0)
    };
    let schema = basic_schema(&factory.capabilities());
    let step = if base > 0 { "open" } else { "create" };
    let opened = guarded(|| match base {
        0 => factory.create(dir, &schema),
        _ => factory.open(dir, OpenMode::Append),
    });
    let mut cache = match opened {
        Ok(Ok(cache)) => cache,
        Ok(Err(e)) => {
            say(&format!("failed {step} {}", one_line(&e)));
            fault_over();
            say("done");
            std::process::exit(0)
        }
        Err(panic) => panicked(step, panic),
    };
    let mut writer = Writer { cache: &mut cache, schema: &schema, next: base, pending: Vec::new() };
    let failed = 'write: {
        for _ in 0..ROUNDS {
            for _ in 0..BATCH {
                match writer.put() {
                    Ok(Ok(())) => {}
                    Ok(Err(e)) => break 'write Some(("put", e)),
                    Err(panic) => panicked("put", panic),
                }
            }
            match writer.commit(|cache| cache.flush()) {
                Ok(Ok(())) => {}
                Ok(Err(e)) => break 'write Some(("flush", e)),
                Err(panic) => panicked("flush", panic),
            }
        }
        match writer.commit(|cache| cache.finalize()) {
            Ok(Ok(())) => None,
            Ok(Err(e)) => Some(("finalize", e)),
            Err(panic) => panicked("finalize", panic),
        }
    };
    if let Some((step, e)) = failed {
        say(&format!("failed {step} {}", one_line(&e)));
        fault_over();
        // The fault is over: a handle that did not refuse would now write again.
        say(&format!("after put {}", verdict(&writer.put())));
        say(&format!("after flush {}", verdict(&writer.commit(|cache| cache.flush()))));
        say(&format!("after finalize {}", verdict(&writer.commit(|cache| cache.finalize()))));
    }
    // Where the writer's own calls end, in the interposer's log: a fault that fires only while
    // the handle is dropped (after its finalize returned) has no call left to report it.
    mark_log(DROP_MARK);
    if let Err(panic) = guarded(|| {
        drop(cache);
        Ok(())
    }) {
        panicked("drop", panic);
    }
    say("done");
    std::process::exit(0)
}

/// The line the child adds to the interposer's log before it drops its handle.
const DROP_MARK: &str = "mark drop";

/// Appends `line` to the log the `faultinject` interposer of this process writes (its
/// `FAULTINJECT_LOG`), where it falls between the interposer's own lines in the order of events.
fn mark_log(line: &str) {
    use std::io::Write;
    if let Some(log) = std::env::var_os("FAULTINJECT_LOG") {
        let file = std::fs::OpenOptions::new().append(true).open(log);
        let _ = file.and_then(|mut file| file.write_all(format!("{line}\n").as_bytes()));
    }
}

/// Whether the first fault the log at `path` records fired before the child dropped its handle
/// ([`mark_log`]); `false` also when none fired.
fn fired_before_drop(path: &Path) -> bool {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    for line in text.lines() {
        if line == DROP_MARK {
            return false;
        }
        if line.starts_with("fired ") {
            return true;
        }
    }
    false
}

/// The child's handle and what it put since the last flush that returned.
struct Writer<'a> {
    cache: &'a mut Box<DynBackend>,
    schema: &'a Schema,
    /// The number of the next sample to put.
    next: usize,
    /// Put since the last flush or finalize that returned `Ok`.
    pending: Vec<usize>,
}

impl Writer<'_> {
    /// Puts the next generated sample.
    fn put(&mut self) -> Guarded<()> {
        let i = self.next;
        self.next += 1;
        let (cache, schema) = (&mut *self.cache, self.schema);
        let result = guarded(|| cache.put(&key(i), &sample_for(schema, i as u64)));
        if matches!(result, Ok(Ok(()))) {
            self.pending.push(i);
        }
        result
    }

    /// Runs a flush or finalize; when it returns `Ok`, announces the samples it vouched for.
    fn commit(&mut self, call: fn(&mut DynBackend) -> stowage_core::Result<()>) -> Guarded<()> {
        let cache = &mut **self.cache;
        let result = guarded(|| call(cache));
        if matches!(result, Ok(Ok(()))) && !self.pending.is_empty() {
            let list: Vec<String> = self.pending.drain(..).map(|i| i.to_string()).collect();
            say(&format!("acknowledged {}", list.join(",")));
        }
        result
    }
}

/// What one child reported.
#[derive(Debug, Default)]
struct Report {
    /// The samples flushes and finalizes acknowledged (the base included).
    acknowledged: Vec<usize>,
    /// The first call that failed and its error.
    failed: Option<(String, String)>,
    /// A call that panicked and its message.
    panicked: Option<(String, String)>,
    /// `(operation, verdict)` after the failure.
    after: Vec<(String, String)>,
    /// The child got to its end.
    done: bool,
}

impl Report {
    fn read(lines: &[String], base: usize) -> Result<Report, Failure> {
        let mut report = Report { acknowledged: (0..base).collect(), ..Report::default() };
        let split = |rest: &str| {
            let (a, b) = rest.split_once(' ').unwrap_or((rest, ""));
            (a.to_owned(), b.to_owned())
        };
        for line in lines {
            let (word, rest) = line.split_once(' ').unwrap_or((line, ""));
            match word {
                "acknowledged" => {
                    for n in rest.split(',') {
                        let n = n.parse().map_err(|_| {
                            Failure::new(
                                "the I/O-error child's output",
                                "acknowledged <n,..>",
                                line,
                            )
                        })?;
                        report.acknowledged.push(n);
                    }
                }
                "failed" => report.failed = Some(split(rest)),
                "panicked" => report.panicked = Some(split(rest)),
                "after" => report.after.push(split(rest)),
                "done" => report.done = true,
                _ => {}
            }
        }
        Ok(report)
    }
}

/// How one child run ended.
enum Ran {
    /// The dry run: the calls it made of the fault's kind.
    Counted(u64),
    /// The fault's call was never reached (the run made fewer calls than the dry run), or only
    /// while the handle was dropped.
    NotReached,
    /// The fault fired and every check held.
    Checked,
    /// The run cannot vouch for anything: why.
    Unusable(String),
}

/// Makes `fsync` fail once with `EIO`, and the disk fill up in the middle of a `write`, at the
/// first, a middle and the last such call of a writer child that opens a cache (with `resume`;
/// else creates it), puts, flushes and finalizes. Every call answers with `Ok` or an error (no
/// panic), some call reports the fault, a failed flush or finalize poisons the handle, no flush
/// is acknowledged after a failed fsync, and every sample a flush acknowledged reads back exact
/// from a fresh open, also after a power cut right after the child. See the module docs.
///
/// Needs a child process, the interposers (Linux) and caches that are local files; SKIPPED
/// without them or when no fault fired.
pub fn io_errors_are_reported_and_lose_no_flushed_sample(ctx: &CaseContext<'_>) -> CaseResult {
    if let Some(why) = crate::crash::not_local_files(ctx) {
        return Ok(Outcome::Skipped(why));
    }
    if !ctx.caps().durable_flush {
        return Ok(Outcome::Skipped(crate::power_loss::NOT_DURABLE.into()));
    }
    let Some(launcher) = &ctx.child else {
        return Ok(Outcome::Skipped(
            "needs a child process: runs under backend_conformance!, not run_all".into(),
        ));
    };
    let (Some(library), Some(_)) = (injector::library(), durable_image::library()) else {
        let why = match injector::library() {
            None => injector::UNAVAILABLE,
            Some(_) => durable_image::UNAVAILABLE,
        };
        return Ok(Outcome::Skipped(format!("needs {why}")));
    };
    let mut checked = 0;
    let mut notes = Vec::new();
    for (k, kind) in FAULTS.into_iter().enumerate() {
        let run = |name: String, after| run_trial(ctx, launcher, &library, kind, after, &name);
        let calls = match run(format!("io{k}-dry"), None)? {
            Ran::Counted(calls) => calls,
            Ran::Unusable(why) => return Ok(Outcome::Skipped(why)),
            Ran::NotReached | Ran::Checked => unreachable!("a dry run only counts"),
        };
        if calls == 0 {
            notes.push(format!("{}: the writer made no such call", kind.label()));
            continue;
        }
        let mut points = vec![0, calls / 2, calls - 1];
        points.dedup();
        for point in points {
            match run(format!("io{k}-at{point}"), Some(point))? {
                Ran::Checked => checked += 1,
                Ran::NotReached => {
                    let label = kind.label();
                    notes.push(format!("{label} at call {point}: not reached before the drop"));
                }
                Ran::Unusable(why) => return Ok(Outcome::Skipped(why)),
                Ran::Counted(_) => unreachable!("a trial with a fault point does not count"),
            }
        }
    }
    if checked == 0 {
        return Ok(Outcome::Skipped(format!(
            "needs a fault that fires: the writer made no write or fsync call the faultinject \
             interposer could fail (do its writes bypass libc?): {}",
            notes.join("; ")
        )));
    }
    Ok(Outcome::Passed)
}

/// One child run with `kind` failing at call `after` (`None`: the dry run, which only counts),
/// in the directory `<case dir>/<name>`, and its checks.
fn run_trial(
    ctx: &CaseContext<'_>,
    launcher: &ChildLauncher,
    library: &Path,
    kind: FaultKind,
    after: Option<u64>,
    name: &str,
) -> Result<Ran, Failure> {
    let work = canonical(ctx.dir).join(name);
    let io = |what: &str, e: std::io::Error| {
        Failure::new(format!("{what} in {}", work.display()), "success", e)
    };
    let image = DurableImage::prepare(&work.join("image"))
        .map_err(|e| io("preparing the durable image", e))?;
    let dir = image.root().join("cache");
    let schema = basic_schema(ctx.caps());
    let base = if ctx.caps().resume { BASE } else { 0 };
    if base > 0 {
        let what = "writing the cache the writer child resumes (no fault yet)";
        let mut cache =
            ok("create", ctx.factory.create(&dir, &schema)).map_err(|f| f.within(what))?;
        crate::cases::put_samples(&mut *cache, &schema, 0..base).map_err(|f| f.within(what))?;
        ok("flush", cache.flush()).map_err(|f| f.within(what))?;
        drop(cache);
        // Written without the interposer: all of it counts as durable.
        image.sync_all().map_err(|e| io("recording the base cache as durable", e))?;
    }
    let injection = Injection {
        kind,
        after,
        dir: dir.clone(),
        stop: work.join("stop"),
        log: work.join("faultinject.log"),
    };
    // faultfs first: the fsync it forwards is faultinject's, whose failures it then sees.
    let mut env = injection.env(library);
    env.retain(|(name, _)| name != "LD_PRELOAD");
    let preload = library.display().to_string();
    env.extend(image.env(&preload).map_err(|e| Failure::new("loading faultfs", "success", e))?);
    let mut env = preload_env(env);
    env.push((BASE_ENV.into(), base.to_string().into()));
    env.push((STOP_ENV.into(), injection.stop.clone().into()));
    let stderr = work.join("child.stderr");
    let mut child = Child::spawn(launcher, Mode::IoErrors, &dir, &stderr, 0, &env)?;
    let mut lines = Vec::new();
    while let Some(line) = child.next_line()? {
        lines.push(line);
    }
    lines.extend(child.finish());
    let report = Report::read(&lines, base)?;
    let log = InjectionLog::read(&injection.log);
    let fault = match after {
        Some(n) => format!("{} at call {n}", kind.label()),
        None => format!("dry run of {} (nothing fails)", kind.label()),
    };
    let fired = log.first_fired();
    let what = match &fired {
        Some(fired) => format!("{fault}: {fired}"),
        None => fault.clone(),
    };
    if let Some((step, message)) = &report.panicked {
        return Err(Failure::new(
            format!("{step} in the writer child ({what})"),
            "Ok or an error, never a panic",
            format!("a panic: {message}"),
        )
        .clause("flush.io-failure-is-error"));
    }
    if !report.done {
        return Err(Failure::new(
            format!("the writer child ({what})"),
            "it runs to its end (every call answers Ok or an error)",
            format!("it died after {lines:?}; its stderr: {}", child.stderr_text()),
        )
        .clause("flush.io-failure-is-error"));
    }
    if !log.loaded || !image.was_loaded() {
        return Ok(Ran::Unusable(
            "needs the faultinject and faultfs interposers loaded into the writer child, but \
             LD_PRELOAD had no effect (a statically linked test binary?)"
                .into(),
        ));
    }
    let unmodeled = image.unmodeled();
    if !unmodeled.is_empty() {
        return Ok(Ran::Unusable(format!(
            "needs writes the power-loss model can follow (write/pwrite and fsync); the backend \
             also did {unmodeled:?}"
        )));
    }
    if after.is_none() {
        if let Some((step, error)) = &report.failed {
            return Err(Failure::new(
                format!("{step} in the {fault}"),
                "success",
                format!("an error: {error}"),
            ));
        }
        return Ok(Ran::Counted(log.calls.unwrap_or(0)));
    }
    let Some(fired) = fired else { return Ok(Ran::NotReached) };
    if !fired_before_drop(&injection.log) {
        // Only dropping the handle made the call (after everything was acknowledged or
        // refused): nothing could report the fault, and nothing the checks look at depends on it.
        return Ok(Ran::NotReached);
    }
    let Some((step, error)) = &report.failed else {
        return Err(Failure::new(
            format!("the writer child ({fault})"),
            format!("an error from the call {fired} failed in, or from a later flush or finalize"),
            "Ok from every open, put, flush and finalize (a silent success)",
        )
        .clause("flush.io-failure-is-error"));
    };
    let context = format!("{fault}; {step} failed with: {error} ({fired})");
    if step == "flush" || step == "finalize" {
        check_poisoned(&report.after, step, &context)?;
    }
    check_no_ack_after_failed_sync(&report, &image, kind, &context)?;
    // What a power cut right after the child would leave, before anything else opens the cache.
    let durable = work.join("durable");
    let rebuilt =
        image.durable_copy(&durable).map_err(|e| io("rebuilding the durable image", e))?;
    let dropped = image.dropped();
    check_reopened(ctx, &schema, &dir, &report.acknowledged)
        .map_err(|f| f.within(&context).clause("flush.io-failure-is-error"))?;
    check_reopened(ctx, &schema, &durable.join("cache"), &report.acknowledged).map_err(|f| {
        f.within(format!(
            "{context}; then a power cut (it lost {} changed files; failed fsyncs dropped \
             pages: {dropped:?})",
            rebuilt.lost
        ))
        .clause("flush.crash-keeps-flushed")
    })?;
    Ok(Ran::Checked)
}

/// After a failed fsync, whatever the step, the kernel may have dropped the pages it could not
/// write, and a retried fsync "succeeds" without them: the same handle must not acknowledge
/// anything more, neither a put and a flush, nor (once pages were dropped) a flush or finalize.
fn check_no_ack_after_failed_sync(
    report: &Report,
    image: &DurableImage,
    kind: FaultKind,
    context: &str,
) -> Result<(), Failure> {
    let answer = |op: &str| report.after.iter().find(|(o, _)| o == op).map(|(_, v)| v.as_str());
    let dropped: Vec<String> = image
        .dropped()
        .into_iter()
        .filter(|line| line.split(' ').nth(2).and_then(|n| n.parse::<u64>().ok()) > Some(0))
        .collect();
    let failed_sync = kind.op == Op::Fsync;
    let acknowledged = match (answer("put"), answer("flush"), answer("finalize")) {
        (Some("ok"), Some("ok"), _) if failed_sync => Some("a put and a flush"),
        (_, Some("ok"), _) if !dropped.is_empty() => Some("a flush"),
        (_, _, Some("ok")) if !dropped.is_empty() => Some("a finalize"),
        _ => None,
    };
    match acknowledged {
        Some(what) => Err(Failure::new(
            format!("the same handle after the failed fsync ({context}; dropped: {dropped:?})"),
            "Error::Poisoned (nothing acknowledged that the failed fsync may have lost)",
            format!("Ok from {what}"),
        )
        .clause("put.not-durable-is-error")),
        None => Ok(()),
    }
}

/// A fresh read-only open of `dir` holds every `acknowledged` sample exact, and every key it
/// lists is a generated one holding exactly its sample. Nothing acknowledged: nothing to find
/// (a cache whose create failed need not open).
fn check_reopened(
    ctx: &CaseContext<'_>,
    schema: &Schema,
    dir: &Path,
    acknowledged: &[usize],
) -> Result<(), Failure> {
    if acknowledged.is_empty() {
        return Ok(());
    }
    let reader = ok("reopen read-only", ctx.factory.open(dir, OpenMode::ReadOnly))?;
    for &i in acknowledged {
        let k = key(i);
        let got = ok(&format!("get {k:?}"), reader.get(&k));
        got.and_then(|got| compare_sample(&k, &sample_for(schema, i as u64), got.as_ref()))
            .map_err(|f| f.within("a sample a flush acknowledged"))?;
    }
    for k in ok("keys", reader.keys())? {
        let i: usize = k.strip_prefix("sample-").and_then(|n| n.parse().ok()).ok_or_else(|| {
            Failure::new("keys() after the fault", "only keys the writer put", format!("{k:?}"))
        })?;
        let got = ok(&format!("get of listed {k:?}"), reader.get(&k))?;
        compare_sample(&k, &sample_for(schema, i as u64), got.as_ref())
            .map_err(|f| f.within("a listed sample after the fault (partial?)"))?;
    }
    Ok(())
}
