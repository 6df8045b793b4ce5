//! Options of a NUMPY_10 cache.

/// How a [`crate::NpyBackend`] writes and reads.
///
/// ```
/// let opts = stowage_npy::NpyOptions { collection_size: 10, ..Default::default() };
/// assert!(opts.verify_checksums);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NpyOptions {
    /// Slots per collection file; hangar uses 1000. Only used when creating files.
    pub collection_size: usize,
    /// Recompute every sample's xxh64 on `get` and refuse mismatches (on by default).
    pub verify_checksums: bool,
}

impl Default for NpyOptions {
    fn default() -> Self {
        NpyOptions { collection_size: 1000, verify_checksums: true }
    }
}
