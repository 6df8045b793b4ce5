//! Row tables: where each key of a part lies, sorted by key hash so that a lookup is a binary
//! search of a mapped copy (fetched once per node into the node cache).
//!
//! ```text
//! header (16 bytes): magic "STWROWS1" | entries u64 (little-endian)
//! entries (40 bytes each), sorted by key hash:
//!   key hash u128 (xxh3-128 of the key) | object u32 | record length u32 | offset u64
//!   | record xxh3-64 u64
//! ```
//!
//! `object` indexes the part's data objects, `offset` and `length` place the key's row record
//! ([`crate::row_record`]) in it, and the record's xxh3-64 is checked before the record is
//! decoded. A table is derived data checked as a whole when it is fetched (its digest); a table
//! damaged afterwards can hide a key or point at the wrong bytes, which fail the record's
//! checksum or its key comparison: never another key's row.

use stowage_core::bytes::Bytes;
use stowage_core::{Error, Result};
use xxhash_rust::xxh3::xxh3_128;

/// The first eight bytes of a row table.
pub const MAGIC: &[u8; 8] = b"STWROWS1";

const HEADER: usize = 16;
const ENTRY: usize = 40;

/// Where one key's row record lies.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RowEntry {
    /// xxh3-128 of the key ([`key_hash`]).
    pub key_hash: u128,
    /// The index of the data object holding the record, among its part's objects.
    pub object: u32,
    /// The record's offset in that object.
    pub offset: u64,
    /// The record's length.
    pub len: u32,
    /// xxh3-64 of the record's bytes.
    pub checksum: u64,
}

/// The hash a row table sorts and finds keys by.
pub fn key_hash(key: &str) -> u128 {
    xxh3_128(key.as_bytes())
}

/// The bytes of a row table holding `entries` (sorted here).
///
/// ```
/// use stowage_remote::row_table::{RowEntry, RowTable, build, key_hash};
/// let entry = |key: &str, offset| RowEntry { key_hash: key_hash(key), object: 0, offset, len: 10, checksum: 7 };
/// let table = RowTable::parse("t", build(vec![entry("b", 10), entry("a", 0)]).into()).unwrap();
/// assert_eq!(table.find(key_hash("b")).unwrap().offset, 10);
/// assert_eq!(table.find(key_hash("c")), None);
/// ```
pub fn build(mut entries: Vec<RowEntry>) -> Vec<u8> {
    entries.sort_by_key(|e| e.key_hash);
    let mut bytes = Vec::with_capacity(HEADER + ENTRY * entries.len());
    bytes.extend_from_slice(MAGIC);
    bytes.extend_from_slice(&(entries.len() as u64).to_le_bytes());
    for e in entries {
        bytes.extend_from_slice(&e.key_hash.to_le_bytes());
        bytes.extend_from_slice(&e.object.to_le_bytes());
        bytes.extend_from_slice(&e.len.to_le_bytes());
        bytes.extend_from_slice(&e.offset.to_le_bytes());
        bytes.extend_from_slice(&e.checksum.to_le_bytes());
    }
    bytes
}

/// A row table read from its bytes (a mapped node-cache copy, shared).
#[derive(Clone, Debug)]
pub struct RowTable {
    bytes: Bytes,
    len: usize,
}

impl RowTable {
    /// Checks `bytes` (from `source`, a URL or path for errors) as a row table: its magic, and
    /// that its length is what its entry count says.
    ///
    /// Errors: [`Error::Corrupted`] naming `source`.
    pub fn parse(source: &str, bytes: Bytes) -> Result<RowTable> {
        if bytes.len() < HEADER || &bytes[..8] != MAGIC {
            return Err(Error::corrupted(source, "not a row table (no STWROWS1 header)"));
        }
        let count = u64::from_le_bytes(bytes[8..16].try_into().expect("8 bytes"));
        let expected = usize::try_from(count)
            .ok()
            .and_then(|n| n.checked_mul(ENTRY))
            .and_then(|n| n.checked_add(HEADER));
        if expected != Some(bytes.len()) {
            return Err(Error::corrupted(
                source,
                format!("{count} entries do not fill {} bytes", bytes.len()),
            ));
        }
        Ok(RowTable { bytes, len: count as usize })
    }

    /// How many entries it holds.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether it holds none.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Entry `i`, in key-hash order.
    ///
    /// # Panics
    /// When `i >= self.len()`.
    pub fn entry(&self, i: usize) -> RowEntry {
        let at = HEADER + i * ENTRY;
        let b = &self.bytes[at..at + ENTRY];
        let u64_at = |o: usize| u64::from_le_bytes(b[o..o + 8].try_into().expect("8 bytes"));
        let u32_at = |o: usize| u32::from_le_bytes(b[o..o + 4].try_into().expect("4 bytes"));
        RowEntry {
            key_hash: u128::from_le_bytes(b[..16].try_into().expect("16 bytes")),
            object: u32_at(16),
            len: u32_at(20),
            offset: u64_at(24),
            checksum: u64_at(32),
        }
    }

    /// The entry of the key whose hash is `key_hash`, by binary search; `None` when the table
    /// holds no such hash (or, damaged, has it out of order).
    pub fn find(&self, key_hash: u128) -> Option<RowEntry> {
        let (mut low, mut high) = (0, self.len);
        while low < high {
            let mid = low + (high - low) / 2;
            let entry = self.entry(mid);
            match entry.key_hash.cmp(&key_hash) {
                std::cmp::Ordering::Less => low = mid + 1,
                std::cmp::Ordering::Greater => high = mid,
                std::cmp::Ordering::Equal => return Some(entry),
            }
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entries(n: u64) -> Vec<RowEntry> {
        (0..n)
            .map(|i| RowEntry {
                key_hash: key_hash(&format!("key-{i}")),
                object: (i % 3) as u32,
                offset: i * 100,
                len: 100,
                checksum: i ^ 0xabcd,
            })
            .collect()
    }

    #[test]
    fn every_key_is_found_and_absent_keys_are_not() {
        for n in [0, 1, 2, 3, 100, 1000] {
            let table = RowTable::parse("t", build(entries(n)).into()).unwrap();
            assert_eq!(table.len(), n as usize);
            for expected in entries(n) {
                assert_eq!(table.find(expected.key_hash), Some(expected));
            }
            for i in n..n + 50 {
                assert_eq!(table.find(key_hash(&format!("key-{i}"))), None);
            }
        }
    }

    #[test]
    fn a_short_long_or_foreign_table_is_corruption() {
        let bytes = build(entries(10));
        for len in [0, 7, 15, 16, 55, bytes.len() - 1] {
            let err = RowTable::parse("s3://b/t", Bytes::copy_from_slice(&bytes[..len]));
            if len == 16 {
                // A header that says 10 entries, alone.
                assert!(err.is_err());
                continue;
            }
            let err = err.unwrap_err();
            assert!(matches!(err, Error::Corrupted { .. }) && err.to_string().contains("s3://b/t"));
        }
        let mut longer = bytes.clone();
        longer.push(0);
        assert!(RowTable::parse("t", longer.into()).is_err());
        let mut huge = bytes.clone();
        huge[8..16].copy_from_slice(&u64::MAX.to_le_bytes());
        assert!(RowTable::parse("t", huge.into()).is_err());
        let mut foreign = bytes;
        foreign[0] = b'X';
        assert!(RowTable::parse("t", foreign.into()).is_err());
    }
}
