//! Per-row checksums of `stowage_checksums.bin`: xxh64 of the key, then of every field's value,
//! as little-endian `u64`s, one fixed-size row per cache row.
//!
//! A null value has its own checksum (xxh64 of nothing under [`NULL_SEED`]), so a flipped
//! `has_<field>` flag or a JSON text turned null is caught as well as a flipped data byte.

use xxhash_rust::xxh64::xxh64;

/// Seed of the checksum of a null value.
pub const NULL_SEED: u64 = 0x6e75_6c6c;
/// Seed of the checksum of a key, so a key never hashes like a value.
pub const KEY_SEED: u64 = 0x006b_6579;

/// Checksum of a row's key.
pub fn of_key(key: &str) -> u64 {
    xxh64(key.as_bytes(), KEY_SEED)
}

/// Checksum of a field's value: its stored bytes (tensor row, JSON text), or null.
pub fn of_value(bytes: Option<&[u8]>) -> u64 {
    match bytes {
        Some(bytes) => xxh64(bytes, 0),
        None => xxh64(&[], NULL_SEED),
    }
}

/// The bytes of one checksum row.
pub fn encode(row: &[u64]) -> Vec<u8> {
    row.iter().flat_map(|c| c.to_le_bytes()).collect()
}

/// The checksums of one stored row.
pub fn decode(bytes: &[u8]) -> Vec<u64> {
    bytes.chunks_exact(8).map(|c| u64::from_le_bytes(c.try_into().expect("chunks of 8"))).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn null_empty_and_key_checksums_differ() {
        assert_ne!(of_value(None), of_value(Some(b"")));
        assert_ne!(of_key("a"), of_value(Some(b"a")));
        let row = [1, u64::MAX, of_key("k")];
        assert_eq!(decode(&encode(&row)), row);
    }
}
