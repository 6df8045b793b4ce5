//! `<DST>/.stowage.convert.json`: the sources a conversion target is converted from.
//!
//! `convert` writes it (durably, before the target cache is created) so that running the same
//! command again resumes the conversion, and a *different* source into the same target is
//! refused instead of silently keeping the target's samples for the keys both hold. `--merge`
//! adds a source to the list. The original tools never read it; it names only paths and kinds.
//!
//! ```json
//! {"format":"stowage-convert","version":1,"target":"arrow",
//!  "sources":[{"path":"/data/cache-a","kind":"memmap row cache (DNANet)"}]}
//! ```

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::error::CliError;

/// The record's file name inside the target directory.
pub const FILE_NAME: &str = ".stowage.convert.json";

const FORMAT: &str = "stowage-convert";
const VERSION: u32 = 1;

/// One source of a conversion: its canonical path (or its URL) and what kind of cache it is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SourceId {
    /// The source's absolute path with every symlink resolved, or its URL as given.
    pub path: PathBuf,
    /// The kind of cache, as `stowage inspect` names it.
    pub kind: String,
}

impl SourceId {
    /// The identity of the source at `path`, a cache of `kind`. A URL is its own identity: it
    /// names no local file to resolve.
    pub fn of(path: &Path, kind: &str) -> Result<SourceId, CliError> {
        if crate::locate::is_url(path) {
            return Ok(SourceId { path: path.to_path_buf(), kind: kind.to_owned() });
        }
        let path = std::fs::canonicalize(path)
            .map_err(|e| CliError::new(format!("{}: {e}", path.display())))?;
        Ok(SourceId { path, kind: kind.to_owned() })
    }
}

impl std::fmt::Display for SourceId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({})", self.path.display(), self.kind)
    }
}

/// What the record holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConvertRecord {
    format: String,
    version: u32,
    /// The backend written (`--to`).
    pub target: String,
    /// Every source converted into the target, the first one first.
    pub sources: Vec<SourceId>,
}

impl ConvertRecord {
    /// A record of one source converted to `target`.
    pub fn new(target: &str, source: SourceId) -> ConvertRecord {
        ConvertRecord {
            format: FORMAT.to_owned(),
            version: VERSION,
            target: target.to_owned(),
            sources: vec![source],
        }
    }

    /// The record in `dst`, `None` when it has none.
    ///
    /// # Errors
    /// When the file exists but cannot be read, or is not a record this version knows; the
    /// error names the file.
    pub fn read(dst: &Path) -> Result<Option<ConvertRecord>, CliError> {
        let path = dst.join(FILE_NAME);
        let bytes = match std::fs::read(&path) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(CliError::new(format!("{}: {e}", path.display()))),
        };
        let record: ConvertRecord = serde_json::from_slice(&bytes).map_err(|e| {
            CliError::new(format!(
                "{}: not a conversion record ({e}); it tells which source {} is converted \
                 from: delete it only if you know, then pass --merge",
                path.display(),
                dst.display()
            ))
        })?;
        if record.format != FORMAT || record.version != VERSION {
            return Err(CliError::new(format!(
                "{}: format {:?} version {}, this stowage reads {FORMAT:?} version {VERSION}",
                path.display(),
                record.format,
                record.version
            )));
        }
        Ok(Some(record))
    }

    /// Writes the record to `dst` durably (temporary file, fsync, rename, directory fsync), so
    /// it is in place before anything it describes is.
    pub fn write(&self, dst: &Path) -> Result<(), CliError> {
        let text = serde_json::to_vec(self).expect("a record serializes");
        stowage_core::file_safety::atomic_write(dst.join(FILE_NAME), &text)?;
        Ok(())
    }

    /// Whether `source` is among the record's sources.
    pub fn has(&self, source: &SourceId) -> bool {
        self.sources.contains(source)
    }

    /// The sources, as one line.
    pub fn describe_sources(&self) -> String {
        let names: Vec<String> = self.sources.iter().map(ToString::to_string).collect();
        names.join(", ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_reads_back_and_a_foreign_file_is_an_error_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(ConvertRecord::read(dir.path()).unwrap(), None);
        let source = SourceId::of(dir.path(), "memmap row cache").unwrap();
        let record = ConvertRecord::new("arrow", source.clone());
        record.write(dir.path()).unwrap();
        let back = ConvertRecord::read(dir.path()).unwrap().unwrap();
        assert_eq!(back, record);
        assert!(back.has(&source));
        assert!(!back.has(&SourceId { kind: "npy".into(), ..source }));

        std::fs::write(dir.path().join(FILE_NAME), b"{}").unwrap();
        let e = ConvertRecord::read(dir.path()).unwrap_err().to_string();
        assert!(e.contains(FILE_NAME) && e.contains("not a conversion record"), "{e}");
    }
}
