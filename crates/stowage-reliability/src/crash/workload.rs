//! The work a crash trial's child does, generated from the trial's seed: the same seed always
//! gives the same operations and the same sample bytes, so the parent rebuilds what the child
//! wrote instead of receiving it.

use rand::{Rng, SeedableRng, rngs::StdRng};
use stowage_conformance::generate::{basic_dtype, sample_for};
use stowage_core::{Capabilities, DType, Sample, Schema, ShapeRule};

/// One step of a workload. The child announces each before it starts and after it returns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op {
    /// Create the cache.
    Create,
    /// Put a batch of samples, in order.
    Put(Vec<Put>),
    /// `flush`.
    Flush,
    /// Arrow's `compact` (which flushes first).
    Compact,
    /// `finalize` (which flushes first).
    Finalize,
}

impl Op {
    /// The op's name in reports.
    pub fn name(&self) -> &'static str {
        match self {
            Op::Create => "create",
            Op::Put(_) => "put",
            Op::Flush => "flush",
            Op::Compact => "compact",
            Op::Finalize => "finalize",
        }
    }

    /// Whether the op returning makes every earlier put durable (its contract says so).
    pub fn acknowledges(&self) -> bool {
        matches!(self, Op::Flush | Op::Compact | Op::Finalize)
    }
}

/// One `put`: a key and the number of the value (see [`Workload::value`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Put {
    /// The key.
    pub key: String,
    /// Numbers every put of the workload from 0; each gives different sample bytes.
    pub number: usize,
}

/// A trial's generated work.
#[derive(Debug, Clone)]
pub struct Workload {
    /// The trial's seed.
    pub seed: u64,
    /// The schema the cache is created with.
    pub schema: Schema,
    /// The ops, [`Op::Create`] first and [`Op::Finalize`] last.
    pub ops: Vec<Op>,
    /// The first op a kill may be aimed at (0, or for a realistic workload the first op after
    /// [`REALISTIC_SAMPLES`] puts, so that the crashed cache is realistically big).
    pub kill_from: usize,
}

/// Puts of a realistic workload before any kill (and at least this many samples in its cache).
pub const REALISTIC_SAMPLES: usize = 100_000;

/// The schema of a realistic workload: [`schema_for`] without its kilobyte image, so that a
/// hundred thousand samples stay quick to write and to check.
pub fn realistic_schema_for(caps: &Capabilities) -> Schema {
    let mut schema = schema_for(caps);
    schema.fields.retain(|f| f.name != "image");
    schema
}

/// A schema with one field of each kind `caps` declares, so that every column writer and
/// sidecar of the backend is being written when the kill comes: a small fixed tensor, a
/// kilobyte image (so that flushes take long enough to be killed inside), then variable,
/// ragged, nullable, bytes and JSON fields where declared.
///
/// ```
/// let schema = stowage_reliability::crash::workload::schema_for(&stowage_memmap::capabilities());
/// let names: Vec<&str> = schema.fields.iter().map(|f| f.name.as_str()).collect();
/// assert_eq!(names, ["x", "image", "weight", "meta"]);
/// ```
pub fn schema_for(caps: &Capabilities) -> Schema {
    let has = |dtype| caps.dtypes.contains(&dtype);
    let mut schema = Schema::new()
        .tensor("x", basic_dtype(caps), ShapeRule::Fixed(vec![4, 3]))
        .tensor("image", DType::U8, ShapeRule::Fixed(vec![16, 16, 4]));
    if caps.variable_shapes && has(DType::I64) {
        schema = schema.tensor("boxes", DType::I64, ShapeRule::Max(vec![8, 4]));
    }
    if caps.ragged && has(DType::F16) {
        schema = schema.tensor("points", DType::F16, ShapeRule::RaggedLeading(vec![3]));
    }
    if caps.nullable && has(DType::F64) {
        schema = schema.nullable_tensor("weight", DType::F64, ShapeRule::Fixed(vec![2]));
    }
    if caps.bytes_fields {
        schema = schema.bytes("blob");
    }
    if caps.json_fields {
        schema = schema.json("meta", true);
    }
    schema
}

/// The put numbered `number` (then counted): one time in `overwrite_one_in` an earlier key again
/// when the backend can `overwrite`, otherwise the next distinct key (then counted).
fn next_put(
    rng: &mut StdRng,
    overwrite: bool,
    overwrite_one_in: u32,
    distinct: &mut usize,
    number: &mut usize,
) -> Put {
    let key = if overwrite && *distinct > 0 && rng.random_range(0..overwrite_one_in) == 0 {
        key(rng.random_range(0..*distinct))
    } else {
        *distinct += 1;
        key(*distinct - 1)
    };
    *number += 1;
    Put { key, number: *number - 1 }
}

/// The key of the `n`-th distinct key of a workload.
pub fn key(n: usize) -> String {
    format!("k-{n:05}")
}

impl Workload {
    /// The workload of `seed` for a backend with `caps`; with `compaction`, some flushes are
    /// followed by a compaction.
    ///
    /// Between 60 and 240 puts in batches of random size (up to a per-trial maximum between 1
    /// and 48), a flush after a batch with probability 0.4, and, when the backend can
    /// overwrite, one put in six replacing an earlier key.
    ///
    /// ```
    /// use stowage_reliability::crash::workload::{Op, Workload};
    /// let caps = stowage_npy::capabilities();
    /// let a = Workload::generate(&caps, 7, false);
    /// assert_eq!(a.ops.first(), Some(&Op::Create));
    /// assert_eq!(a.ops.last(), Some(&Op::Finalize));
    /// assert_eq!(a.ops, Workload::generate(&caps, 7, false).ops);
    /// ```
    pub fn generate(caps: &Capabilities, seed: u64, compaction: bool) -> Workload {
        let mut rng = StdRng::seed_from_u64(seed);
        let total = rng.random_range(60..=240);
        let max_batch = rng.random_range(1..=48);
        let mut ops = vec![Op::Create];
        let (mut number, mut distinct) = (0, 0);
        while number < total {
            let size = rng.random_range(1..=max_batch).min(total - number);
            let batch = (0..size)
                .map(|_| next_put(&mut rng, caps.overwrite, 6, &mut distinct, &mut number))
                .collect();
            ops.push(Op::Put(batch));
            if rng.random_bool(0.4) {
                ops.push(Op::Flush);
                if compaction && rng.random_bool(0.3) {
                    ops.push(Op::Compact);
                }
            }
        }
        ops.push(Op::Finalize);
        Workload { seed, schema: schema_for(caps), ops, kill_from: 0 }
    }

    /// A realistic workload of `seed`: [`REALISTIC_SAMPLES`] puts and up to 4,000 more, of
    /// small samples ([`realistic_schema_for`]), a flush after every batch of about
    /// `flush_every` puts (half to one and a half times), one put in fifty replacing an earlier
    /// key where the backend can overwrite, a compaction after one flush in five hundred with
    /// `compaction`, then finalize. Kills are aimed after the first [`REALISTIC_SAMPLES`] puts
    /// ([`Workload::kill_from`]).
    ///
    /// ```
    /// use stowage_reliability::crash::workload::{REALISTIC_SAMPLES, Workload};
    /// let w = Workload::realistic(&stowage_npy::capabilities(), 1, false, 50);
    /// assert!(w.puts_before(w.kill_from).count() >= REALISTIC_SAMPLES);
    /// assert!(w.ops.len() > 2 * REALISTIC_SAMPLES / 75);
    /// ```
    pub fn realistic(caps: &Capabilities, seed: u64, compaction: bool, flush_every: usize) -> Self {
        let mut rng = StdRng::seed_from_u64(seed);
        let total = REALISTIC_SAMPLES + rng.random_range(0..=4_000);
        let flush_every = flush_every.max(2);
        let mut ops = vec![Op::Create];
        let (mut number, mut distinct, mut kill_from) = (0, 0, None);
        while number < total {
            let size = rng.random_range(flush_every / 2..=flush_every * 3 / 2).min(total - number);
            let batch = (0..size)
                .map(|_| next_put(&mut rng, caps.overwrite, 50, &mut distinct, &mut number))
                .collect();
            ops.push(Op::Put(batch));
            if number >= REALISTIC_SAMPLES && kill_from.is_none() {
                kill_from = Some(ops.len());
            }
            ops.push(Op::Flush);
            if compaction && rng.random_range(0..500) == 0 {
                ops.push(Op::Compact);
            }
        }
        ops.push(Op::Finalize);
        let kill_from = kill_from.unwrap_or(ops.len() - 1);
        Workload { seed, schema: realistic_schema_for(caps), ops, kill_from }
    }

    /// The sample of put number `number`.
    pub fn value(&self, number: usize) -> Sample {
        sample_for(&self.schema, self.seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ number as u64)
    }

    /// Every put of ops `0..end`, in order.
    pub fn puts_before(&self, end: usize) -> impl Iterator<Item = &Put> {
        self.ops[..end.min(self.ops.len())].iter().flat_map(|op| match op {
            Op::Put(batch) => batch.as_slice(),
            _ => &[],
        })
    }

    /// The indexes of the ops for which `wanted` is true.
    pub fn indexes_of(&self, wanted: fn(&Op) -> bool) -> Vec<usize> {
        self.ops.iter().enumerate().filter(|(_, op)| wanted(op)).map(|(i, _)| i).collect()
    }

    /// As [`indexes_of`](Self::indexes_of), from [`Workload::kill_from`] on.
    pub fn kill_candidates(&self, wanted: fn(&Op) -> bool) -> Vec<usize> {
        let mut found = self.indexes_of(wanted);
        found.retain(|&i| i >= self.kill_from);
        found
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overwrites_only_where_the_backend_can() {
        for (caps, can) in
            [(stowage_memmap::capabilities(), false), (stowage_npy::capabilities(), true)]
        {
            let workload = Workload::generate(&caps, 3, false);
            let puts: Vec<&Put> = workload.puts_before(usize::MAX).collect();
            let distinct: std::collections::HashSet<&str> =
                puts.iter().map(|p| p.key.as_str()).collect();
            assert_eq!(distinct.len() < puts.len(), can, "{caps:?}");
            assert!(puts.iter().enumerate().all(|(i, p)| p.number == i));
        }
    }

    #[test]
    fn compaction_follows_a_flush_and_only_when_asked() {
        let caps = stowage_arrow::capabilities();
        let without = Workload::generate(&caps, 11, false);
        assert!(without.indexes_of(|op| *op == Op::Compact).is_empty());
        let with = (0..20).map(|seed| Workload::generate(&caps, seed, true)).collect::<Vec<_>>();
        assert!(with.iter().any(|w| !w.indexes_of(|op| *op == Op::Compact).is_empty()));
        for w in &with {
            for i in w.indexes_of(|op| *op == Op::Compact) {
                assert_eq!(w.ops[i - 1], Op::Flush);
            }
        }
    }
}
