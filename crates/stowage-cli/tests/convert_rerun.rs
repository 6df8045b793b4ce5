//! `convert` keeps its promise: a rerun of the same command finishes an interrupted conversion
//! whatever state it stopped in (before the cache existed, inside finalize), and a different
//! source into an existing target is refused unless `--merge` says the target's samples win.

mod common;

use std::path::{Path, PathBuf};

use common::*;
use stowage_core::{Backend, BackendFactory, DType, OpenMode, Sample, Schema, ShapeRule, Tensor};

const RECORD: &str = ".stowage.convert.json";

/// A finalized NUMPY_10 cache of `keys` samples whose values start at `offset`.
fn source(dir: &Path, name: &str, keys: usize, offset: f32) -> PathBuf {
    let path = dir.join(name);
    let schema = Schema::new().tensor("x", DType::F32, ShapeRule::Fixed(vec![8]));
    let mut cache = stowage_npy::NpyBackend::create(&path, &schema, Default::default()).unwrap();
    for i in 0..keys {
        let x: Vec<f32> = (0..8).map(|j| offset + (i * 8 + j) as f32).collect();
        cache
            .put(&key(i), &Sample::new().with("x", Tensor::from_slice(&[8], &x).unwrap()))
            .unwrap();
    }
    cache.finalize().unwrap();
    path
}

fn key(i: usize) -> String {
    format!("key-{i:04}")
}

fn factory(to: &str) -> Box<dyn BackendFactory> {
    match to {
        "memmap" => Box::new(stowage_memmap::MemmapFactory::default()),
        "arrow" => Box::new(stowage_arrow::ArrowFactory::default()),
        "hdf5" => Box::new(stowage_hdf5::Hdf5Factory),
        _ => Box::new(stowage_npy::NpyFactory::default()),
    }
}

fn open(path: &Path, to: &str) -> Box<dyn Backend> {
    factory(to).open(path, OpenMode::ReadOnly).unwrap()
}

fn convert(src: &Path, dst: &Path, to: &str, extra: &[&str]) -> Run {
    let mut argv = args(&[&"convert", &src, &dst, &"--to", &to]);
    argv.extend(extra.iter().map(Into::into));
    stowage(argv)
}

#[test]
fn a_different_source_is_refused_unless_merged_and_the_merge_says_what_wins() {
    let dir = tempfile::tempdir().unwrap();
    let first = source(dir.path(), "first", 30, 0.0);
    let second = source(dir.path(), "second", 40, 1000.0);
    for to in ["arrow", "npy", "hdf5", "memmap"] {
        let dst = dir.path().join(format!("dst-{to}"));
        // memmap and NUMPY_10 targets are finalized and cannot take more keys: leave them
        // unfinished by converting only what they can resume.
        let run = convert(&first, &dst, to, &[]);
        assert_eq!(run.code, 0, "{run:?}");
        let record = std::fs::read_to_string(dst.join(RECORD)).unwrap();
        assert!(record.contains("first"), "{record}");

        let run = convert(&second, &dst, to, &[]);
        assert_error_line(&run, &["is converted from", "first", "not from", "second", "--merge"]);
        assert_eq!(open(&dst, to).len(), 30, "{to}: the refused run wrote nothing");

        let run = convert(&second, &dst, to, &["--merge"]);
        let target = open(&dst, to);
        if target.is_finalized() && matches!(to, "npy" | "memmap") {
            // A finalized NUMPY_10 or memmap cache takes no more keys: refused, nothing lost.
            assert_eq!(run.code, 2, "{to}: {run:?}");
            assert!(run.stderr.contains("finalized"), "{to}: {run:?}");
            assert_eq!(target.len(), 30);
            continue;
        }
        assert_eq!(run.code, 0, "{to}: {run:?}");
        assert!(
            run.stdout.contains(
                "the target's samples win; 30 keys of {} were already there and kept, 30 of \
                 them differing from the source's"
                    .replace("{}", &second.display().to_string())
                    .as_str()
            ),
            "{run:?}"
        );
        assert_eq!(target.len(), 40);
        let kept = target.get(&key(3)).unwrap().unwrap();
        let want = open(&first, "npy").get(&key(3)).unwrap().unwrap();
        assert_eq!(kept, want, "{to}: the target's sample won");
        let added = target.get(&key(35)).unwrap().unwrap();
        assert_eq!(added, open(&second, "npy").get(&key(35)).unwrap().unwrap());
        // Both sources are recorded now: either one resumes without --merge.
        assert_eq!(convert(&second, &dst, to, &[]).code, 0);
        assert_eq!(convert(&first, &dst, to, &[]).code, 0);
    }
}

#[test]
fn a_target_without_a_record_is_not_merged_into_silently() {
    let dir = tempfile::tempdir().unwrap();
    let src = source(dir.path(), "src", 10, 0.0);
    let dst = dir.path().join("dst");
    let schema = Schema::new().tensor("x", DType::F32, ShapeRule::Fixed(vec![8]));
    let mut cache = factory("arrow").create(&dst, &schema).unwrap();
    let other = Sample::new().with("x", Tensor::from_slice(&[8], &[7f32; 8]).unwrap());
    cache.put(&key(0), &other).unwrap();
    cache.finalize().unwrap();
    drop(cache);
    let run = convert(&src, &dst, "arrow", &[]);
    assert_error_line(&run, &["records no conversion source", "--merge"]);
    let run = convert(&src, &dst, "arrow", &["--merge"]);
    assert_eq!(run.code, 0, "{run:?}");
    assert!(run.stdout.contains("1 key of"), "{run:?}");
    assert!(run.stdout.contains("kept, 1 of them differing"), "{run:?}");
    assert_eq!(open(&dst, "arrow").get(&key(0)).unwrap().unwrap(), other);
}

#[test]
fn a_conversion_stopped_before_its_cache_existed_is_finished_by_a_rerun() {
    let dir = tempfile::tempdir().unwrap();
    let src = source(dir.path(), "src", 25, 0.0);
    for to in ["arrow", "npy", "hdf5", "memmap"] {
        // Killed after the record: only it, the lock and a temporary are there.
        let dst = dir.path().join(format!("record-only-{to}"));
        assert_eq!(convert(&src, &dst, to, &[]).code, 0);
        if to == "arrow" {
            std::fs::copy(dst.join("schema.json"), dir.path().join("schema-arrow.json")).unwrap();
        }
        for entry in std::fs::read_dir(&dst).unwrap() {
            let path = entry.unwrap().path();
            if path.file_name().unwrap() != RECORD {
                match path.is_dir() {
                    true => std::fs::remove_dir_all(&path).unwrap(),
                    false => std::fs::remove_file(&path).unwrap(),
                }
            }
        }
        std::fs::write(dst.join(".stowage.lock"), b"12345\n").unwrap();
        std::fs::create_dir_all(dst.join("segments/empty")).unwrap();
        std::fs::write(dst.join(".stowage.log.new"), b"half a log").unwrap();
        if to == "arrow" {
            // Arrow's create writes schema.json before its log.
            std::fs::copy(dir.path().join("schema-arrow.json"), dst.join("schema.json")).unwrap();
        }
        if to == "npy" {
            // NUMPY_10's create writes its empty logs before stowage.json.
            std::fs::write(dst.join("records.log"), b"").unwrap();
            std::fs::write(dst.join("owned_files.log"), b"").unwrap();
            std::fs::create_dir_all(dst.join("data/10")).unwrap();
        }
        std::fs::write(dst.join(".schema.json.tmp-12345-0"), b"{\"fie").unwrap();
        let run = convert(&src, &dst, to, &["--verify"]);
        assert_eq!(run.code, 0, "{to}: {run:?}");
        assert!(run.stdout.contains("converted 25 samples"), "{to}: {run:?}");
        assert!(run.stdout.contains(": identical\n"), "{to}: {run:?}");
        assert!(open(&dst, to).is_finalized(), "{to}");

        // Killed while writing the record: a lock and the record's temporary.
        let dst = dir.path().join(format!("no-record-{to}"));
        std::fs::create_dir(&dst).unwrap();
        std::fs::write(dst.join(".stowage.lock"), b"").unwrap();
        std::fs::write(dst.join("..stowage.convert.json.tmp-12345-0"), b"{").unwrap();
        let run = convert(&src, &dst, to, &[]);
        assert_eq!(run.code, 0, "{to}: {run:?}");
        assert_eq!(open(&dst, to).len(), 25);
        assert!(!dst.join("..stowage.convert.json.tmp-12345-0").exists(), "{to}: removed");

        // Anything else in the directory is not ours: refused.
        let dst = dir.path().join(format!("foreign-{to}"));
        std::fs::create_dir(&dst).unwrap();
        std::fs::write(dst.join("notes.txt"), b"mine").unwrap();
        let run = convert(&src, &dst, to, &[]);
        assert_error_line(&run, &["is not an empty directory"]);
        assert_eq!(std::fs::read(dst.join("notes.txt")).unwrap(), b"mine");
    }
}

#[test]
fn a_conversion_stopped_inside_finalize_is_finalized_by_a_rerun() {
    let dir = tempfile::tempdir().unwrap();
    let src = source(dir.path(), "src", 25, 0.0);
    let source_cache = open(&src, "npy");
    for to in ["memmap", "arrow", "npy", "hdf5"] {
        // The record of a real run of the command, beside a target holding every key, flushed
        // but not finalized: the state of a kill inside finalize.
        let finished = dir.path().join(format!("finished-{to}"));
        assert_eq!(convert(&src, &finished, to, &[]).code, 0);
        let dst = dir.path().join(format!("unfinalized-{to}"));
        let mut target = factory(to).create(&dst, source_cache.schema()).unwrap();
        for key in source_cache.keys().unwrap() {
            target.put(&key, &source_cache.get(&key).unwrap().unwrap()).unwrap();
        }
        target.flush().unwrap();
        drop(target);
        std::fs::copy(finished.join(RECORD), dst.join(RECORD)).unwrap();
        assert!(!open(&dst, to).is_finalized());

        let run = convert(&src, &dst, to, &["--verify"]);
        assert_eq!(run.code, 0, "{to}: {run:?}");
        assert!(run.stdout.contains("converted 0 samples"), "{to}: {run:?}");
        assert!(run.stdout.contains(": identical\n"), "{to}: {run:?}");
        assert!(open(&dst, to).is_finalized(), "{to}: the rerun finalized it");
        let run = stowage(args(&[&"verify", &dst]));
        assert_eq!(run.code, 0, "{to}: {run:?}");
    }
}
