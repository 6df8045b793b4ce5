//! The writer process of the live trial: creates the cache, puts the [`Schedule`]'s samples in
//! random batches at a steady pace, flushes after most batches, announces and acknowledges in the
//! progress file, and finalizes when its time is up.

use super::progress::ProgressWriter;
use super::schedule::{Schedule, key, schema, value};
use rand::{Rng, SeedableRng, rngs::StdRng};
use serde_json::json;
use std::io::Write;
use std::path::Path;
use std::time::{Duration, Instant};
use stowage_core::BackendFactory;

/// Puts per second the writer aims at. Bounded so that a 60 s run stays a cache readers can
/// reopen many times (tens of thousands of samples, hundreds of flushes), on every backend alike.
pub const PUT_RATE: f64 = 400.0;

/// The largest batch between two flush points.
pub const MAX_BATCH: u64 = 48;

/// How long and how much the writer writes.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Pace {
    /// Seconds of steady writing at [`PUT_RATE`] (after the preload).
    pub seconds: f64,
    /// Distinct keys written first at full speed, in batches of
    /// [`crate::corruption::scale::realistic_flush_every`] each followed by a flush (the realistic
    /// form: 100,000 keys, 2,000 Arrow segments), while the readers already read.
    pub preload: u64,
}

/// What the writer did, as it reports it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WriterSummary {
    /// Samples put.
    pub puts: u64,
    /// Flushes that returned (each acknowledged in the progress file).
    pub flushes: u64,
    /// Distinct keys.
    pub keys: u64,
}

impl WriterSummary {
    /// The summary from the writer's `summary` line.
    pub fn parse(text: &str) -> Result<WriterSummary, String> {
        let v: serde_json::Value =
            serde_json::from_str(text).map_err(|e| format!("writer summary {text:?}: {e}"))?;
        let field = |name: &str| {
            v[name].as_u64().ok_or_else(|| format!("writer summary {text:?} lacks {name:?}"))
        };
        Ok(WriterSummary { puts: field("puts")?, flushes: field("flushes")?, keys: field("keys")? })
    }
}

/// The writer's side: prints `created` once the cache exists, then `summary <json>` after the
/// finalize. Errors name the backend, the seed and the put.
pub fn run(
    factory: &dyn BackendFactory,
    dir: &Path,
    progress: &Path,
    seed: u64,
    pace: Pace,
    out: &mut dyn Write,
) -> Result<(), String> {
    let Pace { seconds, preload } = pace;
    let backend = factory.name();
    let caps = factory.capabilities();
    let schema = schema(&caps);
    let fail = |what: String, e: stowage_core::Error| {
        format!("{backend} writer (seed {seed}): {what}: {e}")
    };
    let mut cache = factory.create(dir, &schema).map_err(|e| fail("create".into(), e))?;
    let mut progress = ProgressWriter::create(progress)?;
    let say = |out: &mut dyn Write, line: String| {
        writeln!(out, "{line}").and_then(|()| out.flush()).map_err(|e| format!("stdout: {e}"))
    };
    say(out, "created".into())?;
    let mut schedule = Schedule::new(seed, caps.overwrite);
    let mut rng = StdRng::seed_from_u64(seed ^ 0x0037_17E4);
    let mut summary = WriterSummary::default();
    let preload_batch = crate::corruption::scale::realistic_flush_every(backend) as u64;
    while (schedule.keys_created_by(summary.puts) as u64) < preload {
        let end = summary.puts + preload_batch;
        progress.announce(end)?;
        put_ops(&mut *cache, &mut schedule, &schema, seed, summary.puts..end)
            .map_err(|(what, e)| fail(what, e))?;
        summary.puts = end;
        cache.flush().map_err(|e| fail(format!("flush after put {end}"), e))?;
        summary.flushes += 1;
        progress.acknowledge(end)?;
    }
    // The steady phase's pace counts from the end of the preload.
    let (started, preloaded) = (Instant::now(), summary.puts);
    while started.elapsed().as_secs_f64() < seconds {
        let end = summary.puts + rng.random_range(1..=MAX_BATCH);
        progress.announce(end)?;
        put_ops(&mut *cache, &mut schedule, &schema, seed, summary.puts..end)
            .map_err(|(what, e)| fail(what, e))?;
        summary.puts = end;
        // Most batches end in a flush; the others make the next flush cover two batches.
        if rng.random_ratio(7, 8) {
            cache.flush().map_err(|e| fail(format!("flush after put {end}"), e))?;
            summary.flushes += 1;
            progress.acknowledge(end)?;
        }
        let due = Duration::from_secs_f64((summary.puts - preloaded) as f64 / PUT_RATE);
        if let Some(wait) = due.checked_sub(started.elapsed()) {
            std::thread::sleep(wait);
        }
    }
    cache.finalize().map_err(|e| fail(format!("finalize after put {}", summary.puts), e))?;
    summary.flushes += 1;
    progress.done(summary.puts)?;
    summary.keys = schedule.keys_created_by(summary.puts) as u64;
    let line = json!({"puts": summary.puts, "flushes": summary.flushes, "keys": summary.keys});
    say(out, format!("summary {line}"))
}

/// Puts ops `ops` of `schedule`, each its key's value for that op; the failing op's description
/// and error otherwise.
fn put_ops(
    cache: &mut stowage_core::DynBackend,
    schedule: &mut Schedule,
    schema: &stowage_core::Schema,
    seed: u64,
    ops: std::ops::Range<u64>,
) -> Result<(), (String, stowage_core::Error)> {
    for op in ops {
        let n = schedule.key_of(op);
        cache
            .put(&key(n), &value(schema, seed, n, op))
            .map_err(|e| (format!("put {op} (key {:?})", key(n)), e))?;
    }
    Ok(())
}
