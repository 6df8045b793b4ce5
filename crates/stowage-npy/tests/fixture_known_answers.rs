//! The committed fixture `fixtures/numpy10/` (written by an earlier build with
//! `cargo run -p stowage-npy --example numpy10_fixture -- fixtures/numpy10`) still reads back
//! exactly, validates clean, and matches what the generator writes today record for record.

#[path = "common/fixture.rs"]
mod fixture;

use std::path::{Path, PathBuf};
use stowage_core::{Backend, Reader, ValidationLevel};
use stowage_npy::{NpyBackend, NpyOptions};

fn committed() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fixtures/numpy10")
}

/// Copies the committed fixture so that opening it never touches the repository.
fn copy_of_committed() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    stowage_conformance::corrupt::copy_tree(&committed(), dir.path()).unwrap();
    dir
}

#[test]
fn committed_fixture_returns_every_known_answer() {
    let dir = copy_of_committed();
    let cache = NpyBackend::open_read_only(dir.path(), NpyOptions::default()).unwrap();
    assert!(cache.is_finalized());
    assert_eq!(cache.schema(), &fixture::schema());
    assert_eq!(cache.len(), fixture::SAMPLES);
    for i in 0..fixture::SAMPLES {
        let got = cache.get(&fixture::key(i)).unwrap().unwrap();
        assert_eq!(got, fixture::sample(i), "sample {i}");
    }
    let report = cache.validate(ValidationLevel::Full).unwrap();
    assert!(report.is_clean(), "{:?}", report.problems);
}

#[test]
fn generator_writes_the_same_records_as_the_committed_fixture() {
    let committed_dir = copy_of_committed();
    let committed =
        NpyBackend::open_read_only(committed_dir.path(), NpyOptions::default()).unwrap();
    let fresh_dir = tempfile::tempdir().unwrap();
    let options = NpyOptions { collection_size: fixture::COLLECTION_SIZE, ..NpyOptions::default() };
    let mut fresh = NpyBackend::create(fresh_dir.path(), &fixture::schema(), options).unwrap();
    for i in 0..fixture::SAMPLES {
        fresh.put(&fixture::key(i), &fixture::sample(i)).unwrap();
    }
    fresh.finalize().unwrap();
    // uids are random by design; everything else in a record must agree.
    let strip_uid = |record: String| {
        let mut parts: Vec<&str> = record.splitn(5, ':').collect();
        parts[1] = "<uid>";
        parts.join(":")
    };
    for i in 0..fixture::SAMPLES {
        for field in &fixture::schema().fields {
            let key = fixture::key(i);
            let want = strip_uid(committed.record(&key, &field.name).unwrap().to_string());
            let got = strip_uid(fresh.record(&key, &field.name).unwrap().to_string());
            assert_eq!(got, want, "{key} {}", field.name);
        }
    }
}
