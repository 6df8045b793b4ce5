//! An insert-only open-addressing hash table from keys to entries, whose keys' bytes live in an
//! arena the caller owns.
//!
//! A `get` of a random key in a large cache is bound by dependent cache misses, not by hashing. A
//! general table (hashbrown) reads a control group and then a bucket before the key can be
//! compared, and a map of `String`s adds a pointer chase to the key's bytes. Here a lookup reads
//! one entry, laid out by the backend ([`Entry`]) so that it holds what the backend needs next,
//! then compares the key (in the entry, or in the arena). The backends choose their layout for
//! what they were built for:
//!
//! - [`CompactEntry`], 16 bytes: 32 hash bits, a `u32` value and the key's span in the arena. RAM
//!   per key matters where every key of a cache stays in memory (a million keys take 32 MiB at the
//!   most, the table kept at most 7/8 full and doubled when it is not).
//! - An entry of one cache line that holds the full hash, short keys inline and the first field's
//!   location, so that a lookup of a short key costs one miss before the row can be loaded
//!   (stowage-npy's).
//!
//! Linear probing; no deletion (keys are only added, or their entry's payload replaced), so an
//! empty entry ends every probe. The capacity is a power of two kept at most 7/8 full; growing
//! re-places entries by their stored hash bits without reading a key.
//!
//! ```
//! use stowage_core::key_table::{CompactEntry, KeyTable};
//!
//! let mut table = KeyTable::<CompactEntry>::new();
//! let mut arena = String::new();
//! for (row, key) in ["a", "b/c", "d"].into_iter().enumerate() {
//!     let hash = table.hash(key);
//!     assert!(table.find(hash, key, &arena).is_none());
//!     table.insert_new(CompactEntry::new(hash, arena.len(), key.len(), row).unwrap());
//!     arena.push_str(key);
//! }
//! let hash = table.hash("b/c");
//! assert_eq!(table.find(hash, "b/c", &arena).map(CompactEntry::value), Some(1));
//! ```

use std::hash::BuildHasher;

/// One entry of a [`KeyTable`]: where a key's bytes are, the hash bits that place the entry and
/// filter key comparisons, and the payload the backend keeps per key.
///
/// The table trusts the entry: [`Entry::stored_hash_bits`] must be [`Entry::hash_bits`] of the
/// hash of the key [`Entry::key`] returns, or lookups of that key miss.
pub trait Entry: Copy {
    /// An entry that holds no key; a new or grown table is filled with it.
    const VACANT: Self;

    /// The bits of a key's 64-bit hash an entry keeps (all of them, or fewer to save space). The
    /// table probes from `hash_bits(hash) & (capacity - 1)` and compares keys only where these
    /// bits match, so they must include low bits that vary.
    fn hash_bits(hash: u64) -> u64;

    /// [`Entry::hash_bits`] of this entry's key's hash.
    fn stored_hash_bits(&self) -> u64;

    /// Whether the entry holds no key.
    fn is_vacant(&self) -> bool;

    /// The key's bytes: inside the entry, or in `arena` (the caller's, the same on every call).
    fn key<'a>(&'a self, arena: &'a str) -> &'a [u8];
}

/// Key -> entry, insert-only, with the keys' bytes where each [`Entry`] says (mostly in an arena
/// the caller owns and passes to every lookup).
#[derive(Debug, Clone)]
pub struct KeyTable<E> {
    entries: Vec<E>,
    len: usize,
    hasher: foldhash::fast::RandomState,
}

impl<E: Entry> Default for KeyTable<E> {
    fn default() -> Self {
        KeyTable::new()
    }
}

impl<E: Entry> KeyTable<E> {
    /// An empty table; it allocates at the first insert.
    pub fn new() -> KeyTable<E> {
        KeyTable { entries: Vec::new(), len: 0, hasher: foldhash::fast::RandomState::default() }
    }

    /// The hash this table uses for `key` (seeded per table), to pass to its other methods.
    pub fn hash(&self, key: &str) -> u64 {
        self.hasher.hash_one(key)
    }

    /// The entry of `key`, whose hash is `hash` ([`KeyTable::hash`]), comparing keys against
    /// `arena` where the entries keep them there.
    #[inline]
    pub fn find(&self, hash: u64, key: &str, arena: &str) -> Option<&E> {
        self.find_with(hash, key, arena, |_| {})
    }

    /// Like [`KeyTable::find`]; `candidate` sees each entry whose stored hash bits match, before
    /// its key is compared, so that a reader can start loading that entry's row while the
    /// comparison waits for the key's bytes.
    #[inline]
    pub fn find_with(
        &self,
        hash: u64,
        key: &str,
        arena: &str,
        candidate: impl FnMut(&E),
    ) -> Option<&E> {
        let position = self.position(hash, key, arena, candidate)?;
        Some(&self.entries[position])
    }

    /// Like [`KeyTable::find`], to replace the entry's payload. Changing its key or hash bits
    /// would lose the key: the entry stays where its old hash placed it.
    pub fn find_mut(&mut self, hash: u64, key: &str, arena: &str) -> Option<&mut E> {
        let position = self.position(hash, key, arena, |_| {})?;
        Some(&mut self.entries[position])
    }

    #[inline]
    fn position(
        &self,
        hash: u64,
        key: &str,
        arena: &str,
        mut candidate: impl FnMut(&E),
    ) -> Option<usize> {
        if self.entries.is_empty() {
            return None;
        }
        let mask = self.entries.len() - 1;
        let bits = E::hash_bits(hash);
        let mut i = bits as usize & mask;
        loop {
            let entry = &self.entries[i];
            if entry.is_vacant() {
                return None;
            }
            if entry.stored_hash_bits() == bits {
                candidate(entry);
                if entry.key(arena) == key.as_bytes() {
                    return Some(i);
                }
            }
            i = (i + 1) & mask;
        }
    }

    /// Adds `entry`, whose key the table does not hold (the caller looked it up first: a second
    /// entry of a key would never be found). Grows the table first when it would be more than
    /// 7/8 full.
    ///
    /// Panics when `entry` is vacant ([`Entry::is_vacant`]): it would end probes that pass it.
    pub fn insert_new(&mut self, entry: E) {
        assert!(!entry.is_vacant(), "a vacant entry cannot be inserted");
        if (self.len + 1) * 8 > self.entries.len() * 7 {
            self.grow();
        }
        self.place(entry);
        self.len += 1;
    }

    /// Number of keys.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the table holds no key.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Number of entries allocated (a power of two, or 0): its memory is this times the entry's
    /// size.
    pub fn capacity(&self) -> usize {
        self.entries.len()
    }

    /// Puts `entry` at the first vacant position from its home.
    fn place(&mut self, entry: E) {
        let mask = self.entries.len() - 1;
        let mut i = entry.stored_hash_bits() as usize & mask;
        while !self.entries[i].is_vacant() {
            i = (i + 1) & mask;
        }
        self.entries[i] = entry;
    }

    fn grow(&mut self) {
        let capacity = (self.entries.len() * 2).max(16);
        let old = std::mem::replace(&mut self.entries, vec![E::VACANT; capacity]);
        for entry in old.into_iter().filter(|e| !e.is_vacant()) {
            self.place(entry);
        }
    }
}

/// A 16-byte entry: 32 bits of the hash, a `u32` value (a row number) and the key's span in the
/// arena (offset in the low 40 bits, length in the high 24). A lookup reads the entry and then
/// the key's bytes; the value is known, and its row can be loaded, as soon as the hash bits match
/// ([`KeyTable::find_with`]).
#[derive(Debug, Clone, Copy)]
pub struct CompactEntry {
    hash: u32,
    value: u32,
    span: u64,
}

const _: () = assert!(std::mem::size_of::<CompactEntry>() == 16);

impl CompactEntry {
    /// The longest key an entry locates: its length shares a `u64` with its arena offset.
    pub const MAX_KEY_BYTES: usize = (1 << 24) - 1;
    /// Arena offsets must lie below this (1 TiB).
    pub const MAX_ARENA_OFFSET: usize = 1 << 40;
    /// The largest value an entry holds (`u32::MAX` marks a vacant entry).
    pub const MAX_VALUE: usize = u32::MAX as usize - 1;

    /// The entry of the key of hash `hash` ([`KeyTable::hash`]) whose `len` bytes start at
    /// `start` in the arena, holding `value`. `None` when the value, offset or length does not fit
    /// ([`CompactEntry::MAX_VALUE`], [`CompactEntry::MAX_ARENA_OFFSET`],
    /// [`CompactEntry::MAX_KEY_BYTES`]).
    pub fn new(hash: u64, start: usize, len: usize, value: usize) -> Option<CompactEntry> {
        let value = u32::try_from(value).ok().filter(|&v| v != u32::MAX)?;
        if start >= Self::MAX_ARENA_OFFSET || len > Self::MAX_KEY_BYTES {
            return None;
        }
        let span = start as u64 | ((len as u64) << 40);
        Some(CompactEntry { hash: Self::hash_bits(hash) as u32, value, span })
    }

    /// The value stored with the key.
    pub fn value(&self) -> usize {
        self.value as usize
    }
}

impl Entry for CompactEntry {
    const VACANT: CompactEntry = CompactEntry { hash: 0, value: u32::MAX, span: 0 };

    /// The high 32 bits: they pick the home position and filter key comparisons.
    #[inline]
    fn hash_bits(hash: u64) -> u64 {
        hash >> 32
    }

    #[inline]
    fn stored_hash_bits(&self) -> u64 {
        u64::from(self.hash)
    }

    #[inline]
    fn is_vacant(&self) -> bool {
        self.value == u32::MAX
    }

    #[inline]
    fn key<'a>(&'a self, arena: &'a str) -> &'a [u8] {
        let start = (self.span & ((1 << 40) - 1)) as usize;
        let len = (self.span >> 40) as usize;
        &arena.as_bytes()[start..start + len]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An entry that keeps keys of up to 8 bytes inline and longer ones in the arena, with the
    /// full hash: the other layout the table serves.
    #[derive(Debug, Clone, Copy)]
    struct InlineEntry {
        hash: u64,
        ordinal: u32,
        len: u32,
        start: u64,
        inline: [u8; 8],
    }

    impl InlineEntry {
        fn new(hash: u64, key: &str, start: usize, ordinal: u32) -> InlineEntry {
            let mut inline = [0; 8];
            if key.len() <= 8 {
                inline[..key.len()].copy_from_slice(key.as_bytes());
            }
            InlineEntry { hash, ordinal, len: key.len() as u32, start: start as u64, inline }
        }
    }

    impl Entry for InlineEntry {
        const VACANT: InlineEntry =
            InlineEntry { hash: 0, ordinal: u32::MAX, len: 0, start: 0, inline: [0; 8] };

        fn hash_bits(hash: u64) -> u64 {
            hash
        }

        fn stored_hash_bits(&self) -> u64 {
            self.hash
        }

        fn is_vacant(&self) -> bool {
            self.ordinal == u32::MAX
        }

        fn key<'a>(&'a self, arena: &'a str) -> &'a [u8] {
            let len = self.len as usize;
            match len <= 8 {
                true => &self.inline[..len],
                false => &arena.as_bytes()[self.start as usize..self.start as usize + len],
            }
        }
    }

    fn keys(n: usize) -> Vec<String> {
        // Every third key is longer than an inline entry holds; the others fit.
        (0..n)
            .map(|i| if i % 3 == 0 { format!("{i}-{}", "x".repeat(40)) } else { format!("k{i}") })
            .collect()
    }

    /// A table of `keys` (each checked absent before its insert), their ordinals their
    /// positions, with the hash `hash_of` gives them, and its arena.
    fn filled(
        keys: &[String],
        hash_of: impl Fn(&KeyTable<InlineEntry>, &str) -> u64,
    ) -> (KeyTable<InlineEntry>, String) {
        let mut table = KeyTable::<InlineEntry>::new();
        let mut arena = String::new();
        for (ordinal, key) in keys.iter().enumerate() {
            let hash = hash_of(&table, key);
            assert!(table.find(hash, key, &arena).is_none(), "{key} before its insert");
            table.insert_new(InlineEntry::new(hash, key, arena.len(), ordinal as u32));
            arena.push_str(key);
        }
        (table, arena)
    }

    #[test]
    fn short_and_long_keys_are_found_after_growth() {
        let keys = keys(5000);
        let (table, arena) = filled(&keys, |table, key| table.hash(key));
        assert_eq!(table.len(), keys.len());
        // 5000 keys at most 7/8 full: 8192 entries, grown by doubling from 16.
        assert_eq!(table.capacity(), 8192);
        for (ordinal, key) in keys.iter().enumerate() {
            let entry = table.find(table.hash(key), key, &arena).expect("present");
            assert_eq!(entry.ordinal as usize, ordinal, "{key}");
        }
        for absent in ["absent", "k5000", &format!("0-{}", "x".repeat(39)), ""] {
            assert!(table.find(table.hash(absent), absent, &arena).is_none(), "{absent:?}");
        }
    }

    #[test]
    fn compact_entries_find_values_after_growth_and_not_absent_keys() {
        let mut table = KeyTable::<CompactEntry>::new();
        let mut arena = String::new();
        let keys: Vec<String> = (0..5000).map(|i| format!("/srv/run{i}/x.hid")).collect();
        for (row, key) in keys.iter().enumerate() {
            let hash = table.hash(key);
            assert!(table.find(hash, key, &arena).is_none());
            table.insert_new(CompactEntry::new(hash, arena.len(), key.len(), row).unwrap());
            arena.push_str(key);
        }
        for (row, key) in keys.iter().enumerate() {
            let found = table.find(table.hash(key), key, &arena).map(CompactEntry::value);
            assert_eq!(found, Some(row), "{key}");
        }
        assert!(table.find(table.hash("/absent"), "/absent", &arena).is_none());
        assert!(table.capacity() * std::mem::size_of::<CompactEntry>() <= 8192 * 16);
    }

    #[test]
    fn equal_hashes_are_told_apart_by_the_key() {
        // Forced collisions: every entry carries the same hash, short and long keys alike, past
        // a growth (more than 14 entries in a table of 16).
        let keys = keys(40);
        let (table, arena) = filled(&keys, |_, _| 7);
        assert_eq!(table.capacity(), 64);
        for (ordinal, key) in keys.iter().enumerate() {
            assert_eq!(table.find(7, key, &arena).unwrap().ordinal as usize, ordinal, "{key}");
        }
        assert!(table.find(7, "c", &arena).is_none());
        assert!(table.find(8, &keys[1], &arena).is_none(), "another hash is another key");
    }

    #[test]
    fn candidates_with_matching_hash_bits_are_offered_before_the_comparison() {
        let mut table = KeyTable::<CompactEntry>::new();
        let arena = "ab";
        table.insert_new(CompactEntry::new(7 << 32, 0, 1, 0).unwrap());
        table.insert_new(CompactEntry::new(7 << 32, 1, 1, 1).unwrap());
        let mut seen = Vec::new();
        let found = table.find_with(7 << 32, "b", arena, |e| seen.push(e.value()));
        assert_eq!(found.map(CompactEntry::value), Some(1));
        assert_eq!(seen, [0, 1], "both candidates were offered, in probe order");
        // The low 32 bits are not kept: they do not tell keys apart.
        assert_eq!(table.find((7 << 32) | 5, "a", arena).map(CompactEntry::value), Some(0));
        assert!(table.find(7 << 32, "c", arena).is_none());
        assert!(table.find(8 << 32, "a", arena).is_none());
    }

    #[test]
    fn find_mut_replaces_the_payload_in_place() {
        let mut table = KeyTable::<InlineEntry>::new();
        let arena = String::new();
        let hash = table.hash("k");
        table.insert_new(InlineEntry::new(hash, "k", 0, 1));
        table.find_mut(hash, "k", &arena).unwrap().ordinal = 9;
        assert_eq!(table.find(hash, "k", &arena).unwrap().ordinal, 9);
        assert!(table.find_mut(hash, "j", &arena).is_none());
        assert_eq!(table.len(), 1);
    }

    #[test]
    fn an_empty_table_finds_nothing() {
        let table = KeyTable::<CompactEntry>::default();
        assert!(table.is_empty() && table.capacity() == 0);
        assert!(table.find(table.hash(""), "", "").is_none());
    }

    #[test]
    fn what_does_not_fit_a_compact_entry_is_refused() {
        assert!(CompactEntry::new(1, 0, CompactEntry::MAX_KEY_BYTES + 1, 0).is_none());
        assert!(CompactEntry::new(1, CompactEntry::MAX_ARENA_OFFSET, 1, 0).is_none());
        assert!(CompactEntry::new(1, 0, 1, CompactEntry::MAX_VALUE + 1).is_none());
        let widest = CompactEntry::new(
            u64::MAX,
            CompactEntry::MAX_ARENA_OFFSET - 1,
            CompactEntry::MAX_KEY_BYTES,
            CompactEntry::MAX_VALUE,
        )
        .unwrap();
        assert_eq!(widest.value(), CompactEntry::MAX_VALUE);
        assert_eq!(widest.stored_hash_bits(), u64::from(u32::MAX));
        assert!(!widest.is_vacant());
    }

    #[test]
    #[should_panic(expected = "vacant")]
    fn a_vacant_entry_is_not_inserted() {
        KeyTable::<CompactEntry>::new().insert_new(CompactEntry::VACANT);
    }
}
