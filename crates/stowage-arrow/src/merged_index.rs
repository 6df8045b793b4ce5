//! `stowage_index.bin`: the winning (segment, row) of every key of the segments up to one id, as
//! one memory-mapped hash table.
//!
//! Per-segment sidecars ([`crate::key_sidecar`]) make a flush cost only its own rows, but a
//! lookup through them probes every segment. A merged table, built off the write path (by
//! compaction or an explicit merge) over segments `..= through`, answers for all of them with one
//! probe; only segments written after it are probed one by one. torchcachex never sees the file;
//! it can always be rebuilt from the segments, and a damaged one is ignored by readers (the
//! segments are the truth) and reported by `validate`.
//!
//! ```text
//! header (crate::framed): magic "STWIDX01" | keys | capacity (a power of two) | seed | through
//! slots (capacity x 16 bytes): key hash u64 | segment id u32 | row + 1 u32 (0: empty)
//! ```
//!
//! As with the sidecars, a slot holds a hash: every candidate is confirmed against the segment's
//! `key` column, so a damaged or colliding slot can hide a key but never return another key's row.

use std::collections::HashMap;
use std::path::Path;
use std::sync::OnceLock;

use stowage_core::file_safety::atomic_write;
use stowage_core::{Error, Result};
use xxhash_rust::xxh3::xxh3_64_with_seed;

use crate::framed::{self, Framed, HEADER};
use crate::segment::Segment;

const MAGIC: &[u8; 8] = b"STWIDX01";
const SLOT: usize = 16;
const SEED: u64 = 0x5354_5749_4458_3031;

/// The bytes of a merged table over `entries`: (key, segment id, row) in segment and row order,
/// a later entry of a key winning, covering the segments up to `through`.
///
/// Errors: [`Error::InvalidArgument`] when a segment id or row does not fit 32 bits.
pub fn build<'a>(
    entries: impl IntoIterator<Item = (&'a str, u64, usize)>,
    through: u64,
) -> Result<Vec<u8>> {
    extend(None, entries, through, |_, _, _| false)
}

/// The bytes of a merged table holding every slot of `old` (when given) plus `entries` (see
/// [`build`]) over segments up to `through`. A new entry replaces an old slot of the same key;
/// `same_key(key, segment, row)` tells whether an old slot whose hash matches holds `key` (it
/// reads that segment's key), so a hash collision never merges two keys. Costs one pass over
/// the old slots plus the new entries: merging a flush's worth of segments into a table of a
/// billion keys never re-reads the segments the table already covers.
///
/// Errors: [`Error::InvalidArgument`] when a segment id or row does not fit 32 bits.
pub fn extend<'a>(
    old: Option<&MergedIndex>,
    entries: impl IntoIterator<Item = (&'a str, u64, usize)>,
    through: u64,
    same_key: impl Fn(&str, u64, usize) -> bool,
) -> Result<Vec<u8>> {
    let mut winners: HashMap<&str, (u32, u32)> = HashMap::new();
    for (key, segment, row) in entries {
        let segment = u32::try_from(segment)
            .map_err(|_| Error::invalid(format!("segment id {segment} beyond 32 bits")))?;
        let row = u32::try_from(row)
            .ok()
            .filter(|&r| r != u32::MAX)
            .ok_or_else(|| Error::invalid(format!("row {row} beyond 32 bits")))?;
        winners.insert(key, (segment, row));
    }
    let old_keys = old.map_or(0, |o| o.keys as usize);
    let seed = old.map_or(SEED, |o| o.seed);
    let capacity = (((old_keys + winners.len()) * 8 / 7) + 1).next_power_of_two().max(16);
    let mut table = Table { body: vec![0u8; capacity * SLOT], mask: capacity - 1 };
    if let Some(old) = old {
        for (hash, segment, row) in old.slots() {
            let i = table.probe(hash, |_| false);
            table.set(i, hash, segment, row);
        }
    }
    let mut keys = old_keys;
    for (key, (segment, row)) in &winners {
        let hash = xxh3_64_with_seed(key.as_bytes(), seed);
        let i = table.probe(hash, |(s, r)| same_key(key, u64::from(s), r as usize));
        keys += usize::from(table.is_empty(i));
        table.set(i, hash, *segment, *row);
    }
    let fields = [keys as u64, capacity as u64, seed, through];
    Ok(framed::encode(MAGIC, &fields, &table.body))
}

/// Slots being filled.
struct Table {
    body: Vec<u8>,
    mask: usize,
}

impl Table {
    fn is_empty(&self, i: usize) -> bool {
        self.body[i * SLOT + 12..i * SLOT + 16] == [0; 4]
    }

    /// The slot for `hash`: the first empty one along its probe sequence, or an occupied one
    /// with the same hash that `is_it` accepts (given its segment and row).
    fn probe(&self, hash: u64, is_it: impl Fn((u32, u32)) -> bool) -> usize {
        let mut i = hash as usize & self.mask;
        while !self.is_empty(i) {
            let at = i * SLOT;
            let slot_hash = u64::from_le_bytes(self.body[at..at + 8].try_into().expect("8"));
            let segment = u32::from_le_bytes(self.body[at + 8..at + 12].try_into().expect("4"));
            let row = u32::from_le_bytes(self.body[at + 12..at + 16].try_into().expect("4")) - 1;
            if slot_hash == hash && is_it((segment, row)) {
                return i;
            }
            i = (i + 1) & self.mask;
        }
        i
    }

    fn set(&mut self, i: usize, hash: u64, segment: u32, row: u32) {
        let at = i * SLOT;
        self.body[at..at + 8].copy_from_slice(&hash.to_le_bytes());
        self.body[at + 8..at + 12].copy_from_slice(&segment.to_le_bytes());
        self.body[at + 12..at + 16].copy_from_slice(&(row + 1).to_le_bytes());
    }
}

/// Builds and writes the merged table at `path` atomically.
pub fn write<'a>(
    path: &Path,
    entries: impl IntoIterator<Item = (&'a str, u64, usize)>,
    through: u64,
) -> Result<()> {
    atomic_write(path, &build(entries, through)?)
}

/// Merges the keys of every segment of `layout` up to id `through` into `stowage_index.bin`
/// (replacing it atomically); returns the number of distinct keys.
///
/// An intact table already in place (its checksum holds and its last segment is there) is
/// extended with the newer segments only ([`extend`]); otherwise the table is rebuilt from
/// every segment.
///
/// Errors: [`Error::Corrupted`] naming a segment that cannot be read; [`Error::Io`].
pub fn merge_segments(layout: &crate::layout::Layout, through: u64) -> Result<u64> {
    let listed: Vec<(u64, std::path::PathBuf)> =
        layout.list_segments()?.into_iter().filter(|(id, _)| *id <= through).collect();
    let old = MergedIndex::open(&layout.merged_index()).ok().filter(|old| {
        old.through() <= through && listed.iter().any(|(id, _)| *id == old.through())
    });
    merge_listed(layout, &listed, old, through)
}

/// As [`merge_segments`], over exactly the segments `ids` (ascending; a cache's committed ones),
/// extending the table in place only when `extend_through` names its last segment (the table
/// the commit log vouches for); otherwise rebuilding it. The table covers up to the last id.
///
/// Errors: as [`merge_segments`]; [`Error::InvalidArgument`] for an empty `ids`.
pub fn merge_committed(
    layout: &crate::layout::Layout,
    ids: &[u64],
    extend_through: Option<u64>,
) -> Result<u64> {
    let through = *ids.last().ok_or_else(|| Error::invalid("no segment to merge"))?;
    let listed: Vec<(u64, std::path::PathBuf)> =
        ids.iter().map(|&id| (id, layout.segment(id))).collect();
    let old = extend_through
        .and_then(|_| MergedIndex::open(&layout.merged_index()).ok())
        .filter(|old| Some(old.through()) == extend_through && old.through() <= through);
    merge_listed(layout, &listed, old, through)
}

fn merge_listed(
    layout: &crate::layout::Layout,
    listed: &[(u64, std::path::PathBuf)],
    old: Option<MergedIndex>,
    through: u64,
) -> Result<u64> {
    let old = old.filter(|old| old.verify().is_ok());
    let after = old.as_ref().map(MergedIndex::through);
    // Each segment opened at most once: the new ones for their keys, an old one only when a
    // hash collision needs one of its keys.
    let opened: Vec<OnceLock<Segment>> = listed.iter().map(|_| OnceLock::new()).collect();
    let segment = |position: usize| -> Result<&Segment> {
        if let Some(segment) = opened[position].get() {
            return Ok(segment);
        }
        let (id, path) = &listed[position];
        let segment = Segment::open(*id, path)?;
        Ok(opened[position].get_or_init(|| segment))
    };
    let mut keys = Vec::new();
    for (position, (id, _)) in listed.iter().enumerate() {
        if after.is_none_or(|a| *id > a) {
            keys.push((*id, segment(position)?.keys()?));
        }
    }
    let entries = keys
        .iter()
        .flat_map(|(id, rows)| rows.iter().enumerate().map(move |(row, key)| (*key, *id, row)));
    let same_key = |key: &str, id: u64, row: usize| {
        let Ok(position) = listed.binary_search_by_key(&id, |(i, _)| *i) else { return false };
        segment(position).ok().and_then(|s| s.key(row)) == Some(key)
    };
    let bytes = extend(old.as_ref(), entries, through, same_key)?;
    atomic_write(layout.merged_index(), &bytes)?;
    Ok(u64::from_le_bytes(bytes[8..16].try_into().expect("8 bytes")))
}

/// An open merged table.
#[derive(Debug)]
pub struct MergedIndex {
    file: Framed,
    keys: u64,
    capacity: usize,
    seed: u64,
    through: u64,
}

impl MergedIndex {
    /// Maps `path` and checks its header.
    ///
    /// Errors: [`Error::Corrupted`] naming the file and what is wrong; [`Error::Io`] when it
    /// cannot be opened (`NotFound` included).
    pub fn open(path: &Path) -> Result<MergedIndex> {
        let file = Framed::open(path, MAGIC, "merged index")?;
        let (keys, capacity, seed, through) =
            (file.field(0), file.field(1), file.field(2), file.field(3));
        let fits =
            usize::try_from(capacity).ok().filter(|c| c.is_power_of_two() && keys <= *c as u64);
        let Some(capacity) = fits.filter(|c| c.checked_mul(SLOT) == Some(file.body().len())) else {
            return Err(file.corrupted(format!(
                "{} bytes for {keys} keys in {capacity} slots of {SLOT} bytes plus a {HEADER}-byte \
                 header",
                HEADER + file.body().len()
            )));
        };
        Ok(MergedIndex { file, keys, capacity, seed, through })
    }

    /// Distinct keys in the segments it covers.
    pub fn keys(&self) -> u64 {
        self.keys
    }

    /// The highest segment id it covers.
    pub fn through(&self) -> u64 {
        self.through
    }

    /// The (segment id, row) of `key`: each candidate whose slot hash matches is offered to
    /// `confirm` (the caller compares that segment's key of that row).
    pub fn find(&self, key: &str, confirm: impl Fn(u64, usize) -> bool) -> Option<(u64, usize)> {
        let hash = xxh3_64_with_seed(key.as_bytes(), self.seed);
        let mask = self.capacity - 1;
        let mut i = hash as usize & mask;
        let body = self.file.body();
        for _ in 0..self.capacity {
            let at = i * SLOT;
            let slot_hash = u64::from_le_bytes(body[at..at + 8].try_into().expect("8 bytes"));
            let segment = u32::from_le_bytes(body[at + 8..at + 12].try_into().expect("4"));
            let row = u32::from_le_bytes(body[at + 12..at + 16].try_into().expect("4"));
            if row == 0 {
                return None;
            }
            let candidate = (u64::from(segment), row as usize - 1);
            if slot_hash == hash && candidate.0 <= self.through && confirm(candidate.0, candidate.1)
            {
                return Some(candidate);
            }
            i = (i + 1) & mask;
        }
        None
    }

    /// Asks the CPU to load the slot a lookup of `key` reads first (a hint for batched lookups).
    pub fn prefetch(&self, key: &str) {
        let hash = xxh3_64_with_seed(key.as_bytes(), self.seed);
        let at = (hash as usize & (self.capacity - 1)) * SLOT;
        if let Some(slot) = self.file.body().get(at..at + SLOT) {
            stowage_core::prefetch::prefetch(slot);
        }
    }

    /// The first slot's (segment id, row) whose hash matches `key`'s, unconfirmed: what a
    /// batched lookup prefetches the confirming key of.
    pub fn first_candidate(&self, key: &str) -> Option<(u64, usize)> {
        self.find(key, |_, _| true)
    }

    /// Every occupied slot: (key hash, segment id, row).
    fn slots(&self) -> impl Iterator<Item = (u64, u32, u32)> + '_ {
        self.file.body().chunks_exact(SLOT).filter_map(|slot| {
            let row = u32::from_le_bytes(slot[12..16].try_into().expect("4"));
            let hash = u64::from_le_bytes(slot[..8].try_into().expect("8"));
            let segment = u32::from_le_bytes(slot[8..12].try_into().expect("4"));
            (row != 0).then(|| (hash, segment, row - 1))
        })
    }

    /// Checks the slots against their checksum (reads the whole table).
    ///
    /// Errors: [`Error::Corrupted`] naming the file.
    pub fn verify(&self) -> Result<()> {
        self.file.verify()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn later_entries_win_and_candidates_are_confirmed() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("stowage_index.bin");
        // Three segments of 100 keys; segment 2 repeats keys 0..50 of segment 0.
        let keys: Vec<Vec<String>> = vec![
            (0..100).map(|i| format!("k{i}")).collect(),
            (100..200).map(|i| format!("k{i}")).collect(),
            (0..50).map(|i| format!("k{i}")).collect(),
        ];
        let entries = keys.iter().enumerate().flat_map(|(segment, rows)| {
            rows.iter().enumerate().map(move |(row, key)| (key.as_str(), segment as u64, row))
        });
        write(&path, entries, 2).unwrap();
        let index = MergedIndex::open(&path).unwrap();
        index.verify().unwrap();
        assert_eq!((index.keys(), index.through()), (200, 2));
        let find = |key: &str| {
            index
                .find(key, |segment, row| keys[segment as usize].get(row).is_some_and(|k| k == key))
        };
        assert_eq!(find("k7"), Some((2, 7)));
        assert_eq!(find("k70"), Some((0, 70)));
        assert_eq!(find("k150"), Some((1, 50)));
        assert_eq!(find("k999"), None);
        assert_eq!(index.find("k7", |_, _| false), None, "an unconfirmed candidate is not found");
    }

    #[test]
    fn extending_replaces_the_same_key_and_keeps_colliding_ones_apart() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("stowage_index.bin");
        let old_keys: Vec<String> = (0..1000).map(|i| format!("k{i}")).collect();
        write(&path, old_keys.iter().enumerate().map(|(row, k)| (k.as_str(), 0, row)), 0).unwrap();
        let old = MergedIndex::open(&path).unwrap();
        // Segment 1 repeats k5 and adds k1000: the same key replaces its slot.
        let same = |key: &str, segment: u64, row: usize| {
            segment == 0 && old_keys.get(row).is_some_and(|k| k == key)
        };
        let bytes = extend(Some(&old), [("k5", 1, 0), ("k1000", 1, 1)], 1, same).unwrap();
        std::fs::write(&path, &bytes).unwrap();
        let merged = MergedIndex::open(&path).unwrap();
        assert_eq!((merged.keys(), merged.through()), (1001, 1));
        let key_of = |segment: u64, row: usize| match segment {
            0 => old_keys.get(row).cloned(),
            1 => ["k5", "k1000"].get(row).map(|k| k.to_string()),
            _ => None,
        };
        for key in old_keys.iter().map(String::as_str).chain(["k1000"]) {
            let found = merged.find(key, |s, r| key_of(s, r).as_deref() == Some(key)).unwrap();
            let want = match key {
                "k5" => (1, 0),
                "k1000" => (1, 1),
                _ => (0, key[1..].parse().unwrap()),
            };
            assert_eq!(found, want, "{key}");
        }
        // A slot whose hash matches but whose key is another one (a collision) is kept apart.
        let old = MergedIndex::open(&path).unwrap();
        let bytes = extend(Some(&old), [("k5", 2, 0)], 2, |_, _, _| false).unwrap();
        std::fs::write(&path, &bytes).unwrap();
        assert_eq!(MergedIndex::open(&path).unwrap().keys(), 1002);
    }

    #[test]
    fn damaged_tables_are_refused_or_never_misdirect() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("stowage_index.bin");
        let keys: Vec<String> = (0..300).map(|i| format!("k{i}")).collect();
        write(&path, keys.iter().enumerate().map(|(row, k)| (k.as_str(), 0, row)), 0).unwrap();
        let good = std::fs::read(&path).unwrap();
        for len in [0, 8, HEADER, good.len() - 1] {
            std::fs::write(&path, &good[..len]).unwrap();
            assert!(matches!(MergedIndex::open(&path).unwrap_err(), Error::Corrupted { .. }));
        }
        for at in (0..56).chain((HEADER..good.len()).step_by(3)) {
            let mut bad = good.clone();
            bad[at] ^= 0x20;
            std::fs::write(&path, &bad).unwrap();
            let Ok(index) = MergedIndex::open(&path) else { continue };
            assert!(index.verify().is_err(), "byte {at}");
            for (row, key) in keys.iter().enumerate() {
                if let Some(found) = index.find(key, |s, r| s == 0 && keys.get(r) == Some(key)) {
                    assert_eq!(found, (0, row), "{key}");
                }
            }
        }
    }
}
