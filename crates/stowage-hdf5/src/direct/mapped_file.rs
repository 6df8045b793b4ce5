//! A read-only memory map of the very file libhdf5 opened, with its global heap collections
//! parsed on first use: the bytes the direct reader takes rows from.

use std::fs::File;
use std::path::Path;
use std::sync::Arc;

use memmap2::Mmap;
use stowage_core::{Error, Result};

use super::global_heap::{self, Collection, GlobalHeap};
use super::{ReopenError, reopen};
use crate::error::read_error;

/// One mapped HDF5 file.
#[derive(Debug)]
pub(crate) struct MappedFile {
    map: Mmap,
    /// Byte offset of address 0 (the user block size).
    base: u64,
    heap: GlobalHeap,
}

impl MappedFile {
    /// Maps the file behind libhdf5's `file` (opened from `path`), or `None` when its rows are
    /// left to libhdf5 (see [`reopen`]).
    pub fn open(path: &Path, file: &hdf5::File) -> Result<Option<Arc<MappedFile>>> {
        let reopened = reopen(path, file, File::options().read(true)).map_err(|e| match e {
            ReopenError::Os(e) => Error::io(path, e),
            ReopenError::Storage(e) => read_error(path, "opening the file for its map", e),
        })?;
        let Some((opened, base)) = reopened else { return Ok(None) };
        // SAFETY: mapping is unsafe because another process could truncate or rewrite the file
        // while it is mapped (SIGBUS on truncation, changed bytes otherwise). aenet and stowage
        // replace a dataset file by renaming a new one over it, which leaves this mapping on the
        // old file intact; a file rewritten in place under a reader is already unreadable for
        // libhdf5 (its metadata cache would be stale), and callers are documented not to do it.
        // The map is read-only and every byte read from it is bounds-checked as untrusted.
        // A failed map is the process's limits (ENOMEM: address space or `vm.max_map_count`),
        // never the file's bytes.
        let map = unsafe { Mmap::map(&opened) }.map_err(|e| Error::io(path, e))?;
        Ok(Some(Arc::new(MappedFile { map, base, heap: GlobalHeap::default() })))
    }

    /// The whole map (for advice: reads go through the checked accessors).
    pub fn whole(&self) -> &[u8] {
        &self.map
    }

    /// Bytes in the file (the user block included).
    pub fn len(&self) -> u64 {
        self.map.len() as u64
    }

    /// File offset of the HDF5 `address`, if it can be one.
    fn offset(&self, address: u64) -> Result<u64, String> {
        self.base
            .checked_add(address)
            .ok_or_else(|| format!("address {address} is past any file's end"))
    }

    /// The `len` bytes at HDF5 `address`.
    pub fn bytes(&self, address: u64, len: u64) -> Result<&[u8], String> {
        let start = self.offset(address)?;
        let end = start.checked_add(len).filter(|&end| end <= self.map.len() as u64);
        match end {
            Some(end) => Ok(&self.map[start as usize..end as usize]),
            None => Err(format!(
                "{len} bytes at address {address} lie past the file's end ({} bytes)",
                self.map.len()
            )),
        }
    }

    /// The data of global heap object `index` of the collection at HDF5 `address`.
    pub fn heap_object(&self, address: u64, index: u32) -> Result<&[u8], String> {
        self.heap.object(&self.map, self.offset(address)?, index)
    }

    /// The data of object `index` of the collection at HDF5 `address`, found by walking the
    /// collection to it, nothing parsed or kept ([`global_heap::find`]).
    pub fn find_object(&self, address: u64, index: u32) -> Result<&[u8], String> {
        let range = global_heap::find(&self.map, self.offset(address)?, index)?;
        Ok(&self.map[range])
    }

    /// The file bytes of the whole collection at HDF5 `address` ([`global_heap::span`]).
    pub fn collection_span(&self, address: u64) -> Result<std::ops::Range<u64>, String> {
        let range = global_heap::span(&self.map, self.offset(address)?)?;
        Ok(range.start as u64..range.end as u64)
    }

    /// The file byte range of the `len` bytes at HDF5 `address`, when they lie in the file.
    pub fn file_range(&self, address: u64, len: u64) -> Result<std::ops::Range<u64>, String> {
        let start = self.offset(address)?;
        self.bytes(address, len)?;
        Ok(start..start + len)
    }

    /// Advises the map `MADV_RANDOM`: a page fault reads its own page, not the kernel's
    /// read-around (up to `read_ahead_kb`, which for a segment file is the whole file). For a
    /// file whose reads are single rows, each found through bytes already read. A hint: a
    /// refusal changes nothing that is read.
    pub fn advise_random(&self) {
        #[cfg(unix)]
        let _ = self.map.advise(memmap2::Advice::Random);
    }

    /// Asks the kernel to start reading the pages of file bytes `range` (`MADV_WILLNEED`) and
    /// returns without waiting: several ranges advised together are read at once. A hint, as
    /// [`MappedFile::advise_random`]; a range past the end is clamped.
    pub fn will_need(&self, range: std::ops::Range<u64>) {
        let len = self.map.len() as u64;
        let (start, end) = (range.start.min(len), range.end.min(len));
        let page = stowage_core::cold_reads::page_size() as u64;
        let start = start / page * page;
        if end > start {
            #[cfg(unix)]
            let _ = self.map.advise_range(
                memmap2::Advice::WillNeed,
                start as usize,
                (end - start) as usize,
            );
        }
    }

    /// The collection at HDF5 `address`, parsed now and not kept: for a caller that resolves
    /// every object it needs at once ([`super::DirectReader`]'s chunks).
    pub fn collection(&self, address: u64) -> Result<Collection, String> {
        global_heap::parse(&self.map, self.offset(address)?)
    }

    /// The bytes at file offsets `range` (a range a [`Collection`] of this file gave).
    pub fn range(&self, range: std::ops::Range<usize>) -> &[u8] {
        &self.map[range]
    }
}
