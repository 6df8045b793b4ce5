//! Where a cold read of a finished cache spends its disk reads: the scale suite's cache of ROWS
//! keys (`f32x4/<i:08>`, one `f32[4]` row each, e.g. `stowage bench --scale ... --keep`), the whole
//! machine's page cache dropped (`echo 3 > /proc/sys/vm/drop_caches`, root only) after a handle
//! is opened and its first get made.
//!
//! ```text
//! cargo run --release -p stowage-arrow --example cold_profile -- DIR ROWS MODE [N] [ROUNDS]
//! ```
//!
//! MODE:
//! - `get` / `get-never`: N cold single gets (adaptive / no cold-read advice);
//! - `batch` / `batch-never`: N cold batches of 1,024;
//! - `phases`: N cold lookups done step by step through the crate's parts (the key index run's
//!   slot, the segment's open, its row checksums' open, the row), each step's time, bytes read
//!   (`/proc/self/io` `read_bytes`) and major faults;
//! - `warm` / `warm-never`: N warm random gets and N / 1,024 batches (best of ROUNDS);
//! - any of these with `-bounded` appended: at most 64 segments kept open (gets reopen them);
//! - `opens`: the first N segments opened with the page cache warm (their CPU), ROUNDS times;
//! - `write`: writes a cache of ROWS keys of `f32[N]` (a flush every 2,048 puts) into DIR.
//!
//! Each line reports rows per second, KiB read from the disk per row and major faults per row.

use std::path::Path;
use std::time::Instant;

use arrow_array::Array;
use stowage_arrow::test_support::layout::Layout;
use stowage_arrow::test_support::merged_index::discover_runs;
use stowage_arrow::test_support::row_sums::{RowSums, sums_path};
use stowage_arrow::test_support::segment::Segment;
use stowage_arrow::{ArrowBackend, ArrowOptions};
use stowage_core::cold_reads::ColdReadAdvice;
use stowage_core::{OpenMode, Reader};

const BATCH: usize = 1_024;

/// `max_open_segments` of the `-bounded` modes: far fewer than the scale suite's caches have, so
/// that gets reopen segments (as at 100 M keys, 48,829 segments over the default 8,191).
const BOUNDED: usize = 64;

fn key(i: usize) -> String {
    format!("f32x4/{i:08}")
}

/// A small seeded generator (xorshift), the same keys for every mode.
struct Keys(u64, usize);

impl Iterator for Keys {
    type Item = usize;
    fn next(&mut self) -> Option<usize> {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        Some((self.0 % self.1 as u64) as usize)
    }
}

/// (bytes read from the disk, major faults) of this process so far.
fn io() -> (u64, u64) {
    let text = std::fs::read_to_string("/proc/self/io").unwrap_or_default();
    let read = text
        .lines()
        .find_map(|l| l.strip_prefix("read_bytes: "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0);
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // Field 12 (majflt), counted after the command name's closing parenthesis.
    let after = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
    let majflt = after.split_whitespace().nth(9).and_then(|v| v.parse().ok()).unwrap_or(0);
    (read, majflt)
}

fn drop_caches() {
    // SAFETY: sync takes no arguments.
    unsafe { libc_sync() };
    std::fs::write("/proc/sys/vm/drop_caches", "3").expect("drop caches (root only)");
}

unsafe extern "C" {
    #[link_name = "sync"]
    fn libc_sync();
}

fn open(dir: &Path, advice: ColdReadAdvice, bounded: bool) -> ArrowBackend {
    let mut options = ArrowOptions { cold_read_advice: advice, ..ArrowOptions::default() };
    if bounded {
        options.max_open_segments = BOUNDED;
    }
    ArrowBackend::open(dir, OpenMode::ReadOnly, options).expect("open")
}

fn report(what: &str, rows: usize, started: Instant, before: (u64, u64)) {
    let seconds = started.elapsed().as_secs_f64();
    let (read, faults) = io();
    println!(
        "{what}: {rows} rows, {:.0} rows/s, {:.1} KiB read per row, {:.2} major faults per row",
        rows as f64 / seconds,
        (read - before.0) as f64 / 1024.0 / rows as f64,
        (faults - before.1) as f64 / rows as f64,
    );
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.len() < 4 {
        eprintln!("usage: cold_profile DIR ROWS MODE [N] [ROUNDS]");
        std::process::exit(2);
    }
    let dir = Path::new(&args[1]);
    let rows: usize = args[2].parse().expect("ROWS");
    let mode = args[3].as_str();
    let n: usize = args.get(4).map_or(500, |v| v.parse().expect("N"));
    let rounds: usize = args.get(5).map_or(3, |v| v.parse().expect("ROUNDS"));
    let bounded = mode.ends_with("-bounded");
    let mode = mode.trim_end_matches("-bounded");
    let advice =
        if mode.ends_with("-never") { ColdReadAdvice::Never } else { ColdReadAdvice::Adaptive };
    let mut keys = Keys(0x9e37_79b9_7f4a_7c15, rows);
    match mode.trim_end_matches("-never") {
        "get" => {
            let cache = open(dir, advice, bounded);
            cache.get(&key(rows / 7)).unwrap();
            drop_caches();
            let (before, started) = (io(), Instant::now());
            for i in keys.by_ref().take(n) {
                assert!(cache.get(&key(i)).unwrap().is_some());
            }
            report(mode, n, started, before);
        }
        "batch" => {
            let cache = open(dir, advice, bounded);
            cache.get(&key(rows / 7)).unwrap();
            drop_caches();
            let (before, started) = (io(), Instant::now());
            for _ in 0..n {
                let names: Vec<String> = keys.by_ref().take(BATCH).map(key).collect();
                let names: Vec<&str> = names.iter().map(String::as_str).collect();
                assert!(cache.get_batch(&names).unwrap().iter().all(Option::is_some));
            }
            report(mode, n * BATCH, started, before);
        }
        "warm" => {
            let cache = open(dir, advice, bounded);
            let names: Vec<String> = keys.by_ref().take(n).map(key).collect();
            let names: Vec<&str> = names.iter().map(String::as_str).collect();
            for name in &names {
                cache.get(name).unwrap();
            }
            let (mut get, mut batch) = (0f64, 0f64);
            for _ in 0..rounds {
                let started = Instant::now();
                for name in &names {
                    std::hint::black_box(cache.get(name).unwrap());
                }
                get = get.max(n as f64 / started.elapsed().as_secs_f64());
                let started = Instant::now();
                for chunk in names.chunks(BATCH) {
                    std::hint::black_box(cache.get_batch(chunk).unwrap());
                }
                batch = batch.max(n as f64 / started.elapsed().as_secs_f64());
            }
            println!("{mode}: get {get:.0}/s, get_batch {batch:.0} rows/s (best of {rounds})");
        }
        "phases" => phases(dir, n, keys),
        "write" => {
            // ROWS keys of `f32[N]` (the same keys as the scale suite's), a flush every 2,048.
            use stowage_core::{Backend, DType, Sample, Schema, ShapeRule, Tensor};
            let schema = Schema::new().tensor("x", DType::F32, ShapeRule::Fixed(vec![n]));
            let options = ArrowOptions { rank: Some(0), ..ArrowOptions::default() };
            let mut cache = ArrowBackend::create(dir, &schema, options).expect("create");
            let values: Vec<f32> = (0..n).map(|v| v as f32).collect();
            for i in 0..rows {
                let sample = Sample::new().with("x", Tensor::from_slice(&[n], &values).unwrap());
                cache.put(&key(i), &sample).unwrap();
            }
            cache.finalize().unwrap();
        }
        "opens" => {
            // Segment and checksum opens with the page cache warm (read once first): their CPU.
            let layout = Layout::new(dir);
            let segments = layout.list_segments().unwrap();
            let segments = &segments[..n.min(segments.len())];
            for (id, path) in segments {
                drop(Segment::open(*id, path).unwrap());
            }
            for _ in 0..rounds {
                let started = Instant::now();
                for (id, path) in segments {
                    drop(Segment::open(*id, path).unwrap());
                }
                let segment = started.elapsed().as_secs_f64() / segments.len() as f64;
                let started = Instant::now();
                for (_, path) in segments {
                    drop(RowSums::open(&sums_path(path)).unwrap());
                }
                let sums = started.elapsed().as_secs_f64() / segments.len() as f64;
                println!(
                    "warm opens: segment {:.1} us, checksums {:.1} us",
                    segment * 1e6,
                    sums * 1e6
                );
            }
        }
        other => panic!("unknown mode {other}"),
    }
}

/// A cold lookup done step by step: what each step reads.
fn phases(dir: &Path, n: usize, keys: Keys) {
    let layout = Layout::new(dir);
    let segments = layout.list_segments().unwrap();
    let ids: Vec<u64> = segments.iter().map(|(id, _)| *id).collect();
    let runs = discover_runs(&layout, &ids);
    assert!(!runs.is_empty(), "a finished cache has a run");
    drop_caches();
    // [time s, bytes, faults] per step.
    let mut totals = [[0f64; 3]; 5];
    let names = ["run slot", "segment open", "sums open", "key compare", "row + sum"];
    let mut step = |i: usize, last: &mut (Instant, (u64, u64))| {
        let now = (Instant::now(), io());
        totals[i][0] += (now.0 - last.0).as_secs_f64();
        totals[i][1] += (now.1.0 - last.1.0) as f64;
        totals[i][2] += (now.1.1 - last.1.1) as f64;
        *last = now;
    };
    let mut checksum = 0u64;
    for i in keys.take(n) {
        let name = key(i);
        let mut last = (Instant::now(), io());
        let (id, row) =
            runs.iter().rev().find_map(|run| run.first_candidate(&name)).expect("indexed");
        step(0, &mut last);
        let segment = Segment::open(id, &layout.segment(id)).unwrap();
        step(1, &mut last);
        let sums = RowSums::open(&sums_path(segment.path())).unwrap();
        step(2, &mut last);
        assert_eq!(segment.key(row), Some(name.as_str()));
        step(3, &mut last);
        let (batch, at) = segment.locate(row).unwrap();
        for column in batch.columns() {
            let data = column.to_data();
            for buffer in
                data.buffers().iter().chain(data.child_data().iter().flat_map(|c| c.buffers()))
            {
                if let Some(byte) = buffer.as_slice().get(at * 4) {
                    checksum = checksum.wrapping_add(*byte as u64);
                }
            }
        }
        checksum = checksum.wrapping_add(sums.get(row).unwrap_or(0));
        step(4, &mut last);
    }
    std::hint::black_box(checksum);
    for (name, [seconds, bytes, faults]) in names.iter().zip(totals) {
        println!(
            "{name:>13}: {:7.3} ms, {:8.1} KiB, {:5.2} major faults per lookup",
            seconds * 1e3 / n as f64,
            bytes / 1024.0 / n as f64,
            faults / n as f64
        );
    }
    let all: f64 = totals.iter().map(|t| t[0]).sum();
    println!("        total: {:7.3} ms per lookup ({:.0}/s)", all * 1e3 / n as f64, n as f64 / all);
}
