//! How a cache maps samples to torchcachex's columns, recorded in its commit log: the output
//! structure (tuple and list caches, a structure that does not fit refused naming both sides),
//! the blob encoding (verbatim pickles checked at `put`), and caches written before commit log
//! version 3, which keep reading and appending raw bytes.

use std::sync::Arc;

use stowage_arrow::test_support::blob_encoding::pickle_bytes;
use stowage_arrow::test_support::commit_log::{
    self, CacheHeader, ColumnChoices, Record, SegmentEntry,
};
use stowage_arrow::test_support::encode::{arrow_schema, legacy_columns};
use stowage_arrow::test_support::layout::Layout;
use stowage_arrow::test_support::schema_json::{OutputStructure, SchemaJson};
use stowage_arrow::test_support::segment_writer::{SegmentFormat, write_segment};
use stowage_arrow::{ArrowBackend, ArrowOptions, BlobEncoding};
use stowage_core::bytes::Bytes;
use stowage_core::file_safety::AppendLog;
use stowage_core::{
    Backend, DType, Error, FieldKind, FieldSpec, OpenMode, Reader, Sample, Schema, ShapeRule,
    Tensor, ValidationLevel, Value,
};

fn options() -> ArrowOptions {
    ArrowOptions { rank: Some(0), ..ArrowOptions::default() }
}

#[test]
fn tuple_and_list_structures_are_recorded_and_a_misfit_is_refused_naming_both_sides() {
    let pair = Schema::new().tensor("item0", DType::F32, ShapeRule::Any).bytes("item1");
    for structure in [OutputStructure::Tuple, OutputStructure::List] {
        let dir = tempfile::tempdir().unwrap();
        let chosen = ArrowOptions { output_structure: Some(structure), ..options() };
        let cache = ArrowBackend::create(dir.path(), &pair, chosen).unwrap();
        assert_eq!(cache.output_structure(), structure);
        drop(cache);
        let schema_json = SchemaJson::read(&dir.path().join("schema.json")).unwrap().unwrap();
        assert_eq!(schema_json.output_structure, structure);
        assert!(schema_json.metadata.is_empty(), "torchcachex's tuples carry no metadata");
        // Recorded in the log: every later open reads it so, whatever its options say.
        let reader = ArrowBackend::open(dir.path(), OpenMode::ReadOnly, options()).unwrap();
        assert_eq!(reader.output_structure(), structure);
        assert_eq!(reader.reader().output_structure().unwrap(), structure);
    }
    let misfits = [
        (Schema::new().tensor("x", DType::F32, ShapeRule::Any), OutputStructure::Tuple, "\"x\""),
        (
            Schema::new().tensor("item0", DType::F32, ShapeRule::Any).json("item1", false),
            OutputStructure::List,
            "JSON",
        ),
        (
            Schema::new().tensor("x", DType::F32, ShapeRule::Any),
            OutputStructure::Tensor,
            "\"tensor\"",
        ),
        (
            Schema::new().tensor("blob", DType::F32, ShapeRule::Any),
            OutputStructure::Blob,
            "bytes field",
        ),
    ];
    for (schema, structure, needle) in misfits {
        let dir = tempfile::tempdir().unwrap();
        let chosen = ArrowOptions { output_structure: Some(structure), ..options() };
        let err = ArrowBackend::create(dir.path(), &schema, chosen).unwrap_err();
        assert!(matches!(err, Error::InvalidArgument { .. }), "{err}");
        let text = err.to_string();
        assert!(text.contains(structure.name()) && text.contains(needle), "{text}");
        let names: Vec<&str> = schema.fields.iter().map(|f| f.name.as_str()).collect();
        assert!(text.contains(&format!("{names:?}")), "the schema's side is named: {text}");
        assert!(!dir.path().join("stowage.log").exists(), "a refused create wrote files");
    }
}

#[test]
fn verbatim_pickles_are_checked_at_put_and_kept_byte_for_byte() {
    let dir = tempfile::tempdir().unwrap();
    let schema = Schema::new().tensor("x", DType::F32, ShapeRule::Any).field(FieldSpec {
        name: "meta".into(),
        kind: FieldKind::Bytes,
        nullable: true,
    });
    let verbatim = ArrowOptions { blob_encoding: BlobEncoding::VerbatimPickles, ..options() };
    let mut cache = ArrowBackend::create(dir.path(), &schema, verbatim).unwrap();
    assert_eq!(cache.blob_encoding(), BlobEncoding::VerbatimPickles);
    let x = Tensor::from_slice(&[1], &[1f32]).unwrap();
    let with = |meta: Value| Sample::new().with("x", x.clone()).with("meta", meta);
    for bad in [&b""[..], b"raw bytes", b"\x80\x04N"] {
        let err = cache.put("bad", &with(Value::Bytes(Bytes::copy_from_slice(bad)))).unwrap_err();
        assert!(matches!(err, Error::SchemaMismatch { .. }), "{err}");
        assert!(err.to_string().contains("\"bad\"") && err.to_string().contains("meta"), "{err}");
    }
    assert!(!cache.contains("bad").unwrap(), "a refused put was kept");
    // A pickle of an object (not bytes) is kept as it is: verbatim means verbatim.
    let object = b"\x80\x04\x95\x07\0\0\0\0\0\0\0\x8c\x03abc\x94.".to_vec();
    cache.put("object", &with(Value::Bytes(Bytes::from(object.clone())))).unwrap();
    cache.put("none", &with(Value::Null)).unwrap();
    cache.put("bytes", &with(Value::Bytes(Bytes::from(pickle_bytes(b"b"))))).unwrap();
    cache.finalize().unwrap();
    drop(cache);
    let reader = ArrowBackend::open(dir.path(), OpenMode::ReadOnly, options()).unwrap();
    assert_eq!(
        reader.get("object").unwrap().unwrap().get("meta"),
        Some(&Value::Bytes(Bytes::from(object)))
    );
    assert_eq!(reader.get("none").unwrap().unwrap().get("meta"), Some(&Value::Null));
    assert!(reader.validate(ValidationLevel::Full).unwrap().is_clean());
    let err = ArrowBackend::create(
        tempfile::tempdir().unwrap().path(),
        &schema,
        ArrowOptions { blob_encoding: BlobEncoding::Raw, ..options() },
    )
    .unwrap_err();
    assert!(err.to_string().contains("Raw"), "{err}");
}

/// A cache stowage wrote before commit log version 3 (raw bytes, Arrow nulls, `[]` / `[]` for a
/// null tensor), built here as that version wrote it: it reads as it always did, an append keeps
/// its layout, and rows that layout cannot store in a form torchcachex reads are refused.
#[test]
fn caches_written_before_version_3_keep_reading_and_refuse_rows_torchcachex_cannot_read() {
    let dir = tempfile::tempdir().unwrap();
    let layout = Layout::new(dir.path());
    let schema = Schema::new().nullable_tensor("ann", DType::I8, ShapeRule::Any).field(FieldSpec {
        name: "meta".into(),
        kind: FieldKind::Bytes,
        nullable: true,
    });
    let (structure, fields) = legacy_columns(&schema);
    let arrow = Arc::new(arrow_schema(structure, &fields));
    std::fs::create_dir_all(layout.segments_dir()).unwrap();
    let described = SchemaJson::describe(structure, &arrow).unwrap();
    std::fs::write(layout.schema(), described.to_json()).unwrap();
    let format = SegmentFormat::new(layout.clone(), arrow, fields);
    let raw = Bytes::from_static(b"raw, not a pickle");
    let a = Sample::new().with("ann", Value::Null).with("meta", Value::Bytes(raw.clone()));
    let b = Sample::new()
        .with("ann", Tensor::from_slice(&[2], &[-1i8, 5]).unwrap())
        .with("meta", Value::Null);
    let path = write_segment(&format, 0, &[("a", &a), ("b", &b)]).unwrap();
    let header = CacheHeader {
        version: 2,
        extension: ColumnChoices::default(),
        ..commit_log::new_header(schema.clone(), structure, BlobEncoding::Raw)
    };
    let (mut log, _) = AppendLog::open(layout.commit_log(), true).unwrap();
    log.append(&Record::Cache(header).to_bytes()).unwrap();
    let bytes = std::fs::metadata(&path).unwrap().len();
    log.append(&Record::Segment(SegmentEntry::synced(0, 2, bytes)).to_bytes()).unwrap();
    log.sync().unwrap();
    drop(log);

    let mut cache = ArrowBackend::open(dir.path(), OpenMode::Append, options()).unwrap();
    assert_eq!(cache.blob_encoding(), BlobEncoding::Raw);
    assert_eq!(cache.get("a").unwrap(), Some(a.clone()));
    assert_eq!(cache.get("b").unwrap(), Some(b.clone()));
    // Rows torchcachex could not read in this layout are refused, not written.
    let tensor = Tensor::from_slice(&[1], &[3i8]).unwrap();
    let refused = [
        Sample::new()
            .with("ann", Value::Null)
            .with("meta", Value::Bytes(pickle_bytes(b"p").into())),
        Sample::new().with("ann", tensor.clone()).with("meta", Value::Null),
        Sample::new().with("ann", tensor.clone()).with("meta", Value::Bytes(raw.clone())),
    ];
    for sample in refused {
        let err = cache.put("refused", &sample).unwrap_err();
        assert!(matches!(err, Error::Unsupported { .. }), "{err}");
        assert!(
            err.to_string().contains("\"refused\"") && err.to_string().contains("version 2"),
            "{err}"
        );
    }
    assert!(!cache.contains("refused").unwrap());
    let c = Sample::new().with("ann", tensor).with("meta", Value::Bytes(pickle_bytes(b"p").into()));
    cache.put("c", &c).unwrap();
    cache.flush().unwrap();
    drop(cache);
    let log = commit_log::read(&layout.commit_log()).unwrap();
    assert_eq!(log.header.version, 2, "an append keeps the cache's version");
    let reader = ArrowBackend::open(dir.path(), OpenMode::ReadOnly, options()).unwrap();
    for (key, sample) in [("a", &a), ("b", &b), ("c", &c)] {
        assert_eq!(reader.get(key).unwrap().as_ref(), Some(sample), "{key}");
    }
    assert!(reader.validate(ValidationLevel::Full).unwrap().is_clean());
}
