//! Each format pair's two sides in a mixed trial, behind one trait: how stowage creates and
//! opens the cache for writing, how the tool writes to it (through its peer), what each key's
//! value is, how each side reads the cache back, and what `validate` must report.
//!
//! Both readers' views show a sample as the same JSON (the form the tool's peer prints), so
//! that the checks compare values of every pair the same way ([`View`]).

pub mod arrow;
pub mod hdf5;
pub mod memmap;
pub mod npy;

use crate::mixed::ledger::{Key, Ledger, Protected};
use crate::mixed::pair::Pair;
use crate::mixed::peer::ToolPeer;
use rand::{SeedableRng, rngs::StdRng};
use serde_json::{Value as Json, json};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use stowage_core::{Backend, Result, Sample, Tensor, ValidationReport};

/// A stowage handle writing the cache, in a child or in the parent.
pub trait MixedWriter {
    /// Puts `key`'s value.
    fn put(&mut self, key: Key) -> Result<()>;
    /// `flush` (aenet files: `finish`, which closes the writer).
    fn flush(&mut self) -> Result<()>;
    /// Adopts the tool's data.
    fn adopt(&mut self) -> Result<()>;
    /// `finalize` (aenet files: `finish`).
    fn finalize(&mut self) -> Result<()>;
}

/// What the tool's write did.
#[derive(Debug, Clone, Default)]
pub struct ToolWrite {
    /// The name each key has in the cache, in the order given (a record for hangar).
    pub names: Vec<String>,
    /// The file that holds each key, where validate reports unchecked data per file.
    pub units: Vec<Option<PathBuf>>,
    /// The files the tool wrote and what they must hold from now on.
    pub protect: Vec<(PathBuf, Protected)>,
}

/// The samples one reader finds, each as the JSON of [`Format::expected`], by name.
#[derive(Debug, Clone, Default)]
pub struct View {
    /// Who read: `stowage` or the tool's name.
    pub reader: String,
    /// The samples found.
    pub samples: BTreeMap<String, Json>,
    /// Why a sample asked for by name was not found, where the reader says (hangar's
    /// `KeyError`, a record stowage refused).
    pub missing: BTreeMap<String, String>,
}

impl View {
    /// stowage's view through `reader`: every key it lists, read with `get`, shown by `value`
    /// (`None`: a sample this view leaves out).
    ///
    /// Errors: a listing or read that fails, or a sample `value` cannot show, naming the key.
    pub fn of_backend(
        reader: &dyn Backend,
        value: impl Fn(&Sample) -> Fallible<Option<Json>>,
    ) -> Fallible<View> {
        let mut view = View { reader: "stowage".into(), ..View::default() };
        for key in reader.keys().map_err(|e| format!("stowage's keys(): {e}"))? {
            let got = reader.get(&key).map_err(|e| format!("stowage's get({key:?}): {e}"))?;
            if let Some(sample) = got
                && let Some(json) = value(&sample).map_err(|e| format!("stowage's {key:?}: {e}"))?
            {
                view.samples.insert(key, json);
            }
        }
        Ok(view)
    }
}

/// A format pair's two sides.
pub trait Format: Sync {
    /// The pair.
    fn pair(&self) -> Pair;

    /// The cache (a directory, or aenet's dataset file) inside a trial's directory.
    fn cache_in(&self, trial: &Path) -> PathBuf;

    /// Readies what the tool needs before either side writes: aenet's dataset file, and when
    /// aenet writes first, its cache storage. Nothing for the other pairs.
    ///
    /// Errors: the tool refused, naming the file.
    fn prepare(&self, _tool: &ToolPeer, _cache: &Path, _tool_first: bool) -> Fallible<()> {
        Ok(())
    }

    /// stowage creates the cache (when stowage writes first).
    fn create(&self, cache: &Path, seed: u64) -> Result<Box<dyn MixedWriter>>;

    /// stowage opens the cache for writing the way a user would: resume, append, or start its
    /// files beside the tool's.
    fn open_writer(&self, cache: &Path, seed: u64) -> Result<Box<dyn MixedWriter>>;

    /// The name of `key` in the cache; for hangar's samples, named by the records hangar
    /// returns, a placeholder until then.
    fn name(&self, key: Key) -> String;

    /// The value put for `key`, as both views show it.
    fn expected(&self, key: Key, seed: u64) -> Json;

    /// The tool writes `keys` (one session of the tool), through its peer.
    ///
    /// Errors: the tool failed, or did not write what it was given.
    fn tool_write(
        &self,
        tool: &ToolPeer,
        cache: &Path,
        keys: &[Key],
        seed: u64,
    ) -> Fallible<ToolWrite>;

    /// Whether the tool may write into the cache as it is now (DNANet's writer must not open a
    /// finished cache).
    fn tool_may_write(&self, _cache: &Path) -> bool {
        true
    }

    /// What stowage reads: every key it lists, and the tool's samples it reads by name.
    ///
    /// Errors: the cache does not open, or a listed sample does not read.
    fn stowage_view(&self, cache: &Path, ledger: &Ledger) -> Fallible<View>;

    /// What the tool reads, through its peer: everything it lists, or everything in `ledger`
    /// and `stowage` it can be asked for by name.
    ///
    /// Errors: the peer failed, or refused a sample it lists.
    fn tool_view(
        &self,
        tool: &ToolPeer,
        cache: &Path,
        ledger: &Ledger,
        stowage: &View,
    ) -> Fallible<View>;

    /// What a user does before trusting `validate` after a crash, as the crash campaign does:
    /// open the cache for writing and close it, so that recovery rolls an interrupted finalize
    /// forward (its markers) and removes a crashed writer's leftovers. Only where stowage's
    /// files exist: a cache the tool wrote alone is not started here.
    fn recover(&self, _cache: &Path) -> Fallible<()> {
        Ok(())
    }

    /// stowage's `validate(Full)`: no problem, and exactly the tool's data no adopt covers
    /// listed unchecked. Returns the samples validate checked.
    ///
    /// Errors: a problem, or unchecked data that is not as expected, naming both sides.
    fn validate(&self, cache: &Path, ledger: &Ledger) -> Fallible<u64>;

    /// The tool's files that stowage's finalize removes by the tool's own protocol (DNANet's
    /// manifest), which are protected no more from then on.
    fn removed_by_finalize(&self, _cache: &Path) -> Vec<PathBuf> {
        Vec::new()
    }

    /// The tool's own data beyond its samples is as the tool left it (aenet's dataset rows).
    fn check_tool_data(&self, _cache: &Path) -> Fallible<()> {
        Ok(())
    }

    /// Whether stowage reads the cache as finalized.
    fn is_finalized(&self, cache: &Path) -> Fallible<bool>;
}

/// A result whose error is a message for the trial's report.
pub type Fallible<T> = std::result::Result<T, String>;

/// Lower-case hex of `bytes`.
///
/// ```
/// assert_eq!(stowage_reliability::mixed::formats::hex(&[0, 255]), "00ff");
/// ```
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// A tensor as the peers print arrays: numpy's dtype name, shape, C-order little-endian hex.
///
/// ```
/// use stowage_core::Tensor;
/// let t = Tensor::from_slice(&[2], &[1u8, 2]).unwrap();
/// let json = stowage_reliability::mixed::formats::array_json(&t);
/// assert_eq!(json, serde_json::json!({"dtype": "uint8", "shape": [2], "hex": "0102"}));
/// ```
pub fn array_json(tensor: &Tensor) -> Json {
    json!({"dtype": tensor.dtype().name(), "shape": tensor.shape(), "hex": hex(tensor.bytes())})
}

/// The generator of `key`'s value in the trial of `seed`: the same in the parent and the child.
pub fn value_rng(seed: u64, key: Key) -> StdRng {
    let mix = seed
        .wrapping_mul(0x9E37_79B9_7F4A_7C15)
        .wrapping_add(u64::from(key.phase.number()) << 32 | u64::from(key.n));
    StdRng::seed_from_u64(mix)
}

/// Checks which of the tool's keys `validate` lists as unchecked (`got`) against the ledger:
/// every key no adopt covers, and of the keys a killed adopt may have covered none or (where
/// adoption is not `atomic`) some or all. `describe` shows a set of keys in the message.
pub fn check_unchecked_keys(
    got: &BTreeSet<Key>,
    ledger: &Ledger,
    atomic: bool,
    describe: impl Fn(&BTreeSet<Key>) -> String,
) -> Fallible<()> {
    let (must, may) = ledger.unchecked();
    let all: BTreeSet<Key> = must.union(&may).copied().collect();
    let fits = if atomic { *got == must || *got == all } else { got.is_subset(&all) };
    if fits && must.is_subset(got) {
        return Ok(());
    }
    let expected = if may.is_empty() {
        describe(&must)
    } else {
        format!("{} (and maybe {}, adopted by a killed adopt)", describe(&must), describe(&may))
    };
    Err(format!(
        "validate lists as unchecked {}; the tool's data no adopt covers is {expected}",
        describe(got)
    ))
}

/// The problems of a validate report, or nothing.
pub fn no_problems(report: &ValidationReport) -> Fallible<()> {
    if report.problems.is_empty() {
        return Ok(());
    }
    let problems: Vec<String> = report.problems.iter().map(|p| p.to_string()).collect();
    Err(format!("validate(Full) reports: {}", problems.join("; ")))
}

/// The names of `keys` in `ledger`, for messages.
pub fn names_of(ledger: &Ledger, keys: &BTreeSet<Key>) -> String {
    if keys.is_empty() {
        return "nothing".into();
    }
    let names: Vec<&str> =
        keys.iter().filter_map(|k| ledger.entry(*k)).map(|e| e.name.as_str()).collect();
    format!("{} samples [{}]", names.len(), names.join(", "))
}
