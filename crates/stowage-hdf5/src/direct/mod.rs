//! Variable-length rows read and written by stowage itself, not by libhdf5's conversion path.
//!
//! `H5Dread` of one `VLEN` element costs tens of microseconds in libhdf5 (selections, the type
//! conversion machinery, the global heap through the metadata cache, several copies), and a
//! damaged global heap can crash it; `H5Dwrite` of `VLEN` rows copies every row three times
//! (a conversion buffer, the heap collection, the cache's image) and writes one collection per
//! call. Here libhdf5 is asked only where things are and for file space ([`crate::ffi::storage`]:
//! chunking, filters, element type, a chunk's address, reserved space); the bytes are this
//! module's:
//!
//! - A chunk of a `VLEN` dataset holds one 16-byte descriptor per row ([`Descriptor`]): `u32`
//!   element count, `u64` global heap collection address, `u32` object index (all zero for an
//!   empty row). Chunks go through the dataset's shuffle and deflate filters ([`filters`]).
//! - A row's values are one object of a global heap collection ([`global_heap`]).
//!
//! Reading ([`DirectReader`]) maps the file ([`MappedFile`]), decodes a chunk on first use and
//! keeps it (16 bytes per row of each dataset read), and takes each row from its heap object,
//! each collection parsed once. Every byte is untrusted: addresses, sizes and counts are checked
//! against the file, the chunk, the collection and the element count, and anything off is an
//! error naming the file, the dataset and the row.
//!
//! Writing ([`DirectWriter`]) lays a batch of rows out as collections the way libhdf5 does,
//! writes them with one vectored write into file space libhdf5 reserved ([`HeapFile`]), and
//! writes each full chunk of descriptors as stored bytes (`H5Dwrite_chunk`). The file is the same
//! HDF5 that libhdf5 would write: PyTables, h5py and libhdf5 read it.
//!
//! Datasets in a layout this module does not handle (another filter, a big-endian or compound
//! element, contiguous storage, a non-POSIX driver, addresses that are not 8 bytes) are read and
//! written through libhdf5 as before; before libhdf5 reads a row, [`libhdf5_guard`] checks the
//! global heap reference it will follow, with this module's parser (libhdf5 trusts it: a damaged
//! one crashes or hangs it), and refuses rows in a layout it cannot check.
//!
//! Sizes read from the file never size an allocation unchecked: the chunk table is bounded by
//! what the file could hold, inflated chunks by the stream's size, heap objects by the file.

mod column_reader;
mod column_writer;
mod filters;
#[cfg(feature = "fuzzing")]
pub mod fuzzing;
pub(crate) mod global_heap;
mod heap_file;
pub(crate) mod libhdf5_guard;
mod mapped_file;

use std::fs::{File, OpenOptions};
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use crate::ffi::{Failure, storage};

pub(crate) use column_reader::DirectReader;
pub(crate) use column_writer::DirectWriter;
pub(crate) use filters::MAX_INFLATE_RATIO;
pub(crate) use heap_file::HeapFile;
pub(crate) use mapped_file::MappedFile;

/// Why [`reopen`] failed.
enum ReopenError {
    /// The operating system refused (no descriptor left, say): not the file's fault.
    Os(std::io::Error),
    /// libhdf5 could not say where the file keeps its bytes.
    Storage(Failure),
}

/// The file libhdf5 has open as `file`, opened again from `path` with `options`, and the byte
/// offset of its address 0; `None` when its rows are left to libhdf5: another driver than POSIX,
/// addresses or lengths that are not 8 bytes (what this module handles), or a path that no longer
/// names the file libhdf5 opened.
fn reopen(
    path: &Path,
    file: &hdf5::File,
    options: &OpenOptions,
) -> Result<Option<(File, u64)>, ReopenError> {
    let storage = storage::file_storage(file.id()).map_err(ReopenError::Storage)?;
    let Some(storage) = storage else { return Ok(None) };
    if (storage.address_size, storage.length_size) != (8, 8) {
        return Ok(None);
    }
    let opened = options.open(path).and_then(|f| Ok((f.metadata()?, f)));
    let (metadata, opened) = opened.map_err(ReopenError::Os)?;
    if (metadata.dev(), metadata.ino()) != storage.identity {
        return Ok(None);
    }
    Ok(Some((opened, storage.base)))
}

/// Bytes of one row's descriptor in a chunk (8-byte addresses).
const DESCRIPTOR: usize = 16;
/// Largest chunk handled here (a chunk of 8192 rows is 128 KiB).
const MAX_CHUNK_BYTES: u64 = 64 << 20;

/// A row's entry in a chunk of a `VLEN` dataset.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Descriptor {
    /// Elements in the row; 0 for an empty row (nothing in the heap).
    count: u32,
    /// Address of the global heap collection.
    address: u64,
    /// Index of the object in the collection.
    index: u32,
}

impl Descriptor {
    /// The descriptor at the start of `bytes` (at least [`DESCRIPTOR`] bytes).
    fn decode(bytes: &[u8]) -> Descriptor {
        let field = |at: usize, n: usize| {
            let mut value = [0u8; 8];
            value[..n].copy_from_slice(&bytes[at..at + n]);
            u64::from_le_bytes(value)
        };
        Descriptor { count: field(0, 4) as u32, address: field(4, 8), index: field(12, 4) as u32 }
    }

    /// Its 16 stored bytes.
    fn encode(self) -> [u8; DESCRIPTOR] {
        let mut bytes = [0u8; DESCRIPTOR];
        bytes[..4].copy_from_slice(&self.count.to_le_bytes());
        bytes[4..12].copy_from_slice(&self.address.to_le_bytes());
        bytes[12..].copy_from_slice(&self.index.to_le_bytes());
        bytes
    }
}
