//! Row records: how one sample is stored in a remote cache's data objects, so that a cold get
//! is one range read of exactly its record.
//!
//! ```text
//! record (little-endian):
//!   u32 key length | key (UTF-8)
//!   u16 field count (the schema's)
//!   per field, in schema order:
//!     u8 kind: 0 null, 1 tensor, 2 bytes, 3 json
//!     tensor: u8 rank | rank x u64 dimensions
//!     u64 byte length (not for null)
//!   the fields' bytes, in the same order
//! ```
//!
//! A record carries no checksum of its own: the row table that locates it keeps the record's
//! xxh3-64, which covers the key, the shapes and the bytes, so that a record read for key `k`
//! that holds another key (a hash collision in the index, a wrong offset) is an error, never
//! that key's data. [`decode`] still checks every length and shape against the schema on its
//! own, since a record is read from an untrusted store.

use stowage_core::bytes::Bytes;
use stowage_core::{Error, FieldKind, Result, Sample, Schema, Tensor, Value};

/// The largest tensor rank a record may hold (no dtype of stowage has a use for more).
pub const MAX_RANK: usize = 32;

const NULL: u8 = 0;
const TENSOR: u8 = 1;
const BYTES: u8 = 2;
const JSON: u8 = 3;

/// The record of `sample` under `key`. The sample must fit `schema` (checked first).
///
/// Errors: the schema mismatch, naming the field.
///
/// ```
/// use stowage_core::{DType, Sample, Schema, ShapeRule, Tensor};
/// use stowage_remote::row_record::{decode, encode};
///
/// let schema = Schema::new().tensor("x", DType::F32, ShapeRule::Fixed(vec![2]));
/// let sample = Sample::new().with("x", Tensor::from_slice(&[2], &[1.0f32, 2.0]).unwrap());
/// let record = encode(&schema, "k", &sample).unwrap();
/// let back = decode(&schema, "s3://b/c/data/0", "k", record.into()).unwrap();
/// assert_eq!(back.tensor("x").unwrap().bytes(), sample.tensor("x").unwrap().bytes());
/// ```
pub fn encode(schema: &Schema, key: &str, sample: &Sample) -> Result<Vec<u8>> {
    schema.validate(sample)?;
    let key_len = u32::try_from(key.len()).map_err(|_| Error::invalid("key longer than 4 GiB"))?;
    let fields = u16::try_from(schema.fields.len())
        .map_err(|_| Error::invalid("a schema of more than 65,535 fields"))?;
    let mut header = Vec::with_capacity(16 + key.len() + 32 * schema.fields.len());
    header.extend_from_slice(&key_len.to_le_bytes());
    header.extend_from_slice(key.as_bytes());
    header.extend_from_slice(&fields.to_le_bytes());
    let mut bodies: Vec<&[u8]> = Vec::with_capacity(schema.fields.len());
    for spec in &schema.fields {
        match sample.get(&spec.name).unwrap_or(&Value::Null) {
            Value::Null => header.push(NULL),
            Value::Tensor(tensor) => {
                header.push(TENSOR);
                header.push(tensor.shape().len() as u8);
                for dim in tensor.shape() {
                    header.extend_from_slice(&(*dim as u64).to_le_bytes());
                }
                header.extend_from_slice(&(tensor.bytes().len() as u64).to_le_bytes());
                bodies.push(tensor.bytes());
            }
            Value::Bytes(bytes) => {
                header.push(BYTES);
                header.extend_from_slice(&(bytes.len() as u64).to_le_bytes());
                bodies.push(bytes);
            }
            Value::Json(text) => {
                header.push(JSON);
                header.extend_from_slice(&(text.len() as u64).to_le_bytes());
                bodies.push(text.as_bytes());
            }
        }
    }
    let mut record = header;
    for body in bodies {
        record.extend_from_slice(body);
    }
    Ok(record)
}

/// The sample in `record`, read for `key` from `source` (a URL, for errors). Tensors share
/// `record`'s buffer.
///
/// Errors: [`Error::Corrupted`] naming `source` and `key` when the record is not a record of
/// `schema` (a length past the end, a kind or shape the schema does not allow, bytes left over)
/// or holds another key.
pub fn decode(schema: &Schema, source: &str, key: &str, record: Bytes) -> Result<Sample> {
    let bad = |detail: String| Error::corrupted(source, detail).for_key(key);
    let mut at = Cursor { bytes: &record, at: 0 };
    let key_len = at.u32().ok_or_else(|| bad("record ends in its key length".into()))? as usize;
    let stored = at.take(key_len).ok_or_else(|| bad("record ends in its key".into()))?;
    if stored != key.as_bytes() {
        return Err(bad(format!(
            "the record holds key {:?}, not the key asked for",
            String::from_utf8_lossy(stored)
        )));
    }
    let count = at.u16().ok_or_else(|| bad("record ends in its field count".into()))?;
    if usize::from(count) != schema.fields.len() {
        return Err(bad(format!("{count} fields, the schema has {}", schema.fields.len())));
    }
    // The header first, then the bodies: each field's (kind, shape, length).
    let mut layout: Vec<(u8, Vec<usize>, usize)> = Vec::with_capacity(schema.fields.len());
    let mut body_total: usize = 0;
    for spec in &schema.fields {
        let field = &spec.name;
        let kind = at.u8().ok_or_else(|| bad(format!("record ends in field {field:?}")))?;
        let mut shape = Vec::new();
        if kind == TENSOR {
            let rank =
                usize::from(at.u8().ok_or_else(|| bad(format!("field {field:?}: no rank")))?);
            if rank > MAX_RANK {
                return Err(bad(format!("field {field:?}: rank {rank} above {MAX_RANK}")));
            }
            for _ in 0..rank {
                let dim =
                    at.u64().ok_or_else(|| bad(format!("field {field:?}: cut in its shape")))?;
                shape.push(
                    usize::try_from(dim)
                        .map_err(|_| bad(format!("field {field:?}: dimension {dim}")))?,
                );
            }
        }
        let len = match kind {
            NULL => 0,
            TENSOR | BYTES | JSON => {
                let len = at.u64().ok_or_else(|| bad(format!("field {field:?}: no length")))?;
                usize::try_from(len).map_err(|_| bad(format!("field {field:?}: length {len}")))?
            }
            other => return Err(bad(format!("field {field:?}: unknown kind {other}"))),
        };
        let allowed = match (&spec.kind, kind) {
            (_, NULL) => spec.nullable,
            (FieldKind::Tensor { .. }, TENSOR) | (FieldKind::Bytes, BYTES) => true,
            (FieldKind::Json { .. }, JSON) => true,
            _ => false,
        };
        if !allowed {
            return Err(bad(format!(
                "field {field:?}: a value of kind {kind} the schema does not allow"
            )));
        }
        body_total =
            body_total.checked_add(len).ok_or_else(|| bad("field lengths overflow".into()))?;
        layout.push((kind, shape, len));
    }
    let remaining = record.len() - at.at;
    if body_total != remaining {
        return Err(bad(format!(
            "the fields hold {body_total} bytes, the record {remaining} after its header"
        )));
    }
    let mut sample = Sample::new();
    let mut start = at.at;
    for (spec, (kind, shape, len)) in schema.fields.iter().zip(layout) {
        let body = record.slice(start..start + len);
        start += len;
        let value = match (kind, &spec.kind) {
            (NULL, _) => Value::Null,
            (TENSOR, FieldKind::Tensor { dtype, shape: rule }) => {
                rule.check(&shape).map_err(|e| bad(format!("field {:?}: {e}", spec.name)))?;
                let tensor = Tensor::new(*dtype, shape, body)
                    .map_err(|e| bad(format!("field {:?}: {e}", spec.name)))?;
                Value::Tensor(tensor)
            }
            (BYTES, _) => Value::Bytes(body),
            (JSON, _) => {
                let text = std::str::from_utf8(&body)
                    .map_err(|_| bad(format!("field {:?}: JSON that is not UTF-8", spec.name)))?;
                Value::Json(text.to_owned())
            }
            _ => unreachable!("kinds were checked against the schema above"),
        };
        sample.insert(spec.name.as_str(), value);
    }
    // Everything else the schema asks (JSON that parses, the shape rules) is checked as a
    // writer's sample is.
    schema
        .validate(&sample)
        .map_err(|e| bad(format!("the record's sample does not fit the schema: {e}")))?;
    Ok(sample)
}

/// Reads little-endian integers and byte runs, `None` past the end.
struct Cursor<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Cursor<'a> {
    fn take(&mut self, len: usize) -> Option<&'a [u8]> {
        let end = self.at.checked_add(len)?;
        let slice = self.bytes.get(self.at..end)?;
        self.at = end;
        Some(slice)
    }

    fn u8(&mut self) -> Option<u8> {
        self.take(1).map(|b| b[0])
    }

    fn u16(&mut self) -> Option<u16> {
        self.take(2).map(|b| u16::from_le_bytes(b.try_into().expect("2 bytes")))
    }

    fn u32(&mut self) -> Option<u32> {
        self.take(4).map(|b| u32::from_le_bytes(b.try_into().expect("4 bytes")))
    }

    fn u64(&mut self) -> Option<u64> {
        self.take(8).map(|b| u64::from_le_bytes(b.try_into().expect("8 bytes")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use stowage_core::{DType, ShapeRule};

    fn schema() -> Schema {
        Schema::new()
            .tensor("x", DType::F32, ShapeRule::Fixed(vec![2, 2]))
            .nullable_tensor("ragged", DType::I16, ShapeRule::RaggedLeading(vec![3]))
            .bytes("raw")
            .json("meta", false)
    }

    fn sample(i: u8) -> Sample {
        let ragged: Vec<i16> = (0..3 * i16::from(i % 3)).collect();
        let mut sample = Sample::new()
            .with("x", Tensor::from_slice(&[2, 2], &[f32::from(i), 1.0, -2.0, 0.5]).unwrap())
            .with("raw", Value::Bytes(Bytes::from(vec![i; usize::from(i % 4)])))
            .with("meta", Value::Json(format!("{{\"i\": {i}}}")));
        if i % 5 == 4 {
            sample.insert("ragged", Value::Null);
        } else {
            sample.insert("ragged", Tensor::from_slice(&[usize::from(i % 3), 3], &ragged).unwrap());
        }
        sample
    }

    fn same(a: &Sample, b: &Sample) -> bool {
        let sorted = |s: &Sample| {
            let mut v: Vec<(String, Value)> =
                s.fields().map(|(n, v)| (n.to_owned(), v.clone())).collect();
            v.sort_by(|x, y| x.0.cmp(&y.0));
            v
        };
        sorted(a) == sorted(b)
    }

    #[test]
    fn every_kind_of_field_round_trips() {
        for i in 0..20 {
            let key = format!("key/{i}");
            let record = encode(&schema(), &key, &sample(i)).unwrap();
            let back = decode(&schema(), "src", &key, Bytes::from(record)).unwrap();
            assert!(same(&back, &sample(i)), "{i}");
        }
    }

    #[test]
    fn another_key_and_every_truncation_are_corruption_never_a_panic() {
        let record = Bytes::from(encode(&schema(), "key/7", &sample(7)).unwrap());
        let err = decode(&schema(), "s3://b/c/data/1", "key/8", record.clone()).unwrap_err();
        assert!(matches!(err, Error::Corrupted { .. }), "{err}");
        let text = err.to_string();
        assert!(
            text.contains("s3://b/c/data/1") && text.contains("key/8") && text.contains("key/7"),
            "{text}"
        );
        for len in 0..record.len() {
            let err = decode(&schema(), "src", "key/7", record.slice(..len)).unwrap_err();
            assert!(matches!(err, Error::Corrupted { .. }), "{len}: {err}");
        }
        let mut longer = record.to_vec();
        longer.push(0);
        assert!(decode(&schema(), "src", "key/7", longer.into()).is_err());
    }

    #[test]
    fn every_flipped_byte_is_an_error_or_a_record_of_the_schema() {
        let record = encode(&schema(), "key/2", &sample(2)).unwrap();
        for at in 0..record.len() {
            for bit in [0x01u8, 0x80] {
                let mut damaged = record.clone();
                damaged[at] ^= bit;
                // Never a panic; what decodes still fits the schema (the row table's checksum is
                // what catches a flipped value byte).
                if let Ok(sample) = decode(&schema(), "src", "key/2", damaged.into()) {
                    schema().validate(&sample).unwrap();
                }
            }
        }
    }

    #[test]
    fn a_sample_that_does_not_fit_the_schema_is_not_encoded() {
        let bad = Sample::new().with("x", Tensor::from_slice(&[3], &[1.0f32, 2.0, 3.0]).unwrap());
        let err = encode(&schema(), "k", &bad).unwrap_err();
        assert!(matches!(err, Error::SchemaMismatch { .. }), "{err}");
    }
}
