//! A cache `ArrowBackend` wrote, read by Python the way torchcachex 0.2 reads one: `schema.json`
//! parsed with torchcachex's type parser and equal to every segment's schema (so torchcachex
//! could go on appending), the key index rebuilt from `segments/segment_*.arrow` in numeric order
//! (no `index.pkl` is written; torchcachex rebuilds a missing one the same way), and every key
//! read with `ipc.open_file` + `take` and rebuilt with the column's dtype, bytes unpickled.

use stowage_arrow::{ArrowBackend, ArrowOptions};
use stowage_core::bytes::Bytes;
use stowage_core::{Backend, DType, Sample, Schema, ShapeRule, Tensor, Value};

const TORCHCACHEX_READER: &str = r#"
import json, pathlib, pickle, sys
import numpy as np
import pyarrow as pa
import pyarrow.ipc

root, expected = pathlib.Path(sys.argv[1]), json.load(sys.stdin)
# torchcachex._parse_arrow_type, for the types stowage writes.
TYPES = {"string": pa.string(), "binary": pa.binary(), "int8": pa.int8(), "int16": pa.int16(),
         "int32": pa.int32(), "int64": pa.int64(), "uint8": pa.uint8(), "float": pa.float32(),
         "double": pa.float64(), "bool": pa.bool_()}
def parse(t):
    return pa.list_(parse(t[5:-1])) if t.startswith("list<") else TYPES.get(t, pa.string())
doc = json.loads((root / "schema.json").read_text())
schema = pa.schema([pa.field(f["name"], parse(f["type"])) for f in doc["fields"]])
structure = doc["output_structure"]
index = {}
segments = sorted(root.glob("segments/segment_*.arrow"), key=lambda p: int(p.stem.split("_")[1]))
assert segments and all(p.suffix == ".arrow" for p in segments), segments
for path in segments:
    with pa.memory_map(str(path), "r") as source:
        table = pa.ipc.open_file(source).read_all()
    assert table.schema.remove_metadata().equals(schema), (path, table.schema, schema)
    for key, got in doc["metadata"].items():
        assert table.schema.metadata[key.encode()].decode() == got, key
    for row, key in enumerate(table.column("key").to_pylist()):
        index[key] = (path, row)
assert sorted(index) == sorted(expected), (sorted(index), sorted(expected))
tensor_keys = json.loads(doc["metadata"]["tensor_keys"]) if structure == "dict" else ["tensor"]
for key, want in expected.items():
    path, row = index[key]
    with pa.memory_map(str(path), "r") as source:
        table = pa.ipc.open_file(source).read_all().take([row])
    record = {name: table.column(name)[0].as_py() for name in table.column_names}
    for name in tensor_keys:
        prefix = "" if structure == "tensor" else name + "_"
        dtype = table.schema.field(prefix + "data").type.value_type.to_pandas_dtype()
        value = np.array(record[prefix + "data"], dtype=dtype).reshape(record[prefix + "shape"])
        assert value.dtype == np.dtype(want[name]["dtype"]), (key, name, value.dtype)
        assert value.tolist() == want[name]["values"], (key, name, value.tolist())
    for name, blob in want.get("blobs", {}).items():
        # torchcachex's pickle.loads of the stored pickle of Python bytes.
        assert pickle.loads(record[name + "_blob"]) == bytes.fromhex(blob), (key, name)
print(len(expected))
"#;

fn run(cache_dir: &std::path::Path, expected: &serde_json::Value, test: &str) {
    let Some(python) =
        stowage_test_support::python::python_with(test, &["numpy", "pyarrow", "pyarrow.ipc"])
    else {
        return;
    };
    let stdin = serde_json::to_vec(expected).unwrap();
    let out = stowage_test_support::python::run_script(
        python,
        TORCHCACHEX_READER,
        &[cache_dir.to_str().unwrap()],
        &stdin,
        test,
    );
    assert_eq!(out, expected.as_object().unwrap().len().to_string());
}

#[test]
fn torchcachex_reads_a_dict_cache_stowage_wrote() {
    let dir = tempfile::tempdir().unwrap();
    let schema = Schema::new()
        .tensor("feat", DType::F32, ShapeRule::Any)
        .tensor("label", DType::I64, ShapeRule::Fixed(vec![]))
        .bytes("meta");
    let options =
        ArrowOptions { flush_every: 8, merge_after: 2, rank: Some(0), ..Default::default() };
    let mut cache = ArrowBackend::create(dir.path(), &schema, options).unwrap();
    let mut expected = serde_json::Map::new();
    // 40 keys, each written twice (the second value wins), across several segments.
    for round in 0..2 {
        for i in 0..40 {
            let value = i + 100 * round;
            let feat: Vec<f32> = (0..6).map(|j| (value * 6 + j) as f32 / 4.0).collect();
            let meta = format!("meta-{value}").into_bytes();
            let sample = Sample::new()
                .with("feat", Tensor::from_slice(&[2, 3], &feat).unwrap())
                .with("label", Tensor::from_slice(&[], &[value as i64]).unwrap())
                .with("meta", Value::Bytes(Bytes::from(meta.clone())));
            cache.put(&format!("k{i}"), &sample).unwrap();
            let rows: Vec<Vec<f64>> =
                feat.chunks(3).map(|r| r.iter().map(|&v| v as f64).collect()).collect();
            let hex: String = meta.iter().map(|b| format!("{b:02x}")).collect();
            expected.insert(
                format!("k{i}"),
                serde_json::json!({
                    "feat": {"dtype": "float32", "values": rows},
                    "label": {"dtype": "int64", "values": value},
                    "blobs": {"meta": hex},
                }),
            );
        }
    }
    cache.finalize().unwrap();
    drop(cache);
    run(
        dir.path(),
        &serde_json::Value::Object(expected),
        "torchcachex_reads_a_dict_cache_stowage_wrote",
    );
}

#[test]
fn torchcachex_reads_a_tensor_cache_stowage_wrote() {
    let dir = tempfile::tempdir().unwrap();
    let schema = Schema::new().tensor("tensor", DType::F64, ShapeRule::Any);
    let options = ArrowOptions { flush_every: 5, rank: Some(0), ..Default::default() };
    let mut cache = ArrowBackend::create(dir.path(), &schema, options).unwrap();
    let mut expected = serde_json::Map::new();
    for i in 0..23usize {
        let values: Vec<f64> = (0..i % 4 + 1).map(|j| (i * 10 + j) as f64).collect();
        let tensor = Tensor::from_slice(&[values.len()], &values).unwrap();
        cache.put(&format!("t{i:03}"), &Sample::new().with("tensor", tensor)).unwrap();
        expected.insert(
            format!("t{i:03}"),
            serde_json::json!({"tensor": {"dtype": "float64", "values": values}}),
        );
    }
    cache.flush().unwrap();
    drop(cache);
    run(
        dir.path(),
        &serde_json::Value::Object(expected),
        "torchcachex_reads_a_tensor_cache_stowage_wrote",
    );
}
