//! `stowage bench` on small workloads: every backend that can hold a workload is written,
//! verified and measured, the others are listed with the reason, the physical references are
//! there, the output formats agree, and the Python peers read the same files.

mod common;

use common::stowage;

/// The JSON report of `stowage bench ARGS --format json --dir DIR`, which must exit 0.
fn bench_json(dir: &std::path::Path, args: &[&str]) -> serde_json::Value {
    let mut all = vec!["bench", "--format", "json", "--dir", dir.to_str().unwrap()];
    all.extend_from_slice(args);
    let run = stowage(&all);
    assert_eq!(run.code, 0, "{run:?}");
    assert!(run.stderr.contains("stowage bench: f32x512: physical references"), "{run:?}");
    serde_json::from_str(&run.stdout).unwrap_or_else(|e| panic!("{e}: {run:?}"))
}

#[test]
fn every_backend_that_can_hold_a_workload_is_verified_and_measured() {
    let dir = tempfile::tempdir().unwrap();
    let report =
        bench_json(dir.path(), &["--rows", "300", "--workload", "flat", "--workload", "aenet"]);
    let workloads = report["workloads"].as_array().unwrap();
    assert_eq!(workloads.len(), 2);
    let outcome = |w: usize, backend: &str| -> serde_json::Value {
        let backends = workloads[w]["backends"].as_array().unwrap();
        backends.iter().find(|b| b["backend"] == backend).unwrap()["outcome"].clone()
    };
    for backend in ["npy", "memmap", "arrow", "hdf5"] {
        let measured = &outcome(0, backend)["measured"];
        assert!(measured["write_rows_per_s"].as_f64().unwrap() > 0.0, "{backend}: {measured}");
        assert!(
            measured["get"]["p99_us"].as_f64().unwrap()
                >= measured["get"]["p50_us"].as_f64().unwrap()
        );
        assert!(measured["bytes_on_disk"].as_u64().unwrap() >= 300 * 2048, "{backend}");
    }
    assert!(outcome(0, "hdf5")["measured"]["get_no_checksum"].is_null(), "HDF5 always checks");
    for backend in ["npy", "memmap"] {
        let refused = outcome(1, backend)["refused"].as_str().unwrap().to_owned();
        assert!(refused.contains("ragged") && refused.contains("features"), "{refused}");
    }
    assert!(outcome(1, "arrow")["measured"].is_object());
    let reference = &workloads[0]["reference"]["Ok"];
    assert_eq!(reference["bytes"], 300 * 2048);
    assert!(reference["raw_copy_rows_per_s"].as_f64().unwrap() > 0.0);
    assert_eq!(workloads[0]["reads"], 300);
    assert!(std::fs::read_dir(dir.path()).unwrap().next().is_none(), "caches removed after");
}

#[test]
fn tables_flags_and_errors() {
    let dir = tempfile::tempdir().unwrap();
    let run = stowage([
        "bench",
        "--rows",
        "50",
        "--shape",
        "4,4",
        "--dtype",
        "uint8",
        "--backends",
        "arrow,npy",
        "--dir",
        dir.path().to_str().unwrap(),
        "--keep",
    ]);
    assert_eq!(run.code, 0, "{run:?}");
    assert!(run.stdout.starts_with("u8x4x4: 50 samples written"), "{run:?}");
    let lines: Vec<&str> = run.stdout.lines().collect();
    assert!(
        lines.iter().any(|l| l.starts_with("npy "))
            && lines.iter().any(|l| l.starts_with("arrow "))
    );
    assert!(!lines.iter().any(|l| l.starts_with("memmap ")), "only the backends asked for");
    assert!(lines.iter().any(|l| l.starts_with("physical reference")));
    assert!(dir.path().join("u8x4x4-arrow").is_dir(), "--keep keeps the caches");
    let bad = stowage(["bench", "--backends", "zarr"]);
    assert_eq!(bad.code, 2, "{bad:?}");
    assert!(
        bad.stderr.contains("unknown backend \"zarr\"; the backends are npy, memmap, arrow, hdf5")
    );
    let bad = stowage(["bench", "--dtype", "float128"]);
    assert_eq!(bad.code, 2, "{bad:?}");
}

#[test]
fn the_python_peers_read_the_same_files() {
    let Some(_) = stowage_test_support::python::python_with(
        "the_python_peers_read_the_same_files",
        &["numpy", "xxhash", "pyarrow", "h5py"],
    ) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let report = bench_json(dir.path(), &["--rows", "200", "--peers"]);
    let peers = report["workloads"][0]["peers"].as_array().unwrap();
    let names: Vec<&str> = peers.iter().map(|p| p["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["npy", "memmap", "arrow", "hdf5"]);
    for peer in peers {
        assert!(peer["rows_per_s"].as_f64().unwrap() > 0.0, "{peer}");
    }
}
