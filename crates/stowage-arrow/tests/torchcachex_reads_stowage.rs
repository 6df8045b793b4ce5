//! Every row stowage writes decodes in torchcachex's read path (its peer's `get_batch` and
//! `_deserialize_sample`: `np.array(data).reshape(tuple(shape))`, `pickle.loads(blob)`) with the
//! expected value, for every dtype, output structure, nullable combination and blob encoding
//! stowage writes: null tensors read as empty tensors of shape (0,), null bytes as `None`,
//! bytes as Python `bytes`, bfloat16 as its uint16 bits, empty and large bytes values. stowage
//! reads every value back exactly. A pickle of another object in a bytes column is refused, not
//! returned as bytes.

mod peer;

use peer::Peer;
use stowage_arrow::OutputStructure;
use stowage_arrow::test_support::blob_encoding::pickle_bytes;
use stowage_arrow::{ArrowBackend, ArrowOptions, BlobEncoding};
use stowage_core::bytes::Bytes;
use stowage_core::{
    Backend, DType, Error, FieldKind, FieldSpec, OpenMode, Reader, Sample, Schema, ShapeRule,
    Tensor, ValidationLevel, Value,
};

fn options() -> ArrowOptions {
    ArrowOptions { rank: Some(0), flush_every: 4, ..ArrowOptions::default() }
}

fn nullable(name: &str, kind: FieldKind) -> FieldSpec {
    FieldSpec { name: name.into(), kind, nullable: true }
}

/// A tensor of `dtype` and `shape` whose bytes vary with `seed` (any bit pattern: torchcachex
/// moves bytes, never interprets them, except bool, which is 0 or 1).
fn tensor(dtype: DType, shape: &[usize], seed: usize) -> Tensor {
    let n: usize = shape.iter().product();
    if dtype == DType::Bool {
        let flags: Vec<bool> = (0..n).map(|i| (i + seed).is_multiple_of(3)).collect();
        return Tensor::from_bools(shape, &flags).unwrap();
    }
    let mut bytes: Vec<u8> =
        (0..n * dtype.item_size()).map(|i| (i * 31 + seed * 7) as u8).collect();
    if matches!(dtype, DType::F16 | DType::BF16 | DType::F32 | DType::F64) {
        // Keep floats finite and NaN-free: numpy's NaN payloads survive, but a test failure
        // message comparing NaNs would mislead.
        for chunk in bytes.chunks_mut(dtype.item_size()) {
            let last = chunk.len() - 1;
            chunk[last] &= 0x3f;
        }
    }
    Tensor::new(dtype, shape.to_vec(), bytes).unwrap()
}

/// Writes `samples` into a new cache of `schema` with `options`, then checks that stowage reads
/// each back exactly and that torchcachex reads each as `torchcachex_view` says.
fn round_trip(peer: &Peer, test: &str, schema: &Schema, options: ArrowOptions, samples: &[Sample]) {
    let tmp = tempfile::tempdir().unwrap();
    let cache = tmp.path().join("module");
    let mut writer = ArrowBackend::create(&cache, schema, options).unwrap();
    let (structure, encoding) = (writer.output_structure(), writer.blob_encoding());
    for (i, sample) in samples.iter().enumerate() {
        writer.put(&format!("k{i:02}"), sample).unwrap();
    }
    writer.finalize().unwrap();
    drop(writer);
    let reader = ArrowBackend::open(&cache, OpenMode::ReadOnly, ArrowOptions::default()).unwrap();
    assert!(reader.validate(ValidationLevel::Full).unwrap().is_clean(), "{test}");
    let read = peer.read(&cache);
    assert_eq!(read.len(), samples.len(), "{test}: torchcachex's keys");
    for (i, sample) in samples.iter().enumerate() {
        let key = format!("k{i:02}");
        let mut want = sample.clone();
        for field in &schema.fields {
            if want.get(&field.name).is_none() {
                want.insert(field.name.as_str(), Value::Null); // absent is null
            }
        }
        let want = Sample::from_iter(
            schema.fields.iter().map(|f| (f.name.as_str(), want.get(&f.name).unwrap().clone())),
        );
        assert_eq!(reader.get(&key).unwrap().as_ref(), Some(&want), "{test}: stowage's {key}");
        let view = peer::torchcachex_view(schema, structure, encoding, &want);
        assert_eq!(read.get(&key), Some(&view), "{test}: torchcachex's {key}");
    }
}

#[test]
fn every_dtype_structure_and_null_stowage_writes_decodes_in_torchcachex() {
    let test = "every dtype, structure and null stowage writes decodes in torchcachex";
    let Some(peer) = Peer::find(test) else { return };
    // Dict: every dtype as a nullable tensor, nullable bytes, JSON (which torchcachex skips).
    let mut schema = Schema::new();
    for dtype in DType::ALL {
        let shape = ShapeRule::Any;
        schema = schema.field(nullable(dtype.name(), FieldKind::Tensor { dtype, shape }));
    }
    let schema = schema
        .field(nullable("meta", FieldKind::Bytes))
        .field(nullable("info", FieldKind::Json { deduplicate: false }));
    let shapes: [&[usize]; 5] = [&[2, 3], &[], &[0], &[1, 0, 2], &[7]];
    let samples: Vec<Sample> = (0..10)
        .map(|i| {
            let mut sample = Sample::new();
            for (d, dtype) in DType::ALL.into_iter().enumerate() {
                if (i + d) % 4 != 0 {
                    sample.insert(dtype.name(), tensor(dtype, shapes[(i + d) % 5], i));
                } // else absent: null
            }
            let meta = match i % 4 {
                0 => Value::Null,
                1 => Value::Bytes(Bytes::new()),
                2 => Value::Bytes(Bytes::from(vec![0xab; 70_000])), // unframed pickle
                _ => Value::Bytes(Bytes::from(format!("raw bytes {i}, not a pickle").into_bytes())),
            };
            sample.insert("meta", meta);
            let info = (i % 2 == 0).then(|| Value::Json(format!("{{\"i\": {i}}}")));
            sample.insert("info", info.unwrap_or(Value::Null));
            sample
        })
        .collect();
    round_trip(&peer, &format!("{test}: dict"), &schema, options(), &samples);

    // Tensor structure, nullable.
    let schema = Schema::new().nullable_tensor("tensor", DType::F64, ShapeRule::Any);
    let samples: Vec<Sample> = (0..5)
        .map(|i| match i % 3 {
            0 => Sample::new(),
            _ => Sample::new().with("tensor", tensor(DType::F64, shapes[i % 5], i)),
        })
        .collect();
    round_trip(&peer, &format!("{test}: tensor"), &schema, options(), &samples);

    // Tuple and list structures, nullable items.
    for structure in [OutputStructure::Tuple, OutputStructure::List] {
        let schema = Schema::new()
            .field(nullable(
                "item0",
                FieldKind::Tensor { dtype: DType::Bool, shape: ShapeRule::Any },
            ))
            .field(nullable("item1", FieldKind::Bytes))
            .tensor("item2", DType::I32, ShapeRule::Any);
        let samples: Vec<Sample> = (0..6)
            .map(|i| {
                let mut sample = Sample::new();
                if i % 3 != 0 {
                    sample.insert("item0", tensor(DType::Bool, shapes[i % 5], i));
                }
                if i % 2 == 0 {
                    sample.insert("item1", Value::Bytes(Bytes::from(vec![i as u8; i])));
                }
                sample.with("item2", tensor(DType::I32, &[i], i))
            })
            .collect();
        let options = ArrowOptions { output_structure: Some(structure), ..options() };
        round_trip(&peer, &format!("{test}: {}", structure.name()), &schema, options, &samples);
    }

    // Blob structure.
    let schema = Schema::new().bytes("blob");
    let samples: Vec<Sample> = (0..3)
        .map(|i| Sample::new().with("blob", Value::Bytes(Bytes::from(vec![i as u8; 3]))))
        .collect();
    round_trip(&peer, &format!("{test}: blob"), &schema, options(), &samples);

    // Verbatim pickles: each value already a pickle; a null is marked in the null column.
    let schema = Schema::new()
        .tensor("x", DType::F32, ShapeRule::Any)
        .field(nullable("meta", FieldKind::Bytes));
    let samples: Vec<Sample> = (0..6)
        .map(|i| {
            let sample = Sample::new().with("x", tensor(DType::F32, &[2], i));
            match i % 3 {
                0 => sample,
                1 => sample.with("meta", Value::Bytes(Bytes::from(pickle_bytes(&[i as u8; 5])))),
                // The pickle of None is a value here (torchcachex returns None for it too).
                _ => sample.with("meta", Value::Bytes(Bytes::from_static(b"\x80\x04N."))),
            }
        })
        .collect();
    let options = ArrowOptions { blob_encoding: BlobEncoding::VerbatimPickles, ..options() };
    round_trip(&peer, &format!("{test}: verbatim pickles"), &schema, options, &samples);
}

/// torchcachex appends a `str` where stowage's bytes field is: stowage refuses to read it as
/// bytes (`Unsupported`, naming the key, field and what it found), `validate` reports it, and
/// `adopt` adopts nothing; torchcachex reads it.
#[test]
fn a_pickle_of_another_object_in_a_bytes_column_is_unsupported_never_bytes() {
    let test = "a pickle of another object in a bytes column is unsupported";
    let Some(peer) = Peer::find(test) else { return };
    let tmp = tempfile::tempdir().unwrap();
    let cache = tmp.path().join("module");
    let schema = Schema::new().tensor("x", DType::F32, ShapeRule::Any).bytes("meta");
    let mut writer = ArrowBackend::create(&cache, &schema, options()).unwrap();
    let x = Tensor::from_slice(&[1], &[1.5f32]).unwrap();
    writer
        .put(
            "mine",
            &Sample::new()
                .with("x", x.clone())
                .with("meta", Value::Bytes(Bytes::from_static(b"b"))),
        )
        .unwrap();
    writer.finalize().unwrap();
    drop(writer);
    let mut items = serde_json::Map::new();
    let given = serde_json::json!({"dict": {"x": peer::tensor_json(&x), "meta": {"str": "a str"}}});
    items.insert("theirs".into(), given);
    peer.append(&cache, &items);
    let mut writer = ArrowBackend::open(&cache, OpenMode::Append, options()).unwrap();
    let err = writer.get("theirs").unwrap_err();
    assert!(matches!(err, Error::Unsupported { .. }), "{err}");
    let text = err.to_string();
    for needle in ["\"theirs\"", "\"meta\"", "a pickled str", "segment_000001.arrow"] {
        assert!(text.contains(needle), "{needle} not in: {text}");
    }
    assert_eq!(
        writer.get("mine").unwrap().unwrap().get("meta"),
        Some(&Value::Bytes(Bytes::from_static(b"b")))
    );
    let report = writer.validate(ValidationLevel::Full).unwrap();
    assert_eq!(report.problems.len(), 1, "{report:?}");
    assert!(report.problems[0].detail.contains("a pickled str"), "{report:?}");
    assert_eq!(report.unchecked.len(), 1);
    let refused = writer.adopt().unwrap_err();
    assert!(matches!(refused, Error::Unsupported { .. }), "{refused}");
    drop(writer);
    let after = ArrowBackend::open(&cache, OpenMode::ReadOnly, options()).unwrap();
    assert_eq!(after.foreign_segments().len(), 1, "a failed adoption adopted something");
    let read = peer.read(&cache);
    assert_eq!(read["theirs"]["dict"]["meta"], serde_json::json!({"str": "a str"}));
}
