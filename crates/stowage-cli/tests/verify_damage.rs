//! `stowage verify` tells the truth about damaged caches: for a cache of every backend, written
//! with the default options, each file in turn is deleted, emptied, cut short or has a byte
//! flipped, and the binary's verdict is compared with the backend's own `validate(Full)`.
//!
//! Whenever `validate(Full)` sees damage (or the cache no longer opens), `verify` must exit 1
//! (problems listed) or 2 (the cache cannot be opened); it must never exit 0 ("clean") or 3
//! ("no problem, N unchecked") then.

mod common;

use std::path::{Path, PathBuf};

use common::*;
use stowage_conformance::corrupt::{copy_tree, truncate};
use stowage_core::{BackendFactory, DType, OpenMode, Sample, Schema, Tensor, ValidationLevel};

const SAMPLES: usize = 300;

fn schema() -> Schema {
    Schema::new().tensor("x", DType::F32, stowage_core::ShapeRule::Fixed(vec![16])).tensor(
        "label",
        DType::I64,
        stowage_core::ShapeRule::Fixed(vec![]),
    )
}

fn sample(i: usize) -> Sample {
    let x: Vec<f32> = (0..16).map(|j| (i * 16 + j) as f32 * 0.5).collect();
    Sample::new()
        .with("x", Tensor::from_slice(&[16], &x).unwrap())
        .with("label", Tensor::scalar(i as i64 - 7))
}

/// A cache of [`SAMPLES`] samples, flushed every 64, finalized or not.
fn build(factory: &dyn BackendFactory, dir: &Path, finalize: bool) -> PathBuf {
    let path = dir.join(format!("{}-{finalize}", factory.name()));
    let mut cache = factory.create(&path, &schema()).unwrap();
    for i in 0..SAMPLES {
        cache.put(&format!("key-{i:04}"), &sample(i)).unwrap();
        if i % 64 == 63 {
            cache.flush().unwrap();
        }
    }
    match finalize {
        true => cache.finalize().unwrap(),
        false => cache.flush().unwrap(),
    }
    path
}

/// Every regular file under `root`, relative to it.
fn files(root: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else {
                out.push(path.strip_prefix(root).unwrap().to_path_buf());
            }
        }
    }
    out.sort();
    out
}

#[derive(Debug, Clone, Copy)]
enum Damage {
    Delete,
    Empty,
    Half,
    /// Cut to 228 bytes (the length at which a review found a truncated log read as empty).
    Cut228,
    FlipMiddle,
}

fn damage(file: &Path, how: Damage) -> bool {
    let len = std::fs::metadata(file).unwrap().len();
    match how {
        Damage::Delete => std::fs::remove_file(file).unwrap(),
        Damage::Empty => truncate(file, 0).unwrap(),
        Damage::Half if len >= 2 => truncate(file, len / 2).unwrap(),
        Damage::Cut228 if len > 228 => truncate(file, 228).unwrap(),
        Damage::FlipMiddle if len > 0 => {
            let mut bytes = std::fs::read(file).unwrap();
            bytes[(len / 2) as usize] ^= 0x5a;
            std::fs::write(file, bytes).unwrap();
        }
        _ => return false,
    }
    true
}

/// What the backend itself says: `None` when `validate(Full)` is clean.
fn backend_verdict(factory: &dyn BackendFactory, cache: &Path) -> Option<String> {
    match factory.open(cache, OpenMode::ReadOnly) {
        Err(e) => Some(format!("open: {e}")),
        Ok(backend) => match backend.validate(ValidationLevel::Full) {
            Err(e) => Some(format!("validate: {e}")),
            Ok(report) if report.is_undamaged() => None,
            Ok(report) => Some(format!("{} problems, first: {:?}", report.problems.len(), {
                report.problems[0].to_string()
            })),
        },
    }
}

fn check_backend(factory: &dyn BackendFactory) {
    let dir = tempfile::tempdir().unwrap();
    let mut failures = Vec::new();
    let mut trials = 0;
    for finalize in [true, false] {
        let pristine = build(factory, dir.path(), finalize);
        let run = stowage(args(&[&"verify", &pristine]));
        assert_eq!(run.code, 0, "{}: the pristine cache: {run:?}", factory.name());
        damage_each_file(
            factory,
            &pristine,
            &dir.path().join("damaged"),
            &mut failures,
            &mut trials,
        );
    }
    assert!(trials >= 20, "{}: only {trials} damaged copies", factory.name());
    assert!(failures.is_empty(), "{} failures:\n{}", failures.len(), failures.join("\n"));
}

/// Damages a copy of `pristine` at `copy` in every way, one file at a time, and records where
/// `verify` and `validate(Full)` disagree.
fn damage_each_file(
    factory: &dyn BackendFactory,
    pristine: &Path,
    copy: &Path,
    failures: &mut Vec<String>,
    trials: &mut usize,
) {
    for file in files(pristine) {
        for how in [Damage::Delete, Damage::Empty, Damage::Half, Damage::Cut228, Damage::FlipMiddle]
        {
            let _ = std::fs::remove_dir_all(copy);
            copy_tree(pristine, copy).unwrap();
            if !damage(&copy.join(&file), how) {
                continue;
            }
            *trials += 1;
            let seen = backend_verdict(factory, copy);
            let run = stowage(args(&[&"verify", &copy]));
            let Some(seen) = seen else {
                // Nothing damaged that the backend reads (a lock file, say): no problem either.
                if !matches!(run.code, 0 | 3) {
                    failures.push(format!(
                        "{} {how:?} {}: validate(Full) is clean, but verify exits {}:\n{}",
                        factory.name(),
                        file.display(),
                        run.code,
                        run.stdout
                    ));
                }
                continue;
            };
            if !matches!(run.code, 1 | 2) {
                failures.push(format!(
                    "{} {how:?} {}: validate(Full) sees {seen}, but verify exits {}:\n{}",
                    factory.name(),
                    file.display(),
                    run.code,
                    run.stdout
                ));
            }
        }
    }
}

#[test]
fn verify_reports_every_damage_an_arrow_cache_validate_sees() {
    check_backend(&stowage_arrow::ArrowFactory::default());
}

#[test]
fn verify_reports_every_damage_a_memmap_cache_validate_sees() {
    check_backend(&stowage_memmap::MemmapFactory::default());
}

#[test]
fn verify_reports_every_damage_an_npy_cache_validate_sees() {
    check_backend(&stowage_npy::NpyFactory::default());
}

#[test]
fn verify_reports_every_damage_an_hdf5_cache_validate_sees() {
    check_backend(&stowage_hdf5::Hdf5Factory);
}
