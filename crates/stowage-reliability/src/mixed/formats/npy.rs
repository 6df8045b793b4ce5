//! stowage-npy and hangar 0.5.2 itself (`hangar_peer.py` drives its NUMPY_10 backend): float32
//! samples of up to `(3, 4)` in a stowage cache that hangar writes collection files into.
//! hangar's samples have no keys in the cache: they are named by the records hangar returns.

use super::{Fallible, Format, MixedWriter, ToolWrite, View, hex, no_problems, value_rng};
use crate::mixed::ledger::{Key, Ledger, Protected, Writer, Written};
use crate::mixed::pair::Pair;
use crate::mixed::peer::ToolPeer;
use rand::Rng;
use serde_json::{Value as Json, json};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use stowage_core::ValidationLevel;
use stowage_core::{Backend, DType, Error, Reader, Result, Sample, Schema, ShapeRule, Tensor};
use stowage_npy::test_support::Layout;
use stowage_npy::{NpyBackend, NpyOptions, Numpy10Record};

/// The npy+hangar pair.
#[derive(Debug, Clone, Copy)]
pub struct NpyHangar;

/// Collections of 4 slots, so that stowage's puts span several files; hangar keeps its 1000.
const OPTIONS: NpyOptions = NpyOptions {
    collection_size: 4,
    verify_checksums: true,
    cold_read_advice: stowage_core::cold_reads::ColdReadAdvice::Adaptive,
    // Fewer files mapped than the caches have: reads close and reopen them.
    max_open_files: 4,
};

/// The one field, `x`.
const FIELD: &str = "x";

fn schema() -> Schema {
    Schema::new().tensor(FIELD, DType::F32, ShapeRule::Max(vec![3, 4]))
}

/// `key`'s tensor: float32 `(1..=3, 4)`.
fn tensor(key: Key, seed: u64) -> Tensor {
    let mut rng = value_rng(seed, key);
    let rows = rng.random_range(1..=3usize);
    let values: Vec<f32> = (0..rows * 4).map(|_| rng.random_range(-1e3f32..1e3)).collect();
    Tensor::from_slice(&[rows, 4], &values).expect("shape fits")
}

/// A tensor as hangar's `read_data` answer shows it.
fn tensor_view(tensor: &Tensor) -> Json {
    json!({"dtype": "<f4", "shape": tensor.shape(), "hex": hex(tensor.bytes())})
}

fn read_only(cache: &Path) -> Fallible<NpyBackend> {
    NpyBackend::open_read_only(cache, OPTIONS).map_err(|e| format!("stowage's read-only open: {e}"))
}

/// The value in one of hangar's `read_data` answers.
fn answered_value(result: &Json) -> Json {
    json!({"dtype": result["dtype"], "shape": result["shape"], "hex": result["hex"]})
}

/// The uid of a record hangar returned.
fn uid(record: &str) -> Fallible<String> {
    Numpy10Record::parse(record).map(|r| r.uid).map_err(|e| format!("record {record:?}: {e}"))
}

impl Format for NpyHangar {
    fn pair(&self) -> Pair {
        Pair::Npy
    }

    fn cache_in(&self, trial: &Path) -> PathBuf {
        trial.join("cache")
    }

    fn create(&self, cache: &Path, seed: u64) -> Result<Box<dyn MixedWriter>> {
        let backend = NpyBackend::create(cache, &schema(), OPTIONS)?;
        Ok(Box::new(NpyWriter { backend, seed }))
    }

    /// `NpyBackend::open_append`: resumes an unfinished cache, or opens a finalized one (whose
    /// puts are then `Finalized`).
    fn open_writer(&self, cache: &Path, seed: u64) -> Result<Box<dyn MixedWriter>> {
        let backend = NpyBackend::open_append(cache, OPTIONS)?;
        Ok(Box::new(NpyWriter { backend, seed }))
    }

    fn name(&self, key: Key) -> String {
        match key.writer() {
            Writer::Stowage => format!("s{}-{:04}", key.phase.number(), key.n),
            Writer::Tool => format!("hangar sample {} of phase {}", key.n, key.phase.number()),
        }
    }

    fn expected(&self, key: Key, seed: u64) -> Json {
        tensor_view(&tensor(key, seed))
    }

    /// `hangar_peer.py write`: hangar's `write_data` for each sample in one writer session,
    /// which creates a new collection file and its stage marker. Both stay as hangar made them,
    /// and the file is never committed by stowage (no `store_data` marker).
    fn tool_write(
        &self,
        tool: &ToolPeer,
        cache: &Path,
        keys: &[Key],
        seed: u64,
    ) -> Fallible<ToolWrite> {
        let arrays: Vec<Json> = keys
            .iter()
            .map(|k| {
                let t = tensor(*k, seed);
                json!({"shape": t.shape(), "hex": hex(t.bytes())})
            })
            .collect();
        let request = json!({
            "repo": cache, "schema_shape": [3, 4], "schema_dtype": "<f4", "arrays": arrays,
            "collection_size": null,
        });
        let answer = tool.call(&["write"], &request)?;
        let records: Vec<String> = answer["records"]
            .as_array()
            .map(|r| r.iter().filter_map(|r| r.as_str().map(str::to_owned)).collect())
            .unwrap_or_default();
        if records.len() != keys.len() {
            return Err(format!("hangar returned {answer}, not {} records", keys.len()));
        }
        let layout = Layout::new(cache);
        let mut units = Vec::new();
        let mut uids = BTreeSet::new();
        for record in &records {
            let uid = uid(record)?;
            units.push(Some(layout.data_file(&uid)));
            uids.insert(uid);
        }
        let mut protect = Vec::new();
        for uid in uids {
            for path in [layout.data_file(&uid), layout.stage_marker(&uid)] {
                let bytes =
                    std::fs::read(&path).map_err(|e| format!("reading {}: {e}", path.display()))?;
                protect.push((path, Protected::Whole(bytes)));
            }
            protect.push((layout.store_marker(&uid), Protected::Absent));
        }
        Ok(ToolWrite { names: records, units, protect })
    }

    /// Every key stowage lists, and each of hangar's records through `read_record`.
    fn stowage_view(&self, cache: &Path, ledger: &Ledger) -> Fallible<View> {
        let reader = read_only(cache)?;
        let mut view =
            View::of_backend(&reader, |sample| Ok(sample.tensor(FIELD).map(tensor_view)))?;
        for (key, entry) in ledger.entries() {
            if key.writer() != Writer::Tool || entry.written != Written::Acknowledged {
                continue;
            }
            let record = Numpy10Record::parse(&entry.name)
                .map_err(|e| format!("record {:?}: {e}", entry.name))?;
            match reader.read_record(FIELD, &record, true) {
                Ok(tensor) => {
                    view.samples.insert(entry.name.clone(), tensor_view(&tensor));
                }
                Err(e) => {
                    view.missing.insert(entry.name.clone(), format!("read_record: {e}"));
                }
            }
        }
        Ok(view)
    }

    /// hangar's `read_data` of every record: stowage's (for the keys stowage lists) and its
    /// own, in a writer checkout (mode `'a'`, staged and committed files: the view) and a reader
    /// checkout (mode `'r'`), which must read exactly the records of committed files, the same
    /// values, and refuse the others with `KeyError` (hangar's own rule).
    fn tool_view(
        &self,
        tool: &ToolPeer,
        cache: &Path,
        ledger: &Ledger,
        stowage: &View,
    ) -> Fallible<View> {
        let reader = read_only(cache)?;
        // Record -> the name it is known by in the views.
        let mut names: BTreeMap<String, String> = BTreeMap::new();
        for key in stowage.samples.keys().filter(|k| ledger.key_named(k).is_some()) {
            if let Some(record) = reader.record(key, FIELD) {
                names.insert(record.to_string(), key.clone());
            }
        }
        drop(reader);
        for (key, entry) in ledger.entries() {
            if key.writer() == Writer::Tool && entry.written == Written::Acknowledged {
                names.insert(entry.name.clone(), entry.name.clone());
            }
        }
        let records: Vec<&String> = names.keys().collect();
        let request = json!({
            "repo": cache, "schema_shape": [3, 4], "schema_dtype": "<f4", "modes": ["a", "r"],
            "records": records,
        });
        let answer = tool.call(&["read"], &request)?;
        let results = |mode: &str| -> Fallible<Vec<Json>> {
            answer["results"][mode]
                .as_array()
                .cloned()
                .ok_or_else(|| format!("hangar's read printed no mode '{mode}' results: {answer}"))
        };
        let mut view = View { reader: "hangar".into(), ..View::default() };
        let value = answered_value;
        for result in results("a")? {
            let record = result["record"].as_str().unwrap_or_default();
            let name = names.get(record).cloned().unwrap_or_else(|| record.to_owned());
            if result["ok"] == true {
                view.samples.insert(name, value(&result));
            } else {
                view.missing.insert(name, format!("hangar's read_data: {}", result["error"]));
            }
        }
        let layout = Layout::new(cache);
        for result in results("r")? {
            let record = result["record"].as_str().unwrap_or_default();
            let committed = layout.store_marker(&uid(record)?).exists();
            let name = names.get(record).cloned().unwrap_or_else(|| record.to_owned());
            let what = format!("hangar's reader checkout (mode 'r') of {record} ({name})");
            match (result["ok"] == true, committed) {
                (true, true) if view.samples.get(&name) == Some(&value(&result)) => {}
                (true, true) => return Err(format!("{what} reads other bytes than mode 'a'")),
                (false, false)
                    if result["error"].as_str().is_some_and(|e| e.starts_with("KeyError")) => {}
                (ok, _) => {
                    return Err(format!(
                        "{what}: ok={ok}, the file is {}committed: {result}",
                        if committed { "" } else { "not " }
                    ));
                }
            }
        }
        Ok(view)
    }

    /// `open_append` and close.
    fn recover(&self, cache: &Path) -> Fallible<()> {
        NpyBackend::open_append(cache, OPTIONS)
            .map(drop)
            .map_err(|e| format!("recovery (open_append): {e}"))
    }

    /// Exactly hangar's collection files are unchecked (writer `hangar`): they cannot be
    /// adopted, and none of stowage's files may be among them.
    fn validate(&self, cache: &Path, ledger: &Ledger) -> Fallible<u64> {
        let reader = read_only(cache)?;
        let report =
            reader.validate(ValidationLevel::Full).map_err(|e| format!("validate: {e}"))?;
        no_problems(&report)?;
        let hangars: BTreeSet<PathBuf> = ledger
            .entries()
            .filter(|(k, _)| k.writer() == Writer::Tool)
            .filter_map(|(_, e)| e.unit.clone())
            .collect();
        let listed: BTreeSet<PathBuf> = report.unchecked.iter().map(|u| u.path.clone()).collect();
        if listed != hangars || report.unchecked.iter().any(|u| u.writer != "hangar") {
            return Err(format!(
                "validate lists as unchecked {:?}; hangar's collection files are {hangars:?}",
                report.unchecked.iter().map(|u| u.to_string()).collect::<Vec<_>>()
            ));
        }
        Ok(report.samples_checked)
    }

    fn is_finalized(&self, cache: &Path) -> Fallible<bool> {
        Ok(read_only(cache)?.is_finalized())
    }
}

/// stowage writing a NUMPY_10 cache.
struct NpyWriter {
    backend: NpyBackend,
    seed: u64,
}

impl MixedWriter for NpyWriter {
    fn put(&mut self, key: Key) -> Result<()> {
        let sample = Sample::new().with(FIELD, tensor(key, self.seed));
        self.backend.put(&NpyHangar.name(key), &sample)
    }

    fn flush(&mut self) -> Result<()> {
        self.backend.flush()
    }

    fn adopt(&mut self) -> Result<()> {
        Err(Error::unsupported(stowage_npy::BACKEND_NAME, "adopting hangar's collection files"))
    }

    fn finalize(&mut self) -> Result<()> {
        self.backend.finalize()
    }
}
