//! `ArrowBackend::validate_log_and_index` plus each segment's own check
//! (`ArrowBackend::segment_reader(id).validate()`) finds what `validate` finds, problems and
//! another writer's unchecked segment alike: the split the stowage command uses to check
//! segments in parallel.

use stowage_arrow::{ArrowBackend, ArrowOptions};
use stowage_core::{
    Backend, DType, OpenMode, Reader, Sample, Schema, ShapeRule, Tensor, ValidationLevel,
};

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
    // Another writer's segment (a copy nothing proves stowage's), one value changed in it.
    let foreign = dir.path().join("segments/segment_000010.arrow");
    let mut bytes = std::fs::read(dir.path().join("segments/segment_000002.arrow")).unwrap();
    let at = bytes.windows(4).position(|w| w == 12f32.to_le_bytes()).unwrap();
    bytes[at + 2] ^= 0x20;
    std::fs::write(&foreign, bytes).unwrap();

    let cache =
        ArrowBackend::open(dir.path(), OpenMode::ReadOnly, ArrowOptions::default()).unwrap();
    let whole = cache.validate(ValidationLevel::Full).unwrap();
    let mut split = cache.validate_log_and_index().unwrap().problems;
    assert!(split.iter().all(|p| p.key.is_none()), "no row is decoded: {split:?}");
    let mut unchecked = Vec::new();
    for (id, _) in cache.reader().segment_paths() {
        let report = cache.segment_reader(id).unwrap().validate().unwrap();
        split.extend(report.problems);
        unchecked.extend(report.unchecked);
    }
    assert_eq!(unchecked, whole.unchecked);
    assert_eq!(cache.unchecked(), whole.unchecked, "the list without validating");
    assert_eq!(whole.unchecked.len(), 1, "{:?}", whole.unchecked);
    assert_eq!(whole.unchecked[0].path, foreign);
    let sorted = |mut problems: Vec<stowage_core::Problem>| {
        problems.sort_by(|a, b| format!("{a}").cmp(&format!("{b}")));
        problems
    };
    // k7's flipped value (no checksum catches it in the foreign copy: a value can change
    // unchecked there, which is why it is listed as unchecked) and schema.json.
    assert_eq!(whole.problems.len(), 2, "{:?}", whole.problems);
    assert_eq!(sorted(split), sorted(whole.problems));
}
