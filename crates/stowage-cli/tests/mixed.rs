//! The caches stowage wrote and the original tools then changed (`../shared/reference/mixed`),
//! through every command: `keys` lists every key of both writers, `get` returns each one equal to
//! the expected value, `verify` reports the other writer's data as unchecked (exit 3, never
//! "clean") and `adopt` makes it checked where the format allows. The sets are read in place;
//! every command that writes runs on a copy.

mod common;

use std::path::{Path, PathBuf};

use common::*;
use stowage_test_support::reference::reference_set;

fn manifest(set: &Path) -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(set.join("manifest.json")).unwrap()).unwrap()
}

/// A copy of `dir` (recursively) in a new temporary directory; returns the directory holding it.
fn copy_of(dir: &Path) -> (tempfile::TempDir, PathBuf) {
    let temp = tempfile::tempdir().unwrap();
    let to = temp.path().join(dir.file_name().unwrap());
    copy_dir(dir, &to);
    (temp, to)
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), target).unwrap();
        }
    }
}

/// Every file under `dir` (relative path) with its bytes.
fn snapshot(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut files = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(next) = stack.pop() {
        for entry in std::fs::read_dir(&next).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else {
                let bytes = std::fs::read(&path).unwrap();
                files.push((path.strip_prefix(dir).unwrap().to_path_buf(), bytes));
            }
        }
    }
    files.sort();
    files
}

/// `stowage keys` of `cache` lists exactly the keys of the manifest's `keys` (in any order).
fn assert_lists_keys(cache: &Path, keys: &serde_json::Map<String, serde_json::Value>) {
    let run = stowage(args(&[&"keys", &cache]));
    assert_eq!(run.code, 0, "{run:?}");
    let mut listed: Vec<&str> = run.stdout.lines().collect();
    listed.sort_unstable();
    let mut want: Vec<&str> = keys.keys().map(String::as_str).collect();
    want.sort_unstable();
    assert_eq!(listed, want, "{}", cache.display());
}

/// The last line of the output: verify's summary.
fn summary(run: &Run) -> &str {
    run.stdout.lines().last().unwrap_or_default()
}

#[test]
fn dnanet_resume_reads_every_row_verify_reports_dnanets_rows_and_adopt_checks_them() {
    let Some(set) = reference_set("mixed/dnanet-resume") else { return };
    let manifest = manifest(&set);
    let cache = set.join(manifest["cache_path"].as_str().unwrap());
    let keys = manifest["keys"].as_object().unwrap();
    let mut rows: Vec<(&String, &serde_json::Value)> = keys.iter().collect();
    rows.sort_by_key(|(_, entry)| entry["row"].as_u64().unwrap());

    let run = stowage(args(&[&"keys", &cache]));
    assert_eq!(run.code, 0, "{run:?}");
    let want: Vec<&str> = rows.iter().map(|(path, _)| path.as_str()).collect();
    assert_eq!(run.stdout.lines().collect::<Vec<_>>(), want, "the 6 paths in row order");

    let out = tempfile::tempdir().unwrap();
    for (i, (path, entry)) in rows.iter().enumerate() {
        let dir = out.path().join(format!("row{i}"));
        let run = stowage(args(&[&"get", &cache, path, &"--out", &dir]));
        assert_eq!(run.code, 0, "{run:?}");
        let annotated = entry["has_annotation"].as_bool().unwrap();
        for (field, want) in entry["fields"].as_object().unwrap() {
            // DNANet hands out an all-zero placeholder for a row without an annotation; stowage's
            // schema marks that as null (checked below).
            if field == "annotation" && !annotated {
                continue;
            }
            if let Some(expected) = want["expected_file"].as_str() {
                let got = read_npy(&dir.join(format!("{field}.npy")));
                assert_eq!(got, read_npy(&set.join(expected)), "{path} {field}");
            } else if let Some(text) = want["json"].as_str() {
                let got = std::fs::read_to_string(dir.join(format!("{field}.json"))).unwrap();
                assert_eq!(got, text, "{path} {field}");
            }
        }
        // Rows 2 and 5 have no annotation: null, nothing written for it.
        assert_eq!(dir.join("annotation.npy").exists(), annotated, "{path}");
        if !annotated {
            assert!(run.stderr.contains("field \"annotation\" is null"), "{run:?}");
        }
    }

    // DNANet's two rows carry no stowage checksum: unchecked, never "clean", no problem.
    let run = stowage(args(&[&"verify", &cache]));
    assert_eq!(run.code, 3, "{run:?}");
    assert!(run.stdout.contains("2 samples written by DNANet"), "{run:?}");
    assert!(run.stdout.contains("stowage adopt"), "{run:?}");
    assert!(summary(&run).ends_with("no problem, 2 samples unchecked"), "{run:?}");
    let run = stowage(args(&[&"inspect", &cache]));
    assert_eq!(run.code, 0, "{run:?}");
    assert!(run.stdout.contains("unchecked: "), "{run:?}");

    // Adopting checksums them; DNANet's files stay byte for byte as they were.
    let (_temp, copy) = copy_of(&cache);
    let dnanet_files = [
        "_COMPLETE",
        "alleles.json",
        "annotation.bin",
        "data.bin",
        "fingerprint.json",
        "index.parquet",
        "panels.json",
        "scaler.bin",
        "shapes.json",
    ];
    let before: Vec<Vec<u8>> =
        dnanet_files.iter().map(|f| std::fs::read(copy.join(f)).unwrap()).collect();
    let run = stowage(args(&[&"adopt", &copy]));
    assert_eq!(run.code, 0, "{run:?}");
    assert!(run.stdout.starts_with("adopted 2 samples in "), "{run:?}");
    let after: Vec<Vec<u8>> =
        dnanet_files.iter().map(|f| std::fs::read(copy.join(f)).unwrap()).collect();
    assert!(before == after, "adopt changed a file DNANet wrote");
    let run = stowage(args(&[&"verify", &copy]));
    assert_eq!(run.code, 0, "{run:?}");
    assert_eq!(summary(&run), "6 samples, 7 files checked: clean", "{run:?}");
    let run = stowage(args(&[&"adopt", &copy]));
    assert_eq!(run.code, 0, "{run:?}");
    assert!(run.stdout.starts_with("nothing to adopt in "), "{run:?}");
}

#[test]
fn a_memmap_conversion_carries_dnanets_fingerprint_and_another_layout_says_it_does_not() {
    let Some(set) = reference_set("mixed/dnanet-resume") else { return };
    let cache = set.join(manifest(&set)["cache_path"].as_str().unwrap());
    let out = tempfile::tempdir().unwrap();
    let copy = out.path().join("copy");
    let run = stowage(args(&[&"convert", &cache, &copy, &"--to", &"memmap", &"--verify"]));
    assert_eq!(run.code, 0, "{run:?}");
    assert!(run.stdout.contains("carried over byte for byte"), "{run:?}");
    assert_eq!(
        std::fs::read(copy.join("fingerprint.json")).unwrap(),
        std::fs::read(cache.join("fingerprint.json")).unwrap(),
        "DNANet's validate_fingerprint compares the stored hash, config and sources"
    );
    let arrow = out.path().join("arrow");
    let run = stowage(args(&[&"convert", &cache, &arrow, &"--to", &"arrow"]));
    assert_eq!(run.code, 0, "{run:?}");
    assert!(run.stdout.contains("is not carried over"), "{run:?}");
}

#[test]
fn hangar_into_stowage_reads_both_writers_and_reports_hangars_file_unchecked() {
    let Some(set) = reference_set("mixed/hangar-into-stowage") else { return };
    let manifest = manifest(&set);
    let out = tempfile::tempdir().unwrap();
    for (name, cache_entry) in manifest["caches"].as_object().unwrap() {
        let cache = set.join(cache_entry["cache_path"].as_str().unwrap());
        let keys = cache_entry["keys"].as_object().unwrap();
        // hangar's samples have no keys: only stowage's are listed.
        assert_lists_keys(&cache, keys);
        for (key, entry) in keys {
            let dir = out.path().join(format!("{name}-{key}"));
            let run = stowage(args(&[&"get", &cache, key, &"--out", &dir]));
            assert_eq!(run.code, 0, "{run:?}");
            let expected = set.join(entry["fields"]["x"]["expected_file"].as_str().unwrap());
            assert_eq!(read_npy(&dir.join("x.npy")), read_npy(&expected), "{name} {key}");
        }
        let records = cache_entry["hangar_records"].as_object().unwrap();
        assert_eq!(records.len(), 3, "{name}");
        for (record, entry) in records {
            let file = out.path().join(format!("{name}-{}.npy", entry["order"]));
            let run = stowage(args(&[&"get", &cache, &"--record", record, &"--out", &file]));
            assert_eq!(run.code, 0, "{run:?}");
            let expected = set.join(entry["expected_file"].as_str().unwrap());
            assert_eq!(read_npy(&file), read_npy(&expected), "{name} {record}");
        }

        let before = snapshot(&cache);
        let run = stowage(args(&[&"verify", &cache]));
        assert_eq!(run.code, 3, "{run:?}");
        assert_eq!(run.stdout.matches("unchecked: ").count(), 1, "{run:?}");
        assert!(run.stdout.contains("written by hangar (how many, the cache does not record)"));
        assert!(summary(&run).ends_with("no problem, 1 file unchecked"), "{run:?}");
        // adopt cannot: hangar's records are in its own database. Nothing is written.
        let run = stowage(args(&[&"adopt", &cache]));
        assert_error_line(&run, &["cannot be adopted", "--record"]);
        assert!(before == snapshot(&cache), "{name}: verify or adopt changed a file");
    }
}

#[test]
fn aenet_append_reads_every_entry_verify_reports_aenets_rows_and_adopt_checks_them() {
    let Some(set) = reference_set("mixed/aenet-append") else { return };
    let manifest = manifest(&set);
    let file = set.join(manifest["cache_path"].as_str().unwrap());
    let entries = manifest["keys"].as_object().unwrap();

    let run = stowage(args(&[&"keys", &file]));
    assert_eq!(run.code, 0, "{run:?}");
    assert_eq!(run.stdout.lines().collect::<Vec<_>>(), ["0", "1", "2"], "{run:?}");
    let out = tempfile::tempdir().unwrap();
    let mut compared = 0;
    for (entry, want) in entries {
        let dir = out.path().join(entry);
        let run = stowage(args(&[&"get", &file, entry, &"--out", &dir]));
        assert_eq!(run.code, 0, "{run:?}");
        for (field, spec) in want["fields"].as_object().unwrap() {
            let expected = set.join(spec["expected_file"].as_str().unwrap());
            let got = read_npy(&dir.join(format!("{field}.npy")));
            assert_eq!(got, read_npy(&expected), "entry {entry} {field}");
            compared += 1;
        }
    }
    // Entry 1 has no derivatives: null, nothing written for them.
    assert!(out.path().join("1/features.npy").exists());
    assert!(!out.path().join("1/radial_center_idx.npy").exists());
    assert_eq!(compared, 3 + 2 * 11, "features of 3 entries, derivatives of 2");

    // No stowage checksums in this file (stowage 9e4830f kept none): all 3 entries unchecked.
    let run = stowage(args(&[&"verify", &file]));
    assert_eq!(run.code, 3, "{run:?}");
    assert!(run.stdout.contains("3 samples written by aenet"), "{run:?}");
    assert!(summary(&run).ends_with("no problem, 3 samples unchecked"), "{run:?}");

    let (_temp, copy) = copy_of(file.parent().unwrap());
    let copy = copy.join(file.file_name().unwrap());
    let run = stowage(args(&[&"adopt", &copy]));
    assert_eq!(run.code, 0, "{run:?}");
    assert!(run.stdout.starts_with("adopted 3 samples in 1 file: "), "{run:?}");
    let run = stowage(args(&[&"verify", &copy]));
    assert_eq!(run.code, 0, "{run:?}");
    assert_eq!(summary(&run), "3 samples, 1 file checked: clean", "{run:?}");
    let run = stowage(args(&[&"inspect", &copy]));
    assert!(run.stdout.contains("3 of 3 samples carry one"), "{run:?}");
}

#[test]
fn torchcachex_sets_read_every_key_verify_reports_torchcachexs_segment_and_adopt_checks_it() {
    for name in
        ["torchcachex-append-tensor", "torchcachex-append-dict", "torchcachex-readonly-open"]
    {
        let Some(set) = reference_set(&format!("mixed/{name}")) else { return };
        let manifest = manifest(&set);
        let cache = set.join(manifest["cache_path"].as_str().unwrap());
        let keys = manifest["keys"].as_object().unwrap();

        // Both writers' keys.
        assert_lists_keys(&cache, keys);

        // Every key's winning value: torchcachex's later row for the keys it wrote over.
        let out = tempfile::tempdir().unwrap();
        for (key, entry) in keys {
            let dir = out.path().join(key);
            let run = stowage(args(&[&"get", &cache, key, &"--out", &dir]));
            assert_eq!(run.code, 0, "{run:?}");
            for (field, spec) in entry["fields"].as_object().unwrap() {
                let expected = set.join(spec["expected_file"].as_str().unwrap());
                let got = read_npy(&dir.join(format!("{field}.npy")));
                assert_eq!(got, read_npy(&expected), "{name} {key} {field}");
            }
        }

        let appended = name != "torchcachex-readonly-open";
        let before = snapshot(&cache);
        let run = stowage(args(&[&"verify", &cache]));
        if appended {
            assert_eq!(run.code, 3, "{run:?}");
            assert!(run.stdout.contains("segment_000002.arrow: "), "{run:?}");
            assert!(run.stdout.contains("written by torchcachex"), "{run:?}");
        } else {
            // torchcachex only read (and rewrote index.pkl): every row is stowage's, checked.
            assert_eq!(run.code, 0, "{run:?}");
            assert!(summary(&run).ends_with(" checked: clean"), "{run:?}");
        }
        assert!(before == snapshot(&cache), "{name}: verify changed a file");

        let (_temp, copy) = copy_of(&cache);
        let torchcachex_segment = copy.join("segments/segment_000002.arrow");
        let segment_before = std::fs::read(&torchcachex_segment).ok();
        let run = stowage(args(&[&"adopt", &copy]));
        assert_eq!(run.code, 0, "{run:?}");
        let adopted = run.stdout.starts_with("adopted ");
        assert_eq!(adopted, appended, "{name}: {run:?}");
        assert_eq!(std::fs::read(&torchcachex_segment).ok(), segment_before, "{name}");
        let run = stowage(args(&[&"verify", &copy]));
        assert_eq!(run.code, 0, "{name}: {run:?}");
        assert!(summary(&run).ends_with(" checked: clean"), "{run:?}");
    }
}

/// The torchcachex peer (`xtask/py/torchcachex_peer.py`): torchcachex's read path.
fn torchcachex_read(cache: &Path, test: &str) -> Option<serde_json::Value> {
    let python = stowage_test_support::python::python_with(test, &["numpy", "pyarrow"])?;
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../../xtask/py/torchcachex_peer.py");
    let script = std::fs::read_to_string(script).unwrap();
    let out = stowage_test_support::python::run_script(
        python,
        &script,
        &["read", cache.to_str().unwrap()],
        b"",
        test,
    );
    Some(serde_json::from_str(&out).unwrap())
}

#[test]
fn converting_a_torchcachex_tuple_cache_keeps_the_tuple_and_its_pickles() {
    const TEST: &str = "converting_a_torchcachex_tuple_cache_keeps_the_tuple_and_its_pickles";
    let Some(set) = reference_set("torchcachex") else { return };
    let out = tempfile::tempdir().unwrap();
    for name in ["tuple_mixed", "list_tensors", "dict_mixed"] {
        // torchcachex reads from a copy: it writes index.pkl when it is done.
        let (_temp, source) = copy_of(&set.join("caches").join(name));
        let converted = out.path().join(name);
        let run = stowage(args(&[&"convert", &source, &converted, &"--to", &"arrow", &"--verify"]));
        assert_eq!(run.code, 0, "{run:?}");
        assert!(run.stdout.contains("bytes stored as verbatim_pickles carried over"), "{run:?}");
        let (Some(want), Some(got)) =
            (torchcachex_read(&source, TEST), torchcachex_read(&converted, TEST))
        else {
            return;
        };
        assert_eq!(got["output_structure"], want["output_structure"], "{name}");
        assert_eq!(got["values"], want["values"], "{name}: torchcachex reads the same objects");
    }
}
