//! The Arrow and HDF5 formats through every command: the torchcachex and aenet reference
//! caches (set `torchcachex`, `aenet-torch-cache`), and caches built with
//! `stowage_arrow::ArrowBackend` and `stowage_hdf5::Hdf5Backend`. Reference tests print SKIPPED
//! when the set is absent (and fail under `STOWAGE_REQUIRE_REFERENCE=1`).

mod common;

use std::path::Path;

use common::*;
use stowage_core::{Backend, Value};
use stowage_test_support::reference::reference_set;

fn manifest(set: &Path) -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(set.join("manifest.json")).unwrap()).unwrap()
}

#[test]
fn keys_get_verify_and_inspect_read_every_torchcachex_reference_cache() {
    let Some(set) = reference_set("torchcachex") else { return };
    let dir = tempfile::tempdir().unwrap();
    let caches = manifest(&set)["caches"].as_object().unwrap().clone();
    assert_eq!(caches.len(), 8);
    let mut files_compared = 0;
    for (name, cache) in &caches {
        let path = set.join(cache["path"].as_str().unwrap());
        let keys: Vec<&String> = cache["keys"].as_object().unwrap().keys().collect();
        let run = stowage(args(&[&"keys", &path]));
        assert_eq!(run.code, 0, "{run:?}");
        let mut listed: Vec<&str> = run.stdout.lines().collect();
        listed.sort_unstable();
        let mut want: Vec<&str> = keys.iter().map(|k| k.as_str()).collect();
        want.sort_unstable();
        assert_eq!(listed, want, "{name}");

        for (key, entry) in cache["keys"].as_object().unwrap() {
            let out = dir.path().join(format!("{name}-{key}"));
            let run = stowage(args(&[&"get", &path, key, &"--out", &out]));
            assert_eq!(run.code, 0, "{run:?}");
            let structure = entry["structure"].as_str().unwrap();
            for (i, leaf) in entry["leaves"].as_array().unwrap().iter().enumerate() {
                let field = match leaf["name"].as_str() {
                    Some(name) => name.to_owned(),
                    None if structure == "tensor" => "tensor".to_owned(),
                    None => format!("item{i}"),
                };
                // The expected values of tensor_orphan are the scanning reader's view.
                let expected = set.join(leaf["expected_file"].as_str().unwrap());
                if leaf["kind"] == "tensor" {
                    let got = read_npy(&out.join(format!("{field}.npy")));
                    assert_eq!(got, read_npy(&expected), "{name} {key} {field}");
                } else {
                    let got = std::fs::read(out.join(format!("{field}.bin"))).unwrap();
                    assert_eq!(got, std::fs::read(&expected).unwrap(), "{name} {key} {field}");
                }
                files_compared += 1;
            }
        }

        // Every row decoded, none checksummed: unchecked, never clean.
        let run = stowage(args(&[&"verify", &path]));
        assert_eq!(run.code, 3, "{run:?}");
        assert!(run.stdout.contains("written by torchcachex"), "{run:?}");
        assert!(run.stdout.contains("torchcachex writes no checksums"), "{run:?}");
        assert!(run.stdout.ends_with(" unchecked\n"), "{run:?}");

        let run = stowage(args(&[&"inspect", &path]));
        assert_eq!(run.code, 0, "{run:?}");
        for needle in [
            "torchcachex Arrow segment cache",
            &format!("keys:        {}\n", keys.len()),
            &format!("structure:   {}\n", cache["output_structure"].as_str().unwrap()),
            "checksums:   none (torchcachex writes no checksums)",
            "integrity:   clean",
        ] {
            assert!(run.stdout.contains(needle), "{name}: no {needle:?}: {run:?}");
        }
    }
    assert!(files_compared > 60, "{files_compared}");
}

#[test]
fn the_orphaned_torchcachex_segment_is_read_and_superseded_rows_counted() {
    let Some(set) = reference_set("torchcachex") else { return };
    let orphan = set.join("caches/tensor_orphan");
    let run = stowage(args(&[&"keys", &orphan]));
    assert_eq!(run.stdout.lines().count(), 13, "every key, the orphan's too: {run:?}");
    let run = stowage(args(&[&"inspect", &"--json", &set.join("caches/tensor_f32")]));
    assert_eq!(run.code, 0, "{run:?}");
    let report: serde_json::Value = serde_json::from_str(&run.stdout).unwrap();
    assert_eq!(report["kind"], "torchcachex");
    assert_eq!((report["keys"].as_u64(), report["rows"].as_u64()), (Some(13), Some(16)));
    assert_eq!(report["dedup"][0]["references"], 16);
    assert_eq!(report["dedup"][0]["stored"], 13);
    assert_eq!(report["checksums"]["covered_samples"], 0);
    assert_eq!(report["checksums"]["uncovered_files"].as_array().unwrap().len(), 3);
    assert_eq!(report["schema"][0]["dtype"], "float32");
    assert_eq!(report["memory"]["bytes"], 12 * 16 * 4 + 16 * 4);
}

#[test]
fn verify_output_is_the_same_for_any_number_of_jobs() {
    let Some(set) = reference_set("torchcachex") else { return };
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("tensor_f32");
    stowage_conformance::corrupt::copy_tree(&set.join("caches/tensor_f32"), &cache).unwrap();
    // Garbage in two of the three segments.
    for id in [0, 2] {
        let segment = cache.join(format!("segments/segment_00000{id}.arrow"));
        let len = std::fs::metadata(&segment).unwrap().len();
        stowage_conformance::corrupt::truncate(&segment, len / 2).unwrap();
    }
    let runs: Vec<Run> = ["1", "2", "5"]
        .iter()
        .map(|jobs| stowage(args(&[&"verify", &cache, &"--jobs", jobs])))
        .collect();
    assert_eq!(runs[0].code, 1, "{:?}", runs[0]);
    assert!(runs[0].stdout.contains("segment_000000.arrow"), "{:?}", runs[0]);
    assert!(runs[0].stdout.contains("segment_000002.arrow"), "{:?}", runs[0]);
    for run in &runs[1..] {
        assert_eq!(run.stdout, runs[0].stdout);
        assert_eq!(run.code, 1);
    }
}

/// Compares every file `get` wrote for aenet entry `entry` with the set's expected `.npy`s.
fn assert_aenet_entry(set: &Path, file: &str, entry: i64, out: &Path) -> usize {
    let expected = set.join("expected").join(file);
    let mut compared = 0;
    let features = expected.join(format!("features_entry{entry}.npy"));
    if features.exists() {
        assert_eq!(read_npy(&out.join("features.npy")), read_npy(&features), "{file} {entry}");
        compared += 1;
    }
    for array in stowage_hdf5::DERIVATIVE_ARRAYS {
        let name = array.replace('/', "_");
        let want = expected.join(format!("deriv_entry{entry}_{name}.npy"));
        if want.exists() {
            let got = read_npy(&out.join(format!("{name}.npy")));
            assert_eq!(got, read_npy(&want), "{file} entry {entry} {name}");
            compared += 1;
        }
    }
    compared
}

#[test]
fn keys_get_verify_and_inspect_read_every_aenet_reference_file() {
    let Some(set) = reference_set("aenet-torch-cache") else { return };
    let dir = tempfile::tempdir().unwrap();
    let mut compared = 0;
    for name in ["v2_both_f64", "v2_deriv_f64", "v2_feat_f32", "v2_single_f32", "v1_legacy"] {
        let file = set.join(format!("{name}.h5"));
        let expected: serde_json::Value = serde_json::from_slice(
            &std::fs::read(set.join(format!("expected/{name}.json"))).unwrap(),
        )
        .unwrap();
        let mut entries: Vec<i64> = ["features", "derivatives"]
            .iter()
            .flat_map(|s| expected[s].as_array().cloned().unwrap_or_default())
            .map(|e| e["entry_idx"].as_i64().unwrap())
            .collect();
        entries.sort_unstable();
        entries.dedup();
        let run = stowage(args(&[&"keys", &file]));
        assert_eq!(run.code, 0, "{run:?}");
        let want: Vec<String> = entries.iter().map(i64::to_string).collect();
        assert_eq!(run.stdout.lines().collect::<Vec<_>>(), want, "{name}");
        for entry in &entries {
            let out = dir.path().join(format!("{name}-{entry}"));
            let run = stowage(args(&[&"get", &file, &entry.to_string(), &"--out", &out]));
            assert_eq!(run.code, 0, "{run:?}");
            compared += assert_aenet_entry(&set, name, *entry, &out);
        }
        let run = stowage(args(&[&"verify", &file]));
        assert_eq!(run.code, 3, "aenet writes no checksums: {run:?}");
        let samples = count(entries.len() as u64, "sample");
        let summary = run.stdout.lines().last().unwrap();
        assert!(summary.starts_with(&format!("{samples}, ")), "{run:?}");
        assert!(summary.ends_with(&format!("no problem, {samples} unchecked")), "{run:?}");
        assert!(run.stdout.contains("written by aenet"), "{run:?}");
        let run = stowage(args(&[&"inspect", &file]));
        assert_eq!(run.code, 0, "{run:?}");
        let version = expected["version"].as_i64().unwrap();
        assert!(run.stdout.contains(&format!(" version {version} (")), "{run:?}");
        assert!(
            run.stdout.contains("checksums:   none (aenet's format has no checksums"),
            "{run:?}"
        );
        let sha = expected
            .pointer("/root_attrs/descriptor_compat_sha256")
            .or(expected.pointer("/derivative_attrs/descriptor_compat_sha256"))
            .and_then(serde_json::Value::as_str)
            .unwrap();
        assert!(run.stdout.contains(sha), "{run:?}");
    }
    // v2_both: 3 feature rows + 2 x 11 derivative arrays; the others likewise.
    assert!(compared >= 3 + 22, "{compared}");

    // plain.h5 holds no cache: refused with one line; a walk skips it.
    let plain = set.join("plain.h5");
    assert_error_line(&stowage(args(&[&"keys", &plain])), &["plain.h5", "is a file"]);
    let run = stowage(args(&[&"inspect", &"--json", &set]));
    assert_eq!(run.code, 0, "{run:?}");
    let reports: Vec<serde_json::Value> = serde_json::from_str(&run.stdout).unwrap();
    assert_eq!(reports.len(), 5, "every file with a torch cache: {run:?}");
    assert!(reports.iter().all(|r| r["kind"] == "aenet-hdf5"));
}

#[test]
fn inspect_walks_every_reference_set_as_one_json_array() {
    let Some(set) = reference_set("torchcachex") else { return };
    let root = set.parent().unwrap();
    let run = stowage(args(&[&"inspect", &"--json", &root]));
    assert_eq!(run.code, 0, "{run:?}");
    let reports: Vec<serde_json::Value> = serde_json::from_str(&run.stdout).unwrap();
    let mut kinds: Vec<&str> = reports.iter().map(|r| r["kind"].as_str().unwrap()).collect();
    kinds.dedup();
    for kind in ["aenet-hdf5", "dnanet-memmap", "hangar-numpy10", "torchcachex"] {
        assert!(kinds.contains(&kind), "{kind} missing from {kinds:?}");
    }
    // The original tools' sets (aenet 5, DNANet 3, hangar 1, torchcachex 8), then mixed/: the
    // caches stowage wrote and the tools changed (aenet 1, DNANet 1, hangar 2, torchcachex 3).
    assert_eq!(reports.len(), (5 + 3 + 1 + 8) + (1 + 1 + 2 + 3), "{kinds:?}");
    for report in &reports {
        for field in ["format", "state", "schema", "files", "total", "checksums", "integrity"] {
            assert!(report.get(field).is_some(), "{field} missing in {report}");
        }
    }
}

/// Checks that `get` of every key of `cache` writes `mixed_sample`'s fields.
fn assert_gets_arrow_samples(cache: &Path, dir: &Path, keys: usize) {
    for i in (0..keys).step_by(7) {
        let out = dir.join(format!("get-{i}"));
        let run = stowage(args(&[&"get", &cache, &format!("k{i:02}"), &"--out", &out]));
        assert_eq!(run.code, 0, "{run:?}");
        for (name, value) in mixed_sample(i).fields() {
            match value {
                Value::Tensor(t) => {
                    let (dtype, shape, _, bytes) = read_npy(&out.join(format!("{name}.npy")));
                    assert_eq!(
                        (dtype, shape.as_slice(), bytes.as_slice()),
                        (t.dtype(), t.shape(), t.bytes())
                    );
                }
                Value::Bytes(b) => {
                    assert_eq!(std::fs::read(out.join(format!("{name}.bin"))).unwrap(), b.as_ref())
                }
                Value::Json(text) => {
                    assert_eq!(
                        &std::fs::read_to_string(out.join(format!("{name}.json"))).unwrap(),
                        text
                    )
                }
                Value::Null => assert!(run.stderr.contains(&format!("field \"{name}\" is null"))),
            }
        }
    }
}

#[test]
fn a_stowage_arrow_cache_goes_through_every_command() {
    let dir = tempfile::tempdir().unwrap();
    let cache = build_arrow(dir.path(), true);
    let run = stowage(args(&[&"keys", &cache]));
    let want: Vec<String> = (0..40).map(|i| format!("k{i:02}")).collect();
    assert_eq!(run.stdout.lines().collect::<Vec<_>>(), want);
    assert_gets_arrow_samples(&cache, dir.path(), 40);

    let run = stowage(args(&[&"inspect", &cache]));
    assert_eq!(run.code, 0, "{run:?}");
    for needle in [
        "stowage Arrow segment cache",
        "format:      stowage-arrow version 3",
        "state:       finalized",
        "keys:        40\n",
        "segments:    4\n",
        "ragged  int16    ragged (*, 2)  nullable",
        "checksums:   xxh3 per row in segments/*.sums",
        "; 40 of 40 samples carry one",
        "integrity:   clean",
    ] {
        assert!(run.stdout.contains(needle), "no {needle:?}: {run:?}");
    }
    let run = stowage(args(&[&"verify", &cache]));
    assert_eq!(run.code, 0, "{run:?}");
    assert!(
        run.stdout.starts_with("40 samples, ") && run.stdout.ends_with(" files checked: clean\n"),
        "{run:?}"
    );
    let run = stowage(args(&[&"verify", &cache, &"--sample", &"0.25", &"--seed", &"3"]));
    assert_eq!(run.code, 0, "{run:?}");
    assert!(run.stdout.starts_with("10 of 40 samples (25.0%, seed 3), "), "{run:?}");

    // A flipped byte in segment 1: verify names the segment and the key; every N agrees.
    let segment = cache.join("segments/segment_000001.arrow");
    let bytes = std::fs::read(&segment).unwrap();
    let at = bytes.windows(4).position(|w| w == 13f32.to_le_bytes()).expect("k13's x");
    stowage_conformance::corrupt::flip_byte(&segment, at as u64 + 1).unwrap();
    let one = stowage(args(&[&"verify", &cache, &"--jobs", &"1"]));
    assert_eq!(one.code, 1, "{one:?}");
    assert!(one.stdout.contains(segment.to_str().unwrap()), "{one:?}");
    assert!(one.stdout.contains("key \"k13\""), "{one:?}");
    assert!(one.stdout.contains("damaged keys (1): k13\n"), "{one:?}");
    let four = stowage(args(&[&"verify", &cache, &"--jobs", &"4"]));
    assert_eq!(four.stdout, one.stdout);
    let out = dir.path().join("bad");
    assert_error_line(
        &stowage(args(&[&"get", &cache, &"k13", &"--out", &out])),
        &["k13", "segment_000001.arrow"],
    );
}

#[test]
fn a_stowage_hdf5_cache_goes_through_every_command() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("hdf5");
    let mut cache = stowage_hdf5::Hdf5Backend::create(&path, &mixed_schema()).unwrap();
    for i in 0..30 {
        cache.put(&format!("k{i:02}"), &mixed_sample(i)).unwrap();
        if i % 10 == 9 {
            cache.flush().unwrap();
        }
    }
    cache.finalize().unwrap();
    drop(cache);
    let run = stowage(args(&[&"keys", &path]));
    assert_eq!(run.stdout.lines().count(), 30, "{run:?}");
    assert_gets_arrow_samples(&path, dir.path(), 30);
    let run = stowage(args(&[&"inspect", &path]));
    assert_eq!(run.code, 0, "{run:?}");
    for needle in [
        "stowage HDF5 segment cache",
        "format:      stowage-hdf5 version 1",
        "keys:        30\n",
        "segments:    3\n",
        "checksums:   xxh3 per segment file",
        "integrity:   clean",
    ] {
        assert!(run.stdout.contains(needle), "no {needle:?}: {run:?}");
    }
    let run = stowage(args(&[&"verify", &path, &"--jobs", &"3"]));
    assert_eq!(run.code, 0, "{run:?}");
    assert!(run.stdout.starts_with("30 samples, "), "{run:?}");
    let segment = path.join("segments/segment_000001.h5");
    let len = std::fs::metadata(&segment).unwrap().len();
    stowage_conformance::corrupt::flip_byte(&segment, len / 2).unwrap();
    // The HDF5 backend checks each segment's xxh3 on its first use, before libhdf5 parses it:
    // the cache opens (through its key index run) but cannot list the damaged segment's keys.
    // verify then checks from disk: the damaged segment with its sample count, every row of the
    // intact ones, and the repair.
    let run = stowage(args(&[&"verify", &path]));
    assert_eq!(run.code, 1, "{run:?}");
    let lines: Vec<&str> = run.stdout.lines().collect();
    assert_eq!(lines.len(), 4, "the problem, the damaged file, the repair, the summary: {run:?}");
    for needle in [segment.to_str().unwrap(), "xxh3", "the segment's 10 samples are unreadable"] {
        assert!(lines[0].contains(needle), "problem line lacks {needle:?}: {run:?}");
    }
    assert_eq!(lines[1], format!("damaged files (1): {}", segment.display()), "{run:?}");
    assert!(lines[2].starts_with("to repair: a damaged segment's keys cannot be read"), "{run:?}");
    assert_eq!(lines[3], "20 samples, 5 files checked: 1 problem", "{run:?}");
    // Sampling needs the keys, which the cache cannot list: an error saying so.
    let run = stowage(args(&[&"verify", &path, &"--sample", &"0.5"]));
    assert_error_line(&run, &["segment_000001.h5", "without --sample"]);
}
