//! A read-only open racing the writer's finalize: it must see the unfinished or the finished
//! cache, never report the log as corrupted. (The open read the record log, finalize appended its
//! record and wrote `_COMPLETE`, and the open then compared the older log with the newer marker;
//! the same race the concurrency campaign of stowage-reliability found in stowage-example.)

use std::sync::atomic::{AtomicBool, Ordering};
use stowage_core::{Backend, DType, Sample, Schema, ShapeRule, Tensor};
use stowage_npy::{NpyBackend, NpyOptions};

#[test]
fn a_reader_opening_during_finalize_never_sees_corruption() {
    let schema = Schema::new().tensor("x", DType::U8, ShapeRule::Fixed(vec![64]));
    let sample = Sample::new().with("x", Tensor::from_slice(&[64], &[7u8; 64]).unwrap());
    for round in 0..30 {
        let dir = tempfile::tempdir().unwrap();
        let mut cache = NpyBackend::create(dir.path(), &schema, NpyOptions::default()).unwrap();
        for i in 0..300 {
            cache.put(&format!("k{i}"), &sample).unwrap();
        }
        cache.flush().unwrap();
        let finished = AtomicBool::new(false);
        std::thread::scope(|scope| {
            let readers: Vec<_> = (0..2)
                .map(|_| {
                    scope.spawn(|| {
                        let mut opens = 0;
                        while !finished.load(Ordering::Acquire) || opens == 0 {
                            let reader =
                                NpyBackend::open_read_only(dir.path(), NpyOptions::default())
                                    .unwrap_or_else(|e| {
                                        panic!("round {round}: open during finalize: {e}")
                                    });
                            assert_eq!(reader.len(), 300, "round {round}");
                            opens += 1;
                        }
                    })
                })
                .collect();
            std::thread::sleep(std::time::Duration::from_millis(2));
            cache.finalize().unwrap();
            finished.store(true, Ordering::Release);
            for reader in readers {
                reader.join().unwrap();
            }
        });
    }
}
