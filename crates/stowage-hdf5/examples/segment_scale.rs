//! The cost of many small segments in a generic HDF5 cache: read-only open time, and random
//! `get` throughput when the bound on open segments is smaller than the segment count (each miss
//! closes one segment and opens another).
//!
//! ```text
//! cargo run --release -p stowage-hdf5 --example segment_scale -- DIR SEGMENTS [ROWS] [MAX_OPEN]...
//! ```
//!
//! Writes DIR (when it holds no cache) with SEGMENTS segments of ROWS (default 1) rows of 16
//! bytes each (a `u8[16]` tensor, one flush per segment), then opens it read-only 5 times
//! (warm page cache; min and median printed) and, for each MAX_OPEN (default 64), reads 20,000
//! random keys twice through a handle opened with that bound (the first pass opens the segments,
//! the second reads from those still open).

use std::path::Path;
use std::time::{Duration, Instant};

use stowage_core::{Backend, DType, OpenMode, Reader, Sample, Schema, ShapeRule, Tensor};
use stowage_hdf5::{Hdf5Backend, Hdf5Options};

const OPENS: usize = 5;
const GETS: usize = 20_000;

fn key(i: usize) -> String {
    format!("key-{i:08}")
}

fn write(dir: &Path, segments: usize, rows: usize) -> stowage_core::Result<Duration> {
    let schema = Schema::new().tensor("x", DType::U8, ShapeRule::Fixed(vec![16]));
    let started = Instant::now();
    let mut cache = Hdf5Backend::create(dir, &schema)?;
    for s in 0..segments {
        for r in 0..rows {
            let i = s * rows + r;
            let values: Vec<u8> = (0..16).map(|j| (i + j) as u8).collect();
            cache.put(&key(i), &Sample::new().with("x", Tensor::from_slice(&[16], &values)?))?;
        }
        cache.flush()?;
    }
    cache.finalize()?;
    Ok(started.elapsed())
}

/// The handle the measurements read through: the only use of the options.
fn open(dir: &Path, max_open: usize) -> stowage_core::Result<Hdf5Backend> {
    let options = Hdf5Options { max_open_segments: max_open, max_mapped_segments: max_open };
    Hdf5Backend::open_with(dir, OpenMode::ReadOnly, &options)
}

fn main() -> stowage_core::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let usage = "usage: segment_scale DIR SEGMENTS [ROWS] [MAX_OPEN]...";
    let dir = Path::new(args.first().expect(usage));
    let segments: usize = args.get(1).expect(usage).parse().expect(usage);
    let rows: usize = args.get(2).map_or(1, |r| r.parse().expect(usage));
    let bounds: Vec<usize> = match args.get(3..) {
        Some(rest) if !rest.is_empty() => rest.iter().map(|b| b.parse().expect(usage)).collect(),
        _ => vec![64],
    };
    if !dir.join("stowage.log").exists() {
        let took = write(dir, segments, rows)?;
        println!(
            "write: {segments} segments x {rows} rows in {:.2} s ({:.0} flushes/s)",
            took.as_secs_f64(),
            segments as f64 / took.as_secs_f64()
        );
    }
    let keys = segments * rows;
    let mut opens = Vec::new();
    for _ in 0..OPENS {
        let started = Instant::now();
        let cache = open(dir, 64)?;
        opens.push(started.elapsed());
        assert_eq!(cache.len(), keys);
    }
    opens.sort();
    println!(
        "open read-only: {segments} segments, {keys} keys: min {:.1} ms, median {:.1} ms",
        opens[0].as_secs_f64() * 1e3,
        opens[OPENS / 2].as_secs_f64() * 1e3
    );
    // A fixed pseudo-random sequence (xorshift), the same for every bound.
    let mut state = 0x9E37_79B9_7F4A_7C15u64;
    let order: Vec<usize> = (0..GETS)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state % keys as u64) as usize
        })
        .collect();
    for bound in bounds {
        let cache = open(dir, bound)?;
        // First pass: every segment the order reads opened (and hashed) once, when the bound
        // lets them all stay open; the second pass is timed.
        for (pass, label) in ["first", "second"].into_iter().enumerate() {
            let started = Instant::now();
            for &i in &order {
                let sample = cache.get(&key(i))?.expect("every key was written");
                assert_eq!(sample.tensor("x").expect("x").bytes()[0], i as u8);
            }
            let took = started.elapsed();
            println!(
                "random get, max_open_segments {bound}, {label} pass{}: {:.0} gets/s ({:.1} us \
                 each)",
                if pass == 0 { " (segments opened)" } else { "" },
                GETS as f64 / took.as_secs_f64(),
                took.as_secs_f64() * 1e6 / GETS as f64
            );
        }
    }
    Ok(())
}
