//! The key index's hash table: the core's [`stowage_core::key_table`] with entries of one cache
//! line each.
//!
//! A `get` of a random key in a large cache is bound by dependent cache misses. An entry here
//! holds the full hash, short keys inline (up to 16 bytes) and the first field's slot, so a
//! lookup of a short key costs one miss before the caller can start loading the row. Keys longer
//! than 16 bytes are compared in the caller's key arena.

use crate::index::Slot;
use stowage_core::key_table::Entry;

/// Keys up to this many bytes are stored inside their entry.
const INLINE: usize = 16;
/// The ordinal that marks a vacant entry; no key has it.
pub const VACANT_ORDINAL: u32 = u32::MAX;

/// Key -> ordinal and first-field slot, with long keys' bytes in a caller-owned arena.
pub type KeyTable = stowage_core::key_table::KeyTable<KeyEntry>;

/// One table entry: exactly one cache line.
#[derive(Debug, Clone, Copy)]
#[repr(C, align(64))]
pub struct KeyEntry {
    hash: u64,
    /// The caller's first-field slot: a lookup needs no second read for it.
    pub first: Slot,
    key_start: u64,
    key_len: u32,
    /// The key's ordinal; [`VACANT_ORDINAL`] for a vacant entry.
    pub ordinal: u32,
    inline: [u8; INLINE],
}

const _: () = assert!(std::mem::size_of::<KeyEntry>() == 64);

impl KeyEntry {
    /// The entry of `key` (of hash `hash`, [`KeyTable::hash`]), stored at `key_start` in the
    /// caller's arena, with its ordinal (below [`VACANT_ORDINAL`]) and first-field slot.
    pub fn new(hash: u64, key: &str, key_start: u64, ordinal: u32, first: Slot) -> KeyEntry {
        let mut inline = [0u8; INLINE];
        if key.len() <= INLINE {
            inline[..key.len()].copy_from_slice(key.as_bytes());
        }
        let key_len = u32::try_from(key.len()).expect("the index checks key length first");
        KeyEntry { hash, first, key_start, key_len, ordinal, inline }
    }
}

impl Entry for KeyEntry {
    const VACANT: KeyEntry = KeyEntry {
        hash: 0,
        first: Slot::new(0, 0, 0),
        key_start: 0,
        key_len: 0,
        ordinal: VACANT_ORDINAL,
        inline: [0; INLINE],
    };

    /// The full hash: it picks the home position, and equal hashes are rare enough that a key
    /// comparison almost always succeeds.
    #[inline]
    fn hash_bits(hash: u64) -> u64 {
        hash
    }

    #[inline]
    fn stored_hash_bits(&self) -> u64 {
        self.hash
    }

    #[inline]
    fn is_vacant(&self) -> bool {
        self.ordinal == VACANT_ORDINAL
    }

    #[inline]
    fn key<'a>(&'a self, arena: &'a str) -> &'a [u8] {
        let len = self.key_len as usize;
        if len <= INLINE {
            &self.inline[..len]
        } else {
            &arena.as_bytes()[self.key_start as usize..self.key_start as usize + len]
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Keys up to 16 bytes are read from the entry (the arena is not touched), longer ones from
    /// the arena; an entry found carries its ordinal and first-field slot.
    #[test]
    fn short_keys_are_inline_and_long_ones_in_the_arena() {
        let mut table = KeyTable::new();
        let short = "sixteen-bytes-16";
        let long = "seventeen-bytes-1";
        let mut arena = String::new();
        for (ordinal, key) in [short, long].into_iter().enumerate() {
            let hash = table.hash(key);
            let first = Slot::new(ordinal as u64 + 10, 0, 0);
            table.insert_new(KeyEntry::new(hash, key, arena.len() as u64, ordinal as u32, first));
            arena.push_str(key);
        }
        let entry = table.find(table.hash(short), short, "").expect("inline: no arena needed");
        assert_eq!((entry.ordinal, entry.first.checksum), (0, 10));
        assert_eq!(entry.key(""), short.as_bytes());
        let entry = table.find(table.hash(long), long, &arena).expect("in the arena");
        assert_eq!((entry.ordinal, entry.first.checksum), (1, 11));
        assert_eq!(entry.key(&arena), long.as_bytes());
        assert!(table.find(table.hash("sixteen"), "sixteen", &arena).is_none());
    }
}
