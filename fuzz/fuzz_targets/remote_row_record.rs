//! stowage-remote's row records and row tables as an object store serves them: a hostile record
//! decodes to a sample that fits the schema, or to an error, never a panic; a hostile row table
//! parses or is refused, and every entry of one that parses can be read and looked up; a hostile
//! keys object parses to the count it must hold or is refused.
#![no_main]

use libfuzzer_sys::fuzz_target;
use stowage_core::bytes::Bytes;
use stowage_core::{DType, Schema, ShapeRule};
use stowage_remote::part::parse_keys;
use stowage_remote::row_record::decode;
use stowage_remote::row_table::RowTable;

fuzz_target!(|data: &[u8]| {
    let schema = Schema::new()
        .tensor("x", DType::F32, ShapeRule::Fixed(vec![2, 2]))
        .nullable_tensor("ragged", DType::I16, ShapeRule::RaggedLeading(vec![3]))
        .bytes("raw")
        .json("meta", false);
    if let Ok(sample) = decode(&schema, "fuzz://record", "key", Bytes::copy_from_slice(data)) {
        schema.validate(&sample).expect("a decoded record fits the schema");
    }
    if let Ok(table) = RowTable::parse("fuzz://table", Bytes::copy_from_slice(data)) {
        for i in 0..table.len() {
            let entry = table.entry(i);
            let _ = table.find(entry.key_hash);
        }
    }
    let expected = u64::from(data.first().copied().unwrap_or(0) % 4);
    if let Ok(keys) = parse_keys("fuzz://keys", data, expected) {
        assert_eq!(keys.len() as u64, expected, "a keys object holds the count it must");
    }
});
