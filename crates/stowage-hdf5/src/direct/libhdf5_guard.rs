//! What stowage checks before libhdf5 reads variable-length rows (`H5Dread`, the fallback and
//! cross-check read path): the global heap references libhdf5 will follow.
//!
//! libhdf5 trusts them. `H5T__vlen_disk_read` hands a row's descriptor (element count, heap
//! collection address, object index) to `H5HG_read`, which indexes the collection's object table
//! with the object index unchecked and copies the object's stored size into a buffer sized from
//! the descriptor's count; parsing the collection, it steps through objects by their stored sizes
//! without bounds (a zero-sized free-space object loops forever). One changed byte of a file no
//! stowage checksum covers (aenet's, PyTables') makes it read through a null or wild pointer.
//!
//! So before libhdf5 reads rows, stowage decodes their descriptors itself, from the same bytes
//! (libhdf5's own file descriptor, read with `pread`), through the same chunk index lookup and
//! filters libhdf5 applies, and checks each reference with the direct reader's bounds-checked
//! parser: the collection lies in the file and parses as libhdf5 will walk it, the object exists,
//! and its size is the descriptor's count of stored elements. A row that fails is refused before
//! libhdf5 sees it. Layouts stowage cannot decode (filters other than shuffle and deflate,
//! contiguous or compact storage, a non-POSIX driver, 4-byte addresses, elements that hold
//! references themselves) are refused the same way: nothing unchecked reaches `H5HG_read`.

use std::fs::File;

use hdf5_sys::h5i::hid_t;
use memmap2::Mmap;

use super::filters::{MAX_INFLATE_RATIO, Pipeline};
use super::global_heap::GlobalHeap;
use super::{DESCRIPTOR, Descriptor, MAX_CHUNK_BYTES};
use crate::ffi::{Failure, storage};

/// Why rows cannot be handed to libhdf5.
fn refused(detail: impl std::fmt::Display) -> Failure {
    Failure(format!("refused before libhdf5 reads the rows: {detail}"))
}

/// Checks every global heap reference of rows `start..start + count` of the 1-D `VLEN` dataset
/// `dataset` (open in a file libhdf5 reads through the POSIX driver); `Ok` when libhdf5 may read
/// them.
pub(crate) fn check_vlen_rows(dataset: hid_t, start: u64, count: u64) -> Result<(), Failure> {
    if count == 0 {
        return Ok(());
    }
    let Some(layout) = storage::vlen_storage(dataset)? else {
        return Err(refused("not a chunked variable-length dataset: its rows cannot be checked"));
    };
    if !layout.element_is_number {
        return Err(refused(format!(
            "its elements ({} bytes each) are not plain numbers",
            layout.element_size
        )));
    }
    let Some(pipeline) = Pipeline::new(&layout.filters) else {
        let ids: Vec<i32> = layout.filters.iter().map(|f| f.id).collect();
        return Err(refused(format!("its filter pipeline {ids:?} is not shuffle and deflate")));
    };
    let chunk_bytes = layout.chunk_rows.checked_mul(DESCRIPTOR as u64);
    let Some(chunk_bytes) = chunk_bytes.filter(|&bytes| bytes <= MAX_CHUNK_BYTES) else {
        return Err(refused(format!("chunks of {} rows", layout.chunk_rows)));
    };
    let Some((file, file_storage)) = storage::open_same_file(dataset)? else {
        return Err(refused("the file is not read through the POSIX driver"));
    };
    if (file_storage.address_size, file_storage.length_size) != (8, 8) {
        return Err(refused(format!(
            "{}-byte addresses and {}-byte lengths",
            file_storage.address_size, file_storage.length_size
        )));
    }
    let map = map(&file)?;
    // Each row is a descriptor in a stored chunk: more rows than the file's chunks could inflate
    // to is a damaged row count, which must not size libhdf5's buffers.
    let most = (map.len() as u64).saturating_mul(MAX_INFLATE_RATIO as u64) / DESCRIPTOR as u64;
    if count > most.max(layout.chunk_rows) {
        return Err(refused(format!(
            "{count} rows asked; a file of {} bytes holds at most {most}",
            map.len()
        )));
    }
    let heap = GlobalHeap::default();
    let end = start.checked_add(count).ok_or_else(|| refused("rows past any dataset"))?;
    let mut row = start;
    while row < end {
        let chunk = row / layout.chunk_rows;
        let first_row = chunk * layout.chunk_rows;
        let chunk_end = first_row.saturating_add(layout.chunk_rows).min(end);
        let location = storage::chunk_location(dataset, first_row)?;
        let Some(location) = location else {
            if layout.user_fill {
                return Err(refused(format!(
                    "rows {row}..{chunk_end} read as the dataset's own fill value, which is not \
                     checked"
                )));
            }
            row = chunk_end;
            continue;
        };
        let stored = file_storage
            .base
            .checked_add(location.address)
            .and_then(|at| Some(at..at.checked_add(location.size)?))
            .filter(|range| range.end <= map.len() as u64)
            .ok_or_else(|| {
                refused(format!(
                    "the chunk of rows {first_row}.. ({} bytes at address {}) lies past the \
                     file's end ({} bytes)",
                    location.size,
                    location.address,
                    map.len()
                ))
            })?;
        let descriptors = pipeline
            .decode(
                &map[stored.start as usize..stored.end as usize],
                location.filter_mask,
                chunk_bytes as usize,
            )
            .map_err(|e| refused(format!("the chunk of rows {first_row}..: {e}")))?;
        for r in row..chunk_end {
            let at = ((r - first_row) as usize) * DESCRIPTOR;
            let descriptor = Descriptor::decode(&descriptors[at..]);
            check_reference(&map, file_storage.base, &heap, descriptor, layout.element_size)
                .map_err(|e| refused(format!("row {r}: {e}")))?;
        }
        row = chunk_end;
    }
    Ok(())
}

/// Checks the heap object one descriptor points to, as libhdf5 will read it: a nil reference
/// (address 0) is an empty row whatever its count; any other must name an object of exactly
/// `count * element_size` bytes in a collection that parses.
fn check_reference(
    file: &[u8],
    base: u64,
    heap: &GlobalHeap,
    descriptor: Descriptor,
    element_size: usize,
) -> Result<(), String> {
    let Descriptor { count, address, index } = descriptor;
    if address == 0 {
        return Ok(());
    }
    let offset = base
        .checked_add(address)
        .ok_or_else(|| format!("heap address {address} is past any file's end"))?;
    let object = heap
        .object(file, offset, index)
        .map_err(|e| format!("heap object {index} at address {address}: {e}"))?;
    let expected = u64::from(count) * element_size as u64;
    if object.len() as u64 != expected {
        return Err(format!(
            "heap object {index} at address {address} holds {} bytes, its {count} elements of \
             {element_size} bytes need {expected}",
            object.len()
        ));
    }
    Ok(())
}

/// A read-only map of `file`.
fn map(file: &File) -> Result<Mmap, Failure> {
    // SAFETY: as in `MappedFile::open`: the map is read-only, dropped before this call returns,
    // and every byte read from it is bounds-checked as untrusted; a file truncated under it by
    // another process is outside what the crate supports (files are replaced by rename).
    unsafe { Mmap::map(file) }.map_err(|e| Failure(format!("mapping the file: {e}")))
}
