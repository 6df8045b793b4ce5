//! The direct reader's decoding of file bytes, callable without libhdf5: the entry points of the
//! fuzz targets in the workspace's `fuzz/` directory (re-exported, hidden, as
//! `stowage_hdf5::fuzzing`). Each runs the reader's own code on bytes given in memory where the
//! reader would take them from libhdf5 (a chunk's address and filters) and from the file's map.

use super::column_reader::row_object;
use super::filters::Pipeline;
use super::global_heap::GlobalHeap;
use super::{DESCRIPTOR, MAX_CHUNK_BYTES};
use crate::ffi::storage::Filter;

/// Each row's heap object, or what is wrong with it.
pub type Rows<'f> = Vec<Result<&'f [u8], String>>;

/// The data of object `index` of each global heap collection at the byte offsets `lookups` name
/// in `file`, through one heap cache (so later lookups reuse parsed collections), as the mapped
/// file's `heap_object` finds them.
pub fn global_heap_objects<'f>(
    file: &'f [u8],
    lookups: &[(u64, u32)],
) -> Vec<Result<&'f [u8], String>> {
    let heap = GlobalHeap::default();
    lookups.iter().map(|&(at, index)| heap.object(file, at, index)).collect()
}

/// Every row of one stored chunk of a `VLEN` dataset, as the direct reader reads them: `stored`
/// undone through the pipeline of `filters` (`(filter id, client data)`, in write order) with
/// `filter_mask`, to `chunk_rows` descriptors, each row's heap object then taken from `file`
/// (address 0 at byte 0) and checked against its count of `element_size`-byte elements.
///
/// `None` when the reader would leave the dataset to libhdf5 (another filter, a chunk of more
/// than 64 MiB); otherwise the chunk's decoding error or each row's result.
pub fn vlen_chunk_rows<'f>(
    file: &'f [u8],
    filters: &[(i32, Vec<u32>)],
    stored: &[u8],
    filter_mask: u32,
    chunk_rows: u64,
    element_size: usize,
) -> Option<Result<Rows<'f>, String>> {
    let filters: Vec<Filter> = filters
        .iter()
        .map(|(id, client_data)| Filter { id: *id, client_data: client_data.clone() })
        .collect();
    let pipeline = Pipeline::new(&filters)?;
    let chunk_bytes = chunk_rows.checked_mul(DESCRIPTOR as u64)?;
    if chunk_bytes > MAX_CHUNK_BYTES {
        return None;
    }
    let descriptors = match pipeline.decode(stored, filter_mask, chunk_bytes as usize) {
        Ok(descriptors) => descriptors,
        Err(e) => return Some(Err(e)),
    };
    let heap = GlobalHeap::default();
    let rows = (0..chunk_rows)
        .map(|row| {
            let at = row as usize * DESCRIPTOR;
            row_object(row, &descriptors[at..], element_size, |address, index| {
                heap.object(file, address, index)
            })
        })
        .collect();
    Some(Ok(rows))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::direct::filters::tests::shuffle_deflate;
    use crate::direct::global_heap::tests::collection;
    use crate::ffi::storage::{FILTER_DEFLATE, FILTER_SHUFFLE};

    /// Descriptors of rows `(count, address, index)`.
    fn descriptors(rows: &[(u32, u64, u32)]) -> Vec<u8> {
        rows.iter()
            .flat_map(|&(count, address, index)| {
                super::super::Descriptor { count, address, index }.encode()
            })
            .collect()
    }

    #[test]
    fn the_hooks_read_rows_as_the_direct_reader_does() {
        let file = collection(&[(1, b"abcd"), (2, b"efghijkl")], None);
        let found = global_heap_objects(&file, &[(0, 2), (0, 3), (1, 1)]);
        assert_eq!(found[0].as_deref(), Ok(&b"efghijkl"[..]));
        assert!(found[1].as_ref().unwrap_err().contains("holds no object 3"));
        assert!(found[2].is_err());

        let raw = descriptors(&[(1, 0, 1), (0, 0, 0), (2, 0, 2), (3, 0, 2)]);
        let filters = [(FILTER_SHUFFLE, vec![16]), (FILTER_DEFLATE, vec![4])];
        let stored = shuffle_deflate(&raw, 16);
        let rows = vlen_chunk_rows(&file, &filters, &stored, 0, 4, 4).unwrap().unwrap();
        assert_eq!(rows[0].as_deref(), Ok(&b"abcd"[..]));
        assert_eq!(rows[1].as_deref(), Ok(&b""[..]));
        assert_eq!(rows[2].as_deref(), Ok(&b"efghijkl"[..]));
        assert!(rows[3].as_ref().unwrap_err().contains("its 3 elements need 12"));
        assert!(vlen_chunk_rows(&file, &[(32001, vec![])], &stored, 0, 4, 4).is_none());
        assert!(vlen_chunk_rows(&file, &filters, &stored[1..], 0, 4, 4).unwrap().is_err());
    }
}
