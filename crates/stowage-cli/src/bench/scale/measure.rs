//! One backend at one size: write the keys streaming (put + a durable flush every
//! [`FLUSH_EVERY`](crate::bench::FLUSH_EVERY) rows), resume the unfinished cache and finalize it,
//! open it read-only, then read it warm and cold beside the cold `pread` references on its own
//! files.

use std::hint::black_box;
use std::path::{Path, PathBuf};
use std::time::Instant;

use serde::Serialize;
use stowage_core::Sample;
use stowage_core::cold_reads::ColdReadAdvice;

use super::order::Sampler;
use super::physical::{self, CacheDrop, QUEUE_DEPTH};
use crate::bench::FLUSH_EVERY;
use crate::bench::measure::directory_bytes;
use crate::bench::rss;
use crate::bench::subject::{Kind, Subject};
use crate::bench::workload::Workload;

/// Keys per batched get.
pub const BATCH: usize = 1024;
/// Most warm random reads per measurement.
pub const WARM_READS: usize = 200_000;
/// Cold single gets, and cold 4 KiB `pread`s at queue depth 1.
pub const COLD_READS: usize = 2_000;
/// Cold batches of [`BATCH`] keys.
pub const COLD_BATCHES: usize = 4;
/// Cold 4 KiB `pread`s at queue depth 32.
pub const COLD_QD32_READS: usize = 32 * 256;
/// Warm passes with the cold-read advice on and off, in turn, for the side-by-side comparison
/// (the best of each is reported: on 2 cores shared with other work, the best pass is the one
/// least disturbed).
pub const WARM_PAIRS: usize = 5;
/// Read-only opens timed (the median is reported).
const OPENS: usize = 3;
/// Loads of the dependent-load reference ([`physical::warm_dependent_loads`]).
pub const DEPENDENT_LOADS: usize = 2_000_000;

/// What was measured for one backend at one size.
#[derive(Debug, Clone, Serialize)]
pub struct ScaleMeasured {
    /// Rows per second of `put` + a durable flush every 2,048 rows (the timer runs only over
    /// the puts and flushes; the samples of each flush are generated before it).
    pub write_rows_per_s: f64,
    /// Peak resident memory the writer added while writing, MiB (page cache of its maps
    /// included); `None` where the system does not say.
    pub write_peak_rss_mib: Option<f64>,
    /// Peak anonymous resident memory (`RssAnon`: the heap, without the page cache its maps
    /// touch) the writer added, MiB, sampled every few milliseconds while it wrote, and while
    /// the unfinished cache was resumed and finalized (the most of [`Self::finalize_peak_anon_mib`]
    /// and the writes'); `None` where the system does not say.
    pub write_peak_anon_mib: Option<f64>,
    /// Opening the unfinished cache for appending (resume), milliseconds.
    pub resume_open_ms: f64,
    /// Resident memory that open added, MiB.
    pub resume_open_rss_mib: Option<f64>,
    /// The first `get` after that open, milliseconds.
    pub resume_first_get_ms: f64,
    /// `finalize` through the resumed handle, milliseconds.
    pub finalize_ms: f64,
    /// Peak anonymous resident memory added (over the same baseline as the writes') while the
    /// unfinished cache was resumed and finalized, MiB, sampled every few milliseconds; `None`
    /// where the system does not say.
    pub finalize_peak_anon_mib: Option<f64>,
    /// Median of [`OPENS`] read-only opens of the finished cache (page cache warm), ms.
    pub open_ms: f64,
    /// The most resident memory one of those opens added, MiB.
    pub open_rss_mib: Option<f64>,
    /// Median first `get` after each of those opens, milliseconds.
    pub first_get_ms: f64,
    /// A read-only open with the page cache dropped, milliseconds, and its first get.
    pub cold_open_ms: f64,
    /// The first get after the cold open, milliseconds.
    pub cold_first_get_ms: f64,
    /// Random single gets per second, warm (every read done once untimed first).
    pub warm_get_rows_per_s: f64,
    /// Rows per second of warm `get_batch` of [`BATCH`] random keys.
    pub warm_batch_rows_per_s: f64,
    /// Dependent random loads per second over a warm anonymous map of the finished cache's size
    /// (capped at [`physical::DEPENDENT_LOAD_MAX_BYTES`]), the best of three passes made right
    /// after the warm gets:
    /// the physical reference of a lookup's chain of memory misses. `None` when the map could
    /// not be made.
    pub dependent_loads_per_s: Option<f64>,
    /// Random single gets per second with the page cache dropped before (the handle opened and
    /// its first get made before the drop, neither timed: [`cold_rows`]).
    pub cold_get_rows_per_s: f64,
    /// Rows per second of `get_batch` of [`BATCH`] random keys with the page cache dropped.
    pub cold_batch_rows_per_s: f64,
    /// Cold random 4 KiB `pread`s per second of the cache's files, one thread.
    pub qd1_reads_per_s: f64,
    /// The same from [`QUEUE_DEPTH`] threads.
    pub qd32_reads_per_s: f64,
    /// Every file of the finished cache, bytes.
    pub bytes_on_disk: u64,
    /// Files of the finished cache.
    pub files: usize,
    /// memmap only: the same reads with the kernel not told which pages they will touch
    /// (`cold_read_advice: Never`), in the same run, on the same cache and keys, and the cold
    /// reads with checksums not verified.
    pub advice: Option<AdviceComparison>,
}

/// The reads of a backend that can switch its cold-read advice off
/// ([`stowage_core::cold_reads`]), with it off (what the reads cost without it), and its cold
/// reads of one page per row (checksums not verified).
#[derive(Debug, Clone, Serialize)]
pub struct AdviceComparison {
    /// As [`ScaleMeasured::warm_get_rows_per_s`] (best of [`WARM_PAIRS`], in turn with the
    /// advice on).
    pub warm_get_rows_per_s: f64,
    /// As [`ScaleMeasured::warm_batch_rows_per_s`] (the same way).
    pub warm_batch_rows_per_s: f64,
    /// Warm gets with the advice on, measured in turn with the ones off (best of
    /// [`WARM_PAIRS`]): the figure to compare [`AdviceComparison::warm_get_rows_per_s`] with.
    pub warm_get_on_rows_per_s: f64,
    /// Warm `get_batch` with the advice on, measured the same way.
    pub warm_batch_on_rows_per_s: f64,
    /// As [`ScaleMeasured::cold_get_rows_per_s`].
    pub cold_get_rows_per_s: f64,
    /// As [`ScaleMeasured::cold_batch_rows_per_s`].
    pub cold_batch_rows_per_s: f64,
    /// Cold single gets with the advice on and checksums not verified (`verify_checksums:
    /// false`): one page per row instead of two (the row's and its checksum row's).
    pub cold_get_unverified_rows_per_s: f64,
    /// Cold `get_batch` the same way. (An unverified get shares the map and does not touch the
    /// row; the advice still reads its page, which the caller's first access then finds.)
    pub cold_batch_unverified_rows_per_s: f64,
}

/// Measures `kind` on `workload` (its `rows` keys) in `dir`, which is removed first; `warm`
/// is the warm read order (the same for every backend and the raw-copy reference), `seed` seeds
/// the cold orders; `machine_wide` also drops the machine's page cache before each cold
/// measurement ([`physical::drop_page_cache`]). Returns how the page cache was dropped with the
/// figures.
///
/// Errors: as text naming the backend, the size, the phase and (for a wrong sample) the key.
pub fn measure(
    kind: Kind,
    workload: &Workload,
    dir: &Path,
    warm: &Sampler,
    seed: u64,
    machine_wide: bool,
) -> Result<(ScaleMeasured, CacheDrop), String> {
    let rows = workload.rows;
    let fail = |phase: &str, e: &dyn std::fmt::Display| {
        format!("{} at {rows} keys: {phase}: {e}", kind.name())
    };
    let _ = std::fs::remove_dir_all(dir);

    // Write, streaming: each flush's samples are generated, then put and flushed under the timer.
    rss::reset_peak();
    let baseline = rss::current_mib();
    let anon_baseline = rss::anon_mib();
    // Sampled every few milliseconds beside the writes, so that a peak inside a flush (a merge
    // building a key index run) is seen, not only what is left after it.
    let anon_sampler = rss::AnonPeak::start();
    let mut cache =
        Subject::create(kind, dir, &workload.schema()).map_err(|e| fail("create", &e))?;
    let mut seconds = 0.0;
    let mut start = 0;
    while start < rows {
        let end = (start + FLUSH_EVERY).min(rows);
        let chunk: Vec<(String, Sample)> =
            (start..end).map(|i| (workload.key(i), workload.sample(i))).collect();
        let started = Instant::now();
        let writer = cache.backend();
        for (key, sample) in &chunk {
            writer.put(key, sample).map_err(|e| fail("put", &e))?;
        }
        writer.flush().map_err(|e| fail("flush", &e))?;
        seconds += started.elapsed().as_secs_f64();
        start = end;
    }
    let write_peak_rss_mib = added(rss::peak_mib(), baseline);
    let write_peak_anon = anon_sampler.stop();
    drop(cache);

    // Resume the unfinished cache, read one key, finalize: the writer's memory is sampled here
    // too (a finalize that gathered every row would peak here, not while writing).
    let finalize_sampler = rss::AnonPeak::start();
    let probe = workload.key(rows / 2);
    let before = rss::current_mib();
    let started = Instant::now();
    let mut resumed = Subject::resume(kind, dir).map_err(|e| fail("resume open", &e))?;
    let resume_open_ms = ms(started);
    let resume_open_rss_mib = added(rss::current_mib(), before);
    let started = Instant::now();
    let got = resumed.reader().get(&probe).map_err(|e| fail("first get after resume", &e))?;
    let resume_first_get_ms = ms(started);
    if got.is_none() {
        return Err(fail("first get after resume", &format!("key {probe:?} is missing")));
    }
    let started = Instant::now();
    resumed.backend().finalize().map_err(|e| fail("finalize", &e))?;
    let finalize_ms = ms(started);
    drop(resumed);
    let finalize_peak_anon = finalize_sampler.stop();
    let finalize_peak_anon_mib = added(finalize_peak_anon, anon_baseline);
    let write_peak_anon = match (write_peak_anon, finalize_peak_anon) {
        (Some(a), Some(b)) => Some(a.max(b)),
        (a, b) => a.or(b),
    };
    let write_peak_anon_mib = added(write_peak_anon, anon_baseline);
    let files = physical::files_of(dir);
    let bytes_on_disk = directory_bytes(dir);

    // Read-only opens, page cache warm.
    let mut opens = Vec::new();
    let mut first_gets = Vec::new();
    let mut open_rss_mib: Option<f64> = None;
    for attempt in 0..OPENS {
        let probe = workload.key((rows / 3 + attempt * 7919) % rows);
        let before = rss::current_mib();
        let started = Instant::now();
        let cache = open(kind, dir).map_err(|e| fail("open", &e))?;
        opens.push(ms(started));
        if let Some(mib) = added(rss::current_mib(), before) {
            open_rss_mib = Some(open_rss_mib.map_or(mib, |m: f64| m.max(mib)));
        }
        let started = Instant::now();
        let got = cache.reader().get(&probe).map_err(|e| fail("first get", &e))?;
        first_gets.push(ms(started));
        if got.is_none() {
            return Err(fail("first get", &format!("key {probe:?} is missing")));
        }
    }

    // Warm reads: the order once untimed, each sample checked, then timed.
    let cache = open(kind, dir).map_err(|e| fail("open", &e))?;
    for i in warm.clone() {
        let key = workload.key(i);
        let got = cache.reader().get(&key).map_err(|e| fail("get", &e))?;
        if got.as_ref() != Some(&workload.sample(i)) {
            return Err(fail(
                "get",
                &format!("key {key:?} reads back different from what was put"),
            ));
        }
    }
    let warm_get_rows_per_s =
        single_gets(&cache, workload, warm.clone()).map_err(|e| fail("get", &e))?;
    let warm_batch_rows_per_s =
        batched_gets(&cache, workload, warm.clone()).map_err(|e| fail("get_batch", &e))?;
    drop(cache);
    // The best of three passes: on a shared machine the least disturbed one.
    let dependent_loads_per_s = (0..3)
        .filter_map(|pass| {
            physical::warm_dependent_loads(bytes_on_disk, DEPENDENT_LOADS, seed + 4 + pass).ok()
        })
        .reduce(f64::max);

    // Cold: the page cache dropped before each measurement.
    let paths: Vec<PathBuf> = files.iter().map(|(path, _)| path.clone()).collect();
    let dropped = physical::drop_page_cache(&paths, machine_wide)
        .map_err(|e| fail("drop the page cache", &e))?;
    let started = Instant::now();
    let cache = open(kind, dir).map_err(|e| fail("cold open", &e))?;
    let cold_open_ms = ms(started);
    let started = Instant::now();
    cache.reader().get(&workload.key(rows / 5)).map_err(|e| fail("cold first get", &e))?;
    let cold_first_get_ms = ms(started);
    drop(cache);

    let cold = ColdRows { workload, paths: &paths, seed, machine_wide };
    let (cold_get_rows_per_s, cold_batch_rows_per_s) =
        cold.measure(|| open(kind, dir)).map_err(|e| fail("cold reads", &e))?;

    // memmap can switch its cold-read advice off: the same reads without it, same cache, keys
    // and run, warm and cold.
    let advice = match kind {
        Kind::Memmap => {
            let open_off = || {
                let options = stowage_memmap::MemmapOptions {
                    cold_read_advice: ColdReadAdvice::Never,
                    ..Default::default()
                };
                stowage_memmap::MemmapBackend::open_read_only(dir, options).map(Subject::Memmap)
            };
            let off = open_off().map_err(|e| fail("open, advice off", &e))?;
            let on = open(kind, dir).map_err(|e| fail("open", &e))?;
            let _ = single_gets(&off, workload, warm.clone());
            // Warm, on and off in turn, WARM_PAIRS times each: the best of each, side by side.
            let (mut gets, mut batches) = ([Vec::new(), Vec::new()], [Vec::new(), Vec::new()]);
            for _ in 0..WARM_PAIRS {
                for (i, cache) in [&on, &off].into_iter().enumerate() {
                    gets[i].push(
                        single_gets(cache, workload, warm.clone())
                            .map_err(|e| fail("get, advice on/off", &e))?,
                    );
                    batches[i].push(
                        batched_gets(cache, workload, warm.clone())
                            .map_err(|e| fail("get_batch, advice on/off", &e))?,
                    );
                }
            }
            drop((on, off));
            let (cold_get, cold_batch) =
                cold.measure(open_off).map_err(|e| fail("cold reads, advice off", &e))?;
            let open_unverified = || {
                let options =
                    stowage_memmap::MemmapOptions { verify_checksums: false, ..Default::default() };
                stowage_memmap::MemmapBackend::open_read_only(dir, options).map(Subject::Memmap)
            };
            let (unverified_get, unverified_batch) = cold
                .measure(open_unverified)
                .map_err(|e| fail("cold reads, checksums not verified", &e))?;
            Some(AdviceComparison {
                warm_get_rows_per_s: best(&gets[1]),
                warm_batch_rows_per_s: best(&batches[1]),
                warm_get_on_rows_per_s: best(&gets[0]),
                warm_batch_on_rows_per_s: best(&batches[0]),
                cold_get_rows_per_s: cold_get,
                cold_batch_rows_per_s: cold_batch,
                cold_get_unverified_rows_per_s: unverified_get,
                cold_batch_unverified_rows_per_s: unverified_batch,
            })
        }
        _ => None,
    };

    let qd1_reads_per_s = physical::cold_preads(&files, COLD_READS, 1, seed + 2, machine_wide)
        .map_err(|e| fail("queue-depth-1 reference", &e))?;
    let qd32_reads_per_s =
        physical::cold_preads(&files, COLD_QD32_READS, QUEUE_DEPTH, seed + 3, machine_wide)
            .map_err(|e| fail("queue-depth-32 reference", &e))?;

    opens.sort_by(f64::total_cmp);
    first_gets.sort_by(f64::total_cmp);
    let measured = ScaleMeasured {
        write_rows_per_s: rows as f64 / seconds.max(1e-9),
        write_peak_rss_mib,
        write_peak_anon_mib,
        resume_open_ms,
        resume_open_rss_mib,
        resume_first_get_ms,
        finalize_ms,
        finalize_peak_anon_mib,
        open_ms: opens[OPENS / 2],
        open_rss_mib,
        first_get_ms: first_gets[OPENS / 2],
        cold_open_ms,
        cold_first_get_ms,
        warm_get_rows_per_s,
        warm_batch_rows_per_s,
        dependent_loads_per_s,
        cold_get_rows_per_s,
        cold_batch_rows_per_s,
        qd1_reads_per_s,
        qd32_reads_per_s,
        bytes_on_disk,
        files: files.len(),
        advice,
    };
    Ok((measured, dropped))
}

/// The cold row reads: random single gets and batched gets with the rows' pages dropped from
/// the page cache.
struct ColdRows<'w> {
    workload: &'w Workload,
    paths: &'w [PathBuf],
    seed: u64,
    machine_wide: bool,
}

impl ColdRows<'_> {
    /// [`COLD_READS`] single gets, then [`COLD_BATCHES`] batches of [`BATCH`], each on a new
    /// handle from `open` whose first get was made before the page cache was dropped: what a
    /// handle keeps in memory after its first read (memmap's index, loaded from
    /// `index.parquet` on first need) is the cold first get's cost, reported on its own; these
    /// measure the rows. (The few pages the first get mapped stay cached: a mapped page is not
    /// dropped.) Rows per second of each.
    fn measure(
        &self,
        open: impl Fn() -> stowage_core::Result<Subject>,
    ) -> Result<(f64, f64), String> {
        let rows = self.workload.rows;
        let cold_handle = || -> Result<Subject, String> {
            let cache = open().map_err(|e| format!("open: {e}"))?;
            cache
                .reader()
                .get(&self.workload.key(rows / 7))
                .map_err(|e| format!("first get: {e}"))?;
            physical::drop_page_cache(self.paths, self.machine_wide)
                .map_err(|e| format!("drop the page cache: {e}"))?;
            Ok(cache)
        };
        let cache = cold_handle()?;
        let gets =
            single_gets(&cache, self.workload, Sampler::new(self.seed, rows).take_n(COLD_READS))
                .map_err(|e| format!("get: {e}"))?;
        drop(cache);
        let cache = cold_handle()?;
        let order = Sampler::new(self.seed + 1, rows).take_n(COLD_BATCHES * BATCH);
        let batches =
            batched_gets(&cache, self.workload, order).map_err(|e| format!("get_batch: {e}"))?;
        Ok((gets, batches))
    }
}

/// Opens the finished cache read-only with the backend's default (checked) options.
fn open(kind: Kind, dir: &Path) -> stowage_core::Result<Subject> {
    Ok(Subject::open(kind, dir, true)?.expect("a checked handle always exists"))
}

/// The largest of `values` (0 for none).
fn best(values: &[f64]) -> f64 {
    values.iter().copied().fold(0.0, f64::max)
}

/// Milliseconds since `started`.
fn ms(started: Instant) -> f64 {
    started.elapsed().as_secs_f64() * 1e3
}

/// `now - before`, never below 0, when both are known.
fn added(now: Option<f64>, before: Option<f64>) -> Option<f64> {
    now.zip(before).map(|(now, before)| (now - before).max(0.0))
}

/// One `get` per index of `order` (each key made just before its get, under the timer: a
/// `format!` of a few dozen nanoseconds). Rows per second.
fn single_gets(cache: &Subject, workload: &Workload, order: Sampler) -> stowage_core::Result<f64> {
    let reads = order.len();
    let started = Instant::now();
    for i in order {
        black_box(touch(cache.reader().get(&workload.key(i))?.as_ref()));
    }
    Ok(reads as f64 / started.elapsed().as_secs_f64().max(1e-9))
}

/// The first and last byte of every tensor of `sample`, summed: a zero-copy `get` (unverified,
/// sharing a map) returns without reading its row, so each read is followed by what its caller
/// does first, reading the bytes.
fn touch(sample: Option<&Sample>) -> u64 {
    let Some(sample) = sample else { return 0 };
    sample
        .fields()
        .filter_map(|(_, value)| value.as_tensor())
        .map(|tensor| {
            let bytes = tensor.bytes();
            u64::from(bytes.first().copied().unwrap_or(0))
                + u64::from(bytes.last().copied().unwrap_or(0))
        })
        .sum()
}

/// `get_batch` of [`BATCH`] keys at a time over `order` (the keys of a batch made before it is
/// timed), each returned tensor's first and last byte read ([`touch`]). Rows per second.
fn batched_gets(
    cache: &Subject,
    workload: &Workload,
    mut order: Sampler,
) -> stowage_core::Result<f64> {
    let reads = order.len();
    let mut seconds = 0.0;
    loop {
        let keys: Vec<String> = order.by_ref().take(BATCH).map(|i| workload.key(i)).collect();
        if keys.is_empty() {
            break;
        }
        let keys: Vec<&str> = keys.iter().map(String::as_str).collect();
        let started = Instant::now();
        let samples = cache.get_batch(&keys)?;
        black_box(samples.iter().map(|sample| touch(sample.as_ref())).sum::<u64>());
        seconds += started.elapsed().as_secs_f64();
    }
    Ok(reads as f64 / seconds.max(1e-9))
}
