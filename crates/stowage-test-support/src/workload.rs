//! The benchmarks' shared workload: float32 samples of 512 values in torchcachex's `tensor`
//! structure, each unique to its index, under keys the Python peers derive the same way.

use stowage_core::{DType, Sample, Schema, ShapeRule, Tensor};

/// Values per sample.
pub const WIDTH: usize = 512;

/// The workload's schema: one float32 field of [`WIDTH`] values named `tensor`.
pub fn schema() -> Schema {
    Schema::new().tensor("tensor", DType::F32, ShapeRule::Fixed(vec![WIDTH]))
}

/// Sample `i` (values unique to it, so that a wrong row never passes for it).
///
/// ```
/// let sample = stowage_test_support::workload::sample(3);
/// assert!(stowage_test_support::workload::schema().validate(&sample).is_ok());
/// ```
pub fn sample(i: usize) -> Sample {
    let values: Vec<f32> = (0..WIDTH).map(|j| (i * WIDTH + j) as f32 * 0.5).collect();
    Sample::new().with("tensor", Tensor::from_slice(&[WIDTH], &values).expect("shape fits"))
}

/// The key of sample `i`: `sample0000003`.
pub fn key(i: usize) -> String {
    format!("sample{i:07}")
}
