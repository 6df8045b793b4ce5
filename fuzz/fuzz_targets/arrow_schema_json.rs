//! torchcachex's `schema.json` (`stowage_arrow::fuzzing::schema_json::SchemaJson::parse`). A schema that
//! parses is written back (`to_json`) to text that parses to the same schema, and each column type
//! string survives `ColumnType::parse` and `type_string`.
#![no_main]

use libfuzzer_sys::fuzz_target;
use stowage_arrow::fuzzing::schema_json::{ColumnType, SchemaJson};

fuzz_target!(|data: &[u8]| {
    let path = std::path::Path::new("schema.json");
    let Ok(schema) = SchemaJson::parse(data, path) else { return };
    let again = SchemaJson::parse(&schema.to_json(), path).expect("written schema.json parses");
    assert_eq!(again.fields, schema.fields);
    assert_eq!(again.output_structure, schema.output_structure);
    for field in &schema.fields {
        let text = field.column_type.type_string();
        assert_eq!(ColumnType::parse(&text), field.column_type, "{text:?}");
    }
});
