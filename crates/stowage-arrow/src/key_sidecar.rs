//! `segment_<id>.keys`: a segment's key index as a fixed-layout hash table, memory-mapped.
//!
//! torchcachex re-pickles its whole index on every flush, so a flush costs more the bigger the
//! cache. A sidecar instead indexes one segment's rows only: written with the segment, never
//! rewritten, and opened by mapping it (no per-key work before a lookup). torchcachex globs
//! `segment_*.arrow` and never sees it; it can always be rebuilt from the segment's `key` column.
//!
//! ```text
//! header (crate::framed): magic "STWKEYS1" | rows | capacity (a power of two) | seed
//!                         | writer session (0 in sidecars written before it was recorded)
//! slots (capacity x 16 bytes): key hash u64 (xxh3 with the seed) | row + 1 u64 (0: empty)
//! ```
//!
//! A slot holds a hash, not the key: a lookup confirms each candidate row against the segment's
//! own `key` column, so a hash collision or a damaged slot can make a key look absent but never
//! return another key's row. Opening checks the header; `verify` checks the slots too.

use std::convert::Infallible;
use std::path::{Path, PathBuf};

use stowage_core::{IoResultExt, Result};
use xxhash_rust::xxh3::xxh3_64_with_seed;

use crate::error::ArrowCacheError;
use crate::framed::{self, Framed, HEADER};

const MAGIC: &[u8; 8] = b"STWKEYS1";
const SLOT: usize = 16;
/// The seed of the key hashes; recorded in the header so it can change without a format bump.
const SEED: u64 = 0x5354_574b_4559_5331;

/// The sidecar's path beside its segment: `segment_<id>.keys`.
pub fn sidecar_path(segment: &Path) -> PathBuf {
    segment.with_extension("keys")
}

/// The bytes of the sidecar of a segment whose rows have `keys` (in row order; for a key stored
/// twice, the later row wins, as in the segment), with no writer session recorded.
pub fn build(keys: &[&str]) -> Result<Vec<u8>> {
    build_in_session(keys, 0)
}

/// [`build`], recording the writer session that wrote the segment
/// (`crate::ownership`: what proves an uncommitted segment is stowage's own leftover).
///
/// ```
/// let dir = tempfile::tempdir()?;
/// let path = dir.path().join("segment_000000.keys");
/// std::fs::write(&path, stowage_arrow::test_support::key_sidecar::build_in_session(&["a", "b"], 77)?)?;
/// assert_eq!(stowage_arrow::test_support::key_sidecar::KeySidecar::open(&path)?.session(), 77);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn build_in_session(keys: &[&str], session: u64) -> Result<Vec<u8>> {
    let rows = u32::try_from(keys.len())
        .map_err(|_| ArrowCacheError::RowsBeyond32Bits { rows: keys.len() as u64 })?;
    let capacity = ((keys.len() * 8 / 7) + 1).next_power_of_two().max(16);
    let mut slots = vec![(0u64, 0u64); capacity];
    let mask = capacity - 1;
    for (row, key) in keys.iter().enumerate() {
        let hash = xxh3_64_with_seed(key.as_bytes(), SEED);
        let mut i = hash as usize & mask;
        // A slot of the same hash whose row holds the same key is that key's earlier row.
        while slots[i].1 != 0 && !(slots[i].0 == hash && keys[slots[i].1 as usize - 1] == *key) {
            i = (i + 1) & mask;
        }
        slots[i] = (hash, row as u64 + 1);
    }
    let body: Vec<u8> = slots
        .iter()
        .flat_map(|(hash, row)| [hash.to_le_bytes(), row.to_le_bytes()])
        .flatten()
        .collect();
    Ok(framed::encode(MAGIC, &[u64::from(rows), capacity as u64, SEED, session], &body))
}

/// An open sidecar: the mapped table.
#[derive(Debug)]
pub struct KeySidecar {
    file: Framed,
    rows: usize,
    capacity: usize,
    seed: u64,
    session: u64,
}

impl KeySidecar {
    /// Maps `path` and checks its header (magic, checksum, sizes).
    ///
    /// Errors: [`Error::Corrupted`](stowage_core::Error::Corrupted) naming the file and what is wrong; [`Error::Io`](stowage_core::Error::Io) when it
    /// cannot be opened (`NotFound` included: the caller rebuilds it from the segment).
    pub fn open(path: &Path) -> Result<KeySidecar> {
        KeySidecar::over(Framed::open(path, MAGIC, "key sidecar")?)
    }

    /// The sidecar of a segment whose rows have `keys`, built in memory (for a segment written
    /// without one, such as torchcachex's); `segment` names it in errors.
    pub fn in_memory(segment: &Path, keys: &[&str]) -> Result<KeySidecar> {
        let bytes = build(keys)?;
        let mut map = memmap2::MmapMut::map_anon(bytes.len()).at(segment)?;
        map.copy_from_slice(&bytes);
        let map = map.make_read_only().at(segment)?;
        KeySidecar::over(Framed::check(map, &sidecar_path(segment), MAGIC, "key sidecar")?)
    }

    /// Checks that the table's size fits its header.
    fn over(file: Framed) -> Result<KeySidecar> {
        let (rows, capacity, seed) = (file.field(0), file.field(1), file.field(2));
        let fits =
            usize::try_from(capacity).ok().filter(|c| c.is_power_of_two() && rows <= *c as u64);
        let Some(capacity) = fits.filter(|c| c.checked_mul(SLOT) == Some(file.body().len())) else {
            return Err(file.corrupted(format!(
                "{} bytes for {rows} rows in {capacity} slots of {SLOT} bytes plus a {HEADER}-byte \
                 header",
                HEADER + file.body().len()
            )));
        };
        Ok(KeySidecar { rows: rows as usize, capacity, seed, session: file.field(3), file })
    }

    /// The writer session recorded when it was written (0: none).
    pub fn session(&self) -> u64 {
        self.session
    }

    /// Rows of the segment it indexes.
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// The row of `key`: each row whose slot hash matches is offered to `confirm` (the caller
    /// compares the segment's key of that row), the first confirmed one is returned.
    pub fn find(&self, key: &str, confirm: impl Fn(usize) -> bool) -> Option<usize> {
        let Ok(found) = self.try_find(key, |row| Ok::<bool, Infallible>(confirm(row)));
        found
    }

    /// As [`KeySidecar::find`], with a `confirm` that can fail (the segment does not read): the
    /// first error ends the probe and is returned.
    pub fn try_find<E>(
        &self,
        key: &str,
        mut confirm: impl FnMut(usize) -> std::result::Result<bool, E>,
    ) -> std::result::Result<Option<usize>, E> {
        let hash = xxh3_64_with_seed(key.as_bytes(), self.seed);
        let mask = self.capacity - 1;
        let mut i = hash as usize & mask;
        // At most `capacity` probes, even in a damaged table with no empty slot.
        for _ in 0..self.capacity {
            let (slot_hash, row) = self.slot(i);
            if row == 0 {
                return Ok(None);
            }
            if slot_hash == hash {
                let Some(row) = usize::try_from(row - 1).ok().filter(|&r| r < self.rows()) else {
                    return Ok(None);
                };
                if confirm(row)? {
                    return Ok(Some(row));
                }
            }
            i = (i + 1) & mask;
        }
        Ok(None)
    }

    /// Checks the slots against their checksum (reads the whole table).
    ///
    /// Errors: [`Error::Corrupted`](stowage_core::Error::Corrupted) naming the file.
    pub fn verify(&self) -> Result<()> {
        self.file.verify()
    }

    fn slot(&self, i: usize) -> (u64, u64) {
        let body = self.file.body();
        let word = |at: usize| u64::from_le_bytes(body[at..at + 8].try_into().expect("8 bytes"));
        (word(i * SLOT), word(i * SLOT + 8))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use stowage_core::Error;

    /// Writes the sidecar of `segment` as the segment writer does (unstaged here).
    fn write(segment: &Path, keys: &[&str]) -> Result<PathBuf> {
        let path = sidecar_path(segment);
        std::fs::write(&path, build(keys)?).unwrap();
        Ok(path)
    }

    fn written(dir: &Path, keys: &[&str]) -> KeySidecar {
        let path = write(&dir.join("segment_000000.arrow"), keys).unwrap();
        assert!(path.ends_with("segment_000000.keys"));
        KeySidecar::open(&path).unwrap()
    }

    #[test]
    fn every_key_is_found_the_later_row_wins_and_absent_keys_are_not() {
        let dir = tempfile::tempdir().unwrap();
        let mut keys: Vec<String> = (0..3000).map(|i| format!("sample-{i}")).collect();
        keys.push("sample-7".into()); // row 3000 stores sample-7 again
        let refs: Vec<&str> = keys.iter().map(String::as_str).collect();
        let sidecar = written(dir.path(), &refs);
        sidecar.verify().unwrap();
        let find = |key: &str| sidecar.find(key, |row| refs[row] == key);
        for (row, key) in refs.iter().enumerate().take(3000).filter(|(r, _)| *r != 7) {
            assert_eq!(find(key), Some(row), "{key}");
        }
        assert_eq!(find("sample-7"), Some(3000));
        assert_eq!(find("absent"), None);
        assert_eq!(written(dir.path(), &[]).find("x", |_| true), None);
    }

    #[test]
    fn damaged_sidecars_are_refused_or_never_return_another_keys_row() {
        let dir = tempfile::tempdir().unwrap();
        let keys: Vec<String> = (0..200).map(|i| format!("k{i}")).collect();
        let refs: Vec<&str> = keys.iter().map(String::as_str).collect();
        let path = write(&dir.path().join("segment_000001.arrow"), &refs).unwrap();
        let good = std::fs::read(&path).unwrap();
        for len in [0, 8, HEADER - 1, HEADER, good.len() - 1] {
            std::fs::write(&path, &good[..len]).unwrap();
            let err = KeySidecar::open(&path).unwrap_err();
            assert!(matches!(err, Error::Corrupted { .. }), "{len}: {err}");
        }
        for at in 0..40 {
            let mut bad = good.clone();
            bad[at] ^= 0x40;
            std::fs::write(&path, &bad).unwrap();
            assert!(KeySidecar::open(&path).is_err(), "header byte {at}");
        }
        for at in (HEADER..good.len()).step_by(5) {
            let mut bad = good.clone();
            bad[at] ^= 0xff;
            std::fs::write(&path, &bad).unwrap();
            let sidecar = KeySidecar::open(&path).unwrap();
            assert!(sidecar.verify().is_err(), "slot byte {at}");
            for (row, key) in refs.iter().enumerate() {
                if let Some(found) = sidecar.find(key, |r| refs[r] == *key) {
                    assert_eq!(found, row, "{key} never maps to another row");
                }
            }
        }
    }
}
