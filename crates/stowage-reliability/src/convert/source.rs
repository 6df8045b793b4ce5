//! The source every conversion reads: a finalized NUMPY_10 cache of fixed-shape samples (which
//! every target backend holds as they are), each value depending on its key.

use std::path::{Path, PathBuf};
use stowage_core::{Backend, DType, Sample, Schema, ShapeRule, Tensor};

/// Sample `i` of the source.
pub fn sample(i: usize) -> Sample {
    let x: Vec<f32> = (0..32).map(|j| (i * 32 + j) as f32 * 0.25).collect();
    Sample::new()
        .with("x", Tensor::from_slice(&[32], &x).expect("32 values"))
        .with("label", Tensor::scalar(i as i64 * 7 - 3))
}

/// The key of sample `i`.
pub fn key(i: usize) -> String {
    format!("sample-{i:07}")
}

/// Writes the source of `samples` samples at `path` (replacing what an earlier run left).
pub fn build(path: &Path, samples: usize) -> Result<PathBuf, String> {
    let _ = std::fs::remove_dir_all(path);
    let schema = Schema::new().tensor("x", DType::F32, ShapeRule::Fixed(vec![32])).tensor(
        "label",
        DType::I64,
        ShapeRule::Fixed(vec![]),
    );
    let fail = |e: stowage_core::Error| format!("building the source {}: {e}", path.display());
    let mut cache =
        stowage_npy::NpyBackend::create(path, &schema, Default::default()).map_err(fail)?;
    for i in 0..samples {
        cache.put(&key(i), &sample(i)).map_err(fail)?;
    }
    cache.finalize().map_err(fail)?;
    Ok(path.to_path_buf())
}
