//! The CLI never writes through a symbolic link inside a cache, and still reads through one.

mod common;

use std::path::Path;

use common::*;
use stowage_core::{Backend, BackendFactory, DType, Sample, Schema, ShapeRule, Tensor};

fn source(path: &Path, keys: usize, offset: u8) {
    let schema = Schema::new().tensor("x", DType::U8, ShapeRule::Fixed(vec![4]));
    let mut cache = stowage_npy::NpyBackend::create(path, &schema, Default::default()).unwrap();
    for i in 0..keys {
        let x = [offset, i as u8, 1, 2];
        cache
            .put(
                &format!("k{i:03}"),
                &Sample::new().with("x", Tensor::from_slice(&[4], &x).unwrap()),
            )
            .unwrap();
    }
    cache.finalize().unwrap();
}

#[test]
fn a_linked_lock_file_is_refused_by_name_and_its_target_is_untouched() {
    let dir = tempfile::tempdir().unwrap();
    let (first, second) = (dir.path().join("first"), dir.path().join("second"));
    source(&first, 10, 0);
    source(&second, 20, 100);
    let precious = dir.path().join("precious.txt");
    std::fs::write(&precious, b"not a pid").unwrap();
    for to in ["arrow", "hdf5"] {
        let dst = dir.path().join(format!("dst-{to}"));
        assert_eq!(stowage(args(&[&"convert", &first, &dst, &"--to", &to])).code, 0);
        std::fs::remove_file(dst.join(".stowage.lock")).unwrap();
        std::os::unix::fs::symlink(&precious, dst.join(".stowage.lock")).unwrap();
        let run = stowage(args(&[&"convert", &second, &dst, &"--to", &to, &"--merge"]));
        assert_error_line(&run, &[".stowage.lock", "symbolic link"]);
        assert_eq!(std::fs::read(&precious).unwrap(), b"not a pid", "{to}");
        let run = stowage(args(&[&"adopt", &dst]));
        assert_eq!(std::fs::read(&precious).unwrap(), b"not a pid", "{to}: {run:?}");
    }
}

#[test]
fn a_cache_whose_files_are_linked_elsewhere_is_read_and_inspect_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("cache");
    let schema = Schema::new().tensor("x", DType::U8, ShapeRule::Fixed(vec![2]));
    let mut arrow = stowage_arrow::ArrowFactory::default().create(&cache, &schema).unwrap();
    for i in 0..5u8 {
        arrow
            .put(
                &format!("k{i}"),
                &Sample::new().with("x", Tensor::from_slice(&[2], &[i, i]).unwrap()),
            )
            .unwrap();
    }
    arrow.finalize().unwrap();
    drop(arrow);
    // Move the segment elsewhere and link it back, as a user moving data to another disk would.
    let segment = cache.join("segments/segment_000000.arrow");
    let moved = dir.path().join("other-disk.arrow");
    std::fs::rename(&segment, &moved).unwrap();
    std::os::unix::fs::symlink(&moved, &segment).unwrap();

    let run = stowage(args(&[&"verify", &cache]));
    assert_eq!(run.code, 0, "{run:?}");
    let run = stowage(args(&[&"keys", &cache]));
    assert_eq!(run.stdout.lines().count(), 5, "{run:?}");
    let run = stowage(args(&[&"inspect", &cache]));
    assert_eq!(run.code, 0, "{run:?}");
    let real = std::fs::canonicalize(&moved).unwrap();
    let want =
        format!("segments/segment_000000.arrow -> {} (outside the cache directory", real.display());
    assert!(run.stdout.contains(&want), "{run:?}");
    let run = stowage(args(&[&"inspect", &"--json", &cache]));
    let report: serde_json::Value = serde_json::from_str(&run.stdout).unwrap();
    assert_eq!(report["links_outside"].as_array().map(Vec::len), Some(1), "{run:?}");
    assert_eq!(
        stowage_arrow::ArrowFactory::default()
            .open(&cache, stowage_core::OpenMode::ReadOnly)
            .unwrap()
            .len(),
        5
    );
}
