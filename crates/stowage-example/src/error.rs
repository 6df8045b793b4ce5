//! `JournalError`: what can be wrong with a journal cache, as the backend's own private type,
//! and how each maps into the core's public categories ([`stowage_core::Error`]), which is all
//! a caller matches on.

use std::path::PathBuf;

use stowage_core::Error;

use crate::record::{FORMAT, VERSION};

/// Everything the journal backend reports beyond I/O and the core's own checks.
#[derive(Debug, thiserror::Error)]
pub(crate) enum JournalError {
    /// The directory holds no `journal.log`.
    #[error("journal cache in {} (no journal.log)", dir.display())]
    NotACache { dir: PathBuf },
    /// `create` found a journal already there.
    #[error("a journal already exists")]
    AlreadyExists { journal: PathBuf },
    /// The log's framing is damaged before its end (a torn tail is what a crash leaves, and is
    /// not an error).
    #[error("{damage}")]
    Damaged { journal: PathBuf, damage: String },
    /// A record whose bytes do not decode; the key when its header named one.
    #[error("record {index}: {detail}")]
    BadRecord { journal: PathBuf, index: usize, key: Option<String>, detail: String },
    /// The first record is not the header.
    #[error("does not start with a header record")]
    NoHeader { journal: PathBuf },
    /// A header after the first record.
    #[error("record {index} is a second header")]
    SecondHeader { journal: PathBuf, index: usize },
    /// The journal holds another number of records than `journal.complete` says it had when
    /// the cache was finalized (it was cut short, or written to after).
    #[error(
        "holds {found} records, journal.complete says {finalized} were there when the cache was \
         finalized"
    )]
    RecordCount { journal: PathBuf, found: u64, finalized: u64 },
    /// `journal.complete` does not parse.
    #[error("not a completion marker: {source}")]
    BadMarker { marker: PathBuf, source: serde_json::Error },
    /// A journal of another format or version.
    #[error(
        "format {format:?} version {version}, this reader handles {FORMAT:?} version {VERSION}"
    )]
    OtherFormat { journal: PathBuf, format: String, version: u32 },
}

impl From<JournalError> for Error {
    fn from(e: JournalError) -> Error {
        let detail = e.to_string();
        match e {
            JournalError::NotACache { .. } => Error::NotFound { what: detail },
            JournalError::AlreadyExists { journal } => Error::AlreadyExists { path: journal },
            JournalError::BadRecord { journal, key, .. } => {
                Error::Corrupted { path: journal, key, detail }
            }
            JournalError::Damaged { journal, .. }
            | JournalError::NoHeader { journal }
            | JournalError::SecondHeader { journal, .. }
            | JournalError::RecordCount { journal, .. } => Error::corrupted(journal, detail),
            JournalError::BadMarker { marker, .. } => Error::corrupted(marker, detail),
            JournalError::OtherFormat { journal, .. } => {
                Error::Incompatible { path: journal, detail }
            }
        }
    }
}
