//! stowage-arrow and torchcachex (`torchcachex_peer.py`): a dict of two tensors per sample, in
//! a cache either may start; stowage attaches to a cache torchcachex started alone.

use super::{
    Fallible, Format, MixedWriter, ToolWrite, View, array_json, check_unchecked_keys, names_of,
    no_problems, value_rng,
};
use crate::mixed::ledger::{Key, Ledger, Protected, Writer};
use crate::mixed::pair::Pair;
use crate::mixed::peer::{ToolPeer, clip};
use rand::Rng;
use serde_json::{Value as Json, json};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use stowage_arrow::CacheReader;
use stowage_arrow::OutputStructure;
use stowage_arrow::test_support::layout::Layout;
use stowage_arrow::{ArrowBackend, ArrowOptions};
use stowage_core::{Backend, DType, OpenMode, Reader, Result, Sample, Schema, ShapeRule, Tensor};
use stowage_core::{ValidationLevel, Value};

/// The arrow+torchcachex pair.
#[derive(Debug, Clone, Copy)]
pub struct ArrowTorchcachex;

/// stowage's options: torchcachex's dict structure, small segments (a put batch may write one),
/// early key index merges.
fn options() -> ArrowOptions {
    ArrowOptions {
        rank: Some(0),
        output_structure: Some(OutputStructure::Dict),
        ..crate::backends::arrow_options()
    }
}

/// The schema torchcachex infers from the samples, and stowage creates when it starts.
fn schema() -> Schema {
    Schema::new().tensor("feat", DType::F32, ShapeRule::Any).tensor(
        "idx",
        DType::I64,
        ShapeRule::Any,
    )
}

/// `key`'s sample: `feat` float32 `(1..=4, 16)`, `idx` int64 `(3,)`.
fn sample(key: Key, seed: u64) -> Sample {
    let mut rng = value_rng(seed, key);
    let rows = rng.random_range(1..=4usize);
    let feat: Vec<f32> = (0..rows * 16).map(|_| rng.random_range(-1e3f32..1e3)).collect();
    let idx = [i64::from(key.phase.number()), i64::from(key.n), rng.random()];
    Sample::new()
        .with("feat", Tensor::from_slice(&[rows, 16], &feat).expect("shape fits"))
        .with("idx", Tensor::from_slice(&[3], &idx).expect("shape fits"))
}

/// A sample as torchcachex's `get_batch` returns it (and its `put_batch` takes it).
fn torchcachex_json(sample: &Sample) -> Fallible<Json> {
    let mut dict = serde_json::Map::new();
    for (name, value) in sample.fields() {
        let Value::Tensor(tensor) = value else {
            return Err(format!("field {name:?} holds a {}, not a tensor", value.kind_name()));
        };
        dict.insert(name.to_owned(), json!({"tensor": array_json(tensor)}));
    }
    Ok(json!({"dict": dict}))
}

/// The segment files in `cache`.
fn segments(cache: &Path) -> Fallible<BTreeSet<PathBuf>> {
    let listed = Layout::new(cache).list_segments().map_err(|e| e.to_string())?;
    Ok(listed.into_iter().map(|(_, path)| path).collect())
}

impl Format for ArrowTorchcachex {
    fn pair(&self) -> Pair {
        Pair::Arrow
    }

    /// `<trial>/cache/module`: torchcachex's `<cache_dir>/<module_id>`.
    fn cache_in(&self, trial: &Path) -> PathBuf {
        trial.join("cache").join("module")
    }

    fn create(&self, cache: &Path, seed: u64) -> Result<Box<dyn MixedWriter>> {
        let backend = ArrowBackend::create(cache, &schema(), options())?;
        Ok(Box::new(ArrowWriter { backend, seed }))
    }

    /// `ArrowBackend::open` in append mode, or `attach` where torchcachex wrote alone (no
    /// `stowage.log` yet).
    fn open_writer(&self, cache: &Path, seed: u64) -> Result<Box<dyn MixedWriter>> {
        let backend = match Layout::new(cache).commit_log().exists() {
            true => ArrowBackend::open(cache, OpenMode::Append, options())?,
            false => ArrowBackend::attach(cache, options())?,
        };
        Ok(Box::new(ArrowWriter { backend, seed }))
    }

    fn name(&self, key: Key) -> String {
        let who = if key.writer() == Writer::Stowage { "s" } else { "t" };
        format!("{who}{}-{:04}", key.phase.number(), key.n)
    }

    fn expected(&self, key: Key, seed: u64) -> Json {
        torchcachex_json(&sample(key, seed)).expect("the samples hold tensors")
    }

    /// `torchcachex_peer.py append`: one `put_batch`, `flush`, the backend destroyed; one new
    /// segment, which (and `schema.json`, when torchcachex created it) stowage must never change.
    fn tool_write(
        &self,
        tool: &ToolPeer,
        cache: &Path,
        keys: &[Key],
        seed: u64,
    ) -> Fallible<ToolWrite> {
        std::fs::create_dir_all(cache.parent().unwrap_or(cache))
            .map_err(|e| format!("creating {}: {e}", cache.display()))?;
        let before = segments(cache)?;
        let schema_existed = Layout::new(cache).schema().exists();
        let items: serde_json::Map<String, Json> =
            keys.iter().map(|k| (self.name(*k), self.expected(*k, seed))).collect();
        let cache_arg = cache.to_string_lossy();
        let answer = tool.call(&["append", &cache_arg], &Json::Object(items))?;
        if answer["appended"] != keys.len() {
            return Err(format!("torchcachex appended {answer}, not {} samples", keys.len()));
        }
        let new: Vec<PathBuf> = segments(cache)?.difference(&before).cloned().collect();
        let [segment] = new.as_slice() else {
            return Err(format!("torchcachex's append made segments {new:?}, expected one"));
        };
        let mut protect = vec![read_whole(segment)?];
        if !schema_existed {
            protect.push(read_whole(&Layout::new(cache).schema())?);
        }
        Ok(ToolWrite {
            names: keys.iter().map(|k| self.name(*k)).collect(),
            units: vec![Some(segment.clone()); keys.len()],
            protect,
        })
    }

    /// `ArrowBackend::open` read-only; `CacheReader` for a cache torchcachex wrote alone (the
    /// kill came before stowage's log existed).
    fn stowage_view(&self, cache: &Path, _ledger: &Ledger) -> Fallible<View> {
        if Layout::new(cache).commit_log().exists() {
            let reader = ArrowBackend::open(cache, OpenMode::ReadOnly, ArrowOptions::default())
                .map_err(|e| format!("stowage's read-only open: {e}"))?;
            return View::of_backend(&reader, |sample| torchcachex_json(sample).map(Some));
        }
        // No log yet: CacheReader, which is not a `Backend`, reads torchcachex's cache.
        let reader = CacheReader::open(cache)
            .map_err(|e| format!("stowage's reader of torchcachex's cache: {e}"))?;
        let mut view = View { reader: "stowage".into(), ..View::default() };
        for key in reader.keys().map_err(|e| format!("stowage's keys(): {e}"))? {
            let got = reader.get(&key).map_err(|e| format!("stowage's get({key:?}): {e}"))?;
            if let Some(sample) = got {
                let value =
                    torchcachex_json(&sample).map_err(|e| format!("stowage's {key:?}: {e}"))?;
                view.samples.insert(key, value);
            }
        }
        Ok(view)
    }

    /// `torchcachex_peer.py read`: every key of torchcachex's index, each through `get_batch`
    /// (the backend is then destroyed, writing `index.pkl`, as torchcachex does).
    fn tool_view(
        &self,
        tool: &ToolPeer,
        cache: &Path,
        _ledger: &Ledger,
        _stowage: &View,
    ) -> Fallible<View> {
        let answer = tool.call(&["read", &cache.to_string_lossy()], &Json::Null)?;
        let values = answer["values"]
            .as_object()
            .ok_or_else(|| format!("torchcachex's read printed no values: {answer}"))?;
        let mut view = View { reader: "torchcachex".into(), ..View::default() };
        for (key, value) in values {
            if value.get("error").is_some() || value.get("missing").is_some() {
                return Err(format!(
                    "torchcachex's index lists {key:?}, and get_batch returns {}",
                    clip(&value.to_string(), 300)
                ));
            }
            view.samples.insert(key.clone(), value.clone());
        }
        Ok(view)
    }

    /// An append-mode open and close, where stowage's log exists.
    fn recover(&self, cache: &Path) -> Fallible<()> {
        if Layout::new(cache).commit_log().exists() {
            ArrowBackend::open(cache, OpenMode::Append, options())
                .map_err(|e| format!("recovery (an append-mode open): {e}"))?;
        }
        Ok(())
    }

    /// Each torchcachex segment no adopt covers is one unchecked entry (writer `torchcachex`,
    /// its rows); adoption is per segment. A cache without stowage's log has nothing of
    /// stowage's to validate (the kill came before `attach` started it).
    fn validate(&self, cache: &Path, ledger: &Ledger) -> Fallible<u64> {
        if !Layout::new(cache).commit_log().exists() {
            return Ok(0);
        }
        let reader = ArrowBackend::open(cache, OpenMode::ReadOnly, ArrowOptions::default())
            .map_err(|e| format!("stowage's read-only open: {e}"))?;
        let report =
            reader.validate(ValidationLevel::Full).map_err(|e| format!("validate: {e}"))?;
        no_problems(&report)?;
        let mut got = BTreeSet::new();
        for unchecked in &report.unchecked {
            let keys: BTreeSet<Key> = ledger
                .entries()
                .filter(|(_, e)| {
                    e.unit.as_ref().is_some_and(|u| u.file_name() == unchecked.path.file_name())
                })
                .map(|(k, _)| k)
                .collect();
            if keys.is_empty() || unchecked.writer != "torchcachex" {
                return Err(format!(
                    "validate lists {unchecked} as unchecked, which is no segment torchcachex wrote"
                ));
            }
            if unchecked.samples != keys.len() as u64 {
                return Err(format!(
                    "validate counts {} samples in {}, torchcachex wrote {}",
                    unchecked.samples,
                    unchecked.path.display(),
                    keys.len()
                ));
            }
            got.extend(keys);
        }
        check_unchecked_keys(&got, ledger, false, |keys| names_of(ledger, keys))?;
        Ok(report.samples_checked)
    }

    fn is_finalized(&self, cache: &Path) -> Fallible<bool> {
        if !Layout::new(cache).commit_log().exists() {
            return Ok(false);
        }
        let reader = ArrowBackend::open(cache, OpenMode::ReadOnly, ArrowOptions::default())
            .map_err(|e| format!("stowage's read-only open: {e}"))?;
        Ok(reader.is_finalized())
    }
}

/// A file and its bytes, to keep as they are.
fn read_whole(path: &Path) -> Fallible<(PathBuf, Protected)> {
    let bytes = std::fs::read(path).map_err(|e| format!("reading {}: {e}", path.display()))?;
    Ok((path.to_path_buf(), Protected::Whole(bytes)))
}

/// stowage writing an Arrow cache.
struct ArrowWriter {
    backend: ArrowBackend,
    seed: u64,
}

impl MixedWriter for ArrowWriter {
    fn put(&mut self, key: Key) -> Result<()> {
        self.backend.put(&ArrowTorchcachex.name(key), &sample(key, self.seed))
    }

    fn flush(&mut self) -> Result<()> {
        self.backend.flush()
    }

    fn adopt(&mut self) -> Result<()> {
        self.backend.adopt().map(drop)
    }

    fn finalize(&mut self) -> Result<()> {
        self.backend.finalize()
    }
}
