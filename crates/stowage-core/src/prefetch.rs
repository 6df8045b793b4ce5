//! Asking the CPU to load a memory-mapped sample before hashing it.
//!
//! A checksum walks its input strictly in order, so on a row that is not in the CPU cache it waits
//! for each cache line in turn, while a `memcpy` of the same row keeps many loads in flight and is
//! several times faster. Requesting the lines first gives the hash the same overlap. Backends call
//! [`prefetch`] on the bytes of a row they are about to verify.

/// The most bytes worth requesting at once: 64 cache lines, about what a core can have in flight.
/// Beyond it the hardware prefetcher follows the sequential read.
pub const PREFETCH_BLOCK: usize = 4096;

/// Asks the CPU to start loading every cache line of `bytes` (a hint: no effect on any result, and
/// none at all on targets other than x86-64).
///
/// ```
/// let row = vec![7u8; 2048];
/// stowage_core::prefetch::prefetch(&row);
/// assert_eq!(row[2047], 7);
/// ```
#[inline]
pub fn prefetch(bytes: &[u8]) {
    for line in bytes.chunks(64) {
        prefetch_line(line.as_ptr());
    }
}

/// Feeds `bytes` to `consume` in blocks of [`PREFETCH_BLOCK`], the first block requested before
/// `consume` starts and each next one while the current one is consumed: a streaming hash over a
/// cold row then overlaps its loads as a copy would.
///
/// ```
/// let row: Vec<u8> = (0..10_000u32).map(|i| i as u8).collect();
/// let mut seen = Vec::new();
/// stowage_core::prefetch::consume_prefetched(&row, |block| seen.extend_from_slice(block));
/// assert_eq!(seen, row);
/// ```
#[inline]
pub fn consume_prefetched(bytes: &[u8], mut consume: impl FnMut(&[u8])) {
    let mut blocks = bytes.chunks(PREFETCH_BLOCK).peekable();
    if let Some(first) = blocks.peek() {
        prefetch(first);
    }
    while let Some(block) = blocks.next() {
        if let Some(next) = blocks.peek() {
            prefetch(next);
        }
        consume(block);
    }
}

/// Asks the CPU to start loading the first cache line of `value` (a hint, as [`prefetch`]): for an
/// index entry a lookup will read next.
///
/// ```
/// let entry = (7u64, "key");
/// stowage_core::prefetch::prefetch_value(&entry);
/// assert_eq!(entry.0, 7);
/// ```
#[inline]
pub fn prefetch_value<T>(value: &T) {
    prefetch_line((value as *const T).cast());
}

/// Asks the CPU to start loading the cache line holding address `at`: a hint that never
/// dereferences `at` and never faults, so any address may be given (an object a foreign
/// runtime owns, the line after it).
///
/// ```
/// let keys = [1u64, 2, 3];
/// stowage_core::prefetch::prefetch_line(keys.as_ptr().cast());
/// stowage_core::prefetch::prefetch_line(std::ptr::null());
/// ```
#[inline]
pub fn prefetch_line(at: *const u8) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: prefetching is a hint with no architectural effect and never faults; `at` comes
    // from a live reference.
    #[allow(unused_unsafe)]
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(at.cast());
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = at;
}
