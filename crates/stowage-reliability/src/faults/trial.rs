//! One resource-fault trial: a cache with flushed samples, a child process (with the interposer
//! armed) that resumes it and writes until an operation fails, then the checks.
//!
//! The child: open for append; three batches of [`BATCH`] puts, each followed by a flush; then
//! finalize. At the first error it creates
//! the stop file (the fault ends: the disk was freed), then tries one more put, flush and
//! finalize on the same handle, and prints `result <json>`. The child runs under the power-loss
//! model too (the `faultfs` interposer, loaded before `faultinject`, so that it sees each
//! injected fsync failure and drops the pages that fsync could not write). The parent, in a
//! process the interposers never touched, then checks:
//!
//! 1. an operation returned an error (a fault that fired but left every call `Ok` is a silent
//!    success);
//! 2. after a failed fsync, or a failed flush or finalize, the same handle refused the next put
//!    or flush (the fault was over by then, so only the handle itself can refuse);
//! 3. after an fsync that failed on a file holding unsynced data (the model dropped pages of
//!    it), the same handle acknowledged nothing: no later flush or finalize returned `Ok`;
//! 4. a fresh read-only open holds every sample acknowledged before and after the fault,
//!    intact, and every other listed key holds its sample;
//! 5. a fresh writer resumes the cache, writes and finalizes it, and `validate(Full)` is then
//!    clean;
//! 6. 4 and 5 again on the tree a power cut right after the child would leave (the durable
//!    image): every acknowledged sample's bytes are durable, whatever the failed fsync dropped.

use crate::backends::Subject;
use crate::checks::validate_clean;
use crate::concurrency::process::Child;
use crate::concurrency::schedule::schema;
use serde_json::json;
use std::io::Write;
use std::path::Path;
use std::time::Duration;
use stowage_conformance::cases::put_generated;
use stowage_conformance::durable_image::DurableImage;
use stowage_conformance::generate::{compare, key, sample_for};
use stowage_conformance::injector::{Injection, InjectionLog, Op};
use stowage_core::{Backend, BackendFactory, OpenMode, Schema};

/// Samples flushed before the child starts (the realistic runs copy a bigger cache instead).
pub const BASE: usize = 16;
/// Samples per batch of the child.
pub const BATCH: usize = 16;
/// Batches of the child.
const BATCHES: usize = 3;
/// The key number the child's post-failure put uses (above any base cache's).
const AFTER_FAILURE: usize = 900_000_000;
/// The key numbers of the resuming writer.
const RESUMED: std::ops::Range<usize> = 800_000_000..800_000_004;
/// The bound on a child's run.
const TIMEOUT: Duration = Duration::from_secs(180);

/// What the child reports.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ChildResult {
    /// The first operation that failed (`open`, `put sample-000020`, `flush`, `finalize`) and
    /// its error; `None` when everything succeeded.
    pub failed: Option<(String, String)>,
    /// After the failure, what the same handle answered to a put, a flush and a finalize (`ok`
    /// or the error).
    pub after_failure: Option<(String, String, String)>,
    /// The key numbers of the samples acknowledged by flushes that returned (the base included).
    pub acknowledged: Vec<usize>,
}

/// The child's side, run under the interposer, on a cache holding samples `0..base`. Errors only
/// for a broken stdout.
pub fn child(
    factory: &dyn BackendFactory,
    dir: &Path,
    stop: &Path,
    base: usize,
    out: &mut dyn Write,
) -> Result<(), String> {
    let schema = schema(&factory.capabilities());
    let mut result = ChildResult { acknowledged: (0..base).collect(), ..ChildResult::default() };
    let mut say = |result: &ChildResult| {
        writeln!(out, "result {}", encode(result))
            .and_then(|()| out.flush())
            .map_err(|e| format!("stdout: {e}"))
    };
    let mut cache = match factory.open(dir, OpenMode::Append) {
        Ok(cache) => cache,
        Err(e) => {
            result.failed = Some(("open".into(), e.to_string()));
            return say(&result);
        }
    };
    // Put since the last flush that returned: acknowledged by the next one.
    let mut unflushed = Vec::new();
    let flush = |cache: &mut Box<stowage_core::DynBackend>,
                 result: &mut ChildResult,
                 unflushed: &mut Vec<usize>| {
        cache.flush().map(|()| result.acknowledged.append(unflushed))
    };
    let failed = 'write: {
        for batch in 0..BATCHES {
            for i in base + batch * BATCH..base + (batch + 1) * BATCH {
                if let Err(e) = cache.put(&key(i), &sample_for(&schema, i as u64)) {
                    break 'write Some((format!("put {}", key(i)), e.to_string()));
                }
                unflushed.push(i);
            }
            if let Err(e) = flush(&mut cache, &mut result, &mut unflushed) {
                break 'write Some(("flush".to_string(), e.to_string()));
            }
        }
        cache.finalize().err().map(|e| ("finalize".to_string(), e.to_string()))
    };
    if let Some(failure) = failed {
        result.failed = Some(failure);
        std::fs::write(stop, b"").map_err(|e| format!("creating {}: {e}", stop.display()))?;
        let answer = |r: &stowage_core::Result<()>| {
            r.as_ref().map_or_else(|e| e.to_string(), |()| "ok".into())
        };
        let put = cache.put(&key(AFTER_FAILURE), &sample_for(&schema, AFTER_FAILURE as u64));
        if put.is_ok() {
            unflushed.push(AFTER_FAILURE);
        }
        // A flush that returns Ok vouches for everything put since the last one that did.
        let flushed = flush(&mut cache, &mut result, &mut unflushed);
        // So does a finalize (which flushes first).
        let finalized = cache.finalize().map(|()| result.acknowledged.append(&mut unflushed));
        result.after_failure = Some((answer(&put), answer(&flushed), answer(&finalized)));
    }
    drop(cache);
    say(&result)
}

fn encode(result: &ChildResult) -> String {
    json!({
        "failed": result.failed.as_ref().map(|(step, e)| json!([step, e])),
        "after_failure": result.after_failure.as_ref().map(|(p, f, z)| json!([p, f, z])),
        "acknowledged": result.acknowledged,
    })
    .to_string()
}

fn decode(text: &str) -> Result<ChildResult, String> {
    let v: serde_json::Value =
        serde_json::from_str(text).map_err(|e| format!("child result {text:?}: {e}"))?;
    let pair =
        |v: &serde_json::Value| Some((v[0].as_str()?.to_string(), v[1].as_str()?.to_string()));
    let triple = |v: &serde_json::Value| {
        let (p, f) = pair(v)?;
        Some((p, f, v[2].as_str()?.to_string()))
    };
    Ok(ChildResult {
        failed: pair(&v["failed"]),
        after_failure: triple(&v["after_failure"]),
        acknowledged: v["acknowledged"]
            .as_array()
            .ok_or("child result lacks acknowledged")?
            .iter()
            .filter_map(|n| n.as_u64().map(|n| n as usize))
            .collect(),
    })
}

/// How a trial ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Every check held; the operation that failed and the call the fault hit.
    Passed {
        /// `flush`, `put sample-000020`, ...
        step: String,
        /// `fdatasync #3 on <file>`.
        fired: String,
    },
    /// The fault never fired (the point is past the child's last matching call): not a pass.
    NotReached,
    /// A check failed; the message names the backend, fault, point, file and both sides.
    Failed(String),
}

/// How to run one trial's child.
#[derive(Debug, Clone)]
pub struct Launch<'a> {
    /// The `faults` binary.
    pub exe: &'a Path,
    /// The interposer.
    pub library: &'a Path,
    /// The trial's own empty directory.
    pub work: &'a Path,
    /// A cache holding samples `0..base_samples` to start from (copied), instead of a new one
    /// with [`BASE`] samples.
    pub base: Option<&'a Path>,
    /// The samples of `base`.
    pub base_samples: usize,
}

/// Builds the base cache in `launch.work`, runs the child under `injection` (its `dir`, `stop`
/// and `log` are set here), and checks. `label` names the trial in every message.
pub fn run(
    launch: &Launch<'_>,
    subject: &Subject,
    mut injection: Injection,
    label: &str,
) -> Result<(Verdict, InjectionLog), String> {
    let factory = &*subject.factory;
    let schema = schema(&factory.capabilities());
    // The interposers compare the kernel's names of open files, which are canonical.
    let work = launch
        .work
        .canonicalize()
        .map_err(|e| format!("{label}: {}: {e}", launch.work.display()))?;
    let image = DurableImage::prepare(&work.join("image"))
        .map_err(|e| format!("{label}: preparing the durable image: {e}"))?;
    let dir = image.root().join("cache");
    let base = match launch.base {
        Some(pristine) => {
            copy_tree(pristine, &dir).map_err(|e| format!("{label}: copying the base: {e}"))?;
            launch.base_samples
        }
        None => {
            let mut cache =
                factory.create(&dir, &schema).map_err(|e| format!("{label}: create: {e}"))?;
            put_generated(&mut *cache, &schema, 0..BASE).map_err(|e| format!("{label}: {e}"))?;
            cache.flush().map_err(|e| format!("{label}: flush: {e}"))?;
            BASE
        }
    };
    // The base was written without the interposer: all of it counts as durable.
    image.sync_all().map_err(|e| format!("{label}: recording the base as durable: {e}"))?;
    injection.dir = dir.clone();
    injection.stop = work.join("stop");
    injection.log = work.join("faultinject.log");
    let args = vec![
        "--child".to_string(),
        "--backends".into(),
        subject.name.into(),
        "--dir".into(),
        injection.dir.display().to_string(),
        "--stop".into(),
        injection.stop.display().to_string(),
        "--base".into(),
        base.to_string(),
    ];
    let stderr = work.join("child.stderr");
    // faultfs first: the fsync it forwards is faultinject's, whose failures it then sees.
    let mut env = injection.env(launch.library);
    env.retain(|(name, _)| name != "LD_PRELOAD");
    env.extend(image.env(&launch.library.display().to_string())?);
    let mut child = Child::spawn(label, launch.exe, &args, &env, &stderr)?;
    let outcome = child.expect("result", TIMEOUT).and_then(|text| {
        // Kept beside the cache, for whoever investigates the trial.
        let _ = std::fs::write(work.join("child.result"), &text);
        decode(&text)
    });
    let status = child.wait(TIMEOUT);
    let log = InjectionLog::read(&injection.log);
    let result = match (outcome, status) {
        (Ok(result), Ok(status)) if status.success() => result,
        (outcome, status) => {
            let why =
                outcome.err().or(status.err()).unwrap_or_else(|| "exited with failure".into());
            let fired = log.first_fired().unwrap_or_else(|| "no fault fired".into());
            return Ok((
                Verdict::Failed(format!("{label}: the child failed ({fired}): {why}")),
                log,
            ));
        }
    };
    if !log.loaded {
        return Err(format!("{label}: the interposer {} was not loaded", launch.library.display()));
    }
    if !image.was_loaded() {
        return Err(format!("{label}: the faultfs interposer was not loaded"));
    }
    let unmodeled = image.unmodeled();
    if !unmodeled.is_empty() {
        let why = format!("{label}: writes the power-loss model cannot follow: {unmodeled:?}");
        return Ok((Verdict::Failed(why), log));
    }
    // Before the checks write to the cache: what a power cut right now would leave.
    let durable = work.join("durable");
    image
        .durable_copy(&durable)
        .map_err(|e| format!("{label}: rebuilding the durable image: {e}"))?;
    let trial = Trial {
        factory,
        schema: &schema,
        result: &result,
        log: &log,
        fsync: injection.kind.op == Op::Fsync,
        dropped: image.dropped(),
        label,
    };
    let verdict = check(&trial, &dir, &durable.join("cache"));
    Ok((verdict, log))
}

/// Copies the tree `from` to `to` (which must not exist): directories and regular files.
fn copy_tree(from: &Path, to: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(to)?;
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        let target = to.join(entry.file_name());
        if entry.file_type()?.is_dir() {
            copy_tree(&entry.path(), &target)?;
        } else {
            std::fs::copy(entry.path(), &target)?;
        }
    }
    Ok(())
}

/// What the checks of one trial look at.
struct Trial<'a> {
    factory: &'a dyn BackendFactory,
    schema: &'a Schema,
    result: &'a ChildResult,
    log: &'a InjectionLog,
    /// The fault was an fsync's.
    fsync: bool,
    /// Each failed fsync that dropped pages (the interposer's `dropped` lines).
    dropped: Vec<String>,
    label: &'a str,
}

fn check(trial: &Trial<'_>, dir: &Path, durable: &Path) -> Verdict {
    let Trial { factory, schema, result, log, fsync, label, .. } = *trial;
    let Some(fired) = log.first_fired() else { return Verdict::NotReached };
    let Some((step, error)) = &result.failed else {
        return Verdict::Failed(format!(
            "{label}: silent success: {fired} failed but every open, put, flush and finalize \
             returned Ok"
        ));
    };
    let failed = |why: String| {
        Verdict::Failed(format!("{label}: after {step} failed ({fired}: {error}): {why}"))
    };
    // After a failed fsync whatever the step (the kernel may have dropped the pages it could not
    // write, and a retried fsync reports success), after another failure only in flush and
    // finalize: a failed put may leave nothing behind that a flush would commit.
    if let Some((put, flush, _)) = &result.after_failure
        && (fsync || step == "flush" || step == "finalize")
        && put == "ok"
        && flush == "ok"
    {
        return failed(
            "the same handle then accepted a put and a flush (expected it to refuse)".into(),
        );
    }
    // A failed fsync that dropped unsynced pages: whatever the handle acknowledges afterwards
    // may lie on them (a later fsync "succeeds" without writing them).
    let lost: Vec<&String> = trial.dropped.iter().filter(|line| dropped_pages(line) > 0).collect();
    if let (Some(first), Some((_, flush, finalize))) = (lost.first(), &result.after_failure)
        && (flush == "ok" || finalize == "ok")
    {
        let what = if flush == "ok" { "flush" } else { "finalize" };
        return failed(format!(
            "the same handle then acknowledged data with a successful {what} after the failed \
             fsync had dropped unsynced pages ({first})"
        ));
    }
    if let Err(why) = verify_reopened(factory, schema, dir, &result.acknowledged) {
        return failed(why);
    }
    if let Err(why) = resume(factory, schema, dir) {
        return failed(why);
    }
    let dropped = if trial.dropped.is_empty() {
        String::new()
    } else {
        format!(" (failed fsyncs dropped pages: {:?})", trial.dropped)
    };
    if let Err(why) = verify_reopened(factory, schema, durable, &result.acknowledged) {
        return failed(format!("after a power cut{dropped}: {why}"));
    }
    if let Err(why) = resume(factory, schema, durable) {
        return failed(format!("after a power cut{dropped}: {why}"));
    }
    Verdict::Passed { step: step.clone(), fired }
}

/// The pages a `dropped <inode> <pages> <path>` line of the interposer says were dropped.
fn dropped_pages(line: &str) -> u64 {
    line.split(' ').nth(2).and_then(|n| n.parse().ok()).unwrap_or(0)
}

/// A fresh read-only open holds every acknowledged sample intact, and nothing else but intact
/// generated samples. (`validate` may still report an interrupted commit here, such as a
/// finalize whose marker could not be written: [`resume`] requires it clean once a writer has
/// reopened the cache.)
fn verify_reopened(
    factory: &dyn BackendFactory,
    schema: &Schema,
    dir: &Path,
    acknowledged: &[usize],
) -> Result<(), String> {
    let reader =
        factory.open(dir, OpenMode::ReadOnly).map_err(|e| format!("read-only reopen: {e}"))?;
    let keys = reader.keys().map_err(|e| format!("keys: {e}"))?;
    for &i in acknowledged {
        check_key(&*reader, schema, i).map_err(|e| format!("acknowledged sample: {e}"))?;
    }
    for k in &keys {
        let i = k
            .strip_prefix("sample-")
            .and_then(|n| n.parse().ok())
            .ok_or_else(|| format!("unexpected key {k:?}"))?;
        check_key(&*reader, schema, i).map_err(|e| format!("listed sample: {e}"))?;
    }
    Ok(())
}

fn check_key(reader: &dyn Backend, schema: &Schema, i: usize) -> Result<(), String> {
    let got = reader.get(&key(i)).map_err(|e| format!("get {:?}: {e}", key(i)))?;
    compare(&key(i), &sample_for(schema, i as u64), got.as_ref())
}

/// A fresh writer opens the cache (finishing what the failure interrupted), writes and
/// finalizes it (only opens it, when it is finalized and takes no more); the result reads back
/// and validates clean.
fn resume(factory: &dyn BackendFactory, schema: &Schema, dir: &Path) -> Result<(), String> {
    let mut cache = factory.open(dir, OpenMode::Append).map_err(|e| format!("resume: {e}"))?;
    let appends = !cache.is_finalized() || cache.capabilities().append_after_finalize;
    if appends {
        put_generated(&mut *cache, schema, RESUMED).map_err(|e| format!("resume: {e}"))?;
        cache.finalize().map_err(|e| format!("finalize after resuming: {e}"))?;
    }
    drop(cache);
    let reader =
        factory.open(dir, OpenMode::ReadOnly).map_err(|e| format!("reopen after resuming: {e}"))?;
    if appends {
        for i in RESUMED {
            check_key(&*reader, schema, i).map_err(|e| format!("after resuming: {e}"))?;
        }
    }
    validate_clean(&*reader).map_err(|e| format!("after a writer reopened the cache: {e}"))
}
