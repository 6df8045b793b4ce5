//! stowage and the real hangar 0.5.2 write the same cache in turn, and neither loses a byte.
//!
//! hangar writes into a stowage cache (unfinished, and finalized), stowage resumes, appends and
//! finalizes, hangar writes again. After every step:
//! - stowage reads every key it wrote, and every record hangar returned (`read_record`);
//! - hangar reads every record, stowage's (from `NpyBackend::record`) and its own, through its
//!   own NUMPY_10 backend in a writer checkout (mode `'a'`: staged and committed files) and a
//!   reader checkout (mode `'r'`: committed files only, so stowage's records once stowage
//!   finalized, never hangar's own staged ones);
//! - `validate` reports each of hangar's files as unchecked, and no problem;
//! - hangar's data files and markers are byte-identical to what hangar left, and stowage's uids
//!   differ from hangar's.
//!
//! hangar runs through `xtask/py/hangar_peer.py` in the Python named by `STOWAGE_HANGAR_PYTHON`
//! (a venv with `hangar==0.5.2` and `numpy<1.24`, which `cargo xtask test` provides). Without
//! it the tests print SKIPPED to stderr, or fail when `STOWAGE_REQUIRE_PYTHON=1`.

#[path = "common/mixed.rs"]
mod mixed;

use mixed::{Expected, assert_unchanged, snapshot, uids_in};
use serde_json::{Value, json};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use stowage_core::{
    Backend, DType, Error, Reader, Sample, Schema, ShapeRule, Tensor, ValidationLevel,
};
use stowage_npy::Numpy10Record;
use stowage_npy::{NpyBackend, NpyOptions};
use stowage_test_support::python::{REQUIRE_PYTHON_ENV, run_script};

/// Environment variable naming the Python interpreter of a venv with hangar 0.5.2.
const HANGAR_PYTHON_ENV: &str = "STOWAGE_HANGAR_PYTHON";

/// Small collections, so stowage rotates files; hangar keeps its default of 1000 slots.
const OPTIONS: NpyOptions = NpyOptions {
    collection_size: 4,
    verify_checksums: true,
    cold_read_advice: stowage_core::cold_reads::ColdReadAdvice::Adaptive,
    // Fewer files mapped than the caches have: reads close and reopen them.
    max_open_files: 8,
};

/// The real hangar, driven through its peer script.
struct Hangar {
    python: String,
    peer: String,
}

impl Hangar {
    /// The venv's Python with hangar 0.5.2, or `None` after a visible SKIPPED line.
    fn find(test: &str) -> Option<Hangar> {
        let python = match std::env::var(HANGAR_PYTHON_ENV) {
            Ok(python) if !python.is_empty() => python,
            _ => {
                let what = format!("{HANGAR_PYTHON_ENV} (the Python of a venv with hangar 0.5.2)");
                if std::env::var(REQUIRE_PYTHON_ENV).is_ok_and(|v| v == "1") {
                    panic!("{test}: {what} is required ({REQUIRE_PYTHON_ENV}=1) but not set");
                }
                let reason = format!("{what} not set (set {REQUIRE_PYTHON_ENV}=1 to fail)");
                stowage_core::skip::report_skip("prerequisite", &reason);
                return None;
            }
        };
        let peer = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../xtask/py/hangar_peer.py");
        let peer =
            std::fs::read_to_string(&peer).unwrap_or_else(|e| panic!("{}: {e}", peer.display()));
        let hangar = Hangar { python, peer };
        let versions = hangar.call("version", &json!({}));
        assert_eq!(versions["hangar"], "0.5.2", "{HANGAR_PYTHON_ENV}: {versions}");
        Some(hangar)
    }

    fn call(&self, command: &str, request: &Value) -> Value {
        let stdin = serde_json::to_vec(request).unwrap();
        let what = format!("hangar_peer.py {command}");
        let out = run_script(&self.python, &self.peer, &[command], &stdin, &what);
        serde_json::from_str(&out).unwrap_or_else(|e| panic!("{what}: {e}: {out}"))
    }

    /// hangar's `write_data` for each tensor, in one writer session; the records it returned.
    fn write(&self, repo: &Path, tensors: &[Tensor]) -> Vec<String> {
        let arrays: Vec<Value> =
            tensors.iter().map(|t| json!({"shape": t.shape(), "hex": hex(t.bytes())})).collect();
        let request = json!({
            "repo": repo, "schema_shape": [3, 4], "schema_dtype": "<f4", "arrays": arrays,
        });
        let answer = self.call("write", &request);
        answer["records"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r.as_str().unwrap().to_owned())
            .collect()
    }

    /// hangar's `read_data` of each record in modes `'a'` and `'r'`.
    fn read(&self, repo: &Path, records: &[String]) -> Value {
        let request = json!({
            "repo": repo, "schema_shape": [3, 4], "schema_dtype": "<f4", "modes": ["a", "r"],
            "records": records,
        });
        self.call("read", &request)["results"].clone()
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn schema() -> Schema {
    Schema::new().tensor("x", DType::F32, ShapeRule::Max(vec![3, 4]))
}

/// Sample `i`: shape (1..=3, 4), values that differ per sample (negative zero included).
fn tensor(i: usize) -> Tensor {
    let rows = 1 + i % 3;
    let values: Vec<f32> =
        (0..rows * 4).map(|v| if v == 1 { -0.0 } else { (i * 100 + v) as f32 / 7.0 }).collect();
    Tensor::from_slice(&[rows, 4], &values).unwrap()
}

/// What both writers have written so far, and what must hold after every step.
struct Mixed {
    hangar: Hangar,
    dir: PathBuf,
    /// stowage's keys and their values.
    keys: BTreeMap<String, Expected>,
    /// hangar's records and their values.
    records: BTreeMap<String, Expected>,
    /// hangar's data files and markers, as hangar left them.
    hangar_files: BTreeMap<PathBuf, Vec<u8>>,
    next: usize,
}

impl Mixed {
    fn put(&mut self, cache: &mut NpyBackend, count: usize) {
        for _ in 0..count {
            let key = format!("stowage{}", self.next);
            let t = tensor(self.next);
            cache.put(&key, &Sample::new().with("x", t.clone())).unwrap();
            self.keys.insert(key, Expected::of(&t));
            self.next += 1;
        }
    }

    fn hangar_writes(&mut self, count: usize) {
        let tensors: Vec<Tensor> = (self.next..self.next + count).map(tensor).collect();
        self.next += count;
        let records = self.hangar.write(&self.dir, &tensors);
        assert_eq!(records.len(), count);
        let layout = stowage_npy::test_support::Layout::new(&self.dir);
        let mut new_files = Vec::new();
        for (record, t) in records.iter().zip(&tensors) {
            self.records.insert(record.clone(), Expected::of(t));
            let uid = Numpy10Record::parse(record).unwrap().uid;
            new_files.extend([layout.data_file(&uid), layout.stage_marker(&uid)]);
        }
        self.hangar_files.extend(snapshot(&new_files));
    }

    fn hangar_uids(&self) -> BTreeSet<String> {
        self.records.keys().map(|r| Numpy10Record::parse(r).unwrap().uid).collect()
    }

    /// Both read everything; validate reports hangar's files as unchecked; hangar's files are
    /// unchanged. `cache` is the handle stowage reads with (a writer's or a reader's).
    fn check(&self, cache: &NpyBackend, step: &str) {
        assert_unchanged(&self.hangar_files, step);
        let mut stowage_records = BTreeMap::new();
        for (key, want) in &self.keys {
            let got = cache.get(key).unwrap().unwrap_or_else(|| panic!("{step}: {key} missing"));
            want.assert_read(got.tensor("x").unwrap(), &format!("{step}: stowage get {key}"));
            stowage_records.insert(cache.record(key, "x").unwrap().to_string(), want);
        }
        for (record, want) in &self.records {
            let got = cache
                .read_record("x", &Numpy10Record::parse(record).unwrap(), true)
                .unwrap_or_else(|e| panic!("{step}: stowage read_record {record}: {e}"));
            want.assert_read(&got, &format!("{step}: stowage read_record {record}"));
        }
        let stowage_uids: BTreeSet<String> =
            stowage_records.keys().map(|r| Numpy10Record::parse(r).unwrap().uid).collect();
        assert!(stowage_uids.is_disjoint(&self.hangar_uids()), "{step}: a uid was shared");

        let report = cache.validate(ValidationLevel::Full).unwrap();
        assert!(report.problems.is_empty(), "{step}: {:?}", report.problems);
        let unchecked: BTreeSet<PathBuf> =
            report.unchecked.iter().map(|u| u.path.clone()).collect();
        let layout = cache.layout();
        let want: BTreeSet<PathBuf> =
            self.hangar_uids().iter().map(|u| layout.data_file(u)).collect();
        assert_eq!(unchecked, want, "{step}: hangar's files, and only they, are unchecked");
        assert!(report.unchecked.iter().all(|u| u.writer == "hangar"), "{step}");
        assert_eq!(report.is_clean(), want.is_empty(), "{step}");

        let all: Vec<String> = stowage_records.keys().chain(self.records.keys()).cloned().collect();
        let results = self.hangar.read(&self.dir, &all);
        let committed =
            |record: &str| layout.store_marker(&Numpy10Record::parse(record).unwrap().uid).exists();
        for (mode, sees) in [("a", &(|_: &str| true) as &dyn Fn(&str) -> bool), ("r", &committed)] {
            for result in results[mode].as_array().unwrap() {
                let record = result["record"].as_str().unwrap();
                let want = stowage_records.get(record).copied().or(self.records.get(record));
                let want = want.unwrap();
                let what = format!("{step}: hangar mode '{mode}' read_data {record}");
                if !sees(record) {
                    // hangar's own reader checkout: an uncommitted file is not in the repository.
                    assert_eq!(result["ok"], false, "{what}: {result}");
                    let uid = Numpy10Record::parse(record).unwrap().uid;
                    assert_eq!(result["error"], format!("KeyError: '{uid}'"), "{what}");
                    continue;
                }
                assert_eq!(result["ok"], true, "{what}: {result}");
                assert_eq!(result["dtype"], "<f4", "{what}");
                assert_eq!(result["shape"], json!(want.shape), "{what}");
                assert_eq!(result["hex"], hex(&want.bytes), "{what}");
            }
        }
    }

    fn check_reopened(&self, step: &str) {
        let reader = NpyBackend::open_read_only(&self.dir, OPTIONS).unwrap();
        self.check(&reader, step);
    }
}

fn start(hangar: Hangar) -> (Mixed, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let mixed = Mixed {
        hangar,
        dir: dir.path().to_path_buf(),
        keys: BTreeMap::new(),
        records: BTreeMap::new(),
        hangar_files: BTreeMap::new(),
        next: 0,
    };
    (mixed, dir)
}

#[test]
fn hangar_writes_into_an_unfinished_cache_that_stowage_resumes_and_finalizes() {
    let Some(hangar) = Hangar::find("hangar_writes_into_an_unfinished_cache") else { return };
    let (mut m, _dir) = start(hangar);
    let mut cache = NpyBackend::create(&m.dir, &schema(), OPTIONS).unwrap();
    m.put(&mut cache, 5);
    cache.flush().unwrap();
    drop(cache);
    m.check_reopened("stowage wrote 5 keys (unfinished)");

    m.hangar_writes(3);
    m.check_reopened("hangar wrote 3 samples");

    let mut cache = NpyBackend::open_append(&m.dir, OPTIONS).unwrap();
    m.check(&cache, "stowage resumed");
    m.put(&mut cache, 6);
    cache.flush().unwrap();
    m.check(&cache, "stowage appended 6 keys");
    cache.finalize().unwrap();
    m.check(&cache, "stowage finalized");
    drop(cache);
    let layout = stowage_npy::test_support::Layout::new(&m.dir);
    let staged: BTreeSet<String> = uids_in(&layout.stage_dir()).into_iter().collect();
    assert_eq!(staged, m.hangar_uids(), "only hangar's files stay staged");

    m.hangar_writes(2);
    m.check_reopened("hangar wrote 2 more samples");
    let mut cache = NpyBackend::open_append(&m.dir, OPTIONS).unwrap();
    let err = cache.put("late", &Sample::new().with("x", tensor(0))).unwrap_err();
    assert!(matches!(err, Error::Finalized { .. }), "{err}");
    cache.finalize().unwrap();
    drop(cache);
    m.check_reopened("a stowage writer reopened the finalized cache");
    assert_eq!(m.hangar_uids().len(), 2, "each hangar session made one file");
}

#[test]
fn hangar_writes_into_a_finalized_cache_and_again_after_stowage_reopens_it() {
    let Some(hangar) = Hangar::find("hangar_writes_into_a_finalized_cache") else { return };
    let (mut m, _dir) = start(hangar);
    let mut cache = NpyBackend::create(&m.dir, &schema(), OPTIONS).unwrap();
    m.put(&mut cache, 6);
    cache.finalize().unwrap();
    drop(cache);
    m.check_reopened("stowage wrote 6 keys and finalized");

    m.hangar_writes(3);
    m.check_reopened("hangar wrote 3 samples");

    let mut cache = NpyBackend::open_append(&m.dir, OPTIONS).unwrap();
    let err = cache.put("late", &Sample::new().with("x", tensor(0))).unwrap_err();
    assert!(matches!(err, Error::Finalized { .. }), "{err}");
    cache.finalize().unwrap();
    m.check(&cache, "a stowage writer reopened the finalized cache");
    drop(cache);

    m.hangar_writes(3);
    m.check_reopened("hangar wrote 3 more samples");
}
