//! Mixed use with DNANet: stowage and DNANet write the same cache, and neither loses a byte.
//!
//! DNANet's side is `xtask/py/dnanet_peer.py`, which reproduces DNANet's writer (resume from the
//! manifest, write, finalize), reader, `validate_fingerprint` and inspect tool; set
//! `STOWAGE_DNANET_PEER` to another script with the same command line (one driving DNANet's own
//! modules, say) to run these tests against it. After every step both sides read every row, and
//! DNANet's files must be what DNANet's reader, writer and inspect expect.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::{Value as Json, json};
use stowage_conformance::corrupt::copy_tree;
use stowage_core::{
    Backend, BackendFactory, Error, OpenMode, Reader, Sample, Tensor, ValidationLevel,
    ValidationReport, Value,
};
use stowage_fingerprint::SourceStamp;
use stowage_memmap::{CarriedFingerprint, MemmapBackend, MemmapFactory, MemmapOptions, dnanet};
use stowage_test_support::python::{python_with, run_script};
use stowage_test_support::reference::reference_set;

const D: usize = 3;
const L: usize = 8;

/// The files DNANet writes, which stowage must leave as DNANet left them (beyond its own
/// protocol's steps).
const DNANET_FILES: [&str; 10] = [
    "data.bin",
    "annotation.bin",
    "scaler.bin",
    "manifest.jsonl",
    "index.parquet",
    "panels.json",
    "alleles.json",
    "shapes.json",
    "fingerprint.json",
    "_COMPLETE",
];

// -- rows -----------------------------------------------------------------------------------------

/// One DNANet row. The JSON texts are in Python's `json.dumps` form, as DNANet writes them.
#[derive(Debug, Clone)]
struct Row {
    path: String,
    data: Vec<i16>,
    annotation: Option<Vec<i8>>,
    scaler_bits: Vec<u32>,
    panel: Option<String>,
    allele: Option<String>,
    meta: String,
}

/// Row `i`, written by `by`: a missing annotation (and allele) every third row, no panel every
/// fourth, a NaN with a payload and the int16 extremes on some.
fn row(i: usize, by: &str) -> Row {
    let mut data: Vec<i16> = (0..D * L).map(|j| (i * 1000 + j) as i16 - 500).collect();
    if i % 5 == 1 {
        data[..2].copy_from_slice(&[i16::MIN, i16::MAX]);
    }
    let annotation = (i % 3 != 2).then(|| (0..D * L).map(|j| ((i + j) % 7) as i8 - 3).collect());
    let mut scaler_bits: Vec<u32> = (0..L).map(|j| (i as f32 + j as f32 / 8.0).to_bits()).collect();
    if i % 4 == 1 {
        scaler_bits[0] = 0x7fc0_1234;
    }
    let panel = (i % 4 != 3)
        .then(|| format!("[{{\"name\": \"AMEL\", \"dye_row\": {}, \"base_pair\": 82.1}}]", i % 2));
    let allele = annotation.as_ref().map(|_| format!("[{{\"name\": \"X\", \"n\": {}}}]", i % 2));
    Row {
        path: format!("/data/hid/{by}_{i:02}.hid"),
        data,
        annotation,
        scaler_bits,
        panel,
        allele,
        meta: format!("{{\"i\": {i}, \"by\": \"{by}\", \"name\": \"\\u00eb\"}}"),
    }
}

fn json_value(text: &Option<String>) -> Value {
    text.clone().map_or(Value::Null, Value::Json)
}

impl Row {
    fn sample(&self) -> Sample {
        let scaler: Vec<f32> = self.scaler_bits.iter().map(|b| f32::from_bits(*b)).collect();
        let annotation = match &self.annotation {
            Some(values) => Value::from(Tensor::from_slice(&[D, L], values).unwrap()),
            None => Value::Null,
        };
        Sample::new()
            .with("data", Tensor::from_slice(&[D, L], &self.data).unwrap())
            .with("annotation", annotation)
            .with("scaler", Tensor::from_slice(&[L], &scaler).unwrap())
            .with("panel", json_value(&self.panel))
            .with("allele", json_value(&self.allele))
            .with("meta_json", Value::Json(self.meta.clone()))
    }

    /// The row as the peer's `write` takes it.
    fn peer_json(&self) -> Json {
        json!({
            "path": self.path,
            "data": self.data,
            "data_shape": [D, L],
            "annotation": self.annotation,
            "scaler_bits": self.scaler_bits,
            "scaler_shape": [L],
            "panel": self.panel,
            "allele": self.allele,
            "meta_json": self.meta,
        })
    }
}

// -- the DNANet peer ------------------------------------------------------------------------------

struct Dnanet {
    python: &'static str,
    script: String,
}

impl Dnanet {
    /// The peer, or `None` (with a visible SKIPPED line) when Python with numpy and pyarrow is
    /// missing and not required.
    fn find(test: &str) -> Option<Dnanet> {
        let python = python_with(test, &["numpy", "pyarrow", "pyarrow.parquet"])?;
        let path =
            std::env::var_os("STOWAGE_DNANET_PEER").map(PathBuf::from).unwrap_or_else(|| {
                Path::new(env!("CARGO_MANIFEST_DIR")).join("../../xtask/py/dnanet_peer.py")
            });
        let script = std::fs::read_to_string(&path)
            .unwrap_or_else(|e| panic!("reading the DNANet peer {}: {e}", path.display()));
        Some(Dnanet { python, script })
    }

    fn call(&self, command: &str, request: Json) -> Json {
        let stdin = serde_json::to_vec(&request).unwrap();
        let what = format!("DNANet peer {command}");
        let out = run_script(self.python, &self.script, &[command], &stdin, &what);
        serde_json::from_str(&out).unwrap_or_else(|e| panic!("{what} printed {out:?}: {e}"))
    }

    /// DNANet's writer opens `dir` (recovering it), writes `rows` and, with `finalize`, finalizes.
    fn write(&self, dir: &Path, rows: &[Row], finalize: Option<&Json>) -> Json {
        let rows: Vec<Json> = rows.iter().map(Row::peer_json).collect();
        self.call("write", json!({"cache": dir, "rows": rows, "finalize": finalize}))
    }

    /// DNANet reads every row of `dir` and they equal `want`; a finalized cache is complete, and
    /// DNANet's inspect reports its rows.
    fn check_rows(&self, dir: &Path, want: &[Row], step: &str) {
        let got = self.call("read", json!({"cache": dir}));
        let finalized = dir.join("shapes.json").exists();
        assert_eq!(got["complete"], finalized, "{step}: DNANet's _COMPLETE");
        assert_eq!(got["n"], want.len(), "{step}: DNANet's row count");
        let rows = got["rows"].as_array().unwrap();
        assert_eq!(rows.len(), want.len(), "{step}");
        for (i, (got, want)) in rows.iter().zip(want).enumerate() {
            let what = format!("{step}: DNANet row {i} ({})", want.path);
            assert_eq!(got["row"], i, "{what}");
            assert_eq!(got["path"], want.path, "{what}");
            assert_eq!(got["data"], json!(want.data), "{what}: data");
            assert_eq!(got["has_annotation"], want.annotation.is_some(), "{what}");
            assert_eq!(got["annotation"], json!(want.annotation), "{what}: annotation");
            let stored = want.annotation.clone().unwrap_or_else(|| vec![0; D * L]);
            assert_eq!(got["annotation_row"], json!(stored), "{what}: stored annotation row");
            assert_eq!(got["scaler_bits"], json!(want.scaler_bits), "{what}: scaler");
            assert_eq!(got["panel"], json!(want.panel), "{what}: panel");
            assert_eq!(got["allele"], json!(want.allele), "{what}: allele");
            assert_eq!(got["meta_json"], want.meta, "{what}: meta_json");
        }
        if finalized {
            let inspect = self.call("inspect", json!({"cache": dir}));
            assert_eq!(inspect["rc"], 0, "{step}: DNANet's inspect");
            let line = format!("rows (n):         {}\n", want.len());
            assert!(inspect["stdout"].as_str().unwrap().contains(&line), "{step}: {inspect}");
        }
    }

    fn fingerprint_is_valid(&self, dir: &Path, config: &Json, sources: &[String]) -> bool {
        let request = json!({"cache": dir, "config": config, "sources": sources});
        let reply = self.call("validate_fingerprint", request);
        reply["valid"].as_bool().expect("a bool")
    }
}

/// The `finalize` request of DNANet's writer, and the same config and sources for stowage.
fn fingerprint_inputs(rows: &[Row]) -> (Json, Vec<String>) {
    let config = json!({"cache_version": 5, "root": "/data/hid", "scaling": {"resolution": L}});
    (config, rows.iter().map(|r| r.path.clone()).collect())
}

// -- stowage's side -------------------------------------------------------------------------------

fn read_only(dir: &Path) -> MemmapBackend {
    MemmapBackend::open_read_only(dir, MemmapOptions::default()).unwrap()
}

fn append(dir: &Path) -> MemmapBackend {
    MemmapBackend::open_append(dir, MemmapOptions::default()).unwrap()
}

/// stowage lists `want`'s keys in row order and reads every row exactly (checksums verified where
/// they exist), by key and by row number.
fn check_stowage(dir: &Path, want: &[Row], step: &str) {
    let cache = read_only(dir);
    let keys: Vec<&str> = want.iter().map(|r| r.path.as_str()).collect();
    assert_eq!(cache.keys().unwrap(), keys, "{step}: stowage's keys");
    assert_eq!(cache.len(), want.len(), "{step}");
    for (i, row) in want.iter().enumerate() {
        let got = cache.get(&row.path).unwrap().unwrap_or_else(|| panic!("{step}: {}", row.path));
        assert_eq!(got, row.sample(), "{step}: stowage's row {i} ({})", row.path);
        assert_eq!(cache.get_row(i as i64).unwrap(), got, "{step}: row {i} by number");
    }
}

/// `validate(Full)` finds no damage, and exactly `rows` unchecked rows written by DNANet.
fn check_unchecked(dir: &Path, rows: &[usize], runs: &str, step: &str) -> ValidationReport {
    let report = read_only(dir).validate(ValidationLevel::Full).unwrap();
    assert!(report.problems.is_empty(), "{step}: {:?}", report.problems);
    if rows.is_empty() {
        assert!(report.is_clean(), "{step}: {:?}", report.unchecked);
        return report;
    }
    assert_eq!(report.unchecked.len(), 1, "{step}: {:?}", report.unchecked);
    let unchecked = &report.unchecked[0];
    assert_eq!(unchecked.samples, rows.len() as u64, "{step}: {unchecked}");
    assert_eq!(unchecked.writer, "DNANet", "{step}");
    let rows_text = format!("rows {runs} ");
    assert!(unchecked.next_step.contains(&rows_text), "{step}: {unchecked}");
    assert!(unchecked.next_step.contains("stowage adopt"), "{step}: {unchecked}");
    assert!(!report.is_clean() && report.is_undamaged());
    report
}

/// The bytes of DNANet's files in `dir` (the ones present).
fn dnanet_files(dir: &Path) -> BTreeMap<&'static str, Vec<u8>> {
    DNANET_FILES
        .iter()
        .filter_map(|name| Some((*name, std::fs::read(dir.join(name)).ok()?)))
        .collect()
}

/// Adopts the unchecked rows of `dir` and checks that afterwards validate is clean, every row reads
/// the same on both sides, and none of DNANet's files changed.
fn adopt_and_check(dir: &Path, peer: &Dnanet, want: &[Row], adopted: u64, step: &str) {
    let before = dnanet_files(dir);
    let adoption = append(dir).adopt().unwrap();
    assert_eq!(adoption.samples, adopted, "{step}");
    assert!(adoption.files.contains(&dir.join("data.bin")), "{step}: {adoption:?}");
    assert_eq!(dnanet_files(dir), before, "{step}: adopt changed a file DNANet wrote");
    check_unchecked(dir, &[], "", step);
    check_stowage(dir, want, step);
    peer.check_rows(dir, want, step);
    assert!(append(dir).adopt().unwrap().is_empty(), "{step}: a second adopt has nothing to do");
}

// -- the tests ------------------------------------------------------------------------------------

/// Reference set `mixed/dnanet-resume`: stowage wrote 4 rows, DNANet's real writer resumed the
/// cache, added 2 and finalized it. stowage reads all 6 exactly, reports DNANet's 2 as unchecked
/// (not as damage), adopts them on a copy, and changes none of DNANet's files doing so.
#[test]
fn reference_dnanet_resume_reads_every_row_and_adopts_dnanets() {
    let Some(set) = reference_set("mixed/dnanet-resume") else { return };
    let manifest: Json =
        serde_json::from_slice(&std::fs::read(set.join("manifest.json")).unwrap()).unwrap();
    let original = set.join(manifest["cache_path"].as_str().unwrap());
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join(manifest["cache_key"].as_str().unwrap());
    copy_tree(&original, &dir).unwrap();
    let before = dnanet_files(&dir);
    assert_eq!(before.len(), 9, "the set's DNANet files");

    let mut keys: Vec<(&str, &Json)> =
        manifest["keys"].as_object().unwrap().iter().map(|(k, v)| (k.as_str(), v)).collect();
    keys.sort_by_key(|(_, entry)| entry["row"].as_u64().unwrap());
    let check = |cache: &MemmapBackend, step: &str| {
        let paths: Vec<&str> = keys.iter().map(|(k, _)| *k).collect();
        assert_eq!(cache.keys().unwrap(), paths, "{step}");
        for (i, (key, entry)) in keys.iter().enumerate() {
            let got = cache.get(key).unwrap().unwrap();
            let fields = &entry["fields"];
            for field in ["data", "annotation", "scaler"] {
                let want =
                    expected_npy(&set.join(fields[field]["expected_file"].as_str().unwrap()));
                if field == "annotation" && entry["has_annotation"] == false {
                    assert_eq!(got.get(field), Some(&Value::Null), "{step}: {key} annotation");
                    assert!(want.bytes().iter().all(|b| *b == 0), "the stored placeholder");
                } else {
                    assert_eq!(got.tensor(field), Some(&want), "{step}: {key} {field}");
                }
            }
            for field in ["panel", "allele", "meta_json"] {
                let want = match &fields[field]["json"] {
                    Json::Null => Value::Null,
                    text => Value::Json(text.as_str().unwrap().to_owned()),
                };
                assert_eq!(got.get(field), Some(&want), "{step}: {key} {field}");
            }
            assert_eq!(cache.get_row(i as i64).unwrap(), got, "{step}: row {i}");
        }
        let nulls: Vec<usize> = (0..keys.len())
            .filter(|&i| cache.get_row(i as i64).unwrap().get("annotation") == Some(&Value::Null))
            .collect();
        assert_eq!(nulls, [2, 5], "{step}: rows without annotation");
    };

    check(&read_only(&original), "the set");
    let report = check_unchecked(&dir, &[4, 5], "4-5", "the copy");
    assert_eq!(report.unchecked[0].path, dir.join("index.parquet"));
    let unchecked_gets = read_only(&dir);
    check(&unchecked_gets, "the copy");
    drop(unchecked_gets);
    assert_eq!(dnanet_files(&dir), before, "open and validate changed a DNANet file");

    let adoption = append(&dir).adopt().unwrap();
    assert_eq!(adoption.samples, 2);
    assert_eq!(std::fs::metadata(dir.join("stowage_checksums.bin")).unwrap().len(), 6 * 56);
    assert_eq!(dnanet_files(&dir), before, "adopt changed a DNANet file");
    check_unchecked(&dir, &[], "", "after adopt");
    check(&read_only(&dir), "after adopt");
    assert!(append(&dir).adopt().unwrap().is_empty());
}

/// DNANet starts a cache, stowage resumes it and appends, DNANet resumes it, appends again and
/// finalizes; then stowage adopts DNANet's rows.
#[test]
fn dnanet_starts_stowage_resumes_dnanet_finalizes() {
    let Some(peer) = Dnanet::find("dnanet_starts_stowage_resumes_dnanet_finalizes") else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("0123456789abcdef");
    let mut want: Vec<Row> = (0..3).map(|i| row(i, "dnanet")).collect();

    let reply = peer.write(&dir, &want, None);
    assert_eq!(reply["recovered_rows"], 0);
    peer.check_rows(&dir, &want, "1. DNANet wrote 3 rows");
    check_stowage(&dir, &want, "1. DNANet wrote 3 rows");
    check_unchecked(&dir, &[0, 1, 2], "0-2", "DNANet alone");

    let mut cache = append(&dir);
    let keys: Vec<&str> = want.iter().map(|r| r.path.as_str()).collect();
    assert_eq!(cache.keys().unwrap(), keys, "stowage resumes DNANet's rows");
    for i in 3..6 {
        let r = row(i, "stowage");
        cache.put(&r.path, &r.sample()).unwrap();
        want.push(r);
    }
    cache.flush().unwrap();
    drop(cache);
    check_stowage(&dir, &want, "2. stowage appended 3");
    peer.check_rows(&dir, &want, "2. stowage appended 3");
    check_unchecked(&dir, &[0, 1, 2], "0-2", "2. stowage appended 3");

    let more: Vec<Row> = (6..9).map(|i| row(i, "dnanet")).collect();
    let (config, _) = fingerprint_inputs(&want);
    want.extend(more.iter().cloned());
    let (_, sources) = fingerprint_inputs(&want);
    let finalize = json!({"config": config, "sources": sources});
    let reply = peer.write(&dir, &more, Some(&finalize));
    let mut resumed: Vec<&str> = want[..6].iter().map(|r| r.path.as_str()).collect();
    resumed.sort_unstable();
    assert_eq!(reply["resume_paths"], json!(resumed), "DNANet resumes stowage's rows too");
    assert_eq!(reply["recovered_rows"], 6);
    peer.check_rows(&dir, &want, "3. DNANet appended 3 and finalized");
    assert!(peer.fingerprint_is_valid(&dir, &config, &sources));
    check_stowage(&dir, &want, "3. DNANet appended 3 and finalized");
    check_unchecked(&dir, &[0, 1, 2, 6, 7, 8], "0-2, 6-8", "3. DNANet finalized");

    adopt_and_check(&dir, &peer, &want, 6, "4. stowage adopted");
    assert!(peer.fingerprint_is_valid(&dir, &config, &sources));
}

/// stowage starts a cache, DNANet resumes it and appends, stowage resumes it, appends and
/// finalizes (with DNANet's fingerprint inputs); then stowage adopts DNANet's rows.
#[test]
fn stowage_starts_dnanet_resumes_stowage_finalizes() {
    let Some(peer) = Dnanet::find("stowage_starts_dnanet_resumes_stowage_finalizes") else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("fedcba9876543210");
    let mut want: Vec<Row> = (0..4).map(|i| row(i, "stowage")).collect();

    let mut cache = MemmapBackend::create(&dir, &dnanet(D, L), MemmapOptions::default()).unwrap();
    for r in &want {
        cache.put(&r.path, &r.sample()).unwrap();
    }
    cache.flush().unwrap();
    drop(cache);
    check_stowage(&dir, &want, "1. stowage wrote 4 rows");
    peer.check_rows(&dir, &want, "1. stowage wrote 4 rows");

    let more: Vec<Row> = (4..6).map(|i| row(i, "dnanet")).collect();
    let reply = peer.write(&dir, &more, None);
    let mut resumed: Vec<&str> = want.iter().map(|r| r.path.as_str()).collect();
    resumed.sort_unstable();
    assert_eq!(reply["resume_paths"], json!(resumed));
    want.extend(more);
    peer.check_rows(&dir, &want, "2. DNANet appended 2");
    check_stowage(&dir, &want, "2. DNANet appended 2");
    // DNANet's recovery rewrote stowage's lines byte for byte: they are still stowage's.
    check_unchecked(&dir, &[4, 5], "4-5", "2. DNANet appended 2");

    let mut cache = append(&dir);
    let keys: Vec<&str> = want.iter().map(|r| r.path.as_str()).collect();
    assert_eq!(cache.keys().unwrap(), keys, "stowage resumes DNANet's rows");
    for i in 6..9 {
        let r = row(i, "stowage");
        cache.put(&r.path, &r.sample()).unwrap();
        want.push(r);
    }
    let (config, sources) = fingerprint_inputs(&want);
    let stamps =
        sources.iter().map(|path| SourceStamp::from_metadata(path).unwrap()).collect::<Vec<_>>();
    cache.finalize_with_fingerprint(config.clone(), stamps).unwrap();
    drop(cache);
    assert!(!dir.join("manifest.jsonl").exists(), "finalize removes the manifest, as DNANet's");
    peer.check_rows(&dir, &want, "3. stowage appended 3 and finalized");
    assert!(peer.fingerprint_is_valid(&dir, &config, &sources));
    check_stowage(&dir, &want, "3. stowage appended 3 and finalized");
    check_unchecked(&dir, &[4, 5], "4-5", "3. stowage finalized");

    adopt_and_check(&dir, &peer, &want, 2, "4. stowage adopted");
}

/// stowage crashed in a flush after its checksum rows were durable but before its manifest lines
/// were; DNANet (not stowage) resumed and wrote other rows where stowage's uncommitted ones were.
/// The leftover checksum rows vouch for nothing: DNANet's rows read as unchecked, not as damage,
/// and stowage's next resume replaces them.
#[test]
fn a_crashed_stowage_flush_under_a_dnanet_resume_is_not_damage() {
    let Some(peer) = Dnanet::find("a_crashed_stowage_flush_under_a_dnanet_resume_is_not_damage")
    else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("c");
    let mut want: Vec<Row> = (0..2).map(|i| row(i, "stowage")).collect();
    let mut cache = MemmapBackend::create(&dir, &dnanet(D, L), MemmapOptions::default()).unwrap();
    for r in &want {
        cache.put(&r.path, &r.sample()).unwrap();
    }
    cache.flush().unwrap();
    drop(cache);
    // What the crash left: the checksum row and the bytes of row 2, no manifest line.
    let lost = row(2, "lost");
    let other = tempfile::tempdir().unwrap();
    let mut scratch =
        MemmapBackend::create(other.path(), &dnanet(D, L), MemmapOptions::default()).unwrap();
    scratch.put(&lost.path, &lost.sample()).unwrap();
    scratch.flush().unwrap();
    drop(scratch);
    for file in ["stowage_checksums.bin", "data.bin", "annotation.bin", "scaler.bin"] {
        let tail = std::fs::read(other.path().join(file)).unwrap();
        let mut bytes = std::fs::read(dir.join(file)).unwrap();
        bytes.extend_from_slice(&tail);
        std::fs::write(dir.join(file), bytes).unwrap();
    }
    check_stowage(&dir, &want, "1. the crashed flush is not served");

    let more: Vec<Row> = (2..4).map(|i| row(i, "dnanet")).collect();
    peer.write(&dir, &more, None);
    want.extend(more);
    peer.check_rows(&dir, &want, "2. DNANet resumed");
    check_stowage(&dir, &want, "2. DNANet resumed");
    check_unchecked(&dir, &[2, 3], "2-3", "2. DNANet resumed over the leftover");

    let mut cache = append(&dir);
    let r = row(4, "stowage");
    cache.put(&r.path, &r.sample()).unwrap();
    want.push(r);
    cache.finalize().unwrap();
    drop(cache);
    check_stowage(&dir, &want, "3. stowage resumed and finalized");
    peer.check_rows(&dir, &want, "3. stowage resumed and finalized");
    check_unchecked(&dir, &[2, 3], "2-3", "3. stowage finalized");
    adopt_and_check(&dir, &peer, &want, 2, "4. stowage adopted");
}

/// In one cache holding stowage's and DNANet's rows: DNANet's rows are unchecked, while damage to
/// stowage's checksums stays damage (a flipped checksum, a checksum file running past the rows),
/// and adopt refuses to cover it. A stowage-finalized cache whose checksum file lost rows is
/// damage too, not rows another writer added.
#[test]
fn damage_is_told_apart_from_rows_dnanet_added() {
    let Some(peer) = Dnanet::find("damage_is_told_apart_from_rows_dnanet_added") else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let mixed = tmp.path().join("mixed");
    let mut want: Vec<Row> = (0..3).map(|i| row(i, "stowage")).collect();
    let mut cache = MemmapBackend::create(&mixed, &dnanet(D, L), MemmapOptions::default()).unwrap();
    for r in &want {
        cache.put(&r.path, &r.sample()).unwrap();
    }
    cache.flush().unwrap();
    drop(cache);
    let more: Vec<Row> = (3..5).map(|i| row(i, "dnanet")).collect();
    want.extend(more.iter().cloned());
    let (config, sources) = fingerprint_inputs(&want);
    peer.write(&mixed, &more, Some(&json!({"config": config, "sources": sources})));
    check_unchecked(&mixed, &[3, 4], "3-4", "DNANet finalized");
    let width = 8 * (dnanet(D, L).fields.len() + 1) as u64;

    // A flipped byte in stowage's checksum of row 1: that row is damage, DNANet's stay unchecked.
    let flipped = tmp.path().join("flipped");
    copy_tree(&mixed, &flipped).unwrap();
    stowage_conformance::corrupt::flip_byte(&flipped.join("stowage_checksums.bin"), width + 12)
        .unwrap();
    let reader = read_only(&flipped);
    let err = reader.get(&want[1].path).unwrap_err();
    assert!(matches!(err, Error::Corrupted { .. }) && err.to_string().contains("row 1"), "{err}");
    assert_eq!(reader.get(&want[3].path).unwrap().unwrap(), want[3].sample(), "DNANet's row");
    let report = reader.validate(ValidationLevel::Full).unwrap();
    assert_eq!(report.problems.len(), 1, "{:?}", report.problems);
    assert_eq!(report.problems[0].key.as_deref(), Some(want[1].path.as_str()));
    assert_eq!(report.unchecked.len(), 1);
    assert_eq!(report.unchecked[0].samples, 2);
    drop(reader);
    let adopted = append(&flipped).adopt().unwrap();
    assert_eq!(adopted.samples, 2, "DNANet's rows are adopted; stowage's damaged row is kept");
    let report = read_only(&flipped).validate(ValidationLevel::Full).unwrap();
    assert_eq!(report.problems.len(), 1, "the damage is still reported: {:?}", report.problems);
    assert!(report.unchecked.is_empty());

    // A checksum file longer than the rows of a cache DNANet finalized: damage; adopt refuses.
    let longer = tmp.path().join("longer");
    copy_tree(&mixed, &longer).unwrap();
    let checksums = longer.join("stowage_checksums.bin");
    let mut bytes = std::fs::read(&checksums).unwrap();
    bytes.extend(std::iter::repeat_n(0x5a, 6 * width as usize));
    std::fs::write(&checksums, bytes).unwrap();
    let allowed = MemmapOptions { allow_trailing_bytes: true, ..MemmapOptions::default() };
    assert!(matches!(
        MemmapBackend::open_read_only(&longer, MemmapOptions::default()),
        Err(Error::Corrupted { .. })
    ));
    let report = MemmapBackend::open_read_only(&longer, allowed.clone())
        .unwrap()
        .validate(ValidationLevel::Full)
        .unwrap();
    assert!(
        report.problems.iter().any(|p| p.path.as_deref() == Some(checksums.as_path())
            && p.detail.contains("longer than the 5 rows")),
        "{:?}",
        report.problems
    );
    let err = MemmapBackend::open_append(&longer, allowed).unwrap().adopt().unwrap_err();
    assert!(matches!(err, Error::Corrupted { .. }) && err.to_string().contains("adopt refused"));

    // stowage finalized a cache, and its checksum file lost its last row: damage, not unchecked.
    let own = tmp.path().join("own");
    let mut cache = MemmapBackend::create(&own, &dnanet(D, L), MemmapOptions::default()).unwrap();
    for r in &want {
        cache.put(&r.path, &r.sample()).unwrap();
    }
    cache.finalize().unwrap();
    drop(cache);
    let checksums = own.join("stowage_checksums.bin");
    std::fs::OpenOptions::new().write(true).open(&checksums).unwrap().set_len(4 * width).unwrap();
    let reader = read_only(&own);
    let err = reader.get(&want[4].path).unwrap_err();
    assert!(err.to_string().contains("stowage finalized this cache"), "{err}");
    assert_eq!(reader.get(&want[3].path).unwrap().unwrap(), want[3].sample());
    let report = reader.validate(ValidationLevel::Full).unwrap();
    assert!(report.unchecked.is_empty(), "{:?}", report.unchecked);
    assert_eq!(report.problems.len(), 2, "the file and row 4: {:?}", report.problems);
    drop(reader);
    assert!(append(&own).adopt().is_err(), "adopt never covers damage");
    assert_eq!(std::fs::metadata(&checksums).unwrap().len(), 4 * width, "nothing changed");

    // An unfinished stowage cache whose checksum file lost a row stowage committed: damage, and
    // the writer does not resume over it.
    let unfinished = tmp.path().join("unfinished");
    let mut cache =
        MemmapBackend::create(&unfinished, &dnanet(D, L), MemmapOptions::default()).unwrap();
    for r in &want[..3] {
        cache.put(&r.path, &r.sample()).unwrap();
    }
    cache.flush().unwrap();
    drop(cache);
    let checksums = unfinished.join("stowage_checksums.bin");
    std::fs::OpenOptions::new().write(true).open(&checksums).unwrap().set_len(2 * width).unwrap();
    let report = read_only(&unfinished).validate(ValidationLevel::Full).unwrap();
    assert!(report.unchecked.is_empty(), "{:?}", report.unchecked);
    assert_eq!(report.problems.len(), 1, "{:?}", report.problems);
    assert!(report.problems[0].detail.contains("stowage's writer committed it"));
    let err = MemmapBackend::open_append(&unfinished, MemmapOptions::default()).err().unwrap();
    assert!(matches!(err, Error::Corrupted { .. }), "{err}");
    assert_eq!(std::fs::metadata(&checksums).unwrap().len(), 2 * width, "nothing changed");
}

/// A memmap cache converted from a DNANet cache by stowage carries DNANet's `fingerprint.json`
/// byte for byte (through the factory, as `stowage convert` creates and finalizes it), so DNANet's
/// own `validate_fingerprint` accepts the copy as it accepts the source; a copy finalized with
/// stowage's default fingerprint is rejected.
#[test]
fn a_converted_copy_carries_dnanets_fingerprint() {
    let Some(peer) = Dnanet::find("a_converted_copy_carries_dnanets_fingerprint") else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let source = tmp.path().join("source");
    let want: Vec<Row> = (0..4).map(|i| row(i, "dnanet")).collect();
    // Real source files, so that the stamps hold an mtime and a size.
    let sources: Vec<String> = (0..4)
        .map(|i| {
            let path = tmp.path().join(format!("run{i}.hid"));
            std::fs::write(&path, vec![i as u8; 10 + i]).unwrap();
            path.to_str().unwrap().to_owned()
        })
        .collect();
    let config = json!({"cache_version": 5, "root": tmp.path(), "scaling": {"resolution": 1e-05}});
    peer.write(&source, &want, Some(&json!({"config": config, "sources": sources})));
    assert!(peer.fingerprint_is_valid(&source, &config, &sources));

    let convert = |target: &Path, carry: Option<CarriedFingerprint>| {
        let reader = read_only(&source);
        let options = MemmapOptions { carry_fingerprint: carry, ..MemmapOptions::default() };
        let factory = MemmapFactory { options };
        let mut copy = factory.create(target, reader.schema()).unwrap();
        for key in reader.keys().unwrap() {
            copy.put(&key, &reader.get(&key).unwrap().unwrap()).unwrap();
        }
        copy.finalize().unwrap();
    };
    let carried = CarriedFingerprint::read(&source).unwrap().unwrap();
    assert_eq!(carried.fingerprint().config, config);
    let copy = tmp.path().join("copy");
    convert(&copy, Some(carried));
    let read = |dir: &Path| std::fs::read(dir.join("fingerprint.json")).unwrap();
    assert_eq!(read(&copy), read(&source), "carried byte for byte");
    assert!(peer.fingerprint_is_valid(&copy, &config, &sources), "DNANet accepts the copy");
    peer.check_rows(&copy, &want, "the converted copy");
    check_unchecked(&copy, &[], "", "the converted copy");
    let reopened = MemmapFactory::default().open(&copy, OpenMode::ReadOnly).unwrap();
    assert!(reopened.is_finalized());

    let plain = tmp.path().join("plain");
    convert(&plain, None);
    assert!(!peer.fingerprint_is_valid(&plain, &config, &sources), "the default is rejected");
}

/// Caches DNANet wrote alone (reference set `dnanet-memmap`) have no stowage checksums: every
/// row is reported unchecked; `adopt` gives them `stowage.json` and a checksum per row, changing none of
/// DNANet's files. A crash between those two files leaves every row unchecked, never damaged, and
/// the next adopt (or resume) completes it.
#[test]
fn caches_dnanet_wrote_alone_get_stowages_checksums() {
    let Some(set) = reference_set("dnanet-memmap") else { return };
    let tmp = tempfile::tempdir().unwrap();
    for key in ["aed9b48500e9acfd", "ff9cde909fae61f6"] {
        let dir = tmp.path().join(key);
        copy_tree(&set.join("cache_root").join(key), &dir).unwrap();
        let before = dnanet_files(&dir);
        let reader = read_only(&dir);
        let rows: Vec<Sample> =
            (0..reader.len() as i64).map(|i| reader.get_row(i).unwrap()).collect();
        let alone = reader.validate(ValidationLevel::Full).unwrap();
        assert!(alone.is_undamaged() && !alone.is_clean(), "{key}: DNANet alone: {alone:?}");
        assert_eq!(alone.unchecked[0].samples, rows.len() as u64, "{key}: DNANet alone");
        drop(reader);
        let adoption = append(&dir).adopt().unwrap();
        assert_eq!(adoption.samples, rows.len() as u64, "{key}");
        assert!(dir.join("stowage.json").exists(), "{key}");
        assert_eq!(dnanet_files(&dir), before, "{key}: adopt changed a DNANet file");
        let reader = read_only(&dir);
        assert_eq!(reader.schema(), &dnanet(3, 32));
        assert!(reader.validate(ValidationLevel::Full).unwrap().is_clean(), "{key}");
        for (i, row) in rows.iter().enumerate() {
            assert_eq!(&reader.get_row(i as i64).unwrap(), row, "{key} row {i}");
        }
        drop(reader);
        // The crash window: stowage.json written, the checksum file not yet.
        std::fs::remove_file(dir.join("stowage_checksums.bin")).unwrap();
        let report = read_only(&dir).validate(ValidationLevel::Full).unwrap();
        assert!(report.is_undamaged(), "{key}: {:?}", report.problems);
        assert_eq!(report.unchecked[0].samples, rows.len() as u64, "{key}");
        assert_eq!(append(&dir).adopt().unwrap().samples, rows.len() as u64, "{key}");
        assert!(read_only(&dir).validate(ValidationLevel::Full).unwrap().is_clean(), "{key}");
    }

    // An unfinished cache DNANet started: stowage's resume adds its files, a crash between them
    // is completed by the next resume, and DNANet's rows stay unchecked until adopted.
    let dir = tmp.path().join("d3c3787192a40966");
    copy_tree(&set.join("cache_root").join("d3c3787192a40966"), &dir).unwrap();
    let reader = read_only(&dir);
    let mut rows: Vec<Sample> = (0..4).map(|i| reader.get_row(i).unwrap()).collect();
    let mut keys = reader.keys().unwrap();
    drop(reader);
    drop(append(&dir));
    assert!(dir.join("stowage.json").exists());
    assert_eq!(std::fs::metadata(dir.join("stowage_checksums.bin")).unwrap().len(), 4 * 56);
    std::fs::remove_file(dir.join("stowage_checksums.bin")).unwrap();
    let report = read_only(&dir).validate(ValidationLevel::Full).unwrap();
    assert!(report.is_undamaged(), "{:?}", report.problems);
    assert_eq!(report.unchecked[0].samples, 4);
    assert_eq!(report.unchecked[0].path, dir.join("manifest.jsonl"));
    let mut cache = append(&dir);
    let mut extra = rows[1].clone();
    extra.insert("meta_json", Value::Json("{\"by\": \"stowage\"}".into()));
    cache.put("/stowage/extra.hid", &extra).unwrap();
    cache.finalize().unwrap();
    drop(cache);
    rows.push(extra);
    keys.push("/stowage/extra.hid".into());
    let reader = read_only(&dir);
    assert_eq!(reader.keys().unwrap(), keys);
    for (i, row) in rows.iter().enumerate() {
        assert_eq!(&reader.get_row(i as i64).unwrap(), row, "row {i}");
    }
    let report = reader.validate(ValidationLevel::Full).unwrap();
    assert!(report.is_undamaged() && report.unchecked[0].samples == 4, "{report:?}");
    drop(reader);
    assert_eq!(append(&dir).adopt().unwrap().samples, 4);
    assert!(read_only(&dir).validate(ValidationLevel::Full).unwrap().is_clean());
}

/// A cache stowage finalized that lost `stowage_checksums.bin` is damaged, not DNANet's: every
/// row is refused by `get` and reported by `validate`, by key for the first 100 rows and summed
/// up after; adopt refuses it, and a read-only handle cannot adopt at all.
#[test]
fn a_lost_checksum_file_is_damage_listed_by_key_up_to_a_limit() {
    use stowage_core::{DType, Schema, ShapeRule};
    let tmp = tempfile::tempdir().unwrap();
    let schema = Schema::new().tensor("x", DType::U8, ShapeRule::Fixed(vec![1]));
    let mut cache = MemmapBackend::create(tmp.path(), &schema, MemmapOptions::default()).unwrap();
    for i in 0..150u8 {
        cache
            .put(
                &format!("k{i}"),
                &Sample::new().with("x", Tensor::from_slice(&[1], &[i]).unwrap()),
            )
            .unwrap();
    }
    cache.finalize().unwrap();
    drop(cache);
    let mut reader = read_only(tmp.path());
    let err = reader.adopt().unwrap_err();
    assert!(matches!(err, Error::Unsupported { backend: "memmap", .. }), "{err}");
    drop(reader);
    std::fs::remove_file(tmp.path().join("stowage_checksums.bin")).unwrap();
    let reader = read_only(tmp.path());
    let err = reader.get("k7").unwrap_err();
    assert!(matches!(err, Error::Corrupted { .. }) && err.to_string().contains("k7"), "{err}");
    let report = reader.validate(ValidationLevel::Structure).unwrap();
    assert!(report.unchecked.is_empty(), "{:?}", report.unchecked);
    let keyed = report.problems.iter().filter(|p| p.key.is_some()).count();
    assert_eq!(keyed, 100, "{:?}", report.problems.last());
    let rest: Vec<_> = report.problems.iter().filter(|p| p.key.is_none()).collect();
    assert_eq!(rest.len(), 2, "the file, and the 50 more rows: {rest:?}");
    assert!(rest.iter().any(|p| p.detail.contains("file is missing")), "{rest:?}");
    assert!(rest.iter().any(|p| p.detail.contains("50 more rows") && p.detail.contains("0-149")));
    drop(reader);
    let err = append(tmp.path()).adopt().unwrap_err();
    assert!(matches!(err, Error::Corrupted { .. }), "{err}");
    assert!(!tmp.path().join("stowage_checksums.bin").exists(), "adopt wrote nothing");
}

/// An expected `.npy` file as a tensor.
fn expected_npy(path: &Path) -> Tensor {
    let bytes = std::fs::read(path).unwrap();
    let header = stowage_core::npy_header::parse(&bytes).unwrap();
    assert!(!header.fortran_order);
    Tensor::new(header.dtype, header.shape, bytes[header.data_offset..].to_vec()).unwrap()
}
