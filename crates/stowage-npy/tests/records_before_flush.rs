//! Before a flush, a sample put through the handle already reads back, verified, and its record
//! string is the one the log will hold; an overwrite before the flush wins with its own checksum;
//! a file just filled reads back before its writes are known to be done.

use stowage_core::{Backend, DType, Reader, Sample, Schema, ShapeRule, Tensor, ValidationLevel};
use stowage_npy::{NpyBackend, NpyOptions};

#[test]
fn records_and_reads_agree_before_and_after_flush() {
    let dir = tempfile::tempdir().unwrap();
    let schema = Schema::new().tensor("a", DType::U16, ShapeRule::Fixed(vec![3])).tensor(
        "b",
        DType::F64,
        ShapeRule::Max(vec![4]),
    );
    let mut cache = NpyBackend::create(dir.path(), &schema, NpyOptions::default()).unwrap();
    let sample = |i: u16| {
        Sample::new().with("a", Tensor::from_slice(&[3], &[i, i + 1, i + 2]).unwrap()).with(
            "b",
            Tensor::from_slice(&[usize::from(i % 4)], &vec![f64::from(i); usize::from(i % 4)])
                .unwrap(),
        )
    };
    for i in 0..20u16 {
        cache.put(&format!("k{i}"), &sample(i)).unwrap();
    }
    // Overwrite before the flush: the second value must win, with its own checksum.
    cache.put("k3", &sample(300)).unwrap();
    let before: Vec<String> =
        ["a", "b"].iter().map(|f| cache.record("k3", f).unwrap().to_string()).collect();
    assert_eq!(cache.get("k3").unwrap(), Some(sample(300)));
    cache.flush().unwrap();
    let after: Vec<String> =
        ["a", "b"].iter().map(|f| cache.record("k3", f).unwrap().to_string()).collect();
    assert_eq!(before, after);
    for field in ["a", "b"] {
        let record = cache.record("k3", field).unwrap();
        let want = sample(300);
        assert_eq!(&cache.read_record(field, &record, true).unwrap(), want.tensor(field).unwrap());
    }
    cache.finalize().unwrap();
    drop(cache);
    let reader = NpyBackend::open_read_only(dir.path(), NpyOptions::default()).unwrap();
    for i in 0..20u16 {
        let want = if i == 3 { sample(300) } else { sample(i) };
        assert_eq!(reader.get(&format!("k{i}")).unwrap(), Some(want), "k{i}");
    }
    assert!(reader.validate(ValidationLevel::Full).unwrap().is_clean());
}

/// Rotation to a new collection file does not wait for the filled file's writes; a read of one of
/// its slots before the flush must wait for them instead of seeing the file's zero fill.
#[test]
fn reads_of_a_just_filled_file_see_its_samples_before_the_flush() {
    let dir = tempfile::tempdir().unwrap();
    // 256 KiB rows, 2 per file: every second put rotates and leaves a batch still being written.
    let dims = vec![256, 256];
    let schema = Schema::new().tensor("x", DType::F32, ShapeRule::Fixed(dims.clone()));
    let options = NpyOptions { collection_size: 2, ..NpyOptions::default() };
    let mut cache = NpyBackend::create(dir.path(), &schema, options).unwrap();
    let sample = |i: usize| {
        let values: Vec<f32> = (0..256 * 256).map(|j| (i * 7 + j) as f32 + 1.0).collect();
        Sample::new().with("x", Tensor::from_slice(&dims, &values).unwrap())
    };
    for i in 0..24 {
        cache.put(&format!("k{i}"), &sample(i)).unwrap();
        if i % 2 == 0 && i > 0 {
            // k{i} opened a new file; k{i-1} and k{i-2} are in the file just filled.
            assert_eq!(
                cache.get(&format!("k{}", i - 2)).unwrap(),
                Some(sample(i - 2)),
                "k{}",
                i - 2
            );
        }
    }
    for i in 0..24 {
        assert_eq!(cache.get(&format!("k{i}")).unwrap(), Some(sample(i)), "k{i}");
    }
}
