//! stowage and torchcachex (its peer, `xtask/py/torchcachex_peer.py`) writing the same cache, in
//! both directions, for the tensor, dict and tuple structures:
//!
//! - torchcachex creates the cache, stowage attaches and appends, torchcachex appends again,
//!   stowage adopts torchcachex's segments;
//! - stowage creates the cache, torchcachex opens it (writing `index.pkl`) and appends, stowage
//!   appends, torchcachex appends again.
//!
//! After every step both read every key with the expected value (stowage: dtype, shape and
//! bytes; torchcachex: what `get_batch` returns), keys written again by the other tool included;
//! stowage never changes a segment torchcachex wrote and removes `index.pkl` when it appends.

mod peer;

use std::collections::BTreeMap;
use std::path::Path;

use peer::Peer;
use stowage_arrow::OutputStructure;
use stowage_arrow::test_support::blob_encoding::pickle_bytes;
use stowage_arrow::{ArrowBackend, ArrowOptions, BlobEncoding};
use stowage_core::bytes::Bytes;
use stowage_core::{
    Backend, DType, FieldKind, FieldSpec, OpenMode, Reader, Sample, Schema, ShapeRule, Tensor,
    ValidationLevel, Value,
};

/// What a test writes: the structure and how its samples are made.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Case {
    Tensor,
    Dict,
    Tuple,
}

/// What stowage should read back for value `v` written in `case`, with bytes stored as
/// `encoding` (verbatim: the pickle of the Python bytes); `nulls` makes some values null (a null
/// tensor only where stowage writes it: torchcachex cannot).
fn sample(case: Case, v: usize, encoding: BlobEncoding, nulls: Nulls) -> Sample {
    let floats: Vec<f32> = (0..6).map(|j| (v * 10 + j) as f32 - 0.25).collect();
    let raw = format!("value-{v}").into_bytes();
    let bytes = match (nulls.bytes && v.is_multiple_of(3), encoding) {
        // Python's None given to torchcachex: its pickle, a value like any other when kept
        // verbatim.
        (true, BlobEncoding::VerbatimPickles) => Value::Bytes(Bytes::from_static(
            stowage_arrow::test_support::blob_encoding::PICKLED_NONE,
        )),
        (true, _) => Value::Null,
        (false, BlobEncoding::VerbatimPickles) => Value::Bytes(Bytes::from(pickle_bytes(&raw))),
        (false, _) => Value::Bytes(Bytes::from(raw)),
    };
    match case {
        Case::Tensor => {
            let shapes: [&[usize]; 4] = [&[2, 3], &[5], &[], &[0]];
            let shape = shapes[v % 4];
            let n: usize = shape.iter().product();
            Sample::new().with("tensor", Tensor::from_slice(shape, &floats[..n]).unwrap())
        }
        Case::Dict => {
            let mut sample = Sample::new()
                .with("feat", Tensor::from_slice(&[2, 3], &floats).unwrap())
                .with("meta", bytes)
                .with("idx", Tensor::from_slice(&[3], &[v as i64, -1, i64::MAX]).unwrap());
            if nulls.with_mask {
                let mask = match nulls.tensors && v.is_multiple_of(2) {
                    true => Value::Null,
                    false => Tensor::from_slice(&[2], &[v as u8, 255]).unwrap().into(),
                };
                sample.insert("mask", mask);
            }
            sample
        }
        Case::Tuple => Sample::new()
            .with("item0", Tensor::from_slice(&[v % 6 + 1], &floats[..v % 6 + 1]).unwrap())
            .with("item1", bytes),
    }
}

/// Which values of a sample are null.
#[derive(Debug, Clone, Copy)]
struct Nulls {
    /// The dict has a nullable `mask` tensor (caches stowage creates).
    with_mask: bool,
    /// Some tensors are null (stowage writes them; torchcachex cannot).
    tensors: bool,
    /// Some bytes values are null (Python `None`).
    bytes: bool,
}

const NONE: Nulls = Nulls { with_mask: false, tensors: false, bytes: false };

/// The schema and options of a cache stowage creates for `case`.
fn stowage_schema(case: Case) -> (Schema, ArrowOptions) {
    let nullable_bytes =
        |name: &str| FieldSpec { name: name.into(), kind: FieldKind::Bytes, nullable: true };
    let options = ArrowOptions { rank: Some(0), flush_every: 3, ..ArrowOptions::default() };
    match case {
        Case::Tensor => (Schema::new().tensor("tensor", DType::F32, ShapeRule::Any), options),
        Case::Dict => (
            Schema::new()
                .tensor("feat", DType::F32, ShapeRule::Any)
                .field(nullable_bytes("meta"))
                .tensor("idx", DType::I64, ShapeRule::Fixed(vec![3]))
                .nullable_tensor("mask", DType::U8, ShapeRule::Any),
            options,
        ),
        Case::Tuple => (
            Schema::new()
                .tensor("item0", DType::F32, ShapeRule::Any)
                .field(nullable_bytes("item1")),
            ArrowOptions { output_structure: Some(OutputStructure::Tuple), ..options },
        ),
    }
}

/// The expected content of the cache, and how torchcachex sees it.
struct Model {
    expected: BTreeMap<String, Sample>,
    schema: Schema,
    structure: OutputStructure,
    encoding: BlobEncoding,
}

impl Model {
    /// Writes `values` with torchcachex (as keys `k<v>`), and expects them.
    fn torchcachex_writes(&mut self, peer: &Peer, cache: &Path, case: Case, values: &[usize]) {
        let nulls = Nulls {
            with_mask: self.schema.get("mask").is_some(),
            tensors: false,
            bytes: case == Case::Tuple,
        };
        let mut items = serde_json::Map::new();
        for &v in values {
            let sample = sample(case, v, self.encoding, nulls);
            let given =
                peer::torchcachex_input(&self.schema, self.structure, self.encoding, &sample);
            items.insert(format!("k{v}"), given);
            self.expected.insert(format!("k{v}"), sample);
        }
        peer.append(cache, &items);
    }

    /// Writes `values` with stowage (`writer`), and expects them.
    fn stowage_writes(
        &mut self,
        writer: &mut ArrowBackend,
        case: Case,
        values: &[usize],
        nulls: Nulls,
    ) {
        for &v in values {
            let sample = sample(case, v, self.encoding, nulls);
            writer.put(&format!("k{v}"), &sample).unwrap();
            self.expected.insert(format!("k{v}"), sample);
        }
        writer.flush().unwrap();
    }

    /// Both tools read every key as expected.
    fn check(&self, peer: &Peer, cache: &Path, step: &str) {
        let reader =
            ArrowBackend::open(cache, OpenMode::ReadOnly, ArrowOptions::default()).unwrap();
        let mut keys = reader.keys().unwrap();
        keys.sort();
        assert_eq!(
            keys,
            self.expected.keys().cloned().collect::<Vec<_>>(),
            "{step}: stowage's keys"
        );
        for (key, want) in &self.expected {
            assert_eq!(reader.get(key).unwrap().as_ref(), Some(want), "{step}: stowage's {key}");
        }
        let report = reader.validate(ValidationLevel::Full).unwrap();
        assert!(report.is_undamaged(), "{step}: {:?}", report.problems);
        drop(reader);
        let read = peer.read(cache);
        assert_eq!(read.len(), self.expected.len(), "{step}: torchcachex's keys {read:?}");
        for (key, sample) in &self.expected {
            let want = peer::torchcachex_view(&self.schema, self.structure, self.encoding, sample);
            assert_eq!(read.get(key), Some(&want), "{step}: torchcachex's {key}");
        }
    }
}

/// Every file of `segments/` torchcachex wrote (no stowage sidecar beside it), with its bytes.
fn torchcachex_segments(cache: &Path) -> Vec<(String, Vec<u8>)> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(cache.join("segments")).unwrap().flatten() {
        let path = entry.path();
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.ends_with(".arrow") && !path.with_extension("sums").exists() {
            found.push((name, std::fs::read(&path).unwrap()));
        }
    }
    found.sort();
    found
}

fn torchcachex_first(case: Case) {
    let test = format!("torchcachex writes, stowage appends ({case:?})");
    let Some(peer) = Peer::find(&test) else { return };
    let tmp = tempfile::tempdir().unwrap();
    let cache = tmp.path().join("module");
    let (schema, _) = stowage_schema(case);
    let structure = match case {
        Case::Tensor => OutputStructure::Tensor,
        Case::Dict => OutputStructure::Dict,
        Case::Tuple => OutputStructure::Tuple,
    };
    // torchcachex's schema: no null mask, bytes fields as torchcachex's pickled blobs.
    let mut model = Model {
        expected: BTreeMap::new(),
        schema: Schema { fields: schema.fields.into_iter().filter(|f| f.name != "mask").collect() },
        structure,
        encoding: BlobEncoding::VerbatimPickles,
    };
    model.torchcachex_writes(&peer, &cache, case, &[0, 1, 2, 3]);
    let options = ArrowOptions { rank: Some(0), flush_every: 3, ..ArrowOptions::default() };
    let mut writer = ArrowBackend::attach(&cache, options.clone()).unwrap();
    assert_eq!(writer.output_structure(), structure, "{test}");
    assert_eq!(writer.blob_encoding(), BlobEncoding::VerbatimPickles, "{test}");
    assert_eq!(writer.foreign_segments().len(), 1, "{test}");
    model.schema = writer.schema().clone();
    let before = torchcachex_segments(&cache);
    model.stowage_writes(&mut writer, case, &[2, 3, 4, 5, 6], NONE);
    drop(writer);
    assert!(!cache.join("index.pkl").exists(), "{test}: stale index.pkl");
    assert_eq!(torchcachex_segments(&cache), before, "{test}: torchcachex's segment changed");
    model.check(&peer, &cache, &format!("{test}: after stowage's append"));
    model.torchcachex_writes(&peer, &cache, case, &[4, 7]);
    model.check(&peer, &cache, &format!("{test}: after torchcachex's second append"));
    let before = torchcachex_segments(&cache);
    assert_eq!(before.len(), 2, "{test}");
    let mut writer = ArrowBackend::open(&cache, OpenMode::Append, options).unwrap();
    let report = writer.validate(ValidationLevel::Full).unwrap();
    assert_eq!(report.unchecked.len(), 2, "{test}: {report:?}");
    let adoption = writer.adopt().unwrap();
    assert_eq!(adoption.files.len(), 2, "{test}");
    assert!(writer.validate(ValidationLevel::Full).unwrap().is_clean(), "{test}");
    model.stowage_writes(&mut writer, case, &[0, 8], NONE);
    drop(writer);
    let after: Vec<String> = torchcachex_segments(&cache).into_iter().map(|(n, _)| n).collect();
    assert!(after.is_empty(), "{test}: adopted segments have sidecars now: {after:?}");
    for (name, bytes) in before {
        assert_eq!(std::fs::read(cache.join("segments").join(&name)).unwrap(), bytes, "{name}");
    }
    model.check(&peer, &cache, &format!("{test}: after adoption and another append"));
}

fn stowage_first(case: Case) {
    let test = format!("stowage writes, torchcachex appends ({case:?})");
    let Some(peer) = Peer::find(&test) else { return };
    let tmp = tempfile::tempdir().unwrap();
    let cache = tmp.path().join("module");
    let (schema, options) = stowage_schema(case);
    let nulls = Nulls { with_mask: case == Case::Dict, tensors: true, bytes: case != Case::Tensor };
    let mut writer = ArrowBackend::create(&cache, &schema, options.clone()).unwrap();
    let mut model = Model {
        expected: BTreeMap::new(),
        schema,
        structure: writer.output_structure(),
        encoding: writer.blob_encoding(),
    };
    assert_eq!(model.encoding, BlobEncoding::PickledBytes);
    model.stowage_writes(&mut writer, case, &[0, 1, 2, 3, 4], nulls);
    writer.finalize().unwrap();
    drop(writer);
    // A torchcachex run that only reads writes index.pkl; the next one trusts it.
    peer.open(&cache);
    assert!(cache.join("index.pkl").exists());
    model.torchcachex_writes(&peer, &cache, case, &[3, 5, 6]);
    model.check(&peer, &cache, &format!("{test}: after torchcachex's append"));
    let before = torchcachex_segments(&cache);
    assert_eq!(before.len(), 1, "{test}");
    let mut writer = ArrowBackend::open(&cache, OpenMode::Append, options).unwrap();
    model.stowage_writes(&mut writer, case, &[6, 7, 8], nulls);
    drop(writer);
    assert!(!cache.join("index.pkl").exists(), "{test}: stale index.pkl");
    assert_eq!(torchcachex_segments(&cache), before, "{test}: torchcachex's segment changed");
    model.check(&peer, &cache, &format!("{test}: after stowage's second append"));
    model.torchcachex_writes(&peer, &cache, case, &[1, 9]);
    model.check(&peer, &cache, &format!("{test}: after torchcachex's second append"));
    let reader = ArrowBackend::open(&cache, OpenMode::ReadOnly, ArrowOptions::default()).unwrap();
    let report = reader.validate(ValidationLevel::Full).unwrap();
    assert_eq!(report.unchecked.len(), 2, "{test}: {report:?}");
    assert!(report.unchecked.iter().all(|u| u.writer == "torchcachex"), "{report:?}");
}

#[test]
fn torchcachex_writes_stowage_appends_torchcachex_appends_again_tensor() {
    torchcachex_first(Case::Tensor);
}

#[test]
fn torchcachex_writes_stowage_appends_torchcachex_appends_again_dict() {
    torchcachex_first(Case::Dict);
}

#[test]
fn torchcachex_writes_stowage_appends_torchcachex_appends_again_tuple() {
    torchcachex_first(Case::Tuple);
}

#[test]
fn stowage_writes_torchcachex_appends_stowage_appends_again_tensor() {
    stowage_first(Case::Tensor);
}

#[test]
fn stowage_writes_torchcachex_appends_stowage_appends_again_dict() {
    stowage_first(Case::Dict);
}

#[test]
fn stowage_writes_torchcachex_appends_stowage_appends_again_tuple() {
    stowage_first(Case::Tuple);
}
