//! The formats this crate reads, and how a path is recognized as one of them.
//!
//! A stowage HDF5 cache is a directory whose `stowage.log` names [`commit_log::FORMAT_NAME`]; an
//! aenet torch cache is a regular file (a dataset file) that starts with the HDF5 signature and
//! holds `/torch_cache` or a legacy `/force_derivatives`. Recognizing follows the core's marker
//! precedence ([`stowage_core::recognize`]): a directory with any stowage marker is never probed
//! for anything else.

use std::io::{Read, Seek, SeekFrom};
use std::path::Path;

use stowage_core::recognize::{self, Marker};
use stowage_core::{Error, Format, Result};

use crate::commit_log;
use crate::reader::TorchCache;

/// The crate's own cache: HDF5 segments committed through `stowage.log`.
pub const STOWAGE_HDF5: Format = Format {
    id: "stowage-hdf5",
    description: "stowage HDF5 segment cache",
    signature: "stowage.log with format \"stowage-hdf5\"",
};

/// aenet's torch cache inside an HDF5 dataset file (v2 `/torch_cache` or legacy v1
/// `/force_derivatives`).
pub const AENET_HDF5: Format = Format {
    id: "aenet-hdf5",
    description: "aenet HDF5 torch cache",
    signature: "an HDF5 file with /torch_cache or /force_derivatives",
};

/// Every format the crate reads, its own first.
pub(crate) const FORMATS: &[Format] = &[STOWAGE_HDF5, AENET_HDF5];

/// The HDF5 file signature (the superblock's first 8 bytes).
const HDF5_MAGIC: &[u8; 8] = b"\x89HDF\r\n\x1a\n";

/// Whether the file at `path`, of `len` bytes, starts with the HDF5 signature: at offset 0 or
/// after a user block (512, 1024, 2048, ... bytes), where libhdf5 looks for the superblock.
/// `len` is the caller's (a directory walk has it already); a file that cannot be read is not
/// one.
///
/// ```
/// let dir = tempfile::tempdir()?;
/// let path = dir.path().join("notes.txt");
/// std::fs::write(&path, b"not an HDF5 file")?;
/// assert!(!stowage_hdf5::is_hdf5_file(&path, 16));
/// # Ok::<(), std::io::Error>(())
/// ```
pub fn is_hdf5_file(path: &Path, len: u64) -> bool {
    let Ok(mut file) = std::fs::File::open(path) else { return false };
    let mut offset = 0u64;
    while offset + 8 <= len {
        let mut magic = [0u8; 8];
        if file.seek(SeekFrom::Start(offset)).is_err() || file.read_exact(&mut magic).is_err() {
            return false;
        }
        if &magic == HDF5_MAGIC {
            return true;
        }
        offset = if offset == 0 { 512 } else { offset * 2 };
    }
    false
}

/// Which of [`FORMATS`] the cache at `path` is: [`crate::Hdf5Factory`]'s `recognize`.
///
/// Errors: a stowage marker that cannot be read (the core's [`recognize::marker`]); an HDF5 file
/// whose torch cache cannot be opened, naming the file.
pub(crate) fn recognize(path: &Path) -> Result<Option<&'static Format>> {
    match recognize::marker(path)? {
        Marker::StowageLog(format) if format == commit_log::FORMAT_NAME => Ok(Some(&FORMATS[0])),
        // Another backend's cache: never probed for an aenet file.
        Marker::StowageLog(_) | Marker::StowageJson(_) => Ok(None),
        Marker::None => recognize_dataset_file(path),
    }
}

/// [`AENET_HDF5`] for a regular file holding a torch cache; `None` for anything else that has
/// no stowage marker (a directory, a file that is not HDF5, an HDF5 file without a cache).
fn recognize_dataset_file(path: &Path) -> Result<Option<&'static Format>> {
    let Ok(metadata) = std::fs::metadata(path) else { return Ok(None) };
    if !metadata.is_file() || !is_hdf5_file(path, metadata.len()) {
        return Ok(None);
    }
    match TorchCache::open(path) {
        Ok(Some(_)) => Ok(Some(&FORMATS[1])),
        Ok(None) => Ok(None),
        Err(e) => Err(unopenable_torch_cache(e)),
    }
}

/// Says of an error opening a torch cache that the file is HDF5 but its cache does not open,
/// keeping the error's category and the file it names.
fn unopenable_torch_cache(error: Error) -> Error {
    const WHAT: &str = "an HDF5 file whose torch cache cannot be opened";
    match error {
        Error::Corrupted { path, key, detail } => {
            Error::Corrupted { path, key, detail: format!("{WHAT}: {detail}") }
        }
        Error::Incompatible { path, detail } => {
            Error::Incompatible { path, detail: format!("{WHAT}: {detail}") }
        }
        // I/O and not-found errors already name the file.
        other => other,
    }
}
