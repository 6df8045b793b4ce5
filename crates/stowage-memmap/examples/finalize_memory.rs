//! Finalize's time and memory on an unfinished cache, for issue 17's bounded-writer-memory
//! measurements (not a test: run it in release).
//!
//! ```text
//! cargo run --release -p stowage-memmap --example finalize_memory -- write DIR ROWS
//! cargo run --release -p stowage-memmap --example finalize_memory -- finalize DIR
//! cargo run --release -p stowage-memmap --example finalize_memory -- validate DIR
//! ```
//!
//! `write` puts ROWS rows of one float32[4] tensor (keys `f32x4/<i>`, a durable flush every
//! 2,048 rows, as the scale bench) and leaves the cache unfinished. `finalize` resumes it and
//! finalizes it, printing the time, the peak anonymous memory (`RssAnon` of /proc/self/status,
//! sampled every 2 ms: the heap, without the page cache of mapped files) the resume and the
//! finalize added, and the process's `VmHWM` (peak resident memory, mapped pages included).
//! `validate` opens it read-only and runs `validate(Structure)`, with the same figures.
//! `FINALIZE_ROW_GROUP_ROWS` sets `MemmapOptions::finalize_row_group_rows`.

use std::time::Instant;

use stowage_core::{Backend, DType, Sample, Schema, ShapeRule, Tensor, ValidationLevel};
use stowage_memmap::{MemmapBackend, MemmapOptions};
use stowage_test_support::process::status_kib;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let usage = "usage: finalize_memory write DIR ROWS | finalize DIR | validate DIR";
    match args.iter().map(String::as_str).collect::<Vec<_>>()[..] {
        ["write", dir, rows] => {
            let rows: usize = rows.parse()?;
            let schema = Schema::new().tensor("x", DType::F32, ShapeRule::Fixed(vec![4]));
            let mut cache = MemmapBackend::create(dir, &schema, MemmapOptions::default())?;
            let started = Instant::now();
            // Time in put and in flush per block of rows, to see which grows with the cache.
            let block = (rows / 10).max(1);
            let (mut in_put, mut in_flush) = (0.0f64, 0.0f64);
            for i in 0..rows {
                let x = i as f32;
                let sample =
                    Sample::new().with("x", Tensor::from_slice(&[4], &[x, x + 1.0, x + 2.0, x])?);
                let key = format!("f32x4/{i}");
                let put = Instant::now();
                cache.put(&key, &sample)?;
                in_put += put.elapsed().as_secs_f64();
                if (i + 1) % 2048 == 0 {
                    let flush = Instant::now();
                    cache.flush()?;
                    in_flush += flush.elapsed().as_secs_f64();
                }
                if (i + 1) % block == 0 {
                    println!(
                        "rows {:>10}..{:>10}: put {:.2} us/row, flush {:.2} us/row",
                        i + 1 - block,
                        i + 1,
                        in_put * 1e6 / block as f64,
                        in_flush * 1e6 / block as f64
                    );
                    (in_put, in_flush) = (0.0, 0.0);
                }
            }
            cache.flush()?;
            println!("wrote {rows} rows in {:.1} s", started.elapsed().as_secs_f64());
        }
        ["finalize" | "validate", dir] => {
            let finalize = args[0] == "finalize";
            let baseline = status_kib("RssAnon:");
            let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
            let stopped = stop.clone();
            let sampler = std::thread::spawn(move || {
                let mut peak = 0;
                loop {
                    peak = peak.max(status_kib("RssAnon:"));
                    if stopped.load(std::sync::atomic::Ordering::Relaxed) {
                        return peak;
                    }
                    std::thread::sleep(std::time::Duration::from_millis(2));
                }
            });
            let mut options = MemmapOptions::default();
            if let Ok(rows) = std::env::var("FINALIZE_ROW_GROUP_ROWS") {
                options.finalize_row_group_rows = rows.parse()?;
            }
            let started = Instant::now();
            let mut cache = match finalize {
                true => MemmapBackend::open_append(dir, options)?,
                false => MemmapBackend::open_read_only(dir, options)?,
            };
            let opened = started.elapsed();
            let started = Instant::now();
            if finalize {
                cache.finalize()?;
            } else {
                let report = stowage_core::Reader::validate(&cache, ValidationLevel::Structure)?;
                println!("validate(Structure): {} problems", report.problems.len());
            }
            let finalized = started.elapsed();
            drop(cache);
            stop.store(true, std::sync::atomic::Ordering::Relaxed);
            let peak = sampler.join().expect("sampler");
            println!(
                "open {:.0} ms, {} {:.0} ms, peak RssAnon added {:.1} MiB, VmHWM {:.1} MiB",
                opened.as_secs_f64() * 1e3,
                args[0],
                finalized.as_secs_f64() * 1e3,
                peak.saturating_sub(baseline) as f64 / 1024.0,
                status_kib("VmHWM:") as f64 / 1024.0,
            );
        }
        _ => return Err(usage.into()),
    }
    Ok(())
}
