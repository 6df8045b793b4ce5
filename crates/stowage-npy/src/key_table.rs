//! An insert-only hash table from keys to key ordinals whose every entry fills one cache line.
//!
//! A `get` of a random key in a large cache is bound by dependent cache misses. A general table
//! (hashbrown) reads a control group and then the bucket; this one reads one 64-byte entry that
//! holds the full hash, short keys inline (up to 16 bytes), and the caller's first-field slot, so a
//! lookup costs one miss before the caller can start loading the row. Keys longer than 16 bytes are
//! compared in the caller's key arena. Linear probing, no deletion (keys are only added or their
//! slot replaced), capacity a power of two kept at most 7/8 full; growing re-places entries by their
//! stored hash without touching the keys.

use crate::index::Slot;
use std::hash::BuildHasher;

/// Keys up to this many bytes are stored inside their entry.
const INLINE: usize = 16;
/// Marks an empty entry.
const EMPTY: u32 = u32::MAX;

/// One table entry: exactly one cache line.
#[derive(Debug, Clone, Copy)]
#[repr(C, align(64))]
pub struct Entry {
    hash: u64,
    /// The caller's first-field slot: a lookup needs no second read for it.
    pub first: Slot,
    key_start: u64,
    key_len: u32,
    /// The key's ordinal; `EMPTY` for an empty entry.
    pub ordinal: u32,
    inline: [u8; INLINE],
}

const _: () = assert!(std::mem::size_of::<Entry>() == 64);

impl Entry {
    const VACANT: Entry = Entry {
        hash: 0,
        first: Slot::new(0, 0, 0),
        key_start: 0,
        key_len: 0,
        ordinal: EMPTY,
        inline: [0; INLINE],
    };

    fn key<'a>(&'a self, arena: &'a str) -> &'a [u8] {
        let len = self.key_len as usize;
        if len <= INLINE {
            &self.inline[..len]
        } else {
            &arena.as_bytes()[self.key_start as usize..self.key_start as usize + len]
        }
    }
}

/// Key -> ordinal, with the keys' bytes in a caller-owned arena.
#[derive(Debug, Default)]
pub struct KeyTable {
    entries: Vec<Entry>,
    len: usize,
    hasher: foldhash::fast::RandomState,
}

impl KeyTable {
    /// The hash this table uses for `key`.
    pub fn hash(&self, key: &str) -> u64 {
        self.hasher.hash_one(key)
    }

    /// Finds `key` (whose hash is `hash`, whose bytes live in `arena` for long keys).
    pub fn find(&self, hash: u64, key: &str, arena: &str) -> Option<&Entry> {
        let position = self.position(hash, key, arena)?;
        Some(&self.entries[position])
    }

    /// Like [`KeyTable::find`], for replacing the entry's first-field slot.
    pub fn find_mut(&mut self, hash: u64, key: &str, arena: &str) -> Option<&mut Entry> {
        let position = self.position(hash, key, arena)?;
        Some(&mut self.entries[position])
    }

    fn position(&self, hash: u64, key: &str, arena: &str) -> Option<usize> {
        if self.entries.is_empty() {
            return None;
        }
        let mask = self.entries.len() - 1;
        let mut i = hash as usize & mask;
        loop {
            let entry = &self.entries[i];
            if entry.ordinal == EMPTY {
                return None;
            }
            if entry.hash == hash && entry.key(arena) == key.as_bytes() {
                return Some(i);
            }
            i = (i + 1) & mask;
        }
    }

    /// Adds `key` (absent; `hash` from [`KeyTable::hash`]) stored at `key_start` in the caller's
    /// arena, with its ordinal and first-field slot.
    pub fn insert_new(&mut self, hash: u64, key: &str, key_start: u64, ordinal: u32, first: Slot) {
        if (self.len + 1) * 8 > self.entries.len() * 7 {
            self.grow();
        }
        let mut inline = [0u8; INLINE];
        if key.len() <= INLINE {
            inline[..key.len()].copy_from_slice(key.as_bytes());
        }
        let key_len = u32::try_from(key.len()).expect("the index checks key length first");
        let entry = Entry { hash, first, key_start, key_len, ordinal, inline };
        self.place(entry);
        self.len += 1;
    }

    fn place(&mut self, entry: Entry) {
        let mask = self.entries.len() - 1;
        let mut i = entry.hash as usize & mask;
        while self.entries[i].ordinal != EMPTY {
            i = (i + 1) & mask;
        }
        self.entries[i] = entry;
    }

    fn grow(&mut self) {
        let capacity = (self.entries.len() * 2).max(16);
        let old = std::mem::replace(&mut self.entries, vec![Entry::VACANT; capacity]);
        for entry in old.into_iter().filter(|e| e.ordinal != EMPTY) {
            self.place(entry);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_and_long_keys_are_found_after_growth() {
        let mut table = KeyTable::default();
        let mut arena = String::new();
        let keys: Vec<String> = (0..1000)
            .map(|i| if i % 3 == 0 { format!("{i}-{}", "x".repeat(40)) } else { format!("k{i}") })
            .collect();
        for (ordinal, key) in keys.iter().enumerate() {
            let hash = table.hash(key);
            assert!(table.find(hash, key, &arena).is_none());
            let start = arena.len() as u64;
            arena.push_str(key);
            table.insert_new(hash, key, start, ordinal as u32, Slot::new(ordinal as u64, 0, 0));
        }
        for (ordinal, key) in keys.iter().enumerate() {
            let entry = table.find(table.hash(key), key, &arena).expect("present");
            assert_eq!(entry.ordinal as usize, ordinal);
            assert_eq!(entry.first.checksum, ordinal as u64);
        }
        assert!(table.find(table.hash("absent"), "absent", &arena).is_none());
    }

    #[test]
    fn equal_hashes_are_told_apart_by_the_key() {
        // Force a collision: both entries carry the same hash.
        let mut table = KeyTable::default();
        let arena = String::new();
        table.insert_new(7, "a", 0, 0, Slot::new(1, 0, 0));
        table.insert_new(7, "b", 0, 1, Slot::new(2, 0, 0));
        assert_eq!(table.find(7, "b", &arena).unwrap().ordinal, 1);
        assert_eq!(table.find(7, "a", &arena).unwrap().ordinal, 0);
        assert!(table.find(7, "c", &arena).is_none());
    }
}
