//! A cache created under a relative path, as in the README's example (its own test binary because
//! it changes the process's working directory).

use stowage_core::{Backend, DType, Reader, Sample, Schema, ShapeRule, Tensor};
use stowage_npy::{NpyBackend, NpyOptions};

#[test]
fn create_flush_finalize_and_read_under_a_relative_path() {
    let dir = tempfile::tempdir().unwrap();
    std::env::set_current_dir(dir.path()).unwrap();
    let schema = Schema::new().tensor("x", DType::F32, ShapeRule::Fixed(vec![512]));
    let mut cache = NpyBackend::create("cache_dir", &schema, NpyOptions::default()).unwrap();
    let sample = Sample::new().with("x", Tensor::from_slice(&[512], &[0.5f32; 512]).unwrap());
    cache.put("sample-0", &sample).unwrap();
    cache.flush().unwrap();
    cache.finalize().unwrap();
    drop(cache);
    let reader = NpyBackend::open_read_only("cache_dir", NpyOptions::default()).unwrap();
    assert_eq!(reader.get("sample-0").unwrap(), Some(sample));
}
