//! The small two-field schema of the key index tests: a fixed `u32[2]` and a variable `u8[<=3]`
//! whose length follows the value, so that a sample read from the wrong record shows.

use stowage_core::{DType, Sample, Schema, ShapeRule, Tensor};

pub fn schema() -> Schema {
    Schema::new().tensor("x", DType::U32, ShapeRule::Fixed(vec![2])).tensor(
        "y",
        DType::U8,
        ShapeRule::Max(vec![3]),
    )
}

pub fn sample(value: u32) -> Sample {
    let y = vec![value as u8; (value % 4) as usize];
    Sample::new()
        .with("x", Tensor::from_slice(&[2], &[value, value + 1]).unwrap())
        .with("y", Tensor::from_slice(&[y.len()], &y).unwrap())
}
