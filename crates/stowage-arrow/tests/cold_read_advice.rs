//! Telling the kernel which pages a batch will read (`ArrowOptions::cold_read_advice`) is only
//! ever a hint: `get_batch` returns the same samples with the advice always given, given when a
//! sampled page is missing, and never given, with every segment open or only a few.

use stowage_arrow::{ArrowBackend, ArrowOptions};
use stowage_core::cold_reads::ColdReadAdvice;
use stowage_core::{Backend, DType, OpenMode, Reader, Sample, Schema, ShapeRule, Tensor};

fn sample(i: usize) -> Sample {
    let values: Vec<f32> = (0..64).map(|j| (i * 64 + j) as f32).collect();
    Sample::new().with("x", Tensor::from_slice(&[64], &values).unwrap())
}

#[test]
fn get_batch_returns_the_same_samples_whatever_the_advice() {
    let dir = tempfile::tempdir().unwrap();
    let schema = Schema::new().tensor("x", DType::F32, ShapeRule::Fixed(vec![64]));
    let options = ArrowOptions { flush_every: 100, merge_after: 4, ..ArrowOptions::default() };
    let mut cache = ArrowBackend::create(dir.path(), &schema, options.clone()).unwrap();
    for i in 0..2_000 {
        cache.put(&format!("k{i}"), &sample(i)).unwrap();
    }
    // Overwrites in a later segment, and rows left to the sidecars of the newest segments.
    for i in (0..2_000).step_by(7) {
        cache.put(&format!("k{i}"), &sample(i + 5_000)).unwrap();
    }
    cache.flush().unwrap();
    drop(cache);
    let keys: Vec<String> = (0..1_100).map(|i| format!("k{}", (i * 7_919) % 2_100)).collect();
    let keys: Vec<&str> = keys.iter().map(String::as_str).collect();
    let expected = |key: &str| -> Option<Sample> {
        let i: usize = key[1..].parse().unwrap();
        (i < 2_000).then(|| sample(if i.is_multiple_of(7) { i + 5_000 } else { i }))
    };
    for advice in [ColdReadAdvice::Always, ColdReadAdvice::Adaptive, ColdReadAdvice::Never] {
        for max_open_segments in [2, 1_000] {
            let options =
                ArrowOptions { cold_read_advice: advice, max_open_segments, ..options.clone() };
            let reader = ArrowBackend::open(dir.path(), OpenMode::ReadOnly, options).unwrap();
            // Twice: the first batch opens the segments, the second is advised with them open.
            for _ in 0..2 {
                let batch = reader.get_batch(&keys).unwrap();
                for (key, got) in keys.iter().zip(batch) {
                    assert_eq!(got, expected(key), "{key} with {advice:?}, {max_open_segments}");
                }
            }
            for key in keys.iter().take(50) {
                assert_eq!(reader.get(key).unwrap(), expected(key), "{key}");
            }
        }
    }
}
