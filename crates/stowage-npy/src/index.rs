//! The key index: which slot of which collection file holds each field of each key, rebuilt from
//! `records.log` at open.
//!
//! Each log record is the JSON array `[key, record of field 0, record of field 1, ...]` in schema
//! order, so a key's entry is exactly what hangar's record database would hand over per column. A
//! later entry for the same key supersedes an earlier one (overwrite). `finalize` appends one last
//! record, the JSON object `{"finalized": {"keys": N}}`: the commit point of the cache, after which
//! no entry may follow.
//!
//! In memory the records are kept compact and contiguous, because a `get` of a random key in a large
//! cache is dominated by cache misses, not by hashing: all key bytes in one arena, a hash table
//! whose entries locate the key bytes directly, per key one [`Slot`] per field with file ids
//! instead of uid strings, and sample shapes stored only for fields whose shape varies.

use crate::key_table::{KeyEntry, KeyTable, VACANT_ORDINAL};
use crate::record::{Numpy10Record, RecordRef};
use foldhash::HashMap;
use std::path::Path;
use stowage_core::{Error, Result};

/// Where one field of one sample lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Slot {
    /// xxh64 of the sample's bytes.
    pub checksum: u64,
    /// Index into [`KeyIndex::file_uid`].
    pub file: u32,
    /// Slot (row) in the collection file.
    pub index: u32,
    /// Start of the sample's shape in the shape arena (fields of varying shape only); its length is
    /// the field's rank.
    shape_at: u32,
}

/// A key found by [`KeyIndex::find`].
#[derive(Debug, Clone, Copy)]
pub struct Found {
    ordinal: usize,
    first: Slot,
}

/// How a field's sample shapes are known.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FieldShape {
    /// Every sample has this shape: nothing stored per sample.
    Fixed(Vec<usize>),
    /// Samples vary, at this rank: each shape is stored.
    Varying(usize),
}

impl Slot {
    /// A slot of a fixed-shape field, or one whose shape the caller supplies.
    pub const fn new(checksum: u64, file: u32, index: u32) -> Slot {
        Slot { checksum, file, index, shape_at: 0 }
    }
}

/// In-memory key -> slots map, in first-put order.
#[derive(Debug)]
pub struct KeyIndex {
    fields: Vec<FieldShape>,
    /// Every key's UTF-8 bytes, concatenated in first-put order.
    key_bytes: String,
    /// `(start, len)` of each key in `key_bytes`, by ordinal.
    key_spans: Vec<(u64, u32)>,
    table: KeyTable,
    /// `keys.len() * fields` slots: key `k`'s fields at `k * fields ..`.
    slots: Vec<Slot>,
    /// Every sample shape, concatenated.
    shapes: Vec<usize>,
    uids: Vec<String>,
    file_of_uid: HashMap<String, u32>,
    /// The log ends with a finalize record.
    finalized: bool,
    /// Reused by `insert`.
    scratch: Vec<Slot>,
}

impl KeyIndex {
    /// An empty index for the given fields.
    pub fn new(fields: Vec<FieldShape>) -> KeyIndex {
        KeyIndex {
            fields,
            key_bytes: String::new(),
            key_spans: Vec::new(),
            table: KeyTable::default(),
            slots: Vec::new(),
            shapes: Vec::new(),
            uids: Vec::new(),
            file_of_uid: HashMap::default(),
            finalized: false,
            scratch: Vec::new(),
        }
    }

    /// Rebuilds the index from the log's payloads.
    pub fn from_log(
        payloads: &[Vec<u8>],
        fields: Vec<FieldShape>,
        log_path: &Path,
    ) -> Result<KeyIndex> {
        let mut index = KeyIndex::new(fields);
        for (i, payload) in payloads.iter().enumerate() {
            let corrupted =
                |detail: String| Error::corrupted(log_path, format!("record {i}: {detail}"));
            if index.finalized {
                return Err(corrupted("an entry follows the finalize record".into()));
            }
            if payload.first() == Some(&b'{') {
                let keys = decode_finalize(payload).map_err(corrupted)?;
                if keys != index.len() as u64 {
                    return Err(corrupted(format!(
                        "the finalize record counts {keys} keys, the log holds {}",
                        index.len()
                    )));
                }
                index.finalized = true;
                continue;
            }
            let (key, records) = decode_entry(payload, index.fields.len()).map_err(corrupted)?;
            let refs: Vec<RecordRef<'_>> = records.iter().map(Numpy10Record::as_ref).collect();
            index.insert(&key, &refs).map_err(|e| corrupted(e.to_string()))?;
        }
        Ok(index)
    }

    /// Sets the records of `key` (replacing earlier ones). Fails when a record's rank differs from
    /// its field's or the index outgrows its 32-bit slot numbers.
    pub fn insert(&mut self, key: &str, records: &[RecordRef<'_>]) -> Result<()> {
        if records.len() != self.fields.len() {
            return Err(Error::invalid(format!(
                "{} records for {} fields",
                records.len(),
                self.fields.len()
            )));
        }
        // A scratch vector kept across calls: no allocation per put.
        let mut new_slots = std::mem::take(&mut self.scratch);
        new_slots.clear();
        for (record, field) in records.iter().zip(&self.fields) {
            match field {
                FieldShape::Fixed(dims) if record.shape != dims.as_slice() => {
                    return Err(Error::invalid(format!(
                        "record {record} has shape {}, its field's fixed shape is {}",
                        stowage_core::shape::display(record.shape),
                        stowage_core::shape::display(dims)
                    )));
                }
                FieldShape::Varying(rank) if record.shape.len() != *rank => {
                    return Err(Error::invalid(format!(
                        "record {record} has rank {}, its field {rank}",
                        record.shape.len()
                    )));
                }
                _ => {}
            }
            let too_big = || Error::invalid(format!("record {record}: index beyond 2^32 entries"));
            let index = u32::try_from(record.collection_index).map_err(|_| too_big())?;
            let shape_at = u32::try_from(self.shapes.len()).map_err(|_| too_big())?;
            let file = match self.file_of_uid.get(record.uid) {
                Some(&file) => file,
                None => {
                    let file = u32::try_from(self.uids.len()).map_err(|_| too_big())?;
                    self.file_of_uid.insert(record.uid.to_owned(), file);
                    self.uids.push(record.uid.to_owned());
                    file
                }
            };
            if let FieldShape::Varying(_) = field {
                self.shapes.extend_from_slice(record.shape);
            }
            new_slots.push(Slot { checksum: record.checksum, file, index, shape_at });
        }
        let fields = self.fields.len();
        let first = new_slots.first().copied().unwrap_or(Slot::new(0, 0, 0));
        let hash = self.table.hash(key);
        match self.table.find_mut(hash, key, &self.key_bytes) {
            Some(entry) => {
                entry.first = first;
                let k = entry.ordinal as usize;
                self.slots[k * fields..(k + 1) * fields].copy_from_slice(&new_slots);
            }
            None => {
                let too_many = || Error::invalid("more than 2^32 - 1 keys, or a key of 4 GiB");
                let ordinal = u32::try_from(self.key_spans.len())
                    .ok()
                    .filter(|&ordinal| ordinal != VACANT_ORDINAL)
                    .ok_or_else(too_many)?;
                let len = u32::try_from(key.len()).map_err(|_| too_many())?;
                let start = self.key_bytes.len() as u64;
                self.key_bytes.push_str(key);
                self.key_spans.push((start, len));
                self.table.insert_new(KeyEntry::new(hash, key, start, ordinal, first));
                self.slots.extend_from_slice(&new_slots);
            }
        }
        self.scratch = new_slots;
        Ok(())
    }

    /// The file id of collection file `uid`, added to the index's files when new (so that a file
    /// id stays valid for the handle's life, whichever keys the tail holds).
    pub fn intern_uid(&mut self, uid: &str) -> Result<u32> {
        if let Some(&file) = self.file_of_uid.get(uid) {
            return Ok(file);
        }
        let file = u32::try_from(self.uids.len())
            .map_err(|_| Error::invalid("more than 2^32 collection files"))?;
        self.file_of_uid.insert(uid.to_owned(), file);
        self.uids.push(uid.to_owned());
        Ok(file)
    }

    /// Forgets every key (they are in an on-disk run now), keeping the collection files and
    /// their ids.
    pub fn clear_keys(&mut self) {
        self.key_bytes = String::new();
        self.key_spans = Vec::new();
        self.table = KeyTable::default();
        self.slots = Vec::new();
        self.shapes = Vec::new();
        self.finalized = false;
    }

    /// Finds `key`: one cache line read for keys up to 16 bytes, whose entry also holds the first
    /// field's slot.
    pub fn find(&self, key: &str) -> Option<Found> {
        // A cache whose keys are all in the runs (any reopened one) holds none here: no hash.
        if self.table.is_empty() {
            return None;
        }
        let hash = self.table.hash(key);
        let entry = self.table.find(hash, key, &self.key_bytes)?;
        Some(Found { ordinal: entry.ordinal as usize, first: entry.first })
    }

    /// The ordinal of a found key: its position in first-put order ([`KeyIndex::keys`]).
    pub fn ordinal(found: &Found) -> usize {
        found.ordinal
    }

    /// The slot of field `field` of a found key.
    pub fn slot(&self, found: &Found, field: usize) -> Slot {
        if field == 0 { found.first } else { self.slots[found.ordinal * self.fields.len() + field] }
    }

    /// The slots of `key`, one per field.
    pub fn get(&self, key: &str) -> Option<&[Slot]> {
        let fields = self.fields.len();
        self.find(key).map(|f| &self.slots[f.ordinal * fields..(f.ordinal + 1) * fields])
    }

    /// The sample shape of a slot of field `field`.
    pub fn shape(&self, field: usize, slot: &Slot) -> &[usize] {
        match &self.fields[field] {
            FieldShape::Fixed(dims) => dims,
            FieldShape::Varying(rank) => {
                let at = slot.shape_at as usize;
                &self.shapes[at..at + rank]
            }
        }
    }

    /// The uid of a file id.
    pub fn file_uid(&self, file: u32) -> &str {
        &self.uids[file as usize]
    }

    /// How each field's shapes are known.
    pub fn field_shapes(&self) -> &[FieldShape] {
        &self.fields
    }

    /// The file id of a collection file uid.
    pub fn file_id(&self, uid: &str) -> Option<u32> {
        self.file_of_uid.get(uid).copied()
    }

    /// Every collection file uid the index has seen, by file id.
    pub fn file_uids(&self) -> &[String] {
        &self.uids
    }

    /// The hangar record string of a slot of field `field`.
    pub fn record(&self, field: usize, slot: &Slot) -> Numpy10Record {
        Numpy10Record {
            uid: self.file_uid(slot.file).to_owned(),
            checksum: slot.checksum,
            collection_index: u64::from(slot.index),
            shape: self.shape(field, slot).to_vec(),
        }
    }

    /// Number of distinct keys.
    pub fn len(&self) -> usize {
        self.key_spans.len()
    }

    /// Whether no key is stored (the pair of `len`, which the fuzz targets' `KeyIndex` carries).
    #[cfg_attr(not(feature = "fuzzing"), allow(dead_code))]
    pub fn is_empty(&self) -> bool {
        self.key_spans.is_empty()
    }

    /// Keys in first-put order.
    pub fn keys(&self) -> impl ExactSizeIterator<Item = &str> {
        self.key_spans
            .iter()
            .map(|&(start, len)| &self.key_bytes[start as usize..start as usize + len as usize])
    }

    /// Every `(key, slots)` in first-put order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &[Slot])> {
        let fields = self.fields.len().max(1);
        self.keys().zip(self.slots.chunks(fields))
    }

    /// Whether the log ends with a finalize record (the cache was committed as complete).
    #[cfg_attr(not(test), allow(dead_code))]
    pub fn is_finalized(&self) -> bool {
        self.finalized
    }
}

/// Encodes one log entry: `["<key>","<record>",...]` (records are plain ASCII). The writer
/// appends with [`encode_entry_into`]; this allocating form serves the unit tests.
#[cfg(test)]
pub fn encode_entry(key: &str, records: &[RecordRef<'_>]) -> Vec<u8> {
    let mut out = Vec::with_capacity(key.len() + 48 * records.len() + 8);
    encode_entry_into(&mut out, key, records);
    out
}

/// Appends the encoding of one log entry to `out`.
pub fn encode_entry_into(out: &mut Vec<u8>, key: &str, records: &[RecordRef<'_>]) {
    use std::io::Write;
    out.push(b'[');
    serde_json::to_writer(&mut *out, key).expect("writing a string to a Vec cannot fail");
    for record in records {
        write!(out, ",\"{record}\"").expect("writing to a Vec cannot fail");
    }
    out.push(b']');
}

/// Encodes the finalize record for an index of `keys` keys.
pub fn encode_finalize(keys: u64) -> Vec<u8> {
    format!("{{\"finalized\": {{\"keys\": {keys}}}}}").into_bytes()
}

pub(crate) fn decode_finalize(payload: &[u8]) -> std::result::Result<u64, String> {
    let value: serde_json::Value =
        serde_json::from_slice(payload).map_err(|e| format!("not a finalize record: {e}"))?;
    value
        .get("finalized")
        .and_then(|f| f.get("keys"))
        .and_then(serde_json::Value::as_u64)
        .ok_or_else(|| format!("not a finalize record: {value}"))
}

pub(crate) fn decode_entry(
    payload: &[u8],
    fields: usize,
) -> std::result::Result<(String, Vec<Numpy10Record>), String> {
    let mut parts: Vec<String> =
        serde_json::from_slice(payload).map_err(|e| format!("not a JSON list of strings: {e}"))?;
    if parts.len() != fields + 1 {
        return Err(format!(
            "{} record strings, the schema has {fields} fields",
            parts.len().saturating_sub(1)
        ));
    }
    let records = parts[1..]
        .iter()
        .map(|r| Numpy10Record::parse(r).map_err(|e| e.to_string()))
        .collect::<std::result::Result<Vec<_>, _>>()?;
    let key = std::mem::take(&mut parts[0]);
    Ok((key, records))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(text: &str) -> Numpy10Record {
        Numpy10Record::parse(text).unwrap()
    }

    #[test]
    fn entries_round_trip_and_later_wins() {
        let a = rec("10:abcdefgh:0123456789abcdef:0:2 3");
        let b = rec("10:zzzzzzzz:0123456789abcdef:1:2 1");
        let log = vec![
            encode_entry("k", &[a.as_ref()]),
            encode_entry("j", &[b.as_ref()]),
            encode_entry("k", &[b.as_ref()]),
        ];
        let index =
            KeyIndex::from_log(&log, vec![FieldShape::Varying(2)], Path::new("records.log"))
                .unwrap();
        assert_eq!(index.keys().collect::<Vec<_>>(), ["k", "j"]);
        let slots = index.get("k").unwrap();
        assert_eq!(index.record(0, &slots[0]), b);
        assert_eq!(index.record(0, &index.get("j").unwrap()[0]), b);
        assert!(index.get("absent").is_none());
    }

    #[test]
    fn finalize_record_must_be_last_and_count_the_keys() {
        let a = rec("10:abcdefgh:0123456789abcdef:0:2 3");
        let p = Path::new("records.log");
        let ok = vec![encode_entry("k", &[a.as_ref()]), encode_finalize(1)];
        assert!(KeyIndex::from_log(&ok, vec![FieldShape::Varying(2)], p).unwrap().is_finalized());
        let after = vec![encode_finalize(0), encode_entry("k", &[a.as_ref()])];
        assert!(
            KeyIndex::from_log(&after, vec![FieldShape::Varying(2)], p)
                .unwrap_err()
                .to_string()
                .contains("follows")
        );
        let miscounted = vec![encode_entry("k", &[a.as_ref()]), encode_finalize(2)];
        assert!(KeyIndex::from_log(&miscounted, vec![FieldShape::Varying(2)], p).is_err());
    }

    #[test]
    fn bad_entries_are_corruption_naming_the_record() {
        let wrong_rank = encode_entry("k", &[rec("10:abcdefgh:0123456789abcdef:0:2").as_ref()]);
        for bad in [&b"[1]"[..], b"[\"k\"]", b"[\"k\", \"10:zz\"]", b"\xff", &wrong_rank] {
            let err = KeyIndex::from_log(
                &[bad.to_vec()],
                vec![FieldShape::Varying(2)],
                Path::new("records.log"),
            )
            .unwrap_err();
            assert!(matches!(err, Error::Corrupted { .. }), "{err}");
            assert!(err.to_string().contains("record 0"), "{err}");
        }
    }
}
