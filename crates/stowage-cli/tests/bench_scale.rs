//! `stowage bench --scale` on small sizes: every backend is written, resumed, opened and read
//! warm and cold beside the physical references, its targets are judged, the sizes above 10 M
//! run memmap and arrow only, and a disk too small for the run is refused before anything is
//! written.

mod common;

use common::stowage;

/// The JSON report of `stowage bench --scale ARGS --format json --dir DIR`, which must exit 0.
fn scale_json(dir: &std::path::Path, args: &[&str]) -> serde_json::Value {
    let mut all = vec!["bench", "--scale", "--keep-free", "0", "--format", "json", "--dir"];
    all.push(dir.to_str().unwrap());
    all.extend_from_slice(args);
    let run = stowage(&all);
    assert_eq!(run.code, 0, "{run:?}");
    assert!(run.stderr.contains("stowage bench: scale: disk: bytes per key"), "{run:?}");
    serde_json::from_str(&run.stdout).unwrap_or_else(|e| panic!("{e}: {run:?}"))
}

#[test]
fn every_backend_is_measured_at_every_size_with_its_references_and_targets() {
    let dir = tempfile::tempdir().unwrap();
    let report = scale_json(dir.path(), &["--sizes", "3k,1500"]);
    let sizes = report["sizes"].as_array().unwrap();
    assert_eq!(sizes.iter().map(|s| s["keys"].as_u64().unwrap()).collect::<Vec<_>>(), [1500, 3000]);
    for size in sizes {
        let keys = size["keys"].as_f64().unwrap();
        assert!(size["raw_copy_rows_per_s"].as_f64().unwrap() > 0.0, "{size}");
        let backends = size["backends"].as_array().unwrap();
        let names: Vec<&str> = backends.iter().map(|b| b["backend"].as_str().unwrap()).collect();
        assert_eq!(names, ["npy", "memmap", "arrow", "hdf5"]);
        for backend in backends {
            let m = &backend["outcome"]["measured"];
            for rate in [
                "write_rows_per_s",
                "warm_get_rows_per_s",
                "warm_batch_rows_per_s",
                "cold_get_rows_per_s",
                "cold_batch_rows_per_s",
                "qd1_reads_per_s",
                "qd32_reads_per_s",
            ] {
                assert!(m[rate].as_f64().unwrap() > 0.0, "{rate}: {backend}");
            }
            for time in ["open_ms", "resume_open_ms", "first_get_ms", "cold_open_ms"] {
                assert!(m[time].as_f64().unwrap() > 0.0, "{time}: {backend}");
            }
            // The writer's anonymous memory, for the writer-memory target (Linux).
            assert!(m["write_peak_anon_mib"].as_f64().is_some_and(|mib| mib >= 0.0), "{backend}");
            // Four float32 per key, plus what each format adds.
            assert!(m["bytes_on_disk"].as_f64().unwrap() >= 16.0 * keys, "{backend}");
        }
    }
    assert!(report["cache_drop"].is_string(), "{report}");
    let targets = report["targets"].as_array().unwrap();
    assert_eq!(targets.len(), 4 * 9);
    for target in targets {
        let target_text = target["target"].as_str().unwrap();
        assert!(target_text.contains("at 3,000 keys (10,000,000 not run)"), "{target}");
        // 100 k was not run: the ratios against it are never a pass.
        if target_text.contains("the 100,000 rate") {
            assert_eq!(target["verdict"], "NotMeasured", "{target}");
        } else {
            assert!(target["verdict"] == "Pass" || target["verdict"] == "Fail", "{target}");
        }
    }
    // Every cache and the raw-copy file were removed as soon as they were measured.
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
}

#[test]
fn above_ten_million_keys_only_memmap_and_arrow_are_planned() {
    let dir = tempfile::tempdir().unwrap();
    // A run that cannot fit (an absurd --keep-free): refused after the probes, before any
    // cache of the run is written, naming what it needs.
    let run = stowage([
        "bench",
        "--scale",
        "--sizes",
        "100m",
        "--backends",
        "npy,memmap",
        "--keep-free",
        "1000000000",
        "--dir",
        dir.path().to_str().unwrap(),
    ]);
    assert_eq!(run.code, 2, "{run:?}");
    assert!(run.stderr.contains("not enough disk for this scale run"), "{run:?}");
    // npy does not run at 100 M, so memmap's cache is the largest the run would write.
    assert!(
        run.stderr.contains("its largest cache (memmap at 100,000,000 keys) needs about"),
        "{run:?}"
    );
    assert!(run.stderr.contains("GB must stay free, but df reports"), "{run:?}");
    assert!(run.stderr.contains("--sizes 100k,1m"), "{run:?}");
    assert!(run.stdout.is_empty(), "{run:?}");
}

#[test]
fn scale_flags_refuse_what_does_not_fit() {
    let run = stowage(["bench", "--sizes", "100k"]);
    assert_eq!(run.code, 2, "{run:?}");
    assert!(run.stderr.contains("--scale"), "{run:?}");
    let run = stowage(["bench", "--scale", "--rows", "10"]);
    assert_eq!(run.code, 2, "{run:?}");
    assert!(run.stderr.contains("cannot be used with"), "{run:?}");
    let run = stowage(["bench", "--scale", "--sizes", "lots"]);
    assert_eq!(run.code, 2, "{run:?}");
    assert!(run.stderr.contains("\"lots\" is not a key count"), "{run:?}");
}
