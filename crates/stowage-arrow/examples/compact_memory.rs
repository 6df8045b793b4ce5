//! What compacting a large cache costs, and what it gives warm random gets: for issue 17's
//! bounded-writer-memory and 100-million-key measurements (not a test: run it in release).
//!
//! ```text
//! cargo run --release -p stowage-arrow --example segment_bound -- DIR ROWS     # writes DIR
//! cargo run --release -p stowage-arrow --example compact_memory -- DIR ROWS MAX_OPEN
//! ```
//!
//! Reads 200,000 random keys (`f32x4/<i>`, `i < ROWS`, as `segment_bound` writes them) through a
//! handle that keeps at most MAX_OPEN segments open, then compacts every segment
//! (`ArrowBackend::compact(u64::MAX)`), printing its time, the segments before and after, and
//! the peak anonymous memory it added (`RssAnon` of /proc/self/status sampled every 2 ms: the
//! heap, without the page cache of mapped files), then reads the same keys again through a new
//! handle with the same bound.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use stowage_arrow::{ArrowBackend, ArrowOptions};
use stowage_core::{OpenMode, Reader};
use stowage_test_support::process::status_kib;

const GETS: usize = 200_000;

/// A splitmix64 step: the random key order.
fn next(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Warm random gets per second through a handle keeping at most `max_open` segments open
/// (every key read once untimed, then timed).
fn warm_gets(dir: &Path, keys: &[String], max_open: usize) -> stowage_core::Result<f64> {
    let options = ArrowOptions { max_open_segments: max_open, ..ArrowOptions::default() };
    let cache = ArrowBackend::open(dir, OpenMode::ReadOnly, options)?;
    for key in keys {
        assert!(cache.get(key)?.is_some(), "{key} is missing");
    }
    let started = Instant::now();
    for key in keys {
        std::hint::black_box(cache.get(key)?);
    }
    Ok(keys.len() as f64 / started.elapsed().as_secs_f64())
}

fn segments(dir: &Path) -> usize {
    std::fs::read_dir(dir.join("segments"))
        .map(|entries| {
            entries.flatten().filter(|e| e.path().extension().is_some_and(|x| x == "arrow")).count()
        })
        .unwrap_or(0)
}

fn main() -> stowage_core::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let usage = "usage: compact_memory DIR ROWS MAX_OPEN";
    let dir = Path::new(args.first().expect(usage));
    let rows: usize = args.get(1).expect(usage).parse().expect(usage);
    let max_open: usize = args.get(2).expect(usage).parse().expect(usage);
    let mut state = 17;
    let keys: Vec<String> =
        (0..GETS).map(|_| format!("f32x4/{}", next(&mut state) as usize % rows)).collect();
    let before = segments(dir);
    let rate = warm_gets(dir, &keys, max_open)?;
    println!(
        "before: {before} segments, {:.0} k warm gets/s (max_open_segments {max_open})",
        rate / 1e3
    );

    let baseline = status_kib("RssAnon:");
    let stop = Arc::new(AtomicBool::new(false));
    let stopped = Arc::clone(&stop);
    let sampler = std::thread::spawn(move || {
        let mut peak = 0;
        while !stopped.load(Ordering::Relaxed) {
            peak = peak.max(status_kib("RssAnon:"));
            std::thread::sleep(Duration::from_millis(2));
        }
        peak
    });
    let started = Instant::now();
    let options = ArrowOptions { rank: Some(0), ..ArrowOptions::default() };
    let mut cache = ArrowBackend::open(dir, OpenMode::Append, options)?;
    let report = cache.compact(u64::MAX)?;
    drop(cache);
    let took = started.elapsed();
    stop.store(true, Ordering::Relaxed);
    let peak = sampler.join().expect("the sampler thread");
    println!(
        "compact: {} segments replaced by {} ({} rows kept) in {:.1} s, peak RssAnon added {:.1} MiB",
        report.removed.len(),
        report.written.len(),
        report.rows_kept,
        took.as_secs_f64(),
        peak.saturating_sub(baseline) as f64 / 1024.0
    );
    let rate = warm_gets(dir, &keys, max_open)?;
    let after = report.written.len();
    println!(
        "after: {after} segments, {:.0} k warm gets/s (max_open_segments {max_open})",
        rate / 1e3
    );
    Ok(())
}
