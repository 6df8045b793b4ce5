//! xxh64 of a sample read through a memory map, whose bytes are usually not in the CPU cache.
//!
//! xxh64 walks its input strictly in order, so on a cold row it waits for each cache line in turn
//! (see [`stowage_core::prefetch`]). The first block of lines is requested before hashing starts,
//! each next block while the current one is hashed.

use stowage_core::prefetch::{PREFETCH_BLOCK, consume_prefetched, prefetch};
use xxhash_rust::xxh64::Xxh64;

/// The NUMPY_10 checksum (xxh64, seed 0) of `bytes`, equal to [`crate::record::xxh64`], computed
/// with the next block of lines already on its way.
pub fn xxh64_cold(bytes: &[u8]) -> u64 {
    if bytes.len() <= PREFETCH_BLOCK {
        prefetch(bytes);
        return crate::record::xxh64(bytes);
    }
    let mut hasher = Xxh64::new(0);
    consume_prefetched(bytes, |block| hasher.update(block));
    hasher.digest()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equals_the_one_shot_hash_at_every_block_boundary() {
        const B: usize = PREFETCH_BLOCK;
        let bytes: Vec<u8> = (0..3 * B + 100).map(|i| (i * 31 % 251) as u8).collect();
        for len in [0, 1, 31, 32, 33, B - 1, B, B + 1, 2 * B, 3 * B + 100] {
            assert_eq!(xxh64_cold(&bytes[..len]), crate::record::xxh64(&bytes[..len]), "len {len}");
        }
    }
}
