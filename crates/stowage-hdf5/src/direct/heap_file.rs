//! The file being built, opened a second time for the global heap collections the direct writer
//! lays out itself: libhdf5 reserves their space ([`storage::reserve`]) and never touches it, so
//! they are written straight from the rows' buffers with one vectored write per batch.

use std::fs::File;
use std::io::{IoSlice, Seek, SeekFrom, Write};
use std::path::Path;
use std::sync::{Arc, Mutex};

use hdf5_sys::h5i::hid_t;
use stowage_core::Result;
use stowage_core::bytes::Bytes;

use super::global_heap::{Layout, Piece};
use super::{ReopenError, reopen};
use crate::error::write_error;
use crate::ffi::{Failure, storage};

/// Zero bytes for padding and free space (never more than a shared collection).
static ZEROS: [u8; 4096] = [0; 4096];

/// The writable side of one HDF5 file being built.
#[derive(Debug)]
pub(crate) struct HeapFile {
    file: Mutex<File>,
    /// Byte offset of address 0 (the user block size).
    base: u64,
}

impl HeapFile {
    /// Opens the file libhdf5 is building at `path` (`file`) for writing, or `None` when its
    /// rows are left to libhdf5 (see [`reopen`]).
    pub fn open(path: &Path, file: &hdf5::File) -> Result<Option<Arc<HeapFile>>> {
        let reopened = reopen(path, file, File::options().write(true)).map_err(|e| match e {
            ReopenError::Os(e) => stowage_core::Error::io(path, e),
            ReopenError::Storage(e) => write_error(path, "opening the file for its heap", e),
        })?;
        Ok(reopened.map(|(file, base)| Arc::new(HeapFile { file: Mutex::new(file), base })))
    }

    /// Reserves space for `layout` (through `location`, a group of the file), writes the
    /// collections of `rows` there and returns the HDF5 address the layout's offsets are
    /// relative to.
    pub fn write(&self, location: hid_t, layout: &Layout, rows: &[Bytes]) -> Result<u64, Failure> {
        if layout.bytes == 0 {
            return Ok(0);
        }
        let offset = storage::reserve(location, layout.bytes)?;
        let address = offset
            .checked_sub(self.base)
            .ok_or_else(|| Failure(format!("reserved space at byte {offset} precedes the base")))?;
        let mut slices: Vec<IoSlice<'_>> = layout
            .pieces
            .iter()
            .map(|piece| match piece {
                Piece::Header(bytes) => IoSlice::new(bytes),
                Piece::Row(i) => IoSlice::new(&rows[*i]),
                Piece::Zeros(n) => IoSlice::new(&ZEROS[..*n]),
            })
            .collect();
        let mut file = self.file.lock().expect("never poisoned");
        let io = |e: std::io::Error| Failure(format!("writing global heap collections: {e}"));
        file.seek(SeekFrom::Start(offset)).map_err(io)?;
        let mut remaining: &mut [IoSlice<'_>] = &mut slices;
        while !remaining.is_empty() {
            let written = file.write_vectored(remaining).map_err(io)?;
            if written == 0 {
                return Err(io(std::io::ErrorKind::WriteZero.into()));
            }
            IoSlice::advance_slices(&mut remaining, written);
        }
        Ok(address)
    }
}
