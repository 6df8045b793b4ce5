//! The torchcachex peer (`xtask/py/torchcachex_peer.py`: torchcachex 0.2's read and write paths,
//! numpy for torch) driven from the tests, and the values it is given and returns, as JSON.
#![allow(dead_code)] // each test crate uses part of it

use std::collections::BTreeMap;
use std::path::Path;

use serde_json::{Value as Json, json};
use stowage_arrow::BlobEncoding;
use stowage_arrow::OutputStructure;
use stowage_arrow::test_support::blob_encoding::unpickle_bytes;
use stowage_core::{DType, FieldKind, Sample, Schema, Tensor, Value};

/// The peer, run with `python3`.
pub struct Peer {
    python: &'static str,
    script: String,
    test: String,
}

impl Peer {
    /// The peer, or `None` (a visible SKIPPED, or a panic when Python is required) when
    /// `python3` lacks numpy or pyarrow.
    pub fn find(test: &str) -> Option<Peer> {
        let python =
            stowage_test_support::python::python_with(test, &["numpy", "pyarrow", "pyarrow.ipc"])?;
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../xtask/py/torchcachex_peer.py");
        let script = std::fs::read_to_string(path).expect("xtask/py/torchcachex_peer.py");
        Some(Peer { python, script, test: test.to_owned() })
    }

    fn run(&self, args: &[&str], stdin: &Json) -> Json {
        let what = format!("{}: torchcachex peer {args:?}", self.test);
        let stdin = serde_json::to_vec(stdin).unwrap();
        let out = stowage_test_support::python::run_script(
            self.python,
            &self.script,
            args,
            &stdin,
            &what,
        );
        serde_json::from_str(&out).unwrap_or_else(|e| panic!("{what}: {e}: {out}"))
    }

    /// torchcachex's `put_batch(items)`, `flush()`, then the backend destroyed.
    pub fn append(&self, cache: &Path, items: &serde_json::Map<String, Json>) {
        let out = self.run(&["append", cache.to_str().unwrap()], &Json::Object(items.clone()));
        assert_eq!(out["appended"], items.len(), "{out}");
    }

    /// Every key torchcachex's index holds, read with `get_batch([key])` one by one: {key:
    /// value} (a value that raised is `{"error": ...}`). The backend is then destroyed, which
    /// writes `index.pkl`.
    pub fn read(&self, cache: &Path) -> BTreeMap<String, Json> {
        let out = self.run(&["read", cache.to_str().unwrap()], &Json::Null);
        let values = out["values"].as_object().expect("values").clone();
        values.into_iter().collect()
    }

    /// torchcachex constructed and destroyed: a run that only opened the cache.
    pub fn open(&self, cache: &Path) {
        assert_eq!(self.run(&["open", cache.to_str().unwrap()], &Json::Null)["opened"], true);
    }
}

/// A tensor as the peer's JSON: numpy dtype name, shape, C-order little-endian bytes in hex.
/// A bfloat16 tensor is its bits, as torchcachex reads them (`uint16`).
pub fn tensor_json(tensor: &Tensor) -> Json {
    let dtype = match tensor.dtype() {
        DType::BF16 => "uint16",
        other => other.name(),
    };
    json!({"tensor": {"dtype": dtype, "shape": tensor.shape(), "hex": hex(tensor.bytes())}})
}

/// Lower-case hex of `bytes`.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// One field's value as torchcachex returns it from a cache stowage writes with `encoding`: a
/// null tensor is an empty tensor of shape (0,), a null bytes value `None`.
fn field_json(schema: &Schema, name: &str, value: Option<&Value>, encoding: BlobEncoding) -> Json {
    let spec = schema.get(name).expect("a schema field");
    match (value, &spec.kind) {
        (Some(Value::Tensor(tensor)), _) => tensor_json(tensor),
        (None | Some(Value::Null), FieldKind::Tensor { dtype, .. }) => {
            let empty = Tensor::zeros(*dtype, &[0]).unwrap();
            tensor_json(&empty)
        }
        (None | Some(Value::Null), _) => json!({"none": null}),
        (Some(Value::Bytes(bytes)), _) => match encoding {
            BlobEncoding::PickledBytes => json!({"bytes": hex(bytes)}),
            // The tests store pickles of Python bytes verbatim.
            _ => match unpickle_bytes(bytes).expect("a pickle of bytes") {
                Some(inner) => json!({"bytes": hex(inner)}),
                None => json!({"none": null}),
            },
        },
        (Some(other), _) => panic!("{name}: {other:?} has no torchcachex form in these tests"),
    }
}

/// A sample as torchcachex returns it from a cache stowage writes (`schema`, `structure`,
/// `encoding`); JSON fields are not part of it (torchcachex skips their column).
pub fn torchcachex_view(
    schema: &Schema,
    structure: OutputStructure,
    encoding: BlobEncoding,
    sample: &Sample,
) -> Json {
    let field = |name: &str| field_json(schema, name, sample.get(name), encoding);
    let non_json = schema.fields.iter().filter(|f| !matches!(f.kind, FieldKind::Json { .. }));
    match structure {
        OutputStructure::Tensor => field("tensor"),
        OutputStructure::Blob => field("blob"),
        OutputStructure::Dict => {
            let entries: serde_json::Map<String, Json> =
                non_json.map(|f| (f.name.clone(), field(&f.name))).collect();
            json!({"dict": entries})
        }
        OutputStructure::Tuple => {
            json!({"tuple": non_json.map(|f| field(&f.name)).collect::<Vec<_>>()})
        }
        OutputStructure::List => {
            json!({"list": non_json.map(|f| field(&f.name)).collect::<Vec<_>>()})
        }
    }
}

/// What to give torchcachex's `put_batch` so that stowage reads `sample` back from a cache of
/// `encoding` (bytes given as Python bytes; for verbatim pickles, `sample` holds pickles of
/// Python bytes, which torchcachex writes again byte for byte).
pub fn torchcachex_input(
    schema: &Schema,
    structure: OutputStructure,
    encoding: BlobEncoding,
    sample: &Sample,
) -> Json {
    torchcachex_view(schema, structure, encoding, sample)
}
