//! `Hdf5Factory` as the `stowage` command uses it: recognizing the crate's own caches and aenet's
//! dataset files (and nothing else), opening either as a `Reader`, validating either even when
//! it does not open; and the error categories of the generic backend (a poisoned handle, the key
//! of corrupted bytes).

mod common;

use std::io::{Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use common::{derivatives, features, write_aenet_file, write_plain_dataset};
use stowage_core::file_safety::AppendLog;
use stowage_core::{
    Backend, BackendFactory, DType, Error, OpenMode, Reader, Sample, Schema, ShapeRule, Tensor,
    ValidationLevel, Value,
};
use stowage_hdf5::{
    AENET_FEATURES, AENET_HDF5, AenetReader, Hdf5Backend, Hdf5Factory, STOWAGE_HDF5,
    aenet_derivative_fields,
};

/// A value whose bytes occur nowhere else in a segment, so a test can find and damage them.
const MARK: f64 = 1_234.567_890_123;

fn schema() -> Schema {
    Schema::new().tensor("x", DType::F64, ShapeRule::RaggedLeading(vec![2]))
}

fn sample(value: f64) -> Sample {
    Sample::new().with("x", Tensor::from_slice(&[2, 2], &[value; 4]).unwrap())
}

/// A finalized stowage HDF5 cache in `<dir>/cache` holding keys `a` and `b` in one segment.
fn write_own_cache(dir: &Path) -> PathBuf {
    let path = dir.join("cache");
    let mut cache = Hdf5Backend::create(&path, &schema()).unwrap();
    cache.put("a", &sample(MARK)).unwrap();
    cache.put("b", &sample(2.0)).unwrap();
    cache.finalize().unwrap();
    path
}

fn segment(cache: &Path) -> PathBuf {
    cache.join("segments/segment_000000.h5")
}

/// Flips one byte of `path` in place (same inode: a map of it sees the change).
fn flip_byte(path: &Path, at: usize) {
    let mut file = std::fs::OpenOptions::new().read(true).write(true).open(path).unwrap();
    let bytes = std::fs::read(path).unwrap();
    file.seek(SeekFrom::Start(at as u64)).unwrap();
    file.write_all(&[bytes[at] ^ 0x40]).unwrap();
    file.sync_all().unwrap();
}

#[test]
fn formats_are_the_own_one_then_aenets() {
    let formats = Hdf5Factory.formats();
    assert_eq!(formats, &[STOWAGE_HDF5, AENET_HDF5]);
    assert_eq!(formats[0].id, "stowage-hdf5");
    assert_eq!(formats[1].id, "aenet-hdf5");
}

#[test]
fn an_own_cache_is_recognized_finalized_or_not() {
    let dir = tempfile::tempdir().unwrap();
    let path = write_own_cache(dir.path());
    assert_eq!(Hdf5Factory.recognize(&path).unwrap(), Some(&STOWAGE_HDF5));
    // Only the log's header: a cache created and never flushed.
    let fresh = dir.path().join("fresh");
    drop(Hdf5Backend::create(&fresh, &schema()).unwrap());
    assert_eq!(Hdf5Factory.recognize(&fresh).unwrap(), Some(&STOWAGE_HDF5));
}

#[test]
fn an_aenet_dataset_file_is_recognized() {
    let dir = tempfile::tempdir().unwrap();
    let path = write_aenet_file(dir.path());
    assert_eq!(Hdf5Factory.recognize(&path).unwrap(), Some(&AENET_HDF5));
}

#[test]
fn what_is_neither_is_not_recognized() {
    let dir = tempfile::tempdir().unwrap();
    let empty = dir.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    assert_eq!(Hdf5Factory.recognize(&empty).unwrap(), None, "an empty directory");
    assert_eq!(Hdf5Factory.recognize(&dir.path().join("absent")).unwrap(), None, "no such path");
    let text = dir.path().join("notes.txt");
    std::fs::write(&text, b"a text file, long enough to hold an HDF5 signature").unwrap();
    assert_eq!(Hdf5Factory.recognize(&text).unwrap(), None, "a file that is not HDF5");
    let plain = dir.path().join("plain.h5");
    write_plain_dataset(&plain);
    assert!(stowage_hdf5::is_hdf5_file(&plain, std::fs::metadata(&plain).unwrap().len()));
    assert_eq!(Hdf5Factory.recognize(&plain).unwrap(), None, "an HDF5 file without a cache");
}

#[test]
fn another_backends_stowage_marker_is_not_recognized() {
    let dir = tempfile::tempdir().unwrap();
    // A stowage.json, even beside an aenet dataset file and an hdf5 commit log: the marker wins.
    let json = dir.path().join("json");
    std::fs::create_dir(&json).unwrap();
    std::fs::write(json.join("stowage.json"), br#"{"format": "stowage-npy"}"#).unwrap();
    write_aenet_file(&json);
    assert_eq!(Hdf5Factory.recognize(&json).unwrap(), None);
    let both = write_own_cache(dir.path());
    std::fs::write(both.join("stowage.json"), br#"{"format": "stowage-npy"}"#).unwrap();
    assert_eq!(Hdf5Factory.recognize(&both).unwrap(), None);
    // Another segment backend's commit log.
    let log = dir.path().join("log");
    std::fs::create_dir(&log).unwrap();
    let header = br#"{"cache": {"format": "stowage-arrow", "version": 1}}"#;
    drop(AppendLog::create_new(log.join("stowage.log"), header).unwrap());
    assert_eq!(Hdf5Factory.recognize(&log).unwrap(), None);
}

#[test]
fn an_hdf5_file_whose_torch_cache_does_not_open_is_an_error_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = write_aenet_file(dir.path());
    let bytes = std::fs::read(&path).unwrap();
    // The signature stays, the rest of the superblock and everything after it is lost.
    std::fs::write(&path, &bytes[..bytes.len() / 8]).unwrap();
    let error = Hdf5Factory.recognize(&path).unwrap_err();
    let text = error.to_string();
    assert!(text.contains(&path.display().to_string()), "{text}");
    assert!(text.contains("an HDF5 file whose torch cache cannot be opened"), "{text}");
}

#[test]
fn open_reader_reads_an_aenet_file_by_entry() {
    let dir = tempfile::tempdir().unwrap();
    let path = write_aenet_file(dir.path());
    let reader = Hdf5Factory.open_reader(&path).unwrap();
    assert_eq!(reader.format(), &AENET_HDF5);
    assert_eq!(reader.name(), "hdf5");
    assert_eq!(reader.path(), path);
    assert!(reader.is_finalized());
    assert_eq!(reader.keys().unwrap(), ["0", "1", "2"]);
    assert_eq!(reader.len(), 3);
    let derivative_fields = aenet_derivative_fields();

    let fields: Vec<(&str, bool)> =
        reader.schema().fields.iter().map(|f| (f.name.as_str(), f.nullable)).collect();
    assert_eq!(fields[0], (AENET_FEATURES, false), "every entry has features");
    assert_eq!(fields.len(), 12);
    assert!(fields[1..].iter().all(|&(_, nullable)| nullable), "entry 1 has no derivatives");
    assert_eq!(fields[3].0, derivative_fields[2]);

    for entry in 0..3i64 {
        let key = entry.to_string();
        assert!(reader.contains(&key).unwrap());
        let sample = reader.get(&key).unwrap().expect("a cached entry");
        assert_eq!(sample.tensor(AENET_FEATURES), Some(&features(entry)), "entry {entry}");
        let dg_drij = sample.get(&derivative_fields[2]).unwrap();
        match entry {
            1 => assert_eq!(dg_drij, &Value::Null, "no derivative row"),
            _ => assert_eq!(dg_drij, &Value::Tensor(derivatives(entry).radial.dg_drij)),
        }
    }
    for absent in ["3", "-1", "01", "+1", "one", ""] {
        assert_eq!(reader.get(absent).unwrap(), None, "{absent:?}");
        assert!(!reader.contains(absent).unwrap(), "{absent:?}");
    }
    let batch = reader.get_batch(&["2", "7"]).unwrap();
    assert!(batch[0].is_some() && batch[1].is_none());

    let report = reader.validate(ValidationLevel::Full).unwrap();
    assert!(report.is_clean(), "{report:?}");
    assert_eq!(report.samples_checked, 3);
}

#[test]
fn aenet_reader_open_refuses_what_holds_no_torch_cache() {
    let dir = tempfile::tempdir().unwrap();
    let plain = dir.path().join("plain.h5");
    write_plain_dataset(&plain);
    let error = AenetReader::open(&plain).err().expect("no torch cache");
    assert!(matches!(error, Error::NotFound { .. }), "{error}");
    assert!(error.to_string().contains("/torch_cache"), "{error}");
    let text = dir.path().join("notes.txt");
    std::fs::write(&text, b"not an HDF5 file").unwrap();
    let error = AenetReader::open(&text).err().expect("not HDF5");
    assert!(error.to_string().contains("HDF5 signature"), "{error}");
}

#[test]
fn open_reader_reads_an_own_cache_read_only() {
    let dir = tempfile::tempdir().unwrap();
    let path = write_own_cache(dir.path());
    let reader = Hdf5Factory.open_reader(&path).unwrap();
    assert_eq!(reader.format(), &STOWAGE_HDF5);
    assert_eq!(reader.keys().unwrap(), ["a", "b"]);
    assert_eq!(reader.get("b").unwrap(), Some(sample(2.0)));
    assert!(reader.is_finalized());
}

#[test]
fn a_damaged_segment_is_found_on_first_use_and_listed_by_validate_path() {
    let dir = tempfile::tempdir().unwrap();
    let path = write_own_cache(dir.path());
    let clean = Hdf5Factory.validate_path(&path, ValidationLevel::Full).unwrap();
    assert!(clean.is_clean(), "{clean:?}");
    assert_eq!(clean.samples_checked, 2);

    let segment = segment(&path);
    let middle = std::fs::metadata(&segment).unwrap().len() as usize / 2;
    flip_byte(&segment, middle);
    // Open reads the key index run, not the segment: its first use finds the damage, before
    // libhdf5 parses a byte of it, naming the segment and the key read.
    let reader = Hdf5Factory.open_reader(&path).unwrap();
    match reader.get("a") {
        Err(Error::Corrupted { path, key, detail }) => {
            assert_eq!(path, segment);
            assert_eq!(key.as_deref(), Some("a"));
            assert!(detail.contains("xxh3"), "{detail}");
        }
        other => panic!("expected the damaged segment, got {other:?}"),
    }
    for level in [ValidationLevel::Structure, ValidationLevel::Full] {
        let report = Hdf5Factory.validate_path(&path, level).unwrap();
        assert_eq!(report.problems.len(), 1, "{level:?}: {report:?}");
        assert_eq!(report.problems[0].path.as_deref(), Some(segment.as_path()));
        assert!(report.problems[0].detail.contains("2 samples are unreadable"), "{report:?}");
    }
}

#[test]
fn validate_path_of_a_missing_cache_is_not_found() {
    let dir = tempfile::tempdir().unwrap();
    let error = Hdf5Factory.validate_path(dir.path(), ValidationLevel::Full).unwrap_err();
    assert!(matches!(error, Error::NotFound { .. }), "{error}");
}

#[test]
fn validate_path_of_an_aenet_file_that_does_not_open_is_one_problem_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = write_aenet_file(dir.path());
    let clean = Hdf5Factory.validate_path(&path, ValidationLevel::Full).unwrap();
    assert!(clean.is_clean(), "{clean:?}");
    assert_eq!(clean.samples_checked, 3);

    let bytes = std::fs::read(&path).unwrap();
    std::fs::write(&path, &bytes[..bytes.len() / 8]).unwrap();
    assert!(Hdf5Factory.open_reader(&path).is_err());
    let report = Hdf5Factory.validate_path(&path, ValidationLevel::Full).unwrap();
    assert_eq!(report.problems.len(), 1, "{report:?}");
    let problem = &report.problems[0];
    assert_eq!(problem.path.as_deref(), Some(path.as_path()));
    assert_eq!(problem.key, None);
    assert!(problem.detail.contains("the torch cache does not open"), "{problem}");
}

#[test]
fn corrupted_bytes_name_their_key() {
    let dir = tempfile::tempdir().unwrap();
    let path = write_own_cache(dir.path());
    let reader = Hdf5Backend::open(&path, OpenMode::ReadOnly).unwrap();
    // Damaged after a first get checked the segment's checksum: only the row's checksum sees it.
    assert_eq!(reader.get("b").unwrap(), Some(sample(2.0)));
    let segment = segment(&path);
    let bytes = std::fs::read(&segment).unwrap();
    let mark = MARK.to_le_bytes();
    let at = bytes.windows(8).position(|w| w == mark).expect("the value is stored as is");
    flip_byte(&segment, at);
    match reader.get("a") {
        Err(Error::Corrupted { path, key, detail }) => {
            assert_eq!(path, segment);
            assert_eq!(key.as_deref(), Some("a"), "{detail}");
            assert!(detail.contains("checksum"), "{detail}");
        }
        other => panic!("expected corruption of key a, got {other:?}"),
    }
    assert_eq!(reader.get("b").unwrap(), Some(sample(2.0)), "the other row is intact");
}

#[test]
fn a_corrupted_aenet_row_names_its_key() {
    let dir = tempfile::tempdir().unwrap();
    let path = write_aenet_file(dir.path());
    let reader = Hdf5Factory.open_reader(&path).unwrap();
    // A value of entry 1's features (stored as float64, uncompressed in the global heap).
    let bytes = std::fs::read(&path).unwrap();
    let value = features(1).to_vec::<f64>().unwrap()[5].to_le_bytes();
    let at = bytes.windows(8).position(|w| w == value).expect("the value is stored as is");
    flip_byte(&path, at);
    match reader.get("1") {
        Err(Error::Corrupted { path: file, key, detail }) => {
            assert_eq!(file, path);
            assert_eq!(key.as_deref(), Some("1"), "{detail}");
        }
        other => panic!("expected corruption of key 1, got {other:?}"),
    }
    let report = reader.validate(ValidationLevel::Full).unwrap();
    let keys: Vec<Option<&str>> = report.problems.iter().map(|p| p.key.as_deref()).collect();
    assert_eq!(keys, [Some("1")], "{report:?}");
}

#[cfg(unix)]
#[test]
fn a_failed_flush_poisons_the_handle() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cache");
    let mut cache = Hdf5Backend::create(&path, &schema()).unwrap();
    cache.put("a", &sample(1.0)).unwrap();
    cache.flush().unwrap();
    // A linked `segments/` is refused at the next flush: that flush fails.
    let segments = path.join("segments");
    let moved = dir.path().join("elsewhere");
    std::fs::rename(&segments, &moved).unwrap();
    std::os::unix::fs::symlink(&moved, &segments).unwrap();
    cache.put("b", &sample(2.0)).unwrap();
    assert!(cache.flush().is_err());
    // Put back: the handle still refuses, because its memory may not match the files.
    std::fs::remove_file(&segments).unwrap();
    std::fs::rename(&moved, &segments).unwrap();
    for result in [cache.put("c", &sample(3.0)), cache.flush(), cache.finalize()] {
        match result {
            Err(Error::Poisoned { path: at, cause }) => {
                assert_eq!(at, path);
                assert!(cause.contains("segments"), "{cause}");
            }
            other => panic!("expected a poisoned handle, got {other:?}"),
        }
    }
    drop(cache);
    let reopened = Hdf5Backend::open(&path, OpenMode::Append).unwrap();
    assert_eq!(reopened.keys().unwrap(), ["a"], "what was flushed survives");
}

#[test]
fn a_read_only_handle_refuses_writes_as_unsupported() {
    let dir = tempfile::tempdir().unwrap();
    let path = write_own_cache(dir.path());
    let mut reader = Hdf5Backend::open(&path, OpenMode::ReadOnly).unwrap();
    let error = reader.put("c", &sample(3.0)).unwrap_err();
    assert!(matches!(error, Error::Unsupported { backend: "hdf5", .. }), "{error}");
    let error = reader.finalize().unwrap_err();
    assert!(error.to_string().contains("finalize"), "{error}");
}
