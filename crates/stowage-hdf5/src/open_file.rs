//! Opening an HDF5 file for reading with resource errors told apart from damage.
//!
//! libhdf5 reports every failed open the same way (`H5Fopen(): unable to open file`), whether the
//! file is damaged or the process ran out of descriptors. A resource error must never read as
//! corruption (a user would delete a healthy cache), so:
//!
//! 1. The file is first opened with `std::fs::File::open`: a missing file, a permission refused
//!    or a full descriptor table is a real `io::Error`, reported as `Error::Io` naming the file.
//! 2. Only then does libhdf5 open it. Its own open can still fail for the operating system (its
//!    file lock held by another process, or the descriptor table full by now): libhdf5's POSIX
//!    driver then puts the `errno` in its error stack (`..., errno = 11, error message = '...'`,
//!    the format of its `HSYS_GOTO_ERROR`, checked against 1.10.8 by this crate's tests). An
//!    errno of [`RESOURCE_ERRNOS`] found there is `Error::Io` carrying that errno; anything else
//!    libhdf5 refuses is `Error::Corrupted`, as before.
//!
//! A lock is `Error::Io` of kind `WouldBlock` (EAGAIN), not `Error::Locked`: the core's `Locked`
//! says readers are not affected, and here a reader is the one refused.

use std::fs::File;
use std::path::Path;

use stowage_core::{Error, Result};

use crate::error::read_error;

/// The errnos that mean the operating system refused the open, not that the bytes are bad: the
/// file lock (EAGAIN, which is EWOULDBLOCK on Linux), descriptor tables (EMFILE, ENFILE), memory
/// (ENOMEM), permissions (EACCES, EPERM), a missing file (ENOENT) and the device (EIO).
pub(crate) const RESOURCE_ERRNOS: [i32; 9] = [
    libc::EAGAIN,
    libc::EWOULDBLOCK,
    libc::EMFILE,
    libc::ENFILE,
    libc::ENOMEM,
    libc::EACCES,
    libc::EPERM,
    libc::ENOENT,
    libc::EIO,
];

/// Opens `path` with the operating system: `Error::Io` naming the file, with the OS error (its
/// errno kept for `raw_os_error`).
pub(crate) fn open_std(path: &Path) -> Result<File> {
    File::open(path).map_err(|e| Error::io(path, e))
}

/// Opens `path` read-only with libhdf5 (after [`open_std`] checked the OS lets it be opened, when
/// the caller did). A failure is `Error::Io` when libhdf5's error stack carries a resource errno
/// ([`resource_errno`]), else `Error::Corrupted` naming the file and libhdf5's message.
pub fn open_hdf5(path: &Path, what: &str) -> Result<hdf5::File> {
    hdf5::File::open(path).map_err(|e| open_failure(path, what, &e))
}

/// [`open_hdf5`] with both steps: the OS's open first, then libhdf5's.
pub(crate) fn open_checked(path: &Path, what: &str) -> Result<hdf5::File> {
    drop(open_std(path)?);
    open_hdf5(path, what)
}

/// The error of libhdf5 failing to open `path`.
pub(crate) fn open_failure(path: &Path, what: &str, error: &hdf5::Error) -> Error {
    let text = stack_text(error);
    match resource_errno(&text) {
        Some(errno) => {
            let os = std::io::Error::from_raw_os_error(errno);
            if errno == libc::EAGAIN || errno == libc::EWOULDBLOCK {
                let lock = format!(
                    "libhdf5 could not lock the file ({what}): another process has it open for \
                     writing ({os}); retry once it closes the file"
                );
                Error::io(path, std::io::Error::new(std::io::ErrorKind::WouldBlock, lock))
            } else {
                // The errno itself, so that callers can tell EMFILE from ENOMEM.
                Error::io(path, os)
            }
        }
        None => read_error(path, &format!("opening {what}"), error.clone()),
    }
}

/// Every frame's description of libhdf5's error stack (the errno is in the deepest frame), or
/// the error's text when the stack cannot be walked.
fn stack_text(error: &hdf5::Error) -> String {
    if let hdf5::Error::HDF5(stack) = error
        && let Ok(frames) = stack.clone().expand()
    {
        return frames.iter().map(|f| f.desc()).collect::<Vec<_>>().join("; ");
    }
    error.to_string()
}

/// The first errno of [`RESOURCE_ERRNOS`] named in libhdf5's error text
/// (`errno = <n>, error message = ...`), if any.
pub(crate) fn resource_errno(text: &str) -> Option<i32> {
    text.match_indices("errno = ")
        .filter_map(|(at, marker)| {
            let digits: String =
                text[at + marker.len()..].chars().take_while(char::is_ascii_digit).collect();
            digits.parse::<i32>().ok()
        })
        .find(|errno| RESOURCE_ERRNOS.contains(errno))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resource_errnos_are_found_in_libhdf5s_messages() {
        let lock = "unable to open file; unable to lock file, errno = 11, error message = \
                    'Resource temporarily unavailable'";
        assert_eq!(resource_errno(lock), Some(libc::EAGAIN));
        let emfile = "unable to open file: name = 'a.h5', errno = 24, error message = 'Too many \
                      open files', flags = 0, o_flags = 0";
        assert_eq!(resource_errno(emfile), Some(libc::EMFILE));
        assert_eq!(resource_errno("errno = 13, error message = 'Permission denied'"), Some(13));
        // Damage carries no errno, or one that is not a resource's.
        assert_eq!(resource_errno("file signature not found"), None);
        assert_eq!(resource_errno("truncated file: eof = 96, sblock->base_addr = 0"), None);
        assert_eq!(resource_errno("errno = 22, error message = 'Invalid argument'"), None);
        assert_eq!(resource_errno("errno = , errno = x"), None);
    }

    #[test]
    fn a_missing_file_is_an_io_error_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("absent.h5");
        match open_checked(&path, "segment 3").unwrap_err() {
            Error::Io { path: at, source } => {
                assert_eq!(at, path);
                assert_eq!(source.raw_os_error(), Some(libc::ENOENT));
            }
            other => panic!("expected Error::Io, got {other:?}"),
        }
        // libhdf5 alone says only that it could not open it: still not corruption.
        match open_hdf5(&path, "segment 3").unwrap_err() {
            Error::Io { source, .. } => assert_eq!(source.kind(), std::io::ErrorKind::NotFound),
            other => panic!("expected Error::Io, got {other:?}"),
        }
    }

    #[test]
    fn a_damaged_file_is_still_corrupted() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("junk.h5");
        std::fs::write(&path, b"not an HDF5 file at all").unwrap();
        let error = open_checked(&path, "segment 3").unwrap_err();
        assert!(matches!(error, Error::Corrupted { .. }), "{error:?}");
    }
}
