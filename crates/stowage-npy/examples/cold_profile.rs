//! Where cold reads of a finished cache spend their I/O: bytes read from the disk
//! (`/proc/self/io` `read_bytes`), major page faults and wall time per `get` and per `get_batch`
//! row, with the machine's page cache (and dentries and inodes) dropped first, as
//! `stowage bench --scale --drop-caches` does. Linux only; dropping the caches needs root.
//!
//! ```text
//! cargo run --release -p stowage-npy --example cold_profile -- DIR ROWS [ADVICE] [GETS] [BATCHES]
//! ```
//!
//! `DIR` is a cache the scale suite wrote (`stowage bench --scale --keep`: keys `f32x4/00000000`
//! up to `ROWS`), `ADVICE` is `adaptive` (the default), `always` or `never`. As in the scale
//! suite, each measurement uses a handle whose first get was made before the drop.
//!
//! ```text
//! cargo run --release -p stowage-npy --example cold_profile -- DIR ROWS warm [ROUNDS]
//! ```
//!
//! compares warm reads instead; `warm-adaptive` / `warm-never` runs one handle's warm gets alone
//! (for `perf stat`), and
//!
//! ```text
//! cargo run --release -p stowage-npy --example cold_profile -- DIR ROWS write WIDTH
//! ```
//!
//! writes a finished cache of `ROWS` keys of the same form whose rows are `float32[WIDTH]` (for
//! collection files larger than the kernel's read-around).
//!
//! `warm` compares warm reads: `get` and `get_batch` of the same 100,000 random keys through a
//! handle with the advice `Adaptive` (the default) and one with `Never`, in alternating rounds
//! (each first in every other round), the best round of each (on a shared machine, the least
//! disturbed).

use std::time::Instant;

use stowage_core::cold_reads::ColdReadAdvice;
use stowage_core::{Backend, Reader};
use stowage_npy::{NpyBackend, NpyOptions};

/// `read_bytes` of `/proc/self/io` and major faults of `/proc/self/stat`.
fn counters() -> (u64, u64) {
    let io = std::fs::read_to_string("/proc/self/io").unwrap_or_default();
    let read = io
        .lines()
        .find_map(|l| l.strip_prefix("read_bytes: "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0);
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // Fields after the command name's closing parenthesis; majflt is field 12 (index 9 there).
    let majflt = stat
        .rsplit_once(')')
        .and_then(|(_, rest)| rest.split_whitespace().nth(9))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    (read, majflt)
}

fn drop_caches() {
    if std::fs::write("/proc/sys/vm/drop_caches", "3").is_err() {
        eprintln!("cannot drop the page cache (not root?): figures are warm");
    }
}

/// A small xorshift, so that the example needs no dependency.
fn random_keys(seed: u64, rows: usize, n: usize) -> Vec<String> {
    let mut x = seed | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            format!("f32x4/{:08}", x % rows as u64)
        })
        .collect()
}

fn report(what: &str, rows: usize, started: Instant, before: (u64, u64)) {
    let seconds = started.elapsed().as_secs_f64();
    let after = counters();
    let kib = (after.0 - before.0) as f64 / 1024.0 / rows as f64;
    let faults = (after.1 - before.1) as f64 / rows as f64;
    println!(
        "{what}: {rows} rows, {:.0} rows/s, {kib:.1} KiB read/row, {faults:.2} major faults/row",
        rows as f64 / seconds
    );
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    if args.len() < 3 {
        return Err("usage: cold_profile DIR ROWS [adaptive|always|never] [GETS] [BATCHES]".into());
    }
    let dir = &args[1];
    let rows: usize = args[2].parse()?;
    if args.get(3).map(String::as_str) == Some("warm") {
        return warm(dir, rows, args.get(4).map_or(Ok(15), |v| v.parse())?);
    }
    if args.get(3).map(String::as_str) == Some("write") {
        let width: usize = args.get(4).ok_or("write needs WIDTH")?.parse()?;
        let schema = stowage_core::Schema::new().tensor(
            "x",
            stowage_core::DType::F32,
            stowage_core::ShapeRule::Fixed(vec![width]),
        );
        let mut cache = NpyBackend::create(dir, &schema, NpyOptions::default())?;
        for i in 0..rows {
            let row: Vec<f32> = (0..width).map(|j| (i + j) as f32).collect();
            let tensor = stowage_core::Tensor::from_slice(&[width], &row)?;
            cache.put(&format!("f32x4/{i:08}"), &stowage_core::Sample::new().with("x", tensor))?;
            if i % 4096 == 4095 {
                cache.flush()?;
            }
        }
        cache.finalize()?;
        return Ok(());
    }
    if let Some(advice) = args.get(3).and_then(|a| a.strip_prefix("warm-")) {
        // One handle's warm gets alone, for `perf stat` (instructions and cycles do not depend
        // on the other work of a shared machine as much as wall time does).
        let advice =
            if advice == "never" { ColdReadAdvice::Never } else { ColdReadAdvice::Adaptive };
        let options = NpyOptions { cold_read_advice: advice, ..NpyOptions::default() };
        let cache = NpyBackend::open_read_only(dir, options)?;
        let keys = random_keys(4_111, rows, 100_000.min(rows));
        for _ in 0..args.get(4).map_or(Ok(10), |v| v.parse())? {
            for key in &keys {
                std::hint::black_box(cache.get(key)?);
            }
        }
        return Ok(());
    }
    let advice = match args.get(3).map(String::as_str) {
        None | Some("adaptive") => ColdReadAdvice::Adaptive,
        Some("always") => ColdReadAdvice::Always,
        Some("never") => ColdReadAdvice::Never,
        Some(other) => return Err(format!("advice {other:?}").into()),
    };
    let gets: usize = args.get(4).map_or(Ok(500), |v| v.parse())?;
    let batches: usize = args.get(5).map_or(Ok(2), |v| v.parse())?;
    let options = NpyOptions { cold_read_advice: advice, ..NpyOptions::default() };
    let first = format!("f32x4/{:08}", rows / 7);
    println!("{dir}, {rows} keys, advice {advice:?}");

    let cache = NpyBackend::open_read_only(dir, options.clone())?;
    cache.get(&first)?.ok_or("first key missing")?;
    drop_caches();
    let keys = random_keys(1_700 + rows as u64, rows, gets);
    let before = counters();
    let started = Instant::now();
    for key in &keys {
        cache.get(key)?.ok_or("key missing")?;
    }
    report("cold get", gets, started, before);
    drop(cache);

    let cache = NpyBackend::open_read_only(dir, options)?;
    cache.get(&first)?.ok_or("first key missing")?;
    drop_caches();
    let keys = random_keys(2_701 + rows as u64, rows, 1024 * batches);
    let before = counters();
    let started = Instant::now();
    for batch in keys.chunks(1024) {
        let batch: Vec<&str> = batch.iter().map(String::as_str).collect();
        let got = cache.get_batch(&batch)?;
        assert!(got.iter().all(Option::is_some), "a key is missing");
    }
    report("cold get_batch", keys.len(), started, before);

    let keys = random_keys(3_703, rows, 100_000.min(rows));
    for key in &keys {
        cache.get(key)?;
    }
    let started = Instant::now();
    for key in &keys {
        cache.get(key)?;
    }
    let rate = keys.len() as f64 / started.elapsed().as_secs_f64();
    println!("warm get (the same keys again): {rate:.0} rows/s");
    Ok(())
}

/// Warm `get` and `get_batch` with the advice on and off, in turn ([`main`]'s docs).
fn warm(dir: &str, rows: usize, rounds: usize) -> Result<(), Box<dyn std::error::Error>> {
    let open = |advice| {
        let options = NpyOptions { cold_read_advice: advice, ..NpyOptions::default() };
        NpyBackend::open_read_only(dir, options)
    };
    let handles = [open(ColdReadAdvice::Adaptive)?, open(ColdReadAdvice::Never)?];
    let keys = random_keys(4_111, rows, 100_000.min(rows));
    let refs: Vec<&str> = keys.iter().map(String::as_str).collect();
    for handle in &handles {
        for key in &keys {
            handle.get(key)?.ok_or("key missing")?;
        }
    }
    let mut best = [[0f64; 2]; 2]; // [handle][get, batch]
    for round in 0..rounds {
        for h in [round % 2, 1 - round % 2] {
            let handle = &handles[h];
            let started = Instant::now();
            for key in &keys {
                std::hint::black_box(handle.get(key)?);
            }
            best[h][0] = best[h][0].max(keys.len() as f64 / started.elapsed().as_secs_f64());
            let started = Instant::now();
            for batch in refs.chunks(1024) {
                std::hint::black_box(handle.get_batch(batch)?);
            }
            best[h][1] = best[h][1].max(keys.len() as f64 / started.elapsed().as_secs_f64());
        }
    }
    println!(
        "warm, best of {rounds} rounds: get on {:.0} k/s off {:.0} k/s ({:.3}x); get_batch on \
         {:.0} k/s off {:.0} k/s ({:.3}x)",
        best[0][0] / 1e3,
        best[1][0] / 1e3,
        best[0][0] / best[1][0],
        best[0][1] / 1e3,
        best[1][1] / 1e3,
        best[0][1] / best[1][1]
    );
    Ok(())
}
