//! The reference caches torchcachex wrote (`../shared/reference/torchcachex`): every `schema.json`
//! reads back with the types of its own Arrow files and writes back byte for byte, and every
//! cache's segments are listed in numeric order.

use stowage_arrow::layout::Layout;
use stowage_arrow::schema_json::{ColumnType, OutputStructure, SchemaJson};
use stowage_conformance::reference::reference_set;
use stowage_core::DType;

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
