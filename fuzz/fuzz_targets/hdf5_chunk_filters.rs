//! A stored chunk of a variable-length HDF5 dataset as stowage's direct reader decodes it
//! (`stowage_hdf5::fuzzing::vlen_chunk_rows`): the chunk undone through a shuffle and deflate
//! pipeline (each variant libhdf5 and PyTables store, chosen by the input), its 16-byte row
//! descriptors then resolved to global heap objects of a hostile file and checked against their
//! element counts. Input: pipeline selector, filter mask (u32), rows per chunk (u16), element
//! size selector, stored chunk length (u32), the stored chunk, then the file.
#![no_main]

use libfuzzer_sys::fuzz_target;
use stowage_hdf5::fuzzing::{FILTER_DEFLATE, FILTER_SHUFFLE};

fuzz_target!(|data: &[u8]| {
    let mut fields = stowage_fuzz::Fields::new(data);
    let pipeline = fields.u8();
    let filter_mask = fields.u32();
    let chunk_rows = u64::from(fields.u16() % 4096).max(1);
    let element_size = [1, 2, 4, 8][usize::from(fields.u8() % 4)];
    let stored_len = fields.u32() as usize;
    let stored = fields.bytes(stored_len);
    let file = fields.rest();
    let filters: Vec<(i32, Vec<u32>)> = match pipeline % 7 {
        0 => vec![(FILTER_DEFLATE, vec![4])],
        1 => vec![(FILTER_SHUFFLE, vec![]), (FILTER_DEFLATE, vec![4])],
        2 => vec![(FILTER_SHUFFLE, vec![16]), (FILTER_DEFLATE, vec![9])],
        3 => vec![(FILTER_SHUFFLE, vec![u32::from(pipeline)])],
        4 => vec![],
        5 => vec![(FILTER_DEFLATE, vec![])],
        _ => vec![(32001, vec![])],
    };
    let decoded = stowage_hdf5::fuzzing::vlen_chunk_rows(
        file,
        &filters,
        stored,
        filter_mask,
        chunk_rows,
        element_size,
    );
    if let Some(Ok(rows)) = decoded {
        assert_eq!(rows.len() as u64, chunk_rows);
        for row in rows.into_iter().flatten() {
            assert_eq!(row.len() % element_size, 0);
        }
    }
});
