//! The one public error type of every stowage crate.
//!
//! Backends keep their own private error enums where useful and map them into these categories,
//! so a caller can match on *what went wrong* without knowing which backend it talks to.

use std::path::PathBuf;

/// Shorthand for `std::result::Result<T, stowage_core::Error>`.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong in a stowage operation.
///
/// Every message names what a user needs to fix the problem: the file, the key, the field and both
/// sides of a mismatch.
///
/// # Example
/// ```
/// use stowage_core::Error;
/// let err = Error::Unsupported { operation: "append after finalize".into(), backend: "npy" };
/// assert_eq!(err.to_string(), "operation not supported by the npy backend: append after finalize");
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A cache, file or record that was asked for does not exist.
    #[error("not found: {what}")]
    NotFound {
        /// What was looked for, with its path or key.
        what: String,
    },

    /// Creating something that is already there (a cache directory, a file).
    #[error("already exists: {}", path.display())]
    AlreadyExists {
        /// The path that already exists.
        path: PathBuf,
    },

    /// The backend does not implement this operation; see its `Capabilities`.
    #[error("operation not supported by the {backend} backend: {operation}")]
    Unsupported {
        /// The operation, e.g. `"overwrite of an existing key"`.
        operation: String,
        /// The backend's name.
        backend: &'static str,
    },

    /// A sample does not match the cache's schema; nothing was written.
    #[error("schema mismatch: field {field:?}: {detail}")]
    SchemaMismatch {
        /// The offending field.
        field: String,
        /// Both sides of the mismatch, e.g. `shape (3, 1) exceeds schema max (2, 3)`.
        detail: String,
    },

    /// A write was attempted on a cache that was finalized (committed as complete).
    #[error("cache {} is finalized; open it in append mode (if the backend supports it) or rebuild it", path.display())]
    Finalized {
        /// The cache directory.
        path: PathBuf,
    },

    /// Stored bytes do not match what was written (checksum, size or structure).
    #[error("corrupted data in {}{}: {detail}", path.display(), key_clause(key))]
    Corrupted {
        /// The file that holds the bad bytes.
        path: PathBuf,
        /// The sample key whose bytes are bad, when one is known ([`Error::for_key`]).
        key: Option<String>,
        /// What is wrong: the record, and both sides of the mismatch.
        detail: String,
    },

    /// The handle refuses further writes because an earlier write or flush failed: what it
    /// holds in memory may no longer match the files. Reopen the cache to resume from what was
    /// made durable.
    #[error("cache {} refuses writes after an earlier failure ({cause}); reopen it to resume from what was flushed", path.display())]
    Poisoned {
        /// The cache directory.
        path: PathBuf,
        /// The failure that poisoned the handle.
        cause: String,
    },

    /// A file is valid but written in a form this version cannot use (format version, schema, options).
    #[error("incompatible {}: {detail}", path.display())]
    Incompatible {
        /// The file or directory.
        path: PathBuf,
        /// What differs, with both sides.
        detail: String,
    },

    /// Another writer holds the cache's lock.
    #[error("cache {} is locked by another writer (lock file {}); readers are not affected", cache.display(), lock_file.display())]
    Locked {
        /// The cache directory.
        cache: PathBuf,
        /// The lock file.
        lock_file: PathBuf,
    },

    /// An argument is out of range or inconsistent (for example a tensor whose bytes do not fit its shape).
    #[error("invalid argument: {detail}")]
    InvalidArgument {
        /// What is wrong, with both sides.
        detail: String,
    },

    /// An operating-system I/O error on a named file.
    #[error("I/O error on {}: {source}", path.display())]
    Io {
        /// The file or directory the operation was about.
        path: PathBuf,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },

    /// A backend-specific error that fits no other category.
    #[error("{backend} backend: {source}")]
    Backend {
        /// The backend's name.
        backend: &'static str,
        /// The backend's own error.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync + 'static>,
    },
}

impl Error {
    /// Wraps an I/O error with the path it happened on.
    ///
    /// ```
    /// let err = stowage_core::Error::io("/tmp/x", std::io::Error::other("boom"));
    /// assert!(err.to_string().contains("/tmp/x"));
    /// ```
    pub fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Error::Io { path: path.into(), source }
    }

    /// Builds a [`Error::Corrupted`].
    ///
    /// ```
    /// let err = stowage_core::Error::corrupted("/c/data.npy", "checksum 1 != recorded 2");
    /// assert!(matches!(err, stowage_core::Error::Corrupted { .. }));
    /// ```
    pub fn corrupted(path: impl Into<PathBuf>, detail: impl Into<String>) -> Self {
        Error::Corrupted { path: path.into(), key: None, detail: detail.into() }
    }

    /// Names `key` in an [`Error::Corrupted`] that does not name one yet; other errors are
    /// returned unchanged.
    ///
    /// ```
    /// let err = stowage_core::Error::corrupted("/c/data.npy", "checksum 1 != recorded 2").for_key("k7");
    /// assert_eq!(err.to_string(), "corrupted data in /c/data.npy, key \"k7\": checksum 1 != recorded 2");
    /// ```
    pub fn for_key(self, key: &str) -> Self {
        match self {
            Error::Corrupted { path, key: None, detail } => {
                Error::Corrupted { path, key: Some(key.to_owned()), detail }
            }
            other => other,
        }
    }

    /// Builds a [`Error::Poisoned`].
    ///
    /// ```
    /// let err = stowage_core::Error::poisoned("/c", "fsync of /c/log: EIO");
    /// assert!(err.to_string().contains("reopen"));
    /// ```
    pub fn poisoned(path: impl Into<PathBuf>, cause: impl std::fmt::Display) -> Self {
        Error::Poisoned { path: path.into(), cause: cause.to_string() }
    }

    /// Builds a [`Error::InvalidArgument`].
    ///
    /// ```
    /// let err = stowage_core::Error::invalid("shape (2, 3) needs 24 bytes, got 20");
    /// assert!(err.to_string().contains("24 bytes"));
    /// ```
    pub fn invalid(detail: impl Into<String>) -> Self {
        Error::InvalidArgument { detail: detail.into() }
    }

    /// Builds a [`Error::SchemaMismatch`].
    ///
    /// ```
    /// let err = stowage_core::Error::schema("x", "dtype float64 != schema float32");
    /// assert_eq!(err.to_string(), "schema mismatch: field \"x\": dtype float64 != schema float32");
    /// ```
    pub fn schema(field: impl Into<String>, detail: impl Into<String>) -> Self {
        Error::SchemaMismatch { field: field.into(), detail: detail.into() }
    }

    /// Builds a [`Error::Unsupported`].
    ///
    /// ```
    /// let err = stowage_core::Error::unsupported("npy", "bytes fields");
    /// assert!(matches!(err, stowage_core::Error::Unsupported { backend: "npy", .. }));
    /// ```
    pub fn unsupported(backend: &'static str, operation: impl Into<String>) -> Self {
        Error::Unsupported { operation: operation.into(), backend }
    }
}

/// `, key "k"` for a known key, nothing otherwise.
fn key_clause(key: &Option<String>) -> String {
    key.as_ref().map_or_else(String::new, |key| format!(", key {key:?}"))
}

/// Attaches a path to `std::io::Result`s: `file.read(..).at(&path)?`.
///
/// ```
/// use stowage_core::IoResultExt;
/// let err = std::fs::read("/definitely/not/here").at("/definitely/not/here").unwrap_err();
/// assert!(err.to_string().contains("/definitely/not/here"));
/// ```
pub trait IoResultExt<T> {
    /// Converts the error into [`Error::Io`] naming `path`.
    fn at(self, path: impl AsRef<std::path::Path>) -> Result<T>;
}

impl<T> IoResultExt<T> for std::io::Result<T> {
    fn at(self, path: impl AsRef<std::path::Path>) -> Result<T> {
        self.map_err(|source| Error::io(path.as_ref(), source))
    }
}
