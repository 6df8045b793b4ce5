//! Arrow segment backend benchmark, side by side with the physical references on the same bytes
//! in the same run, and the index at scale.
//!
//! Workload (`f32x512/`): 100,000 samples of float32[512] (torchcachex's `tensor` structure),
//! written with the default options (a segment per 2,048 samples, the key index merged in the
//! background as the writer does), left in `$STOWAGE_BENCH_DIR/f32x512` for the Python peer
//! (`xtask/py/arrow_peer.py`), which reads and writes the same files the torchcachex way.
//!
//! - `get_batch`, `get_batch_no_checksum`: one `get_batch` of 1,000 random keys, with and without
//!   the row checksums; `get`, `get_no_checksum`: the same keys one `get` at a time.
//! - `reference_raw_copy`: copying the same 1,000 rows' value bytes out of warm maps of the same
//!   segment files (addresses known in advance: no lookup); `reference_xxh3_in_place`: hashing
//!   them in place (what a verified read costs at least).
//! - `put_flush_no_fsync`, `put_flush`: 2,048 puts and a `flush` into a new cache, without fsync
//!   (torchcachex's durability) and with it (default); `reference_write_fsync`: writing the same
//!   2,048 rows' bytes to a new file and fdatasync.
//! - `open`: opening the 100,000-sample cache read-only.
//! - `measurements.json` in the bench directory: the resident memory an open adds at each scale
//!   (`open_rss_<keys>`, MiB), which criterion cannot hold.
//!
//! Maps are warm (every page touched through every map before timing); rows are not in the CPU
//! cache: every read benchmark walks the same shuffled epoch over all samples
//! (`stowage_conformance::generate::epoch_order`). The scale benchmarks are in [`scale`].
//! `STOWAGE_BENCH_ARROW_ROWS` overrides the sample count.

mod scale;

use std::hint::black_box;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use arrow_array::{Array, ListArray};
use criterion::{BenchmarkGroup, Criterion, Throughput, criterion_group, criterion_main};
use stowage_arrow::test_support::segment::Segment;
use stowage_arrow::{ArrowBackend, ArrowOptions};
use stowage_core::{Backend, OpenMode, Reader, Sample};
use stowage_test_support::workload::{WIDTH, key, sample, schema};

type Group<'a> = BenchmarkGroup<'a, criterion::measurement::WallTime>;

/// Keys per timed `get_batch`, and reads per timed iteration of every read benchmark.
const READS: usize = 1000;
/// Samples per timed put + flush (torchcachex's `flush_every`).
const WRITE_ROWS: usize = 2048;

fn bench_dir() -> PathBuf {
    std::env::var_os("STOWAGE_BENCH_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| std::env::temp_dir().join("stowage-bench-arrow"))
}

/// Builds `rows` samples into `dir` with the default options and finalizes.
fn build_cache(dir: &Path, rows: usize) {
    let _ = std::fs::remove_dir_all(dir);
    let options = ArrowOptions { rank: Some(0), ..ArrowOptions::default() };
    let mut cache = ArrowBackend::create(dir, &schema(), options).expect("create");
    for i in 0..rows {
        cache.put(&key(i), &sample(i)).expect("put");
    }
    cache.finalize().expect("finalize");
}

/// Every sample's value bytes inside maps of the cache's segment files: the physical reference.
struct RawRows {
    /// Kept open so that the slices below stay mapped.
    _segments: Vec<Segment>,
    /// Sample `i`'s 2 KiB, by sample number.
    rows: Vec<&'static [u8]>,
}

impl RawRows {
    fn new(cache: &ArrowBackend, rows: usize) -> RawRows {
        let mut segments = Vec::new();
        let mut by_sample: Vec<&'static [u8]> = vec![&[]; rows];
        for (id, path) in cache.reader().segment_paths() {
            let segment = Segment::open(id, path).expect("segment");
            let keys: Vec<String> =
                segment.keys().expect("keys").into_iter().map(str::to_owned).collect();
            for (row, key) in keys.iter().enumerate() {
                let (batch, at) = segment.locate(row).expect("row");
                let lists = batch.column_by_name("data").expect("data column");
                let lists = lists.as_any().downcast_ref::<ListArray>().expect("list");
                let values = lists.values().to_data();
                let start = lists.value_offsets()[at] as usize + values.offset();
                let bytes = &values.buffers()[0].as_slice()[start * 4..(start + WIDTH) * 4];
                // SAFETY: the slice points into a segment map that `_segments` keeps alive for as
                // long as `RawRows` exists; the `'static` never escapes it.
                let bytes: &'static [u8] = unsafe { std::mem::transmute(bytes) };
                let sample: usize = key["sample".len()..].parse().expect("bench key");
                by_sample[sample] = bytes;
            }
            segments.push(segment);
        }
        assert!(by_sample.iter().all(|row| row.len() == WIDTH * 4), "every sample found");
        RawRows { _segments: segments, rows: by_sample }
    }

    /// Touches every page of every row so that the timed loops run on warm maps.
    fn warm(&self) -> u64 {
        self.rows
            .iter()
            .map(|row| row.iter().step_by(1024).map(|&b| u64::from(b)).sum::<u64>())
            .sum()
    }
}

/// Random reads through stowage and through the raw references, on the same epoch.
fn read_benches(group: &mut Group<'_>, dir: &Path, rows: usize) {
    eprintln!("arrow bench: building {rows} samples of float32[{WIDTH}] in {}", dir.display());
    let started = Instant::now();
    build_cache(dir, rows);
    eprintln!("arrow bench: built in {:.1?}", started.elapsed());
    let open = |verify_checksums| {
        let options = ArrowOptions { verify_checksums, ..ArrowOptions::default() };
        ArrowBackend::open(dir, OpenMode::ReadOnly, options).expect("open")
    };
    let (verified, unverified) = (open(true), open(false));
    let raw = RawRows::new(&verified, rows);
    black_box(raw.warm());
    let keys: Vec<String> = (0..rows).map(key).collect();
    for key in &keys {
        black_box(verified.get(key).expect("get").expect("present"));
        black_box(unverified.get(key).expect("get").expect("present"));
    }
    // Same seed in every benchmark: the same samples in the same order for all of them.
    let order = stowage_conformance::generate::epoch_order(rows, READS, 10);

    group.measurement_time(Duration::from_secs(4)).warm_up_time(Duration::from_secs(1));
    group.sample_size(30);
    group.throughput(Throughput::Elements(READS as u64));
    for (id, cache) in [("get_batch", &verified), ("get_batch_no_checksum", &unverified)] {
        bench_batches(group, id, &order, |picks| {
            let batch: Vec<&str> = picks.iter().map(|&i| keys[i].as_str()).collect();
            drop(black_box(cache.get_batch(&batch).expect("get_batch")));
        });
    }
    for (id, cache) in [("get", &verified), ("get_no_checksum", &unverified)] {
        bench_batches(group, id, &order, |picks| {
            for &i in picks {
                drop(black_box(cache.get(&keys[i]).expect("get")));
            }
        });
    }
    let mut buffer = vec![0u8; WIDTH * 4];
    bench_batches(group, "reference_raw_copy", &order, |picks| {
        for &i in picks {
            buffer.copy_from_slice(raw.rows[i]);
            black_box(&buffer);
        }
    });
    bench_batches(group, "reference_xxh3_in_place", &order, |picks| {
        for &i in picks {
            black_box(xxhash_rust::xxh3::xxh3_64(raw.rows[i]));
        }
    });
    group.sample_size(20).throughput(Throughput::Elements(1));
    group.bench_function("open", |b| {
        b.iter(|| black_box(ArrowBackend::open(dir, OpenMode::ReadOnly, ArrowOptions::default())))
    });
}

/// Benchmarks `read` of the next [`READS`] samples of `order` per iteration. Every benchmark walks
/// `order` from its start: the same samples in the same order for stowage and the references.
fn bench_batches(group: &mut Group<'_>, id: &str, order: &[usize], mut read: impl FnMut(&[usize])) {
    let mut picks = order.chunks_exact(READS).cycle();
    group.bench_function(id, |b| b.iter(|| read(picks.next().expect("cycle"))));
}

/// 2,048 puts and a flush into a new cache, without and with fsync, against writing the same
/// bytes to a new file with fdatasync.
fn write_benches(group: &mut Group<'_>, scratch: &Path) {
    group.sample_size(20).measurement_time(Duration::from_secs(8));
    group.throughput(Throughput::Elements(WRITE_ROWS as u64));
    let samples: Vec<Sample> = (0..WRITE_ROWS).map(sample).collect();
    let keys: Vec<String> = (0..WRITE_ROWS).map(key).collect();
    for (id, durable) in [("put_flush_no_fsync", false), ("put_flush", true)] {
        let options = ArrowOptions { durable, rank: Some(0), ..ArrowOptions::default() };
        group.bench_function(id, |b| {
            b.iter_custom(|iterations| {
                let mut total = Duration::ZERO;
                for _ in 0..iterations {
                    let _ = std::fs::remove_dir_all(scratch);
                    let mut cache =
                        ArrowBackend::create(scratch, &schema(), options.clone()).expect("create");
                    let started = Instant::now();
                    for (key, sample) in keys.iter().zip(&samples) {
                        cache.put(key, sample).expect("put");
                    }
                    cache.flush().expect("flush");
                    total += started.elapsed();
                }
                total
            })
        });
    }
    let bytes: Vec<u8> =
        samples.iter().flat_map(|s| s.tensor("tensor").expect("tensor").bytes().to_vec()).collect();
    let path = scratch.with_extension("raw");
    group.bench_function("reference_write_fsync", |b| {
        b.iter_custom(|iterations| {
            let mut total = Duration::ZERO;
            for _ in 0..iterations {
                let _ = std::fs::remove_file(&path);
                let started = Instant::now();
                let mut file = std::fs::File::create(&path).expect("create");
                file.write_all(&bytes).expect("write");
                file.sync_data().expect("fdatasync");
                total += started.elapsed();
            }
            total
        })
    });
    let _ = std::fs::remove_dir_all(scratch);
    let _ = std::fs::remove_file(path);
}

fn benches(c: &mut Criterion) {
    let dir = bench_dir();
    let rows = std::env::var("STOWAGE_BENCH_ARROW_ROWS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(100_000);
    std::fs::create_dir_all(&dir).expect("bench dir");
    let mut group = c.benchmark_group("arrow");
    read_benches(&mut group, &dir.join("f32x512"), rows);
    write_benches(&mut group, &dir.join("write-scratch"));
    let levels = scale::benches(&mut group, &dir.join("scale"));
    group.finish();
    write_measurements(&dir.join("measurements.json"), &levels);
}

/// Writes what criterion cannot hold (levels, not rates) as `{"<name>": {"value": v, "unit":
/// "MiB"}}` for `cargo xtask bench`.
fn write_measurements(path: &Path, levels: &[(String, f64)]) {
    let json: serde_json::Map<String, serde_json::Value> = levels
        .iter()
        .map(|(name, mib)| (name.clone(), serde_json::json!({"value": mib, "unit": "MiB"})))
        .collect();
    std::fs::write(path, serde_json::Value::Object(json).to_string()).expect("measurements.json");
}

criterion_group!(arrow, benches);
criterion_main!(arrow);
