//! Memmap row benchmark (DNANet layout), side by side with the physical references on the same
//! bytes in the same run.
//!
//! Two workloads: 1,000,000 rows of float32[512] (2 KiB; ids without suffix) and 100,000 rows of
//! DNANet's shape, D=6 and L=4096 (data int16 (6, 4096), annotation int8 (6, 4096), scaler float32
//! (4096,): 88 KiB a row; ids ending in `_dnanet`). For each: random get by key with and without
//! checksums, and the references raw copy of the same row bytes out of warm maps of the `.bin`
//! files and xxh64 and xxh3 (the checksum stowage-memmap stores) over them in place; sequential put with a flush every 1,000 rows against writing
//! the same bytes with an fdatasync every 1,000 rows. For the 2 KiB workload also get by row
//! number with and without checksums, open time of the 1,000,000-row cache against a 1,000-row one, and open + first get
//! (which loads the index).
//!
//! Maps are warm: every page is touched through every map before timing. Rows are not in the CPU
//! cache: every read benchmark walks the same shuffled epoch over all rows
//! (`stowage_conformance::generate::epoch_order`).
//! Run through `cargo xtask bench`, which adds the Python peer and writes docs/benchmarks.md.
//! `STOWAGE_BENCH_DIR` names where the caches are left (`f32x512/`, `dnanet/`) for the peer;
//! `STOWAGE_BENCH_MEMMAP_ROWS` and `STOWAGE_BENCH_DNANET_ROWS` override the row counts.

use criterion::{BenchmarkGroup, Criterion, Throughput, criterion_group, criterion_main};
use memmap2::Mmap;
use std::fmt::Write as _;
use std::hint::black_box;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use stowage_core::{Backend, DType, Reader, Sample, Schema, ShapeRule, Tensor, Value};
use stowage_memmap::{MemmapBackend, MemmapOptions, dnanet};

type Group<'a> = BenchmarkGroup<'a, criterion::measurement::WallTime>;

/// Random reads per timed iteration.
const READS: usize = 1000;
/// Rows between flushes in the write benchmarks (and between fdatasyncs in their reference).
const FLUSH_EVERY: usize = 1000;
/// DNANet's dye rows and scan points in the second workload.
const D: usize = 6;
const L: usize = 4096;

/// One generated cache.
struct Workload {
    /// Subdirectory of the bench directory, and what the peer reads.
    name: &'static str,
    /// Appended to every benchmark id.
    suffix: &'static str,
    schema: Schema,
    rows: usize,
    /// Rows per timed put+flush iteration.
    write_rows: usize,
    /// Builds row `i`.
    row: fn(usize) -> Sample,
}

impl Workload {
    fn id(&self, name: &str) -> String {
        format!("{name}{}", self.suffix)
    }

    /// The tensor fields, in schema order: the `.bin` files a row's bytes live in.
    fn tensor_fields(&self) -> Vec<&str> {
        self.schema
            .fields
            .iter()
            .filter(|f| matches!(f.kind, stowage_core::FieldKind::Tensor { .. }))
            .map(|f| f.name.as_str())
            .collect()
    }
}

fn f32x512_row(i: usize) -> Sample {
    let values: Vec<f32> = (0..512).map(|j| (i * 512 + j) as f32 * 0.5).collect();
    Sample::new().with("x", Tensor::from_slice(&[512], &values).expect("shape fits"))
}

/// A DNANet row: every tensor present (so stowage and the references move the same bytes), four
/// distinct panels, alleles on even rows.
fn dnanet_row(i: usize) -> Sample {
    let data: Vec<i16> = (0..D * L).map(|j| ((i * 31 + j) % 30_000) as i16).collect();
    let annotation: Vec<i8> = (0..D * L).map(|j| ((i + j) % 5) as i8).collect();
    let scaler: Vec<f32> = (0..L).map(|j| i as f32 + j as f32 / 4096.0).collect();
    Sample::new()
        .with("data", Tensor::from_slice(&[D, L], &data).expect("shape fits"))
        .with("annotation", Tensor::from_slice(&[D, L], &annotation).expect("shape fits"))
        .with("scaler", Tensor::from_slice(&[L], &scaler).expect("shape fits"))
        .with("panel", Value::Json(format!("{{\"panel\": {}}}", i % 4)))
        .with(
            "allele",
            if i.is_multiple_of(2) { Value::Json(format!("[{}]", i % 7)) } else { Value::Null },
        )
        .with("meta_json", Value::Json("{}".into()))
}

/// The key (source identity, the `path` column) of row `i`, formatted into `buffer` as a loader
/// derives it from its sample list: the timings do not include misses on a million key strings.
fn key_of(buffer: &mut String, i: usize) -> &str {
    buffer.clear();
    write!(buffer, "/srv/bench/sample{i:07}.hid").expect("writing to a String");
    buffer
}

fn bench_dir() -> PathBuf {
    std::env::var_os("STOWAGE_BENCH_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| std::env::temp_dir().join("stowage-bench-memmap"))
}

fn env_rows(name: &str, default: usize) -> usize {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// Builds `rows` rows of `workload` into `dir` (flushing every 10,000) and finalizes.
fn build_cache(dir: &Path, workload: &Workload, rows: usize) {
    let _ = std::fs::remove_dir_all(dir);
    let mut cache =
        MemmapBackend::create(dir, &workload.schema, MemmapOptions::default()).expect("create");
    let mut key = String::new();
    for i in 0..rows {
        cache.put(key_of(&mut key, i), &(workload.row)(i)).expect("put");
        if (i + 1) % 10_000 == 0 {
            cache.flush().expect("flush");
        }
    }
    cache.finalize().expect("finalize");
}

/// The same row bytes in read-only maps of the `.bin` files: the physical reference.
struct RawRows {
    /// Per tensor field: its map and row size.
    fields: Vec<(Mmap, usize)>,
}

impl RawRows {
    fn new(dir: &Path, workload: &Workload) -> RawRows {
        let fields = workload
            .tensor_fields()
            .into_iter()
            .map(|name| {
                let file = std::fs::File::open(dir.join(format!("{name}.bin"))).expect("bin");
                // SAFETY: the bench owns these files and nothing modifies them while mapped.
                let map = unsafe { Mmap::map(&file) }.expect("map");
                let row_bytes = map.len() / workload.rows;
                (map, row_bytes)
            })
            .collect();
        RawRows { fields }
    }

    /// The bytes of row `i` of every field.
    fn row(&self, i: usize) -> impl Iterator<Item = &[u8]> {
        self.fields.iter().map(move |(map, n)| &map[i * n..(i + 1) * n])
    }

    fn row_bytes(&self) -> usize {
        self.fields.iter().map(|(_, n)| n).sum()
    }

    /// Touches every page so that the timed loops run on warm maps.
    fn warm(&self) -> u64 {
        self.fields
            .iter()
            .map(|(map, _)| map.iter().step_by(4096).map(|&b| u64::from(b)).sum::<u64>())
            .sum()
    }
}

/// Random reads of `workload` (built in `dir`) through stowage and through the raw references.
fn read_benches(group: &mut Group<'_>, dir: &Path, workload: &Workload) {
    eprintln!(
        "memmap bench: building {} rows of {} in {}",
        workload.rows,
        workload.name,
        dir.display()
    );
    build_cache(dir, workload, workload.rows);
    let verified = MemmapBackend::open_read_only(dir, MemmapOptions::default()).expect("open");
    let options = MemmapOptions { verify_checksums: false, ..MemmapOptions::default() };
    let unverified = MemmapBackend::open_read_only(dir, options).expect("open");
    let raw = RawRows::new(dir, workload);
    black_box(raw.warm());
    let mut key = String::new();
    for i in 0..workload.rows {
        black_box(verified.get(key_of(&mut key, i)).expect("get").expect("present"));
        black_box(unverified.get(key_of(&mut key, i)).expect("get").expect("present"));
    }
    // Same seed in every bench: the same rows in the same order for stowage and the references.
    let order = stowage_conformance::generate::epoch_order(workload.rows, READS, 10);

    group.measurement_time(Duration::from_secs(4)).warm_up_time(Duration::from_secs(1));
    group.sample_size(30);
    group.throughput(Throughput::Elements(READS as u64));
    bench_rows(group, workload.id("get_checksum"), &order, |i| {
        drop(black_box(verified.get(key_of(&mut key, i)).expect("get")));
    });
    bench_rows(group, workload.id("get_no_checksum"), &order, |i| {
        drop(black_box(unverified.get(key_of(&mut key, i)).expect("get")));
    });
    if workload.suffix.is_empty() {
        bench_rows(group, workload.id("get_row_checksum"), &order, |i| {
            drop(black_box(verified.get_row(i as i64).expect("get_row")));
        });
        bench_rows(group, workload.id("get_row_no_checksum"), &order, |i| {
            drop(black_box(unverified.get_row(i as i64).expect("get_row")));
        });
    }
    let mut buffer = vec![0u8; raw.row_bytes()];
    bench_rows(group, workload.id("reference_raw_copy"), &order, |i| {
        let mut at = 0;
        for field in raw.row(i) {
            buffer[at..at + field.len()].copy_from_slice(field);
            at += field.len();
        }
        black_box(&buffer);
    });
    bench_rows(group, workload.id("reference_xxh64_in_place"), &order, |i| {
        for field in raw.row(i) {
            black_box(xxhash_rust::xxh64::xxh64(field, 0));
        }
    });
    // The checksum stowage-memmap stores: the same bytes hashed in place with xxh3.
    bench_rows(group, workload.id("reference_xxh3_in_place"), &order, |i| {
        for field in raw.row(i) {
            black_box(xxhash_rust::xxh3::xxh3_64(field));
        }
    });
}

/// Benchmarks `read` of [`READS`] rows per iteration, the next slice of `order` each time.
/// Every function walks `order` from its start: the same rows, in the same order, for stowage and
/// for the references.
fn bench_rows(group: &mut Group<'_>, id: String, order: &[usize], mut read: impl FnMut(usize)) {
    let mut picks = order.chunks_exact(READS).cycle();
    group.bench_function(id, |b| {
        b.iter(|| picks.next().expect("cycle").iter().for_each(|&i| read(i)));
    });
}

/// Sequential put of `workload.write_rows` rows with a flush every [`FLUSH_EVERY`], against
/// writing the same tensor bytes to one file with an fdatasync every [`FLUSH_EVERY`] rows.
fn write_benches(group: &mut Group<'_>, scratch: &Path, workload: &Workload) {
    use std::io::Write as _;
    group.sample_size(10).measurement_time(Duration::from_secs(10));
    group.throughput(Throughput::Elements(workload.write_rows as u64));
    let samples: Vec<Sample> = (0..workload.write_rows).map(workload.row).collect();
    let mut key = String::new();
    group.bench_function(workload.id("put_flush"), |b| {
        b.iter_custom(|iterations| {
            let mut total = Duration::ZERO;
            for _ in 0..iterations {
                let _ = std::fs::remove_dir_all(scratch);
                let mut cache =
                    MemmapBackend::create(scratch, &workload.schema, MemmapOptions::default())
                        .expect("create");
                let start = Instant::now();
                for (i, sample) in samples.iter().enumerate() {
                    cache.put(key_of(&mut key, i), sample).expect("put");
                    if (i + 1) % FLUSH_EVERY == 0 {
                        cache.flush().expect("flush");
                    }
                }
                cache.flush().expect("flush");
                total += start.elapsed();
            }
            total
        })
    });
    let chunks: Vec<Vec<u8>> = samples
        .chunks(FLUSH_EVERY)
        .map(|rows| {
            rows.iter()
                .flat_map(|s| {
                    workload
                        .tensor_fields()
                        .into_iter()
                        .flat_map(move |f| s.tensor(f).expect("tensor field").bytes().to_vec())
                })
                .collect()
        })
        .collect();
    drop(samples);
    let path = scratch.with_extension("raw");
    group.bench_function(workload.id("reference_write_fsync"), |b| {
        b.iter_custom(|iterations| {
            let mut total = Duration::ZERO;
            for _ in 0..iterations {
                let _ = std::fs::remove_file(&path);
                let start = Instant::now();
                let mut file = std::fs::File::create(&path).expect("create");
                for chunk in &chunks {
                    file.write_all(chunk).expect("write");
                    file.sync_data().expect("fdatasync");
                }
                total += start.elapsed();
            }
            total
        })
    });
    let _ = std::fs::remove_dir_all(scratch);
    let _ = std::fs::remove_file(path);
}

/// Open time of the large cache against a 1,000-row one, and open + first get (index load).
fn open_benches(group: &mut Group<'_>, large: &Path, small: &Path, workload: &Workload) {
    build_cache(small, workload, 1000);
    group.sample_size(20).measurement_time(Duration::from_secs(4));
    group.throughput(Throughput::Elements(1));
    let options = MemmapOptions::default;
    group.bench_function("open", |b| {
        b.iter(|| black_box(MemmapBackend::open_read_only(large, options()).expect("open")))
    });
    group.bench_function("open_1k_rows", |b| {
        b.iter(|| black_box(MemmapBackend::open_read_only(small, options()).expect("open")))
    });
    group.sample_size(10).measurement_time(Duration::from_secs(10));
    let mut key = String::new();
    group.bench_function("first_get_after_open", |b| {
        b.iter(|| {
            let cache = MemmapBackend::open_read_only(large, options()).expect("open");
            black_box(cache.get(key_of(&mut key, 7)).expect("get").expect("present"))
        })
    });
    let _ = std::fs::remove_dir_all(small);
}

fn benches(c: &mut Criterion) {
    let dir = bench_dir();
    let flat = Workload {
        name: "f32x512",
        suffix: "",
        schema: Schema::new().tensor("x", DType::F32, ShapeRule::Fixed(vec![512])),
        rows: env_rows("STOWAGE_BENCH_MEMMAP_ROWS", 1_000_000),
        write_rows: 20_000,
        row: f32x512_row,
    };
    let dnanet_shape = Workload {
        name: "dnanet",
        suffix: "_dnanet",
        schema: dnanet(D, L),
        rows: env_rows("STOWAGE_BENCH_DNANET_ROWS", 100_000),
        write_rows: 2_000,
        row: dnanet_row,
    };
    std::fs::create_dir_all(&dir).expect("bench dir");
    let mut group = c.benchmark_group("memmap");
    read_benches(&mut group, &dir.join(flat.name), &flat);
    write_benches(&mut group, &dir.join("write-scratch"), &flat);
    open_benches(&mut group, &dir.join(flat.name), &dir.join("f32x512-1k"), &flat);
    read_benches(&mut group, &dir.join(dnanet_shape.name), &dnanet_shape);
    write_benches(&mut group, &dir.join("write-scratch"), &dnanet_shape);
    group.finish();
}

criterion_group!(memmap, benches);
criterion_main!(memmap);
