//! HDF5 global heap collections as stowage's direct reader parses them
//! (`stowage_hdf5::fuzzing::global_heap_objects`, the private parser behind every variable-length
//! row read): a hostile file, looked up at the collection offset and object index the input's
//! first 12 bytes give and at every `GCOL` signature in the file, through one heap cache. An
//! object returned lies inside the file.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let mut fields = stowage_fuzz::Fields::new(data);
    let (at, index) = (fields.u64(), fields.u32());
    let file = fields.rest();
    let mut lookups = vec![(at, index), (at, index.wrapping_add(1))];
    let signatures = file.windows(4).enumerate().filter(|(_, w)| *w == b"GCOL").map(|(i, _)| i);
    for offset in signatures.take(8) {
        lookups.extend((0..4).map(|object| (offset as u64, object)));
    }
    let range = file.as_ptr_range();
    for found in stowage_hdf5::fuzzing::global_heap_objects(file, &lookups).into_iter().flatten() {
        assert!(found.is_empty() || range.contains(&found.as_ptr()));
        assert!(found.as_ptr_range().end <= range.end);
    }
});
