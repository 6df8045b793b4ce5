//! Segments stowage writes are read by pyarrow the way torchcachex reads them: `ipc.open_file`,
//! one table, `tensor_keys` from the schema metadata, each tensor rebuilt from its flat values
//! and shape with the dtype of the Arrow column, blobs as the stored bytes.

use std::sync::Arc;

use stowage_arrow::encode::{FieldColumns, arrow_schema};
use stowage_arrow::layout::Layout;
use stowage_arrow::schema_json::OutputStructure;
use stowage_arrow::segment_writer::write_segment;
use stowage_core::bytes::Bytes;
use stowage_core::{DType, Sample, Tensor, Value};

const READER: &str = r#"
import json, sys
import numpy as np
import pyarrow as pa
import pyarrow.ipc

path, expected = sys.argv[1], json.load(sys.stdin)
with pa.memory_map(path, "r") as source:
    table = pa.ipc.open_file(source).read_all()
tensor_keys = json.loads(table.schema.metadata[b"tensor_keys"])
assert tensor_keys == ["feat", "flag", "small"], tensor_keys
assert table.column_names == ["key", "feat_data", "feat_shape", "flag_data", "flag_shape",
                              "small_data", "small_shape", "meta_blob"], table.column_names
rows = table.to_pylist()
assert [r["key"] for r in rows] == [e["key"] for e in expected]
types = {f.name: f.type.value_type for f in table.schema if f.name.endswith("_data")}
for row, want in zip(rows, expected):
    for name in tensor_keys:
        dtype = types[name + "_data"].to_pandas_dtype()
        got = np.array(row[name + "_data"], dtype=dtype).reshape(row[name + "_shape"])
        assert got.dtype == np.dtype(want[name]["dtype"]), (name, got.dtype)
        assert got.tolist() == want[name]["values"], (row["key"], name, got.tolist())
    assert row["meta_blob"] == want["meta"].encode(), row["meta_blob"]
print(len(rows))
"#;

fn sample(i: usize) -> Sample {
    let feat: Vec<f32> = (0..6).map(|j| (i * 6 + j) as f32 / 2.0).collect();
    Sample::new()
        .with("feat", Tensor::from_slice(&[2, 3], &feat).unwrap())
        .with("flag", Tensor::from_bools(&[2], &[i % 2 == 1, true]).unwrap())
        .with("small", Tensor::from_slice(&[], &[i as i8 - 5]).unwrap())
        .with("meta", Value::Bytes(Bytes::from(format!("meta-{i}").into_bytes())))
}

fn expected(i: usize) -> serde_json::Value {
    let feat: Vec<Vec<f64>> =
        (0..2).map(|r| (0..3).map(|c| (i * 6 + r * 3 + c) as f64 / 2.0).collect()).collect();
    serde_json::json!({
        "key": format!("sample-{i}"),
        "feat": {"dtype": "float32", "values": feat},
        "flag": {"dtype": "bool", "values": [i % 2 == 1, true]},
        "small": {"dtype": "int8", "values": i as i64 - 5},
        "meta": format!("meta-{i}"),
    })
}

#[test]
fn pyarrow_reads_a_segment_stowage_wrote() {
    let Some(python) = stowage_conformance::python::python_with(
        "pyarrow_reads_a_segment_stowage_wrote",
        &["numpy", "pyarrow", "pyarrow.ipc"],
    ) else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let layout = Layout::new(tmp.path());
    let fields = vec![
        FieldColumns::Tensor { name: "feat".into(), dtype: DType::F32 },
        FieldColumns::Tensor { name: "flag".into(), dtype: DType::Bool },
        FieldColumns::Tensor { name: "small".into(), dtype: DType::I8 },
        FieldColumns::Blob { name: "meta".into() },
    ];
    let schema = Arc::new(arrow_schema(OutputStructure::Dict, &fields).unwrap());
    let keys: Vec<String> = (0..7).map(|i| format!("sample-{i}")).collect();
    let samples: Vec<Sample> = (0..7).map(sample).collect();
    let rows: Vec<(&str, &Sample)> = keys.iter().map(String::as_str).zip(&samples).collect();
    let path = write_segment(&layout, 0, schema, &fields, &rows).unwrap();

    let expected: Vec<serde_json::Value> = (0..7).map(expected).collect();
    let stdin = serde_json::to_vec(&expected).unwrap();
    let out = stowage_conformance::python::run_script(
        python,
        READER,
        &[path.to_str().unwrap()],
        &stdin,
        "pyarrow read",
    );
    assert_eq!(out, "7");
}
