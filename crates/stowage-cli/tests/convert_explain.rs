//! `convert` (every target, refused fields, a SIGKILLed run resumed), `explain` (memmap
//! fingerprints, aenet's compat signature, formats without one) and a fuzz-style run of
//! `inspect` and `verify` over random directories.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::*;
use stowage_core::{Backend, DType, OpenMode, Sample, Schema, ShapeRule, Tensor};

fn npy_source(dir: &Path, keys: usize) -> PathBuf {
    let path = dir.join("source");
    let schema = Schema::new().tensor("x", DType::F32, ShapeRule::Fixed(vec![16])).tensor(
        "t",
        DType::U8,
        ShapeRule::Max(vec![3]),
    );
    let mut cache = stowage_npy::NpyBackend::create(&path, &schema, Default::default()).unwrap();
    for i in 0..keys {
        let x: Vec<f32> = (0..16).map(|j| (i * 16 + j) as f32).collect();
        let t: Vec<u8> = (0..i % 4).map(|j| j as u8).collect();
        let sample = Sample::new()
            .with("x", Tensor::from_slice(&[16], &x).unwrap())
            .with("t", Tensor::from_slice(&[i % 4], &t).unwrap());
        cache.put(&format!("key-{i:05}"), &sample).unwrap();
    }
    cache.finalize().unwrap();
    path
}

/// Every key of `a` and `b` in the same order with equal samples.
fn assert_same_samples(a: &dyn Backend, b: &dyn Backend) {
    let keys = a.keys().unwrap();
    assert_eq!(keys, b.keys().unwrap());
    for key in keys {
        assert_eq!(a.get(&key).unwrap(), b.get(&key).unwrap(), "{key}");
    }
}

fn open_target(path: &Path, to: &str) -> Box<dyn Backend> {
    let factory: Box<dyn stowage_core::BackendFactory> = match to {
        "memmap" => Box::new(stowage_memmap::MemmapFactory::default()),
        "arrow" => Box::new(stowage_arrow::ArrowFactory::default()),
        "hdf5" => Box::new(stowage_hdf5::Hdf5Factory),
        _ => Box::new(stowage_npy::NpyFactory::default()),
    };
    factory.open(path, OpenMode::ReadOnly).unwrap()
}

#[test]
fn convert_writes_every_target_and_verifies_it() {
    let dir = tempfile::tempdir().unwrap();
    let src = npy_source(dir.path(), 30);
    let source = open_target(&src, "npy");
    for to in ["arrow", "hdf5", "npy"] {
        let dst = dir.path().join(to);
        let run = stowage(args(&[&"convert", &src, &dst, &"--to", &to, &"--verify"]));
        assert_eq!(run.code, 0, "{run:?}");
        assert!(run.stdout.starts_with("converted 30 samples from "), "{run:?}");
        assert!(run.stdout.contains(" samples/s, "), "{run:?}");
        assert!(
            run.stdout.ends_with(&format!(
                "verified 30 samples read back from {}: identical\n",
                dst.display()
            )),
            "{run:?}"
        );
        assert_same_samples(source.as_ref(), open_target(&dst, to).as_ref());
    }
    // memmap holds fixed shapes only: "t" varies, so it is refused before anything is written.
    let dst = dir.path().join("memmap");
    let run = stowage(args(&[&"convert", &src, &dst, &"--to", &"memmap"]));
    assert_error_line(&run, &["field \"t\"", "shapes vary", "nothing was written"]);
    assert!(!dst.exists());
    // A torchcachex pickled value has no place in NUMPY_10.
    if let Some(set) = stowage_test_support::reference::reference_set("torchcachex") {
        let dst = dir.path().join("dict-npy");
        let run =
            stowage(args(&[&"convert", &set.join("caches/dict_mixed"), &dst, &"--to", &"npy"]));
        assert_error_line(&run, &["field \"meta\"", "no bytes fields", "nothing was written"]);
        assert!(!dst.exists());
        // A ragged torchcachex field into memmap: one fixed shape holds it after a scan.
        let run = stowage(args(&[
            &"convert",
            &set.join("caches/dict_dtypes"),
            &dst,
            &"--to",
            &"memmap",
            &"--verify",
        ]));
        assert_eq!(run.code, 0, "{run:?}");
        assert!(run.stdout.contains(": identical"), "{run:?}");
    }
}

#[test]
fn a_sigkilled_convert_resumes_to_an_identical_result() {
    let dir = tempfile::tempdir().unwrap();
    let src = npy_source(dir.path(), 4000);
    for to in ["arrow", "npy", "hdf5"] {
        let dst = dir.path().join(format!("killed-{to}"));
        let mut child = Command::new(BIN)
            .args(["convert", src.to_str().unwrap(), dst.to_str().unwrap(), "--to", to])
            .args(["--flush-every", "20"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        // Kill it once the target has committed some samples, long before all.
        let deadline = Instant::now() + Duration::from_secs(60);
        let committed = loop {
            assert!(child.try_wait().unwrap().is_none(), "{to}: convert finished before the kill");
            let factory_open = std::panic::catch_unwind(|| open_target(&dst, to).len());
            if let Ok(n) = factory_open
                && n >= 20
            {
                break n;
            }
            assert!(Instant::now() < deadline, "{to}: nothing committed within a minute");
            std::thread::sleep(Duration::from_millis(5));
        };
        child.kill().unwrap(); // SIGKILL
        let status = child.wait().unwrap();
        assert!(status.code().is_none(), "{to}: killed by a signal");
        let left = open_target(&dst, to).len();
        assert!(left >= committed && left < 4000, "{to}: {left} committed at the kill");

        let run = stowage(args(&[&"convert", &src, &dst, &"--to", &to, &"--verify"]));
        assert_eq!(run.code, 0, "{run:?}");
        assert!(
            run.stdout.contains(&format!("({left} keys already in the target skipped)")),
            "{run:?}"
        );
        assert!(run.stdout.contains(": identical\n"), "{run:?}");
        let fresh = dir.path().join(format!("fresh-{to}"));
        assert_eq!(stowage(args(&[&"convert", &src, &fresh, &"--to", &to])).code, 0);
        assert_same_samples(open_target(&fresh, to).as_ref(), open_target(&dst, to).as_ref());
        assert!(open_target(&dst, to).is_finalized());
    }
}

fn write_json(path: &Path, value: &serde_json::Value) {
    std::fs::write(path, serde_json::to_vec(value).unwrap()).unwrap();
}

#[test]
fn explain_names_the_config_fields_and_sources_that_differ() {
    let dir = tempfile::tempdir().unwrap();
    let sources = dir.path().join("data");
    std::fs::create_dir(&sources).unwrap();
    for name in ["a.hid", "b.hid"] {
        std::fs::write(sources.join(name), name).unwrap();
    }
    let config = serde_json::json!({"cache_version": 5, "scaling": {"resolution": 32}});
    let stamps: Vec<_> = ["a.hid", "b.hid"]
        .iter()
        .map(|n| stowage_fingerprint::SourceStamp::from_metadata(sources.join(n)).unwrap())
        .collect();
    let cache_path = dir.path().join("cache");
    let schema = Schema::new().tensor("x", DType::U8, ShapeRule::Fixed(vec![1]));
    let mut cache =
        stowage_memmap::MemmapBackend::create(&cache_path, &schema, Default::default()).unwrap();
    cache.put("a", &Sample::new().with("x", Tensor::from_slice(&[1], &[1u8]).unwrap())).unwrap();
    cache.finalize_with_fingerprint(config.clone(), stamps).unwrap();
    drop(cache);
    let config_file = dir.path().join("config.json");
    write_json(&config_file, &config);
    let glob = format!("{}/*.hid", sources.display());

    let run =
        stowage(args(&[&"explain", &cache_path, &"--config", &config_file, &"--sources", &glob]));
    assert_eq!(run.code, 0, "{run:?}");
    assert!(run.stdout.contains("fingerprint is fresh"), "{run:?}");

    write_json(
        &config_file,
        &serde_json::json!({"cache_version": 5, "scaling": {"resolution": 64}}),
    );
    std::fs::write(sources.join("b.hid"), "changed!").unwrap();
    let run =
        stowage(args(&[&"explain", &cache_path, &"--config", &config_file, &"--sources", &glob]));
    assert_eq!(run.code, 1, "{run:?}");
    for needle in ["fingerprint is stale", "scaling.resolution: 32 -> 64", "changed ", "b.hid"] {
        assert!(run.stdout.contains(needle), "no {needle:?}: {run:?}");
    }
    assert!(!run.stdout.contains("a.hid"), "a.hid did not change: {run:?}");

    // Formats without a fingerprint say so, with exit 3.
    let npy = npy_source(dir.path(), 2);
    let run = stowage(args(&[&"explain", &npy, &"--config", &config_file]));
    assert_eq!(run.code, 3, "{run:?}");
    assert!(run.stdout.contains("records no fingerprint"), "{run:?}");
}

#[test]
fn explain_compares_reference_fingerprints_and_aenet_signatures() {
    let dir = tempfile::tempdir().unwrap();
    if let Some(set) = stowage_test_support::reference::reference_set("dnanet-memmap") {
        let manifest: serde_json::Value =
            serde_json::from_slice(&std::fs::read(set.join("manifest.json")).unwrap()).unwrap();
        let cache = &manifest["caches"][0];
        let config = dir.path().join("dnanet.json");
        write_json(&config, &cache["config_payload"]);
        let path = set.join(cache["cache_dir"].as_str().unwrap());
        let run = stowage(args(&[&"explain", &path, &"--config", &config]));
        assert_eq!(run.code, 1, "the sources are not given: {run:?}");
        assert!(!run.stdout.contains("config differences"), "the config matches: {run:?}");
        assert!(run.stdout.contains("removed /srv/hid/rnd/1A2_A01_01.hid"), "{run:?}");
        let unfinished = set.join("cache_root/d3c3787192a40966");
        let run = stowage(args(&[&"explain", &unfinished, &"--config", &config]));
        assert_eq!(run.code, 3, "never finalized: {run:?}");
    }
    if let Some(set) = stowage_test_support::reference::reference_set("aenet-torch-cache") {
        let config = dir.path().join("descriptor.json");
        let mut settings = serde_json::json!({"species": ["A", "B"], "rad_order": 1, "rad_cutoff": 2.0,
            "ang_order": 0, "ang_cutoff": 2.0, "min_cutoff": 0.1, "dtype": "float32"});
        write_json(&config, &settings);
        let file = set.join("v2_both_f64.h5");
        let run = stowage(args(&[&"explain", &file, &"--config", &config]));
        assert_eq!(run.code, 0, "{run:?}");
        assert!(run.stdout.contains("compatible"), "{run:?}");
        assert!(run.stderr.contains("not compared: dtype"), "{run:?}");
        settings["rad_cutoff"] = 3.0.into();
        write_json(&config, &settings);
        let run = stowage(args(&[&"explain", &file, &"--config", &config]));
        assert_eq!(run.code, 1, "{run:?}");
        assert!(run.stdout.contains("rad_cutoff: 2.0 -> 3.0"), "{run:?}");
        assert!(!run.stdout.contains("species"), "{run:?}");
    }
}

/// A tiny deterministic generator.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

const NAMES: [&str; 14] = [
    "stowage.json",
    "stowage.log",
    "_COMPLETE",
    "index.parquet",
    "shapes.json",
    "manifest.jsonl",
    "schema.json",
    "index.pkl",
    "segments",
    "data",
    "10",
    "x.npy",
    "segment_000000.arrow",
    "a.h5",
];

/// Fills `dir` with random names and bytes, truncated copies of real cache files and symlink
/// loops.
fn random_tree(dir: &Path, rng: &mut Rng, real: &[PathBuf], depth: u32) {
    if std::fs::create_dir_all(dir).is_err() {
        return; // the name is taken by a file or a link
    }
    for _ in 0..1 + rng.below(5) {
        let name = NAMES[rng.below(NAMES.len() as u64) as usize];
        let path = dir.join(name);
        match rng.below(5) {
            0 if depth < 3 => random_tree(&path, rng, real, depth + 1),
            1 if !real.is_empty() => {
                let from = &real[rng.below(real.len() as u64) as usize];
                let bytes = std::fs::read(from).unwrap();
                let cut = rng.below(bytes.len() as u64 + 1) as usize;
                let _ = std::fs::write(&path, &bytes[..cut]);
            }
            2 => {
                let _ = std::os::unix::fs::symlink(dir, &path);
            }
            _ => {
                let len = rng.below(300) as usize;
                let bytes: Vec<u8> = (0..len).map(|_| rng.next() as u8).collect();
                let _ = std::fs::write(&path, bytes);
            }
        }
    }
}

#[test]
fn inspect_and_verify_never_panic_on_random_directories() {
    let dir = tempfile::tempdir().unwrap();
    let mut real = Vec::new();
    if let Some(root) = stowage_test_support::reference::reference_dir() {
        for set in [
            "torchcachex/caches/tensor_f32",
            "aenet-torch-cache",
            "dnanet-memmap/cache_root/aed9b48500e9acfd",
        ] {
            real.extend(
                stowage_conformance::corrupt::data_files(&root.join(set)).unwrap_or_default(),
            );
        }
    }
    // A copy of a real cache with one file truncated, and random trees.
    let mut rng = Rng(0x5eed_1234_abcd_0001);
    let mut cases = Vec::new();
    for case in 0..40 {
        let path = dir.path().join(format!("case-{case}"));
        random_tree(&path, &mut rng, &real, 0);
        cases.push(path);
    }
    let mut codes = [0usize; 3];
    for path in &cases {
        for command in ["inspect", "verify"] {
            let run = stowage(args(&[&command, path]));
            assert!((0..=2).contains(&run.code), "{command} {}: {run:?}", path.display());
            codes[run.code as usize] += 1;
            if run.code == 2 {
                assert_eq!(
                    run.stderr.lines().filter(|l| l.starts_with("stowage: error: ")).count(),
                    1,
                    "{run:?}"
                );
            }
        }
    }
    assert!(codes[2] > 0, "some garbage is refused: {codes:?}");
}
