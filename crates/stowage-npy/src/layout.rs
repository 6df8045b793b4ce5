//! Where each file of a stowage NUMPY_10 cache lives, and the small metadata files.
//!
//! ```text
//! <cache>/stowage.json            format, version, schema, collection size (its presence = a cache)
//! <cache>/records.log             checksummed append-only log: key -> one record string per field
//! <cache>/data/10/<uid>.npy       collection files, as hangar lays them out
//! <cache>/stage_data/10/<uid>.npy empty markers of files not yet committed (hangar's staging)
//! <cache>/store_data/10/<uid>.npy empty markers of committed files, written by finalize
//! <cache>/_COMPLETE               written last by finalize: how many log records the cache holds
//! <cache>/.stowage.lock           the writer lock
//! ```

use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use stowage_core::{Error, IoResultExt, Result, Schema};

/// The `format` value of `stowage.json`.
pub const FORMAT_NAME: &str = "stowage-npy";
/// The `format_version` this crate writes and reads.
pub const FORMAT_VERSION: u32 = 1;

/// Paths inside one cache directory.
#[derive(Debug, Clone)]
pub struct Layout {
    root: PathBuf,
}

impl Layout {
    /// The layout of the cache in `root`.
    pub fn new(root: impl Into<PathBuf>) -> Layout {
        Layout { root: root.into() }
    }

    /// The cache directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// `stowage.json`.
    pub fn metadata(&self) -> PathBuf {
        self.root.join("stowage.json")
    }

    /// `records.log`.
    pub fn records_log(&self) -> PathBuf {
        self.root.join("records.log")
    }

    /// `_COMPLETE`.
    pub fn complete_marker(&self) -> PathBuf {
        self.root.join("_COMPLETE")
    }

    /// `data/10`.
    pub fn data_dir(&self) -> PathBuf {
        self.root.join("data").join("10")
    }

    /// `stage_data/10`.
    pub fn stage_dir(&self) -> PathBuf {
        self.root.join("stage_data").join("10")
    }

    /// `store_data/10`.
    pub fn store_dir(&self) -> PathBuf {
        self.root.join("store_data").join("10")
    }

    /// `data/10/<uid>.npy`.
    pub fn data_file(&self, uid: &str) -> PathBuf {
        self.data_dir().join(format!("{uid}.npy"))
    }
}

/// The contents of `stowage.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CacheMetadata {
    /// Always [`FORMAT_NAME`].
    pub format: String,
    /// [`FORMAT_VERSION`] of the writer.
    pub format_version: u32,
    /// The schema. bfloat16 fields are stored in `.npy` files as `<u2`; this is where their real
    /// dtype is recorded.
    pub schema: Schema,
    /// Slots per collection file.
    pub collection_size: usize,
}

impl CacheMetadata {
    /// Reads and checks `stowage.json`: `Error::NotFound` when absent, `Error::Corrupted` when it
    /// does not parse, `Error::Incompatible` for another format or version.
    pub fn read(path: &Path) -> Result<CacheMetadata> {
        let text = match std::fs::read(path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(Error::NotFound {
                    what: format!("stowage NUMPY_10 cache (no {})", path.display()),
                });
            }
            Err(e) => return Err(Error::io(path, e)),
        };
        let meta: CacheMetadata = serde_json::from_slice(&text).map_err(|e| {
            Error::corrupted(path, format!("does not parse as cache metadata: {e}"))
        })?;
        if meta.format != FORMAT_NAME || meta.format_version != FORMAT_VERSION {
            return Err(Error::Incompatible {
                path: path.to_path_buf(),
                detail: format!(
                    "format {:?} version {}, this reader handles {FORMAT_NAME:?} version {FORMAT_VERSION}",
                    meta.format, meta.format_version
                ),
            });
        }
        if meta.collection_size == 0 {
            return Err(Error::corrupted(path, "collection_size is 0"));
        }
        Ok(meta)
    }
}

/// The contents of `_COMPLETE`: what a finalized cache must hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct CommitMarker {
    /// Records in `records.log` at finalize.
    pub log_records: u64,
    /// Distinct keys at finalize.
    pub keys: u64,
}

impl CommitMarker {
    /// Reads `_COMPLETE`; `Ok(None)` when the cache is not finalized.
    pub fn read(path: &Path) -> Result<Option<CommitMarker>> {
        match std::fs::read(path) {
            Ok(text) => serde_json::from_slice(&text).map(Some).map_err(|e| {
                Error::corrupted(path, format!("does not parse as a commit marker: {e}"))
            }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e).at(path),
        }
    }
}
