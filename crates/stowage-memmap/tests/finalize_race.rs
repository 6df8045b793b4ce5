//! A read-only open racing a finalize: the finalize removes `manifest.jsonl` just before it
//! writes `_COMPLETE`, and a reader that saw the manifest and lost it meanwhile must open what
//! the finalize left, never fail with "No such file or directory" (found by the realistic
//! concurrency campaign: 1 round in 20).

use std::sync::atomic::{AtomicBool, Ordering};
use stowage_core::{Backend, DType, Reader, Sample, Schema, ShapeRule, Tensor};
use stowage_memmap::{MemmapBackend, MemmapOptions};

#[test]
fn readers_opening_during_finalize_always_open() {
    let dir = tempfile::tempdir().unwrap();
    let schema = Schema::new().tensor("x", DType::F32, ShapeRule::Fixed(vec![64]));
    let mut opens = 0u64;
    for round in 0..60 {
        let path = dir.path().join(format!("cache-{round}"));
        let mut cache = MemmapBackend::create(&path, &schema, MemmapOptions::default()).unwrap();
        for i in 0..200 {
            let x = Tensor::from_slice(&[64], &[i as f32; 64]).unwrap();
            cache.put(&format!("k{i}"), &Sample::new().with("x", x)).unwrap();
        }
        cache.flush().unwrap();
        let done = AtomicBool::new(false);
        std::thread::scope(|scope| {
            let readers: Vec<_> = (0..2)
                .map(|_| {
                    scope.spawn(|| {
                        let mut n = 0u64;
                        while !done.load(Ordering::Acquire) {
                            let reader =
                                MemmapBackend::open_read_only(&path, MemmapOptions::default())
                                    .unwrap_or_else(|e| {
                                        panic!("round {round}: open during finalize: {e}")
                                    });
                            assert_eq!(reader.len(), 200, "round {round}");
                            n += 1;
                        }
                        n
                    })
                })
                .collect();
            cache.finalize().unwrap();
            done.store(true, Ordering::Release);
            opens += readers.into_iter().map(|r| r.join().unwrap()).sum::<u64>();
        });
    }
    assert!(opens > 60, "the readers opened {opens} times");
}

/// A read-only handle opened on the unfinished cache keeps serving the rows it saw after a
/// writer finalized and removed `manifest.jsonl`: `keys`, the row index and `validate` read them
/// back through the manifest it opened, not the path (found by the live concurrency campaign:
/// "manifest.jsonl holds 0 rows, the key index covers 694"). With key index runs covering part
/// of the rows (`key_index_tail` 64) and without them (the whole manifest replayed).
#[test]
fn a_reader_opened_before_a_finalize_still_reads_its_rows() {
    let schema = Schema::new().tensor("x", DType::F32, ShapeRule::Fixed(vec![4]));
    for key_index_tail in [64, usize::MAX] {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("cache");
        let options = MemmapOptions { key_index_tail, ..MemmapOptions::default() };
        let mut cache = MemmapBackend::create(&path, &schema, options.clone()).unwrap();
        for i in 0..200 {
            let x = Tensor::from_slice(&[4], &[i as f32; 4]).unwrap();
            cache.put(&format!("k{i}"), &Sample::new().with("x", x)).unwrap();
            if i % 50 == 49 {
                cache.flush().unwrap();
            }
        }
        let reader = MemmapBackend::open_read_only(&path, options.clone()).unwrap();
        let x = Tensor::from_slice(&[4], &[200f32; 4]).unwrap();
        cache.put("k200", &Sample::new().with("x", x)).unwrap();
        cache.finalize().unwrap();
        assert!(!path.join("manifest.jsonl").exists(), "finalize removes the manifest");

        let what = format!("key_index_tail {key_index_tail}");
        let mut keys = reader.keys().unwrap_or_else(|e| panic!("{what}: keys: {e}"));
        keys.sort_by_key(|k| k[1..].parse::<usize>().unwrap());
        let expected: Vec<String> = (0..200).map(|i| format!("k{i}")).collect();
        assert_eq!(keys, expected, "{what}: the rows the handle saw, not the finalized 201");
        let index = reader.try_index().unwrap_or_else(|e| panic!("{what}: index: {e}"));
        assert_eq!(index.len(), 200, "{what}");
        let report = reader.validate(stowage_core::ValidationLevel::Full).unwrap();
        assert!(report.is_clean(), "{what}: {report:?}");
        assert_eq!(report.samples_checked, 200, "{what}");
        let sample = reader.get("k199").unwrap().expect("k199 was committed before the open");
        let x = sample.get("x").and_then(|v| v.as_tensor()).expect("x is a tensor");
        assert_eq!(x.to_vec::<f32>().unwrap(), [199f32; 4], "{what}");
    }
}
