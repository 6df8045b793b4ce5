//! Carrying a cache's `fingerprint.json` over, byte for byte, into a cache converted from it.
//!
//! DNANet decides whether a cache is fresh by recomputing the hash of its current configuration and
//! source stamps and comparing it with the `hash` stored in `fingerprint.json`
//! (`validate_fingerprint`). A converted copy whose fingerprint is stowage's default (an empty
//! config, no sources) is therefore rebuilt by DNANet; one carrying the source's file exactly is
//! fresh whenever the source is.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use stowage_core::{Error, Result};
use stowage_fingerprint::FingerprintFile;

use crate::layout::{CACHE_VERSION, Layout};

/// The exact bytes of a cache's `fingerprint.json`, checked to be a fingerprint document of this
/// layout's version, to be written unchanged by [`crate::MemmapBackend::finalize_carrying`] (or by
/// `finalize` through [`crate::MemmapOptions::carry_fingerprint`]).
///
/// ```
/// use stowage_memmap::CarriedFingerprint;
/// let dir = tempfile::tempdir()?;
/// assert!(CarriedFingerprint::read(dir.path())?.is_none(), "an unfinished cache has none");
/// std::fs::write(dir.path().join("fingerprint.json"), "not json")?;
/// assert!(CarriedFingerprint::read(dir.path()).is_err());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone)]
pub struct CarriedFingerprint {
    source: PathBuf,
    text: Arc<[u8]>,
    parsed: FingerprintFile,
}

impl CarriedFingerprint {
    /// Reads `fingerprint.json` of the cache in `cache_dir`; `Ok(None)` when it has none (an
    /// unfinished cache, or one whose fingerprint was removed: there is nothing to carry).
    ///
    /// Errors: [`Error::Corrupted`] naming the file when it is not a fingerprint document (the
    /// field that is wrong); [`Error::Incompatible`] when its `cache_version` is not this
    /// layout's (5); [`Error::Io`] when it cannot be read.
    pub fn read(cache_dir: impl AsRef<Path>) -> Result<Option<CarriedFingerprint>> {
        let path = Layout::new(cache_dir.as_ref()).fingerprint();
        let text = match std::fs::read(&path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(Error::io(&path, e)),
        };
        let parsed = FingerprintFile::read(&path)?;
        if parsed.cache_version != CACHE_VERSION as i64 {
            return Err(Error::Incompatible {
                path,
                detail: format!(
                    "cache_version is {}, a memmap row cache's is {CACHE_VERSION}: it cannot be \
                     carried into a cache of this layout",
                    parsed.cache_version
                ),
            });
        }
        Ok(Some(CarriedFingerprint { source: path, text: text.into(), parsed }))
    }

    /// The file it was read from.
    pub fn source(&self) -> &Path {
        &self.source
    }

    /// The exact bytes that are carried over.
    pub fn text(&self) -> &[u8] {
        &self.text
    }

    /// The parsed document (config, sources and stored hash).
    pub fn fingerprint(&self) -> &FingerprintFile {
        &self.parsed
    }
}

/// Two carried fingerprints are equal when their bytes are.
impl PartialEq for CarriedFingerprint {
    fn eq(&self, other: &Self) -> bool {
        self.text == other.text
    }
}

impl Eq for CarriedFingerprint {}

#[cfg(test)]
mod tests {
    use super::*;
    use stowage_fingerprint::SourceStamp;

    #[test]
    fn carries_the_exact_bytes_and_refuses_other_versions() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("fingerprint.json");
        let stamps = vec![SourceStamp::MtimeSize { path: "/a".into(), mtime_ns: None, size: None }];
        // Python's json.dumps(indent=2) of a config with a float: kept as written, not re-encoded.
        let file = FingerprintFile::new(5, serde_json::json!({"scale": 1e-05}), stamps);
        let text = file.to_python_json() + "\n";
        std::fs::write(&path, &text).unwrap();
        let carried = CarriedFingerprint::read(dir.path()).unwrap().unwrap();
        assert_eq!(carried.text(), text.as_bytes());
        assert_eq!(carried.fingerprint(), &file);
        assert_eq!(carried.source(), path);
        let old = FingerprintFile::new(4, serde_json::json!({}), Vec::new());
        std::fs::write(&path, old.to_python_json()).unwrap();
        let err = CarriedFingerprint::read(dir.path()).unwrap_err();
        assert!(matches!(err, Error::Incompatible { .. }), "{err}");
        std::fs::write(&path, r#"{"cache_version": 5}"#).unwrap();
        let err = CarriedFingerprint::read(dir.path()).unwrap_err();
        assert!(
            matches!(err, Error::Corrupted { .. }) && err.to_string().contains("hash"),
            "{err}"
        );
    }
}
