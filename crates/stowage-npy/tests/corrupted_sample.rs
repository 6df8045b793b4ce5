//! A sample whose bytes changed on disk is `Error::Corrupted` naming the file, the key and the
//! field, never returned as data; `validate` lists it with the same key.

use stowage_core::{
    Backend, DType, Error, Reader, Sample, Schema, ShapeRule, Tensor, ValidationLevel,
};
use stowage_npy::{NpyBackend, NpyOptions};

#[test]
fn get_and_validate_name_the_key_of_corrupted_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let schema = Schema::new().tensor("x", DType::U8, ShapeRule::Fixed(vec![4])).tensor(
        "y",
        DType::U8,
        ShapeRule::Fixed(vec![4]),
    );
    let mut cache = NpyBackend::create(dir.path(), &schema, NpyOptions::default()).unwrap();
    let sample = |v: u8| {
        Sample::new()
            .with("x", Tensor::from_slice(&[4], &[v; 4]).unwrap())
            .with("y", Tensor::from_slice(&[4], &[v + 100; 4]).unwrap())
    };
    cache.put("good", &sample(1)).unwrap();
    cache.put("bad", &sample(2)).unwrap();
    cache.finalize().unwrap();
    let record = cache.record("bad", "y").unwrap();
    drop(cache);

    // Slot 1 of y's file starts after the header and the 4-byte slot 0 of "good".
    let file = dir.path().join("data/10").join(format!("{}.npy", record.uid));
    let mut bytes = std::fs::read(&file).unwrap();
    let header_len = stowage_core::npy_header::parse(&bytes).unwrap().data_offset;
    bytes[header_len + 4 + 2] ^= 0x01;
    std::fs::write(&file, &bytes).unwrap();

    let reader = NpyBackend::open_read_only(dir.path(), NpyOptions::default()).unwrap();
    assert_eq!(reader.get("good").unwrap(), Some(sample(1)));
    let err = reader.get("bad").unwrap_err();
    match &err {
        Error::Corrupted { path, key, detail } => {
            assert_eq!(path, &file);
            assert_eq!(key.as_deref(), Some("bad"));
            assert!(detail.starts_with("field \"y\": "), "{detail}");
            assert!(detail.contains(&format!("!= recorded {:016x}", record.checksum)), "{detail}");
        }
        other => panic!("expected Corrupted, got {other}"),
    }
    assert!(err.to_string().contains("key \"bad\""), "{err}");

    let report = reader.validate(ValidationLevel::Full).unwrap();
    assert_eq!(report.problems.len(), 1, "{:?}", report.problems);
    assert_eq!(report.problems[0].key.as_deref(), Some("bad"));
    assert_eq!(report.problems[0].path.as_deref(), Some(file.as_path()));
}
