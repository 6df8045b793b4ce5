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
