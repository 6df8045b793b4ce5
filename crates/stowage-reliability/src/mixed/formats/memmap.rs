//! stowage-memmap and DNANet's memmap writer (`dnanet_peer.py`): DNANet's rows (`data`,
//! nullable `annotation`, `scaler`, panel, allele and meta JSON), in an unfinished cache either
//! may start and each resumes; stowage may finalize it last.

use super::{
    Fallible, Format, MixedWriter, ToolWrite, View, check_unchecked_keys, names_of, no_problems,
    value_rng,
};
use crate::mixed::ledger::{Key, Ledger, Protected, Writer};
use crate::mixed::pair::Pair;
use crate::mixed::peer::ToolPeer;
use rand::Rng;
use serde_json::{Value as Json, json};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use stowage_core::{Backend, Reader, Result, Sample, Tensor, ValidationLevel, Value};
use stowage_memmap::test_support::Layout;
use stowage_memmap::{MemmapBackend, MemmapOptions, dnanet};

/// The memmap+DNANet pair.
#[derive(Debug, Clone, Copy)]
pub struct MemmapDnanet;

/// Rows of `data` and `annotation` are `(D, L)`, `scaler` `(L,)`.
const D: usize = 3;
const L: usize = 8;

/// The files of DNANet's rows, which both writers append to and nobody may change before.
const ROW_FILES: [&str; 4] = ["data.bin", "annotation.bin", "scaler.bin", "manifest.jsonl"];

/// One DNANet row, in the form the peer takes and prints.
struct Row {
    data: Vec<i16>,
    annotation: Option<Vec<i8>>,
    scaler_bits: Vec<u32>,
    panel: Option<String>,
    allele: Option<String>,
    meta: String,
}

/// `key`'s row: no annotation (nor allele) one time in three, no panel one in four, a NaN with a
/// payload in the scaler one in five.
fn row(key: Key, seed: u64) -> Row {
    let mut rng = value_rng(seed, key);
    let data = (0..D * L).map(|_| rng.random()).collect();
    let annotation = rng.random_bool(2.0 / 3.0).then(|| (0..D * L).map(|_| rng.random()).collect());
    let mut scaler_bits: Vec<u32> =
        (0..L).map(|_| rng.random_range(-100f32..100.0).to_bits()).collect();
    if rng.random_bool(0.2) {
        scaler_bits[0] = 0x7fc0_1234;
    }
    let panel = rng.random_bool(0.75).then(|| {
        format!("[{{\"name\": \"AMEL\", \"dye_row\": {}, \"base_pair\": 82.1}}]", key.n % 2)
    });
    let allele =
        annotation.as_ref().map(|_| format!("[{{\"name\": \"X\", \"n\": {}}}]", key.n % 3));
    let meta =
        format!("{{\"phase\": {}, \"n\": {}, \"name\": \"\\u00eb\"}}", key.phase.number(), key.n);
    Row { data, annotation, scaler_bits, panel, allele, meta }
}

impl Row {
    fn sample(&self) -> Sample {
        let scaler: Vec<f32> = self.scaler_bits.iter().map(|b| f32::from_bits(*b)).collect();
        let annotation = match &self.annotation {
            Some(values) => Value::from(Tensor::from_slice(&[D, L], values).expect("shape fits")),
            None => Value::Null,
        };
        let text = |t: &Option<String>| t.clone().map_or(Value::Null, Value::Json);
        Sample::new()
            .with("data", Tensor::from_slice(&[D, L], &self.data).expect("shape fits"))
            .with("annotation", annotation)
            .with("scaler", Tensor::from_slice(&[L], &scaler).expect("shape fits"))
            .with("panel", text(&self.panel))
            .with("allele", text(&self.allele))
            .with("meta_json", Value::Json(self.meta.clone()))
    }

    /// The row as both views show it (the fields of the peer's `read` that carry its value).
    fn view(&self) -> Json {
        json!({
            "data": self.data, "annotation": self.annotation, "scaler_bits": self.scaler_bits,
            "panel": self.panel, "allele": self.allele, "meta_json": self.meta,
        })
    }
}

/// A sample stowage read, as [`Row::view`] shows a row.
fn sample_view(sample: &Sample) -> Fallible<Json> {
    let tensor = |name: &str| -> Fallible<Option<&Tensor>> {
        match sample.get(name) {
            Some(Value::Tensor(t)) => Ok(Some(t)),
            None | Some(Value::Null) => Ok(None),
            Some(other) => Err(format!("field {name:?} holds a {}", other.kind_name())),
        }
    };
    let text = |name: &str| -> Fallible<Json> {
        match sample.get(name) {
            Some(Value::Json(t)) => Ok(Json::String(t.clone())),
            None | Some(Value::Null) => Ok(Json::Null),
            Some(other) => Err(format!("field {name:?} holds a {}", other.kind_name())),
        }
    };
    let ints = |t: Option<&Tensor>| -> Fallible<Json> {
        match t {
            None => Ok(Json::Null),
            Some(t) if t.dtype() == stowage_core::DType::I16 => {
                Ok(json!(t.to_vec::<i16>().map_err(|e| e.to_string())?))
            }
            Some(t) => Ok(json!(t.to_vec::<i8>().map_err(|e| e.to_string())?)),
        }
    };
    let scaler = tensor("scaler")?.ok_or("no scaler")?;
    let bits: Vec<u32> =
        scaler.to_vec::<f32>().map_err(|e| e.to_string())?.iter().map(|f| f.to_bits()).collect();
    Ok(json!({
        "data": ints(tensor("data")?)?, "annotation": ints(tensor("annotation")?)?,
        "scaler_bits": bits, "panel": text("panel")?, "allele": text("allele")?,
        "meta_json": text("meta_json")?,
    }))
}

fn read_only(cache: &Path) -> Fallible<MemmapBackend> {
    MemmapBackend::open_read_only(cache, MemmapOptions::default())
        .map_err(|e| format!("stowage's read-only open: {e}"))
}

/// The row runs of `rows` as memmap's validate writes them (`0-2, 6`), the first four.
fn describe_runs(rows: &[usize]) -> String {
    let mut runs: Vec<(usize, usize)> = Vec::new();
    for &row in rows {
        match runs.last_mut() {
            Some((_, end)) if *end + 1 == row => *end = row,
            _ => runs.push((row, row)),
        }
    }
    let mut parts: Vec<String> = runs
        .iter()
        .take(4)
        .map(|&(a, b)| if a == b { a.to_string() } else { format!("{a}-{b}") })
        .collect();
    if runs.len() > 4 {
        parts.push(format!("and {} more runs", runs.len() - 4));
    }
    parts.join(", ")
}

impl Format for MemmapDnanet {
    fn pair(&self) -> Pair {
        Pair::Memmap
    }

    /// `<trial>/0123456789abcdef`: DNANet names a cache by its key.
    fn cache_in(&self, trial: &Path) -> PathBuf {
        trial.join("0123456789abcdef")
    }

    fn create(&self, cache: &Path, seed: u64) -> Result<Box<dyn MixedWriter>> {
        let backend = MemmapBackend::create(cache, &dnanet(D, L), MemmapOptions::default())?;
        Ok(Box::new(MemmapWriter { backend, seed }))
    }

    /// `MemmapBackend::open_append`: resumes what either writer committed.
    fn open_writer(&self, cache: &Path, seed: u64) -> Result<Box<dyn MixedWriter>> {
        let backend = MemmapBackend::open_append(cache, MemmapOptions::default())?;
        Ok(Box::new(MemmapWriter { backend, seed }))
    }

    fn name(&self, key: Key) -> String {
        let who = if key.writer() == Writer::Stowage { "s" } else { "t" };
        format!("/data/hid/{who}{}_{:04}.hid", key.phase.number(), key.n)
    }

    fn expected(&self, key: Key, seed: u64) -> Json {
        row(key, seed).view()
    }

    /// `dnanet_peer.py write`: DNANet's writer recovers the cache from its manifest, appends the
    /// rows, and closes without finalizing. Everything its row files hold then is committed
    /// rows, which stay as they are: both writers only append after them.
    fn tool_write(
        &self,
        tool: &ToolPeer,
        cache: &Path,
        keys: &[Key],
        seed: u64,
    ) -> Fallible<ToolWrite> {
        let rows: Vec<Json> = keys
            .iter()
            .map(|k| {
                let r = row(*k, seed);
                json!({
                    "path": self.name(*k), "data": r.data, "data_shape": [D, L],
                    "annotation": r.annotation, "scaler_bits": r.scaler_bits,
                    "scaler_shape": [L], "panel": r.panel, "allele": r.allele,
                    "meta_json": r.meta,
                })
            })
            .collect();
        let answer =
            tool.call(&["write"], &json!({"cache": cache, "rows": rows, "finalize": null}))?;
        if answer["written"] != keys.len() {
            return Err(format!("DNANet's writer answered {answer}, not {} rows", keys.len()));
        }
        let mut protect = Vec::new();
        for name in ROW_FILES {
            let path = cache.join(name);
            let bytes =
                std::fs::read(&path).map_err(|e| format!("reading {}: {e}", path.display()))?;
            protect.push((path, Protected::Prefix(bytes)));
        }
        Ok(ToolWrite {
            names: keys.iter().map(|k| self.name(*k)).collect(),
            units: vec![None; keys.len()],
            protect,
        })
    }

    /// DNANet's writer must not open a finished cache (its own rule: it would append rows after
    /// the old ones and index only the new).
    fn tool_may_write(&self, cache: &Path) -> bool {
        !Layout::new(cache).complete_marker().exists()
    }

    /// Finalize removes `manifest.jsonl`, as DNANet's own finalize does.
    fn removed_by_finalize(&self, cache: &Path) -> Vec<PathBuf> {
        vec![Layout::new(cache).manifest()]
    }

    fn stowage_view(&self, cache: &Path, _ledger: &Ledger) -> Fallible<View> {
        View::of_backend(&read_only(cache)?, |sample| sample_view(sample).map(Some))
    }

    /// `dnanet_peer.py read`: DNANet's reader of a finished cache, or what its writer's recovery
    /// keeps of an unfinished one.
    fn tool_view(
        &self,
        tool: &ToolPeer,
        cache: &Path,
        _ledger: &Ledger,
        _stowage: &View,
    ) -> Fallible<View> {
        let answer = tool.call(&["read"], &json!({"cache": cache}))?;
        let rows = answer["rows"]
            .as_array()
            .ok_or_else(|| format!("DNANet's read printed no rows: {answer}"))?;
        let mut view = View { reader: "DNANet".into(), ..View::default() };
        for row in rows {
            let path =
                row["path"].as_str().ok_or_else(|| format!("a row without a path: {row}"))?;
            let value = json!({
                "data": row["data"], "annotation": row["annotation"],
                "scaler_bits": row["scaler_bits"], "panel": row["panel"],
                "allele": row["allele"], "meta_json": row["meta_json"],
            });
            if view.samples.insert(path.to_owned(), value).is_some() {
                return Err(format!("DNANet reads two rows for {path:?}"));
            }
        }
        Ok(view)
    }

    /// `open_append` and close, where stowage's `stowage.json` exists.
    fn recover(&self, cache: &Path) -> Fallible<()> {
        if Layout::new(cache).stowage_meta().exists() {
            MemmapBackend::open_append(cache, MemmapOptions::default())
                .map_err(|e| format!("recovery (open_append): {e}"))?;
        }
        Ok(())
    }

    /// DNANet's rows no adopt covers are one unchecked entry (writer `DNANet`, their number and
    /// row runs); adoption rewrites the checksum file at once, so it covers all or none. A cache
    /// DNANet wrote alone (no `stowage.json`: the kill came before stowage's open wrote it)
    /// reports none, by the backend's documented rule.
    fn validate(&self, cache: &Path, ledger: &Ledger) -> Fallible<u64> {
        let reader = read_only(cache)?;
        let report =
            reader.validate(ValidationLevel::Full).map_err(|e| format!("validate: {e}"))?;
        no_problems(&report)?;
        let order = reader.keys().map_err(|e| format!("stowage's keys(): {e}"))?;
        let rows_of = |keys: &BTreeSet<Key>| -> Vec<usize> {
            let names: BTreeSet<&str> =
                keys.iter().filter_map(|k| ledger.entry(*k)).map(|e| e.name.as_str()).collect();
            (0..order.len()).filter(|&i| names.contains(order[i].as_str())).collect()
        };
        let describe = |keys: &BTreeSet<Key>| {
            format!("{} (rows {})", names_of(ledger, keys), describe_runs(&rows_of(keys)))
        };
        if !Layout::new(cache).stowage_meta().exists() {
            // DNANet wrote it alone: no checksums, so every row is unchecked (never clean).
            let rows: u64 = report.unchecked.iter().map(|u| u.samples).sum();
            if rows == order.len() as u64 && report.unchecked.iter().all(|u| u.writer == "DNANet") {
                return Ok(report.samples_checked);
            }
            return Err(format!(
                "a cache DNANet wrote alone ({} rows) must report all of them unchecked by \
                 DNANet: {:?}",
                order.len(),
                report.unchecked
            ));
        }
        let got: BTreeSet<Key> = match report.unchecked.as_slice() {
            [] => BTreeSet::new(),
            [unchecked] if unchecked.writer == "DNANet" => {
                // Which rows: the candidates the ledger allows, matched by count and runs.
                let (must, may) = ledger.unchecked();
                let all: BTreeSet<Key> = must.union(&may).copied().collect();
                let matches = |keys: &BTreeSet<Key>| {
                    let rows = rows_of(keys);
                    unchecked.samples == rows.len() as u64
                        && unchecked.next_step.contains(&format!("rows {} ", describe_runs(&rows)))
                };
                match [must, all].into_iter().find(|keys| matches(keys)) {
                    Some(keys) => keys,
                    None => {
                        return Err(format!(
                            "validate lists {unchecked}; the DNANet rows no adopt covers are {}",
                            describe(&ledger.unchecked().0)
                        ));
                    }
                }
            }
            other => return Err(format!("validate lists as unchecked {other:?}")),
        };
        check_unchecked_keys(&got, ledger, true, describe)?;
        Ok(report.samples_checked)
    }

    fn is_finalized(&self, cache: &Path) -> Fallible<bool> {
        Ok(read_only(cache)?.is_finalized())
    }
}

/// stowage writing a memmap cache.
struct MemmapWriter {
    backend: MemmapBackend,
    seed: u64,
}

impl MixedWriter for MemmapWriter {
    fn put(&mut self, key: Key) -> Result<()> {
        self.backend.put(&MemmapDnanet.name(key), &row(key, self.seed).sample())
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

#[cfg(test)]
mod tests {
    use super::describe_runs;

    #[test]
    fn runs_read_as_memmap_writes_them() {
        assert_eq!(describe_runs(&[0, 1, 2, 6, 7, 8]), "0-2, 6-8");
        assert_eq!(describe_runs(&[4]), "4");
        assert_eq!(describe_runs(&[0, 2, 4, 6, 8, 9]), "0, 2, 4, 6, and 1 more runs");
    }
}
