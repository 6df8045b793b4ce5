//! stowage-hdf5's aenet writer and aenet's torch-cache paths (`aenet_peer.py`): per entry of an
//! aenet dataset file, a feature row and, for some entries, force derivatives. aenet writes
//! its file in place; stowage rebuilds it beside itself and renames it over.

use super::{
    Fallible, Format, MixedWriter, ToolWrite, View, array_json, check_unchecked_keys, names_of,
    no_problems, value_rng,
};
use crate::mixed::ledger::{Key, Ledger, Writer, Written};
use crate::mixed::pair::Pair;
use crate::mixed::peer::{ToolPeer, clip};
use rand::Rng;
use rand::rngs::StdRng;
use serde_json::{Value as Json, json};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use stowage_core::{Error, Result, Tensor, ValidationLevel};
use stowage_hdf5::{
    AngularDerivatives, CacheSections, DescriptorCompat, LocalDerivatives, RadialDerivatives,
    StorageDtype, TorchCache, TorchCacheWriter,
};

/// The hdf5+aenet pair.
#[derive(Debug, Clone, Copy)]
pub struct Hdf5Aenet;

/// Entries of the dataset file: every phase's keys are entries `100 * phase + n`.
pub const DATASET_ENTRIES: usize = 700;

/// Makes an aenet dataset file without a cache, as aenet's `build_database` lays one out
/// (`/entries/structures` of opaque rows, `/entries/meta`, the root `energy_filter_*`
/// attributes), with PyTables: `python SCRIPT FILE ENTRIES`.
const PLAIN_DATASET: &str = r#"
import sys
import numpy as np
import tables
path, n = sys.argv[1], int(sys.argv[2])
filters = tables.Filters(complevel=5, complib="zlib", shuffle=True)
with tables.open_file(path, mode="w") as h5:
    group = h5.create_group("/", "entries", "Serialized entries")
    meta = np.zeros(n, dtype=[("display_name", "S2048"), ("energy", "<f8"), ("frame_idx", "<i8"),
                              ("has_forces", "?"), ("n_atoms", "<i4"), ("name", "S1024"),
                              ("source_id", "S2048"), ("source_kind", "S64")])
    meta["energy"] = np.arange(n) * 0.25
    meta["has_forces"] = np.arange(n) % 2 == 0
    meta["n_atoms"] = 3
    meta["name"] = [b"s%d" % i for i in range(n)]
    meta["source_kind"] = b"pickle"
    h5.create_table(group, "meta", obj=meta, filters=filters)
    structures = h5.create_vlarray(group, "structures", atom=tables.UInt8Atom(),
                                   title="Pickled Structures", filters=filters)
    for i in range(n):
        structures.append(np.array(structure(i), dtype=np.uint8))
    attrs = h5.root._v_attrs
    attrs.energy_filter_atomic_energies_json = ""
    attrs.energy_filter_enabled = False
    attrs.energy_filter_max_referenced_energy_per_atom = float("nan")
    attrs.energy_filter_reference_mode = "zero_reference_fallback"
    attrs.energy_filter_semantics = "referenced_energy_per_atom"
"#;

/// The `/entries/structures` row of entry `i` (a stand-in for aenet's pickles), in Python and
/// in Rust.
const STRUCTURE_PY: &str = "def structure(i):\n    return [0x80, 5, i % 256, i // 256, 0x2e]\n";

fn structure(i: usize) -> Vec<u8> {
    vec![0x80, 5, (i % 256) as u8, (i / 256) as u8, 0x2e]
}

/// aenet's reference Chebyshev descriptor: species A and B, 6 features per atom.
fn compat() -> DescriptorCompat {
    DescriptorCompat::chebyshev(&["A", "B"], 1, 2.0, 0, 2.0, 0.1)
}

/// The descriptor as aenet's peer takes it.
fn descriptor() -> Json {
    let c = compat();
    json!({
        "descriptor_class": c.descriptor_class, "species": c.species, "rad_order": c.rad_order,
        "rad_cutoff": c.rad_cutoff, "ang_order": c.ang_order, "ang_cutoff": c.ang_cutoff,
        "min_cutoff": c.min_cutoff, "dtype": "float64", "device": "cpu",
    })
}

/// The entry `key` writes.
fn entry(key: Key) -> i64 {
    i64::from(key.phase.number()) * 100 + i64::from(key.n)
}

/// `key`'s rows: features `(atoms, 6)` float64, and derivatives for one entry in two.
fn rows(key: Key, seed: u64) -> (Tensor, Option<LocalDerivatives>) {
    let mut rng = value_rng(seed, key);
    let n = rng.random_range(2..=4usize);
    let floats = |rng: &mut StdRng, dims: &[usize]| {
        let values: Vec<f64> =
            (0..dims.iter().product()).map(|_| rng.random_range(-10f64..10.0)).collect();
        Tensor::from_slice(dims, &values).expect("shape fits")
    };
    let features = floats(&mut rng, &[n, 6]);
    if !rng.random_bool(0.5) {
        return (features, None);
    }
    let (e, t) = (2 * n, n);
    let idx = |count: usize, shift: usize| (0..count).map(|j| ((j + shift) % n) as i64).collect();
    let derivatives = LocalDerivatives {
        n_atoms: n,
        radial: RadialDerivatives {
            center_idx: idx(e, 0),
            neighbor_idx: idx(e, 1),
            dg_drij: floats(&mut rng, &[e, 2, 3]),
            neighbor_typespin: Some(floats(&mut rng, &[e])),
        },
        angular: AngularDerivatives {
            center_idx: idx(t, 0),
            neighbor_j_idx: idx(t, 1),
            neighbor_k_idx: idx(t, 2),
            grads_i: floats(&mut rng, &[t, 1, 3]),
            grads_j: floats(&mut rng, &[t, 1, 3]),
            grads_k: floats(&mut rng, &[t, 1, 3]),
            triplet_typespin: Some(floats(&mut rng, &[t])),
        },
    };
    (features, Some(derivatives))
}

/// An entry's rows as both views show them: aenet's `load` answer for one entry.
fn entry_view(features: Option<&Tensor>, derivatives: Option<&LocalDerivatives>) -> Json {
    let arrays = |d: &LocalDerivatives| -> serde_json::Map<String, Json> {
        d.named_arrays()
            .into_iter()
            .map(|(name, t)| (name.to_owned(), t.as_ref().map_or(Json::Null, array_json)))
            .collect()
    };
    json!({
        "features": features.map_or(Json::Null, array_json),
        "derivatives": derivatives.map_or(Json::Null, |d| Json::Object(arrays(d))),
    })
}

impl Format for Hdf5Aenet {
    fn pair(&self) -> Pair {
        Pair::Hdf5
    }

    /// `<trial>/dataset.h5`: aenet's dataset file, which holds the cache.
    fn cache_in(&self, trial: &Path) -> PathBuf {
        trial.join("dataset.h5")
    }

    /// Writes the dataset file (PyTables, as aenet's `build_database` does), and when aenet
    /// writes first, aenet's descriptor manifest and cache storage (`aenet_peer.py create`).
    fn prepare(&self, tool: &ToolPeer, cache: &Path, tool_first: bool) -> Fallible<()> {
        let script = format!("{STRUCTURE_PY}{PLAIN_DATASET}");
        let out = std::process::Command::new(&tool.python)
            .arg("-c")
            .arg(&script)
            .arg(cache)
            .arg(DATASET_ENTRIES.to_string())
            .output()
            .map_err(|e| format!("starting {}: {e}", tool.python))?;
        if !out.status.success() {
            return Err(format!(
                "writing aenet's dataset file {} failed: {}",
                cache.display(),
                String::from_utf8_lossy(&out.stderr).trim()
            ));
        }
        if tool_first {
            let request =
                json!({"descriptor": descriptor(), "features": true, "derivatives": true});
            let answer = tool.call(&["create", &cache.to_string_lossy()], &request)?;
            if let Some(error) = answer.get("error") {
                return Err(format!("aenet refused to create its cache storage: {error}"));
            }
        }
        Ok(())
    }

    fn create(&self, cache: &Path, seed: u64) -> Result<Box<dyn MixedWriter>> {
        self.open_writer(cache, seed)
    }

    /// `TorchCacheWriter::create` on the dataset file (which keeps every row there is).
    fn open_writer(&self, cache: &Path, seed: u64) -> Result<Box<dyn MixedWriter>> {
        let writer = TorchCacheWriter::create(
            cache,
            &compat(),
            StorageDtype::Float64,
            CacheSections::default(),
        )?;
        Ok(Box::new(Hdf5Writer { path: cache.to_path_buf(), writer: Some(writer), seed }))
    }

    fn name(&self, key: Key) -> String {
        entry(key).to_string()
    }

    fn expected(&self, key: Key, seed: u64) -> Json {
        let (features, derivatives) = rows(key, seed);
        entry_view(Some(&features), derivatives.as_ref())
    }

    /// `aenet_peer.py append`: aenet opens the dataset (its open-time checks), then appends each
    /// entry's rows with its per-entry append functions.
    fn tool_write(
        &self,
        tool: &ToolPeer,
        cache: &Path,
        keys: &[Key],
        seed: u64,
    ) -> Fallible<ToolWrite> {
        let (mut features, mut derivatives) = (Vec::new(), Vec::new());
        for &key in keys {
            let (f, d) = rows(key, seed);
            let (entry_idx, n_atoms) = (entry(key), f.shape()[0]);
            features.push(
                json!({"entry_idx": entry_idx, "n_atoms": n_atoms, "features": array_json(&f)}),
            );
            if let Some(d) = d {
                let arrays: serde_json::Map<String, Json> = d
                    .named_arrays()
                    .into_iter()
                    .map(|(name, t)| (name.to_owned(), t.as_ref().map_or(Json::Null, array_json)))
                    .collect();
                derivatives
                    .push(json!({"entry_idx": entry(key), "n_atoms": d.n_atoms, "arrays": arrays}));
            }
        }
        let request =
            json!({"descriptor": descriptor(), "features": features, "derivatives": derivatives});
        let answer = tool.call(&["append", &cache.to_string_lossy()], &request)?;
        if let Some(error) = answer.get("error") {
            return Err(format!("aenet refused to append to {}: {error}", cache.display()));
        }
        let appended = |section: &str| answer[section].as_array().map_or(0, Vec::len);
        if appended("features") != features.len() || appended("derivatives") != derivatives.len() {
            return Err(format!("aenet appended {answer}, asked for {} entries", keys.len()));
        }
        Ok(ToolWrite {
            names: keys.iter().map(|k| self.name(*k)).collect(),
            units: vec![None; keys.len()],
            protect: Vec::new(),
        })
    }

    fn stowage_view(&self, cache: &Path, _ledger: &Ledger) -> Fallible<View> {
        let mut view = View { reader: "stowage".into(), ..View::default() };
        let Some(reader) =
            TorchCache::open(cache).map_err(|e| format!("stowage's TorchCache::open: {e}"))?
        else {
            return Ok(view);
        };
        for entry in reader.entries() {
            let what = |e: Error| format!("stowage's read of entry {entry}: {e}");
            let features = reader.features_as(entry, StorageDtype::Float64).map_err(what)?;
            let derivatives = reader.derivatives_as(entry, StorageDtype::Float64).map_err(what)?;
            view.samples
                .insert(entry.to_string(), entry_view(features.as_ref(), derivatives.as_ref()));
        }
        Ok(view)
    }

    /// `aenet_peer.py load` of every entry the ledger knows (any phase, written or not) and
    /// every entry stowage lists, the descriptor recovered from the file's manifest, as aenet's
    /// `materialize_sample` asks for them; the dataset must still hold all its entries.
    fn tool_view(
        &self,
        tool: &ToolPeer,
        cache: &Path,
        ledger: &Ledger,
        stowage: &View,
    ) -> Fallible<View> {
        let mut entries: BTreeSet<i64> = ledger.entries().map(|(k, _)| entry(k)).collect();
        entries.extend(stowage.samples.keys().filter_map(|n| n.parse::<i64>().ok()));
        let request = json!({"descriptor": null, "entries": entries});
        let answer = tool.call(&["load", &cache.to_string_lossy()], &request)?;
        if let Some(error) = answer.get("error") {
            return Err(format!("aenet refuses {}: {error}", cache.display()));
        }
        if answer["n_entries"] != DATASET_ENTRIES {
            return Err(format!(
                "aenet finds {} dataset entries in {}, it was written with {DATASET_ENTRIES}",
                answer["n_entries"],
                cache.display()
            ));
        }
        let mut view = View { reader: "aenet".into(), ..View::default() };
        for entry in entries {
            let name = entry.to_string();
            let features = &answer["features"][&name];
            let derivatives = &answer["derivatives"][&name];
            if !features.is_null() || !derivatives.is_null() {
                view.samples
                    .insert(name, json!({"features": features, "derivatives": derivatives}));
            }
        }
        Ok(view)
    }

    /// aenet's rows no adopt covers are one unchecked entry (writer `aenet`, counted in
    /// entries); adoption rebuilds the file at once, so it covers all or none.
    fn validate(&self, cache: &Path, ledger: &Ledger) -> Fallible<u64> {
        let report = TorchCache::validate(cache, ValidationLevel::Full)
            .map_err(|e| format!("validate: {e}"))?;
        no_problems(&report)?;
        let reader = TorchCache::open(cache)
            .map_err(|e| format!("stowage's TorchCache::open: {e}"))?
            .ok_or_else(|| format!("{} holds no torch cache", cache.display()))?;
        let mut got = BTreeSet::new();
        for number in reader.unchecked_entries() {
            let key = ledger.key_named(&number.to_string()).filter(|k| {
                k.writer() == Writer::Tool
                    && ledger.entry(*k).is_some_and(|e| e.written == Written::Acknowledged)
            });
            let Some(key) = key else {
                return Err(format!(
                    "entry {number} is unchecked, and it is none of aenet's entries"
                ));
            };
            got.insert(key);
        }
        match report.unchecked.as_slice() {
            [] if got.is_empty() => {}
            [u] if u.writer == "aenet" && u.samples == got.len() as u64 => {}
            other => {
                return Err(format!(
                    "validate lists as unchecked {other:?}, unchecked_entries() {} entries",
                    got.len()
                ));
            }
        }
        check_unchecked_keys(&got, ledger, true, |keys| names_of(ledger, keys))?;
        Ok(report.samples_checked)
    }

    /// The dataset's own rows, `/entries/structures`, are still the ones it was written with:
    /// stowage's rebuild carries them over.
    fn check_tool_data(&self, cache: &Path) -> Fallible<()> {
        let file = hdf5::File::open(cache).map_err(|e| format!("{}: {e}", cache.display()))?;
        let rows = file
            .dataset("entries/structures")
            .and_then(|d| d.read_raw::<hdf5::types::VarLenArray<u8>>())
            .map_err(|e| format!("{}: /entries/structures: {e}", cache.display()))?;
        if rows.len() != DATASET_ENTRIES {
            return Err(format!(
                "{}: /entries/structures has {} rows, the dataset was written with \
                 {DATASET_ENTRIES}",
                cache.display(),
                rows.len()
            ));
        }
        for (i, row) in rows.iter().enumerate() {
            if row.as_slice() != structure(i).as_slice() {
                return Err(format!(
                    "{}: /entries/structures row {i} is {:?}, written as {:?}",
                    cache.display(),
                    clip(&format!("{:?}", row.as_slice()), 100),
                    structure(i)
                ));
            }
        }
        Ok(())
    }

    fn is_finalized(&self, _cache: &Path) -> Fallible<bool> {
        Ok(false)
    }
}

/// stowage writing the cache of an aenet dataset file: one `TorchCacheWriter` per write, from
/// `create` to `finish`.
struct Hdf5Writer {
    path: PathBuf,
    writer: Option<TorchCacheWriter>,
    seed: u64,
}

impl Hdf5Writer {
    fn open(&mut self) -> Result<&mut TorchCacheWriter> {
        self.writer.as_mut().ok_or_else(|| {
            Error::invalid(format!("no TorchCacheWriter is open on {}", self.path.display()))
        })
    }
}

impl MixedWriter for Hdf5Writer {
    fn put(&mut self, key: Key) -> Result<()> {
        let (features, derivatives) = rows(key, self.seed);
        let writer = self.open()?;
        writer.add_features(entry(key), &features)?;
        if let Some(d) = derivatives {
            writer.add_derivatives(entry(key), &d)?;
        }
        Ok(())
    }

    /// `finish`: the rebuilt file renamed over the dataset; the writer is closed.
    fn flush(&mut self) -> Result<()> {
        self.open()?;
        self.writer.take().expect("checked").finish()
    }

    /// `TorchCacheWriter::adopt`, with no writer open (it rebuilds the file too).
    fn adopt(&mut self) -> Result<()> {
        if self.writer.is_some() {
            return Err(Error::invalid("adopt while a TorchCacheWriter is open"));
        }
        TorchCacheWriter::adopt(&self.path).map(drop)
    }

    /// aenet files have no finalize: `finish` commits each write.
    fn finalize(&mut self) -> Result<()> {
        self.flush()
    }
}
