//! A finalize that stops between its journal record and `journal.complete` (a crash, or a marker
//! that cannot be written): the handle refuses further writes (`Error::Poisoned`), and the next
//! writer finishes the finalize so that `validate` is clean again. (Found by the resource-fault campaign of
//! stowage-reliability: after an injected EIO on the marker, the same handle took a put and a
//! flush that landed after the finalize record, and no writer ever wrote the marker.)

use stowage_core::{
    Backend, DType, Error, OpenMode, Reader, Sample, Schema, ShapeRule, Tensor, ValidationLevel,
};
use stowage_example::JournalBackend;

fn sample() -> Sample {
    Sample::new().with("x", Tensor::from_slice(&[2], &[1f32, 2.0]).unwrap())
}

fn schema() -> Schema {
    Schema::new().tensor("x", DType::F32, ShapeRule::Fixed(vec![2]))
}

#[test]
fn a_failed_marker_write_refuses_later_writes() {
    let dir = tempfile::tempdir().unwrap();
    let mut cache = JournalBackend::create(dir.path(), &schema()).unwrap();
    cache.put("a", &sample()).unwrap();
    // A directory in the marker's place makes its rename fail.
    std::fs::create_dir(dir.path().join("journal.complete")).unwrap();
    std::fs::write(dir.path().join("journal.complete/keep"), b"").unwrap();
    assert!(cache.finalize().is_err());
    let poisoned = |result: stowage_core::Result<()>| matches!(result, Err(Error::Poisoned { .. }));
    assert!(poisoned(cache.put("b", &sample())), "put after a failed finalize");
    assert!(poisoned(cache.flush()), "flush after a failed finalize");
    assert!(poisoned(cache.finalize()), "finalize after a failed finalize");
}

#[test]
fn the_next_writer_finishes_an_interrupted_finalize() {
    let dir = tempfile::tempdir().unwrap();
    let mut cache = JournalBackend::create(dir.path(), &schema()).unwrap();
    cache.put("a", &sample()).unwrap();
    cache.finalize().unwrap();
    drop(cache);
    std::fs::remove_file(dir.path().join("journal.complete")).unwrap();
    let reader = JournalBackend::open(dir.path(), OpenMode::ReadOnly).unwrap();
    assert!(!reader.validate(ValidationLevel::Full).unwrap().is_clean());
    drop(JournalBackend::open(dir.path(), OpenMode::Append).unwrap());
    let reader = JournalBackend::open(dir.path(), OpenMode::ReadOnly).unwrap();
    let report = reader.validate(ValidationLevel::Full).unwrap();
    assert!(report.is_clean(), "{:?}", report.problems);
    assert!(reader.is_finalized());
    assert_eq!(reader.get("a").unwrap(), Some(sample()));
}
