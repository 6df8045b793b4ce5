//! What one commit's objects are: a *part* of the cache.
//!
//! A writer's flush uploads three immutable objects under its rank's prefix, each named by the
//! XXH3-128 of its bytes (so that a rank killed mid-upload and run again finds the same bytes
//! already there, and never two contents under one name):
//!
//! - `ranks/<rank>/<hex>.rows`: the row records ([`crate::row_record`]), one after the other;
//! - `ranks/<rank>/<hex>.table`: the row table ([`crate::row_table`]): per key hash, where its
//!   record lies and the record's xxh3-64;
//! - `ranks/<rank>/<hex>.keys`: the keys in the order they were put, for `keys()`.
//!
//! The commit names the three, and the manifest copies the names and digests, so a reader needs
//! no commit object. [`PartObjects::of`] finds each by its role and refuses a part that lacks
//! one or has two.

use stowage_core::bytes::Bytes;
use stowage_core::{Error, Result};

use crate::manifest::ObjectRef;
use crate::row_table::{self, RowEntry};

/// The largest key a keys object may hold, in bytes: a bound on what a hostile object can make
/// a reader allocate per key.
pub const MAX_KEY_BYTES: usize = 1 << 20;

/// The three objects of a part, by role.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PartObjects {
    /// The row records.
    pub rows: ObjectRef,
    /// The row table over them.
    pub table: ObjectRef,
    /// The keys, in put order.
    pub keys: ObjectRef,
}

impl PartObjects {
    /// The roles of `objects` (a commit's or a manifest part's), found by their suffixes.
    ///
    /// Errors: [`Error::Corrupted`] naming `source` when a role is missing or taken twice, or
    /// an object has no role.
    pub fn of(source: &str, objects: &[ObjectRef]) -> Result<PartObjects> {
        let mut found: [Option<&ObjectRef>; 3] = [None, None, None];
        for object in objects {
            let role =
                ROLES.iter().position(|suffix| object.name.ends_with(suffix)).ok_or_else(|| {
                    Error::corrupted(
                        source,
                        format!(
                            "object {} is none of a part's .rows, .table and .keys",
                            object.name
                        ),
                    )
                })?;
            if found[role].replace(object).is_some() {
                return Err(Error::corrupted(
                    source,
                    format!("the part has two {} objects", ROLES[role]),
                ));
            }
        }
        let take = |role: usize| {
            found[role].cloned().ok_or_else(|| {
                Error::corrupted(source, format!("the part has no {} object", ROLES[role]))
            })
        };
        Ok(PartObjects { rows: take(0)?, table: take(1)?, keys: take(2)? })
    }

    /// The three, in the order a commit lists them.
    pub fn to_vec(&self) -> Vec<ObjectRef> {
        vec![self.rows.clone(), self.table.clone(), self.keys.clone()]
    }
}

/// The suffixes of the roles, in [`PartObjects`] order.
const ROLES: [&str; 3] = [".rows", ".table", ".keys"];

/// A part being built from a writer's puts: the bytes of its three objects.
#[derive(Default, Debug)]
pub struct PartBuilder {
    rows: Vec<u8>,
    entries: Vec<RowEntry>,
    keys: Vec<u8>,
}

/// A finished part's objects: names (under `ranks/<rank>/`) and bytes.
#[derive(Debug)]
pub struct BuiltPart {
    /// The row records.
    pub rows: (String, Bytes),
    /// The row table.
    pub table: (String, Bytes),
    /// The keys object.
    pub keys: (String, Bytes),
    /// How many rows it holds.
    pub row_count: u64,
}

impl BuiltPart {
    /// The references a commit keeps of the three objects.
    pub fn objects(&self) -> PartObjects {
        let reference = |(name, bytes): &(String, Bytes)| ObjectRef::of(name, bytes);
        PartObjects {
            rows: reference(&self.rows),
            table: reference(&self.table),
            keys: reference(&self.keys),
        }
    }
}

impl PartBuilder {
    /// Adds `record` (a row record of `key`).
    ///
    /// Errors: [`Error::InvalidArgument`] for a record of 4 GiB or more, or a key longer than
    /// [`MAX_KEY_BYTES`].
    pub fn push(&mut self, key: &str, record: &[u8]) -> Result<()> {
        let len = u32::try_from(record.len())
            .map_err(|_| Error::invalid(format!("key {key:?}: a sample of 4 GiB or more")))?;
        if key.len() > MAX_KEY_BYTES {
            return Err(Error::invalid(format!(
                "key of {} bytes, above the {MAX_KEY_BYTES} this backend stores",
                key.len()
            )));
        }
        self.entries.push(RowEntry {
            key_hash: row_table::key_hash(key),
            object: 0,
            offset: self.rows.len() as u64,
            len,
            checksum: xxhash_rust::xxh3::xxh3_64(record),
        });
        self.rows.extend_from_slice(record);
        self.keys.extend_from_slice(&(key.len() as u32).to_le_bytes());
        self.keys.extend_from_slice(key.as_bytes());
        Ok(())
    }

    /// The rows pushed so far.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether no row was pushed.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The bytes of the row records pushed so far.
    pub fn bytes(&self) -> usize {
        self.rows.len()
    }

    /// The record of the `i`-th row pushed.
    pub fn record(&self, i: usize) -> &[u8] {
        let entry = &self.entries[i];
        &self.rows[entry.offset as usize..][..entry.len as usize]
    }

    /// The part's three objects, named under `ranks/<rank>/`.
    pub fn finish(self, rank: &str) -> BuiltPart {
        let name = |bytes: &[u8], suffix: &str| {
            format!("ranks/{rank}/{:032x}{suffix}", xxhash_rust::xxh3::xxh3_128(bytes))
        };
        let row_count = self.entries.len() as u64;
        let table = row_table::build(self.entries);
        BuiltPart {
            rows: (name(&self.rows, ROLES[0]), Bytes::from(self.rows)),
            table: (name(&table, ROLES[1]), Bytes::from(table)),
            keys: (name(&self.keys, ROLES[2]), Bytes::from(self.keys)),
            row_count,
        }
    }
}

/// The keys of a keys object, in put order.
///
/// Errors: [`Error::Corrupted`] naming `source` when a length runs past the end or exceeds
/// [`MAX_KEY_BYTES`], a key is not UTF-8, or the count is not `expected`.
///
/// ```
/// use stowage_remote::part::{PartBuilder, parse_keys};
/// let mut part = PartBuilder::default();
/// part.push("a", b"record a").unwrap();
/// part.push("b", b"record b").unwrap();
/// let built = part.finish("r0");
/// assert_eq!(parse_keys("k", &built.keys.1, 2).unwrap(), ["a", "b"]);
/// assert!(parse_keys("k", &built.keys.1, 3).is_err());
/// ```
pub fn parse_keys(source: &str, bytes: &[u8], expected: u64) -> Result<Vec<String>> {
    let bad = |detail: String| Error::corrupted(source, detail);
    let mut keys = Vec::new();
    let mut at = 0usize;
    while at < bytes.len() {
        let len_bytes = bytes
            .get(at..at + 4)
            .ok_or_else(|| bad(format!("the keys object ends in a key length at {at}")))?;
        let len = u32::from_le_bytes(len_bytes.try_into().expect("4 bytes")) as usize;
        if len > MAX_KEY_BYTES {
            return Err(bad(format!("a key of {len} bytes at {at}, above {MAX_KEY_BYTES}")));
        }
        let key = bytes
            .get(at + 4..at + 4 + len)
            .ok_or_else(|| bad(format!("key {} runs past the end", keys.len())))?;
        let key = std::str::from_utf8(key)
            .map_err(|e| bad(format!("key {} is not UTF-8: {e}", keys.len())))?;
        keys.push(key.to_owned());
        at += 4 + len;
    }
    if keys.len() as u64 != expected {
        return Err(bad(format!("{} keys, the part commits {expected} rows", keys.len())));
    }
    Ok(keys)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roles_are_found_by_suffix_and_each_is_required_once() {
        let object = |name: &str| ObjectRef::of(name, name.as_bytes());
        let all =
            vec![object("ranks/r/a.keys"), object("ranks/r/b.rows"), object("ranks/r/c.table")];
        let found = PartObjects::of("m", &all).unwrap();
        assert_eq!(found.rows.name, "ranks/r/b.rows");
        assert_eq!(PartObjects::of("m", &found.to_vec()).unwrap(), found);
        let err = PartObjects::of("m", &all[..2]).unwrap_err().to_string();
        assert!(err.contains("no .table object"), "{err}");
        let mut twice = all.clone();
        twice.push(object("ranks/r/d.rows"));
        assert!(PartObjects::of("m", &twice).unwrap_err().to_string().contains("two .rows"));
        let strange = vec![object("ranks/r/x.bin")];
        assert!(PartObjects::of("m", &strange).unwrap_err().to_string().contains("x.bin"));
    }

    #[test]
    fn hostile_keys_objects_are_corruption() {
        for (bytes, expected) in [
            (vec![5, 0, 0], "ends in a key length"),
            (vec![5, 0, 0, 0, b'a'], "runs past the end"),
            (vec![1, 0, 0, 0, 0xff], "not UTF-8"),
            (vec![0xff, 0xff, 0xff, 0xff], "above"),
        ] {
            let err = parse_keys("s3://b/k", &bytes, 1).unwrap_err();
            assert!(matches!(err, Error::Corrupted { .. }));
            assert!(err.to_string().contains(expected), "{expected}: {err}");
        }
    }
}
