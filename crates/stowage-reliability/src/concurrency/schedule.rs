//! The writer's puts as a deterministic function of the seed, so that every reader (thread or
//! process) can tell, without talking to the writer, which value each key may hold.
//!
//! Put number `op` either creates the next key or, on a backend that can overwrite, rewrites an
//! earlier one; the value it writes is derived from its key and its op number (the key's
//! *version*). A reader that knows how many puts had been acknowledged by a completed flush
//! before it opened (`lower`) and how many had been announced when it finished opening (`upper`)
//! knows exactly which keys it must see, which it may see, and which versions each may hold.

use rand::{Rng, SeedableRng, rngs::StdRng};
use std::collections::HashSet;
use stowage_conformance::generate::{basic_schema, compare, sample_for};
use stowage_core::{Capabilities, DType, Sample, Schema, ShapeRule};

/// The schema of the campaign's caches: the conformance suite's basic tensor plus a 256-byte
/// `pixels` field, so that a flush spans several pages and a torn read has room to show.
///
/// ```
/// let schema = stowage_reliability::concurrency::schedule::schema(&stowage_npy::capabilities());
/// assert_eq!(schema.fields.len(), 2);
/// ```
pub fn schema(caps: &Capabilities) -> Schema {
    basic_schema(caps).tensor("pixels", DType::U8, ShapeRule::Fixed(vec![16, 16]))
}

/// The key created by the `n`-th new-key put.
pub fn key(n: usize) -> String {
    format!("key-{n:07}")
}

/// The key number of a key written by [`key`], if it is one.
pub fn key_number(key: &str) -> Option<usize> {
    key.strip_prefix("key-")?.parse().ok()
}

/// The value put `op` writes under key number `n`: the same on every side for the same seed.
pub fn value(schema: &Schema, seed: u64, n: usize, op: u64) -> Sample {
    let mixed = seed.rotate_left(17) ^ (n as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ op;
    sample_for(schema, mixed)
}

/// The sequence of puts of one campaign, extended on demand.
#[derive(Debug)]
pub struct Schedule {
    rng: StdRng,
    overwrite: bool,
    /// The key number each put writes.
    ops: Vec<u32>,
    /// Per key number, the puts that write it, ascending (the first one creates it).
    key_ops: Vec<Vec<u64>>,
}

impl Schedule {
    /// The schedule of `seed`; rewrites of earlier keys only when `overwrite` (one put in four).
    pub fn new(seed: u64, overwrite: bool) -> Schedule {
        Schedule {
            rng: StdRng::seed_from_u64(seed ^ 0x5C4E_D01E),
            overwrite,
            ops: Vec::new(),
            key_ops: Vec::new(),
        }
    }

    /// Makes sure puts `0..ops` are known.
    pub fn extend_to(&mut self, ops: u64) {
        while (self.ops.len() as u64) < ops {
            let op = self.ops.len() as u64;
            let rewrite = self.overwrite && !self.key_ops.is_empty() && self.rng.random_ratio(1, 4);
            let n = if rewrite {
                self.rng.random_range(0..self.key_ops.len())
            } else {
                self.key_ops.push(Vec::new());
                self.key_ops.len() - 1
            };
            self.key_ops[n].push(op);
            self.ops.push(n as u32);
        }
    }

    /// The key number put `op` writes (extending the schedule as needed).
    pub fn key_of(&mut self, op: u64) -> usize {
        self.extend_to(op + 1);
        self.ops[op as usize] as usize
    }

    /// How many keys puts `0..ops` create (they are key numbers `0..` that count).
    pub fn keys_created_by(&mut self, ops: u64) -> usize {
        self.extend_to(ops);
        self.key_ops.partition_point(|puts| puts[0] < ops)
    }

    /// The puts of key `n` a reader may see, newest first: written before `upper`, and not older
    /// than the newest one written before `lower` (that one was acknowledged, so it or a later
    /// one must be there). Empty when the key was not yet created before `upper`.
    pub fn allowed_versions(&mut self, n: usize, lower: u64, upper: u64) -> Vec<u64> {
        self.extend_to(upper);
        let Some(puts) = self.key_ops.get(n) else { return Vec::new() };
        let oldest = puts.iter().rev().find(|&&op| op < lower).copied().unwrap_or(0);
        puts.iter().rev().copied().filter(|&op| op < upper && op >= oldest).collect()
    }

    /// The newest put of key `n` before `ops`, if any.
    pub fn latest_before(&mut self, n: usize, ops: u64) -> Option<u64> {
        self.extend_to(ops);
        self.key_ops.get(n)?.iter().rev().find(|&&op| op < ops).copied()
    }

    /// Checks a reader's key listing against the bounds: every key it lists was created before
    /// `upper`, and every key created before `lower` is listed. The error names the first key out
    /// of bounds and both bounds.
    pub fn check_listing(&mut self, keys: &[String], lower: u64, upper: u64) -> Result<(), String> {
        let may = self.keys_created_by(upper);
        let must = self.keys_created_by(lower);
        let mut seen = HashSet::with_capacity(keys.len());
        for key in keys {
            let n = key_number(key).ok_or_else(|| format!("listed key {key:?} was never put"))?;
            if n >= may {
                return Err(format!(
                    "listed key {key:?} before it was put: puts 0..{upper} (announced when the \
                     reader opened) create keys 0..{may} only"
                ));
            }
            if !seen.insert(n) {
                return Err(format!("key {key:?} listed twice"));
            }
        }
        if let Some(missing) = (0..must).find(|n| !seen.contains(n)) {
            return Err(format!(
                "key {:?} missing: it was acknowledged by a flush (puts 0..{lower} acknowledged \
                 before the reader opened), {} keys listed",
                key(missing),
                keys.len()
            ));
        }
        Ok(())
    }

    /// Checks what `get` returned for key number `n` against the versions allowed between
    /// `lower` and `upper`; returns the version it holds. The error names the key, the versions
    /// allowed and how the sample differs from the newest of them.
    pub fn check_sample(
        &mut self,
        schema: &Schema,
        seed: u64,
        n: usize,
        got: Option<&Sample>,
        (lower, upper): (u64, u64),
    ) -> Result<u64, String> {
        let allowed = self.allowed_versions(n, lower, upper);
        let name = key(n);
        let Some(newest) = allowed.first() else {
            return match got {
                None => Err(format!("key {name:?} is listed but get returned None")),
                Some(_) => Err(format!("key {name:?} returned a sample before any put of it")),
            };
        };
        if let Some(&version) = allowed.iter().find(|&&op| got == Some(&value(schema, seed, n, op)))
        {
            return Ok(version);
        }
        let want = value(schema, seed, n, *newest);
        let diff = compare(&name, &want, got).err().unwrap_or_default();
        Err(format!(
            "key {name:?} holds none of the versions it may hold (puts {allowed:?}, acknowledged \
             through put {lower}, announced through put {upper}); against the newest: {diff}"
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replicas_agree_and_versions_follow_the_bounds() {
        let mut a = Schedule::new(7, true);
        let mut b = Schedule::new(7, true);
        b.extend_to(500);
        let ops_a: Vec<usize> = (0..500).map(|op| a.key_of(op)).collect();
        let ops_b: Vec<usize> = (0..500).map(|op| b.key_of(op)).collect();
        assert_eq!(ops_a, ops_b);
        let rewritten = (0..a.key_ops.len()).find(|&n| a.key_ops[n].len() >= 2).unwrap();
        let (first, second) = (a.key_ops[rewritten][0], a.key_ops[rewritten][1]);
        assert_eq!(a.allowed_versions(rewritten, 0, first), Vec::<u64>::new());
        assert_eq!(a.allowed_versions(rewritten, first + 1, second + 1), [second, first]);
        assert_eq!(a.allowed_versions(rewritten, second + 1, second + 1), [second]);
    }

    #[test]
    fn listing_outside_the_bounds_is_reported() {
        let mut s = Schedule::new(1, false);
        let keys: Vec<String> = (0..10).map(key).collect();
        s.check_listing(&keys, 10, 10).unwrap();
        assert!(s.check_listing(&keys, 10, 9).unwrap_err().contains("before it was put"));
        assert!(s.check_listing(&keys[..9], 10, 10).unwrap_err().contains("missing"));
        assert!(s.check_listing(&keys[..9], 9, 12).is_ok());
    }

    #[test]
    fn a_sample_of_another_version_or_key_is_reported() {
        let schema = schema(&stowage_npy::capabilities());
        let mut s = Schedule::new(3, false);
        let good = value(&schema, 3, 4, 4);
        assert_eq!(s.check_sample(&schema, 3, 4, Some(&good), (0, 10)), Ok(4));
        let other = value(&schema, 3, 5, 5);
        let err = s.check_sample(&schema, 3, 4, Some(&other), (0, 10)).unwrap_err();
        assert!(err.contains("key-0000004") && err.contains("[4]"), "{err}");
    }
}
