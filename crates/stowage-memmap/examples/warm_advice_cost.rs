//! What the cold-read advice costs a warm cache: `get` and `get_batch` of the same random keys
//! through two handles of one cache, one with `ColdReadAdvice::Adaptive` (the default), one with
//! `Never`, in alternating rounds, each handle first in every other round (on a shared machine,
//! the best round of each is the least disturbed).
//!
//! `cargo run --release -p stowage-memmap --example warm_advice_cost -- [ROWS] [ROUNDS]`
//! (default 1,000,000 rows of one float32[4] field, 15 rounds).

use std::hint::black_box;
use std::time::Instant;

use stowage_core::cold_reads::ColdReadAdvice;
use stowage_core::{Backend, DType, Reader, Sample, Schema, ShapeRule, Tensor};
use stowage_memmap::{MemmapBackend, MemmapOptions};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let rows: usize = args.next().map_or(Ok(1_000_000), |a| a.parse())?;
    let rounds: usize = args.next().map_or(Ok(15), |a| a.parse())?;
    let dir = tempfile::tempdir()?;
    let schema = Schema::new().tensor("x", DType::F32, ShapeRule::Fixed(vec![4]));
    let key = |i: usize| format!("f32x4/{i}");
    let mut cache = MemmapBackend::create(dir.path(), &schema, MemmapOptions::default())?;
    for i in 0..rows {
        let sample = Sample::new().with("x", Tensor::from_slice(&[4], &[i as f32; 4])?);
        cache.put(&key(i), &sample)?;
    }
    cache.finalize()?;
    drop(cache);
    let open = |advice| {
        let options = MemmapOptions { cold_read_advice: advice, ..MemmapOptions::default() };
        MemmapBackend::open_read_only(dir.path(), options)
    };
    let handles = [open(ColdReadAdvice::Adaptive)?, open(ColdReadAdvice::Never)?];
    // 100,000 random keys (a fixed xorshift), read once untimed by each handle.
    let mut state = 0x9E37_79B9_7F4A_7C15u64;
    let keys: Vec<String> = (0..100_000)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            key(state as usize % rows)
        })
        .collect();
    let refs: Vec<&str> = keys.iter().map(String::as_str).collect();
    for handle in &handles {
        for chunk in refs.chunks(1024) {
            black_box(handle.get_batch(chunk)?);
        }
    }
    let mut best = [[0f64; 2]; 2]; // [handle][get, get_batch], rows per second
    for round in 0..rounds {
        // Each handle goes first in every other round.
        let order = if round % 2 == 0 { [0, 1] } else { [1, 0] };
        for h in order {
            let handle = &handles[h];
            let started = Instant::now();
            for key in &refs {
                black_box(handle.get(key)?);
            }
            best[h][0] = best[h][0].max(refs.len() as f64 / started.elapsed().as_secs_f64());
            let started = Instant::now();
            for chunk in refs.chunks(1024) {
                black_box(handle.get_batch(chunk)?);
            }
            best[h][1] = best[h][1].max(refs.len() as f64 / started.elapsed().as_secs_f64());
        }
    }
    for (what, i) in [("get", 0), ("get_batch of 1,024", 1)] {
        println!(
            "{rows} rows, warm {what}: advice on {:.0} k/s, off {:.0} k/s, on/off {:.3}x",
            best[0][i] / 1e3,
            best[1][i] / 1e3,
            best[0][i] / best[1][i]
        );
    }
    Ok(())
}
