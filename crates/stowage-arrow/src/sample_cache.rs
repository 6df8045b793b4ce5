//! An optional cache of decoded samples, bounded by bytes (torchcachex's `lru_size` counts
//! entries and treats 0 as unbounded; here 0 means off).
//!
//! Tensors of a decoded sample share the segment's map, so an entry costs little memory; what it
//! saves is the lookup, the decode and the checksum of a key read again. Only found samples are
//! cached (torchcachex caches `None` and then reads it as a miss).

use std::sync::Mutex;

use lru::LruCache;
use stowage_core::{Sample, Value};

/// Recently read samples, least recently used evicted past a byte budget.
#[derive(Debug)]
pub struct SampleCache {
    budget: usize,
    state: Mutex<State>,
}

#[derive(Debug)]
struct State {
    entries: LruCache<String, (Sample, usize)>,
    bytes: usize,
}

impl SampleCache {
    /// A cache of at most `budget` bytes of sample payload; 0 turns it off.
    pub fn new(budget: usize) -> SampleCache {
        // Bounded by bytes, not by count.
        let entries = LruCache::unbounded();
        SampleCache { budget, state: Mutex::new(State { entries, bytes: 0 }) }
    }

    /// The cached sample of `key`, made most recently used.
    pub fn get(&self, key: &str) -> Option<Sample> {
        if self.budget == 0 {
            return None;
        }
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        state.entries.get(key).map(|(sample, _)| sample.clone())
    }

    /// Caches `sample` under `key` unless it alone exceeds the budget; evicts the least recently
    /// used entries past the budget.
    pub fn insert(&self, key: &str, sample: &Sample) {
        let size = key.len() + payload(sample);
        if size > self.budget {
            return;
        }
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((_, (_, old))) = state.entries.push(key.to_owned(), (sample.clone(), size)) {
            state.bytes -= old;
        }
        state.bytes += size;
        while state.bytes > self.budget {
            let Some((_, (_, evicted))) = state.entries.pop_lru() else { break };
            state.bytes -= evicted;
        }
    }

    /// Forgets `key` (it was written again).
    pub fn remove(&self, key: &str) {
        if self.budget == 0 {
            return;
        }
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((_, size)) = state.entries.pop(key) {
            state.bytes -= size;
        }
    }

    /// Bytes cached.
    #[cfg(test)]
    pub fn bytes(&self) -> usize {
        self.state.lock().unwrap_or_else(|e| e.into_inner()).bytes
    }
}

fn payload(sample: &Sample) -> usize {
    sample
        .fields()
        .map(|(name, value)| {
            name.len()
                + match value {
                    Value::Tensor(tensor) => tensor.bytes().len(),
                    Value::Bytes(bytes) => bytes.len(),
                    Value::Json(text) => text.len(),
                    Value::Null => 0,
                }
        })
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;
    use stowage_core::Tensor;

    fn sample(values: usize) -> Sample {
        Sample::new().with("x", Tensor::from_slice(&[values], &vec![0u8; values]).unwrap())
    }

    #[test]
    fn the_byte_budget_evicts_least_recently_used_and_zero_is_off() {
        let cache = SampleCache::new(300);
        cache.insert("a", &sample(100)); // 1 + 1 + 100 bytes
        cache.insert("b", &sample(100));
        assert!(cache.get("a").is_some()); // a is now more recent than b
        cache.insert("c", &sample(100));
        assert!(cache.get("b").is_none(), "b was least recently used");
        assert!(cache.get("a").is_some() && cache.get("c").is_some());
        assert_eq!(cache.bytes(), 204);
        cache.insert("huge", &sample(1000));
        assert!(cache.get("huge").is_none() && cache.get("a").is_some());
        cache.remove("a");
        assert!(cache.get("a").is_none());
        assert_eq!(cache.bytes(), 102);
        let off = SampleCache::new(0);
        off.insert("a", &sample(1));
        assert!(off.get("a").is_none());
    }
}
