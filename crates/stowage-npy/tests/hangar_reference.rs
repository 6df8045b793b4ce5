//! Reads the `hangar-numpy10` reference set (written by hangar 0.5.2) and checks every record,
//! every data-file header and both corrupted copies against the stored expectations.
//!
//! Skips (with a visible SKIPPED line) when the set is absent, unless `STOWAGE_REQUIRE_REFERENCE=1`.

use std::path::{Path, PathBuf};

use serde_json::Value;
use stowage_core::npy_header;
use stowage_core::{DType, Error, Tensor};
use stowage_npy::test_support::CollectionFile;
use stowage_npy::{Numpy10Record, read_hangar_record};

const SET: &str = "hangar-numpy10";

fn load_json(path: &Path) -> Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn str_field<'a>(v: &'a Value, key: &str) -> &'a str {
    v[key].as_str().unwrap_or_else(|| panic!("{key} missing in {v}"))
}

fn shape_field(v: &Value) -> Vec<usize> {
    v.as_array()
        .unwrap_or_else(|| panic!("shape {v} is not a list"))
        .iter()
        .map(|d| d.as_u64().expect("dims are integers") as usize)
        .collect()
}

/// One entry of records.json.
struct Entry {
    key: String,
    record: String,
    uid: String,
    shape: Vec<usize>,
    values_file: PathBuf,
}

fn records(set: &Path) -> Vec<Entry> {
    let json = load_json(&set.join("records.json"));
    let entries: Vec<Entry> = json
        .as_array()
        .expect("records.json is a list")
        .iter()
        .map(|r| Entry {
            key: format!("{}/{}", str_field(r, "column"), str_field(r, "sample_key")),
            record: str_field(r, "record").to_owned(),
            uid: str_field(r, "uid").to_owned(),
            shape: shape_field(&r["shape"]),
            values_file: set.join(str_field(r, "values_file")),
        })
        .collect();
    assert_eq!(entries.len(), 45, "the set has 44 committed samples and 1 staged one");
    entries
}

/// An expected-values `.npy` (numpy.save, format 1.0, C order), read with our own header parser.
struct Expected {
    descr: String,
    dtype: DType,
    shape: Vec<usize>,
    bytes: Vec<u8>,
}

fn expected(path: &Path) -> Expected {
    let file = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let h = npy_header::parse(&file).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    assert!(!h.fortran_order && h.byte_order == stowage_core::ByteOrder::Little);
    let bytes = file[h.data_offset..].to_vec();
    assert_eq!(bytes.len(), h.data_len().unwrap(), "{}", path.display());
    Expected { descr: h.descr, dtype: h.dtype, shape: h.shape, bytes }
}

fn assert_same(got: &Tensor, want: &Expected, what: &str) {
    assert_eq!(got.dtype(), want.dtype, "{what}: dtype ({})", want.descr);
    assert_eq!(got.shape(), want.shape.as_slice(), "{what}: shape");
    assert_eq!(got.bytes(), want.bytes.as_slice(), "{what}: bytes");
}

/// Copies a directory tree into writable files.
fn copy_tree(from: &Path, to: &Path) {
    stowage_conformance::corrupt::copy_tree(from, to).unwrap();
}

/// A copy of the set's `repo/` with `replacement` substituted for the data file it replaces.
fn repo_with(set: &Path, replacement: &str, replaces: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    copy_tree(&set.join("repo"), dir.path());
    let target = dir.path().join(replaces.strip_prefix("repo/").expect("replaces is under repo/"));
    std::fs::remove_file(&target).unwrap();
    std::fs::copy(set.join(replacement), &target).unwrap();
    dir
}

#[test]
fn every_record_reads_back_the_expected_values() {
    let Some(set) = stowage_test_support::reference::reference_set(SET) else { return };
    let repo = set.join("repo");
    for e in records(&set) {
        let parsed = Numpy10Record::parse(&e.record).unwrap();
        assert_eq!(parsed.to_string(), e.record, "{}: records round-trip exactly", e.key);
        assert_eq!((parsed.uid.as_str(), &parsed.shape), (e.uid.as_str(), &e.shape), "{}", e.key);

        let got = read_hangar_record(&repo, &e.record, true)
            .unwrap_or_else(|err| panic!("{} ({}): {err}", e.key, e.record));
        assert_same(&got, &expected(&e.values_file), &e.key);
        // Only the two samples that are not contiguous in their slot are copied.
        let copied = matches!(e.key.as_str(), "vs/v_20x2x1" | "vs/v_5x1x1");
        assert_eq!(got.is_zero_copy(), !copied, "{}", e.key);
    }
}

#[test]
fn data_file_headers_match_the_manifest() {
    let Some(set) = stowage_test_support::reference::reference_set(SET) else { return };
    let manifest = load_json(&set.join("manifest.json"));
    let rows = manifest["collection_size"].as_u64().unwrap() as usize;
    let files = manifest["files"].as_array().unwrap();
    assert_eq!(files.len(), 10);
    for f in files {
        let path = set.join(str_field(f, "data_file"));
        let want = &f["npy_header"];
        let bytes = std::fs::read(&path).unwrap();
        assert_eq!(bytes.len() as u64, f["size_bytes"].as_u64().unwrap(), "{}", path.display());
        let h = npy_header::parse(&bytes).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        assert_eq!(h.descr, str_field(want, "descr"), "{}", path.display());
        assert_eq!(h.shape, shape_field(&want["shape"]), "{}", path.display());
        assert_eq!(h.fortran_order, want["fortran_order"].as_bool().unwrap());
        assert_eq!(format!("{}.{}", h.version.0, h.version.1), str_field(want, "version"));
        assert_eq!(h.data_offset as u64, want["header_length"].as_u64().unwrap());
        let text = &bytes[10..h.data_offset];
        assert_eq!(text, str_field(want, "header_text").as_bytes(), "{}", path.display());

        let file = CollectionFile::open(&path).unwrap();
        assert_eq!(file.rows(), rows);
        assert_eq!(h.shape[0], rows);
    }
}

#[test]
fn a_flipped_sample_byte_fails_exactly_that_sample() {
    let Some(set) = stowage_test_support::reference::reference_set(SET) else { return };
    let repo = repo_with(&set, "corrupted/data_byte/4ujrcb35.npy", "repo/data/10/4ujrcb35.npy");
    let mut verified_in_file = 0;
    for e in records(&set) {
        let result = read_hangar_record(repo.path(), &e.record, true);
        if e.key == "fx/fx013" {
            let err = result.expect_err("fx013 holds the flipped byte");
            let msg = err.to_string();
            assert!(matches!(err, Error::Corrupted { .. }), "{msg}");
            for needle in ["4ujrcb35.npy", "fd40def8890c87db", "cac95c71f42d7232", &e.record] {
                assert!(msg.contains(needle), "{needle:?} missing from {msg}");
            }
            assert!(
                msg.contains("checksum cac95c71f42d7232 != recorded fd40def8890c87db"),
                "{msg}"
            );
            // Without verification the damaged bytes come back, which is why reads verify.
            let unverified = read_hangar_record(repo.path(), &e.record, false).unwrap();
            assert_ne!(unverified.bytes(), expected(&e.values_file).bytes.as_slice());
        } else {
            let got = result.unwrap_or_else(|err| panic!("{}: {err}", e.key));
            assert_same(&got, &expected(&e.values_file), &e.key);
            if e.uid == "4ujrcb35" {
                verified_in_file += 1;
            }
        }
    }
    assert_eq!(verified_in_file, 9, "the other nine samples of 4ujrcb35 verify");
}

#[test]
fn a_flipped_padding_byte_is_outside_every_sample() {
    let Some(set) = stowage_test_support::reference::reference_set(SET) else { return };
    let repo = repo_with(&set, "corrupted/padding_byte/bkh47f2d.npy", "repo/data/10/bkh47f2d.npy");
    for e in records(&set) {
        let got = read_hangar_record(repo.path(), &e.record, true)
            .unwrap_or_else(|err| panic!("{}: {err}", e.key));
        assert_same(&got, &expected(&e.values_file), &e.key);
    }
}

#[test]
fn the_manifest_corruption_notes_agree() {
    let Some(set) = stowage_test_support::reference::reference_set(SET) else { return };
    let manifest = load_json(&set.join("manifest.json"));
    let all = records(&set);
    for c in manifest["corrupted"].as_array().unwrap() {
        let repo = repo_with(&set, str_field(c, "file"), str_field(c, "replaces"));
        let must_fail: Vec<&str> =
            c["must_fail"].as_array().unwrap().iter().map(|v| v.as_str().unwrap()).collect();
        for (key, outcome) in c["hangar_0_5_2_read_results"].as_object().unwrap() {
            let e = all.iter().find(|e| e.key.ends_with(&format!("/{key}"))).unwrap();
            let result = read_hangar_record(repo.path(), &e.record, true);
            let hangar_failed = outcome.as_str() != Some("ok");
            assert_eq!(hangar_failed, must_fail.contains(&key.as_str()));
            assert_eq!(result.is_err(), hangar_failed, "{key}: hangar said {outcome}");
        }
    }
}

#[test]
fn the_staged_file_needs_its_marker() {
    let Some(set) = stowage_test_support::reference::reference_set(SET) else { return };
    let staged = records(&set).into_iter().find(|e| e.key == "hf/h_uncommitted").unwrap();
    let dir = tempfile::tempdir().unwrap();
    copy_tree(&set.join("repo"), dir.path());
    assert!(read_hangar_record(dir.path(), &staged.record, true).is_ok());
    std::fs::remove_file(dir.path().join(format!("stage_data/10/{}.npy", staged.uid))).unwrap();
    let err = read_hangar_record(dir.path(), &staged.record, true).unwrap_err();
    assert!(matches!(err, Error::NotFound { .. }), "{err}");
    assert!(err.to_string().contains("jmd8tjt8.npy"), "{err}");
}
