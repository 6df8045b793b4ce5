//! A finalize that fails after its `finalized` record (here: `stowage.complete` cannot be
//! written) leaves a handle that refuses further writes, like a failed flush. (Found by the
//! resource-fault campaign of stowage-reliability: after an injected EIO on the marker, or on the
//! key index run finalize merges, the same handle took a put and a flush as if nothing had
//! happened.)

use stowage_arrow::{ArrowBackend, ArrowOptions};
use stowage_core::{
    Backend, DType, Error, OpenMode, Reader, Sample, Schema, ShapeRule, Tensor, ValidationLevel,
};

#[test]
fn a_failed_finalize_refuses_later_writes_and_the_next_writer_goes_on() {
    let dir = tempfile::tempdir().unwrap();
    let schema = Schema::new().tensor("x", DType::F32, ShapeRule::Fixed(vec![2]));
    let sample = Sample::new().with("x", Tensor::from_slice(&[2], &[1f32, 2.0]).unwrap());
    let mut cache = ArrowBackend::create(dir.path(), &schema, ArrowOptions::default()).unwrap();
    cache.put("a", &sample).unwrap();
    // A directory in the marker's place makes its rename fail.
    let marker = dir.path().join("stowage.complete");
    std::fs::create_dir(&marker).unwrap();
    std::fs::write(marker.join("keep"), b"").unwrap();
    assert!(cache.finalize().is_err());
    let poisoned = |result: stowage_core::Result<()>| matches!(result, Err(Error::Poisoned { .. }));
    assert!(poisoned(cache.put("b", &sample)), "put after a failed finalize");
    assert!(poisoned(cache.flush()), "flush after a failed finalize");
    assert!(poisoned(cache.finalize()), "finalize after a failed finalize");
    drop(cache);
    std::fs::remove_dir_all(&marker).unwrap();
    drop(ArrowBackend::open(dir.path(), OpenMode::Append, ArrowOptions::default()).unwrap());
    let reader =
        ArrowBackend::open(dir.path(), OpenMode::ReadOnly, ArrowOptions::default()).unwrap();
    assert_eq!(reader.get("a").unwrap(), Some(sample));
    assert_eq!(reader.get("b").unwrap(), None);
    let report = reader.validate(ValidationLevel::Full).unwrap();
    assert!(report.is_clean(), "{:?}", report.problems);
}
