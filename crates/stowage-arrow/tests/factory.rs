//! `ArrowFactory` as a registry sees it: which paths it recognizes (stowage's Arrow caches, the
//! caches torchcachex wrote alone, nothing another stowage backend marked) and the readers it
//! opens them with.

use std::path::Path;

use stowage_arrow::{ArrowBackend, ArrowFactory, ArrowOptions, STOWAGE_ARROW, TORCHCACHEX};
use stowage_core::file_safety::AppendLog;
use stowage_core::{
    Backend, BackendFactory, DType, Error, Reader, Registry, Sample, Schema, ShapeRule, Tensor,
    ValidationLevel,
};

fn schema() -> Schema {
    Schema::new().tensor("tensor", DType::F32, ShapeRule::Any).bytes("meta")
}

fn sample(i: usize) -> Sample {
    let values: Vec<f32> = (0..i % 5 + 1).map(|j| (i * 10 + j) as f32).collect();
    Sample::new()
        .with("tensor", Tensor::from_slice(&[values.len()], &values).unwrap())
        .with("meta", stowage_core::Value::Bytes(format!("m{i}").into_bytes().into()))
}

fn key(i: usize) -> String {
    format!("k{i:03}")
}

/// A stowage Arrow cache in `dir` holding keys 0..30 over several segments, finalized.
fn stowage_cache(dir: &Path) {
    let options = ArrowOptions { rank: Some(0), flush_every: 7, ..ArrowOptions::default() };
    let mut cache = ArrowBackend::create(dir, &schema(), options).unwrap();
    for i in 0..30 {
        cache.put(&key(i), &sample(i)).unwrap();
    }
    cache.finalize().unwrap();
}

/// `dir` as torchcachex would have left it: a stowage cache with every file of stowage's removed
/// (its log, completion marker, key index runs and sidecars), so only `schema.json` and the
/// segments remain.
fn torchcachex_style_cache(dir: &Path) {
    stowage_cache(dir);
    for file in [dir.join("stowage.log"), dir.join("stowage.complete")] {
        std::fs::remove_file(file).unwrap();
    }
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.file_name().unwrap().to_str().unwrap().starts_with("stowage_index_") {
            std::fs::remove_file(path).unwrap();
        }
    }
    for entry in std::fs::read_dir(dir.join("segments")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|ext| ext != "arrow") {
            std::fs::remove_file(path).unwrap();
        }
    }
}

/// A `stowage.log` in `dir` whose header names `format`, as another segment backend writes it.
fn stowage_log_naming(dir: &Path, format: &str) {
    let (mut log, _) = AppendLog::open(dir.join("stowage.log"), true).unwrap();
    let header = serde_json::json!({"cache": {"format": format, "version": 1}});
    log.append(&serde_json::to_vec(&header).unwrap()).unwrap();
    log.sync().unwrap();
}

#[test]
fn formats_are_stowage_arrow_then_torchcachex() {
    let factory = ArrowFactory::default();
    assert_eq!(factory.formats(), [STOWAGE_ARROW, TORCHCACHEX]);
    assert_eq!(STOWAGE_ARROW.id, "stowage-arrow");
    assert_eq!(STOWAGE_ARROW.description, "stowage Arrow segment cache");
    assert_eq!(STOWAGE_ARROW.signature, "stowage.log with format \"stowage-arrow\"");
    assert_eq!(TORCHCACHEX.id, "torchcachex");
    assert_eq!(TORCHCACHEX.description, "torchcachex Arrow segment cache");
    assert_eq!(TORCHCACHEX.signature, "segments/segment_*.arrow, schema.json or index.pkl");
}

/// stowage's own cache is recognized by its log and opens as a read-only `ArrowBackend`.
#[test]
fn a_stowage_arrow_cache_is_recognized_and_opened_read_only() {
    let dir = tempfile::tempdir().unwrap();
    stowage_cache(dir.path());
    let factory = ArrowFactory::default();
    assert_eq!(factory.recognize(dir.path()).unwrap(), Some(&STOWAGE_ARROW));
    let reader = factory.open_reader(dir.path()).unwrap();
    assert_eq!(reader.format(), &STOWAGE_ARROW);
    assert_eq!(reader.name(), "arrow");
    assert_eq!(reader.capabilities(), &factory.capabilities());
    assert!(reader.is_finalized());
    assert_eq!(reader.len(), 30);
    assert_eq!(reader.get(&key(12)).unwrap(), Some(sample(12)));
    assert!(reader.validate(ValidationLevel::Full).unwrap().is_clean());
    // Read-only: it holds no lock, so a writer opened beside it is not blocked.
    let mut writer =
        ArrowBackend::open(dir.path(), stowage_core::OpenMode::Append, ArrowOptions::default())
            .unwrap();
    writer.put(&key(99), &sample(99)).unwrap();
}

/// A directory holding only torchcachex's files opens as a `TorchcachexReader`: every key reads
/// back what was written, in one batch as one by one, and the reader says what it cannot do.
#[test]
fn a_torchcachex_style_cache_is_recognized_and_read_through_open_reader() {
    let dir = tempfile::tempdir().unwrap();
    torchcachex_style_cache(dir.path());
    let factory = ArrowFactory::default();
    assert_eq!(factory.recognize(dir.path()).unwrap(), Some(&TORCHCACHEX));
    let reader = factory.open_reader(dir.path()).unwrap();
    assert_eq!(reader.format(), &TORCHCACHEX);
    assert_eq!(reader.name(), "arrow");
    assert_eq!(reader.path(), dir.path());
    assert!(!reader.is_finalized(), "torchcachex has no notion of a complete cache");
    let caps = reader.capabilities();
    assert!(!caps.checksums && !caps.overwrite && !caps.append_after_finalize && caps.nullable);
    // The schema is what the columns hold, as loose as torchcachex allows.
    let fields: Vec<(&str, bool)> =
        reader.schema().fields.iter().map(|f| (f.name.as_str(), f.nullable)).collect();
    assert_eq!(fields, [("tensor", true), ("meta", true)]);
    assert!(caps.check_schema(reader.schema(), "arrow").is_ok());

    let keys: Vec<String> = (0..30).map(key).collect();
    assert_eq!(reader.keys().unwrap(), keys);
    assert_eq!(reader.len(), 30);
    let wanted: Vec<&str> = ["k029", "missing", "k000", "k015"].into();
    let batch = reader.get_batch(&wanted).unwrap();
    for (key, got) in wanted.iter().zip(&batch) {
        assert_eq!(got, &reader.get(key).unwrap(), "{key}");
        assert_eq!(reader.contains(key).unwrap(), got.is_some(), "{key}");
    }
    for i in 0..30 {
        let got = reader.get(&key(i)).unwrap().unwrap();
        assert_eq!(got.tensor("tensor"), sample(i).tensor("tensor"), "{}", key(i));
        // Bytes come back as torchcachex stores them: the pickle of the Python bytes.
        let stowage_core::Value::Bytes(meta) = got.get("meta").unwrap() else { panic!() };
        let inner =
            stowage_arrow::test_support::blob_encoding::unpickle_bytes(meta).unwrap().unwrap();
        assert_eq!(inner, format!("m{i}").as_bytes());
    }
    let report = reader.validate(ValidationLevel::Full).unwrap();
    assert!(report.is_undamaged(), "{report:?}");
    assert_eq!(report.samples_checked, 30);

    // A damaged value is an error naming the segment and key, never data.
    let typed = stowage_arrow::TorchcachexReader::open(dir.path()).unwrap();
    let (id, row) = typed.reader().locate("k003").unwrap().unwrap();
    let segment = dir.path().join(format!("segments/segment_{id:06}.arrow"));
    let mut bytes = std::fs::read(&segment).unwrap();
    // The shapes of k000..k006 are [1] [2] [3] [4] [5] [1] [2], one dimension each, stored in
    // row order: k003's [4] becomes [9], which its four values do not fill.
    let dims: Vec<u8> = [1i64, 2, 3, 4, 5, 1, 2].iter().flat_map(|d| d.to_le_bytes()).collect();
    let at = bytes.windows(dims.len()).position(|w| w == dims).expect("the shapes stored as is");
    bytes[at + 3 * 8] = 9;
    std::fs::write(&segment, bytes).unwrap();
    let damaged = factory.open_reader(dir.path()).unwrap();
    match damaged.get("k003") {
        Err(Error::Corrupted { path, key, .. }) => {
            assert_eq!(path, segment);
            assert_eq!(key.as_deref(), Some("k003"), "row {row}");
        }
        other => panic!("{other:?}"),
    }
    let report = damaged.validate(ValidationLevel::Full).unwrap();
    assert!(report.problems.iter().any(|p| p.key.as_deref() == Some("k003")), "{report:?}");
}

/// Each of torchcachex's files alone marks its cache: a segment, `schema.json` or `index.pkl`.
#[test]
fn any_of_torchcachexs_files_marks_its_cache() {
    let factory = ArrowFactory::default();
    let source = tempfile::tempdir().unwrap();
    torchcachex_style_cache(source.path());
    for file in ["schema.json", "index.pkl", "segments/segment_000000.arrow"] {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join(file);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        match file {
            "index.pkl" => std::fs::write(&path, b"\x80\x04}\x94.").unwrap(),
            _ => std::fs::copy(source.path().join(file), &path).map(drop).unwrap(),
        }
        assert_eq!(factory.recognize(dir.path()).unwrap(), Some(&TORCHCACHEX), "{file}");
    }
}

/// A directory another stowage backend marked is never probed for torchcachex's files, even
/// when it holds them; an empty directory, a file and a missing path are no cache of this
/// factory's. A marker that does not parse is an error, never guessed around.
#[test]
fn other_markers_and_empty_paths_are_not_recognized() {
    let factory = ArrowFactory::default();
    let npy = tempfile::tempdir().unwrap();
    torchcachex_style_cache(npy.path());
    std::fs::write(npy.path().join("stowage.json"), br#"{"format": "stowage-npy"}"#).unwrap();
    assert_eq!(factory.recognize(npy.path()).unwrap(), None, "a stowage.json of another format");

    let hdf5 = tempfile::tempdir().unwrap();
    torchcachex_style_cache(hdf5.path());
    stowage_log_naming(hdf5.path(), "stowage-hdf5");
    assert_eq!(factory.recognize(hdf5.path()).unwrap(), None, "a stowage.log of another format");

    let empty = tempfile::tempdir().unwrap();
    assert_eq!(factory.recognize(empty.path()).unwrap(), None, "an empty directory");
    std::fs::create_dir(empty.path().join("segments")).unwrap();
    assert_eq!(factory.recognize(empty.path()).unwrap(), None, "an empty segments/");
    let file = empty.path().join("schema.json.txt");
    std::fs::write(&file, b"{}").unwrap();
    assert_eq!(factory.recognize(&file).unwrap(), None, "a file");
    assert_eq!(factory.recognize(&empty.path().join("absent")).unwrap(), None, "a missing path");

    let broken = tempfile::tempdir().unwrap();
    std::fs::write(broken.path().join("stowage.json"), b"{not json").unwrap();
    let err = factory.recognize(broken.path()).unwrap_err();
    assert!(matches!(err, Error::Corrupted { .. }), "{err:?}");
}

/// A registry holding the factory opens both kinds of cache and names what it looks for when a
/// path is neither.
#[test]
fn a_registry_opens_both_formats() {
    let registry = Registry::new().with(ArrowFactory::default());
    let (own, theirs) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    stowage_cache(own.path());
    torchcachex_style_cache(theirs.path());
    assert_eq!(registry.open(own.path()).unwrap().format(), &STOWAGE_ARROW);
    assert_eq!(registry.open(theirs.path()).unwrap().format(), &TORCHCACHEX);
    let empty = tempfile::tempdir().unwrap();
    let Err(Error::NotFound { what }) = registry.open(empty.path()) else { panic!() };
    assert!(
        what.contains(TORCHCACHEX.signature) && what.contains(STOWAGE_ARROW.signature),
        "{what}"
    );
}
