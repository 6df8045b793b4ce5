//! What the bound on open segments costs warm random gets: a finalized cache of ROWS keys (one
//! `f32[4]` row each, a flush every 2,048 puts, default options otherwise), read through
//! handles opened with each MAX_OPEN given. While a cache has at most MAX_OPEN segments they stay
//! pinned; with more, every get goes through the bounded least-recently-used set, and a get of a
//! segment it closed opens it again.
//!
//! ```text
//! cargo run --release -p stowage-arrow --example segment_bound -- DIR ROWS MAX_OPEN...
//! ```
//!
//! Writes DIR when it holds no cache; for each MAX_OPEN, 200,000 random gets (the same keys for
//! every bound), made once untimed, then timed; prints gets per second.

use std::path::Path;
use std::time::Instant;

use stowage_arrow::{ArrowBackend, ArrowOptions};
use stowage_core::{Backend, DType, OpenMode, Reader, Sample, Schema, ShapeRule, Tensor};

const GETS: usize = 200_000;

fn key(i: usize) -> String {
    format!("f32x4/{i}")
}

fn sample(i: usize) -> stowage_core::Result<Sample> {
    let values = [i as f32, 1.0, 2.0, 3.0];
    Ok(Sample::new().with("x", Tensor::from_slice(&[4], &values)?))
}

fn write(dir: &Path, rows: usize) -> stowage_core::Result<()> {
    let schema = Schema::new().tensor("x", DType::F32, ShapeRule::Fixed(vec![4]));
    let options = ArrowOptions { rank: Some(0), ..ArrowOptions::default() };
    let mut cache = ArrowBackend::create(dir, &schema, options)?;
    for i in 0..rows {
        cache.put(&key(i), &sample(i)?)?;
        if (i + 1) % 2048 == 0 {
            cache.flush()?;
        }
    }
    cache.finalize()
}

/// A splitmix64 step: the random key order, the same for every bound.
fn next(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

fn main() -> stowage_core::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let usage = "usage: segment_bound DIR ROWS MAX_OPEN...";
    let dir = Path::new(args.first().expect(usage));
    let rows: usize = args.get(1).expect(usage).parse().expect(usage);
    let bounds: Vec<usize> =
        args.get(2..).unwrap_or_default().iter().map(|b| b.parse().expect(usage)).collect();
    if !dir.join("stowage.log").exists() {
        let started = Instant::now();
        write(dir, rows)?;
        println!("write: {rows} rows in {:.1} s", started.elapsed().as_secs_f64());
    }
    let mut state = 17;
    let keys: Vec<String> = (0..GETS).map(|_| key(next(&mut state) as usize % rows)).collect();
    for max_open in bounds {
        let options = ArrowOptions { max_open_segments: max_open, ..ArrowOptions::default() };
        let cache = ArrowBackend::open(dir, OpenMode::ReadOnly, options)?;
        for key in &keys {
            assert!(cache.get(key)?.is_some(), "{key} is missing");
        }
        let started = Instant::now();
        for key in &keys {
            std::hint::black_box(cache.get(key)?);
        }
        let rate = GETS as f64 / started.elapsed().as_secs_f64();
        println!("max_open_segments {max_open}: {:.0} k gets/s", rate / 1e3);
    }
    Ok(())
}
