//! The key index: which record strings each key resolves to, rebuilt from `records.log` at open.
//!
//! Each log record is the JSON array `[key, record of field 0, record of field 1, ...]` in schema
//! order, so a key's entry is exactly what hangar's record database would hand over per column. A
//! later entry for the same key supersedes an earlier one (overwrite). `finalize` appends one last
//! record, the JSON object `{"finalized": {"keys": N}}`: the commit point of the cache, after which
//! no entry may follow.

use crate::record::Numpy10Record;
use std::collections::HashMap;
use std::path::Path;
use stowage_core::{Error, Result};

/// In-memory key -> records map, in first-put order.
#[derive(Debug, Default)]
pub struct KeyIndex {
    keys: Vec<String>,
    records: Vec<Vec<Numpy10Record>>,
    position: HashMap<String, usize>,
    /// The log ends with a finalize record.
    finalized: bool,
}

impl KeyIndex {
    /// Rebuilds the index from the log's payloads; `fields` is the schema's field count.
    pub fn from_log(payloads: &[Vec<u8>], fields: usize, log_path: &Path) -> Result<KeyIndex> {
        let mut index = KeyIndex::default();
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
            let (key, records) = decode_entry(payload, fields).map_err(corrupted)?;
            index.insert(key, records);
        }
        Ok(index)
    }

    /// Whether the log ends with a finalize record (the cache was committed as complete).
    pub fn is_finalized(&self) -> bool {
        self.finalized
    }

    /// Sets the records of `key` (replacing earlier ones).
    pub fn insert(&mut self, key: String, records: Vec<Numpy10Record>) {
        match self.position.get(&key) {
            Some(&i) => self.records[i] = records,
            None => {
                self.position.insert(key.clone(), self.keys.len());
                self.keys.push(key);
                self.records.push(records);
            }
        }
    }

    /// The records of `key`, one per schema field.
    pub fn get(&self, key: &str) -> Option<&[Numpy10Record]> {
        self.position.get(key).map(|&i| self.records[i].as_slice())
    }

    /// Number of distinct keys.
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    /// Whether no key is stored.
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// Keys in first-put order.
    pub fn keys(&self) -> &[String] {
        &self.keys
    }

    /// Every `(key, records)` in first-put order.
    pub fn iter(&self) -> impl Iterator<Item = (&str, &[Numpy10Record])> {
        self.keys.iter().map(String::as_str).zip(self.records.iter().map(Vec::as_slice))
    }
}

/// Encodes one log entry.
pub fn encode_entry(key: &str, records: &[Numpy10Record]) -> Vec<u8> {
    let mut fields: Vec<String> = Vec::with_capacity(records.len() + 1);
    fields.push(key.to_owned());
    fields.extend(records.iter().map(Numpy10Record::to_string));
    serde_json::to_vec(&fields).expect("a list of strings always serializes")
}

/// Encodes the finalize record for an index of `keys` keys.
pub fn encode_finalize(keys: u64) -> Vec<u8> {
    format!("{{\"finalized\": {{\"keys\": {keys}}}}}").into_bytes()
}

fn decode_finalize(payload: &[u8]) -> std::result::Result<u64, String> {
    let value: serde_json::Value =
        serde_json::from_slice(payload).map_err(|e| format!("not a finalize record: {e}"))?;
    value
        .get("finalized")
        .and_then(|f| f.get("keys"))
        .and_then(serde_json::Value::as_u64)
        .ok_or_else(|| format!("not a finalize record: {value}"))
}

fn decode_entry(
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

    #[test]
    fn entries_round_trip_and_later_wins() {
        let a = Numpy10Record::parse("10:abcdefgh:0123456789abcdef:0:2 3").unwrap();
        let b = Numpy10Record::parse("10:abcdefgh:0123456789abcdef:1:2 3").unwrap();
        let log = vec![
            encode_entry("k", &[a]),
            encode_entry("j", std::slice::from_ref(&b)),
            encode_entry("k", std::slice::from_ref(&b)),
        ];
        let index = KeyIndex::from_log(&log, 1, Path::new("records.log")).unwrap();
        assert_eq!(index.keys(), ["k", "j"]);
        assert_eq!(index.get("k").unwrap(), [b]);
    }

    #[test]
    fn finalize_record_must_be_last_and_count_the_keys() {
        let a = Numpy10Record::parse("10:abcdefgh:0123456789abcdef:0:2 3").unwrap();
        let p = Path::new("records.log");
        let ok = vec![encode_entry("k", std::slice::from_ref(&a)), encode_finalize(1)];
        assert!(KeyIndex::from_log(&ok, 1, p).unwrap().is_finalized());
        let after = vec![encode_finalize(0), encode_entry("k", std::slice::from_ref(&a))];
        assert!(KeyIndex::from_log(&after, 1, p).unwrap_err().to_string().contains("follows"));
        let miscounted = vec![encode_entry("k", &[a]), encode_finalize(2)];
        assert!(KeyIndex::from_log(&miscounted, 1, p).is_err());
    }

    #[test]
    fn bad_entries_are_corruption_naming_the_record() {
        for bad in [&b"[1]"[..], b"[\"k\"]", b"[\"k\", \"10:zz\"]", b"\xff"] {
            let err = KeyIndex::from_log(&[bad.to_vec()], 1, Path::new("records.log")).unwrap_err();
            assert!(matches!(err, Error::Corrupted { .. }), "{err}");
            assert!(err.to_string().contains("record 0"), "{err}");
        }
    }
}
