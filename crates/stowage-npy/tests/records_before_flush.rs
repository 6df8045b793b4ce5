//! Before a flush, a sample put through the handle already reads back, verified, and its record
//! string is the one the log will hold; an overwrite before the flush wins with its own checksum.

use stowage_core::{Backend, DType, Sample, Schema, ShapeRule, Tensor, ValidationLevel};
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
