//! The reference caches torchcachex wrote (`../shared/reference/torchcachex`): every `schema.json`
//! reads back with the types of its own Arrow files and writes back byte for byte, and every
//! cache's segments are listed in numeric order.

use stowage_arrow::test_support::layout::Layout;
use stowage_arrow::test_support::schema_json::{ColumnType, OutputStructure, SchemaJson};
use stowage_core::DType;
use stowage_test_support::reference::reference_set;

#[test]
fn every_reference_schema_json_parses_and_round_trips() {
    let Some(set) = reference_set("torchcachex") else { return };
    let caches = set.join("caches");
    let mut seen = 0;
    for entry in std::fs::read_dir(&caches).unwrap() {
        let layout = Layout::new(entry.unwrap().path());
        let Some(schema) = SchemaJson::read(&layout.schema()).unwrap() else {
            panic!("{} has no schema.json", layout.root().display());
        };
        assert_eq!(schema.fields[0].name, "key");
        assert_eq!(schema.fields[0].column_type, ColumnType::String);
        let written = std::fs::read(layout.schema()).unwrap();
        assert_eq!(
            String::from_utf8(schema.to_json()).unwrap(),
            String::from_utf8(written).unwrap(),
            "{}",
            layout.root().display()
        );
        let segments = layout.list_segments().unwrap();
        assert!(!segments.is_empty(), "{}", layout.root().display());
        assert!(segments.windows(2).all(|w| w[0].0 < w[1].0));
        seen += 1;
    }
    assert_eq!(seen, 8, "the set holds eight caches");
}

#[test]
fn float16_and_dict_metadata_read_as_torchcachex_wrote_them() {
    let Some(set) = reference_set("torchcachex") else { return };
    let read = |name: &str| {
        SchemaJson::read(&Layout::new(set.join("caches").join(name)).schema()).unwrap().unwrap()
    };
    let f16 = read("tensor_f16");
    assert_eq!(f16.output_structure, OutputStructure::Tensor);
    assert_eq!(f16.fields[1].column_type, ColumnType::List(DType::F16));
    assert_eq!(f16.metadata["torch_dtype"], "torch.float16");
    let dict = read("dict_mixed");
    assert_eq!(dict.output_structure, OutputStructure::Dict);
    assert_eq!(dict.metadata["tensor_keys"], r#"["feat", "label"]"#);
    let names: Vec<&str> = dict.fields.iter().map(|f| f.name.as_str()).collect();
    assert_eq!(names, ["key", "feat_data", "feat_shape", "meta_blob", "label_data", "label_shape"]);
    assert_eq!(read("tuple_mixed").output_structure, OutputStructure::Tuple);
    assert_eq!(read("list_tensors").output_structure, OutputStructure::List);
    let orphan = Layout::new(set.join("caches").join("tensor_orphan")).list_segments().unwrap();
    assert_eq!(orphan.iter().map(|(id, _)| *id).collect::<Vec<_>>(), [0, 1, 2]);
}

/// Every key of every reference cache reads back the value the manifest describes: tensors with
/// the dtype, shape and bytes of the expected `.npy`, pickled values as the exact stored bytes.
/// This covers the deleted index, the orphaned segment, duplicate keys and float16.
#[test]
fn every_reference_key_reads_back_its_expected_value() {
    use stowage_arrow::CacheReader;
    use stowage_core::Value;
    let Some(set) = reference_set("torchcachex") else { return };
    let text = std::fs::read_to_string(set.join("manifest.json")).unwrap();
    let manifest: serde_json::Value = serde_json::from_str(&text).unwrap();
    let mut checked = 0;
    for (name, cache) in manifest["caches"].as_object().unwrap() {
        let reader = CacheReader::open(set.join("caches").join(name)).unwrap();
        let report = reader.validate().unwrap();
        assert!(report.is_clean(), "{name}: {:?}", report.problems);
        let keys = cache["keys"].as_object().unwrap();
        assert_eq!(reader.len(), keys.len(), "{name}");
        for (key, described) in keys {
            let sample = reader.get(key).unwrap().unwrap_or_else(|| panic!("{name}/{key} missing"));
            let leaves = described["leaves"].as_array().unwrap();
            assert_eq!(sample.fields().count(), leaves.len(), "{name}/{key}");
            for leaf in leaves {
                let field = leaf["name"].as_str().unwrap_or("tensor");
                let expected =
                    std::fs::read(set.join(leaf["expected_file"].as_str().unwrap())).unwrap();
                match (leaf["kind"].as_str().unwrap(), sample.get(field)) {
                    ("tensor", Some(Value::Tensor(tensor))) => {
                        let header = stowage_core::npy_header::parse(&expected).unwrap();
                        assert_eq!(tensor.dtype(), header.dtype, "{name}/{key}/{field}");
                        assert_eq!(tensor.shape(), header.shape.as_slice(), "{name}/{key}/{field}");
                        assert_eq!(
                            tensor.bytes(),
                            &expected[header.data_offset..],
                            "{name}/{key}/{field}"
                        );
                        if header.dtype != DType::Bool {
                            assert!(tensor.is_zero_copy(), "{name}/{key}/{field} shares the map");
                        }
                    }
                    ("pickle_blob", Some(Value::Bytes(bytes))) => {
                        assert_eq!(&bytes[..], expected.as_slice(), "{name}/{key}/{field}");
                    }
                    (kind, got) => panic!("{name}/{key}/{field}: {kind} read as {got:?}"),
                }
                checked += 1;
            }
        }
    }
    assert!(checked > 40, "only {checked} values checked");
}

/// Every reference cache is recognized as torchcachex's and opens through the factory as a
/// reader that agrees with the segments' reader key by key, one by one and in a batch, with a
/// schema that holds every value read (any shape, nullable) and no claim of checksums.
#[test]
fn every_reference_cache_opens_through_the_factory_as_torchcachex() {
    use stowage_arrow::CacheReader;
    use stowage_arrow::{ArrowFactory, TORCHCACHEX};
    use stowage_core::{BackendFactory, ValidationLevel};
    let Some(set) = reference_set("torchcachex") else { return };
    let factory = ArrowFactory::default();
    let mut caches = 0;
    for entry in std::fs::read_dir(set.join("caches")).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        assert_eq!(factory.recognize(&path).unwrap(), Some(&TORCHCACHEX), "{name}");
        let reader = factory.open_reader(&path).unwrap();
        assert_eq!((reader.format().id, reader.name()), ("torchcachex", "arrow"), "{name}");
        assert!(!reader.is_finalized() && !reader.capabilities().checksums, "{name}");
        let segments = CacheReader::open(&path).unwrap();
        let keys = segments.keys().unwrap();
        assert_eq!(reader.keys().unwrap(), keys, "{name}");
        assert_eq!(reader.len(), segments.len(), "{name}");
        let wanted: Vec<&str> = keys.iter().rev().map(String::as_str).collect();
        let batch = reader.get_batch(&wanted).unwrap();
        for (key, got) in wanted.iter().zip(batch) {
            let expected = segments.get(key).unwrap();
            assert!(expected.is_some(), "{name}/{key}");
            assert_eq!(got, expected, "{name}/{key}");
            let sample = got.unwrap();
            reader.schema().validate(&sample).unwrap_or_else(|e| panic!("{name}/{key}: {e}"));
            assert!(reader.contains(key).unwrap(), "{name}/{key}");
        }
        assert!(reader.get("not a key").unwrap().is_none());
        // Every row decodes (no problem), but torchcachex wrote no checksums: the whole cache
        // is listed as unchecked and never reported clean.
        let report = reader.validate(ValidationLevel::Full).unwrap();
        let decoded = segments.validate().unwrap();
        assert!(decoded.problems.is_empty(), "{name}: {decoded:?}");
        assert_eq!(report.problems, decoded.problems, "{name}");
        assert!(report.is_undamaged() && !report.is_clean(), "{name}: {report:?}");
        assert_eq!(report.unchecked.len(), 1, "{name}: {report:?}");
        assert_eq!(report.unchecked[0].writer, "torchcachex", "{name}");
        assert_eq!(report.unchecked[0].samples, reader.len() as u64, "{name}");
        caches += 1;
    }
    assert_eq!(caches, 8, "the set holds eight caches");
}

/// torchcachex's recovery rules, on a copy of a reference cache: a garbage `schema.json` (its
/// reader raises on every read), no `index.pkl` and a leftover `.tmp` segment change nothing.
#[test]
fn damaged_metadata_and_leftovers_do_not_hide_the_data() {
    use stowage_arrow::CacheReader;
    let Some(set) = reference_set("torchcachex") else { return };
    for name in ["dict_mixed", "tuple_mixed", "tensor_f32"] {
        let original = CacheReader::open(set.join("caches").join(name)).unwrap();
        let tmp = tempfile::tempdir().unwrap();
        let copy = tmp.path().join(name);
        stowage_conformance::corrupt::copy_tree(&set.join("caches").join(name), &copy).unwrap();
        std::fs::write(copy.join("schema.json"), b"{\"fields\": oops").unwrap();
        let _ = std::fs::remove_file(copy.join("index.pkl"));
        std::fs::write(copy.join("segments/segment_000009.arrow.tmp"), b"half a segment").unwrap();
        let damaged = CacheReader::open(&copy).unwrap();
        assert_eq!(damaged.len(), original.len(), "{name}");
        for key in original.keys().unwrap() {
            let key = key.as_str();
            assert_eq!(damaged.get(key).unwrap(), original.get(key).unwrap(), "{name}/{key}");
        }
    }
}

/// The columns and metadata stowage writes for a cache are torchcachex's own: for each reference
/// cache, the segment schema built from its fields gives back its `schema.json` byte for byte
/// (`tensor_keys` and `torch_dtype` included).
#[test]
fn segment_schemas_stowage_builds_describe_as_torchcachex_wrote_them() {
    use stowage_arrow::BlobEncoding;
    use stowage_arrow::test_support::encode::{FieldColumns, arrow_schema};
    let Some(set) = reference_set("torchcachex") else { return };
    for entry in std::fs::read_dir(set.join("caches")).unwrap() {
        let layout = Layout::new(entry.unwrap().path());
        let written = std::fs::read(layout.schema()).unwrap();
        let schema = SchemaJson::read(&layout.schema()).unwrap().unwrap();
        let structure = schema.output_structure;
        let fields: Vec<FieldColumns> = schema
            .fields
            .iter()
            .filter_map(|f| {
                let name = if structure == OutputStructure::Tensor {
                    (f.name == "data").then(|| "tensor".to_owned())
                } else {
                    f.name.strip_suffix("_data").map(str::to_owned)
                };
                match (name, &f.column_type, f.name.strip_suffix("_blob")) {
                    (Some(name), ColumnType::List(dtype), _) => {
                        Some(FieldColumns::Tensor { name, dtype: *dtype, null_column: false })
                    }
                    (_, ColumnType::Binary, Some(blob)) => Some(FieldColumns::Blob {
                        name: blob.to_owned(),
                        encoding: BlobEncoding::VerbatimPickles,
                        null_column: false,
                    }),
                    _ => None,
                }
            })
            .collect();
        let built = arrow_schema(structure, &fields);
        let described = SchemaJson::describe(structure, &built).unwrap();
        assert_eq!(
            String::from_utf8(described.to_json()).unwrap(),
            String::from_utf8(written).unwrap(),
            "{}",
            layout.root().display()
        );
    }
}
