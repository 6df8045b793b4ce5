//! Turning libhdf5 failures into stowage errors that name the file and what was being done.

use std::path::Path;

use stowage_core::Error;

use crate::ffi::Failure;

/// The backend name in errors.
pub const BACKEND: &str = "hdf5";

/// A failure reading a file: the file is treated as untrusted, so anything libhdf5 refuses
/// (bad superblock, checksum, truncated, wrong type) is `Error::Corrupted` naming the file.
pub(crate) fn read_error(path: &Path, what: &str, failure: impl Into<Failure>) -> Error {
    Error::corrupted(path, format!("{what}: {}", failure.into()))
}

/// A failure writing a file: `Error::Backend` with the file, what was done and libhdf5's message.
pub(crate) fn write_error(path: &Path, what: &str, failure: impl Into<Failure>) -> Error {
    Error::Backend {
        backend: BACKEND,
        source: Box::new(Failure(format!("{}: {what}: {}", path.display(), failure.into()))),
    }
}
