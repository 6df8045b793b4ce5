//! The journal's records: what each one holds and its bytes.
//!
//! ```text
//! record 0   H {"format": "stowage-example-journal", "version": 1, "schema": {...}}
//! then       P <u32 LE header length> {"key": ..., "fields": [...]} <each field's bytes>
//!            F                                   (finalized)
//! ```
//!
//! A put record's JSON header lists each field with its kind, and for a tensor its dtype and
//! shape, and the length of its bytes; the bytes follow in field order. The journal frames and
//! checksums every record (the core's `AppendLog`), so a decoder here only meets bytes that were
//! written whole; it still checks every length, since a writer of another version may differ.

use serde::{Deserialize, Serialize};
use stowage_core::bytes::Bytes;
use stowage_core::{DType, Sample, Schema, Tensor, Value};

use crate::error::JournalError;

/// The journal's format name, in its header record.
pub const FORMAT: &str = "stowage-example-journal";
/// The journal's format version.
pub const VERSION: u32 = 1;

/// One decoded record.
#[derive(Debug, Clone, PartialEq)]
pub enum Record {
    /// The first record: the cache's schema.
    Header(Header),
    /// A sample put under a key.
    Put(String, Sample),
    /// The cache was finalized.
    Finalized,
}

/// What the header record holds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Header {
    /// Always [`FORMAT`].
    pub format: String,
    /// Always [`VERSION`] for journals this version writes.
    pub version: u32,
    /// The schema the cache was created with.
    pub schema: Schema,
}

/// A field of a put record's JSON header.
#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
enum FieldHeader {
    Tensor { name: String, dtype: String, shape: Vec<usize>, len: usize },
    Bytes { name: String, len: usize },
    Json { name: String, len: usize },
    Null { name: String },
}

#[derive(Debug, Serialize, Deserialize)]
struct PutHeader {
    key: String,
    fields: Vec<FieldHeader>,
}

/// Why a record does not decode, and the key of a put record when its header named one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecodeError {
    /// The key, when the record got far enough to say it.
    pub key: Option<String>,
    /// What does not fit.
    pub detail: String,
}

impl DecodeError {
    fn new(key: Option<&str>, detail: impl Into<String>) -> DecodeError {
        DecodeError { key: key.map(str::to_owned), detail: detail.into() }
    }
}

impl Record {
    /// The record's bytes.
    pub fn encode(&self) -> Vec<u8> {
        match self {
            Record::Header(header) => {
                let mut out = vec![b'H'];
                out.extend(serde_json::to_vec(header).expect("a header serializes"));
                out
            }
            Record::Finalized => vec![b'F'],
            Record::Put(key, sample) => {
                let mut fields = Vec::new();
                let mut payload: Vec<&[u8]> = Vec::new();
                for (name, value) in sample.fields() {
                    let name = name.to_owned();
                    fields.push(match value {
                        Value::Tensor(t) => {
                            payload.push(t.bytes());
                            let (dtype, shape) = (t.dtype().name().to_owned(), t.shape().to_vec());
                            FieldHeader::Tensor { name, dtype, shape, len: t.bytes().len() }
                        }
                        Value::Bytes(bytes) => {
                            payload.push(bytes);
                            FieldHeader::Bytes { name, len: bytes.len() }
                        }
                        Value::Json(text) => {
                            payload.push(text.as_bytes());
                            FieldHeader::Json { name, len: text.len() }
                        }
                        Value::Null => FieldHeader::Null { name },
                    });
                }
                let header = PutHeader { key: key.clone(), fields };
                let header = serde_json::to_vec(&header).expect("a put header serializes");
                let mut out = vec![b'P'];
                out.extend((header.len() as u32).to_le_bytes());
                out.extend(header);
                payload.into_iter().for_each(|bytes| out.extend_from_slice(bytes));
                out
            }
        }
    }

    /// Decodes `bytes`; the error says what does not fit, and names the key when it can.
    pub fn decode(bytes: &[u8]) -> Result<Record, DecodeError> {
        match bytes.split_first() {
            Some((b'H', json)) => serde_json::from_slice(json)
                .map(Record::Header)
                .map_err(|e| DecodeError::new(None, format!("header record: {e}"))),
            Some((b'F', [])) => Ok(Record::Finalized),
            Some((b'P', rest)) => decode_put(rest),
            _ => Err(DecodeError::new(
                None,
                format!("a record of {} bytes with an unknown tag", bytes.len()),
            )),
        }
    }
}

fn decode_put(rest: &[u8]) -> Result<Record, DecodeError> {
    let cut = |what: &str| DecodeError::new(None, format!("a put {what} cut short"));
    let (length, rest) = rest.split_at_checked(4).ok_or_else(|| cut("record"))?;
    let length = u32::from_le_bytes(length.try_into().expect("4 bytes")) as usize;
    let (header, mut payload) = rest.split_at_checked(length).ok_or_else(|| cut("header"))?;
    let header: PutHeader = serde_json::from_slice(header)
        .map_err(|e| DecodeError::new(None, format!("put header: {e}")))?;
    let key = Some(header.key.as_str());
    let bad = |detail: String| DecodeError::new(key, detail);
    let mut take = |len: usize| -> Result<&[u8], DecodeError> {
        let (bytes, rest) = payload
            .split_at_checked(len)
            .ok_or_else(|| DecodeError::new(key, "a field's bytes cut short"))?;
        payload = rest;
        Ok(bytes)
    };
    let mut sample = Sample::new();
    for field in &header.fields {
        let (name, value) = match field {
            FieldHeader::Tensor { name, dtype, shape, len } => {
                let dtype = DType::from_name(dtype).map_err(|e| bad(e.to_string()))?;
                let bytes = Bytes::copy_from_slice(take(*len)?);
                let tensor =
                    Tensor::new(dtype, shape.clone(), bytes).map_err(|e| bad(e.to_string()))?;
                (name, Value::Tensor(tensor))
            }
            FieldHeader::Bytes { name, len } => {
                (name, Value::Bytes(Bytes::copy_from_slice(take(*len)?)))
            }
            FieldHeader::Json { name, len } => {
                let text = std::str::from_utf8(take(*len)?).map_err(|e| bad(e.to_string()))?;
                (name, Value::Json(text.to_owned()))
            }
            FieldHeader::Null { name } => (name, Value::Null),
        };
        sample.insert(name.as_str(), value);
    }
    if !payload.is_empty() {
        return Err(bad(format!("{} bytes after the last field", payload.len())));
    }
    Ok(Record::Put(header.key, sample))
}

/// The header record of a new cache of `schema`.
pub fn header(schema: &Schema) -> Record {
    Record::Header(Header { format: FORMAT.into(), version: VERSION, schema: schema.clone() })
}

/// Checks that `header` is a journal this version reads.
///
/// Errors: [`JournalError::OtherFormat`] naming `journal` and both formats.
pub fn check_header(header: &Header, journal: &std::path::Path) -> Result<(), JournalError> {
    if header.format == FORMAT && header.version == VERSION {
        return Ok(());
    }
    Err(JournalError::OtherFormat {
        journal: journal.to_path_buf(),
        format: header.format.clone(),
        version: header.version,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use stowage_core::ShapeRule;

    #[test]
    fn every_kind_of_record_round_trips_and_damage_is_described() {
        let sample = Sample::new()
            .with("t", Tensor::from_slice(&[2, 1], &[1.5f64, -0.0]).unwrap())
            .with("b", Value::Bytes(Bytes::from_static(b"\0raw")))
            .with("j", Value::Json("{\"a\": 1}".into()))
            .with("n", Value::Null);
        let schema = Schema::new().tensor("t", DType::F64, ShapeRule::Any);
        for record in [Record::Put("k\u{e9}".into(), sample), header(&schema), Record::Finalized] {
            assert_eq!(Record::decode(&record.encode()).unwrap(), record);
        }
        let put = Record::Put("k".into(), Sample::new().with("x", Tensor::scalar(1u32))).encode();
        let cut = Record::decode(&put[..put.len() - 1]).unwrap_err();
        assert_eq!(
            (cut.key.as_deref(), cut.detail.as_str()),
            (Some("k"), "a field's bytes cut short")
        );
        let mut longer = put.clone();
        longer.push(0);
        let longer = Record::decode(&longer).unwrap_err();
        assert_eq!(longer.key.as_deref(), Some("k"));
        assert!(longer.detail.contains("after the last field"));
        let unknown = Record::decode(b"Z").unwrap_err();
        assert_eq!(unknown.key, None);
        assert!(unknown.detail.contains("unknown tag"));
        assert!(Record::decode(b"").is_err());
    }
}
