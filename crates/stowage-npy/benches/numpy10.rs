//! NUMPY_10 benchmark: random get (with and without checksum), sequential put+flush and open time
//! of a 100,000 x float32[512] cache, side by side with the physical references on the same bytes
//! in the same run: raw row copy from a warm memory map, xxh64 in place, copy + xxh64, and
//! sequential write+fsync bandwidth.
//!
//! Run through `cargo xtask bench`, which adds the Python peer and writes docs/benchmarks.md.
//! `STOWAGE_BENCH_DIR` names where the cache is left (with `records.txt` for the Python peer);
//! `STOWAGE_BENCH_ROWS` overrides the row count.

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use memmap2::Mmap;
use rand::{Rng, SeedableRng, rngs::StdRng};
use std::collections::HashMap;
use std::hint::black_box;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use stowage_core::{Backend, DType, Sample, Schema, ShapeRule, Tensor};
use stowage_npy::{NpyBackend, NpyOptions};

const ROW_ELEMS: usize = 512;
const ROW_BYTES: usize = ROW_ELEMS * 4;
/// Random reads per timed iteration.
const READS: usize = 1000;
/// Rows per timed put+flush iteration (and per write+fsync reference iteration).
const WRITE_ROWS: usize = 10_000;

fn bench_dir() -> PathBuf {
    std::env::var_os("STOWAGE_BENCH_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| std::env::temp_dir().join("stowage-bench-numpy10"))
}

fn rows() -> usize {
    std::env::var("STOWAGE_BENCH_ROWS").ok().and_then(|v| v.parse().ok()).unwrap_or(100_000)
}

fn schema() -> Schema {
    Schema::new().tensor("x", DType::F32, ShapeRule::Fixed(vec![ROW_ELEMS]))
}

fn row(i: usize) -> Sample {
    let values: Vec<f32> = (0..ROW_ELEMS).map(|j| (i * ROW_ELEMS + j) as f32 * 0.5).collect();
    Sample::new().with("x", Tensor::from_slice(&[ROW_ELEMS], &values).expect("shape fits"))
}

/// Builds the cache (once per run) and writes `records.txt` for the Python peer.
fn build_cache(dir: &Path, rows: usize) {
    let _ = std::fs::remove_dir_all(dir);
    let mut cache = NpyBackend::create(dir, &schema(), NpyOptions::default()).expect("create");
    for i in 0..rows {
        cache.put(&format!("row-{i}"), &row(i)).expect("put");
    }
    cache.finalize().expect("finalize");
    let mut out = std::io::BufWriter::new(
        std::fs::File::create(dir.join("records.txt")).expect("records.txt"),
    );
    for (_, records) in cache.records() {
        writeln!(out, "{}", records[0]).expect("write records.txt");
    }
    out.flush().expect("flush records.txt");
}

/// The same row bytes located in read-only maps of the collection files: the physical reference.
struct RawRows {
    maps: Vec<Mmap>,
    /// (map index, byte offset) of each row.
    rows: Vec<(usize, usize)>,
}

impl RawRows {
    fn new(reader: &NpyBackend) -> RawRows {
        let mut maps = Vec::new();
        let mut by_uid = HashMap::new();
        let mut rows = Vec::new();
        for (_, records) in reader.records() {
            let r = &records[0];
            let m = *by_uid.entry(r.uid.clone()).or_insert_with(|| {
                let file =
                    std::fs::File::open(reader.layout().data_file(&r.uid)).expect("data file");
                // SAFETY: the bench owns these files and nothing modifies them while mapped.
                maps.push(unsafe { Mmap::map(&file) }.expect("map"));
                maps.len() - 1
            });
            let header = stowage_npy::npy_header::parse(&maps[m]).expect("header");
            rows.push((m, header.data_offset + r.collection_index as usize * ROW_BYTES));
        }
        RawRows { maps, rows }
    }

    fn row(&self, i: usize) -> &[u8] {
        let (m, off) = self.rows[i];
        &self.maps[m][off..off + ROW_BYTES]
    }

    /// Touches every page so that the timed loops run on warm maps.
    fn warm(&self) -> u64 {
        (0..self.rows.len()).map(|i| u64::from(self.row(i)[0])).sum()
    }
}

fn benches(c: &mut Criterion) {
    let dir = bench_dir();
    let n = rows();
    eprintln!("numpy10 bench: building {n} x float32[{ROW_ELEMS}] in {}", dir.display());
    build_cache(&dir, n);
    let verified = NpyBackend::open_read_only(&dir, NpyOptions::default()).expect("open");
    let unverified = NpyBackend::open_read_only(
        &dir,
        NpyOptions { verify_checksums: false, ..NpyOptions::default() },
    )
    .expect("open");
    let keys = verified.keys().expect("keys");
    let raw = RawRows::new(&verified);
    black_box(raw.warm());
    for k in &keys {
        black_box(verified.get(k).expect("get"));
        black_box(unverified.get(k).expect("get"));
    }
    let mut rng = StdRng::seed_from_u64(10);
    let picks: Vec<usize> = (0..READS).map(|_| rng.random_range(0..n)).collect();

    let mut group = c.benchmark_group("numpy10");
    group.measurement_time(Duration::from_secs(4)).warm_up_time(Duration::from_secs(1));
    group.throughput(Throughput::Elements(READS as u64));
    group.bench_function("get_checksum", |b| {
        b.iter(|| picks.iter().for_each(|&i| drop(black_box(verified.get(&keys[i]).expect("get")))))
    });
    group.bench_function("get_no_checksum", |b| {
        b.iter(|| {
            picks.iter().for_each(|&i| drop(black_box(unverified.get(&keys[i]).expect("get"))))
        })
    });
    let records: Vec<_> =
        verified.records().map(|(_, r)| r.into_iter().next().expect("one field")).collect();
    group.bench_function("get_record_checksum", |b| {
        b.iter(|| {
            picks.iter().for_each(|&i| {
                drop(black_box(verified.read_record("x", &records[i], true).expect("read")))
            })
        })
    });
    let mut buffer = vec![0u8; ROW_BYTES];
    group.bench_function("reference_raw_copy", |b| {
        b.iter(|| {
            for &i in &picks {
                buffer.copy_from_slice(raw.row(i));
                black_box(&buffer);
            }
        })
    });
    group.bench_function("reference_xxh64_in_place", |b| {
        b.iter(|| {
            picks.iter().for_each(|&i| {
                black_box(xxhash_rust::xxh64::xxh64(raw.row(i), 0));
            })
        })
    });
    group.bench_function("reference_copy_xxh64", |b| {
        b.iter(|| {
            for &i in &picks {
                buffer.copy_from_slice(raw.row(i));
                black_box(xxhash_rust::xxh64::xxh64(&buffer, 0));
            }
        })
    });

    group.sample_size(10).measurement_time(Duration::from_secs(8));
    group.throughput(Throughput::Elements(WRITE_ROWS as u64));
    let samples: Vec<Sample> = (0..WRITE_ROWS).map(row).collect();
    let scratch = dir.with_extension("write-scratch");
    group.bench_function("put_flush", |b| {
        b.iter_custom(|iterations| {
            let mut total = Duration::ZERO;
            for _ in 0..iterations {
                let _ = std::fs::remove_dir_all(&scratch);
                let mut cache =
                    NpyBackend::create(&scratch, &schema(), NpyOptions::default()).expect("create");
                let start = Instant::now();
                for (i, s) in samples.iter().enumerate() {
                    cache.put(&format!("row-{i}"), s).expect("put");
                }
                cache.flush().expect("flush");
                total += start.elapsed();
            }
            total
        })
    });
    let bytes: Vec<u8> =
        samples.iter().flat_map(|s| s.tensor("x").expect("x").bytes().to_vec()).collect();
    group.bench_function("reference_write_fsync", |b| {
        b.iter_custom(|iterations| {
            let mut total = Duration::ZERO;
            for _ in 0..iterations {
                let path = scratch.with_extension("raw");
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
    let _ = std::fs::remove_dir_all(&scratch);
    let _ = std::fs::remove_file(scratch.with_extension("raw"));

    group.sample_size(10).measurement_time(Duration::from_secs(5));
    group.throughput(Throughput::Elements(1));
    group.bench_function("open", |b| {
        b.iter(|| black_box(NpyBackend::open_read_only(&dir, NpyOptions::default()).expect("open")))
    });
    group.finish();
}

criterion_group!(numpy10, benches);
criterion_main!(numpy10);
