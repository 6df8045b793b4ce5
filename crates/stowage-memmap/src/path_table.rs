//! An insert-only hash table from paths (keys) to row numbers, 16 bytes per slot.
//!
//! A `get` by key in a large cache is bound by dependent cache misses. A general table (hashbrown)
//! reads a control group and then a bucket before the path can be compared; here one slot holds
//! 32 bits of the hash, the row and where the path lives in the caller's key arena, so a lookup
//! reads one slot and then the path bytes, and the caller can start loading the row as soon as the
//! slot's hash matches. Linear probing, no deletion (rows are append-only), capacity a power of two
//! kept at most 7/8 full; growing re-places slots by their stored hash bits without touching the
//! paths. 16 bytes per slot keeps a million rows at 32 MiB.

/// Marks an empty slot.
const EMPTY: u32 = u32::MAX;
/// Paths are at most this long: their length shares a `u64` with their arena offset.
pub(crate) const MAX_PATH_BYTES: usize = (1 << 24) - 1;
const MAX_LEN: u64 = MAX_PATH_BYTES as u64;

/// One slot: which row, and the path's span in the arena (offset in the low 40 bits, length in the
/// high 24).
#[derive(Debug, Clone, Copy)]
struct Slot {
    hash: u32,
    row: u32,
    span: u64,
}

impl Slot {
    const VACANT: Slot = Slot { hash: 0, row: EMPTY, span: 0 };

    fn path<'a>(&self, arena: &'a str) -> &'a str {
        let start = (self.span & ((1 << 40) - 1)) as usize;
        let len = (self.span >> 40) as usize;
        &arena[start..start + len]
    }
}

/// Path -> row, with the paths' bytes in a caller-owned arena.
#[derive(Debug, Default)]
pub(crate) struct PathTable {
    slots: Vec<Slot>,
    len: usize,
}

impl PathTable {
    /// The 32 hash bits a slot keeps: they pick its home position and filter path comparisons.
    fn tag(hash: u64) -> u32 {
        (hash >> 32) as u32
    }

    /// Finds the row of `path` (whose 64-bit hash is `hash`; paths live in `arena`). `candidate`
    /// sees each row whose stored hash bits match, before its path is compared.
    pub(crate) fn find(
        &self,
        hash: u64,
        path: &str,
        arena: &str,
        candidate: impl Fn(usize),
    ) -> Option<usize> {
        if self.slots.is_empty() {
            return None;
        }
        let mask = self.slots.len() - 1;
        let tag = Self::tag(hash);
        let mut i = tag as usize & mask;
        loop {
            let slot = &self.slots[i];
            if slot.row == EMPTY {
                return None;
            }
            if slot.hash == tag {
                candidate(slot.row as usize);
                if slot.path(arena) == path {
                    return Some(slot.row as usize);
                }
            }
            i = (i + 1) & mask;
        }
    }

    /// Adds row `row` (its path absent; `hash` as for [`PathTable::find`]) whose path is the `len`
    /// bytes at `start` in the arena. `None` when the row, offset or length does not fit a slot
    /// (2^32 - 1 rows or more, a 1 TiB arena, a 16 MiB path), which no cache reaches.
    pub(crate) fn insert_new(
        &mut self,
        hash: u64,
        start: usize,
        len: usize,
        row: usize,
    ) -> Option<()> {
        let row = u32::try_from(row).ok().filter(|&r| r != EMPTY)?;
        let (start, len) = (start as u64, len as u64);
        if start >= 1 << 40 || len > MAX_LEN {
            return None;
        }
        if (self.len + 1) * 8 > self.slots.len() * 7 {
            self.grow();
        }
        self.place(Slot { hash: Self::tag(hash), row, span: start | (len << 40) });
        self.len += 1;
        Some(())
    }

    /// Puts `slot` at the first free position from its home.
    fn place(&mut self, slot: Slot) {
        let mask = self.slots.len() - 1;
        let mut i = slot.hash as usize & mask;
        while self.slots[i].row != EMPTY {
            i = (i + 1) & mask;
        }
        self.slots[i] = slot;
    }

    fn grow(&mut self) {
        let capacity = (self.slots.len() * 2).max(16);
        let old = std::mem::replace(&mut self.slots, vec![Slot::VACANT; capacity]);
        for slot in old.into_iter().filter(|s| s.row != EMPTY) {
            self.place(slot);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::hash::BuildHasher;

    #[test]
    fn paths_are_found_after_growth_and_absent_ones_are_not() {
        let hasher = foldhash::fast::RandomState::default();
        let mut table = PathTable::default();
        let mut arena = String::new();
        let paths: Vec<String> = (0..5000).map(|i| format!("/srv/run{i}/x.hid")).collect();
        for (row, path) in paths.iter().enumerate() {
            let hash = hasher.hash_one(path.as_str());
            assert_eq!(table.find(hash, path, &arena, |_| {}), None);
            table.insert_new(hash, arena.len(), path.len(), row).unwrap();
            arena.push_str(path);
        }
        for (row, path) in paths.iter().enumerate() {
            assert_eq!(table.find(hasher.hash_one(path.as_str()), path, &arena, |_| {}), Some(row));
        }
        assert_eq!(table.find(hasher.hash_one("/absent"), "/absent", &arena, |_| {}), None);
    }

    #[test]
    fn equal_hashes_are_told_apart_by_the_path() {
        let mut table = PathTable::default();
        let arena = "ab";
        table.insert_new(7 << 32, 0, 1, 0).unwrap();
        table.insert_new(7 << 32, 1, 1, 1).unwrap();
        let seen = std::cell::Cell::new(0);
        assert_eq!(table.find(7 << 32, "b", arena, |_| seen.set(seen.get() + 1)), Some(1));
        assert_eq!(seen.get(), 2, "both candidates were offered");
        assert_eq!(table.find(7 << 32, "a", arena, |_| {}), Some(0));
        assert_eq!(table.find(7 << 32, "c", arena, |_| {}), None);
    }

    #[test]
    fn what_does_not_fit_a_slot_is_refused() {
        let mut table = PathTable::default();
        assert!(table.insert_new(1, 0, 1 << 24, 0).is_none());
        assert!(table.insert_new(1, 1 << 40, 1, 0).is_none());
        assert!(table.insert_new(1, 0, 1, u32::MAX as usize).is_none());
    }
}
