//! What opening a cache costs, read-only and resumed for appending (issue 17: opens in constant
//! time): the median of ROUNDS opens of each, with the page cache warm (not a test: run it in
//! release, on a cache `segment_bound` wrote).
//!
//! ```text
//! cargo run --release -p stowage-arrow --example open_cost -- DIR [ROUNDS]
//! cargo run --release -p stowage-arrow --example open_cost -- DIR write ROWS
//! ```
//!
//! `write` writes an unfinished cache of ROWS keys (`f32x4/<i>`, one `f32[4]` row each, a durable
//! flush every 2,048 puts, as the scale suite does before it resumes one).

use std::path::Path;
use std::time::Instant;

use stowage_arrow::{ArrowBackend, ArrowOptions};
use stowage_core::{Backend, DType, OpenMode, Sample, Schema, ShapeRule, Tensor};

fn write_unfinished(dir: &Path, rows: usize) -> stowage_core::Result<()> {
    let schema = Schema::new().tensor("x", DType::F32, ShapeRule::Fixed(vec![4]));
    let options = ArrowOptions { rank: Some(0), ..ArrowOptions::default() };
    let mut cache = ArrowBackend::create(dir, &schema, options)?;
    for i in 0..rows {
        let values = [i as f32, 1.0, 2.0, 3.0];
        cache.put(
            &format!("f32x4/{i}"),
            &Sample::new().with("x", Tensor::from_slice(&[4], &values)?),
        )?;
        if (i + 1) % 2048 == 0 {
            cache.flush()?;
        }
    }
    cache.flush()
}

fn median_ms(dir: &Path, mode: OpenMode, rounds: usize) -> stowage_core::Result<f64> {
    let mut times = Vec::with_capacity(rounds);
    for _ in 0..rounds {
        let options = ArrowOptions { rank: Some(0), ..ArrowOptions::default() };
        let started = Instant::now();
        let cache = ArrowBackend::open(dir, mode, options)?;
        times.push(started.elapsed().as_secs_f64() * 1e3);
        drop(cache);
    }
    times.sort_by(f64::total_cmp);
    Ok(times[times.len() / 2])
}

fn main() -> stowage_core::Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let dir = Path::new(args.first().expect("usage: open_cost DIR [ROUNDS] | DIR write ROWS"));
    if args.get(1).map(String::as_str) == Some("write") {
        let rows = args.get(2).expect("write ROWS").parse().expect("ROWS is a number");
        return write_unfinished(dir, rows);
    }
    let rounds: usize = args.get(1).map_or(5, |r| r.parse().expect("ROUNDS is a number"));
    println!("read-only open: {:.2} ms", median_ms(dir, OpenMode::ReadOnly, rounds)?);
    println!("resume (append): {:.2} ms", median_ms(dir, OpenMode::Append, rounds)?);
    Ok(())
}
