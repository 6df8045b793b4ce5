//! The read side against the caches DNANet itself wrote (reference set `dnanet-memmap`).

use std::path::{Path, PathBuf};

use serde_json::Value as Json;
use stowage_core::{Error, Reader, Tensor, ValidationLevel, Value};
use stowage_memmap::{MemmapBackend, MemmapOptions};
use stowage_test_support::reference::reference_set;

const COMPLETE: [&str; 2] = ["aed9b48500e9acfd", "ff9cde909fae61f6"];
const UNFINALIZED: &str = "d3c3787192a40966";

fn manifest(set: &Path) -> Json {
    serde_json::from_slice(&std::fs::read(set.join("manifest.json")).unwrap()).unwrap()
}

fn cache_entry<'a>(manifest: &'a Json, key: &str) -> &'a Json {
    manifest["caches"].as_array().unwrap().iter().find(|c| c["key"] == key).unwrap()
}

fn open(dir: &Path) -> stowage_core::Result<MemmapBackend> {
    MemmapBackend::open_read_only(dir, MemmapOptions::default())
}

/// An expected `.npy` file as a tensor (dtype, shape and bytes as numpy wrote them).
fn expected(path: &Path) -> Tensor {
    let bytes = std::fs::read(path).unwrap();
    let header = stowage_core::npy_header::parse(&bytes).unwrap();
    assert!(!header.fortran_order);
    Tensor::new(header.dtype, header.shape, bytes[header.data_offset..].to_vec()).unwrap()
}

fn json_field(value: &Json) -> Value {
    match value {
        Json::Null => Value::Null,
        Json::String(text) => Value::Json(text.clone()),
        other => panic!("unexpected {other}"),
    }
}

/// Checks every row of cache `key` against the expected files and the manifest's row entries.
fn check_rows(set: &Path, key: &str, cache: &MemmapBackend) {
    let manifest = manifest(set);
    let rows = cache_entry(&manifest, key)["rows"].as_array().unwrap();
    assert_eq!(cache.len(), rows.len());
    for (i, row) in rows.iter().enumerate() {
        let got = cache.get_row(i as i64).unwrap();
        let what = format!("{key} row {i}");
        for field in ["data", "scaler"] {
            let want = expected(&set.join(row["expected"][field].as_str().unwrap()));
            assert_eq!(got.tensor(field), Some(&want), "{what} {field}");
            assert!(got.tensor(field).unwrap().is_zero_copy());
        }
        if row["has_annotation"].as_bool().unwrap() {
            let want = expected(&set.join(row["expected"]["annotation"].as_str().unwrap()));
            assert_eq!(got.tensor("annotation"), Some(&want), "{what} annotation");
        } else {
            assert_eq!(got.get("annotation"), Some(&Value::Null), "{what}: null, not zeros");
        }
        assert_eq!(got.get("panel"), Some(&json_field(&row["adjusted_panel_json"])), "{what}");
        assert_eq!(got.get("allele"), Some(&json_field(&row["allele_annotation_json"])), "{what}");
        assert_eq!(got.get("meta_json"), Some(&json_field(&row["meta_json"])), "{what}");
        let path = row["path"].as_str().unwrap();
        assert_eq!(cache.get(path).unwrap().as_ref(), Some(&got), "{what}: get by path");
        let from_end = i as i64 - rows.len() as i64;
        assert_eq!(cache.get_row(from_end).unwrap(), got, "{what}: index {from_end}");
        cache.schema().validate(&got).unwrap();
    }
    let keys: Vec<&str> = rows.iter().map(|r| r["path"].as_str().unwrap()).collect();
    assert_eq!(cache.keys().unwrap(), keys);
}

#[test]
fn complete_caches_return_exactly_the_stored_rows() {
    let Some(set) = reference_set("dnanet-memmap") else { return };
    for key in COMPLETE {
        let cache = open(&set.join("cache_root").join(key)).unwrap();
        assert!(cache.is_finalized(), "{key}");
        assert_eq!(cache.schema(), &stowage_memmap::dnanet(3, 32));
        check_rows(&set, key, &cache);
        let err = cache.get_row(6).unwrap_err().to_string();
        assert!(err.contains("row 6") && err.contains("6 rows"), "{err}");
        assert!(cache.get_row(-7).is_err());
    }
}

#[test]
fn complete_caches_validate_undamaged_and_unchecked() {
    let Some(set) = reference_set("dnanet-memmap") else { return };
    for key in COMPLETE {
        let cache = open(&set.join("cache_root").join(key)).unwrap();
        for level in [ValidationLevel::Structure, ValidationLevel::Full] {
            let report = cache.validate(level).unwrap();
            assert_unchecked_whole(&report, cache.len(), &format!("{key} {level:?}"));
        }
    }
}

/// No problem, and every row listed as unchecked (DNANet writes no checksums): never clean.
fn assert_unchecked_whole(report: &stowage_core::ValidationReport, rows: usize, what: &str) {
    assert!(report.is_undamaged(), "{what}: {:?}", report.problems);
    assert!(!report.is_clean(), "{what}: data nobody checked is never clean");
    assert_eq!(report.unchecked.len(), 1, "{what}: {report:?}");
    assert_eq!(report.unchecked[0].writer, "DNANet", "{what}");
    assert_eq!(report.unchecked[0].samples, rows as u64, "{what}");
}

#[test]
fn unfinalized_cache_serves_its_committed_rows_and_ignores_the_torn_tail() {
    let Some(set) = reference_set("dnanet-memmap") else { return };
    let dir = set.join("cache_root").join(UNFINALIZED);
    let cache = open(&dir).unwrap();
    assert!(!cache.is_finalized());
    assert_eq!(cache.len(), 4);
    assert_eq!(cache.dropped_manifest_tail(), None, "its manifest ends with a whole line");
    // data.bin holds 4 rows of 192 bytes plus the 96 bytes of a torn fifth row.
    assert_eq!(std::fs::metadata(dir.join("data.bin")).unwrap().len(), 4 * 192 + 96);
    check_rows(&set, UNFINALIZED, &cache);
    let manifest = manifest(&set);
    let resume = &cache_entry(&manifest, UNFINALIZED)["recovery"]["resume_paths"];
    let resume: Vec<&str> =
        resume.as_array().unwrap().iter().map(|p| p.as_str().unwrap()).collect();
    assert_eq!(cache.keys().unwrap(), resume);
    assert!(cache.get_row(4).is_err());
    let report = cache.validate(ValidationLevel::Full).unwrap();
    assert_unchecked_whole(&report, 4, UNFINALIZED);
}

/// A writable copy of cache `key` in a temporary directory.
fn copy_cache(set: &Path, key: &str) -> (tempfile::TempDir, PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join(key);
    std::fs::create_dir(&dir).unwrap();
    for entry in std::fs::read_dir(set.join("cache_root").join(key)).unwrap() {
        let entry = entry.unwrap();
        let target = dir.join(entry.file_name());
        std::fs::write(&target, std::fs::read(entry.path()).unwrap()).unwrap();
    }
    (tmp, dir)
}

fn assert_names(err: &Error, file: &str) {
    let message = err.to_string();
    assert!(message.contains(file), "{message} should name {file}");
}

#[test]
fn truncated_data_bin_is_corruption_naming_the_file_and_sizes() {
    let Some(set) = reference_set("dnanet-memmap") else { return };
    let (_tmp, dir) = copy_cache(&set, COMPLETE[0]);
    let data = std::fs::read(dir.join("data.bin")).unwrap();
    std::fs::write(dir.join("data.bin"), &data[..data.len() - 10]).unwrap();
    let err = open(&dir).err().unwrap();
    assert!(matches!(err, Error::Corrupted { .. }), "{err}");
    assert_names(&err, "data.bin");
    assert!(err.to_string().contains("1142 bytes, expected 1152"), "{err}");

    // The unfinished cache: truncated below its committed rows.
    let (_tmp, dir) = copy_cache(&set, UNFINALIZED);
    std::fs::write(dir.join("data.bin"), &std::fs::read(dir.join("data.bin")).unwrap()[..700])
        .unwrap();
    assert_names(&open(&dir).err().unwrap(), "data.bin");
}

#[test]
fn deleted_panels_json_is_reported_naming_the_file() {
    let Some(set) = reference_set("dnanet-memmap") else { return };
    let (_tmp, dir) = copy_cache(&set, COMPLETE[0]);
    std::fs::remove_file(dir.join("panels.json")).unwrap();
    let cache = open(&dir).unwrap();
    let err = cache.get_row(0).unwrap_err();
    assert!(matches!(err, Error::Corrupted { .. }), "{err}");
    assert_names(&err, "panels.json");
    let report = cache.validate(ValidationLevel::Structure).unwrap();
    assert!(
        report.problems.iter().any(|p| p.path.as_deref() == Some(&dir.join("panels.json"))),
        "{:?}",
        report.problems
    );
}

#[test]
fn garbage_shapes_json_is_corruption_naming_the_file() {
    let Some(set) = reference_set("dnanet-memmap") else { return };
    for garbage in [
        &b"not json"[..],
        b"{\"n\": 6}",
        b"{\"n\": 6, \"data\": {\"shape\": [3], \"dtype\": \"<i2\"}}",
    ] {
        let (_tmp, dir) = copy_cache(&set, COMPLETE[1]);
        std::fs::write(dir.join("shapes.json"), garbage).unwrap();
        let err = open(&dir).err().unwrap();
        assert!(matches!(err, Error::Corrupted { .. }), "{err}");
        let message = err.to_string();
        assert!(message.contains("shapes.json") || message.contains(".bin"), "{message}");
    }
    let (_tmp, dir) = copy_cache(&set, COMPLETE[1]);
    std::fs::remove_file(dir.join("shapes.json")).unwrap();
    assert_names(&open(&dir).err().unwrap(), "shapes.json");
}

#[test]
fn garbage_index_parquet_is_corruption_naming_the_file() {
    let Some(set) = reference_set("dnanet-memmap") else { return };
    let (_tmp, dir) = copy_cache(&set, COMPLETE[0]);
    let original = std::fs::read(dir.join("index.parquet")).unwrap();
    let mut flipped = original.clone();
    let middle = flipped.len() / 2;
    flipped[middle..middle + 16].fill(0xff);
    for garbage in [b"garbage".to_vec(), original[..original.len() / 2].to_vec(), flipped] {
        std::fs::write(dir.join("index.parquet"), &garbage).unwrap();
        // Open reads only shapes.json: the index is loaded, and refused, on first need.
        let cache = open(&dir).unwrap();
        assert!(!cache.index_loaded());
        match cache.keys() {
            Err(err) => {
                assert!(matches!(err, Error::Corrupted { .. }), "{err}");
                assert_names(&err, "index.parquet");
                // Every later call that needs the index gives the same error.
                let again = [
                    cache.get("/x").err(),
                    cache.contains("/x").err(),
                    cache.get_row(0).err(),
                    cache.keys().err(),
                ];
                for e in again {
                    let e = e.expect("the failed load is kept");
                    assert!(matches!(e, Error::Corrupted { .. }), "{e}");
                    assert_names(&e, "index.parquet");
                }
                let report = cache.validate(ValidationLevel::Structure).unwrap();
                assert!(
                    report
                        .problems
                        .iter()
                        .any(|p| p.path.as_deref() == Some(&dir.join("index.parquet"))),
                    "{:?}",
                    report.problems
                );
            }
            // A flip the parquet reader cannot see (no page checksums) must still give the
            // stored rows or an error, never a panic.
            Ok(_) => {
                for i in 0..cache.len() as i64 {
                    let _ = cache.get_row(i);
                }
            }
        }
    }
    std::fs::remove_file(dir.join("index.parquet")).unwrap();
    assert_names(&open(&dir).err().unwrap(), "index.parquet");
}

#[test]
fn torn_and_damaged_manifests() {
    let Some(set) = reference_set("dnanet-memmap") else { return };
    let (_tmp, dir) = copy_cache(&set, UNFINALIZED);
    let text = std::fs::read_to_string(dir.join("manifest.jsonl")).unwrap();
    std::fs::write(dir.join("manifest.jsonl"), format!("{text}{{\"row\": 4, \"path\": \"/x"))
        .unwrap();
    let cache = open(&dir).unwrap();
    assert_eq!(cache.len(), 4);
    assert_eq!(cache.dropped_manifest_tail().unwrap().line, 5);

    let mut lines: Vec<&str> = text.lines().collect();
    lines[1] = "{\"row\": 1, garbage";
    std::fs::write(dir.join("manifest.jsonl"), lines.join("\n") + "\n").unwrap();
    let err = open(&dir).err().unwrap();
    assert!(matches!(err, Error::Corrupted { .. }), "{err}");
    assert_names(&err, "manifest.jsonl");
    assert!(err.to_string().contains("line 2"), "{err}");
}

#[test]
fn a_directory_that_is_not_a_cache_is_not_found() {
    let Some(set) = reference_set("dnanet-memmap") else { return };
    for dir in [set.join("cache_root"), set.join("expected"), set.join("nope")] {
        assert!(matches!(open(&dir).err(), Some(Error::NotFound { .. })), "{}", dir.display());
    }
}
