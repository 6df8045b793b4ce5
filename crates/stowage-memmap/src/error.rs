//! The failures particular to memmap row caches, each mapped into the core's error category a
//! caller matches on ([`stowage_core::Error`]).
//!
//! The message of a variant is the detail of the core error it becomes: the core error names the
//! file (and the key, when one is known) before it, so the message does not repeat them.

use std::collections::TryReserveError;
use std::path::PathBuf;

use stowage_core::Error;

use crate::BACKEND_NAME;
use crate::checksum::ALGORITHM;
use crate::layout::FieldLayout;

/// A memmap-specific failure; converted into [`stowage_core::Error`] before it leaves the crate.
#[derive(Debug, thiserror::Error)]
pub(crate) enum MemmapError {
    /// The directory holds none of the files of a memmap row cache.
    #[error(
        "memmap row cache in {} (no _COMPLETE, manifest.jsonl, stowage.json or shapes.json + \
         index.parquet)",
        dir.display()
    )]
    NotACache {
        /// The directory.
        dir: PathBuf,
    },

    /// A finalized cache's file is longer than its rows.
    #[error(
        "file is {} bytes, expected {expected} ({rows} rows of {row_bytes} bytes): {extra} \
         trailing bytes (DNANet ignores them; set MemmapOptions::allow_trailing_bytes to read \
         the {rows} rows)",
        expected + extra
    )]
    TrailingBytes {
        /// The `.bin` or checksum file.
        file: PathBuf,
        /// Its expected length.
        expected: u64,
        /// Bytes beyond it.
        extra: u64,
        /// Rows of the cache.
        rows: usize,
        /// Bytes of one row of the file.
        row_bytes: usize,
    },

    /// A row's key or value does not hash to its stored checksum.
    #[error(
        "row {row}: {what} has {ALGORITHM} {actual:016x}, {} records {stored:016x}",
        checksums.display()
    )]
    ChecksumMismatch {
        /// The file holding the bad bytes: the field's file, or the checksum file for the key.
        file: PathBuf,
        /// `stowage_checksums.bin`.
        checksums: PathBuf,
        /// The row.
        row: usize,
        /// The row's key.
        key: String,
        /// `key` or `field "<name>"`.
        what: String,
        /// The stored checksum.
        stored: u64,
        /// The checksum of the bytes as read.
        actual: u64,
    },

    /// A row stowage committed has no checksum row.
    #[error(
        "row {row}: {}, but the file holds checksum rows for only {covered} rows",
        match finalized_rows {
            Some(rows) => format!(
                "stowage finalized this cache with a checksum row for each of its {rows} rows"
            ),
            None => "stowage's writer committed it (its manifest line is in stowage's form)".into(),
        }
    )]
    MissingChecksumRow {
        /// `stowage_checksums.bin`.
        checksums: PathBuf,
        /// The row.
        row: usize,
        /// The row's key.
        key: String,
        /// The rows stowage's finalize recorded, when it finalized the cache; `None` when the
        /// row's manifest line is stowage's.
        finalized_rows: Option<usize>,
        /// Rows the checksum file holds.
        covered: usize,
    },

    /// A writer found a row stowage committed without its checksum row when resuming.
    #[error(
        "row {row} was committed by stowage's writer, but the file holds checksum rows for only \
         {covered} rows: damage, the cache is not resumed"
    )]
    ResumeOverDamage {
        /// `stowage_checksums.bin`.
        checksums: PathBuf,
        /// The row.
        row: usize,
        /// The row's key.
        key: String,
        /// Rows the checksum file holds.
        covered: usize,
    },

    /// Adopting was refused because stowage's own checksums are damaged.
    #[error(
        "adopt refused: stowage's checksums are damaged, and adopting never covers damage (run \
         validate for the full list): {}",
        refusals.join("; ")
    )]
    AdoptRefused {
        /// `stowage_checksums.bin`.
        checksums: PathBuf,
        /// The first few problems, and how many more there are.
        refusals: Vec<String>,
    },

    /// `stowage_checksums.bin` exists but `stowage.json` does not.
    #[error(
        "file is missing, but {} exists: a cache stowage wrote lost its schema",
        checksums.display()
    )]
    SchemaLost {
        /// `stowage.json`.
        meta: PathBuf,
        /// `stowage_checksums.bin`.
        checksums: PathBuf,
    },

    /// `shapes.json` describes other fields than `stowage.json`'s schema.
    #[error("describes fields {described:?}, stowage.json's schema has {written:?}")]
    ShapesDisagree {
        /// `shapes.json`.
        shapes: PathBuf,
        /// The fields `shapes.json` describes.
        described: Vec<FieldLayout>,
        /// The fields the schema stores.
        written: Vec<FieldLayout>,
    },

    /// `index.parquet` holds another number of rows than `shapes.json` says.
    #[error("holds {held} rows, shapes.json says n = {n}")]
    IndexRowCount {
        /// `index.parquet`.
        index: PathBuf,
        /// Rows it holds.
        held: usize,
        /// `n` of `shapes.json`.
        n: usize,
    },

    /// A row number outside the cache.
    #[error(
        "row {row} out of range for a cache of {rows} rows ({}{})",
        cache.display(),
        if *in_memory { ", in memory" } else { "" }
    )]
    RowOutOfRange {
        /// The cache directory.
        cache: PathBuf,
        /// The row asked for (negative counts from the end).
        row: i64,
        /// Rows of the cache.
        rows: usize,
        /// Whether it was asked of an in-memory realization.
        in_memory: bool,
    },

    /// `put` of a key the cache already holds.
    #[error("overwrite of an existing key ({key:?} is row {row}; rows are append-only)")]
    KeyExists {
        /// The key.
        key: String,
        /// Its row.
        row: usize,
    },

    /// `finalize` of a cache without rows.
    #[error("finalizing the empty cache {}: put at least one row first", cache.display())]
    FinalizeEmpty {
        /// The cache directory.
        cache: PathBuf,
    },

    /// Resuming a DNANet manifest that commits no row: its row shapes are unknown.
    #[error(
        "resuming {}: a DNANet manifest with no committed row does not tell the row shapes; \
         rebuild it",
        cache.display()
    )]
    ResumeWithoutShapes {
        /// The cache directory.
        cache: PathBuf,
    },

    /// Resuming a cache with a big-endian field: stowage writes little-endian rows only.
    #[error("resuming {}: field {field:?} is stored big-endian", cache.display())]
    ResumeBigEndian {
        /// The cache directory.
        cache: PathBuf,
        /// The field.
        field: String,
    },

    /// Checksumming a DNANet cache whose fields are not stored the way stowage writes them.
    #[error(
        "checksumming {}: its fields {stored:?} are not stored the way stowage writes them \
         ({written:?})",
        cache.display()
    )]
    ForeignFieldLayout {
        /// The cache directory.
        cache: PathBuf,
        /// The fields as stored.
        stored: Vec<FieldLayout>,
        /// The fields as stowage would write them.
        written: Vec<FieldLayout>,
    },

    /// The rows of a field do not fit in memory for an in-memory realization.
    #[error("{rows} rows of {row_bytes} bytes of field {field:?} do not fit in memory")]
    RealizationOverflow {
        /// Rows of the cache.
        rows: usize,
        /// Bytes of one row.
        row_bytes: usize,
        /// The field.
        field: String,
    },

    /// Allocating a field's buffer for an in-memory realization failed.
    #[error("allocating {bytes} bytes for field {field:?} of {}: {cause}", cache.display())]
    RealizationAllocation {
        /// The cache directory.
        cache: PathBuf,
        /// The field.
        field: String,
        /// Bytes asked for.
        bytes: usize,
        /// The allocator's refusal.
        cause: TryReserveError,
    },
}

impl From<MemmapError> for Error {
    fn from(error: MemmapError) -> Error {
        let detail = error.to_string();
        match error {
            MemmapError::NotACache { .. } => Error::NotFound { what: detail },
            MemmapError::TrailingBytes { file, .. } => Error::corrupted(file, detail),
            MemmapError::ChecksumMismatch { file, key, .. } => {
                Error::corrupted(file, detail).for_key(&key)
            }
            MemmapError::MissingChecksumRow { checksums, key, .. }
            | MemmapError::ResumeOverDamage { checksums, key, .. } => {
                Error::corrupted(checksums, detail).for_key(&key)
            }
            MemmapError::AdoptRefused { checksums, .. } => Error::corrupted(checksums, detail),
            MemmapError::SchemaLost { meta, .. } => Error::corrupted(meta, detail),
            MemmapError::ShapesDisagree { shapes, .. } => Error::corrupted(shapes, detail),
            MemmapError::IndexRowCount { index, .. } => Error::corrupted(index, detail),
            MemmapError::RowOutOfRange { .. }
            | MemmapError::FinalizeEmpty { .. }
            | MemmapError::RealizationOverflow { .. }
            | MemmapError::RealizationAllocation { .. } => Error::invalid(detail),
            MemmapError::KeyExists { .. }
            | MemmapError::ResumeWithoutShapes { .. }
            | MemmapError::ResumeBigEndian { .. }
            | MemmapError::ForeignFieldLayout { .. } => Error::unsupported(BACKEND_NAME, detail),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checksum_mismatches_name_file_key_and_both_sums() {
        let err: Error = MemmapError::ChecksumMismatch {
            file: "/c/scaler.bin".into(),
            checksums: "/c/stowage_checksums.bin".into(),
            row: 5,
            key: "/r/a.hid".into(),
            what: "field \"scaler\"".into(),
            stored: 1,
            actual: 2,
        }
        .into();
        let Error::Corrupted { path, key, detail } = &err else { panic!("{err}") };
        assert_eq!(path, &PathBuf::from("/c/scaler.bin"));
        assert_eq!(key.as_deref(), Some("/r/a.hid"));
        assert_eq!(
            detail,
            "row 5: field \"scaler\" has xxh3-64 0000000000000002, /c/stowage_checksums.bin \
             records 0000000000000001"
        );
    }

    #[test]
    fn categories() {
        let cache = PathBuf::from("/c");
        let unsupported: Error = MemmapError::KeyExists { key: "k".into(), row: 3 }.into();
        assert!(matches!(unsupported, Error::Unsupported { backend: BACKEND_NAME, .. }));
        assert!(unsupported.to_string().contains("overwrite of an existing key"));
        let invalid: Error =
            MemmapError::RowOutOfRange { cache: cache.clone(), row: -4, rows: 3, in_memory: true }
                .into();
        assert_eq!(
            invalid.to_string(),
            "invalid argument: row -4 out of range for a cache of 3 rows (/c, in memory)"
        );
        let missing: Error = MemmapError::NotACache { dir: cache }.into();
        assert!(matches!(missing, Error::NotFound { .. }));
    }
}
