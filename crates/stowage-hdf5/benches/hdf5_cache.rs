//! aenet torch cache benchmark: stowage-hdf5 loading and building the cache of one aenet dataset
//! file, side by side with a physical reference on the same bytes; `xtask/py/hdf5_peer.py` does
//! aenet's PyTables loads and writes on the same file.
//!
//! Workload: 10,000 entries of 20-200 atoms (uniform, fixed seed), F = 64 float64 features per
//! atom; every 10th entry has forces and so derivatives: 30 radial edges and 10 angular triplets
//! per atom, 4 radial and 4 angular features (rad_order = ang_order = 3), two species (typespin
//! stored). About 560 MB of features and 750 MB of derivatives.
//!
//! Ids (group `hdf5`, throughput in entries):
//! - `load_features`: one random entry's features (float64), 1000 entries per iteration;
//! - `load_entry`: one random entry with forces, features and derivatives, 100 per iteration;
//! - `reference_read_copy`: a copy of the same feature bytes out of a warm map of a flat file,
//!   1000 entries per iteration;
//! - `build_cache`: writing the first 1,000 entries (features, and derivatives for every 10th)
//!   into a new dataset file and publishing it (fsync and rename), per entry; removing the
//!   previous build is not timed.
//!
//! `STOWAGE_BENCH_DIR` names where `dataset.h5` (the full cache) and `workload.json` are left for
//! the peer; `STOWAGE_BENCH_HDF5_ENTRIES` overrides the entry count.

use std::hint::black_box;
use std::path::{Path, PathBuf};
use std::time::Duration;

use criterion::{BatchSize, Criterion, Throughput, criterion_group, criterion_main};
use memmap2::Mmap;
use rand::{Rng, SeedableRng, rngs::StdRng};
use stowage_core::Tensor;
use stowage_hdf5::{
    AngularDerivatives, CacheSections, DescriptorCompat, LocalDerivatives, RadialDerivatives,
    StorageDtype, TorchCache, TorchCacheWriter,
};

const FEATURES: usize = 64;
const FORCES_EVERY: usize = 10;
const EDGES_PER_ATOM: usize = 30;
const TRIPLETS_PER_ATOM: usize = 10;
const BUILD_ENTRIES: usize = 1000;
const FEATURE_READS: usize = 1000;
const ENTRY_READS: usize = 100;

fn compat() -> DescriptorCompat {
    DescriptorCompat::chebyshev(&["A", "B"], 3, 4.0, 3, 3.0, 0.5)
}

fn atoms(entries: usize) -> Vec<usize> {
    let mut rng = StdRng::seed_from_u64(64);
    (0..entries).map(|_| rng.random_range(20..=200)).collect()
}

fn floats(count: usize, seed: usize) -> Vec<f64> {
    (0..count).map(|j| ((seed * 7919 + j) % 10_007) as f64 * 1e-3).collect()
}

fn features(i: usize, n: usize) -> Tensor {
    Tensor::from_slice(&[n, FEATURES], &floats(n * FEATURES, i)).expect("shape fits")
}

fn derivatives(i: usize, n: usize) -> LocalDerivatives {
    let (e, t) = (n * EDGES_PER_ATOM, n * TRIPLETS_PER_ATOM);
    let idx =
        |count: usize, shift: usize| (0..count).map(|j| ((j / 7 + shift) % n) as i64).collect();
    let tensor = |dims: &[usize], salt: usize| {
        Tensor::from_slice(dims, &floats(dims.iter().product(), i * 11 + salt)).expect("fits")
    };
    LocalDerivatives {
        n_atoms: n,
        radial: RadialDerivatives {
            center_idx: idx(e, 0),
            neighbor_idx: idx(e, 1),
            dg_drij: tensor(&[e, 4, 3], 1),
            neighbor_typespin: Some(tensor(&[e], 2)),
        },
        angular: AngularDerivatives {
            center_idx: idx(t, 0),
            neighbor_j_idx: idx(t, 1),
            neighbor_k_idx: idx(t, 2),
            grads_i: tensor(&[t, 4, 3], 3),
            grads_j: tensor(&[t, 4, 3], 4),
            grads_k: tensor(&[t, 4, 3], 5),
            triplet_typespin: Some(tensor(&[t], 6)),
        },
    }
}

/// Entry `i`'s payloads: features, and derivatives for every `FORCES_EVERY`-th entry.
type Payload = (Tensor, Option<LocalDerivatives>);

fn payload(i: usize, n: usize) -> Payload {
    (features(i, n), i.is_multiple_of(FORCES_EVERY).then(|| derivatives(i, n)))
}

/// Writes `payloads` (entries `0..`) into a new cache at `path`.
fn build<'a>(path: &Path, payloads: impl Iterator<Item = (usize, &'a Payload)>) {
    let sections = CacheSections::default();
    let mut writer =
        TorchCacheWriter::create(path, &compat(), StorageDtype::Float64, sections).expect("create");
    for (i, (features, derivatives)) in payloads {
        writer.add_features(i as i64, features).expect("features");
        if let Some(derivatives) = derivatives {
            writer.add_derivatives(i as i64, derivatives).expect("derivatives");
        }
    }
    writer.finish().expect("finish");
}

fn bench_dir() -> PathBuf {
    std::env::var_os("STOWAGE_BENCH_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| std::env::temp_dir().join("stowage-bench-hdf5"))
}

fn hdf5_cache(c: &mut Criterion) {
    let entries = std::env::var("STOWAGE_BENCH_HDF5_ENTRIES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(10_000usize);
    let dir = bench_dir();
    std::fs::create_dir_all(&dir).expect("bench dir");
    let atoms = atoms(entries);
    let path = dir.join("dataset.h5");
    let _ = std::fs::remove_file(&path);
    eprintln!("hdf5 bench: building {entries} entries into {}", path.display());
    {
        // One entry's payload at a time: the whole cache does not fit comfortably in memory.
        let sections = CacheSections::default();
        let mut writer =
            TorchCacheWriter::create(&path, &compat(), StorageDtype::Float64, sections)
                .expect("create");
        for (i, &n) in atoms.iter().enumerate() {
            let (features, derivatives) = payload(i, n);
            writer.add_features(i as i64, &features).expect("features");
            if let Some(derivatives) = derivatives {
                writer.add_derivatives(i as i64, &derivatives).expect("derivatives");
            }
        }
        writer.finish().expect("finish");
    }
    let workload = serde_json::json!({
        "entries": entries, "features": FEATURES, "forces_every": FORCES_EVERY,
        "build_entries": BUILD_ENTRIES.min(entries), "feature_reads": FEATURE_READS,
        "entry_reads": ENTRY_READS,
    });
    std::fs::write(dir.join("workload.json"), workload.to_string()).expect("workload.json");

    // The physical reference: the same feature bytes, back to back in a flat file.
    let flat_path = dir.join("features.bin");
    let mut offsets = Vec::with_capacity(entries + 1);
    let mut flat = Vec::new();
    for (i, &n) in atoms.iter().enumerate() {
        offsets.push(flat.len());
        flat.extend_from_slice(features(i, n).bytes());
    }
    offsets.push(flat.len());
    std::fs::write(&flat_path, &flat).expect("features.bin");
    drop(flat);
    let file = std::fs::File::open(&flat_path).expect("features.bin");
    // SAFETY: the bench owns the file and nothing modifies it while mapped.
    let map = unsafe { Mmap::map(&file) }.expect("map");
    black_box(map.iter().step_by(4096).map(|&b| u64::from(b)).sum::<u64>());

    let cache = TorchCache::open(&path).expect("open").expect("a cache");
    let order = stowage_conformance::generate::epoch_order(entries, FEATURE_READS, 10);
    let with_forces: Vec<usize> = (0..entries).step_by(FORCES_EVERY).collect();
    let forces_order =
        stowage_conformance::generate::epoch_order(with_forces.len(), ENTRY_READS, 11);
    // Warm the page cache and libhdf5's metadata cache as the peer does.
    for &i in &order[..order.len().min(2000)] {
        black_box(cache.features(i as i64).expect("load"));
    }

    let mut group = c.benchmark_group("hdf5");
    group.measurement_time(Duration::from_secs(4)).warm_up_time(Duration::from_secs(1));
    group.sample_size(20);
    group.throughput(Throughput::Elements(FEATURE_READS as u64));
    let mut at = 0;
    group.bench_function("load_features", |b| {
        b.iter(|| {
            for _ in 0..FEATURE_READS {
                let i = order[at % order.len()] as i64;
                at += 1;
                black_box(cache.features_as(i, StorageDtype::Float64).expect("load"));
            }
        })
    });
    let mut at = 0;
    group.bench_function("reference_read_copy", |b| {
        b.iter(|| {
            for _ in 0..FEATURE_READS {
                let i = order[at % order.len()];
                at += 1;
                black_box(map[offsets[i]..offsets[i + 1]].to_vec());
            }
        })
    });
    group.throughput(Throughput::Elements(ENTRY_READS as u64));
    let mut at = 0;
    group.bench_function("load_entry", |b| {
        b.iter(|| {
            for _ in 0..ENTRY_READS {
                let i = with_forces[forces_order[at % forces_order.len()]] as i64;
                at += 1;
                black_box(cache.features_as(i, StorageDtype::Float64).expect("load"));
                black_box(cache.derivatives_as(i, StorageDtype::Float64).expect("load"));
            }
        })
    });
    let payloads: Vec<Payload> = atoms[..BUILD_ENTRIES.min(entries)]
        .iter()
        .enumerate()
        .map(|(i, &n)| payload(i, n))
        .collect();
    let build_path = dir.join("build.h5");
    group.sample_size(10);
    group.throughput(Throughput::Elements(payloads.len() as u64));
    group.bench_function("build_cache", |b| {
        // Removing the previous build is not timed (the peer's os.remove is not either).
        b.iter_batched(
            || {
                let _ = std::fs::remove_file(&build_path);
            },
            |()| build(&build_path, payloads.iter().enumerate()),
            BatchSize::PerIteration,
        )
    });
    group.finish();
    let _ = std::fs::remove_file(&build_path);
}

criterion_group!(benches, hdf5_cache);
criterion_main!(benches);
