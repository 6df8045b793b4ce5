//! `stowage compact`: a stowage Arrow cache's small segments become one, every key reads the
//! same before and after, and other kinds of cache are refused by name.

mod common;

use std::path::Path;

use common::*;
use stowage_core::{Backend, Reader};

fn segment_files(cache: &Path) -> usize {
    std::fs::read_dir(cache.join("segments"))
        .unwrap()
        .filter(|e| e.as_ref().unwrap().file_name().to_string_lossy().ends_with(".arrow"))
        .count()
}

fn every_key_reads_as_written(cache: &Path) {
    let reader = stowage_arrow::ArrowBackend::open(
        cache,
        stowage_core::OpenMode::ReadOnly,
        stowage_arrow::ArrowOptions::default(),
    )
    .unwrap();
    for i in 0..40 {
        let got = reader.get(&format!("k{i:02}")).unwrap().expect("key present");
        let mut got: Vec<_> =
            got.fields().map(|(name, value)| (name.to_owned(), value.clone())).collect();
        let mut want: Vec<_> = mixed_sample(i)
            .fields()
            .map(|(name, value)| (name.to_owned(), value.clone()))
            .collect();
        got.sort_by(|a, b| a.0.cmp(&b.0));
        want.sort_by(|a, b| a.0.cmp(&b.0));
        assert_eq!(got, want, "k{i:02}");
    }
}

#[test]
fn compact_rewrites_small_segments_and_every_key_reads_the_same() {
    let dir = tempfile::tempdir().unwrap();
    let cache = build_arrow(dir.path(), false);
    assert_eq!(segment_files(&cache), 4);
    let run = stowage(args(&[&"compact", &cache]));
    assert_eq!(run.code, 0, "{run:?}");
    assert!(run.stdout.contains("compacted 4 segments"), "{run:?}");
    assert!(run.stdout.contains("into 1: 40 rows kept, 0 shadowed rows dropped"), "{run:?}");
    every_key_reads_as_written(&cache);
    let verify = stowage(args(&[&"verify", &cache]));
    assert_eq!(verify.code, 0, "{verify:?}");

    // The replaced files stay for readers until the next compaction deletes them.
    let again = stowage(args(&[&"compact", &cache]));
    assert_eq!(again.code, 0, "{again:?}");
    assert!(again.stdout.contains("nothing to compact"), "{again:?}");
    // A segment is three files: its IPC file, its keys and its row checksums.
    assert!(again.stdout.contains("deleted 12 files of the segments"), "{again:?}");
    assert_eq!(segment_files(&cache), 1);
    every_key_reads_as_written(&cache);

    // --below small enough leaves everything as it is.
    let none = stowage(args(&[&"compact", &cache, &"--below", &"1KiB"]));
    assert_eq!(none.code, 0, "{none:?}");
    assert!(none.stdout.contains("nothing to compact"), "{none:?}");
    let bad = stowage(args(&[&"compact", &cache, &"--below", &"lots"]));
    assert_eq!(bad.code, 2, "{bad:?}");
}

#[test]
fn a_finalized_cache_is_compacted_too() {
    let dir = tempfile::tempdir().unwrap();
    let cache = build_arrow(dir.path(), false);
    let options = stowage_arrow::ArrowOptions::default();
    let mut handle =
        stowage_arrow::ArrowBackend::open(&cache, stowage_core::OpenMode::Append, options).unwrap();
    handle.finalize().unwrap();
    drop(handle);
    let run = stowage(args(&[&"compact", &cache]));
    assert_eq!(run.code, 0, "{run:?}");
    assert!(run.stdout.contains("compacted 4 segments"), "{run:?}");
    every_key_reads_as_written(&cache);
}

#[test]
fn compact_refuses_other_kinds_of_cache_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("npy");
    let schema = stowage_core::Schema::new().tensor(
        "x",
        stowage_core::DType::F32,
        stowage_core::ShapeRule::Fixed(vec![2]),
    );
    let mut cache = stowage_npy::NpyBackend::create(&path, &schema, Default::default()).unwrap();
    let x = stowage_core::Tensor::from_slice(&[2], &[1.0f32, 2.0]).unwrap();
    cache.put("k", &stowage_core::Sample::new().with("x", x)).unwrap();
    cache.flush().unwrap();
    drop(cache);
    let run = stowage(args(&[&"compact", &path]));
    assert_eq!(run.code, 2, "{run:?}");
    assert_error_line(&run, &["not supported", "only stowage Arrow caches"]);
}
