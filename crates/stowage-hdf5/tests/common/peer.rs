//! Driving `xtask/py/aenet_peer.py` (aenet-python eb2bca7's torch-cache read and append paths,
//! PyTables and numpy in place of torch) from the tests: arrays travel as dtype, shape and
//! little-endian hex.

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::{Value, json};
use stowage_core::{DType, Tensor};
use stowage_hdf5::{DescriptorCompat, LocalDerivatives, StorageDtype};

/// The peer's source, run with `python3 -c`.
pub const PEER: &str = include_str!("../../../../xtask/py/aenet_peer.py");

/// `python3` with the peer's modules, or `None` (printed as SKIPPED; a failure where
/// `STOWAGE_REQUIRE_PYTHON=1`).
pub fn python(test: &str) -> Option<&'static str> {
    stowage_test_support::python::python_with(test, &["numpy", "tables"])
}

/// Runs `command` of the peer on `file` with `request`; its JSON answer.
pub fn run(python: &str, command: &str, file: &Path, request: &Value) -> Value {
    let out = stowage_test_support::python::run_script(
        python,
        PEER,
        &[command, file.to_str().unwrap()],
        &serde_json::to_vec(request).unwrap(),
        &format!("aenet peer {command} {}", file.display()),
    );
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("peer answer {out:?}: {e}"))
}

/// The peer's descriptor config of `compat` at `dtype`.
pub fn descriptor(compat: &DescriptorCompat, dtype: StorageDtype) -> Value {
    json!({
        "descriptor_class": compat.descriptor_class,
        "species": compat.species,
        "rad_order": compat.rad_order,
        "rad_cutoff": compat.rad_cutoff,
        "ang_order": compat.ang_order,
        "ang_cutoff": compat.ang_cutoff,
        "min_cutoff": compat.min_cutoff,
        "dtype": dtype.name(),
        "device": "cpu",
    })
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// A tensor as the peer's array.
pub fn encode(tensor: &Tensor) -> Value {
    let dtype = match tensor.dtype() {
        DType::F64 => "float64",
        DType::F32 => "float32",
        DType::I64 => "int64",
        other => panic!("the peer takes float and int64 arrays, not {other}"),
    };
    json!({"dtype": dtype, "shape": tensor.shape(), "hex": hex(tensor.bytes())})
}

/// The peer's array as a tensor.
pub fn decode(value: &Value) -> Tensor {
    let dtype = match value["dtype"].as_str().unwrap() {
        "float64" => DType::F64,
        "float32" => DType::F32,
        "int64" => DType::I64,
        other => panic!("unexpected dtype {other}"),
    };
    let shape: Vec<usize> =
        value["shape"].as_array().unwrap().iter().map(|d| d.as_u64().unwrap() as usize).collect();
    let text = value["hex"].as_str().unwrap();
    let bytes: Vec<u8> = (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&text[i..i + 2], 16).unwrap())
        .collect();
    Tensor::new(dtype, shape, bytes).unwrap()
}

/// aenet's append request: features and derivatives per entry.
pub fn append_request(
    descriptor: &Value,
    features: &[(i64, Tensor)],
    derivatives: &[(i64, LocalDerivatives)],
) -> Value {
    let features: Vec<Value> = features
        .iter()
        .map(|(entry, f)| {
            json!({"entry_idx": entry, "n_atoms": f.shape()[0], "features": encode(f)})
        })
        .collect();
    let derivatives: Vec<Value> = derivatives
        .iter()
        .map(|(entry, d)| {
            let arrays: serde_json::Map<String, Value> = d
                .named_arrays()
                .into_iter()
                .map(|(name, t)| (name.to_owned(), t.as_ref().map_or(Value::Null, encode)))
                .collect();
            json!({"entry_idx": entry, "n_atoms": d.n_atoms, "arrays": arrays})
        })
        .collect();
    json!({"descriptor": descriptor, "features": features, "derivatives": derivatives})
}

/// What an entry must read as: its features and derivatives, when cached.
pub type Expected = BTreeMap<i64, (Option<Tensor>, Option<LocalDerivatives>)>;

/// Loads `expected`'s entries with the peer (aenet's loader, `descriptor` or, when null, the
/// one recovered from the file's manifest) and asserts every array equals the expected one;
/// returns the number of arrays compared.
pub fn assert_peer_reads(
    python: &str,
    file: &Path,
    descriptor: &Value,
    expected: &Expected,
) -> usize {
    let entries: Vec<i64> = expected.keys().copied().collect();
    let out = run(python, "load", file, &json!({"descriptor": descriptor, "entries": entries}));
    assert!(out.get("error").is_none(), "aenet refused {}: {}", file.display(), out["error"]);
    let mut compared = 0;
    for (entry, (features, derivatives)) in expected {
        let got = &out["features"][entry.to_string()];
        match features {
            Some(want) => {
                assert_eq!(&decode(got), want, "aenet's features of entry {entry}");
                compared += 1;
            }
            None => assert!(got.is_null(), "entry {entry} has no features, aenet read {got}"),
        }
        let got = &out["derivatives"][entry.to_string()];
        match derivatives {
            Some(want) => {
                for (name, array) in want.named_arrays() {
                    match array {
                        Some(array) => {
                            assert_eq!(decode(&got[name]), array, "entry {entry} {name}")
                        }
                        None => assert!(got[name].is_null(), "entry {entry} {name}"),
                    }
                    compared += 1;
                }
            }
            None => assert!(got.is_null(), "entry {entry} has no derivatives, aenet read {got}"),
        }
    }
    compared
}
