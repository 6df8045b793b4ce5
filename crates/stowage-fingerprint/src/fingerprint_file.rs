//! `fingerprint.json`: the stored fingerprint of a finished cache.

use std::path::Path;

use serde_json::Value;

use crate::canonical_json::{PyJsonOptions, PyValue, ToPyValue, to_python_json};
use stowage_core::{Error, IoResultExt, Result};

use super::{SourceStamp, fingerprint_hash};
use stowage_core::file_safety::atomic_write;

/// The name of the file inside a cache directory.
pub const FINGERPRINT_FILE_NAME: &str = "fingerprint.json";

/// The content of `fingerprint.json`:
/// `{"cache_version": 5, "hash": "<64 hex>", "config": {...}, "sources": [...]}`.
///
/// Written the way DNANet writes it (`json.dumps(document, indent=2)`: this key order, the config in
/// its insertion order, ASCII escapes, no trailing newline), so a file written here is byte-identical
/// to the original's.
///
/// `config` is a `serde_json::Value`, so a stored config holding `NaN` or `Infinity` (which Python
/// writes as bare `NaN`) cannot be read back: [`validate_fingerprint`](super::validate_fingerprint)
/// reports such a file as unreadable, which means "rebuild".
///
/// ```
/// use stowage_fingerprint::{FingerprintFile, SourceStamp};
/// let dir = tempfile::tempdir()?;
/// let path = dir.path().join("fingerprint.json");
/// let stamps = vec![SourceStamp::ContentHash { path: "a.hid".into(), content_hash: None }];
/// let written = FingerprintFile::new(5, serde_json::json!({"root": "/data"}), stamps);
/// written.write(&path)?;
/// let read = FingerprintFile::read(&path)?;
/// assert_eq!(read, written);
/// assert_eq!(read.recompute_hash(), read.hash);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct FingerprintFile {
    /// The cache format version (DNANet: `5`).
    pub cache_version: i64,
    /// [`fingerprint_hash`] of `config` and `sources`, as recorded.
    pub hash: String,
    /// The configuration payload (the one the [cache key](super::cache_key) is computed from).
    pub config: Value,
    /// The source stamps, sorted by path.
    pub sources: Vec<SourceStamp>,
}

impl FingerprintFile {
    /// Builds the record for `config` and `sources`: sorts the stamps by path and computes the hash.
    ///
    /// ```
    /// use stowage_fingerprint::{fingerprint_hash, FingerprintFile, SourceStamp};
    /// let stamp = |path: &str| SourceStamp::ContentHash { path: path.into(), content_hash: None };
    /// let config = serde_json::json!({"cache_version": 5});
    /// let file = FingerprintFile::new(5, config.clone(), vec![stamp("b"), stamp("a")]);
    /// assert_eq!(file.sources, [stamp("a"), stamp("b")]);
    /// assert_eq!(file.hash, fingerprint_hash(&config, &file.sources));
    /// ```
    pub fn new(cache_version: i64, config: Value, mut sources: Vec<SourceStamp>) -> Self {
        sources.sort_by(|left, right| left.path().cmp(right.path()));
        let hash = fingerprint_hash(&config, &sources);
        FingerprintFile { cache_version, hash, config, sources }
    }

    /// Recomputes the hash from the recorded `config` and `sources`. It differs from `hash` when the
    /// file was edited by hand or written by a different fingerprint scheme.
    ///
    /// ```
    /// use stowage_fingerprint::FingerprintFile;
    /// let mut file = FingerprintFile::new(5, serde_json::json!({}), vec![]);
    /// assert_eq!(file.recompute_hash(), file.hash);
    /// file.config = serde_json::json!({"edited": true});
    /// assert_ne!(file.recompute_hash(), file.hash);
    /// ```
    pub fn recompute_hash(&self) -> String {
        fingerprint_hash(&self.config, &self.sources)
    }

    /// The exact text [`FingerprintFile::write`] writes: `json.dumps(document, indent=2)`.
    ///
    /// ```
    /// use stowage_fingerprint::FingerprintFile;
    /// let file = FingerprintFile { cache_version: 5, hash: "ab".into(), config: serde_json::json!({"root": "é"}), sources: vec![] };
    /// assert_eq!(
    ///     file.to_python_json(),
    ///     "{\n  \"cache_version\": 5,\n  \"hash\": \"ab\",\n  \"config\": {\n    \"root\": \"\\u00e9\"\n  },\n  \"sources\": []\n}"
    /// );
    /// ```
    pub fn to_python_json(&self) -> String {
        let sources = self.sources.iter().map(|stamp| stamp.to_py_value().into_owned()).collect();
        let document = PyValue::Dict(vec![
            ("cache_version".to_owned(), PyValue::Int(self.cache_version.into())),
            ("hash".to_owned(), PyValue::Str(self.hash.clone())),
            ("config".to_owned(), PyValue::from(&self.config)),
            ("sources".to_owned(), PyValue::List(sources)),
        ]);
        to_python_json(&document, &PyJsonOptions::indented(2))
    }

    /// Writes the file atomically (temporary file, fsync, rename, fsync of the directory): a crash
    /// leaves the old file or the new one, never a torn one.
    ///
    /// See [`FingerprintFile`] for an example.
    pub fn write(&self, path: impl AsRef<Path>) -> Result<()> {
        atomic_write(path.as_ref(), self.to_python_json().as_bytes())
    }

    /// Reads and parses a `fingerprint.json`.
    ///
    /// Errors: [`Error::Io`] when the file cannot be read (a missing file is an `Io` error of kind
    /// `NotFound`); [`Error::Corrupted`] naming the file and the offending field when it is not a
    /// fingerprint document.
    ///
    /// ```
    /// use stowage_core::Error;
    /// use stowage_fingerprint::FingerprintFile;
    /// let dir = tempfile::tempdir()?;
    /// let path = dir.path().join("fingerprint.json");
    /// std::fs::write(&path, r#"{"cache_version": 5, "config": {}, "sources": []}"#)?;
    /// let error = FingerprintFile::read(&path).unwrap_err();
    /// assert!(matches!(error, Error::Corrupted { .. }));
    /// assert!(error.to_string().contains("\"hash\""));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn read(path: impl AsRef<Path>) -> Result<FingerprintFile> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).at(path)?;
        parse(&text).map_err(|detail| Error::corrupted(path, detail))
    }
}

/// Parses a fingerprint document; the error names the field that is wrong.
fn parse(text: &str) -> std::result::Result<FingerprintFile, String> {
    let document: Value =
        serde_json::from_str(text).map_err(|error| format!("not valid JSON: {error}"))?;
    let object = document
        .as_object()
        .ok_or_else(|| format!("expected a JSON object, got {}", json_kind(&document)))?;
    let field = |name: &str| object.get(name).ok_or_else(|| format!("missing field {name:?}"));

    let cache_version = field("cache_version")?;
    let cache_version = cache_version.as_i64().ok_or_else(|| {
        format!("field \"cache_version\" must be an integer, got {cache_version}")
    })?;
    let hash = field("hash")?;
    let hash =
        hash.as_str().ok_or_else(|| format!("field \"hash\" must be a string, got {hash}"))?;
    let config = field("config")?.clone();
    let sources = field("sources")?;
    let sources = sources
        .as_array()
        .ok_or_else(|| format!("field \"sources\" must be a list, got {}", json_kind(sources)))?
        .iter()
        .enumerate()
        .map(|(index, stamp)| {
            SourceStamp::from_json(stamp).map_err(|error| format!("sources[{index}]: {error}"))
        })
        .collect::<std::result::Result<Vec<_>, _>>()?;
    Ok(FingerprintFile { cache_version, hash: hash.to_owned(), config, sources })
}

fn json_kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "an object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> FingerprintFile {
        FingerprintFile::new(
            5,
            serde_json::json!({"root": "/srv/casework_é", "scale": 1e-5, "n": null}),
            vec![
                SourceStamp::MtimeSize { path: "/b".into(), mtime_ns: Some(1), size: Some(38) },
                SourceStamp::MtimeSize { path: "/a".into(), mtime_ns: None, size: None },
            ],
        )
    }

    #[test]
    fn written_text_matches_python_indent_2() {
        let expected = concat!(
            "{\n  \"cache_version\": 5,\n  \"hash\": \"",
            "HASH",
            "\",\n  \"config\": {\n    \"root\": \"/srv/casework_\\u00e9\",\n    \"scale\": 1e-05,\n",
            "    \"n\": null\n  },\n  \"sources\": [\n    {\n      \"path\": \"/a\",\n",
            "      \"mtime_ns\": null,\n      \"size\": null\n    },\n    {\n      \"path\": \"/b\",\n",
            "      \"mtime_ns\": 1,\n      \"size\": 38\n    }\n  ]\n}"
        );
        let file = sample();
        assert_eq!(file.to_python_json(), expected.replace("HASH", &file.hash));
    }

    #[test]
    fn write_then_read_round_trips() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(FINGERPRINT_FILE_NAME);
        sample().write(&path).unwrap();
        assert_eq!(FingerprintFile::read(&path).unwrap(), sample());
    }

    #[test]
    fn parse_errors_name_the_field() {
        let cases = [
            ("[]", "expected a JSON object, got a list"),
            ("{", "not valid JSON"),
            (r#"{"hash": "x", "config": {}, "sources": []}"#, "missing field \"cache_version\""),
            (
                r#"{"cache_version": "5", "hash": "x", "config": {}, "sources": []}"#,
                "\"cache_version\" must be an integer",
            ),
            (
                r#"{"cache_version": 5, "hash": 1, "config": {}, "sources": []}"#,
                "\"hash\" must be a string",
            ),
            (
                r#"{"cache_version": 5, "hash": "x", "config": {}, "sources": {}}"#,
                "\"sources\" must be a list",
            ),
            (
                r#"{"cache_version": 5, "hash": "x", "config": {}, "sources": [{"path": "a"}]}"#,
                "sources[0]",
            ),
            (
                r#"{"cache_version": 5, "hash": "x", "config": {"a": NaN}, "sources": []}"#,
                "not valid JSON",
            ),
        ];
        for (text, expected) in cases {
            let error = parse(text).unwrap_err();
            assert!(error.contains(expected), "{text}: {error}");
        }
    }
}
