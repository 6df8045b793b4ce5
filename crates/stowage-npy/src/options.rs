//! Options of a NUMPY_10 cache.

use stowage_core::cold_reads::ColdReadAdvice;

/// How a [`crate::NpyBackend`] writes and reads.
///
/// ```
/// let opts = stowage_npy::NpyOptions { collection_size: 10, ..Default::default() };
/// assert!(opts.verify_checksums);
/// assert_eq!(opts.cold_read_advice, stowage_core::cold_reads::ColdReadAdvice::Adaptive);
/// assert!(opts.max_open_files >= 64);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NpyOptions {
    /// Slots per collection file; hangar uses 1000. Only used when creating files.
    pub collection_size: usize,
    /// Recompute every sample's xxh64 on `get` and refuse mismatches (on by default).
    pub verify_checksums: bool,
    /// How a reader reads pages that are not in the page cache (`stowage_core::cold_reads`).
    /// Unless [`ColdReadAdvice::Never`]:
    /// - the key index runs and `records.log`, when larger than 64 MiB, are mapped
    ///   `MADV_RANDOM`, so that a cold lookup reads the page it needs, not the kernel's
    ///   read-around (`read_ahead_kb` around it; smaller ones are read whole by a few faults);
    /// - `get_batch` tells the kernel the pages it will read before reading them (the runs'
    ///   slots, then the log records, then the rows) and opens the collection files it needs on
    ///   several threads, so that a cold batch's reads are in flight together instead of one
    ///   after another;
    /// - a single `get` tells the kernel its rows' pages (every field's) before reading them,
    ///   and a collection file larger than 256 KiB is opened reading its header's page alone.
    ///
    /// Adaptive by default: advice is given only when a `mincore` sample finds pages missing.
    /// `Never` reads as before any of this (every map with the kernel's default read-around,
    /// files opened one at a time), for comparison.
    pub cold_read_advice: ColdReadAdvice,
    /// The most collection files a handle keeps mapped once it has read more than that (0
    /// counts as 1): the least recently used is closed when another is opened. A cache of 100 M keys
    /// in collections of 1,000 has 100,000 files per field, more than the kernel lets a process
    /// map (`vm.max_map_count`). By default a quarter of that limit
    /// ([`stowage_core::open_set::default_bound`]).
    pub max_open_files: usize,
}

impl Default for NpyOptions {
    fn default() -> Self {
        NpyOptions {
            collection_size: 1000,
            verify_checksums: true,
            cold_read_advice: ColdReadAdvice::Adaptive,
            max_open_files: stowage_core::open_set::default_bound(1),
        }
    }
}
