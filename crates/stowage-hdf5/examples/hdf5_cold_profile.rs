//! Where cold reads of a finished generic cache spend their I/O: bytes read from the disk
//! (`/proc/self/io` `read_bytes`), major page faults and wall time per `get` and per `get_batch`
//! row, with the machine's page cache dropped first (as `stowage bench --scale --drop-caches`
//! does), then which files the reads brought into the page cache (`mincore` of each file of the
//! cache: the log, the key index runs, the segments). Linux only; dropping the caches needs root.
//!
//! ```text
//! cargo run --release -p stowage-hdf5 --example hdf5_cold_profile -- DIR ROWS [GETS] [BATCHES]
//! ```
//!
//! `hdf5_cold_profile DIR ROWS write` writes such a cache (float32[4] rows, a durable flush every
//! 2,048 rows, then finalize).
//!
//! With `COLD_PROFILE_NO_DROP` set the page cache is kept: each get's first use of its segment
//! by the handle, without the disk.
//!
//! `DIR` is a cache the scale suite wrote (`stowage bench --scale --keep`: keys `f32x4/00000000`
//! up to `ROWS`). As in the scale suite, each measurement uses a handle whose first get was made
//! before the drop.

use std::path::Path;
use std::time::Instant;

use stowage_core::{Backend, OpenMode, Reader};
use stowage_hdf5::Hdf5Backend;

/// `read_bytes` of `/proc/self/io` and major faults of `/proc/self/stat`.
fn counters() -> (u64, u64) {
    let io = std::fs::read_to_string("/proc/self/io").unwrap_or_default();
    let read = io
        .lines()
        .find_map(|l| l.strip_prefix("read_bytes: "))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0);
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let majflt = stat
        .rsplit_once(')')
        .and_then(|(_, rest)| rest.split_whitespace().nth(9))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    (read, majflt)
}

fn drop_caches() {
    if std::env::var_os("COLD_PROFILE_NO_DROP").is_some() {
        return; // Each handle's first use of a segment, from the page cache.
    }
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

/// Resident KiB of the file at `path` (`mincore` of a map of it).
fn resident_kib(path: &Path) -> u64 {
    let Ok(file) = std::fs::File::open(path) else { return 0 };
    let len = file.metadata().map(|m| m.len()).unwrap_or(0) as usize;
    if len == 0 {
        return 0;
    }
    // SAFETY: a read-only map of a file nobody rewrites while the example runs; only its
    // residency is asked, no byte is read.
    let map = unsafe { memmap2::Mmap::map(&file) };
    let Ok(map) = map else { return 0 };
    let pages = len.div_ceil(4096);
    let mut vec = vec![0u8; pages];
    // SAFETY: `vec` holds one byte per page of the mapped range.
    let rc = unsafe { libc::mincore(map.as_ptr() as *mut libc::c_void, len, vec.as_mut_ptr()) };
    if rc != 0 {
        return 0;
    }
    vec.iter().filter(|&&b| b & 1 == 1).count() as u64 * 4
}

/// Resident KiB by kind of file: log and marker, runs, segments (and how many segments).
fn residency(dir: &Path) -> String {
    let mut log = resident_kib(&dir.join("stowage.log"));
    log += resident_kib(&dir.join("stowage.complete"));
    let files = |sub: &str| -> Vec<std::path::PathBuf> {
        std::fs::read_dir(dir.join(sub))
            .map(|d| d.filter_map(|e| e.ok().map(|e| e.path())).collect())
            .unwrap_or_default()
    };
    let runs: u64 = files("index").iter().map(|p| resident_kib(p)).sum();
    let segments: Vec<u64> = files("segments").iter().map(|p| resident_kib(p)).collect();
    let touched = segments.iter().filter(|&&k| k > 0).count();
    let seg_kib: u64 = segments.iter().sum();
    format!(
        "resident: log {log} KiB, runs {runs} KiB, segments {seg_kib} KiB in {touched} files \
         ({:.1} KiB per touched segment)",
        seg_kib as f64 / touched.max(1) as f64
    )
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    if args.len() < 3 {
        return Err("usage: hdf5_cold_profile DIR ROWS [GETS] [BATCHES]".into());
    }
    let dir = Path::new(&args[1]);
    let rows: usize = args[2].parse()?;
    if args.get(3).map(String::as_str) == Some("write") {
        // As the scale suite writes: a durable flush every 2,048 rows, then finalize.
        let schema = stowage_core::Schema::new().tensor(
            "x",
            stowage_core::DType::F32,
            stowage_core::ShapeRule::Fixed(vec![4]),
        );
        let mut cache = Hdf5Backend::create(dir, &schema)?;
        let started = Instant::now();
        for i in 0..rows {
            let row = [i as f32, 1.0, 2.0, 3.0];
            let tensor = stowage_core::Tensor::from_slice(&[4], &row)?;
            cache.put(&format!("f32x4/{i:08}"), &stowage_core::Sample::new().with("x", tensor))?;
            if i % 2048 == 2047 {
                cache.flush()?;
            }
        }
        cache.finalize()?;
        println!(
            "wrote {rows} rows at {:.0} rows/s",
            rows as f64 / started.elapsed().as_secs_f64()
        );
        return Ok(());
    }
    let gets: usize = args.get(3).map_or(Ok(200), |v| v.parse())?;
    let batches: usize = args.get(4).map_or(Ok(2), |v| v.parse())?;
    let first = format!("f32x4/{:08}", rows / 7);
    println!("{}, {rows} keys", dir.display());

    for one in [1usize, 10] {
        let cache = Hdf5Backend::open(dir, OpenMode::ReadOnly)?;
        cache.get(&first)?.ok_or("first key missing")?;
        drop_caches();
        let keys = random_keys(900 + one as u64, rows, one);
        let before = counters();
        let started = Instant::now();
        for key in &keys {
            cache.get(key)?.ok_or("key missing")?;
        }
        report(&format!("{one} cold gets"), one, started, before);
        println!("  {}", residency(dir));
    }

    let cache = Hdf5Backend::open(dir, OpenMode::ReadOnly)?;
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

    let cache = Hdf5Backend::open(dir, OpenMode::ReadOnly)?;
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
    Ok(())
}
