//! Source stamps: what a fingerprint records about each source file.

use std::borrow::Cow;
use std::fmt;
use std::io::Read;
use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::canonical_json::{PyValue, ToPyValue, lower_hex};
use stowage_core::{Error, IoResultExt, Result};

/// What a fingerprint records about one source file. Both kinds of DNANet's history are supported.
///
/// A missing file is recorded with null fields (`None`), not an error: the fingerprint then changes
/// when the file appears. Serialized with DNANet's field names and order (see [`SourceStamp::to_json`]).
///
/// ```
/// use stowage_fingerprint::SourceStamp;
/// let stamp = SourceStamp::from_metadata("/definitely/not/here.hid")?;
/// assert_eq!(stamp, SourceStamp::MtimeSize { path: "/definitely/not/here.hid".into(), mtime_ns: None, size: None });
/// # Ok::<(), stowage_core::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum SourceStamp {
    /// `{"path", "mtime_ns", "size"}`: cheap (one `stat`), but a mere touch or a copy to another
    /// machine invalidates the cache.
    MtimeSize {
        /// The source path as given.
        path: String,
        /// Modification time in nanoseconds since the Unix epoch (Python's `st_mtime_ns`); `None` when missing.
        mtime_ns: Option<i64>,
        /// Size in bytes; `None` when the file is missing.
        size: Option<u64>,
    },
    /// `{"path", "content_hash"}`: survives copies between machines, but reads the whole file.
    ContentHash {
        /// The source path, relative to the dataset root when one was given.
        path: String,
        /// Lowercase hex SHA-256 of the file's bytes; `None` when the file is missing.
        content_hash: Option<String>,
    },
}

impl SourceStamp {
    /// Stamps `path` with its modification time and size (`os.stat(path)`, following symlinks).
    ///
    /// A missing file gives `None` fields. Other I/O errors, and paths that are not valid UTF-8 (they
    /// have no exact JSON form), are errors naming the path.
    ///
    /// ```
    /// use stowage_fingerprint::SourceStamp;
    /// let dir = tempfile::tempdir()?;
    /// let file = dir.path().join("a.hid");
    /// std::fs::write(&file, b"abc")?;
    /// let SourceStamp::MtimeSize { size, mtime_ns, .. } = SourceStamp::from_metadata(&file)? else { unreachable!() };
    /// assert_eq!(size, Some(3));
    /// assert!(mtime_ns.is_some());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn from_metadata(path: impl AsRef<Path>) -> Result<SourceStamp> {
        let path = path.as_ref();
        let recorded_path = utf8_path(path)?.to_owned();
        match std::fs::metadata(path) {
            Ok(metadata) => {
                let modified = metadata.modified().at(path)?;
                Ok(SourceStamp::MtimeSize {
                    path: recorded_path,
                    mtime_ns: Some(nanoseconds_since_epoch(modified)),
                    size: Some(metadata.len()),
                })
            }
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
                Ok(SourceStamp::MtimeSize { path: recorded_path, mtime_ns: None, size: None })
            }
            Err(error) => Err(Error::io(path, error)),
        }
    }

    /// Stamps `path` with the SHA-256 of its bytes. With `root`, the recorded path is relative to it
    /// (Python's `str(path.relative_to(root))`), so the stamp survives moving the dataset.
    ///
    /// A missing file gives `content_hash: None`. A path outside `root`, a path that is not valid
    /// UTF-8 and other I/O errors are errors naming the path.
    ///
    /// ```
    /// use stowage_fingerprint::SourceStamp;
    /// let dir = tempfile::tempdir()?;
    /// std::fs::write(dir.path().join("a.hid"), b"abc")?;
    /// let stamp = SourceStamp::from_contents(dir.path().join("a.hid"), Some(dir.path()))?;
    /// assert_eq!(stamp, SourceStamp::ContentHash {
    ///     path: "a.hid".into(),
    ///     content_hash: Some("ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad".into()),
    /// });
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn from_contents(path: impl AsRef<Path>, root: Option<&Path>) -> Result<SourceStamp> {
        let path = path.as_ref();
        let recorded_path = match root {
            None => utf8_path(path)?.to_owned(),
            Some(root) => relative_path(path, root)?,
        };
        Ok(SourceStamp::ContentHash { path: recorded_path, content_hash: sha256_of_file(path)? })
    }

    /// The recorded path; stamps are sorted by it.
    ///
    /// ```
    /// let stamp = stowage_fingerprint::SourceStamp::ContentHash { path: "a.hid".into(), content_hash: None };
    /// assert_eq!(stamp.path(), "a.hid");
    /// ```
    pub fn path(&self) -> &str {
        match self {
            SourceStamp::MtimeSize { path, .. } | SourceStamp::ContentHash { path, .. } => path,
        }
    }

    /// True when the file did not exist when stamped (all fields null).
    ///
    /// ```
    /// let stamp = stowage_fingerprint::SourceStamp::ContentHash { path: "a.hid".into(), content_hash: None };
    /// assert!(stamp.is_missing());
    /// ```
    pub fn is_missing(&self) -> bool {
        match self {
            SourceStamp::MtimeSize { mtime_ns, size, .. } => mtime_ns.is_none() && size.is_none(),
            SourceStamp::ContentHash { content_hash, .. } => content_hash.is_none(),
        }
    }

    /// The stamp as DNANet writes it: `{"path", "mtime_ns", "size"}` or `{"path", "content_hash"}`,
    /// in that key order, missing values as `null`.
    ///
    /// ```
    /// use stowage_fingerprint::SourceStamp;
    /// let stamp = SourceStamp::MtimeSize { path: "a.hid".into(), mtime_ns: Some(7), size: None };
    /// assert_eq!(stamp.to_json().to_string(), r#"{"path":"a.hid","mtime_ns":7,"size":null}"#);
    /// ```
    pub fn to_json(&self) -> Value {
        let mut object = serde_json::Map::new();
        object.insert("path".into(), Value::from(self.path()));
        match self {
            SourceStamp::MtimeSize { mtime_ns, size, .. } => {
                object.insert("mtime_ns".into(), Value::from(*mtime_ns));
                object.insert("size".into(), Value::from(*size));
            }
            SourceStamp::ContentHash { content_hash, .. } => {
                object.insert("content_hash".into(), Value::from(content_hash.clone()));
            }
        }
        Value::Object(object)
    }

    /// Reads a stamp written by [`SourceStamp::to_json`] or by DNANet. The kind is told by the keys:
    /// `content_hash` or `mtime_ns` + `size`. Errors name the offending field and value.
    ///
    /// ```
    /// use stowage_fingerprint::SourceStamp;
    /// let json = serde_json::json!({"path": "a.hid", "content_hash": null});
    /// assert_eq!(SourceStamp::from_json(&json)?, SourceStamp::ContentHash { path: "a.hid".into(), content_hash: None });
    /// assert!(SourceStamp::from_json(&serde_json::json!({"path": "a.hid"})).is_err());
    /// # Ok::<(), stowage_core::Error>(())
    /// ```
    pub fn from_json(value: &Value) -> Result<SourceStamp> {
        let object = value.as_object().ok_or_else(|| {
            Error::invalid(format!("source stamp must be a JSON object, got {value}"))
        })?;
        let field = |name: &str| object.get(name).unwrap_or(&Value::Null);
        let wrong = |name: &str, expected: &str| {
            Error::invalid(format!(
                "source stamp {value}: field {name:?} must be {expected}, got {}",
                field(name)
            ))
        };
        let path = field("path").as_str().ok_or_else(|| wrong("path", "a string"))?.to_owned();
        if object.contains_key("content_hash") {
            let content_hash = match field("content_hash") {
                Value::Null => None,
                Value::String(hash) => Some(hash.clone()),
                _ => return Err(wrong("content_hash", "a string or null")),
            };
            return Ok(SourceStamp::ContentHash { path, content_hash });
        }
        if object.contains_key("mtime_ns") && object.contains_key("size") {
            let mtime_ns = match field("mtime_ns") {
                Value::Null => None,
                other => {
                    Some(other.as_i64().ok_or_else(|| wrong("mtime_ns", "an integer or null"))?)
                }
            };
            let size = match field("size") {
                Value::Null => None,
                other => Some(
                    other
                        .as_u64()
                        .ok_or_else(|| wrong("size", "a non-negative integer or null"))?,
                ),
            };
            return Ok(SourceStamp::MtimeSize { path, mtime_ns, size });
        }
        Err(Error::invalid(format!(
            "source stamp {value} has neither \"content_hash\" nor \"mtime_ns\" and \"size\""
        )))
    }

    /// The recorded fields other than the path, for messages: `mtime_ns=… size=…` or `content_hash=…`.
    pub(super) fn describe_fields(&self) -> String {
        fn or_null<T: fmt::Display>(value: &Option<T>) -> String {
            value.as_ref().map_or_else(|| "null".to_owned(), T::to_string)
        }
        match self {
            SourceStamp::MtimeSize { mtime_ns, size, .. } => {
                format!("mtime_ns={} size={}", or_null(mtime_ns), or_null(size))
            }
            SourceStamp::ContentHash { content_hash, .. } => {
                format!("content_hash={}", or_null(content_hash))
            }
        }
    }
}

impl fmt::Display for SourceStamp {
    /// `path (fields)`, e.g. `/data/a.hid (mtime_ns=1767225600000000000 size=38)`.
    ///
    /// ```
    /// let stamp = stowage_fingerprint::SourceStamp::MtimeSize { path: "a.hid".into(), mtime_ns: None, size: None };
    /// assert_eq!(stamp.to_string(), "a.hid (mtime_ns=null size=null)");
    /// ```
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(formatter, "{} ({})", self.path(), self.describe_fields())
    }
}

impl ToPyValue for SourceStamp {
    fn to_py_value(&self) -> Cow<'_, PyValue> {
        Cow::Owned(PyValue::from(self.to_json()))
    }
}

fn utf8_path(path: &Path) -> Result<&str> {
    path.to_str().ok_or_else(|| {
        Error::invalid(format!(
            "source path {} is not valid UTF-8; it cannot be recorded in a fingerprint",
            path.display()
        ))
    })
}

/// `str(path.relative_to(root))`: `.` for the root itself.
fn relative_path(path: &Path, root: &Path) -> Result<String> {
    let relative = path.strip_prefix(root).map_err(|_| {
        Error::invalid(format!(
            "source {} is not inside the dataset root {}",
            path.display(),
            root.display()
        ))
    })?;
    let relative = utf8_path(relative)?;
    Ok(if relative.is_empty() { ".".to_owned() } else { relative.to_owned() })
}

/// Python's `st_mtime_ns`: negative before 1970.
fn nanoseconds_since_epoch(time: SystemTime) -> i64 {
    let nanoseconds = match time.duration_since(UNIX_EPOCH) {
        Ok(after) => i128::try_from(after.as_nanos()).unwrap_or(i128::MAX),
        Err(before) => -i128::try_from(before.duration().as_nanos()).unwrap_or(i128::MAX),
    };
    nanoseconds.clamp(i64::MIN.into(), i64::MAX.into()) as i64
}

/// Streams the file through SHA-256; `None` when it does not exist.
fn sha256_of_file(path: &Path) -> Result<Option<String>> {
    let mut file = match std::fs::File::open(path) {
        Ok(file) => file,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(error) => return Err(Error::io(path, error)),
    };
    let mut hasher = Sha256::new();
    let mut buffer = vec![0u8; 1 << 20];
    loop {
        let read = match file.read(&mut buffer) {
            Ok(0) => break,
            Ok(read) => read,
            Err(error) if error.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(error) => return Err(Error::io(path, error)),
        };
        hasher.update(&buffer[..read]);
    }
    Ok(Some(lower_hex(&hasher.finalize())))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn metadata_stamp_records_mtime_in_nanoseconds() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.hid");
        std::fs::write(&path, b"placeholder").unwrap();
        let mtime = UNIX_EPOCH + Duration::from_nanos(1_767_225_600_123_456_789);
        std::fs::File::options().write(true).open(&path).unwrap().set_modified(mtime).unwrap();
        let stamp = SourceStamp::from_metadata(&path).unwrap();
        assert_eq!(
            stamp,
            SourceStamp::MtimeSize {
                path: path.to_str().unwrap().to_owned(),
                mtime_ns: Some(1_767_225_600_123_456_789),
                size: Some(11),
            }
        );
    }

    #[test]
    fn mtime_before_1970_is_negative() {
        let before = UNIX_EPOCH - Duration::from_nanos(1_500);
        assert_eq!(nanoseconds_since_epoch(before), -1_500);
    }

    #[test]
    fn missing_file_gives_null_content_hash() {
        let dir = tempfile::tempdir().unwrap();
        let stamp =
            SourceStamp::from_contents(dir.path().join("gone.hid"), Some(dir.path())).unwrap();
        assert_eq!(stamp, SourceStamp::ContentHash { path: "gone.hid".into(), content_hash: None });
        assert!(stamp.is_missing());
    }

    #[test]
    fn path_outside_root_is_an_error_naming_both() {
        let error = SourceStamp::from_contents("/a/b.hid", Some(Path::new("/c"))).unwrap_err();
        let message = error.to_string();
        assert!(message.contains("/a/b.hid") && message.contains("/c"), "{message}");
    }

    #[test]
    fn nested_relative_path_and_root_itself() {
        assert_eq!(relative_path(Path::new("/r/x/y.hid"), Path::new("/r")).unwrap(), "x/y.hid");
        assert_eq!(relative_path(Path::new("/r"), Path::new("/r")).unwrap(), ".");
    }

    #[test]
    fn json_round_trip_keeps_dnanet_field_order() {
        let stamps = [
            SourceStamp::MtimeSize { path: "a".into(), mtime_ns: Some(-5), size: Some(38) },
            SourceStamp::MtimeSize { path: "b".into(), mtime_ns: None, size: None },
            SourceStamp::ContentHash { path: "c".into(), content_hash: Some("ab".into()) },
        ];
        for stamp in stamps {
            let json = stamp.to_json();
            assert_eq!(SourceStamp::from_json(&json).unwrap(), stamp);
        }
        let keys: Vec<String> =
            SourceStamp::MtimeSize { path: "a".into(), mtime_ns: None, size: None }
                .to_json()
                .as_object()
                .unwrap()
                .keys()
                .cloned()
                .collect();
        assert_eq!(keys, ["path", "mtime_ns", "size"]);
    }

    #[test]
    fn malformed_stamp_errors_name_the_field() {
        let error =
            SourceStamp::from_json(&serde_json::json!({"path": "a", "mtime_ns": "x", "size": 1}))
                .unwrap_err()
                .to_string();
        assert!(error.contains("\"mtime_ns\"") && error.contains("\"x\""), "{error}");
        let error = SourceStamp::from_json(&serde_json::json!({"path": 3, "content_hash": null}))
            .unwrap_err()
            .to_string();
        assert!(error.contains("\"path\""), "{error}");
    }
}
