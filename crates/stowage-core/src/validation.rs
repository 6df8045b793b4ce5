//! What [`crate::Reader::validate`] checks and reports.

use crate::Unchecked;
use std::path::{Path, PathBuf};

/// How thoroughly [`crate::Reader::validate`] checks a cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ValidationLevel {
    /// Files present, sizes and headers consistent, metadata parses. Does not read sample bytes.
    Structure,
    /// Everything in `Structure`, plus every stored checksum recomputed over its bytes.
    Full,
}

/// One problem [`crate::Reader::validate`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// The file the problem is in, when it is in one.
    pub path: Option<PathBuf>,
    /// The sample key affected, when one is.
    pub key: Option<String>,
    /// What is wrong, with both sides of any mismatch.
    pub detail: String,
}

impl std::fmt::Display for Problem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if let Some(path) = &self.path {
            write!(f, "{}: ", path.display())?;
        }
        if let Some(key) = &self.key {
            write!(f, "key {key:?}: ")?;
        }
        f.write_str(&self.detail)
    }
}

/// What [`crate::Reader::validate`] checked, every problem it found, and the data it could not
/// check.
///
/// ```
/// let report = stowage_core::ValidationReport::default();
/// assert!(report.is_clean());
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ValidationReport {
    /// Samples whose bytes or records were checked.
    pub samples_checked: u64,
    /// Files examined.
    pub files_checked: u64,
    /// Every problem found; empty when the cache is undamaged.
    pub problems: Vec<Problem>,
    /// Data another writer added that stowage's checksums do not cover ([`crate::foreign`]).
    pub unchecked: Vec<Unchecked>,
}

impl ValidationReport {
    /// Whether every byte was checked and no problem was found. A cache holding data another
    /// writer added ([`ValidationReport::unchecked`]) is never clean.
    pub fn is_clean(&self) -> bool {
        self.problems.is_empty() && self.unchecked.is_empty()
    }

    /// Whether no problem was found in what was checked (there may be data left unchecked).
    pub fn is_undamaged(&self) -> bool {
        self.problems.is_empty()
    }

    /// Records a problem.
    pub fn problem(&mut self, path: Option<&Path>, key: Option<&str>, detail: impl Into<String>) {
        self.problems.push(Problem {
            path: path.map(Path::to_path_buf),
            key: key.map(str::to_owned),
            detail: detail.into(),
        });
    }
}
