//! Caches stowage writes are read by plain numpy + xxhash the way hangar reads them: every record
//! string parses, `np.load(path, mmap_mode="r")` gives the right dtype and slot shape, the slot's
//! corner hashes to the record's checksum, and the values equal what was put.

use stowage_core::{Backend, DType, Sample, Schema, ShapeRule, Tensor};
use stowage_npy::{NpyBackend, NpyOptions};

/// Samples covering each numpy dtype, fixed and variable shapes, 0-d and zero-length dimensions.
fn samples() -> (Schema, Vec<(String, Sample)>) {
    let schema = Schema::new()
        .tensor("f4", DType::F32, ShapeRule::Fixed(vec![3, 2]))
        .tensor("u1", DType::U8, ShapeRule::Max(vec![4, 3]))
        .tensor("i8", DType::I64, ShapeRule::Fixed(vec![]))
        .tensor("f2", DType::F16, ShapeRule::Fixed(vec![5]))
        .tensor("b1", DType::Bool, ShapeRule::Max(vec![2, 2]))
        .tensor("u4", DType::U32, ShapeRule::Fixed(vec![2]))
        .tensor("i2", DType::I16, ShapeRule::Max(vec![6]));
    let mut out = Vec::new();
    for i in 0..25usize {
        let rows = i % 5; // 0..4, so some samples have a zero-length first dimension
        let half: Vec<stowage_core::half::f16> =
            (0..5).map(|j| stowage_core::half::f16::from_f32((i * 5 + j) as f32 / 3.0)).collect();
        let sample = Sample::new()
            .with(
                "f4",
                Tensor::from_slice(&[3, 2], &[i as f32, -0.0, f32::NAN, 1e-40, 2.5, -1.0]).unwrap(),
            )
            .with(
                "u1",
                Tensor::from_slice(
                    &[rows, 3],
                    &(0..rows * 3).map(|v| (v + i) as u8).collect::<Vec<_>>(),
                )
                .unwrap(),
            )
            .with("i8", Tensor::scalar(i64::MIN + i as i64))
            .with("f2", Tensor::from_slice(&[5], &half).unwrap())
            .with("b1", Tensor::from_bools(&[1, 2], &[i.is_multiple_of(2), true]).unwrap())
            .with("u4", Tensor::from_slice(&[2], &[u32::MAX - i as u32, i as u32]).unwrap())
            .with(
                "i2",
                Tensor::from_slice(
                    &[i % 7],
                    &(0..i % 7).map(|v| -(v as i16) * 300).collect::<Vec<_>>(),
                )
                .unwrap(),
            );
        out.push((format!("key-{i}"), sample));
    }
    (schema, out)
}

#[test]
fn numpy_and_xxhash_read_every_record_stowage_wrote() {
    let Some(python) = stowage_test_support::python::python_with(
        "numpy_and_xxhash_read_every_record_stowage_wrote",
        &["numpy", "xxhash"],
    ) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let (schema, samples) = samples();
    // Small collections, so the 25 samples rotate through several files per field.
    let options = NpyOptions { collection_size: 7, ..NpyOptions::default() };
    let mut cache = NpyBackend::create(dir.path(), &schema, options).unwrap();
    for (key, sample) in &samples {
        cache.put(key, sample).unwrap();
    }
    cache.finalize().unwrap();

    // One case per (key, field): the record string, numpy's dtype str and the expected bytes.
    let mut cases = Vec::new();
    for (key, sample) in &samples {
        for field in &schema.fields {
            let record = cache.record(key, &field.name).unwrap().to_string();
            let tensor = sample.tensor(&field.name).unwrap();
            let descr = tensor.dtype().numpy_descr().unwrap();
            let hex: String = tensor.bytes().iter().map(|b| format!("{b:02x}")).collect();
            cases.push(serde_json::json!([record, descr, hex]));
        }
    }
    let script = r#"
import json, os, sys
import numpy as np, xxhash
root, cases = sys.argv[1], json.load(sys.stdin)
maps = {}
for record, descr, hex_bytes in cases:
    code, uid, checksum, idx, dims = record.split(":", 4)
    assert code == "10", record
    shape = tuple(int(d) for d in dims.split(" ")) if dims else ()
    if uid not in maps:
        assert os.path.exists(os.path.join(root, "store_data", "10", uid + ".npy")), "no committed marker for " + uid
        maps[uid] = np.load(os.path.join(root, "data", "10", uid + ".npy"), mmap_mode="r")
    mm = maps[uid]
    assert mm.dtype.str == descr, (record, mm.dtype.str, descr)
    assert mm.ndim == len(shape) + 1, (record, mm.shape)
    # np.array, not ascontiguousarray: the latter turns a 0-d sample into shape (1,).
    sample = np.array(mm[(int(idx),) + tuple(slice(0, d) for d in shape)], order="C", copy=True)
    assert sample.shape == shape, (record, sample.shape)
    assert xxhash.xxh64_hexdigest(sample.tobytes()) == checksum, ("checksum", record)
    assert sample.tobytes().hex() == hex_bytes, ("bytes", record)
print(len(cases))
"#;
    let stdin = serde_json::to_vec(&cases).unwrap();
    let args = [dir.path().to_str().unwrap()];
    let out = stowage_test_support::python::run_script(
        python,
        script,
        &args,
        &stdin,
        "numpy/xxhash read",
    );
    assert_eq!(out, cases.len().to_string());
}
