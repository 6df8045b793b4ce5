//! The segments a reader keeps mapped: all of them while they are few, a bounded,
//! least-recently-used set once they are many ([`stowage_core::open_set`], shared with the other
//! backends that read many files).
//!
//! An open segment holds two memory maps (the segment and its row checksums), so up to
//! [`crate::ArrowOptions::max_open_segments`] stay open once a reader has more segments than that.

pub use stowage_core::open_set::{OpenSet as OpenSegments, Opened};

/// The default of [`crate::ArrowOptions::max_open_segments`]: an eighth of the kernel's limit on
/// memory maps (two per segment, the rest left to the process), at least 64.
pub fn default_max_open_segments() -> usize {
    stowage_core::open_set::default_bound(2)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_bound_follows_the_kernels_map_limit() {
        assert!(default_max_open_segments() >= 64);
        assert_eq!(
            default_max_open_segments(),
            (stowage_core::process_limits::max_map_count() / 8).max(64)
        );
    }
}
