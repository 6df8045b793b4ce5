//! The record payloads of each backend's append log, past the framing (whose checksums a random
//! input never passes, so `append_log` cannot reach them): the Arrow and HDF5 commit logs
//! (`commit_log::interpret`), the npy key index (`KeyIndex::from_log`, for a schema of a fixed
//! and a variable field) and the example journal's records (`record::Record::decode`). Input: the
//! records, each a `u16` length and its bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;
use std::path::Path;
use stowage_core::file_safety::Recovered;
use stowage_npy::fuzzing::{FieldShape, KeyIndex};

fuzz_target!(|data: &[u8]| {
    let mut fields = stowage_fuzz::Fields::new(data);
    let mut records = Vec::new();
    while !fields.is_empty() {
        let len = usize::from(fields.u16());
        records.push(fields.bytes(len).to_vec());
    }
    let path = Path::new("stowage.log");
    let recovered = Recovered { records, valid_len: 0, dropped_tail_bytes: 0, damage: None };
    let _ = stowage_arrow::fuzzing::commit_log::interpret(path, &recovered);
    let _ = stowage_hdf5::fuzzing::interpret(path, &recovered);
    let shapes = vec![FieldShape::Fixed(vec![4, 3]), FieldShape::Varying(2)];
    let _ = KeyIndex::from_log(&recovered.records, shapes, path);
    for record in &recovered.records {
        let _ = stowage_example::fuzzing::Record::decode(record);
    }
});
