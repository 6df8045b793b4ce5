//! The failures only an Arrow segment cache has, as one private type mapped into the core's
//! categories ([`stowage_core::Error`]): a caller matches on what went wrong (`Unsupported`,
//! `Poisoned`, ...) without knowing this backend, and the message still says what happened here.

use std::path::PathBuf;

use stowage_core::Error;

use crate::options::Compression;

/// What goes wrong in this backend that no core category says on its own.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ArrowCacheError {
    /// A write on a process whose rank is not the writer rank: nothing it writes would ever be
    /// made durable, so it is refused (`Unsupported`).
    #[error(
        "{operation} on rank {rank}: only rank {writer_rank} writes this cache (torchcachex's \
         multi-rank rule), so what this rank writes would never be made durable; open it with \
         RANK unset or equal to {writer_rank}, write a per-rank cache, or let every rank write \
         into an inbox the writer rank ingests (ArrowOptions::rank_inboxes, on every rank)"
    )]
    OtherRank {
        /// The refused operation (`put`, `finalize`, ...).
        operation: &'static str,
        /// This process's rank.
        rank: u32,
        /// The rank that writes.
        writer_rank: u32,
    },

    /// A queued write not attempted because an earlier one failed: what reached the disk is
    /// unknown (`Poisoned`).
    #[error("an earlier write to {} failed ({cause})", cache.display())]
    EarlierWriteFailed {
        /// The cache directory.
        cache: PathBuf,
        /// The earlier failure.
        cause: String,
    },

    /// The background thread writing segments is gone without reporting its work (`Backend`).
    #[error("the background writer of {} stopped unexpectedly", cache.display())]
    BackgroundWriterStopped {
        /// The cache directory.
        cache: PathBuf,
    },

    /// A helper thread panicked (`Backend`).
    #[error("{task} panicked, writing {}", cache.display())]
    Panicked {
        /// What the thread did.
        task: &'static str,
        /// The cache directory.
        cache: PathBuf,
    },

    /// A segment id the 32-bit key index cannot hold (`Unsupported`).
    #[error("segment id {id}{} is beyond the 32 bits stowage's key index holds", in_dir(segments))]
    SegmentIdBeyond32Bits {
        /// The segment id.
        id: u64,
        /// The segment, or `segments/` for an id not yet written, when known.
        segments: Option<PathBuf>,
    },

    /// More rows in one segment than its key sidecar and the key index hold (`Unsupported`).
    #[error("{rows} rows in one segment: a segment holds fewer than 2^32 rows; flush more often")]
    RowsBeyond32Bits {
        /// The rows, or the row number, that do not fit.
        rows: u64,
    },

    /// torchcachex kept taking the ids this writer chose (`Backend`).
    #[error(
        "another writer took every segment id tried in {} ({attempts} attempts); is torchcachex \
         writing to the cache right now? Write from one tool at a time",
        segments.display()
    )]
    SegmentIdsTaken {
        /// `segments/`.
        segments: PathBuf,
        /// How many ids were tried.
        attempts: usize,
    },

    /// The Arrow IPC writer cannot compress with the configured codec (`Unsupported`).
    #[error("{codec:?} compression of Arrow IPC segments: {source}")]
    Compression {
        /// The codec of [`crate::ArrowOptions::compression`].
        codec: Compression,
        /// Arrow's reason.
        #[source]
        source: arrow_schema::ArrowError,
    },

    /// Arrow refused to build a column or record batch from values already checked against the
    /// schema (`Backend`).
    #[error("building the Arrow {what}: {source}")]
    Arrow {
        /// The column (`field "x"`) or `record batch`.
        what: String,
        /// Arrow's reason.
        #[source]
        source: arrow_schema::ArrowError,
    },

    /// A segment handed to a reader is not newer than the ones it has (`Backend`: a bug).
    #[error("segment {id} is not newer than segment {newest}, the newest this reader has")]
    SegmentOutOfOrder {
        /// The segment added.
        id: u64,
        /// The newest segment the reader had.
        newest: u64,
    },

    /// A key index merge asked for a segment outside the committed ones it was given
    /// (`Backend`: a bug).
    #[error("the key index merge reads segment {id}, which is not among the committed segments")]
    SegmentNotCommitted {
        /// The segment.
        id: u64,
    },

    /// A key index merge with neither a run nor a segment to merge (`Backend`: a bug).
    #[error("a key index merge needs a run or a segment")]
    EmptyMerge,

    /// `RANK` is not a number (`InvalidArgument`).
    #[error("environment variable RANK={text:?} is not a rank number")]
    InvalidRank {
        /// What `RANK` holds.
        text: String,
    },
}

/// ` in <path>` for a known path, nothing otherwise.
fn in_dir(path: &Option<PathBuf>) -> String {
    path.as_ref().map_or_else(String::new, |path| format!(" in {}", path.display()))
}

impl From<ArrowCacheError> for Error {
    fn from(error: ArrowCacheError) -> Error {
        use ArrowCacheError as E;
        match error {
            E::OtherRank { .. }
            | E::SegmentIdBeyond32Bits { .. }
            | E::RowsBeyond32Bits { .. }
            | E::Compression { .. } => Error::unsupported(crate::BACKEND_NAME, error.to_string()),
            E::EarlierWriteFailed { cache, cause } => Error::poisoned(cache, cause),
            E::InvalidRank { .. } => Error::invalid(error.to_string()),
            E::BackgroundWriterStopped { .. }
            | E::Panicked { .. }
            | E::SegmentIdsTaken { .. }
            | E::Arrow { .. }
            | E::SegmentOutOfOrder { .. }
            | E::SegmentNotCommitted { .. }
            | E::EmptyMerge => {
                Error::Backend { backend: crate::BACKEND_NAME, source: Box::new(error) }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each failure lands in the category a caller matches on, naming this backend and keeping
    /// what happened.
    #[test]
    fn failures_map_into_the_core_categories() {
        let refused: Error =
            ArrowCacheError::OtherRank { operation: "put", rank: 3, writer_rank: 0 }.into();
        match &refused {
            Error::Unsupported { backend, operation } => {
                assert_eq!(*backend, "arrow");
                assert!(operation.starts_with("put on rank 3: only rank 0 writes"), "{operation}");
            }
            other => panic!("{other:?}"),
        }
        let cache = PathBuf::from("/c");
        let earlier =
            ArrowCacheError::EarlierWriteFailed { cache: cache.clone(), cause: "EIO".into() };
        assert!(
            matches!(Error::from(earlier), Error::Poisoned { path, cause } if path == cache && cause == "EIO")
        );
        let stopped: Error = ArrowCacheError::BackgroundWriterStopped { cache }.into();
        assert!(matches!(&stopped, Error::Backend { backend: "arrow", .. }), "{stopped:?}");
        assert_eq!(
            stopped.to_string(),
            "arrow backend: the background writer of /c stopped unexpectedly"
        );
        let rank: Error = ArrowCacheError::InvalidRank { text: "x".into() }.into();
        assert!(matches!(rank, Error::InvalidArgument { .. }));
    }
}
