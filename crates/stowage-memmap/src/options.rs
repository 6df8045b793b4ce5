//! Options of a memmap row cache handle.

use stowage_core::cold_reads::ColdReadAdvice;

use crate::CarriedFingerprint;

/// How a [`crate::MemmapBackend`] opens, reads and writes a cache.
///
/// ```
/// let opts = stowage_memmap::MemmapOptions::default();
/// assert!(!opts.allow_trailing_bytes);
/// assert!(opts.verify_checksums);
/// assert!(opts.carry_fingerprint.is_none());
/// assert_eq!(opts.cold_read_advice, stowage_core::cold_reads::ColdReadAdvice::Adaptive);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemmapOptions {
    /// Open a finalized cache whose `.bin` files are longer than `n * row_bytes`.
    ///
    /// DNANet's reader silently ignores such trailing bytes. stowage refuses them by default:
    /// `open_read_only` returns `Error::Corrupted` naming the file, the expected and the actual
    /// size, because a finalized cache with extra bytes was not written the way its metadata says.
    /// With this option set the first `n` rows are served and `validate` still lists the trailing
    /// bytes as a problem. (An unfinished cache's bytes beyond its committed rows are a torn append
    /// and are always ignored.)
    pub allow_trailing_bytes: bool,
    /// Check every row `get` returns against `stowage_checksums.bin` (xxh3-64 of the key and of
    /// every field) and return `Error::Corrupted` on a mismatch; on by default. Caches DNANet
    /// wrote have no checksums and are read unchecked. `validate(Full)` always checks.
    pub verify_checksums: bool,
    /// The `fingerprint.json` that [`Backend::finalize`](stowage_core::Backend::finalize) writes,
    /// byte for byte: the source cache's, for a cache converted from another cache of this layout
    /// (through [`crate::MemmapFactory`], whose caches are finalized through the trait). `None`
    /// (the default): an empty config and no sources.
    pub carry_fingerprint: Option<CarriedFingerprint>,
    /// Whether `get` and `get_batch` tell the kernel which pages of the maps they will read
    /// (`madvise(MADV_WILLNEED)`, [`stowage_core::cold_reads`]), so that a batch of rows missing
    /// from the page cache is read with many requests in flight instead of one page fault at a
    /// time, and a row's bytes and its checksum row are read together. `Adaptive` (the default)
    /// advises only when `mincore` finds a sampled page missing; `Never` reads as before.
    pub cold_read_advice: ColdReadAdvice,
    /// Rows a writer holds in memory since its last key index run before its next flush writes
    /// one (an unfinished cache's key index, crate documentation, *Unfinished caches*). For
    /// tests.
    ///
    /// ```
    /// use stowage_memmap::MemmapOptions;
    /// let options = MemmapOptions { key_index_tail: 4, ..MemmapOptions::default() };
    /// assert!(MemmapOptions::default().key_index_tail > options.key_index_tail);
    /// ```
    #[doc(hidden)]
    pub key_index_tail: usize,
    /// Rows of an `index.parquet` row group finalize writes, at the most (finalize streams the
    /// rows and holds one row group's worth). For tests.
    #[doc(hidden)]
    pub finalize_row_group_rows: usize,
    /// Key index entries finalize gathers before it writes them out as a run. For tests.
    #[doc(hidden)]
    pub finalize_run_rows: usize,
}

impl Default for MemmapOptions {
    fn default() -> Self {
        MemmapOptions {
            allow_trailing_bytes: false,
            verify_checksums: true,
            carry_fingerprint: None,
            cold_read_advice: ColdReadAdvice::Adaptive,
            key_index_tail: crate::tail_index::TAIL_BOUND,
            finalize_row_group_rows: crate::finalize_files::ROW_GROUP_ROWS,
            finalize_run_rows: crate::key_index::RUN_ROWS,
        }
    }
}
