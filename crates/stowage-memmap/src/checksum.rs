//! Per-row checksums of `stowage_checksums.bin`: xxh3-64 of the key, then of every field's value,
//! as little-endian `u64`s, one fixed-size row per cache row.
//!
//! xxh3 rather than xxh64: it hashes a 2 KiB row about three times faster, which is what lets a
//! verified `get` stay within reach of a plain copy of the row. A null value has its own checksum
//! (xxh3 of nothing under [`NULL_SEED`]), so a flipped `has_<field>` flag or a JSON text turned
//! null is caught as well as a flipped data byte. Python reproduces every value with
//! `xxhash.xxh3_64_intdigest(bytes, seed)`.
//!
//! A row of [`PLACEHOLDER`]s stands for a row another writer (DNANet) committed, which stowage's
//! writer found when it resumed the cache: it keeps the file's rows aligned with the cache's rows
//! and vouches for nothing ([`crate::MemmapBackend::adopt`] replaces it with real checksums).

use stowage_core::prefetch::{PREFETCH_BLOCK, prefetch};
use xxhash_rust::xxh3::xxh3_64_with_seed;

/// The name of the algorithm in `stowage.json`.
pub const ALGORITHM: &str = "xxh3-64";
/// Seed of the checksum of a null value.
pub const NULL_SEED: u64 = 0x6e75_6c6c;
/// Seed of the checksum of a key, so a key never hashes like a value.
pub const KEY_SEED: u64 = 0x006b_6579;

/// Every `u64` of a placeholder row: the ASCII bytes `UNCHECKD`. A placeholder is a whole row of
/// them, which no damage that zeroes or cuts a file produces.
pub const PLACEHOLDER: u64 = u64::from_le_bytes(*b"UNCHECKD");

/// A placeholder row of `row_bytes` bytes (a multiple of 8).
///
/// ```
/// use stowage_memmap::test_support::{is_placeholder, placeholder_row};
/// assert!(is_placeholder(&placeholder_row(24)));
/// assert!(!is_placeholder(&[0u8; 24]));
/// ```
pub fn placeholder_row(row_bytes: usize) -> Vec<u8> {
    PLACEHOLDER.to_le_bytes().iter().copied().cycle().take(row_bytes).collect()
}

/// Whether a stored checksum row is a placeholder: no checksum for its row.
///
/// ```
/// let row = stowage_memmap::test_support::of_key("/a.hid").to_le_bytes();
/// assert!(!stowage_memmap::test_support::is_placeholder(&row));
/// assert!(stowage_memmap::test_support::is_placeholder(b"UNCHECKDUNCHECKD"));
/// ```
pub fn is_placeholder(row: &[u8]) -> bool {
    // The first comparison settles every real row; the rest only run for placeholders.
    !row.is_empty() && row.chunks(8).all(|word| word == PLACEHOLDER.to_le_bytes())
}

/// Checksum of a row's key.
pub fn of_key(key: &str) -> u64 {
    xxh3_64_with_seed(key.as_bytes(), KEY_SEED)
}

/// Checksum of a field's value: its stored bytes (tensor row, JSON text), or null. The first
/// lines are requested before hashing: on read the bytes usually come from a cold map.
pub fn of_value(bytes: Option<&[u8]>) -> u64 {
    match bytes {
        Some(bytes) => {
            prefetch(&bytes[..bytes.len().min(PREFETCH_BLOCK)]);
            xxh3_64_with_seed(bytes, 0)
        }
        None => xxh3_64_with_seed(&[], NULL_SEED),
    }
}

/// Checksum `k` of one stored row (`0` is the key's), read in place; the row holds one `u64` per
/// field plus the key's, as the format of the cache says.
pub fn nth(row: &[u8], k: usize) -> u64 {
    u64::from_le_bytes(row[8 * k..8 * k + 8].try_into().expect("8 bytes"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn encode(row: &[u64]) -> Vec<u8> {
        row.iter().flat_map(|c| c.to_le_bytes()).collect()
    }

    #[test]
    fn values_are_python_xxhash_xxh3_64() {
        // xxhash.xxh3_64_intdigest(b"abc"), (b"", seed=NULL_SEED), (b"/a/b.hid", seed=KEY_SEED)
        assert_eq!(of_value(Some(b"abc")), 0x78af_5f94_892f_3950);
        assert_eq!(of_value(None), 0xb4d8_05b4_3395_9765);
        assert_eq!(of_key("/a/b.hid"), 0xd402_a2a3_fa80_d63c);
    }

    #[test]
    fn null_empty_and_key_checksums_differ() {
        assert_ne!(of_value(None), of_value(Some(b"")));
        assert_ne!(of_key("a"), of_value(Some(b"a")));
        let row = [1, u64::MAX, of_key("k")];
        let encoded = encode(&row);
        assert_eq!((0..3).map(|k| nth(&encoded, k)).collect::<Vec<_>>(), row);
    }

    #[test]
    fn a_placeholder_is_a_whole_row_of_the_marker() {
        let mut row = placeholder_row(32);
        assert_eq!(&row[..8], b"UNCHECKD");
        assert!(is_placeholder(&row));
        row[31] ^= 1;
        assert!(!is_placeholder(&row), "one changed byte makes it a (damaged) checksum row");
        assert!(!is_placeholder(&encode(&[of_key("k"), of_value(None)])));
    }
}
