//! One large key index merge (`stowage_core::key_runs`), as a backend's background merge makes
//! it at 10 M keys: runs of 5 M and 4.9 M keys plus 65,536 fresh entries, built into memory
//! (`build_run`) and streamed into a file (`build_run_to`, no fsync), beside the physical
//! reference on the same bytes: a sequential copy of the inputs' bodies and a write of the
//! output's size into a file. The inputs are verified once before timing (a merge verifies its
//! inputs too: `verify_inputs` times that alone).
//!
//! `cargo bench -p stowage-core --bench key_runs_merge` (about a minute; 10 samples each).
//! `STOWAGE_BENCH_KEYS` overrides the key count (default 10,000,000).

use std::hint::black_box;
use std::io::Write;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use stowage_core::key_runs::{KeyRun, RunSpec, build_run, build_run_to, key_hash};

fn entries(range: std::ops::Range<u64>) -> Vec<(u64, u64)> {
    range.map(|i| (key_hash(&i.to_le_bytes()), i + 1)).collect()
}

fn spec(first: u64, through: u64) -> RunSpec {
    RunSpec { first, through, stamp: 0 }
}

fn merge(c: &mut Criterion) {
    let keys: u64 =
        std::env::var("STOWAGE_BENCH_KEYS").ok().and_then(|v| v.parse().ok()).unwrap_or(10_000_000);
    let (half, fresh_at) = (keys / 2, keys - 65_536.min(keys / 4));
    let none = |_, _| false;
    let a =
        KeyRun::from_bytes("a", build_run(&[], &entries(0..half), spec(0, 0), none, none).unwrap())
            .unwrap();
    let b = build_run(&[], &entries(half..fresh_at), spec(1, 1), none, none).unwrap();
    let b = KeyRun::from_bytes("b", b).unwrap();
    let fresh = entries(fresh_at..keys);
    let inputs = [&a, &b];
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("merged.bin");
    let out_len = build_run(&inputs, &fresh, spec(0, 2), none, none).unwrap().len();

    let mut group = c.benchmark_group("key_runs_merge");
    group.sample_size(10).throughput(Throughput::Elements(keys));
    group.bench_function("verify_inputs", |bench| {
        bench.iter(|| {
            a.verify().unwrap();
            b.verify().unwrap();
        })
    });
    group.bench_function("build_run_in_memory", |bench| {
        bench.iter(|| black_box(build_run(&inputs, &fresh, spec(0, 2), none, none).unwrap()))
    });
    group.bench_function("build_run_to_file", |bench| {
        bench.iter(|| {
            let mut file = std::fs::File::options()
                .read(true)
                .write(true)
                .create(true)
                .truncate(true)
                .open(&path)
                .unwrap();
            black_box(build_run_to(&mut file, &path, &inputs, &fresh, spec(0, 2), none, none))
                .unwrap();
        })
    });
    // The physical references: the inputs' bytes read in order, and the output's size written.
    group.bench_function("reference_read_input_slots", |bench| {
        bench.iter(|| black_box(a.slots().chain(b.slots()).fold(0u64, |s, (h, p)| s ^ h ^ p)))
    });
    let zeros = vec![0u8; out_len];
    group.bench_function("reference_write_output_size", |bench| {
        bench.iter(|| {
            let mut file = std::fs::File::create(&path).unwrap();
            file.write_all(&zeros).unwrap();
        })
    });
    group.finish();
}

criterion_group!(benches, merge);
criterion_main!(benches);
