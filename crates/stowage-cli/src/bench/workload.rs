//! The generated workloads `stowage bench` writes into every backend: the same keys and samples,
//! computed from their index, so that every backend and the references see the same bytes.

use stowage_core::{DType, Sample, Schema, ShapeRule, Tensor, Value};

/// What a workload's samples look like.
#[derive(Debug, Clone, PartialEq)]
pub enum Shape {
    /// One tensor field `x` of `dtype` and a fixed `shape` (the default: `float32[512]`).
    Flat {
        /// The element type.
        dtype: DType,
        /// The fixed shape.
        shape: Vec<usize>,
    },
    /// DNANet's row: data int16 (6, 4096), annotation int8 (6, 4096) (null on every fifth row),
    /// scaler float32 (4096), and its three JSON fields.
    Dnanet,
    /// aenet's ragged entries: features float64 (n_atoms, 64) and forces float32 (n_atoms, 3)
    /// with n_atoms from 20 to 200.
    Aenet,
}

/// A generated workload: its name in the report, its schema and how many samples.
#[derive(Debug, Clone)]
pub struct Workload {
    /// The name in the report (`f32x512`, `dnanet`, `aenet`).
    pub name: String,
    /// What the samples look like.
    pub shape: Shape,
    /// How many samples.
    pub rows: usize,
}

/// DNANet's dye rows and scan points.
const D: usize = 6;
const L: usize = 4096;
/// aenet's features per atom.
const F: usize = 64;

impl Workload {
    /// A flat workload of `rows` samples of `dtype[shape]`, named like `f32x512`.
    pub fn flat(rows: usize, dtype: DType, shape: Vec<usize>) -> Workload {
        let dims: Vec<String> = shape.iter().map(usize::to_string).collect();
        let short = dtype.name().replace("float", "f").replace("uint", "u").replace("int", "i");
        let name = format!("{short}x{}", dims.join("x"));
        Workload { name, shape: Shape::Flat { dtype, shape }, rows }
    }

    /// The DNANet-shaped workload of `rows` rows.
    pub fn dnanet(rows: usize) -> Workload {
        Workload { name: "dnanet".into(), shape: Shape::Dnanet, rows }
    }

    /// The aenet-shaped (ragged) workload of `rows` entries.
    pub fn aenet(rows: usize) -> Workload {
        Workload { name: "aenet".into(), shape: Shape::Aenet, rows }
    }

    /// The schema every backend is asked to hold.
    pub fn schema(&self) -> Schema {
        match &self.shape {
            Shape::Flat { dtype, shape } => {
                Schema::new().tensor("x", *dtype, ShapeRule::Fixed(shape.clone()))
            }
            Shape::Dnanet => stowage_memmap::dnanet(D, L),
            Shape::Aenet => Schema::new()
                .tensor("features", DType::F64, ShapeRule::RaggedLeading(vec![F]))
                .tensor("forces", DType::F32, ShapeRule::RaggedLeading(vec![3])),
        }
    }

    /// The key of sample `i`.
    pub fn key(&self, i: usize) -> String {
        format!("{}/{i:08}", self.name)
    }

    /// Sample `i`: the same bytes on every call.
    pub fn sample(&self, i: usize) -> Sample {
        match &self.shape {
            Shape::Flat { dtype, shape } => {
                let len: usize = shape.iter().product::<usize>() * dtype.item_size();
                let bytes = pattern(i, len);
                let bytes = if *dtype == DType::Bool { bools(bytes) } else { bytes };
                let tensor = Tensor::new(*dtype, shape.clone(), bytes).expect("sized to the shape");
                Sample::new().with("x", tensor)
            }
            Shape::Dnanet => {
                let data: Vec<i16> = (0..D * L).map(|j| ((i * 31 + j) % 30_000) as i16).collect();
                let annotation: Vec<i8> = (0..D * L).map(|j| ((i + j) % 5) as i8).collect();
                let scaler: Vec<f32> = (0..L).map(|j| i as f32 + j as f32 / 4096.0).collect();
                let annotation = match i % 5 {
                    4 => Value::Null,
                    _ => Value::Tensor(Tensor::from_slice(&[D, L], &annotation).expect("shape")),
                };
                Sample::new()
                    .with("data", Tensor::from_slice(&[D, L], &data).expect("shape"))
                    .with("annotation", annotation)
                    .with("scaler", Tensor::from_slice(&[L], &scaler).expect("shape"))
                    .with("panel", Value::Json(format!("{{\"panel\": {}}}", i % 4)))
                    .with("allele", Value::Json(format!("[{}]", i % 7)))
                    .with("meta_json", Value::Json("{}".into()))
            }
            Shape::Aenet => {
                let atoms = 20 + (i * 7919) % 181;
                let features: Vec<f64> =
                    (0..atoms * F).map(|j| (i * 1000 + j) as f64 * 1e-3).collect();
                let forces: Vec<f32> = (0..atoms * 3).map(|j| (i + j) as f32 * 0.5).collect();
                Sample::new()
                    .with("features", Tensor::from_slice(&[atoms, F], &features).expect("shape"))
                    .with("forces", Tensor::from_slice(&[atoms, 3], &forces).expect("shape"))
            }
        }
    }

    /// The bytes of sample `i`'s tensors, in field order: what the physical references move.
    pub fn tensor_bytes(&self, i: usize) -> Vec<u8> {
        let sample = self.sample(i);
        let mut bytes = Vec::new();
        for (_, value) in sample.fields() {
            if let Value::Tensor(tensor) = value {
                bytes.extend_from_slice(tensor.bytes());
            }
        }
        bytes
    }
}

/// `len` bytes that differ from sample to sample and position to position: splitmix64 of the
/// sample and the 8-byte word's position (cheap, and every bit mixed).
fn pattern(i: usize, len: usize) -> Vec<u8> {
    let word = |k: u64| {
        let mut z = ((i as u64) << 32 | k).wrapping_add(0x9E37_79B9_7F4A_7C15);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    };
    let mut bytes: Vec<u8> =
        (0..len.div_ceil(8) as u64).flat_map(|k| word(k).to_le_bytes()).collect();
    bytes.truncate(len);
    bytes
}

/// `bytes` as valid bools (0 or 1).
fn bools(bytes: Vec<u8>) -> Vec<u8> {
    bytes.into_iter().map(|b| b & 1).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples_fit_their_schema_and_repeat_exactly() {
        for workload in [
            Workload::flat(3, DType::F32, vec![512]),
            Workload::flat(3, DType::Bool, vec![2, 3]),
            Workload::dnanet(3),
            Workload::aenet(3),
        ] {
            let schema = workload.schema();
            for i in 0..3 {
                schema.validate(&workload.sample(i)).unwrap();
                assert_eq!(workload.sample(i), workload.sample(i));
            }
            assert_ne!(workload.sample(0), workload.sample(1), "{}", workload.name);
        }
        assert_eq!(Workload::flat(1, DType::F32, vec![512]).name, "f32x512");
        assert_eq!(Workload::flat(1, DType::U16, vec![8, 8]).name, "u16x8x8");
        assert_eq!(Workload::aenet(1).key(7), "aenet/00000007");
    }
}
