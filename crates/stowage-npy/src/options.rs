//! Options of a NUMPY_10 cache.

use stowage_core::cold_reads::ColdReadAdvice;

/// How a [`crate::NpyBackend`] writes and reads.
///
/// ```
/// let opts = stowage_npy::NpyOptions { collection_size: 10, ..Default::default() };
/// assert!(opts.verify_checksums);
/// assert_eq!(opts.cold_read_advice, stowage_core::cold_reads::ColdReadAdvice::Adaptive);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NpyOptions {
    /// Slots per collection file; hangar uses 1000. Only used when creating files.
    pub collection_size: usize,
    /// Recompute every sample's xxh64 on `get` and refuse mismatches (on by default).
    pub verify_checksums: bool,
    /// Whether `get_batch` tells the kernel the pages it will read (the key index runs' slots,
    /// the log records, the rows) before reading them, so that a cold batch's reads are in
    /// flight together instead of one page fault at a time (`stowage_core::cold_reads`):
    /// adaptive by default (only when a `mincore` sample finds pages missing).
    pub cold_read_advice: ColdReadAdvice,
}

impl Default for NpyOptions {
    fn default() -> Self {
        NpyOptions {
            collection_size: 1000,
            verify_checksums: true,
            cold_read_advice: ColdReadAdvice::Adaptive,
        }
    }
}
