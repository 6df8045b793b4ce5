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

use stowage_core::file_safety::atomic_write;
use stowage_core::{Error, Result};
use xxhash_rust::xxh3::xxh3_64_with_seed;

use crate::framed::{self, Framed, HEADER};

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
    let capacity = ((winners.len() * 8 / 7) + 1).next_power_of_two().max(16);
    let mask = capacity - 1;
    let mut body = vec![0u8; capacity * SLOT];
    let occupied = |body: &[u8], i: usize| body[i * SLOT + 12..i * SLOT + 16] != [0; 4];
    for (key, (segment, row)) in &winners {
        let hash = xxh3_64_with_seed(key.as_bytes(), SEED);
        let mut i = hash as usize & mask;
        while occupied(&body, i) {
            i = (i + 1) & mask;
        }
        let at = i * SLOT;
        body[at..at + 8].copy_from_slice(&hash.to_le_bytes());
        body[at + 8..at + 12].copy_from_slice(&segment.to_le_bytes());
        body[at + 12..at + 16].copy_from_slice(&(row + 1).to_le_bytes());
    }
    let fields = [winners.len() as u64, capacity as u64, SEED, through];
    Ok(framed::encode(MAGIC, &fields, &body))
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
/// Errors: [`Error::Corrupted`] naming a segment that cannot be read; [`Error::Io`].
pub fn merge_segments(layout: &crate::layout::Layout, through: u64) -> Result<u64> {
    let mut segments = Vec::new();
    for (id, path) in layout.list_segments()?.into_iter().filter(|(id, _)| *id <= through) {
        segments.push(crate::segment::Segment::open(id, &path)?);
    }
    let mut keys = Vec::with_capacity(segments.len());
    for segment in &segments {
        keys.push((segment.id(), segment.keys()?));
    }
    let entries = keys
        .iter()
        .flat_map(|(id, rows)| rows.iter().enumerate().map(move |(row, key)| (*key, *id, row)));
    let bytes = build(entries, through)?;
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
