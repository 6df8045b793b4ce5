//! The `.npy` header parser (`stowage_core::npy_header::parse`) on a whole hostile file, then the
//! collection reader over it (`CollectionFile::open` and every slot at the full slot shape), as
//! the npy backend reads collection files. A header that parses must say what it was written
//! from: writing its dtype and shape back and parsing again gives the same dtype and shape.
#![no_main]

use libfuzzer_sys::fuzz_target;
use stowage_core::npy_header::{parse, write_header};
use stowage_npy::fuzzing::CollectionFile;

fuzz_target!(|data: &[u8]| {
    let Ok(header) = parse(data) else { return };
    header.data_len().expect("parse checks the data length");
    let again = parse(&write_header(header.dtype, &header.shape)).expect("a written header parses");
    assert_eq!((again.dtype, &again.shape), (header.dtype, &header.shape));

    let path = stowage_fuzz::write_scratch("collection.npy", data);
    let Ok(collection) = CollectionFile::open(&path) else { return };
    let slot = collection.slot_shape().to_vec();
    for index in 0..collection.rows().min(64) as u64 {
        let _ = collection.read_slot(index, &slot, None);
        let _ = collection.read_slot(index, &slot, Some(0));
    }
});
