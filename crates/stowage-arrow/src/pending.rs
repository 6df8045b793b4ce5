//! The samples put since the last segment was written: readable at once, written as one segment
//! (or several, by size) on flush. A key put twice keeps its first position and its last value,
//! so a segment never holds a key twice.

use std::collections::HashMap;
use std::sync::Arc;

use stowage_core::{Sample, Value};

/// Samples waiting for the next segment, in order of first put.
#[derive(Debug, Default)]
pub struct Pending {
    /// Each key stored once, shared by the row and the position map.
    rows: Vec<(Arc<str>, Sample)>,
    /// foldhash: keys are the caller's, and a put must not pay SipHash's cost.
    position: HashMap<Arc<str>, usize, foldhash::fast::RandomState>,
    bytes: u64,
}

impl Pending {
    /// Adds or replaces `key`.
    pub fn insert(&mut self, key: &str, sample: &Sample) {
        let size = payload_bytes(key, sample);
        match self.position.get(key) {
            Some(&at) => {
                self.bytes -= payload_bytes(key, &self.rows[at].1);
                self.rows[at].1 = sample.clone();
            }
            None => {
                let key: Arc<str> = Arc::from(key);
                self.position.insert(key.clone(), self.rows.len());
                self.rows.push((key, sample.clone()));
            }
        }
        self.bytes += size;
    }

    /// The pending sample of `key`.
    pub fn get(&self, key: &str) -> Option<&Sample> {
        self.position.get(key).map(|&at| &self.rows[at].1)
    }

    /// Pending samples.
    pub fn len(&self) -> usize {
        self.rows.len()
    }

    /// Whether nothing is pending.
    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// Approximate bytes of the pending payloads (keys, tensors, bytes, JSON).
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Pending keys, in order of first put.
    pub fn keys(&self) -> impl Iterator<Item = &str> {
        self.rows.iter().map(|(key, _)| &**key)
    }

    /// The pending rows split into runs of at most `max_bytes` payload each (at least one row
    /// per run), in order.
    pub fn chunks(&self, max_bytes: u64) -> Vec<Vec<(&str, &Sample)>> {
        let mut chunks = Vec::new();
        let mut chunk: Vec<(&str, &Sample)> = Vec::new();
        let mut bytes = 0;
        for (key, sample) in &self.rows {
            let size = payload_bytes(key, sample);
            if !chunk.is_empty() && bytes + size > max_bytes {
                chunks.push(std::mem::take(&mut chunk));
                bytes = 0;
            }
            chunk.push((&**key, sample));
            bytes += size;
        }
        if !chunk.is_empty() {
            chunks.push(chunk);
        }
        chunks
    }
}

/// The bytes a sample adds to a segment, roughly: its key and every value's payload.
fn payload_bytes(key: &str, sample: &Sample) -> u64 {
    let values: usize = sample
        .fields()
        .map(|(_, value)| match value {
            Value::Tensor(tensor) => tensor.bytes().len() + 8 * tensor.shape().len(),
            Value::Bytes(bytes) => bytes.len(),
            Value::Json(text) => text.len(),
            Value::Null => 0,
        })
        .sum();
    (key.len() + values) as u64
}

#[cfg(test)]
mod tests {
    use super::*;
    use stowage_core::Tensor;

    fn sample(values: usize) -> Sample {
        Sample::new().with("x", Tensor::from_slice(&[values], &vec![1f32; values]).unwrap())
    }

    #[test]
    fn replaced_keys_keep_their_place_and_chunks_respect_the_bound() {
        let mut pending = Pending::default();
        pending.insert("a", &sample(10));
        pending.insert("b", &sample(10));
        pending.insert("a", &sample(20));
        assert_eq!(pending.keys().collect::<Vec<_>>(), ["a", "b"]);
        assert_eq!(pending.get("a").unwrap().tensor("x").unwrap().shape(), [20]);
        assert_eq!(pending.bytes(), (1 + 88) + (1 + 48));
        pending.insert("c", &sample(1000));
        let sizes: Vec<usize> = pending.chunks(200).iter().map(Vec::len).collect();
        assert_eq!(sizes, [2, 1], "a row larger than the bound still gets a chunk");
    }
}
