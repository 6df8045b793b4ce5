//! Rank inboxes (`ArrowOptions::rank_inboxes`): four ranks write one cache at once on one
//! machine, rank 0 the writer rank; ranks 1-3 put into their inboxes, which rank 0 ingests at
//! its flushes and its finalize: a fresh reader then reads every put. Without the option a rank
//! other than the writer rank still refuses every put.
//!
//! (A rank killed with `kill -9` after a flush: `tests/rank_inbox_kill.rs`, a binary of its own
//! as it forks.)

use std::path::Path;
use std::sync::{Arc, Barrier};

use stowage_arrow::{ArrowBackend, ArrowOptions, TorchcachexReader};
use stowage_core::{
    Backend, BackendFactory, DType, Error, OpenMode, Reader, Sample, Schema, ShapeRule, Tensor,
    ValidationLevel,
};

const RANKS: u32 = 4;
const PER_RANK: usize = 200;

fn schema() -> Schema {
    Schema::new().tensor("tensor", DType::F32, ShapeRule::Any)
}

fn key(rank: u32, i: usize) -> String {
    format!("rank{rank}-key{i:04}")
}

fn sample(rank: u32, i: usize) -> Sample {
    let values = [rank as f32, i as f32, (rank as usize * 1000 + i) as f32];
    Sample::new().with("tensor", Tensor::from_slice(&[3], &values).unwrap())
}

/// Small segments and frequent key index merges, so that the writer rank reads inboxes while
/// their ranks write segments and merge.
fn options(rank: u32) -> ArrowOptions {
    ArrowOptions {
        rank: Some(rank),
        rank_inboxes: true,
        flush_every: 16,
        merge_after: 3,
        ..Default::default()
    }
}

/// Rank `rank`'s run: its own keys, flushed every 50 puts; reads its own puts back at once.
fn other_rank(dir: &Path, rank: u32, start: &Barrier) {
    start.wait();
    // Before or after the writer rank created the cache: either way the handle writes.
    let mut cache = ArrowBackend::create(dir, &schema(), options(rank)).unwrap();
    assert!(!cache.is_writer());
    for i in 0..PER_RANK {
        cache.put(&key(rank, i), &sample(rank, i)).unwrap();
        if i % 50 == 49 {
            cache.flush().unwrap();
        }
    }
    // Its own puts, flushed, read back through the handle (the inbox first).
    assert_eq!(cache.get(&key(rank, 7)).unwrap(), Some(sample(rank, 7)));
    assert!(cache.contains(&key(rank, PER_RANK - 1)).unwrap());
    assert!(cache.len() >= PER_RANK);
    let batch = cache.get_batch(&[&key(rank, 0), "missing", &key(rank, 1)]).unwrap();
    assert_eq!(batch, [Some(sample(rank, 0)), None, Some(sample(rank, 1))]);
    // Only the writer rank finalizes the cache: here it flushes the inbox.
    cache.finalize().unwrap();
}

#[test]
fn four_ranks_write_one_cache_and_the_writer_ingests_every_put() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("cache");
    let start = Arc::new(Barrier::new(RANKS as usize));
    let others: Vec<_> = (1..RANKS)
        .map(|rank| {
            let (dir, start) = (dir.clone(), start.clone());
            std::thread::spawn(move || other_rank(&dir, rank, &start))
        })
        .collect();
    start.wait();
    let mut writer = ArrowBackend::create(&dir, &schema(), options(0)).unwrap();
    assert!(writer.is_writer());
    for i in 0..PER_RANK {
        writer.put(&key(0, i), &sample(0, i)).unwrap();
        // Frequent flushes: each ingests what the other ranks flushed so far.
        if i % 10 == 9 {
            writer.flush().unwrap();
        }
    }
    writer.flush().unwrap();
    for other in others {
        other.join().unwrap();
    }
    writer.finalize().unwrap();
    assert!(writer.is_finalized());
    assert_eq!(writer.len(), RANKS as usize * PER_RANK);
    drop(writer);

    let reader = ArrowBackend::open(&dir, OpenMode::ReadOnly, ArrowOptions::default()).unwrap();
    assert_eq!(reader.len(), RANKS as usize * PER_RANK);
    let mut keys = reader.keys().unwrap();
    keys.sort();
    let mut expected: Vec<String> =
        (0..RANKS).flat_map(|r| (0..PER_RANK).map(move |i| key(r, i))).collect();
    expected.sort();
    assert_eq!(keys, expected);
    for rank in 0..RANKS {
        for i in 0..PER_RANK {
            assert_eq!(reader.get(&key(rank, i)).unwrap(), Some(sample(rank, i)), "{rank}/{i}");
        }
    }
    let report = reader.validate(ValidationLevel::Full).unwrap();
    assert!(report.is_clean(), "{report:?}");
    assert!(reader.is_finalized());
    // The inboxes are no part of the cache's own files: it is recognized as before.
    let factory = stowage_arrow::ArrowFactory::default();
    let format = factory.recognize(&dir).unwrap().unwrap();
    assert_eq!(format.id, stowage_arrow::STOWAGE_ARROW.id);
    reader.describe().unwrap();
    // torchcachex's layout is untouched by the inboxes: it reads the same keys.
    let torchcachex = TorchcachexReader::open(&dir).unwrap();
    assert_eq!(torchcachex.len(), RANKS as usize * PER_RANK);
    assert_eq!(torchcachex.get(&key(2, 5)).unwrap(), Some(sample(2, 5)));
    // The inboxes are left as their ranks wrote them.
    for rank in 1..RANKS {
        let inbox = dir.join(format!("stowage-ranks/rank-{rank}"));
        let inbox = ArrowBackend::open(&inbox, OpenMode::ReadOnly, ArrowOptions::default());
        assert_eq!(inbox.unwrap().len(), PER_RANK);
    }
    // A writer reopening the cache appends and finds nothing new to ingest.
    let mut again = ArrowBackend::open(&dir, OpenMode::Append, options(0)).unwrap();
    again.flush().unwrap();
    assert_eq!(again.len(), RANKS as usize * PER_RANK);
}

#[test]
fn the_first_sample_to_reach_the_cache_wins_and_readers_see_inboxes_once_ingested() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("cache");
    let mut writer = ArrowBackend::create(&dir, &schema(), options(0)).unwrap();
    writer.put("shared", &sample(0, 1)).unwrap();
    writer.flush().unwrap();
    let mut rank1 = ArrowBackend::open(&dir, OpenMode::Append, options(1)).unwrap();
    rank1.put("shared", &sample(1, 1)).unwrap();
    rank1.put("only-1", &sample(1, 2)).unwrap();
    // Its own sample wins on its handle; a key in both counts once.
    assert_eq!(rank1.get("shared").unwrap(), Some(sample(1, 1)));
    assert_eq!(rank1.len(), 2);
    rank1.flush().unwrap();
    assert_eq!(rank1.pending(), 0);
    // The cache's other writes stay the writer rank's.
    let refused = rank1.merge_index().unwrap_err();
    assert!(refused.to_string().contains("only rank 0 writes"), "{refused}");

    // Not ingested yet: a reader of the cache does not see the inbox.
    let reader = ArrowBackend::open(&dir, OpenMode::ReadOnly, ArrowOptions::default()).unwrap();
    assert!(!reader.contains("only-1").unwrap());
    writer.flush().unwrap();
    let reader = ArrowBackend::open(&dir, OpenMode::ReadOnly, ArrowOptions::default()).unwrap();
    assert_eq!(reader.get("only-1").unwrap(), Some(sample(1, 2)));
    // The cache held "shared" first: the inbox's sample is left.
    assert_eq!(reader.get("shared").unwrap(), Some(sample(0, 1)));
    assert_eq!(reader.len(), 2);

    // The next flush of the rank: the writer's next flush takes what is new.
    rank1.put("second", &sample(1, 4)).unwrap();
    rank1.flush().unwrap();
    writer.flush().unwrap();
    let reader = ArrowBackend::open(&dir, OpenMode::ReadOnly, ArrowOptions::default()).unwrap();
    assert_eq!(reader.get("second").unwrap(), Some(sample(1, 4)));
    assert_eq!(reader.len(), 3);

    // A writer opened without the option ingests nothing.
    drop(writer);
    rank1.put("late", &sample(1, 3)).unwrap();
    rank1.flush().unwrap();
    let plain = ArrowOptions { rank: Some(0), ..Default::default() };
    let mut writer = ArrowBackend::open(&dir, OpenMode::Append, plain).unwrap();
    writer.finalize().unwrap();
    assert!(!writer.contains("late").unwrap());
}

#[test]
fn without_the_option_another_rank_still_refuses_every_put() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("cache");
    let writer_options = ArrowOptions { rank: Some(0), ..Default::default() };
    let _writer = ArrowBackend::create(&dir, &schema(), writer_options).unwrap();
    let other = ArrowOptions { rank: Some(1), ..Default::default() };
    let mut rank1 = ArrowBackend::open(&dir, OpenMode::Append, other).unwrap();
    let refused = rank1.put("k", &sample(1, 0)).unwrap_err();
    assert!(matches!(refused, Error::Unsupported { .. }), "{refused:?}");
    assert!(refused.to_string().contains("rank 1"), "{refused}");
    assert!(rank1.finalize().is_err());
    rank1.flush().unwrap();
    assert!(!dir.join("stowage-ranks").exists());
}
