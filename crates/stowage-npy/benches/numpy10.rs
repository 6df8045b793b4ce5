//! NUMPY_10 benchmark, side by side with the physical references on the same bytes in the same run.
//!
//! Two workloads: 100,000 x float32[512] (2 KiB rows; benchmark ids without suffix) and
//! 10,000 x float32[64, 64] (16 KiB rows; ids ending in `_64x64`). For each: random get with and
//! without checksum, get from a record string (no key lookup, as hangar reads), and the references
//! raw row copy from a warm memory map, xxh64 in place, and copy + xxh64. For the 2 KiB workload
//! also sequential put+flush against sequential write+fsync bandwidth, and open time.
//!
//! Maps are warm: every page is touched through every map before timing. Rows are not in the CPU
//! cache: every read benchmark walks the same shuffled epoch over all rows
//! (`stowage_conformance::generate::epoch_order`).
//! Run through `cargo xtask bench`, which adds the Python peer and writes docs/benchmarks.md.
//! `STOWAGE_BENCH_DIR` names where the caches are left (the 2 KiB one with `records.txt` for the
//! Python peer); `STOWAGE_BENCH_ROWS` overrides the 2 KiB row count.

use criterion::{BenchmarkGroup, Criterion, Throughput, criterion_group, criterion_main};
use memmap2::Mmap;
use std::collections::HashMap;
use std::hint::black_box;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use stowage_core::{Backend, DType, Reader, Sample, Schema, ShapeRule, Tensor, shape};
use stowage_npy::{NpyBackend, NpyOptions};

/// Random reads per timed iteration.
const READS: usize = 1000;
/// Rows per timed put+flush iteration (and per write+fsync reference iteration).
const WRITE_ROWS: usize = 10_000;

/// One generated cache: rows of float32 of `dims`.
struct Workload {
    suffix: &'static str,
    dims: Vec<usize>,
    rows: usize,
}

impl Workload {
    fn schema(&self) -> Schema {
        Schema::new().tensor("x", DType::F32, ShapeRule::Fixed(self.dims.clone()))
    }

    fn row_bytes(&self) -> usize {
        shape::byte_count(&self.dims, 4).expect("small shape")
    }

    fn row(&self, i: usize) -> Sample {
        let n = self.row_bytes() / 4;
        let values: Vec<f32> = (0..n).map(|j| (i * n + j) as f32 * 0.5).collect();
        Sample::new().with("x", Tensor::from_slice(&self.dims, &values).expect("shape fits"))
    }

    fn id(&self, name: &str) -> String {
        format!("{name}{}", self.suffix)
    }
}

fn bench_dir() -> PathBuf {
    std::env::var_os("STOWAGE_BENCH_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| std::env::temp_dir().join("stowage-bench-numpy10"))
}

/// Builds the cache (once per run) and writes `records.txt` for the Python peer.
fn build_cache(dir: &Path, workload: &Workload) {
    let _ = std::fs::remove_dir_all(dir);
    let mut cache =
        NpyBackend::create(dir, &workload.schema(), NpyOptions::default()).expect("create");
    let mut key = String::new();
    for i in 0..workload.rows {
        cache.put(key_of(&mut key, i), &workload.row(i)).expect("put");
    }
    cache.finalize().expect("finalize");
    let file = std::fs::File::create(dir.join("records.txt")).expect("records.txt");
    let mut out = std::io::BufWriter::new(file);
    for (_, records) in cache.records().expect("records") {
        writeln!(out, "{}", records[0]).expect("write records.txt");
    }
    out.flush().expect("flush records.txt");
}

/// The same row bytes located in read-only maps of the collection files: the physical reference.
struct RawRows {
    maps: Vec<Mmap>,
    /// (map index, byte offset) of each row.
    rows: Vec<(usize, usize)>,
    row_bytes: usize,
}

impl RawRows {
    fn new(reader: &NpyBackend, row_bytes: usize) -> RawRows {
        let mut maps = Vec::new();
        let mut by_uid = HashMap::new();
        let mut rows = Vec::new();
        for (_, records) in reader.records().expect("records") {
            let r = &records[0];
            let m = *by_uid.entry(r.uid.clone()).or_insert_with(|| {
                let path = reader.layout().data_file(&r.uid);
                let file = std::fs::File::open(path).expect("data file");
                // SAFETY: the bench owns these files and nothing modifies them while mapped.
                maps.push(unsafe { Mmap::map(&file) }.expect("map"));
                maps.len() - 1
            });
            let header = stowage_core::npy_header::parse(&maps[m]).expect("header");
            rows.push((m, header.data_offset + r.collection_index as usize * row_bytes));
        }
        RawRows { maps, rows, row_bytes }
    }

    fn row(&self, i: usize) -> &[u8] {
        let (m, off) = self.rows[i];
        &self.maps[m][off..off + self.row_bytes]
    }

    /// Touches every page so that the timed loops run on warm maps.
    fn warm(&self) -> u64 {
        (0..self.rows.len())
            .map(|i| self.row(i).iter().step_by(4096).map(|&b| u64::from(b)).sum::<u64>())
            .sum()
    }
}

/// Random reads of `workload` (built in `dir`) through stowage and through the raw references.
fn read_benches(
    group: &mut BenchmarkGroup<'_, criterion::measurement::WallTime>,
    dir: &Path,
    workload: &Workload,
) {
    eprintln!(
        "numpy10 bench: building {} x float32{} in {}",
        workload.rows,
        shape::display(&workload.dims),
        dir.display()
    );
    build_cache(dir, workload);
    let verified = NpyBackend::open_read_only(dir, NpyOptions::default()).expect("open");
    let options = NpyOptions { verify_checksums: false, ..NpyOptions::default() };
    let unverified = NpyBackend::open_read_only(dir, options).expect("open");
    let keys = verified.keys().expect("keys");
    let records: Vec<_> = verified
        .records()
        .expect("records")
        .into_iter()
        .map(|(_, r)| r.into_iter().next().expect("one field"))
        .collect();
    let raw = RawRows::new(&verified, workload.row_bytes());
    black_box(raw.warm());
    for k in &keys {
        black_box(verified.get(k).expect("get"));
        black_box(unverified.get(k).expect("get"));
    }
    // Same seed in every bench: the same rows in the same order for stowage and the references.
    let order = stowage_conformance::generate::epoch_order(workload.rows, READS, 10);

    group.measurement_time(Duration::from_secs(4)).warm_up_time(Duration::from_secs(1));
    group.sample_size(50);
    group.throughput(Throughput::Elements(READS as u64));
    // Keys are formatted as they are read (a loader derives them from its sample index), so the
    // timings do not include the cache misses of looking up 100,000 scattered key strings.
    let mut key = String::new();
    bench_rows(group, workload.id("get_checksum"), &order, |i| {
        drop(black_box(verified.get(key_of(&mut key, i)).expect("get")));
    });
    bench_rows(group, workload.id("get_no_checksum"), &order, |i| {
        drop(black_box(unverified.get(key_of(&mut key, i)).expect("get")));
    });
    bench_rows(group, workload.id("get_record_checksum"), &order, |i| {
        drop(black_box(verified.read_record("x", &records[i], true).expect("read")));
    });
    let mut buffer = vec![0u8; workload.row_bytes()];
    bench_rows(group, workload.id("reference_raw_copy"), &order, |i| {
        buffer.copy_from_slice(raw.row(i));
        black_box(&buffer);
    });
    bench_rows(group, workload.id("reference_xxh64_in_place"), &order, |i| {
        black_box(xxhash_rust::xxh64::xxh64(raw.row(i), 0));
    });
    bench_rows(group, workload.id("reference_copy_xxh64"), &order, |i| {
        buffer.copy_from_slice(raw.row(i));
        black_box(xxhash_rust::xxh64::xxh64(&buffer, 0));
    });
}

/// Benchmarks `read` of [`READS`] rows per iteration, the next slice of `order` each time.
/// Every function walks `order` from its start: the same rows, in the same order, for stowage and
/// for the references.
fn bench_rows(
    group: &mut BenchmarkGroup<'_, criterion::measurement::WallTime>,
    id: String,
    order: &[usize],
    mut read: impl FnMut(usize),
) {
    let mut picks = order.chunks_exact(READS).cycle();
    group.bench_function(id, |b| {
        b.iter(|| picks.next().expect("cycle").iter().for_each(|&i| read(i)));
    });
}

/// The key `build_cache` gave row `i`, formatted into `buffer`.
fn key_of(buffer: &mut String, i: usize) -> &str {
    use std::fmt::Write as _;
    buffer.clear();
    write!(buffer, "row-{i}").expect("writing to a String");
    buffer
}

/// Sequential put + one flush of `WRITE_ROWS` rows, against writing the same bytes + fsync.
fn write_benches(
    group: &mut BenchmarkGroup<'_, criterion::measurement::WallTime>,
    scratch: &Path,
    workload: &Workload,
) {
    group.sample_size(10).measurement_time(Duration::from_secs(8));
    group.throughput(Throughput::Elements(WRITE_ROWS as u64));
    let samples: Vec<Sample> = (0..WRITE_ROWS).map(|i| workload.row(i)).collect();
    let keys: Vec<String> = (0..WRITE_ROWS).map(|i| format!("row-{i}")).collect();
    group.bench_function("put_flush", |b| {
        b.iter_custom(|iterations| {
            let mut total = Duration::ZERO;
            for _ in 0..iterations {
                let _ = std::fs::remove_dir_all(scratch);
                let mut cache =
                    NpyBackend::create(scratch, &workload.schema(), NpyOptions::default())
                        .expect("create");
                let start = Instant::now();
                for (key, sample) in keys.iter().zip(&samples) {
                    cache.put(key, sample).expect("put");
                }
                cache.flush().expect("flush");
                total += start.elapsed();
            }
            total
        })
    });
    let bytes: Vec<u8> =
        samples.iter().flat_map(|s| s.tensor("x").expect("x").bytes().to_vec()).collect();
    let path = scratch.with_extension("raw");
    group.bench_function("reference_write_fsync", |b| {
        b.iter_custom(|iterations| {
            let mut total = Duration::ZERO;
            for _ in 0..iterations {
                let _ = std::fs::remove_file(&path);
                let start = Instant::now();
                let mut file = std::fs::File::create(&path).expect("create");
                file.write_all(&bytes).expect("write");
                file.sync_all().expect("fsync");
                total += start.elapsed();
            }
            total
        })
    });
    let _ = std::fs::remove_dir_all(scratch);
    let _ = std::fs::remove_file(path);
}

fn benches(c: &mut Criterion) {
    let dir = bench_dir();
    let rows = std::env::var("STOWAGE_BENCH_ROWS").ok().and_then(|v| v.parse().ok());
    let small = Workload { suffix: "", dims: vec![512], rows: rows.unwrap_or(100_000) };
    let large = Workload { suffix: "_64x64", dims: vec![64, 64], rows: 10_000 };
    let mut group = c.benchmark_group("numpy10");
    read_benches(&mut group, &dir.join("f32x64x64"), &large);
    let _ = std::fs::remove_dir_all(dir.join("f32x64x64"));
    // The 2 KiB cache is left in `dir` itself for the Python peer.
    read_benches(&mut group, &dir, &small);
    write_benches(&mut group, &dir.with_extension("write-scratch"), &small);
    group.sample_size(10).measurement_time(Duration::from_secs(5));
    group.throughput(Throughput::Elements(1));
    group.bench_function("open", |b| {
        b.iter(|| black_box(NpyBackend::open_read_only(&dir, NpyOptions::default()).expect("open")))
    });
    group.finish();
}

criterion_group!(numpy10, benches);
criterion_main!(numpy10);
