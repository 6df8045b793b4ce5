//! Where each file of a stowage NUMPY_10 cache lives, and the small metadata files.
//!
//! ```text
//! <cache>/stowage.json            format, version, schema, collection size (its presence = a cache)
//! <cache>/records.log             checksummed append-only log: key -> one record string per field
//! <cache>/owned_files.log         checksummed append-only log: the uid of every collection file
//!                                 stowage created, claimed before the file exists
//! <cache>/data/10/<uid>.npy       collection files, as hangar lays them out
//! <cache>/stage_data/10/<uid>.npy empty markers of files not yet committed (hangar's staging)
//! <cache>/store_data/10/<uid>.npy empty markers of committed files, written by finalize
//! <cache>/_COMPLETE               written last by finalize: how many log records the cache holds
//! <cache>/index/current           the key index runs in use and the log offset they cover
//! <cache>/index/run_<a>_<b>.bin   key index runs (`crate::runs`): key hash -> record offset
//! <cache>/.stowage.lock           the writer lock
//! ```
//!
//! hangar writes into the same `data/10`, `stage_data/10` and `store_data/10` (and
//! `remote_data/10` for fetched data). A collection file is stowage's when `owned_files.log`
//! claims it or `records.log` points into it; stowage changes the markers of no other file.

use crate::error::NpyError;
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

    /// `owned_files.log`: the collection files stowage created (see [`crate::ownership`]).
    ///
    /// ```
    /// let layout = stowage_npy::test_support::Layout::new("cache");
    /// assert_eq!(layout.owned_files_log(), std::path::Path::new("cache/owned_files.log"));
    /// ```
    pub fn owned_files_log(&self) -> PathBuf {
        self.root.join("owned_files.log")
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

    /// `remote_data/10`: hangar's markers of data fetched from a remote (stowage never writes it).
    ///
    /// ```
    /// let layout = stowage_npy::test_support::Layout::new("cache");
    /// assert_eq!(layout.remote_dir(), std::path::Path::new("cache/remote_data/10"));
    /// ```
    pub fn remote_dir(&self) -> PathBuf {
        self.root.join("remote_data").join("10")
    }

    /// `stage_data/10/<uid>.npy`: the staging marker of collection file `uid`.
    ///
    /// ```
    /// let layout = stowage_npy::test_support::Layout::new("cache");
    /// assert_eq!(layout.stage_marker("ab12cd34"), std::path::Path::new("cache/stage_data/10/ab12cd34.npy"));
    /// ```
    pub fn stage_marker(&self, uid: &str) -> PathBuf {
        self.stage_dir().join(format!("{uid}.npy"))
    }

    /// `store_data/10/<uid>.npy`: the committed marker of collection file `uid`.
    ///
    /// ```
    /// let layout = stowage_npy::test_support::Layout::new("cache");
    /// assert_eq!(layout.store_marker("ab12cd34"), std::path::Path::new("cache/store_data/10/ab12cd34.npy"));
    /// ```
    pub fn store_marker(&self, uid: &str) -> PathBuf {
        self.store_dir().join(format!("{uid}.npy"))
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
    /// xxh64 (16 hex digits) of the other fields as compact JSON ([`CacheMetadata::digest`]):
    /// the record log names fields by position only, so without it a changed byte that still
    /// parses (a renamed field) would make `get` return samples under the wrong names. `None` in
    /// caches written before it existed, which are read unchecked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checksum: Option<String>,
}

impl CacheMetadata {
    /// The metadata of a new cache, with its checksum.
    pub fn new(schema: Schema, collection_size: usize) -> CacheMetadata {
        let mut meta = CacheMetadata {
            format: FORMAT_NAME.into(),
            format_version: FORMAT_VERSION,
            schema,
            collection_size,
            checksum: None,
        };
        meta.checksum = Some(meta.digest());
        meta
    }

    /// xxh64 of every field but `checksum`, serialized compactly (so whitespace does not count,
    /// and a field added later must be skipped while it has its default to keep old digests).
    pub fn digest(&self) -> String {
        let unsigned = CacheMetadata { checksum: None, ..self.clone() };
        crate::record::xxh64_hex(&serde_json::to_vec(&unsigned).expect("metadata serializes"))
    }

    /// Reads and checks `stowage.json`: `Error::NotFound` when absent, `Error::Corrupted` when it
    /// does not parse or does not match its checksum, `Error::Incompatible` for another format or
    /// version.
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
            return Err(NpyError::OtherFormat {
                path: path.to_path_buf(),
                format: meta.format,
                version: meta.format_version,
            }
            .into());
        }
        if let Some(recorded) = &meta.checksum
            && *recorded != meta.digest()
        {
            return Err(NpyError::MetadataChecksum {
                path: path.to_path_buf(),
                computed: meta.digest(),
                recorded: recorded.clone(),
            }
            .into());
        }
        if meta.collection_size == 0 {
            return Err(Error::corrupted(path, "collection_size is 0"));
        }
        Ok(meta)
    }
}

/// The contents of `_COMPLETE`: what a finalized cache must hold.
///
/// ```
/// use stowage_npy::test_support::CommitMarker;
/// let old: CommitMarker = serde_json::from_str(r#"{"log_records": 5, "keys": 4}"#)?;
/// assert_eq!(old.owned_files_records, None); // written before owned_files.log existed
/// # Ok::<(), serde_json::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct CommitMarker {
    /// Records in `records.log` at finalize.
    pub log_records: u64,
    /// Distinct keys at finalize.
    pub keys: u64,
    /// Records in `owned_files.log` at finalize, so that its loss or truncation is noticed;
    /// `None` in caches finalized before that log existed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owned_files_records: Option<u64>,
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

#[cfg(test)]
mod tests {
    use super::*;
    use stowage_core::{DType, ShapeRule};

    fn written(dir: &Path) -> (PathBuf, String) {
        let schema = Schema::new()
            .tensor("image", DType::F32, ShapeRule::Fixed(vec![4, 3]))
            .tensor("label", DType::I64, ShapeRule::Fixed(vec![5]));
        let text = serde_json::to_string_pretty(&CacheMetadata::new(schema, 8)).unwrap();
        (dir.join("stowage.json"), text)
    }

    /// Found by the corruption campaign (stowage-reliability, `corruption --seed 4 --backends npy
    /// --replay flip:83`): one flipped byte renamed a field, the file still parsed, and `get`
    /// returned every sample under the new name.
    #[test]
    fn a_renamed_field_in_stowage_json_is_corrupted_metadata() {
        let dir = tempfile::tempdir().unwrap();
        let (path, text) = written(dir.path());
        std::fs::write(&path, &text).unwrap();
        assert_eq!(CacheMetadata::read(&path).unwrap().schema.fields[0].name, "image");
        std::fs::write(&path, text.replace("\"image\"", "\"imafe\"")).unwrap();
        let err = CacheMetadata::read(&path).unwrap_err();
        assert!(matches!(err, Error::Corrupted { .. }), "{err}");
        assert!(err.to_string().contains("stowage.json") && err.to_string().contains("checksum"));
    }

    #[test]
    fn stowage_json_without_checksum_is_read_unchecked_and_whitespace_does_not_count() {
        let dir = tempfile::tempdir().unwrap();
        let (path, text) = written(dir.path());
        let value: serde_json::Value = serde_json::from_str(&text).unwrap();
        let mut old = value.clone();
        old.as_object_mut().unwrap().remove("checksum");
        std::fs::write(&path, serde_json::to_vec(&old).unwrap()).unwrap();
        assert_eq!(CacheMetadata::read(&path).unwrap().checksum, None);
        std::fs::write(&path, serde_json::to_vec(&value).unwrap()).unwrap();
        assert!(CacheMetadata::read(&path).unwrap().checksum.is_some());
    }
}
