//! A rank writing an inbox (`ArrowOptions::rank_inboxes`) killed with `kill -9` after a flush
//! loses nothing it flushed: the writer rank's finalize ingests it. (Its unflushed puts are
//! lost, as any unflushed put is.)
//!
//! One test in a binary of its own: it forks.

use std::time::{Duration, Instant};

use stowage_arrow::{ArrowBackend, ArrowOptions};
use stowage_core::ValidationLevel;
use stowage_core::{Backend, DType, OpenMode, Reader, Sample, Schema, ShapeRule, Tensor};
use stowage_test_support::fork::{Ended, fork_child, kill_child, wait_child};

const FLUSHED: usize = 300;

fn sample(i: usize) -> Sample {
    Sample::new().with("tensor", Tensor::from_slice(&[2], &[i as f32, -(i as f32)]).unwrap())
}

fn options(rank: u32) -> ArrowOptions {
    ArrowOptions { rank: Some(rank), rank_inboxes: true, flush_every: 64, ..Default::default() }
}

#[test]
fn a_killed_rank_loses_nothing_it_flushed() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("cache");
    let flushed = tmp.path().join("flushed");
    let schema = Schema::new().tensor("tensor", DType::F32, ShapeRule::Any);
    let mut writer = ArrowBackend::create(&dir, &schema, options(0)).unwrap();
    writer.put("writer-key", &sample(0)).unwrap();
    writer.flush().unwrap();

    let child = {
        let (dir, flushed) = (dir.clone(), flushed.clone());
        fork_child(60, move || {
            let mut rank = ArrowBackend::open(&dir, OpenMode::Append, options(2)).unwrap();
            for i in 0..FLUSHED {
                rank.put(&format!("rank2-{i}"), &sample(i)).unwrap();
            }
            rank.flush().unwrap();
            // Put but never flushed: lost with the process.
            rank.put("rank2-unflushed", &sample(9999)).unwrap();
            std::fs::write(&flushed, b"").unwrap();
            loop {
                std::thread::sleep(Duration::from_millis(100));
            }
        })
    };
    let deadline = Instant::now() + Duration::from_secs(50);
    while !flushed.exists() {
        assert!(Instant::now() < deadline, "the rank never flushed");
        std::thread::sleep(Duration::from_millis(10));
    }
    kill_child(child);
    assert_eq!(wait_child(child), Ended::Signaled(9));

    writer.finalize().unwrap();
    drop(writer);
    let reader = ArrowBackend::open(&dir, OpenMode::ReadOnly, ArrowOptions::default()).unwrap();
    assert_eq!(reader.len(), FLUSHED + 1);
    for i in 0..FLUSHED {
        assert_eq!(reader.get(&format!("rank2-{i}")).unwrap(), Some(sample(i)), "{i}");
    }
    assert!(!reader.contains("rank2-unflushed").unwrap());
    assert!(reader.validate(ValidationLevel::Full).unwrap().is_clean());

    // The rank restarts: its inbox opens again (the dead process's lock is gone) and goes on.
    let mut rank = ArrowBackend::open(&dir, OpenMode::Append, options(2)).unwrap();
    assert_eq!(rank.get("rank2-0").unwrap(), Some(sample(0)));
    rank.put("rank2-after", &sample(1)).unwrap();
    rank.flush().unwrap();
}
