//! The markers by which a directory says it is a stowage cache, read the same way by every
//! factory's [`crate::BackendFactory::recognize`].
//!
//! A directory with a `stowage.json` is a stowage cache whatever else it holds (a stowage
//! NUMPY_10 cache also has a hangar-style `data/10` tree); its `"format"` names the backend. A
//! directory with a `stowage.log` and no `stowage.json` is a stowage segment cache whose log's
//! first record names the backend. Only a directory with neither is probed for an original
//! tool's layout. A marker that does not parse is an error: it is never guessed around.

use crate::file_safety::AppendLog;
use crate::{Error, Result};
use std::io::Read;
use std::path::Path;

/// The largest `stowage.json` recognizing reads; real ones are a few KiB.
const MAX_METADATA_BYTES: u64 = 16 << 20;

/// What marks a directory as a stowage cache.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Marker {
    /// `stowage.json`, with the `"format"` it names.
    StowageJson(String),
    /// `stowage.log` (and no `stowage.json`), with the format its header record names.
    StowageLog(String),
    /// Neither: a directory that may hold an original tool's cache, or a file.
    None,
}

impl Marker {
    /// The format named, whichever marker names it.
    pub fn format(&self) -> Option<&str> {
        match self {
            Marker::StowageJson(format) | Marker::StowageLog(format) => Some(format),
            Marker::None => None,
        }
    }
}

/// The marker of `path`: [`Marker::None`] for a file or a directory without one.
///
/// Errors: a marker that cannot be read, does not parse or names no format (naming the file).
///
/// ```
/// let dir = tempfile::tempdir().unwrap();
/// std::fs::write(dir.path().join("stowage.json"), br#"{"format": "stowage-npy"}"#).unwrap();
/// let marker = stowage_core::recognize::marker(dir.path()).unwrap();
/// assert_eq!(marker.format(), Some("stowage-npy"));
/// ```
pub fn marker(path: &Path) -> Result<Marker> {
    if !path.is_dir() {
        return Ok(Marker::None);
    }
    if let Some(format) = stowage_json_format(path)? {
        return Ok(Marker::StowageJson(format));
    }
    if let Some(format) = stowage_log_format(path)? {
        return Ok(Marker::StowageLog(format));
    }
    Ok(Marker::None)
}

/// The `"format"` of `<dir>/stowage.json`, or `None` when there is no such file.
fn stowage_json_format(dir: &Path) -> Result<Option<String>> {
    let path = dir.join("stowage.json");
    let file = match std::fs::File::open(&path) {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(Error::io(&path, e)),
    };
    let mut text = Vec::new();
    file.take(MAX_METADATA_BYTES + 1).read_to_end(&mut text).map_err(|e| Error::io(&path, e))?;
    if text.len() as u64 > MAX_METADATA_BYTES {
        return Err(Error::corrupted(
            &path,
            format!("larger than {MAX_METADATA_BYTES} bytes, not a stowage cache description"),
        ));
    }
    let json: serde_json::Value = serde_json::from_slice(&text).map_err(|e| {
        Error::corrupted(
            &path,
            format!(
                "does not parse as JSON ({e}); a stowage cache's stowage.json names its format"
            ),
        )
    })?;
    match json.get("format").and_then(serde_json::Value::as_str) {
        Some(format) => Ok(Some(format.to_owned())),
        None => Err(Error::corrupted(
            &path,
            "has no \"format\" string; a stowage cache's stowage.json names its format",
        )),
    }
}

/// The format named by the header record of `<dir>/stowage.log` (`{"cache": {"format": ...}}`),
/// or `None` when there is no such file.
fn stowage_log_format(dir: &Path) -> Result<Option<String>> {
    let path = dir.join("stowage.log");
    match std::fs::symlink_metadata(&path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(Error::io(&path, e)),
        Ok(_) if !path.is_file() => {
            return Err(Error::corrupted(&path, "is not a regular file"));
        }
        Ok(_) => {}
    }
    let recovered = AppendLog::read_all(&path)?;
    let Some(first) = recovered.records.first() else {
        return Err(Error::corrupted(
            &path,
            "holds no complete record; a stowage segment cache's log starts with a header naming \
             its format",
        ));
    };
    let json: serde_json::Value = serde_json::from_slice(first).map_err(|e| {
        Error::corrupted(&path, format!("its header record does not parse as JSON ({e})"))
    })?;
    match json.pointer("/cache/format").and_then(serde_json::Value::as_str) {
        Some(format) => Ok(Some(format.to_owned())),
        None => {
            Err(Error::corrupted(&path, "its first record is not a header naming the cache format"))
        }
    }
}
