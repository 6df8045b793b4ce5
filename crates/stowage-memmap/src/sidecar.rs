//! Deduplicated JSON sidecars (`panels.json`, `alleles.json`): `{"0": "<json text>", ...}`, each
//! distinct text stored once and referenced from index rows by its integer key.

use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use foldhash::HashMap;
use stowage_core::{Error, Result};

/// One sidecar file, loaded on the first lookup and kept for the life of the reader.
///
/// ```no_run
/// use stowage_memmap::test_support::Sidecar;
/// let panels = Sidecar::new("cache/panels.json");
/// let text = panels.lookup(0)?; // loads the file once
/// # Ok::<(), stowage_core::Error>(())
/// ```
#[derive(Debug)]
pub struct Sidecar {
    path: PathBuf,
    entries: OnceLock<HashMap<i32, Arc<str>>>,
}

impl Sidecar {
    /// The sidecar at `path`; nothing is read yet.
    pub fn new(path: impl Into<PathBuf>) -> Sidecar {
        Sidecar { path: path.into(), entries: OnceLock::new() }
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Every entry, loading the file on first use. Errors: [`Error::Corrupted`] naming the file when
    /// it is missing, does not parse, or holds a key that is not a decimal int32 or a value that is
    /// not a string. A failed load is retried on the next call.
    pub fn entries(&self) -> Result<&HashMap<i32, Arc<str>>> {
        if let Some(entries) = self.entries.get() {
            return Ok(entries);
        }
        let loaded = self.load()?;
        let _ = self.entries.set(loaded);
        Ok(self.entries.get().expect("set just now or by another thread"))
    }

    /// The JSON text stored under `key`. A key the file does not hold is [`Error::Corrupted`]
    /// naming the file and the key (the index references it, so the sidecar is damaged).
    pub fn lookup(&self, key: i32) -> Result<Arc<str>> {
        self.entries()?.get(&key).cloned().ok_or_else(|| {
            Error::corrupted(&self.path, format!("has no key \"{key}\" referenced by the index"))
        })
    }

    fn load(&self) -> Result<HashMap<i32, Arc<str>>> {
        let bad = |detail: String| Error::corrupted(&self.path, detail);
        let text = match std::fs::read(&self.path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(bad("sidecar file is missing".into()));
            }
            Err(e) => return Err(Error::io(&self.path, e)),
        };
        let value: serde_json::Value = serde_json::from_slice(&text)
            .map_err(|e| bad(format!("does not parse as JSON: {e}")))?;
        let serde_json::Value::Object(object) = value else {
            return Err(bad("is not a JSON object".into()));
        };
        let mut entries = HashMap::default();
        for (key, value) in object {
            let number: i32 = key
                .parse()
                .ok()
                .filter(|n: &i32| n.to_string() == key)
                .ok_or_else(|| bad(format!("key {key:?} is not a decimal int32")))?;
            let serde_json::Value::String(text) = value else {
                return Err(bad(format!("key {key:?}: value is not a JSON string")));
            };
            entries.insert(number, Arc::from(text));
        }
        Ok(entries)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loads_lazily_and_looks_up() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("panels.json");
        let sidecar = Sidecar::new(&path);
        // Nothing is read until the first lookup.
        std::fs::write(&path, r#"{"0": "[1, 2]", "1": "{\"a\": null}"}"#).unwrap();
        assert_eq!(&*sidecar.lookup(1).unwrap(), r#"{"a": null}"#);
        std::fs::remove_file(&path).unwrap();
        assert_eq!(&*sidecar.lookup(0).unwrap(), "[1, 2]", "kept for the life of the reader");
        let err = sidecar.lookup(7).unwrap_err().to_string();
        assert!(err.contains("panels.json") && err.contains("\"7\""), "{err}");
    }

    #[test]
    fn damaged_files_are_corruption_naming_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("alleles.json");
        let sidecar = Sidecar::new(&path);
        assert!(sidecar.lookup(0).unwrap_err().to_string().contains("missing"));
        for (text, needle) in [
            ("{", "does not parse"),
            ("[]", "not a JSON object"),
            (r#"{"x": "1"}"#, "not a decimal"),
            (r#"{"01": "1"}"#, "not a decimal"),
            (r#"{"0": 1}"#, "not a JSON string"),
        ] {
            std::fs::write(&path, text).unwrap();
            let err = Sidecar::new(&path).lookup(0).unwrap_err();
            let message = err.to_string();
            assert!(matches!(err, Error::Corrupted { .. }), "{message}");
            assert!(message.contains("alleles.json") && message.contains(needle), "{message}");
        }
    }
}
