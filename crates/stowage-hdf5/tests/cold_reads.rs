//! A segment's first use checks its metadata only (the commit log's `meta` ranges), its rows
//! by their checksums as they are read: a flipped byte anywhere in a segment is still
//! `Error::Corrupted` naming the segment file, through `get` and `get_batch` (whose segments are
//! opened ahead, on threads), never wrong data, and `validate` still finds every damaged segment.

use std::path::{Path, PathBuf};

use stowage_core::{
    Backend, DType, Error, OpenMode, Reader, Sample, Schema, ShapeRule, Tensor, ValidationLevel,
};
use stowage_hdf5::Hdf5Backend;

/// A value no other byte of a segment is likely to hold, distinct per key.
fn value(i: u32) -> u32 {
    0x5A3C_0000 + i
}

fn sample(i: u32) -> Sample {
    Sample::new().with("x", Tensor::from_slice(&[1], &[value(i)]).unwrap())
}

/// A finished cache of `segments` segments of 4 keys each (`k<i>`, segment `i / 4`).
fn cache(dir: &Path, segments: u32) {
    let schema = Schema::new().tensor("x", DType::U32, ShapeRule::Fixed(vec![1]));
    let mut cache = Hdf5Backend::create(dir, &schema).unwrap();
    for i in 0..segments * 4 {
        cache.put(&format!("k{i}"), &sample(i)).unwrap();
        if i % 4 == 3 {
            cache.flush().unwrap();
        }
    }
    cache.finalize().unwrap();
}

fn segment(dir: &Path, id: u32) -> PathBuf {
    dir.join(format!("segments/segment_{id:06}.h5"))
}

/// Flips a bit of byte `at` of `path`.
fn flip(path: &Path, at: usize) {
    let mut bytes = std::fs::read(path).unwrap();
    bytes[at] ^= 0x08;
    std::fs::write(path, bytes).unwrap();
}

/// Where key `i`'s value lies in its segment file.
fn value_at(path: &Path, i: u32) -> usize {
    let bytes = std::fs::read(path).unwrap();
    let needle = value(i).to_le_bytes();
    bytes.windows(4).position(|w| w == needle).expect("the value is stored")
}

fn assert_corrupted_naming<T: std::fmt::Debug>(result: stowage_core::Result<T>, path: &Path) {
    match result {
        Err(Error::Corrupted { path: named, .. }) => assert_eq!(named, path),
        other => panic!("expected Error::Corrupted naming {}, got {other:?}", path.display()),
    }
}

#[test]
fn a_flipped_metadata_byte_fails_the_segments_first_use_in_get_and_get_batch() {
    let dir = tempfile::tempdir().unwrap();
    cache(dir.path(), 6);
    let damaged = segment(dir.path(), 1);
    flip(&damaged, 40); // The superblock: metadata.
    let reader = Hdf5Backend::open(dir.path(), OpenMode::ReadOnly).unwrap();
    assert_corrupted_naming(reader.get("k5"), &damaged);
    // A batch over every segment (opened ahead on threads) fails on the damaged one...
    let keys: Vec<String> = (0..24).map(|i| format!("k{i}")).collect();
    let keys: Vec<&str> = keys.iter().map(String::as_str).collect();
    let fresh = Hdf5Backend::open(dir.path(), OpenMode::ReadOnly).unwrap();
    assert_corrupted_naming(fresh.get_batch(&keys), &damaged);
    // ...and one without its keys reads every sample as written.
    let others: Vec<&str> =
        keys.iter().copied().filter(|k| !["k4", "k5", "k6", "k7"].contains(k)).collect();
    let got = fresh.get_batch(&others).unwrap();
    for (key, sample_got) in others.iter().zip(got) {
        let i: u32 = key[1..].parse().unwrap();
        assert_eq!(sample_got, Some(sample(i)), "{key}");
    }
    let report = Hdf5Backend::validate_dir(dir.path(), ValidationLevel::Full).unwrap();
    assert_eq!(report.problems.len(), 1, "{report:?}");
}

#[test]
fn a_flipped_row_byte_fails_that_rows_reads_only_and_validate() {
    let dir = tempfile::tempdir().unwrap();
    cache(dir.path(), 4);
    let damaged = segment(dir.path(), 2);
    flip(&damaged, value_at(&damaged, 9)); // k9's value, in segment 2.
    let reader = Hdf5Backend::open(dir.path(), OpenMode::ReadOnly).unwrap();
    assert_corrupted_naming(reader.get("k9"), &damaged);
    // The rest of the segment reads as written: only the damaged row's bytes were trusted less.
    for i in [8, 10, 11] {
        assert_eq!(reader.get(&format!("k{i}")).unwrap(), Some(sample(i)));
    }
    let fresh = Hdf5Backend::open(dir.path(), OpenMode::ReadOnly).unwrap();
    assert_corrupted_naming(fresh.get_batch(&["k1", "k9", "k14"]), &damaged);
    assert_eq!(
        fresh.get_batch(&["k1", "k8", "k14"]).unwrap(),
        vec![Some(sample(1)), Some(sample(8)), Some(sample(14))]
    );
    // Every key of the segment read at once checks the whole file first.
    assert_corrupted_naming(fresh.keys(), &damaged);
    let report = Hdf5Backend::validate_dir(dir.path(), ValidationLevel::Full).unwrap();
    assert_eq!(report.problems.len(), 1, "{report:?}");
    assert!(report.problems[0].detail.contains("xxh3"), "{report:?}");
}
