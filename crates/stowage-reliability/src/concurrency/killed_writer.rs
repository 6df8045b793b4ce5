//! A writer killed with SIGKILL while it holds the lock does not block the next writer: once
//! the dead process is reaped, an open for append succeeds (retried for a bounded time, and the
//! number of attempts reported), every sample its flushes acknowledged is there and intact, and
//! the cache takes more writes.
//!
//! The lock is an OS lock that dies with its process, so the first attempt should succeed; the
//! retries only bound the wait, so that a backend that kept a lock of its own (a stale lock
//! file, say) fails after [`LOCK_WAIT`] instead of hanging the campaign.

use super::child::{ChildArgs, Role};
use super::process::Child;
use crate::backends::Subject;
use crate::checks::validate_clean;
use rand::{Rng, SeedableRng, rngs::StdRng};
use std::io::Write;
use std::path::Path;
use std::time::{Duration, Instant};
use stowage_conformance::cases::put_generated;
use stowage_conformance::generate::{basic_schema, compare, key, sample_for};
use stowage_core::{Backend, BackendFactory, Error, OpenMode};

/// Samples in the cache before the holder opens it.
const BASE: usize = 8;
/// How long the next writer keeps trying.
pub const LOCK_WAIT: Duration = Duration::from_secs(10);
/// The holder stops by itself after this long, so a parent that fails to kill it leaks nothing.
const HOLDER_LIFETIME: Duration = Duration::from_secs(120);
const TIMEOUT: Duration = Duration::from_secs(120);

/// The holder's side: opens the cache for append, says `holding`, then puts samples
/// `BASE..` and flushes at random points, saying `flushed <count>` after each flush, until
/// killed.
pub fn holder(
    factory: &dyn BackendFactory,
    dir: &Path,
    seed: u64,
    out: &mut dyn Write,
) -> Result<(), String> {
    let say = |out: &mut dyn Write, line: String| {
        writeln!(out, "{line}").and_then(|()| out.flush()).map_err(|e| format!("stdout: {e}"))
    };
    let schema = basic_schema(&factory.capabilities());
    let mut cache =
        factory.open(dir, OpenMode::Append).map_err(|e| format!("open for append: {e}"))?;
    say(out, "holding".into())?;
    let mut rng = StdRng::seed_from_u64(seed);
    let started = Instant::now();
    let mut i = BASE;
    while started.elapsed() < HOLDER_LIFETIME {
        cache.put(&key(i), &sample_for(&schema, i as u64)).map_err(|e| format!("put {i}: {e}"))?;
        i += 1;
        if rng.random_ratio(1, 6) {
            cache.flush().map_err(|e| format!("flush after put {i}: {e}"))?;
            say(out, format!("flushed {i}"))?;
        }
    }
    Ok(())
}

/// What one trial found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KilledWriter {
    /// Append-opens tried before one succeeded (1: the lock was free at once).
    pub attempts: u32,
    /// Samples the killed writer's flushes had acknowledged.
    pub acknowledged: usize,
}

/// One trial on a fresh cache under `work`: start a holder, kill it after a random flush (and a
/// random few microseconds, so sometimes inside a put or a flush), then take the lock.
pub fn trial(
    exe: &Path,
    subject: &Subject,
    work: &Path,
    seed: u64,
    trial: u32,
) -> Result<KilledWriter, String> {
    let factory = &*subject.factory;
    let trial_seed = seed.wrapping_mul(1_000_003).wrapping_add(trial as u64);
    let label = format!("{} killed writer {trial} (seed {trial_seed})", subject.name);
    let mut rng = StdRng::seed_from_u64(trial_seed);
    let path = work.join(format!("killed-{trial}"));
    let schema = basic_schema(&factory.capabilities());
    {
        let mut cache =
            factory.create(&path, &schema).map_err(|e| format!("{label}: create: {e}"))?;
        put_generated(&mut *cache, &schema, 0..BASE).map_err(|e| format!("{label}: {e}"))?;
        cache.flush().map_err(|e| format!("{label}: flush: {e}"))?;
    }
    let args = ChildArgs {
        role: Role::Holder,
        backend: subject.name.into(),
        dir: path.clone(),
        progress: path.clone(),
        seed: trial_seed,
        seconds: 0.0,
        id: trial,
        preload: 0,
    };
    let stderr = work.join(format!("killed-{trial}.stderr"));
    let mut child = Child::spawn(&format!("{label} holder"), exe, &args.to_args(), &[], &stderr)?;
    child.expect("holding", TIMEOUT)?;
    let flushes = rng.random_range(1..=4);
    let mut acknowledged = BASE;
    for _ in 0..flushes {
        acknowledged = parse_count(&child.expect("flushed", TIMEOUT)?)?;
    }
    std::thread::sleep(Duration::from_micros(rng.random_range(0..3000)));
    child.kill()?;
    // Flushes that completed before the kill may have been printed after the last line read.
    while let Ok(rest) = child.expect("flushed", Duration::from_millis(200)) {
        acknowledged = parse_count(&rest)?;
    }
    let started = Instant::now();
    let mut attempts = 0;
    let cache = loop {
        attempts += 1;
        match factory.open(&path, OpenMode::Append) {
            Ok(cache) => break cache,
            Err(Error::Locked { .. }) if started.elapsed() < LOCK_WAIT => {
                std::thread::sleep(Duration::from_millis(20))
            }
            Err(e) => {
                return Err(format!(
                    "{label}: append-open after the holder (pid {}) was killed and reaped, \
                     attempt {attempts} after {:?}: {e}",
                    child.id(),
                    started.elapsed()
                ));
            }
        }
    };
    verify(&*cache, &schema, acknowledged).map_err(|e| format!("{label}: {e}"))?;
    let mut cache = cache;
    let more = 100_000..100_004;
    put_generated(&mut *cache, &schema, more)
        .map_err(|e| format!("{label}: after the kill: {e}"))?;
    cache.finalize().map_err(|e| format!("{label}: finalize after the kill: {e}"))?;
    drop(cache);
    let reader =
        factory.open(&path, OpenMode::ReadOnly).map_err(|e| format!("{label}: reopen: {e}"))?;
    validate_clean(&*reader).map_err(|e| format!("{label}: after resuming: {e}"))?;
    Ok(KilledWriter { attempts, acknowledged })
}

fn parse_count(text: &str) -> Result<usize, String> {
    text.trim().parse().map_err(|_| format!("holder printed \"flushed {text}\""))
}

/// Every acknowledged sample is there and intact, and every other listed key holds its sample.
fn verify(
    cache: &dyn Backend,
    schema: &stowage_core::Schema,
    acknowledged: usize,
) -> Result<(), String> {
    for i in 0..acknowledged {
        let got = cache.get(&key(i)).map_err(|e| format!("get {:?}: {e}", key(i)))?;
        compare(&key(i), &sample_for(schema, i as u64), got.as_ref())
            .map_err(|e| format!("acknowledged sample lost: {e}"))?;
    }
    for k in cache.keys().map_err(|e| format!("keys: {e}"))? {
        let i: usize = k
            .strip_prefix("sample-")
            .and_then(|n| n.parse().ok())
            .ok_or_else(|| format!("unexpected key {k:?}"))?;
        let got = cache.get(&k).map_err(|e| format!("get {k:?}: {e}"))?;
        compare(&k, &sample_for(schema, i as u64), got.as_ref())
            .map_err(|e| format!("partial sample: {e}"))?;
    }
    Ok(())
}
