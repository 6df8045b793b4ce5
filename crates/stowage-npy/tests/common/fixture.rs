//! The known-answer NUMPY_10 fixture: its schema and samples, defined by formula so that the
//! generator (`examples/numpy10_fixture.rs`) and the test that reads the committed copy
//! (`tests/fixture_known_answers.rs`) agree without storing expected values twice.

use stowage_core::half::{bf16, f16};
use stowage_core::{DType, Sample, Schema, ShapeRule, Tensor};

/// Slots per collection file in the fixture: small, so the fixture rotates files.
pub const COLLECTION_SIZE: usize = 4;

/// Number of samples.
pub const SAMPLES: usize = 10;

/// The fixture's schema: fixed and variable shapes, a 0-d field, bool, float16 and bfloat16.
pub fn schema() -> Schema {
    Schema::new()
        .tensor("image", DType::U8, ShapeRule::Fixed(vec![2, 3]))
        .tensor("signal", DType::F32, ShapeRule::Max(vec![8]))
        .tensor("label", DType::I64, ShapeRule::Fixed(vec![]))
        .tensor("mask", DType::Bool, ShapeRule::Fixed(vec![4]))
        .tensor("half", DType::F16, ShapeRule::Fixed(vec![2]))
        .tensor("brain", DType::BF16, ShapeRule::Fixed(vec![2]))
}

/// The key of sample `i`.
pub fn key(i: usize) -> String {
    format!("fixture-{i:02}")
}

/// Sample `i`, by formula.
pub fn sample(i: usize) -> Sample {
    let len = i % 9; // 0..=8 values: includes a zero-length signal and a full one
    let signal: Vec<f32> = (0..len).map(|j| (i as f32) + (j as f32) / 8.0).collect();
    let image: Vec<u8> = (0..6).map(|j| (i * 6 + j) as u8).collect();
    Sample::new()
        .with("image", Tensor::from_slice(&[2, 3], &image).expect("6 values"))
        .with("signal", Tensor::from_slice(&[len], &signal).expect("len values"))
        .with("label", Tensor::scalar(i as i64 - 5))
        .with(
            "mask",
            Tensor::from_bools(&[4], &[i.is_multiple_of(2), i.is_multiple_of(3), true, false])
                .expect("4"),
        )
        .with(
            "half",
            Tensor::from_slice(&[2], &[f16::from_f32(i as f32 * 0.25), f16::NEG_ZERO]).expect("2"),
        )
        .with(
            "brain",
            Tensor::from_slice(&[2], &[bf16::from_f32(i as f32 * -1.5), bf16::MAX]).expect("2"),
        )
}
