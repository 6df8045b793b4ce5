//! Segments stowage writes are read by pyarrow the way torchcachex reads them: `ipc.open_file`,
//! one table, `tensor_keys` from the schema metadata, each tensor rebuilt from its flat values
//! and shape with the dtype of the Arrow column, blobs as the stored bytes. What torchcachex
//! cannot express reads back losslessly too: bfloat16 as its raw bits named by the field's
//! `stowage_dtype` metadata, JSON as a utf8 column (an Arrow null for a null value). Compressed
//! segments (LZ4, ZSTD) read the same way.

use std::sync::Arc;

use stowage_arrow::Compression;
use stowage_arrow::OutputStructure;
use stowage_arrow::test_support::encode::{FieldColumns, arrow_schema};
use stowage_arrow::test_support::layout::Layout;
use stowage_arrow::test_support::segment_writer::{SegmentFormat, write_segment};
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
assert tensor_keys == ["feat", "flag", "small", "brain"], tensor_keys
assert table.column_names == ["key", "feat_data", "feat_shape", "flag_data", "flag_shape",
                              "small_data", "small_shape", "brain_data", "brain_shape",
                              "meta_blob", "info_json"], table.column_names
brain = table.schema.field("brain_data")
assert brain.metadata == {b"stowage_dtype": b"bfloat16"}, brain.metadata
assert brain.type.value_type == pa.uint16(), brain.type
rows = table.to_pylist()
assert [r["key"] for r in rows] == [e["key"] for e in expected]
types = {f.name: f.type.value_type for f in table.schema if f.name.endswith("_data")}
for row, want in zip(rows, expected):
    for name in tensor_keys:
        dtype = types[name + "_data"].to_pandas_dtype()
        got = np.array(row[name + "_data"], dtype=dtype).reshape(row[name + "_shape"])
        if name == "brain":  # bfloat16 bits are the high half of a float32
            got = (got.astype(np.uint32) << 16).view(np.float32)
        assert got.dtype == np.dtype(want[name]["dtype"]), (name, got.dtype)
        assert got.tolist() == want[name]["values"], (row["key"], name, got.tolist())
    assert row["meta_blob"] == want["meta"].encode(), row["meta_blob"]
    info = row["info_json"]
    assert (info if info is None else json.loads(info)) == want["info"], (row["key"], info)
print(len(rows))
"#;

fn sample(i: usize) -> Sample {
    let feat: Vec<f32> = (0..6).map(|j| (i * 6 + j) as f32 / 2.0).collect();
    Sample::new()
        .with("feat", Tensor::from_slice(&[2, 3], &feat).unwrap())
        .with("flag", Tensor::from_bools(&[2], &[i % 2 == 1, true]).unwrap())
        .with("small", Tensor::from_slice(&[], &[i as i8 - 5]).unwrap())
        .with("brain", Tensor::from_slice(&[2], &brain_values(i)).unwrap())
        .with("meta", Value::Bytes(Bytes::from(format!("meta-{i}").into_bytes())))
        .with("info", info(i).map_or(Value::Null, |v| Value::Json(v.to_string())))
}

/// bfloat16 values exact in both bfloat16 and float32.
fn brain_values(i: usize) -> [stowage_core::half::bf16; 2] {
    [i as f32 + 0.5, -(i as f32) * 256.0].map(stowage_core::half::bf16::from_f32)
}

/// The JSON of sample `i`; every third sample has none (null).
fn info(i: usize) -> Option<serde_json::Value> {
    (!i.is_multiple_of(3)).then(|| serde_json::json!({"index": i, "tags": ["a", i.to_string()]}))
}

fn expected(i: usize) -> serde_json::Value {
    let feat: Vec<Vec<f64>> =
        (0..2).map(|r| (0..3).map(|c| (i * 6 + r * 3 + c) as f64 / 2.0).collect()).collect();
    serde_json::json!({
        "key": format!("sample-{i}"),
        "feat": {"dtype": "float32", "values": feat},
        "flag": {"dtype": "bool", "values": [i % 2 == 1, true]},
        "small": {"dtype": "int8", "values": i as i64 - 5},
        "brain": {"dtype": "float32", "values": brain_values(i).map(|v| v.to_f64())},
        "meta": format!("meta-{i}"),
        "info": info(i),
    })
}

#[test]
fn pyarrow_reads_segments_stowage_wrote() {
    let Some(python) = stowage_test_support::python::python_with(
        "pyarrow_reads_segments_stowage_wrote",
        &["numpy", "pyarrow", "pyarrow.ipc"],
    ) else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let layout = Layout::new(tmp.path());
    let fields = vec![
        FieldColumns::Tensor { name: "feat".into(), dtype: DType::F32, null_column: false },
        FieldColumns::Tensor { name: "flag".into(), dtype: DType::Bool, null_column: false },
        FieldColumns::Tensor { name: "small".into(), dtype: DType::I8, null_column: false },
        FieldColumns::Tensor { name: "brain".into(), dtype: DType::BF16, null_column: false },
        FieldColumns::Blob {
            name: "meta".into(),
            encoding: stowage_arrow::BlobEncoding::Raw,
            null_column: false,
        },
        FieldColumns::Json { name: "info".into() },
    ];
    let schema = Arc::new(arrow_schema(OutputStructure::Dict, &fields));
    let keys: Vec<String> = (0..7).map(|i| format!("sample-{i}")).collect();
    let samples: Vec<Sample> = (0..7).map(sample).collect();
    let rows: Vec<(&str, &Sample)> = keys.iter().map(String::as_str).zip(&samples).collect();
    let expected: Vec<serde_json::Value> = (0..7).map(expected).collect();
    let stdin = serde_json::to_vec(&expected).unwrap();
    // Uncompressed as torchcachex writes, then with each IPC compression codec.
    let mut format = SegmentFormat::new(layout, schema, fields);
    for (id, compression) in
        [None, Some(Compression::Lz4), Some(Compression::Zstd)].into_iter().enumerate()
    {
        format.compression = compression;
        let path = write_segment(&format, id as u64, &rows).unwrap();
        let out = stowage_test_support::python::run_script(
            python,
            READER,
            &[path.to_str().unwrap()],
            &stdin,
            &format!("pyarrow read of a segment compressed with {compression:?}"),
        );
        assert_eq!(out, "7", "{compression:?}");
    }
}

/// stowage's pickle of Python bytes is byte for byte CPython's `pickle.dumps(b)` (protocol 4,
/// the default through 3.13), across the size classes (short, 4-byte length, unframed past 64
/// KiB); `pickle.loads` gives the bytes back, and `None` pickles the same too.
#[test]
fn pickled_bytes_are_cpythons_pickle_dumps() {
    let test = "pickled_bytes_are_cpythons_pickle_dumps";
    let Some(python) = stowage_test_support::python::python_with(test, &["pickle"]) else { return };
    let sizes = [0usize, 1, 255, 256, 65_535, 65_536, 65_537, 300_000];
    let script = r#"
import json, pickle, sys
sizes = json.load(sys.stdin)
out = [pickle.dumps(bytes((i * 7) % 256 for i in range(n)), protocol=4).hex() for n in sizes]
print(json.dumps({"bytes": out, "none": pickle.dumps(None, protocol=4).hex()}))
"#;
    let stdin = serde_json::to_vec(&sizes).unwrap();
    let out = stowage_test_support::python::run_script(python, script, &[], &stdin, test);
    let out: serde_json::Value = serde_json::from_str(&out).unwrap();
    let hex = |bytes: &[u8]| bytes.iter().map(|b| format!("{b:02x}")).collect::<String>();
    for (n, expected) in sizes.iter().zip(out["bytes"].as_array().unwrap()) {
        let value: Vec<u8> = (0..*n).map(|i| ((i * 7) % 256) as u8).collect();
        let pickle = stowage_arrow::test_support::blob_encoding::pickle_bytes(&value);
        assert_eq!(hex(&pickle), expected.as_str().unwrap(), "{n} bytes");
    }
    assert_eq!(
        hex(stowage_arrow::test_support::blob_encoding::PICKLED_NONE),
        out["none"].as_str().unwrap()
    );
}
