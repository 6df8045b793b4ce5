//! Is a stored fingerprint still valid for the current inputs?

use std::fmt;
use std::path::{Path, PathBuf};

use crate::canonical_json::ToPyValue;
use stowage_core::Error;

use super::{FingerprintFile, SourceStamp, fingerprint_hash};

/// The outcome of [`validate_fingerprint`]. Only [`FingerprintStatus::Fresh`] means the cache may be
/// used; every other outcome means "rebuild".
///
/// ```
/// use stowage_fingerprint::{validate_fingerprint, FingerprintStatus};
/// let status = validate_fingerprint("/no/such/cache/fingerprint.json", &serde_json::json!({}), &[]);
/// assert!(matches!(status, FingerprintStatus::Missing { .. }));
/// assert!(!status.is_fresh());
/// ```
#[derive(Debug, Clone, PartialEq)]
pub enum FingerprintStatus {
    /// The stored hash equals the hash of the current config and sources.
    Fresh,
    /// The stored hash differs from the hash of the current inputs. Pass `stored` to
    /// [`explain`](super::explain) to see which config fields and sources changed.
    Stale {
        /// What the file records.
        stored: Box<FingerprintFile>,
        /// The hash of the current config and sources.
        current_hash: String,
    },
    /// There is no fingerprint file (the cache was never finalized, or it was deleted).
    Missing {
        /// The path that was looked for.
        path: PathBuf,
    },
    /// The file exists but cannot be read or is not a fingerprint document.
    Unreadable {
        /// The file.
        path: PathBuf,
        /// Why it could not be used, naming the field when it is malformed.
        reason: String,
    },
}

impl FingerprintStatus {
    /// True only for [`FingerprintStatus::Fresh`].
    ///
    /// ```
    /// assert!(stowage_fingerprint::FingerprintStatus::Fresh.is_fresh());
    /// ```
    pub fn is_fresh(&self) -> bool {
        matches!(self, FingerprintStatus::Fresh)
    }
}

impl fmt::Display for FingerprintStatus {
    /// One line saying what was found and, when stale, both hashes.
    ///
    /// ```
    /// use stowage_fingerprint::FingerprintStatus;
    /// let status = FingerprintStatus::Missing { path: "/c/fingerprint.json".into() };
    /// assert_eq!(status.to_string(), "fingerprint /c/fingerprint.json is missing; the cache must be rebuilt");
    /// ```
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FingerprintStatus::Fresh => write!(formatter, "fingerprint is fresh"),
            FingerprintStatus::Stale { stored, current_hash } => write!(
                formatter,
                "fingerprint is stale: stored hash {}, current inputs hash {current_hash}",
                stored.hash
            ),
            FingerprintStatus::Missing { path } => write!(
                formatter,
                "fingerprint {} is missing; the cache must be rebuilt",
                path.display()
            ),
            FingerprintStatus::Unreadable { path, reason } => write!(
                formatter,
                "fingerprint {} is unreadable ({reason}); the cache must be rebuilt",
                path.display()
            ),
        }
    }
}

/// Checks the `fingerprint.json` at `path` against the current config and source stamps, as DNANet
/// does: recompute [`fingerprint_hash`] of the current inputs and compare it with the stored `hash`
/// only. A missing or unparsable file is not an error but a status that means "rebuild".
///
/// ```
/// use stowage_fingerprint::{validate_fingerprint, FingerprintFile, FingerprintStatus, SourceStamp};
/// let dir = tempfile::tempdir()?;
/// let path = dir.path().join("fingerprint.json");
/// let config = serde_json::json!({"root": "/data"});
/// let stamps = vec![SourceStamp::MtimeSize { path: "/data/a".into(), mtime_ns: Some(1), size: Some(2) }];
/// FingerprintFile::new(5, config.clone(), stamps.clone()).write(&path)?;
/// assert_eq!(validate_fingerprint(&path, &config, &stamps), FingerprintStatus::Fresh);
///
/// let touched = vec![SourceStamp::MtimeSize { path: "/data/a".into(), mtime_ns: Some(9), size: Some(2) }];
/// assert!(matches!(validate_fingerprint(&path, &config, &touched), FingerprintStatus::Stale { .. }));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn validate_fingerprint(
    path: impl AsRef<Path>,
    current_config: &(impl ToPyValue + ?Sized),
    current_stamps: &[SourceStamp],
) -> FingerprintStatus {
    let path = path.as_ref();
    let stored = match FingerprintFile::read(path) {
        Ok(stored) => stored,
        Err(Error::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {
            return FingerprintStatus::Missing { path: path.to_path_buf() };
        }
        Err(error) => {
            return FingerprintStatus::Unreadable {
                path: path.to_path_buf(),
                reason: error.to_string(),
            };
        }
    };
    let current_hash = fingerprint_hash(current_config, current_stamps);
    if stored.hash == current_hash {
        FingerprintStatus::Fresh
    } else {
        FingerprintStatus::Stale { stored: Box::new(stored), current_hash }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unparsable_file_is_unreadable_not_a_panic() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("fingerprint.json");
        std::fs::write(&path, b"{\"cache_version\": 5, \"hash\": ").unwrap();
        let status = validate_fingerprint(&path, &serde_json::json!({}), &[]);
        let FingerprintStatus::Unreadable { reason, .. } = &status else { panic!("{status:?}") };
        assert!(reason.contains("not valid JSON"), "{reason}");
        assert!(status.to_string().contains("fingerprint.json"), "{status}");
    }

    #[test]
    fn only_the_hash_is_compared() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("fingerprint.json");
        let config = serde_json::json!({"a": 1});
        let mut stored = FingerprintFile::new(5, config.clone(), vec![]);
        // A different cache_version and an edited config in the file do not matter: only `hash` does.
        stored.cache_version = 4;
        stored.config = serde_json::json!({"edited": true});
        stored.write(&path).unwrap();
        assert_eq!(validate_fingerprint(&path, &config, &[]), FingerprintStatus::Fresh);
    }

    #[test]
    fn stale_status_carries_both_hashes() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("fingerprint.json");
        FingerprintFile::new(5, serde_json::json!({"a": 1}), vec![]).write(&path).unwrap();
        let status = validate_fingerprint(&path, &serde_json::json!({"a": 2}), &[]);
        let FingerprintStatus::Stale { stored, current_hash } = &status else {
            panic!("{status:?}")
        };
        assert_ne!(&stored.hash, current_hash);
        let message = status.to_string();
        assert!(
            message.contains(&stored.hash) && message.contains(current_hash.as_str()),
            "{message}"
        );
    }
}
