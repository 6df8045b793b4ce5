//! `ArrowBackend::validate_log_and_index` plus each segment's own `CacheReader::validate` finds
//! what `validate` finds: the split the stowage command uses to check segments in parallel.

use stowage_arrow::reader::CacheReader;
use stowage_arrow::{ArrowBackend, ArrowOptions};
use stowage_core::{Backend, DType, OpenMode, Sample, Schema, ShapeRule, Tensor, ValidationLevel};

#[test]
fn the_split_validation_finds_what_validate_finds() {
    let dir = tempfile::tempdir().unwrap();
    let schema = Schema::new().tensor("x", DType::F32, ShapeRule::Fixed(vec![4]));
    let options = ArrowOptions { flush_every: 5, ..ArrowOptions::default() };
    let mut cache = ArrowBackend::create(dir.path(), &schema, options).unwrap();
    for i in 0..20 {
        let x = Tensor::from_slice(&[4], &[i as f32, 7.5, -1.0, 3.25]).unwrap();
        cache.put(&format!("k{i}"), &Sample::new().with("x", x)).unwrap();
    }
    cache.finalize().unwrap();
    drop(cache);
    // Damage inside one segment (a value of k7) and one cross-segment file (schema.json).
    let segment = dir.path().join("segments/segment_000001.arrow");
    let mut bytes = std::fs::read(&segment).unwrap();
    let at = bytes.windows(4).position(|w| w == 7f32.to_le_bytes()).unwrap();
    bytes[at + 2] ^= 0x20;
    std::fs::write(&segment, bytes).unwrap();
    std::fs::write(dir.path().join("schema.json"), b"{}").unwrap();

    let cache =
        ArrowBackend::open(dir.path(), OpenMode::ReadOnly, ArrowOptions::default()).unwrap();
    let whole = cache.validate(ValidationLevel::Full).unwrap();
    let mut split = cache.validate_log_and_index().unwrap().problems;
    assert!(split.iter().all(|p| p.key.is_none()), "no row is decoded: {split:?}");
    let output = cache.output_structure();
    for (id, _) in cache.reader().segment_paths() {
        let reader = CacheReader::open_segments(dir.path(), [id], output, &[])
            .unwrap()
            .requiring_checksums();
        split.extend(reader.validate().unwrap().problems);
    }
    let sorted = |mut problems: Vec<stowage_core::Problem>| {
        problems.sort_by(|a, b| format!("{a}").cmp(&format!("{b}")));
        problems
    };
    assert_eq!(whole.problems.len(), 2, "{:?}", whole.problems);
    assert_eq!(sorted(split), sorted(whole.problems));
}
