//! Which paths the npy factory recognizes, and what it opens: stowage's NUMPY_10 caches, hangar's
//! bare NUMPY_10 data directories (recognized, not opened: they hold no keys), and nothing in a
//! directory another stowage backend marked.

use std::path::Path;
use stowage_core::file_safety::AppendLog;
use stowage_core::npy_header::write_header;
use stowage_core::{
    Backend, BackendFactory, DType, Error, Reader, Registry, Sample, Schema, ShapeRule, Tensor,
};
use stowage_npy::{HANGAR_NUMPY10, NpyFactory, STOWAGE_NPY};

/// A finalized stowage NUMPY_10 cache in `dir` holding key `a` (so it has a `data/10/*.npy`, as
/// a hangar directory does).
fn stowage_cache(dir: &Path) -> Sample {
    let schema = Schema::new().tensor("x", DType::U8, ShapeRule::Fixed(vec![2]));
    let sample = Sample::new().with("x", Tensor::from_slice(&[2], &[4u8, 2]).unwrap());
    let mut cache = NpyFactory::default().create(dir, &schema).unwrap();
    cache.put("a", &sample).unwrap();
    cache.finalize().unwrap();
    sample
}

/// `dir/data/10/<uid>.npy`: one collection file as hangar writes it, with its committed marker.
fn hangar_collection_file(dir: &Path, uid: &str) {
    let data = dir.join("data").join("10");
    std::fs::create_dir_all(&data).unwrap();
    let mut bytes = write_header(DType::F32, &[4, 3]);
    bytes.extend_from_slice(&[0u8; 4 * 3 * 4]);
    std::fs::write(data.join(format!("{uid}.npy")), bytes).unwrap();
    let store = dir.join("store_data").join("10");
    std::fs::create_dir_all(&store).unwrap();
    std::fs::write(store.join(format!("{uid}.npy")), b"").unwrap();
}

#[test]
fn formats_are_the_own_one_first_then_hangars() {
    let ids: Vec<&str> = NpyFactory::default().formats().iter().map(|f| f.id).collect();
    assert_eq!(ids, ["stowage-npy", "hangar-numpy10"]);
    assert_eq!(STOWAGE_NPY.description, "stowage NUMPY_10 cache");
    assert_eq!(STOWAGE_NPY.signature, "stowage.json with format \"stowage-npy\"");
    assert_eq!(HANGAR_NUMPY10.description, "hangar NUMPY_10 data directory");
    assert_eq!(HANGAR_NUMPY10.signature, "data/10/*.npy");
}

#[test]
fn a_stowage_npy_cache_is_recognized_and_opened_as_its_own_format() {
    let dir = tempfile::tempdir().unwrap();
    let sample = stowage_cache(dir.path());
    assert!(dir.path().join("data/10").read_dir().unwrap().next().is_some(), "has data/10 files");
    let factory = NpyFactory::default();
    assert_eq!(factory.recognize(dir.path()).unwrap(), Some(&STOWAGE_NPY));
    let reader = factory.open_reader(dir.path()).unwrap();
    assert_eq!(reader.format(), &STOWAGE_NPY);
    assert_eq!(reader.keys().unwrap(), ["a"]);
    assert_eq!(reader.get("a").unwrap(), Some(sample));
    assert!(reader.is_finalized());

    let registry = Registry::new().with(NpyFactory::default());
    assert_eq!(registry.open(dir.path()).unwrap().len(), 1);
}

#[test]
fn a_bare_hangar_data_directory_is_recognized_but_has_no_keys_to_read() {
    let dir = tempfile::tempdir().unwrap();
    hangar_collection_file(dir.path(), "4ujrcb35");
    let factory = NpyFactory::default();
    assert_eq!(factory.recognize(dir.path()).unwrap(), Some(&HANGAR_NUMPY10));
    let err = factory.open_reader(dir.path()).err().expect("a hangar directory has no keys");
    match &err {
        Error::Unsupported { backend, operation } => {
            assert_eq!(*backend, "npy");
            assert!(operation.contains("bare hangar NUMPY_10 data directory"), "{err}");
            assert!(operation.contains("LMDB"), "{err}");
        }
        other => panic!("expected Unsupported, got {other}"),
    }
}

#[test]
fn a_directory_another_stowage_backend_marked_is_not_probed_for_hangars_layout() {
    let factory = NpyFactory::default();

    let json = tempfile::tempdir().unwrap();
    hangar_collection_file(json.path(), "4ujrcb35");
    std::fs::write(json.path().join("stowage.json"), br#"{"format": "dnanet-memmap-row"}"#)
        .unwrap();
    assert_eq!(factory.recognize(json.path()).unwrap(), None);

    let log = tempfile::tempdir().unwrap();
    hangar_collection_file(log.path(), "4ujrcb35");
    let (mut header, _) = AppendLog::open(log.path().join("stowage.log"), true).unwrap();
    header.append(br#"{"cache": {"format": "stowage-arrow"}}"#).unwrap();
    header.sync().unwrap();
    assert_eq!(factory.recognize(log.path()).unwrap(), None);
}

#[test]
fn a_stowage_json_that_does_not_parse_is_an_error_not_a_guess() {
    let dir = tempfile::tempdir().unwrap();
    hangar_collection_file(dir.path(), "4ujrcb35");
    std::fs::write(dir.path().join("stowage.json"), b"{not json").unwrap();
    let err = NpyFactory::default().recognize(dir.path()).unwrap_err();
    assert!(matches!(err, Error::Corrupted { .. }), "{err}");
    assert!(err.to_string().contains("stowage.json"), "{err}");
}

#[test]
fn empty_and_unrelated_paths_are_not_recognized() {
    let factory = NpyFactory::default();
    let empty = tempfile::tempdir().unwrap();
    assert_eq!(factory.recognize(empty.path()).unwrap(), None);

    // data/10 without any .npy file is not a hangar directory either.
    let no_npy = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(no_npy.path().join("data/10/sub.npy")).unwrap();
    std::fs::write(no_npy.path().join("data/10/notes.txt"), b"").unwrap();
    assert_eq!(factory.recognize(no_npy.path()).unwrap(), None);

    assert_eq!(factory.recognize(&empty.path().join("absent")).unwrap(), None);
    let file = empty.path().join("file.npy");
    std::fs::write(&file, write_header(DType::U8, &[1])).unwrap();
    assert_eq!(factory.recognize(&file).unwrap(), None);
}
