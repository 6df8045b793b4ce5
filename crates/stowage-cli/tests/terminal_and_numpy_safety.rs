//! What the CLI prints and writes stays safe when the cache's contents are hostile: keys that
//! would reorder or hide text on a terminal are escaped, and `get` refuses to write an `.npy`
//! that numpy cannot load.

mod common;

use common::*;
use stowage_core::{BackendFactory, DType, Sample, Schema, ShapeRule, Tensor};

#[test]
fn keys_with_bidirectional_overrides_are_printed_escaped() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cache");
    let schema = Schema::new().tensor("x", DType::U8, ShapeRule::Fixed(vec![1]));
    let mut cache = stowage_arrow::ArrowFactory::default().create(&path, &schema).unwrap();
    let sample = Sample::new().with("x", Tensor::from_slice(&[1], &[1u8]).unwrap());
    for key in ["plain", "invoice\u{202e}fdp.exe", "a\u{2067}b", "bell\u{7}"] {
        cache.put(key, &sample).unwrap();
    }
    cache.finalize().unwrap();
    drop(cache);
    let run = stowage(args(&[&"keys", &path]));
    assert_eq!(run.code, 0, "{run:?}");
    let mut lines: Vec<&str> = run.stdout.lines().collect();
    lines.sort_unstable();
    assert_eq!(
        lines,
        ["\"a\\u{2067}b\"", "\"bell\\u{7}\"", "\"invoice\\u{202e}fdp.exe\"", "plain"]
    );
    assert!(!run.stdout.contains('\u{202e}') && !run.stdout.contains('\u{7}'));
}

#[test]
fn get_refuses_a_shape_numpy_cannot_load_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cache");
    let schema = Schema::new().tensor("ok", DType::U8, ShapeRule::Fixed(vec![2])).tensor(
        "huge",
        DType::F32,
        ShapeRule::Any,
    );
    let mut cache = stowage_arrow::ArrowFactory::default().create(&path, &schema).unwrap();
    // No byte, but numpy multiplies the non-zero dimensions: 2^70 * 4 bytes.
    let sample = Sample::new()
        .with("ok", Tensor::from_slice(&[2], &[1u8, 2]).unwrap())
        .with("huge", Tensor::zeros(DType::F32, &[0, 1 << 40, 1 << 30]).unwrap());
    cache.put("k", &sample).unwrap();
    cache.finalize().unwrap();
    drop(cache);
    let out = dir.path().join("out");
    let run = stowage(args(&[&"get", &path, &"k", &"--out", &out]));
    assert_error_line(&run, &["key \"k\"", "field \"huge\"", "(0, 1099511627776, 1073741824)"]);
    assert!(!out.exists(), "nothing written");
}
