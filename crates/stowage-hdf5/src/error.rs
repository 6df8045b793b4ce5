//! The crate's own failures, and how each maps into the core's error categories.
//!
//! Files are read as untrusted, so whatever libhdf5 (or the direct reader) refuses while reading
//! is `Error::Corrupted` naming the file. Failures while writing fit no core category (libhdf5
//! refused, or the file changed under a rebuild): they are `Error::Backend` carrying an
//! [`Hdf5Error`], which names the file and the step.

use std::path::{Path, PathBuf};

use stowage_core::Error;

use crate::ffi::Failure;
use crate::writer::FileIdentity;

/// The backend name in errors.
pub const BACKEND: &str = "hdf5";

/// What can go wrong in this crate beyond the core's categories; never public, always converted
/// into [`stowage_core::Error`].
#[derive(Debug, thiserror::Error)]
pub(crate) enum Hdf5Error {
    /// libhdf5 or the layout checks refused to read `path`.
    #[error("{what}: {failure}")]
    Read {
        /// The file.
        path: PathBuf,
        /// What was being read.
        what: String,
        /// libhdf5's message.
        failure: Failure,
    },

    /// libhdf5 failed to write `path`.
    #[error("{}: {what}: {failure}", path.display())]
    Write {
        /// The file.
        path: PathBuf,
        /// What was being written.
        what: String,
        /// libhdf5's message.
        failure: Failure,
    },

    /// The dataset file a rebuild carried was replaced or written to before the rebuild could be
    /// renamed over it: publishing would lose what the other writer wrote.
    #[error(
        "{}: the file was replaced or changed while the cache was rebuilt beside it \
         ({before:?} then, {now:?} now): nothing was written; write again",
        target.display()
    )]
    TargetChanged {
        /// The dataset file.
        target: PathBuf,
        /// Its identity when the rebuild started.
        before: Option<FileIdentity>,
        /// Its identity at publish.
        now: Option<FileIdentity>,
    },

    /// Another writer took a build's temporary for a killed writer's and removed it while
    /// libhdf5 held it (only when `HDF5_USE_FILE_LOCKING` makes the build let go of its lock).
    #[error(
        "{}: taking the build's lock back: another writer of the file removed this unfinished \
         copy while libhdf5 held it (HDF5_USE_FILE_LOCKING is set): nothing was written; write \
         again",
        temporary.display()
    )]
    BuildRemoved {
        /// The build's temporary file.
        temporary: PathBuf,
    },
}

impl From<Hdf5Error> for Error {
    fn from(error: Hdf5Error) -> Error {
        match error {
            Hdf5Error::Read { path, what, failure } => {
                Error::corrupted(path, format!("{what}: {failure}"))
            }
            other => Error::Backend { backend: BACKEND, source: Box::new(other) },
        }
    }
}

/// A failure reading a file: `Error::Corrupted` naming the file, what was read and libhdf5's
/// message.
pub(crate) fn read_error(path: &Path, what: &str, failure: impl Into<Failure>) -> Error {
    Hdf5Error::Read { path: path.to_path_buf(), what: what.to_owned(), failure: failure.into() }
        .into()
}

/// A failure writing a file: `Error::Backend` naming the file, what was written and libhdf5's
/// message.
pub(crate) fn write_error(path: &Path, what: &str, failure: impl Into<Failure>) -> Error {
    Hdf5Error::Write { path: path.to_path_buf(), what: what.to_owned(), failure: failure.into() }
        .into()
}
