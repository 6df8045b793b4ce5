//! One backend through one workload: write it with durable flushes, verify every sample, then time
//! opens, random gets (with and without checksums, with latency percentiles) and batched gets.

use std::hint::black_box;
use std::path::Path;
use std::time::Instant;

use serde::Serialize;
use stowage_core::ValidationLevel;

use super::rss;
use super::subject::{Kind, Subject};
use super::workload::Workload;

/// Keys per batched get.
pub const BATCH: usize = 1000;
/// Opens timed (the median is reported).
const OPENS: usize = 15;

/// Random single-key reads: rate and latency.
#[derive(Debug, Clone, Serialize)]
pub struct Reads {
    /// Rows per second over the whole run.
    pub rows_per_s: f64,
    /// Median latency of one get, microseconds.
    pub p50_us: f64,
    /// 99th percentile latency, microseconds.
    pub p99_us: f64,
}

/// Everything measured for one backend and one workload.
#[derive(Debug, Clone, Serialize)]
pub struct Measured {
    /// Rows per second of put + a durable flush every `flush_every` rows + finalize.
    pub write_rows_per_s: f64,
    /// Median time to open the finished cache read-only, milliseconds.
    pub open_ms: f64,
    /// Random gets, every read checked against its checksum.
    pub get: Reads,
    /// Random gets without checksum checks; `None` when the backend always checks.
    pub get_no_checksum: Option<Reads>,
    /// Rows per second of batched gets of [`BATCH`] random keys (checked).
    pub get_batch_rows_per_s: f64,
    /// Bytes of every file of the cache.
    pub bytes_on_disk: u64,
    /// Peak resident memory the backend added over the whole measurement, MiB: the peak minus
    /// what the process held before the cache was created (the generated samples included);
    /// `None`: unknown here.
    pub peak_rss_mib: Option<f64>,
}

/// Writes `workload` into a new cache of `kind` in `dir`, checks it (`validate` at full level,
/// then every sample equal to what was put), then times the reads in `order`.
///
/// Errors: as text naming the backend, the phase and (for a wrong sample) the key.
pub fn measure(
    kind: Kind,
    workload: &Workload,
    dir: &Path,
    flush_every: usize,
    order: &[usize],
) -> Result<Measured, String> {
    let name = kind.name();
    let fail = |phase: &str, e: &dyn std::fmt::Display| format!("{name}: {phase}: {e}");
    let _ = std::fs::remove_dir_all(dir);
    let schema = workload.schema();
    // Generated before timing (a put must not pay for making its sample), and counted out of
    // the backend's memory.
    let samples: Vec<(String, stowage_core::Sample)> =
        (0..workload.rows).map(|i| (workload.key(i), workload.sample(i))).collect();
    rss::reset_peak();
    let baseline = rss::current_mib();

    let mut cache = Subject::create(kind, dir, &schema).map_err(|e| fail("create", &e))?;
    let started = Instant::now();
    let writer = cache.backend();
    for (i, (key, sample)) in samples.iter().enumerate() {
        writer.put(key, sample).map_err(|e| fail("put", &e))?;
        if (i + 1) % flush_every.max(1) == 0 {
            writer.flush().map_err(|e| fail("flush", &e))?;
        }
    }
    writer.finalize().map_err(|e| fail("finalize", &e))?;
    let write_seconds = started.elapsed().as_secs_f64();
    drop(cache);
    let bytes_on_disk = directory_bytes(dir);

    let checked = open(kind, dir, true)?.ok_or_else(|| fail("open", &"no checked handle"))?;
    verify(&checked, workload, &samples).map_err(|e| format!("{name}: {e}"))?;
    drop(samples);

    let mut opens = Vec::with_capacity(OPENS);
    for _ in 0..OPENS {
        let started = Instant::now();
        drop(black_box(open(kind, dir, true)?));
        opens.push(started.elapsed().as_secs_f64() * 1e3);
    }
    opens.sort_by(f64::total_cmp);

    let keys: Vec<String> = (0..workload.rows).map(|i| workload.key(i)).collect();
    let get = reads(&checked, &keys, order).map_err(|e| fail("get", &e))?;
    let get_no_checksum = match open(kind, dir, false)? {
        Some(unchecked) => Some(reads(&unchecked, &keys, order).map_err(|e| fail("get", &e))?),
        None => None,
    };
    let started = Instant::now();
    for chunk in order.chunks(BATCH) {
        let batch: Vec<&str> = chunk.iter().map(|&i| keys[i].as_str()).collect();
        black_box(checked.get_batch(&batch).map_err(|e| fail("get_batch", &e))?);
    }
    let batch_seconds = started.elapsed().as_secs_f64();
    Ok(Measured {
        write_rows_per_s: workload.rows as f64 / write_seconds,
        open_ms: opens[OPENS / 2],
        get,
        get_no_checksum,
        get_batch_rows_per_s: order.len() as f64 / batch_seconds.max(1e-9),
        bytes_on_disk,
        peak_rss_mib: rss::peak_mib().zip(baseline).map(|(peak, base)| (peak - base).max(0.0)),
    })
}

fn open(kind: Kind, dir: &Path, verify: bool) -> Result<Option<Subject>, String> {
    Subject::open(kind, dir, verify).map_err(|e| format!("{}: open: {e}", kind.name()))
}

/// `validate` at full level is clean and every sample reads back equal to what was put (which
/// also touches every page, so the timed reads run on warm maps).
fn verify(
    cache: &Subject,
    workload: &Workload,
    samples: &[(String, stowage_core::Sample)],
) -> Result<(), String> {
    let report =
        cache.reader().validate(ValidationLevel::Full).map_err(|e| format!("validate: {e}"))?;
    if let Some(problem) = report.problems.first() {
        return Err(format!("validate: {} problems, the first: {problem}", report.problems.len()));
    }
    for (key, sample) in samples {
        let got = cache.reader().get(key).map_err(|e| format!("get {key:?}: {e}"))?;
        if got.as_ref() != Some(sample) {
            return Err(format!(
                "{}: key {key:?} reads back different from what was put",
                workload.name
            ));
        }
    }
    Ok(())
}

/// One `get` per key of `order`, each timed.
fn reads(cache: &Subject, keys: &[String], order: &[usize]) -> stowage_core::Result<Reads> {
    let mut latencies: Vec<u64> = Vec::with_capacity(order.len());
    let started = Instant::now();
    for &i in order {
        let one = Instant::now();
        black_box(cache.reader().get(&keys[i])?);
        latencies.push(one.elapsed().as_nanos() as u64);
    }
    let seconds = started.elapsed().as_secs_f64();
    latencies.sort_unstable();
    let percentile = |p: usize| latencies[(latencies.len() - 1) * p / 100] as f64 / 1e3;
    Ok(Reads {
        rows_per_s: order.len() as f64 / seconds.max(1e-9),
        p50_us: percentile(50),
        p99_us: percentile(99),
    })
}

/// The bytes of every file below `dir`.
pub fn directory_bytes(dir: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else { return 0 };
    entries
        .flatten()
        .map(|entry| match entry.file_type() {
            Ok(t) if t.is_dir() => directory_bytes(&entry.path()),
            Ok(t) if t.is_file() => entry.metadata().map_or(0, |m| m.len()),
            _ => 0,
        })
        .sum()
}
