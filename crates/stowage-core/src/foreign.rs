//! Data another writer added to a cache: what `validate` reports about it, and what adopting it
//! did.
//!
//! Caches are shared. The original tools (torchcachex, DNANet, hangar, aenet) go on writing caches
//! that stowage wrote, and stowage appends to theirs. Such data is stored in the format, so every
//! reader reads it, but stowage's checksums do not cover it: stowage did not see it written. The
//! rules every backend follows:
//!
//! - It is read like any other data, and never overwritten, deleted or hidden.
//! - [`Reader::validate`](crate::Reader::validate) lists it as [`Unchecked`]: a cache holding
//!   data nobody checked is never reported clean ([`ValidationReport::is_clean`]), though it is not
//!   damaged either ([`ValidationReport::is_undamaged`]).
//! - A backend that can checksum it offers an explicit adopt step, which returns an [`Adoption`].
//!   From then on the data is checked like the backend's own, as it is at that moment: adoption
//!   vouches for the bytes it read, not for how they were written.
//!
//! [`ValidationReport::is_clean`]: crate::ValidationReport::is_clean
//! [`ValidationReport::is_undamaged`]: crate::ValidationReport::is_undamaged

use std::path::PathBuf;

/// Data in a cache that stowage's checksums do not cover, because another writer added it.
///
/// ```
/// use stowage_core::{Unchecked, ValidationReport};
/// let mut report = ValidationReport::default();
/// report.unchecked.push(Unchecked {
///     path: "cache/segments/segment_000002.arrow".into(),
///     writer: "torchcachex".into(),
///     samples: 4,
///     next_step: "run `stowage adopt cache` to checksum it".into(),
/// });
/// assert!(report.is_undamaged() && !report.is_clean());
/// assert_eq!(
///     report.unchecked[0].to_string(),
///     "cache/segments/segment_000002.arrow: 4 samples written by torchcachex, not covered by \
///      stowage's checksums: run `stowage adopt cache` to checksum it"
/// );
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unchecked {
    /// The file that holds the data (a whole file another writer added, or one it extended).
    pub path: PathBuf,
    /// Who wrote it, as far as the layout tells: the original tool's name, or `another writer`.
    pub writer: String,
    /// How many samples (rows, records, entries) of it stowage did not check; 0 when the cache
    /// does not record how many there are (hangar's records live in its own database).
    pub samples: u64,
    /// What to do next: how to adopt it, or how else to read and check it.
    pub next_step: String,
}

impl std::fmt::Display for Unchecked {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (what, how_many) = match self.samples {
            0 => ("samples".to_owned(), " (how many, the cache does not record)"),
            1 => ("1 sample".to_owned(), ""),
            n => (format!("{n} samples"), ""),
        };
        write!(
            f,
            "{}: {what} written by {}{how_many}, not covered by stowage's checksums: {}",
            self.path.display(),
            self.writer,
            self.next_step
        )
    }
}

/// What an adopt step checksummed: the files it now covers and the samples in them.
///
/// ```
/// let nothing = stowage_core::Adoption::default();
/// assert!(nothing.is_empty());
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Adoption {
    /// The files whose data is now covered by stowage's checksums.
    pub files: Vec<PathBuf>,
    /// The samples in them.
    pub samples: u64,
}

impl Adoption {
    /// Whether there was nothing to adopt.
    pub fn is_empty(&self) -> bool {
        self.files.is_empty() && self.samples == 0
    }
}
