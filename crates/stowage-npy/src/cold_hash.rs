//! xxh64 of a sample read through a memory map, whose bytes are usually not in the CPU cache.
//!
//! xxh64 walks its input strictly in order, so on a cold row it waits for each cache line in turn;
//! a `memcpy` of the same row keeps many loads in flight and is several times faster. Asking the
//! CPU for a block of lines ahead of the hash gives it the same overlap: the first block is
//! requested before hashing starts, each next block while the current one is hashed.

use xxhash_rust::xxh64::Xxh64;

/// Bytes requested ahead of the hash: 64 cache lines, about what the CPU can have in flight.
const BLOCK: usize = 4096;

/// The NUMPY_10 checksum (xxh64, seed 0) of `bytes`, equal to [`crate::record::xxh64`], computed
/// with the next block of lines already on its way.
pub fn xxh64_cold(bytes: &[u8]) -> u64 {
    if bytes.len() <= BLOCK {
        prefetch(bytes);
        return crate::record::xxh64(bytes);
    }
    prefetch(&bytes[..BLOCK]);
    let mut hasher = Xxh64::new(0);
    let mut blocks = bytes.chunks(BLOCK).peekable();
    while let Some(block) = blocks.next() {
        if let Some(next) = blocks.peek() {
            prefetch(next);
        }
        hasher.update(block);
    }
    hasher.digest()
}

/// Asks the CPU to start loading every cache line of `bytes` (a hint; no effect on results).
#[inline]
fn prefetch(bytes: &[u8]) {
    #[cfg(target_arch = "x86_64")]
    for line in bytes.chunks(64) {
        // SAFETY: prefetching is a hint with no architectural effect; the pointer is in bounds.
        #[allow(unused_unsafe)]
        unsafe {
            std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(
                line.as_ptr().cast(),
            );
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = bytes;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equals_the_one_shot_hash_at_every_block_boundary() {
        let bytes: Vec<u8> = (0..3 * BLOCK + 100).map(|i| (i * 31 % 251) as u8).collect();
        for len in [0, 1, 31, 32, 33, BLOCK - 1, BLOCK, BLOCK + 1, 2 * BLOCK, 3 * BLOCK + 100] {
            assert_eq!(xxh64_cold(&bytes[..len]), crate::record::xxh64(&bytes[..len]), "len {len}");
        }
    }
}
