//! Deterministic schemas and samples derived from a backend's capabilities.

use crate::Failure;
use rand::{Rng, SeedableRng, rngs::StdRng};
use stowage_core::{Capabilities, DType, FieldKind, Sample, Schema, ShapeRule, Tensor, Value};

/// The key of the `i`-th generated sample.
pub fn key(i: usize) -> String {
    format!("sample-{i:06}")
}

/// The dtype the basic schema uses: float32 when the backend has it, else its first dtype.
pub fn basic_dtype(caps: &Capabilities) -> DType {
    if caps.dtypes.contains(&DType::F32) { DType::F32 } else { caps.dtypes[0] }
}

/// A one-field schema every backend must support: a fixed-shape tensor `x` of shape (4, 3).
pub fn basic_schema(caps: &Capabilities) -> Schema {
    Schema::new().tensor("x", basic_dtype(caps), ShapeRule::Fixed(vec![4, 3]))
}

/// A deterministic sample for `schema`: the same `seed` always gives the same bytes.
///
/// Float fields get random bit patterns (NaN payloads and `-0.0` included), bool fields 0/1,
/// variable shapes random dimensions within the rule (zero-length included), nullable fields null
/// one time in four.
pub fn sample_for(schema: &Schema, seed: u64) -> Sample {
    let mut rng = StdRng::seed_from_u64(seed ^ 0x5157_4147_4553_0001);
    let mut sample = Sample::new();
    for field in &schema.fields {
        if field.nullable && rng.random_range(0..4) == 0 {
            sample.insert(field.name.clone(), Value::Null);
            continue;
        }
        let value = match &field.kind {
            FieldKind::Tensor { dtype, shape } => {
                let dims = shape_for(&mut rng, shape);
                Value::Tensor(random_tensor(&mut rng, *dtype, &dims))
            }
            FieldKind::Bytes => {
                let len = rng.random_range(0..64);
                Value::Bytes((0..len).map(|_| rng.random::<u8>()).collect::<Vec<u8>>().into())
            }
            FieldKind::Json { .. } => {
                // Few distinct values so that deduplicating backends actually deduplicate.
                Value::Json(format!(
                    "{{\"group\": {}, \"name\": \"g\\u00eb\"}}",
                    rng.random_range(0..3)
                ))
            }
        };
        sample.insert(field.name.clone(), value);
    }
    sample
}

fn shape_for(rng: &mut StdRng, rule: &ShapeRule) -> Vec<usize> {
    match rule {
        ShapeRule::Fixed(dims) => dims.clone(),
        ShapeRule::Max(max) => max.iter().map(|&m| rng.random_range(0..=m)).collect(),
        ShapeRule::RaggedLeading(trailing) => {
            std::iter::once(rng.random_range(0..6)).chain(trailing.iter().copied()).collect()
        }
        ShapeRule::Any => (0..rng.random_range(0..4)).map(|_| rng.random_range(0..4)).collect(),
    }
}

/// A tensor of `shape` with random contents valid for `dtype`.
pub fn random_tensor(rng: &mut StdRng, dtype: DType, shape: &[usize]) -> Tensor {
    let len = stowage_core::shape::byte_count(shape, dtype.item_size()).expect("small test shape");
    let mut bytes = vec![0u8; len];
    rng.fill(&mut bytes[..]);
    if dtype == DType::Bool {
        bytes.iter_mut().for_each(|b| *b &= 1);
    }
    Tensor::new(dtype, shape.to_vec(), bytes).expect("length matches shape")
}

/// Compares what `get` returned with what was put; the error names the key and the first difference.
pub fn compare(key: &str, want: &Sample, got: Option<&Sample>) -> Result<(), String> {
    Ok(compare_sample(key, want, got)?)
}

/// [`compare`], with the difference as a [`Failure`]: the key and field as its context, the
/// value put as expected and the value read as got.
pub fn compare_sample(key: &str, want: &Sample, got: Option<&Sample>) -> Result<(), Failure> {
    let Some(got) = got else {
        return Err(Failure::new(format!("get {key:?}"), "the sample that was put", "None"));
    };
    for (name, want_value) in want.fields() {
        let got_value = got.get(name).unwrap_or(&Value::Null);
        if !values_equal(want_value, got_value) {
            return Err(Failure::new(
                format!("get {key:?} field {name:?}"),
                describe(want_value),
                describe(got_value),
            ));
        }
    }
    for (name, value) in got.fields() {
        if want.get(name).is_none() && *value != Value::Null {
            return Err(Failure::new(
                format!("get {key:?}"),
                "only the fields that were put",
                format!("an extra field {name:?}"),
            ));
        }
    }
    Ok(())
}

fn values_equal(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Tensor(x), Value::Tensor(y)) => {
            x.dtype() == y.dtype() && x.shape() == y.shape() && x.bytes() == y.bytes()
        }
        // JSON is compared as text: backends must return the exact text that was put.
        _ => a == b,
    }
}

fn describe(v: &Value) -> String {
    match v {
        Value::Tensor(t) => {
            let head: Vec<String> = t.bytes().iter().take(8).map(|b| format!("{b:02x}")).collect();
            format!(
                "{} {} tensor (first bytes {})",
                t.dtype(),
                stowage_core::shape::display(t.shape()),
                head.join("")
            )
        }
        Value::Bytes(b) => format!("{} opaque bytes", b.len()),
        Value::Json(s) => format!("JSON {s:?}"),
        Value::Null => "null".into(),
    }
}

/// A shuffled epoch over `rows` row numbers (the whole range repeated until there are at least
/// `at_least`), fixed by `seed`: the order a training loader reads a cache in. Benchmarks walk it
/// in slices so that successive iterations touch different rows, as real reads do.
///
/// ```
/// let order = stowage_conformance::generate::epoch_order(10, 25, 1);
/// assert_eq!(order.len(), 30);
/// let mut sorted = order.clone();
/// sorted.sort();
/// assert_eq!(sorted, (0..10).flat_map(|i| [i, i, i]).collect::<Vec<_>>());
/// assert_eq!(order, stowage_conformance::generate::epoch_order(10, 25, 1));
/// ```
pub fn epoch_order(rows: usize, at_least: usize, seed: u64) -> Vec<usize> {
    use rand::seq::SliceRandom;
    let mut order: Vec<usize> = (0..rows).collect();
    while rows > 0 && order.len() < at_least {
        order.extend(0..rows);
    }
    order.shuffle(&mut StdRng::seed_from_u64(seed));
    order
}
