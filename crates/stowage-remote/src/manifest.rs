//! A cache version's manifest: the one object that says what the version holds.
//!
//! A version becomes visible when its manifest is created (`versions/<n>.json`, a conditional
//! create: the object appears whole or not at all), and it never changes after: a reader holds
//! either the old version or the new one, never a mix. The manifest lists the *parts* the
//! version folds in (each a rank's commit, in precedence order: for a key in two parts, the
//! first wins), and per rank the last commit folded (its *watermark*), from which the next merge
//! goes on. Parts are kept sorted by (rank, sequence), whatever order the merges folded them in,
//! so the content after a set of commits does not depend on timing; for a key that several parts
//! hold, the first part in that order wins.
//!
//! Manifests come from the store, so they are untrusted: [`Manifest::parse`] checks every field
//! and every relation between fields, and refuses unknown fields, so that a manifest written by a
//! newer layout is refused by name instead of half understood. Serialization is deterministic
//! (fields in declaration order, maps sorted), so the same content is the same bytes: two
//! mergers that fold the same commits write byte-identical manifests.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use stowage_core::{Error, Result};

use crate::node_cache::ObjectDigest;

/// The layout this crate writes and reads.
pub const LAYOUT: u32 = 1;

/// The largest manifest read, in bytes: a bound on what a hostile store can make a reader
/// allocate (a manifest lists parts, not keys: 64 MiB is some 200,000 parts).
pub const MAX_MANIFEST_BYTES: u64 = 64 << 20;

/// An immutable object a manifest refers to, with the digest it must have.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ObjectRef {
    /// Its name under the cache's prefix, e.g. `ranks/r0/commits/00000000000000000001.json`.
    pub name: String,
    /// Its size in bytes.
    pub size: u64,
    /// XXH3-128 of its bytes, 32 lowercase hex digits.
    pub xxh3_128: String,
}

impl ObjectRef {
    /// A reference to object `name` holding `bytes`.
    ///
    /// ```
    /// let r = stowage_remote::manifest::ObjectRef::of("objects/a", b"abc");
    /// assert_eq!((r.size, r.xxh3_128.len()), (3, 32));
    /// assert_eq!(r.digest().unwrap(), stowage_remote::node_cache::ObjectDigest::of(b"abc"));
    /// ```
    pub fn of(name: &str, bytes: &[u8]) -> ObjectRef {
        let digest = ObjectDigest::of(bytes);
        ObjectRef {
            name: name.to_owned(),
            size: digest.size,
            xxh3_128: format!("{:032x}", digest.xxh3_128),
        }
    }

    /// The digest the object must have.
    ///
    /// Errors: [`Error::InvalidArgument`] when `xxh3_128` is not 32 lowercase hex digits.
    pub fn digest(&self) -> Result<ObjectDigest> {
        let valid = self.xxh3_128.len() == 32
            && self.xxh3_128.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
        let xxh3_128 =
            u128::from_str_radix(&self.xxh3_128, 16).ok().filter(|_| valid).ok_or_else(|| {
                Error::invalid(format!(
                    "object {}: xxh3_128 {:?} is not 32 lowercase hex digits",
                    self.name, self.xxh3_128
                ))
            })?;
        Ok(ObjectDigest { size: self.size, xxh3_128 })
    }
}

/// One part a version folds in: a rank's commit, with what a reader needs of it (so that
/// opening a version reads no commit object).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PartRef {
    /// The rank that committed it.
    pub rank: String,
    /// Its sequence number among that rank's commits (1, 2, ...).
    pub seq: u64,
    /// The commit object.
    pub commit: ObjectRef,
    /// The rows it committed.
    pub rows: u64,
    /// The data objects it holds.
    pub objects: Vec<ObjectRef>,
}

/// A cache version's manifest (see the module docs).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    /// Always [`LAYOUT`].
    pub layout: u32,
    /// This version's number, from 1.
    pub version: u64,
    /// The backend format of the cache's parts, e.g. `"arrow"`.
    pub format: String,
    /// The parts, sorted by (rank, sequence): the precedence order.
    pub parts: Vec<PartRef>,
    /// Per rank, the sequence number of its last commit folded into this version or an
    /// earlier one.
    pub watermarks: BTreeMap<String, u64>,
    /// The rows the parts committed (a key that several parts hold counts once per part).
    pub rows: u64,
    /// The distinct keys the parts hold (a key that several parts hold counts once): what
    /// `len` reports. A merge that cannot see the parts' keys counts every row.
    pub keys: u64,
    /// Whether a writer committed the cache as complete (`finalize`). A commit folded after
    /// that keeps it complete: nothing flushed is dropped.
    pub finalized: bool,
}

impl Manifest {
    /// The manifest of version 1 with no parts.
    pub fn empty(format: &str) -> Manifest {
        Manifest {
            layout: LAYOUT,
            version: 1,
            format: format.to_owned(),
            parts: Vec::new(),
            watermarks: BTreeMap::new(),
            rows: 0,
            keys: 0,
            finalized: false,
        }
    }

    /// The object name of version `version`'s manifest: `versions/<20 digits>.json`, so that
    /// names sort as numbers do.
    ///
    /// ```
    /// assert_eq!(stowage_remote::manifest::Manifest::name_of(7), "versions/00000000000000000007.json");
    /// ```
    pub fn name_of(version: u64) -> String {
        format!("versions/{version:020}.json")
    }

    /// The version a manifest's object name stands for, if it is one.
    ///
    /// ```
    /// use stowage_remote::manifest::Manifest;
    /// assert_eq!(Manifest::version_of("versions/00000000000000000007.json"), Some(7));
    /// assert_eq!(Manifest::version_of("versions/7.json"), None);
    /// ```
    pub fn version_of(name: &str) -> Option<u64> {
        sequence_of(name.strip_prefix("versions/")?)
    }

    /// The manifest's bytes: deterministic JSON (the same manifest is the same bytes).
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut bytes = serde_json::to_vec_pretty(self).expect("a manifest serializes");
        bytes.push(b'\n');
        bytes
    }

    /// Parses and checks the manifest read from `source` (its URL, for errors).
    ///
    /// Errors: [`Error::Corrupted`] naming `source` and what is wrong: not JSON of this shape,
    /// an unknown field, a part or watermark that contradicts another, a bad digest or name;
    /// [`Error::Incompatible`] for another layout.
    pub fn parse(source: &str, bytes: &[u8]) -> Result<Manifest> {
        let bad = |detail: String| Error::corrupted(source, detail);
        if bytes.len() as u64 > MAX_MANIFEST_BYTES {
            return Err(bad(format!(
                "{} bytes, above the {MAX_MANIFEST_BYTES} a manifest may have",
                bytes.len()
            )));
        }
        // The layout first, so that a newer layout's manifest is named as such, not as damage.
        #[derive(Deserialize)]
        struct LayoutOnly {
            layout: u32,
        }
        match serde_json::from_slice::<LayoutOnly>(bytes) {
            Ok(found) if found.layout != LAYOUT => {
                return Err(Error::Incompatible {
                    path: source.into(),
                    detail: format!(
                        "manifest layout {}, this version reads layout {LAYOUT}",
                        found.layout
                    ),
                });
            }
            _ => {}
        }
        let manifest: Manifest = serde_json::from_slice(bytes)
            .map_err(|e| bad(format!("not a layout {LAYOUT} manifest: {e}")))?;
        manifest.check().map_err(bad)?;
        if manifest.to_bytes() != bytes {
            // Serialization is deterministic, so any other bytes were edited or damaged.
            return Err(bad(
                "not in the form this layout writes a manifest (edited or damaged)".into()
            ));
        }
        Ok(manifest)
    }

    /// Every relation a manifest must keep, or what breaks it.
    fn check(&self) -> std::result::Result<(), String> {
        if self.version == 0 {
            return Err("version 0: versions count from 1".into());
        }
        if self.format.is_empty()
            || !self.format.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
        {
            return Err(format!("format {:?} is not a backend name", self.format));
        }
        let mut rows: u64 = 0;
        for (i, pair) in self.parts.windows(2).enumerate() {
            if (&pair[0].rank, pair[0].seq) >= (&pair[1].rank, pair[1].seq) {
                return Err(format!(
                    "parts {i} and {} are out of order: (rank, commit) ({}, {}) then ({}, {})",
                    i + 1,
                    pair[0].rank,
                    pair[0].seq,
                    pair[1].rank,
                    pair[1].seq
                ));
            }
        }
        for (i, part) in self.parts.iter().enumerate() {
            check_rank(&part.rank)?;
            if part.seq == 0 {
                return Err(format!(
                    "part {i} (rank {}): commit sequence 0; they count from 1",
                    part.rank
                ));
            }
            for object in std::iter::once(&part.commit).chain(&part.objects) {
                check_object_name(&object.name).map_err(|e| format!("part {i}: {e}"))?;
                object.digest().map_err(|e| format!("part {i}: {e}"))?;
            }
            rows = rows.checked_add(part.rows).ok_or_else(|| format!("part {i}: rows overflow"))?;
            match self.watermarks.get(&part.rank) {
                Some(mark) if *mark >= part.seq => {}
                Some(mark) => {
                    return Err(format!(
                        "part {i} is commit {} of rank {}, past its watermark {mark}",
                        part.seq, part.rank
                    ));
                }
                None => return Err(format!("part {i}: rank {} has no watermark", part.rank)),
            }
        }
        for rank in self.watermarks.keys() {
            check_rank(rank)?;
        }
        if rows != self.rows {
            return Err(format!("rows {} but the parts hold {rows}", self.rows));
        }
        if self.keys > self.rows {
            return Err(format!("{} distinct keys in only {} rows", self.keys, self.rows));
        }
        Ok(())
    }
}

/// The number `tail` names when it is `<20 digits>.json` with a number from 1: versions and
/// commits are named so, so that names sort as numbers do.
pub(crate) fn sequence_of(tail: &str) -> Option<u64> {
    let digits = tail.strip_suffix(".json")?;
    if digits.len() != 20 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok().filter(|n| *n >= 1)
}

/// A rank's name: 1 to 64 of `[A-Za-z0-9._-]`, not `.` or `..` (it is an object path part).
///
/// Errors: what is wrong with `rank`.
pub fn check_rank(rank: &str) -> std::result::Result<(), String> {
    let valid = (1..=64).contains(&rank.len())
        && rank.bytes().all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b))
        && rank != "."
        && rank != "..";
    if valid { Ok(()) } else { Err(format!("rank {rank:?} is not 1-64 of [A-Za-z0-9._-]")) }
}

/// A relative object name: no empty, `.` or `..` part, printable ASCII.
///
/// Errors: what is wrong with `name`.
pub fn check_object_name(name: &str) -> std::result::Result<(), String> {
    let parts_ok = !name.is_empty()
        && name.split('/').all(|p| !p.is_empty() && p != "." && p != "..")
        && name.bytes().all(|b| b.is_ascii_graphic());
    if parts_ok {
        Ok(())
    } else {
        Err(format!("object name {name:?} is not a relative object name"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Manifest {
        let mut manifest = Manifest::empty("arrow");
        manifest.version = 3;
        for (rank, seq) in [("r0", 1), ("r0", 2), ("r1", 1)] {
            let name = format!("commits/{rank}/{seq:020}.json");
            let data = format!("ranks/{rank}/objects/{seq}");
            manifest.parts.push(PartRef {
                rank: rank.into(),
                seq,
                commit: ObjectRef::of(&name, name.as_bytes()),
                rows: 5,
                objects: vec![ObjectRef::of(&data, data.as_bytes())],
            });
        }
        manifest.watermarks = [("r0".to_owned(), 2), ("r1".to_owned(), 1)].into();
        manifest.rows = 15;
        manifest.keys = 15;
        manifest
    }

    #[test]
    fn a_manifest_round_trips_byte_for_byte() {
        let manifest = sample();
        let bytes = manifest.to_bytes();
        let parsed = Manifest::parse("m", &bytes).unwrap();
        assert_eq!(parsed, manifest);
        assert_eq!(parsed.to_bytes(), bytes);
    }

    #[test]
    fn broken_relations_and_shapes_are_corruption_named_by_source() {
        let mut cases: Vec<(Manifest, &str)> = Vec::new();
        let mut m = sample();
        m.version = 0;
        cases.push((m, "version 0"));
        let mut m = sample();
        m.parts[1].seq = 1;
        cases.push((m, "out of order: (rank, commit) (r0, 1) then (r0, 1)"));
        let mut m = sample();
        m.parts.swap(0, 2);
        cases.push((m, "out of order"));
        let mut m = sample();
        m.rows = 14;
        cases.push((m, "rows 14 but the parts hold 15"));
        let mut m = sample();
        m.keys = 16;
        cases.push((m, "16 distinct keys in only 15 rows"));
        let mut m = sample();
        m.parts[2].objects[0].name = "a//b".into();
        cases.push((m, "not a relative object name"));
        let mut m = sample();
        m.watermarks.insert("r0".into(), 1);
        cases.push((m, "past its watermark 1"));
        let mut m = sample();
        m.watermarks.remove("r1");
        cases.push((m, "rank r1 has no watermark"));
        let mut m = sample();
        m.watermarks.insert("r1".into(), 0);
        cases.push((m, "past its watermark 0"));
        let mut m = sample();
        m.parts[0].commit.xxh3_128 = "XYZ".into();
        cases.push((m, "not 32 lowercase hex"));
        let mut m = sample();
        m.parts[1].commit.name = "../escape".into();
        cases.push((m, "not a relative object name"));
        let mut m = sample();
        m.parts[2].rank = "r1/b".into();
        m.watermarks.insert("r1/b".into(), 1);
        cases.push((m, "is not 1-64"));
        let mut m = sample();
        m.format = "arrow; rm".into();
        cases.push((m, "not a backend name"));
        for (manifest, expected) in cases {
            let err = Manifest::parse("s3://b/c/versions/3", &manifest.to_bytes()).unwrap_err();
            assert!(matches!(err, Error::Corrupted { .. }), "{err}");
            let text = err.to_string();
            assert!(
                text.contains("s3://b/c/versions/3") && text.contains(expected),
                "{expected}: {text}"
            );
        }
    }

    #[test]
    fn another_layout_is_incompatible_and_unknown_fields_are_refused() {
        let text = String::from_utf8(sample().to_bytes()).unwrap();
        let newer = text.replace("\"layout\": 1", "\"layout\": 2");
        let err = Manifest::parse("m", newer.as_bytes()).unwrap_err();
        assert!(matches!(err, Error::Incompatible { .. }), "{err}");
        let extra = text.replacen('{', "{\"surprise\": true,", 1);
        let err = Manifest::parse("m", extra.as_bytes()).unwrap_err();
        assert!(
            matches!(err, Error::Corrupted { .. }) && err.to_string().contains("surprise"),
            "{err}"
        );
        for junk in [&b""[..], b"[]", b"{", b"null", &[0xff; 10]] {
            assert!(matches!(Manifest::parse("m", junk).unwrap_err(), Error::Corrupted { .. }));
        }
    }
}
