//! The write path of `ArrowBackend`: segment size bound, ranks, background flushing and its
//! errors, crash leftovers, finalize and append, the key index runs.

use std::path::Path;

use stowage_arrow::test_support::commit_log;
use stowage_arrow::{ArrowBackend, ArrowOptions};
use stowage_core::{
    Backend, BackendExt, DType, Error, OpenMode, Reader, Sample, Schema, ShapeRule, Tensor,
};

fn schema() -> Schema {
    Schema::new().tensor("tensor", DType::F32, ShapeRule::Fixed(vec![64]))
}

fn sample(i: usize) -> Sample {
    let values: Vec<f32> = (0..64).map(|j| (i * 64 + j) as f32).collect();
    Sample::new().with("tensor", Tensor::from_slice(&[64], &values).unwrap())
}

fn key(i: usize) -> String {
    format!("sample-{i:05}")
}

fn options() -> ArrowOptions {
    ArrowOptions { rank: Some(0), ..ArrowOptions::default() }
}

fn put_range(cache: &mut ArrowBackend, range: std::ops::Range<usize>) {
    for i in range {
        cache.put(&key(i), &sample(i)).unwrap();
    }
}

fn check_range(cache: &dyn Backend, range: std::ops::Range<usize>) {
    for i in range {
        let got = cache.get(&key(i)).unwrap().unwrap_or_else(|| panic!("{} missing", key(i)));
        assert_eq!(
            got.tensor("tensor").unwrap().bytes(),
            sample(i).tensor("tensor").unwrap().bytes()
        );
    }
}

fn committed_segments(dir: &Path) -> usize {
    commit_log::read(&dir.join("stowage.log")).unwrap().segments.len()
}

#[test]
fn a_large_batch_is_split_into_bounded_segments() {
    let dir = tempfile::tempdir().unwrap();
    // 256 B + key per row: about 10 rows per segment.
    let bounded = ArrowOptions { max_segment_bytes: 2800, ..options() };
    let mut cache = ArrowBackend::create(dir.path(), &schema(), bounded).unwrap();
    let keys: Vec<String> = (0..100).map(key).collect();
    let samples: Vec<Sample> = (0..100).map(sample).collect();
    cache.put_batch(keys.iter().map(String::as_str).zip(&samples)).unwrap();
    cache.flush().unwrap();
    let segments = commit_log::read(&dir.path().join("stowage.log")).unwrap().segments;
    assert!(segments.len() >= 9, "{} segments for 100 rows of 2800-byte bounds", segments.len());
    assert!(segments.iter().all(|s| s.rows <= 11), "{segments:?}");
    assert_eq!(segments.iter().map(|s| s.rows).sum::<u64>(), 100);
    check_range(&ArrowBackend::open(dir.path(), OpenMode::ReadOnly, options()).unwrap(), 0..100);
}

/// Asserts `result` is the refusal of `operation` on rank 1 of a cache rank 0 writes.
fn assert_other_rank_refusal(result: stowage_core::Result<()>, operation: &str) {
    match result {
        Err(Error::Unsupported { backend, operation: why }) => {
            assert_eq!(backend, "arrow", "{why}");
            assert!(
                why.starts_with(&format!("{operation} on rank 1: only rank 0 writes")),
                "{why}"
            );
            assert!(why.contains("never be made durable"), "{why}");
        }
        other => panic!("{operation} on rank 1: {other:?}, not Unsupported"),
    }
}

/// A rank other than the writer rank (torchcachex's multi-rank rule) never writes a file, and
/// never takes a put it could not make durable: put and finalize are refused naming the rank,
/// flush has nothing to make durable.
#[test]
fn other_ranks_refuse_writes_and_never_write_a_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cache");
    let rank1 = ArrowOptions { rank: Some(1), ..ArrowOptions::default() };
    let mut other = ArrowBackend::create(&path, &schema(), rank1.clone()).unwrap();
    assert!(!other.is_writer());
    assert_other_rank_refusal(other.put(&key(0), &sample(0)), "put");
    assert!(!other.contains(&key(0)).unwrap() && other.is_empty(), "a refused put was kept");
    other.flush().unwrap();
    assert_other_rank_refusal(other.finalize(), "finalize");
    assert!(!other.is_finalized());
    drop(other);
    assert!(!path.exists(), "a non-writer rank created {}", path.display());

    let mut writer = ArrowBackend::create(&path, &schema(), options()).unwrap();
    put_range(&mut writer, 0..10);
    writer.flush().unwrap();
    drop(writer);
    let before = listing(&path);
    let mut other = ArrowBackend::open(&path, OpenMode::Append, rank1).unwrap();
    check_range(&other, 0..10);
    assert_other_rank_refusal(other.put(&key(10), &sample(10)), "put");
    assert!(other.get(&key(10)).unwrap().is_none(), "a refused put reads back");
    other.flush().unwrap();
    assert_eq!(listing(&path), before, "a flush after a refused put changed the cache");
    assert_other_rank_refusal(other.finalize(), "finalize");
    assert_other_rank_refusal(other.compact(u64::MAX).map(drop), "compact");
    assert_other_rank_refusal(other.merge_index(), "merge the key index");
    assert_other_rank_refusal(other.adopt().map(drop), "adopt");
    assert_eq!(other.len(), 10);
    drop(other);
    assert_eq!(listing(&path), before, "a non-writer rank changed the cache");
}

/// Every file with its size and modification time.
fn listing(dir: &Path) -> Vec<(String, u64, std::time::SystemTime)> {
    let mut files = Vec::new();
    for entry in walk(dir) {
        let meta = std::fs::metadata(&entry).unwrap();
        files.push((entry.display().to_string(), meta.len(), meta.modified().unwrap()));
    }
    files.sort();
    files
}

fn walk(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        if entry.file_type().unwrap().is_dir() {
            out.extend(walk(&entry.path()));
        } else {
            out.push(entry.path());
        }
    }
    out
}

#[test]
fn background_flushes_are_all_written_by_flush_and_by_drop() {
    let dir = tempfile::tempdir().unwrap();
    let options = ArrowOptions { flush_every: 100, background_flush: true, ..options() };
    let mut cache = ArrowBackend::create(dir.path(), &schema(), options.clone()).unwrap();
    put_range(&mut cache, 0..1000);
    check_range(&cache, 0..1000); // pending, in flight or committed: all readable
    cache.flush().unwrap();
    assert_eq!(committed_segments(dir.path()), 10, "flush waits for every queued segment");
    put_range(&mut cache, 1000..1300); // three segments queued, never flushed
    drop(cache);
    let reader = ArrowBackend::open(dir.path(), OpenMode::ReadOnly, options).unwrap();
    assert_eq!(reader.len(), 1300, "dropping the handle lost queued samples");
    check_range(&reader, 0..1300);
}

#[test]
fn a_failed_background_write_is_reported_and_refuses_more_writes() {
    for background_flush in [true, false] {
        let dir = tempfile::tempdir().unwrap();
        let options = ArrowOptions { flush_every: 10, background_flush, ..options() };
        let mut cache = ArrowBackend::create(dir.path(), &schema(), options).unwrap();
        put_range(&mut cache, 0..10);
        cache.flush().unwrap();
        // Segments can no longer be written: `segments` becomes a file.
        let segments = dir.path().join("segments");
        std::fs::rename(&segments, dir.path().join("moved")).unwrap();
        std::fs::write(&segments, b"in the way").unwrap();
        let mut results = Vec::new();
        for i in 10..40 {
            results.push(cache.put(&key(i), &sample(i)));
        }
        let flushed = cache.flush();
        let first_error = results.iter().position(Result::is_err);
        assert!(
            first_error.is_some() || flushed.is_err(),
            "background {background_flush}: no call reported the failed write"
        );
        assert!(flushed.is_err(), "flush reported success after a failed write");
        let again = cache.put(&key(99), &sample(99)).unwrap_err();
        assert!(matches!(again, Error::Poisoned { .. }), "{again:?}");
        assert!(matches!(cache.flush().unwrap_err(), Error::Poisoned { .. }));
    }
}

#[test]
fn crash_leftovers_are_ignored_by_readers_and_removed_by_the_next_writer() {
    let dir = tempfile::tempdir().unwrap();
    let options = ArrowOptions { flush_every: 10, ..options() };
    let mut cache = ArrowBackend::create(dir.path(), &schema(), options.clone()).unwrap();
    put_range(&mut cache, 0..20);
    drop(cache);
    // A segment renamed into place whose commit record never became durable: written by a
    // session whose record is then cut off the log.
    let log = dir.path().join("stowage.log");
    let committed = std::fs::metadata(&log).unwrap().len();
    let mut cache = ArrowBackend::open(dir.path(), OpenMode::Append, options.clone()).unwrap();
    put_range(&mut cache, 20..30);
    cache.flush().unwrap();
    drop(cache);
    std::fs::OpenOptions::new().write(true).open(&log).unwrap().set_len(committed).unwrap();
    // A temporary file, and sidecars whose segment's rename never happened.
    let segments = dir.path().join("segments");
    std::fs::write(segments.join(".segment_000003.arrow.tmp-1-1"), b"partial").unwrap();
    for ext in ["keys", "sums"] {
        std::fs::copy(
            segments.join(format!("segment_000002.{ext}")),
            segments.join(format!("segment_000004.{ext}")),
        )
        .unwrap();
    }
    let reader = ArrowBackend::open(dir.path(), OpenMode::ReadOnly, options.clone()).unwrap();
    assert_eq!(reader.len(), 20);
    assert!(reader.get(&key(25)).unwrap().is_none(), "a leftover's key was read");
    assert!(reader.validate(stowage_core::ValidationLevel::Full).unwrap().is_clean());
    drop(reader);
    let mut writer = ArrowBackend::open(dir.path(), OpenMode::Append, options.clone()).unwrap();
    for leftover in [
        "segment_000002.arrow",
        "segment_000002.keys",
        "segment_000002.sums",
        "segment_000004.keys",
        ".segment_000003.arrow.tmp-1-1",
    ] {
        assert!(!segments.join(leftover).exists(), "{leftover} left in place");
    }
    put_range(&mut writer, 20..30);
    writer.flush().unwrap();
    check_range(&writer, 0..30);
    assert!(writer.validate(stowage_core::ValidationLevel::Full).unwrap().is_clean());
    // No id is used twice: the new segment is above every id the directory held.
    let ids: Vec<u64> = commit_log::read(&log).unwrap().segments.iter().map(|s| s.id).collect();
    assert_eq!(ids, [0, 1, 5]);
}

#[test]
fn a_killed_writers_temporaries_in_the_cache_directory_are_removed_by_the_next_writer() {
    let dir = tempfile::tempdir().unwrap();
    // As a create killed inside the atomic write of schema.json leaves it (nothing of the cache
    // is in place yet): the next create removes it.
    let schema_temp = dir.path().join(".schema.json.tmp-4194305-0");
    std::fs::write(&schema_temp, b"{\"fie").unwrap();
    let mut cache = ArrowBackend::create(dir.path(), &schema(), options()).unwrap();
    assert!(!schema_temp.exists());
    put_range(&mut cache, 0..5);
    cache.flush().unwrap();
    drop(cache);
    // As writers killed inside a key index merge, a finalize, a create or an attach leave them
    // (named as `atomic_write` and `create` name them; no process has a pid above 2^22) ...
    let leftovers = [
        ".stowage_index_000000_000031.bin.tmp-4194305-1",
        ".schema.json.tmp-4194305-2",
        ".stowage.complete.tmp-4194305-3",
        ".stowage.log.new",
    ];
    // ... and files that are not stowage's: torchcachex's temporaries, another program's.
    let others = [
        "index.pkl.tmp",
        "segments/segment_000009.arrow.tmp",
        ".index.pkl.tmp-4194305-4",
        ".notes.txt.tmp-4194305-5",
        ".stowage_index_0.bin.tmp-4194305-6",
        "stowage_index_000000_000031.bin.tmp-1-1",
    ];
    for name in leftovers.iter().chain(&others) {
        std::fs::write(dir.path().join(name), b"partial").unwrap();
    }
    let reader = ArrowBackend::open(dir.path(), OpenMode::ReadOnly, options()).unwrap();
    check_range(&reader, 0..5);
    drop(reader);
    for name in leftovers.iter().chain(&others) {
        assert!(dir.path().join(name).exists(), "a reader removed {name}");
    }
    let mut writer = ArrowBackend::open(dir.path(), OpenMode::Append, options()).unwrap();
    for name in leftovers {
        assert!(!dir.path().join(name).exists(), "{name} left in place");
    }
    for name in others {
        assert!(dir.path().join(name).exists(), "{name} was removed");
    }
    put_range(&mut writer, 5..10);
    writer.finalize().unwrap();
    check_range(&writer, 0..10);
    assert!(writer.validate(stowage_core::ValidationLevel::Full).unwrap().is_clean());
}

#[test]
fn finalize_marks_complete_and_an_append_unmarks_it() {
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("stowage.complete");
    let mut cache = ArrowBackend::create(dir.path(), &schema(), options()).unwrap();
    put_range(&mut cache, 0..5);
    cache.finalize().unwrap();
    assert!(marker.exists());
    drop(cache);
    let mut cache = ArrowBackend::open(dir.path(), OpenMode::Append, options()).unwrap();
    assert!(cache.is_finalized());
    put_range(&mut cache, 5..8);
    cache.flush().unwrap();
    assert!(!cache.is_finalized() && !marker.exists(), "an append left the cache marked complete");
    drop(cache);
    let reader = ArrowBackend::open(dir.path(), OpenMode::ReadOnly, options()).unwrap();
    assert!(!reader.is_finalized());
    assert!(reader.validate(stowage_core::ValidationLevel::Full).unwrap().is_clean());
    // The log cut short of its `finalized` record is reported, though every sample reads.
    let mut cache = ArrowBackend::open(dir.path(), OpenMode::Append, options()).unwrap();
    cache.finalize().unwrap();
    drop(cache);
    let log = dir.path().join("stowage.log");
    let bytes = std::fs::read(&log).unwrap();
    std::fs::write(&log, &bytes[..bytes.len() - 1]).unwrap();
    let reader = ArrowBackend::open(dir.path(), OpenMode::ReadOnly, options()).unwrap();
    check_range(&reader, 0..8);
    let report = reader.validate(stowage_core::ValidationLevel::Full).unwrap();
    assert!(report.problems.iter().any(|p| p.detail.contains("cut short")), "{report:?}");
}

#[test]
fn the_merged_index_is_built_in_the_background_and_its_loss_is_reported() {
    let dir = tempfile::tempdir().unwrap();
    let options = ArrowOptions { flush_every: 10, merge_after: 3, ..options() };
    let mut cache = ArrowBackend::create(dir.path(), &schema(), options.clone()).unwrap();
    // Keys repeat across segments: the merged index must find the latest row.
    for round in 0..3 {
        for i in 0..100 {
            let value = i + round * 1000;
            cache.put(&key(i), &sample(value)).unwrap();
        }
    }
    cache.finalize().unwrap();
    let log = commit_log::read(&dir.path().join("stowage.log")).unwrap();
    assert_eq!(log.own.runs.len(), 1, "finalize merges every run and segment into one");
    let run = log.own.runs[0];
    assert_eq!((run.first, run.through, run.keys, run.new_keys), (0, 29, 100, 100));
    assert_eq!(cache.reader().runs_through(), Some(29));
    assert_eq!(cache.reader().unmerged_segments(), 0, "finalize merges what is left");
    drop(cache);
    let run_files: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| name.starts_with("stowage_index"))
        .collect();
    assert_eq!(run_files, ["stowage_index_000000_000029.bin"], "replaced runs are deleted");
    let reader = ArrowBackend::open(dir.path(), OpenMode::ReadOnly, options.clone()).unwrap();
    assert_eq!(reader.reader().unmerged_segments(), 0, "a lookup probes the one run only");
    assert_eq!(reader.len(), 100);
    for i in 0..100 {
        let got = reader.get(&key(i)).unwrap().unwrap();
        assert_eq!(
            got.tensor("tensor").unwrap().bytes(),
            sample(i + 2000).tensor("tensor").unwrap().bytes()
        );
    }
    assert!(reader.validate(stowage_core::ValidationLevel::Full).unwrap().is_clean());
    drop(reader);
    std::fs::remove_file(dir.path().join(&run_files[0])).unwrap();
    let reader = ArrowBackend::open(dir.path(), OpenMode::ReadOnly, options.clone()).unwrap();
    assert_eq!(reader.len(), 100, "the sidecars still find every key");
    let report = reader.validate(stowage_core::ValidationLevel::Full).unwrap();
    assert!(
        report.problems.iter().any(|p| p.path.as_ref().is_some_and(|p| p.ends_with(&run_files[0]))),
        "{report:?}"
    );
    drop(reader);
    let mut writer = ArrowBackend::open(dir.path(), OpenMode::Append, options).unwrap();
    writer.merge_index().unwrap();
    assert!(writer.validate(stowage_core::ValidationLevel::Full).unwrap().is_clean());
}

/// A writer indexes every segment it commits without keeping it open: each open segment keeps
/// its parsed metadata on the heap, so a writer that kept them grew with the cache (60 MiB of
/// heap at 10 M keys). Reads open what they read.
#[test]
fn a_writer_keeps_no_segment_open_that_it_did_not_read() {
    let dir = tempfile::tempdir().unwrap();
    let options = ArrowOptions { flush_every: 5, merge_after: 1000, ..options() };
    let mut cache = ArrowBackend::create(dir.path(), &schema(), options).unwrap();
    put_range(&mut cache, 0..100);
    cache.flush().unwrap();
    assert_eq!(committed_segments(dir.path()), 20);
    assert_eq!(cache.reader().open_segment_count(), 0);
    check_range(&cache, 0..10);
    assert_eq!(cache.reader().open_segment_count(), 2, "the two segments read");
}

/// A key the key index run covers, in a segment that no longer reads, is an error naming the
/// key and the segment, never "absent": `get`, `contains` and `get_batch` say the cache is
/// damaged instead of letting the caller recompute over it. Keys of healthy segments still read.
#[test]
fn a_covered_key_in_an_unreadable_segment_is_an_error_not_absent() {
    let dir = tempfile::tempdir().unwrap();
    let options = ArrowOptions { flush_every: 10, merge_after: 3, ..options() };
    let mut cache = ArrowBackend::create(dir.path(), &schema(), options.clone()).unwrap();
    put_range(&mut cache, 0..40);
    cache.finalize().unwrap();
    drop(cache);
    let layout = stowage_arrow::test_support::layout::Layout::new(dir.path());
    let damaged = layout.segment(1);
    let bytes = std::fs::read(&damaged).unwrap();
    std::fs::write(&damaged, &bytes[..bytes.len() / 2]).unwrap();

    let reader = ArrowBackend::open(dir.path(), OpenMode::ReadOnly, options).unwrap();
    assert_eq!(reader.reader().unmerged_segments(), 0, "every segment is covered by the run");
    // Segment 1 holds keys 10..20 (10 rows per flush).
    let err = reader.get(&key(12)).unwrap_err();
    let named = damaged.file_name().unwrap().to_string_lossy().into_owned();
    assert!(matches!(&err, Error::Corrupted { key: Some(k), .. } if *k == key(12)), "{err}");
    assert!(err.to_string().contains(&named), "{err}");
    assert!(reader.contains(&key(12)).is_err(), "contains must not say absent");
    let k12 = key(12);
    assert!(reader.get_batch(&[k12.as_str()]).is_err());
    check_range(&reader, 0..10);
    check_range(&reader, 20..40);
    assert_eq!(reader.get("never-put").unwrap(), None, "an absent key reads no segment");
}

/// Many merges while writing: the runs stay few and shrink from the oldest to the newest (so a
/// key is copied O(log n) times, not once per merge), every lookup finds the newest row across
/// runs and sidecars, the counts hold, and a run file the log does not vouch for (a merge a
/// crash cut off) is deleted by the next writer.
#[test]
fn runs_stay_logarithmic_and_every_lookup_finds_the_newest_row() {
    let dir = tempfile::tempdir().unwrap();
    let options = ArrowOptions { flush_every: 8, merge_after: 2, ..options() };
    let mut cache = ArrowBackend::create(dir.path(), &schema(), options.clone()).unwrap();
    let mut latest = std::collections::HashMap::new();
    let mut most_runs = 0;
    for i in 0..1200u32 {
        // Every fifth put writes an earlier key again.
        let k = if i % 5 == 4 { i / 3 } else { i };
        cache.put(&key(k as usize), &sample(i as usize)).unwrap();
        latest.insert(k, i);
        most_runs = most_runs.max(cache.reader().runs().count());
    }
    cache.flush().unwrap();
    cache.merge_index().ok(); // waits for a merge in flight, then merges all
    let runs_before_final: Vec<u64> = commit_log::read(&dir.path().join("stowage.log"))
        .unwrap()
        .own
        .runs
        .iter()
        .map(|run| run.keys)
        .collect();
    assert_eq!(runs_before_final.len(), 1);
    // 150 segments merged two at a time: at most about log2(150) runs at any moment.
    assert!((2..=12).contains(&most_runs), "{most_runs} runs at most");
    drop(cache);

    // Again without the final merge, to look at the runs as the writer leaves them.
    let dir = tempfile::tempdir().unwrap();
    let mut cache = ArrowBackend::create(dir.path(), &schema(), options.clone()).unwrap();
    for i in 0..1200u32 {
        let k = if i % 5 == 4 { i / 3 } else { i };
        cache.put(&key(k as usize), &sample(i as usize)).unwrap();
    }
    cache.flush().unwrap();
    let runs = commit_log::read(&dir.path().join("stowage.log")).unwrap().own.runs;
    assert!(runs.len() >= 2, "{runs:?}");
    assert!(runs.windows(2).all(|w| w[0].keys > w[1].keys && w[0].through < w[1].first));
    let total: u64 = runs.iter().map(|run| run.new_keys).sum();
    assert!(total <= latest.len() as u64);
    let check = |cache: &ArrowBackend| {
        assert_eq!(cache.len(), latest.len());
        for (&k, &i) in &latest {
            let got = cache.get(&key(k as usize)).unwrap().unwrap();
            assert_eq!(got, sample(i as usize), "key {k}");
        }
        let one = key(1);
        let batch = cache.get_batch(&[one.as_str(), "absent"]).unwrap();
        assert_eq!(batch[0].as_ref(), Some(&sample(latest[&1] as usize)));
        assert_eq!(batch[1], None);
    };
    check(&cache);
    assert!(cache.validate(stowage_core::ValidationLevel::Full).unwrap().is_clean());
    drop(cache);
    let reader = ArrowBackend::open(dir.path(), OpenMode::ReadOnly, options.clone()).unwrap();
    check(&reader);
    drop(reader);
    // A stale run (a copy under a name the log does not record) goes at the next writer's open.
    let first = &runs[0];
    let layout = stowage_arrow::test_support::layout::Layout::new(dir.path());
    let stale = layout.index_run(first.first, first.through + 1);
    std::fs::copy(layout.index_run(first.first, first.through), &stale).unwrap();
    let writer = ArrowBackend::open(dir.path(), OpenMode::Append, options).unwrap();
    assert!(!stale.exists());
    check(&writer);
}

#[test]
fn get_batch_returns_keys_in_order_from_segments_and_memory() {
    let dir = tempfile::tempdir().unwrap();
    let options = ArrowOptions { flush_every: 7, ..options() };
    let mut cache = ArrowBackend::create(dir.path(), &schema(), options).unwrap();
    put_range(&mut cache, 0..40); // 5 segments of 7 committed, 5 pending
    assert_eq!(cache.pending(), 5);
    let order = [39, 3, 999, 21, 0, 35, 14, 39, 8];
    let keys: Vec<String> = order.iter().map(|&i| key(i)).collect();
    let refs: Vec<&str> = keys.iter().map(String::as_str).collect();
    let got = cache.get_batch(&refs).unwrap();
    for (&i, got) in order.iter().zip(&got) {
        match got {
            None => assert_eq!(i, 999),
            Some(got) => {
                let want = sample(i);
                assert_eq!(
                    got.tensor("tensor").unwrap().bytes(),
                    want.tensor("tensor").unwrap().bytes()
                );
            }
        }
    }
}

#[test]
fn compaction_keeps_winners_drops_shadowed_rows_and_never_breaks_open_readers() {
    let dir = tempfile::tempdir().unwrap();
    let options = ArrowOptions { flush_every: 10, merge_after: 4, ..options() };
    let mut cache = ArrowBackend::create(dir.path(), &schema(), options.clone()).unwrap();
    // 60 keys written twice: 12 segments, half of the rows shadowed.
    for round in 0..2 {
        for i in 0..60 {
            cache.put(&key(i), &sample(i + 1000 * round)).unwrap();
        }
    }
    cache.flush().unwrap();
    let before = ArrowBackend::open(dir.path(), OpenMode::ReadOnly, options.clone()).unwrap();
    let report = cache.compact(u64::MAX).unwrap();
    assert_eq!(report.removed.len(), 12);
    assert_eq!((report.rows_kept, report.rows_dropped), (60, 60));
    let check = |cache: &dyn Backend| {
        assert_eq!(cache.len(), 60);
        for i in 0..60 {
            let got = cache.get(&key(i)).unwrap().unwrap();
            let want = sample(i + 1000);
            assert_eq!(
                got.tensor("tensor").unwrap().bytes(),
                want.tensor("tensor").unwrap().bytes()
            );
        }
    };
    check(&cache);
    check(&before); // opened before: its segments' files are still there
    let after = ArrowBackend::open(dir.path(), OpenMode::ReadOnly, options.clone()).unwrap();
    check(&after);
    assert!(after.validate(stowage_core::ValidationLevel::Full).unwrap().is_clean());
    // Writes go on after a compaction and win over the compacted rows.
    cache.put(&key(5), &sample(5)).unwrap();
    cache.flush().unwrap();
    // The next compaction deletes the replaced files.
    let second = cache.compact(u64::MAX).unwrap();
    assert_eq!(second.files_deleted, 36);
    drop(cache);
    let reopened = ArrowBackend::open(dir.path(), OpenMode::ReadOnly, options).unwrap();
    let got = reopened.get(&key(5)).unwrap().unwrap();
    assert_eq!(got.tensor("tensor").unwrap().bytes(), sample(5).tensor("tensor").unwrap().bytes());
    assert_eq!(reopened.len(), 60);
    assert!(reopened.validate(stowage_core::ValidationLevel::Full).unwrap().is_clean());
    let arrow_files = walk(&dir.path().join("segments"))
        .iter()
        .filter(|p| p.extension().is_some_and(|e| e == "arrow"))
        .count();
    assert_eq!(arrow_files, 3, "the second compaction's output and the two segments it replaced");
}

/// The segment files under `segments/`, sorted.
fn segment_files(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = walk(&dir.join("segments"))
        .iter()
        .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

#[test]
fn compaction_streams_kept_rows_into_bounded_segments() {
    let dir = tempfile::tempdir().unwrap();
    // About 25 rows of 64 floats per segment.
    let options = ArrowOptions { flush_every: 10, max_segment_bytes: 25 * 280, ..options() };
    let mut cache = ArrowBackend::create(dir.path(), &schema(), options.clone()).unwrap();
    put_range(&mut cache, 0..100);
    cache.flush().unwrap();
    let report = cache.compact(u64::MAX).unwrap();
    assert_eq!(report.removed.len(), 10);
    assert_eq!((report.rows_kept, report.rows_dropped), (100, 0));
    assert!(report.written.len() >= 4, "written as bounded segments: {report:?}");
    check_range(&cache, 0..100);
    drop(cache);
    let reader = ArrowBackend::open(dir.path(), OpenMode::ReadOnly, options).unwrap();
    check_range(&reader, 0..100);
    assert!(reader.validate(stowage_core::ValidationLevel::Full).unwrap().is_clean());
}

#[test]
fn a_kept_row_that_does_not_read_stops_compaction_and_leaves_no_new_segment() {
    let dir = tempfile::tempdir().unwrap();
    let options = ArrowOptions { flush_every: 10, max_segment_bytes: 25 * 280, ..options() };
    let mut cache = ArrowBackend::create(dir.path(), &schema(), options.clone()).unwrap();
    put_range(&mut cache, 0..60);
    cache.flush().unwrap();
    // The last row checksum of segment 4 (keys 40..50), read after segments 0..3 were gathered
    // and some written.
    let layout = stowage_arrow::test_support::layout::Layout::new(dir.path());
    let sums = layout.segment(4).with_extension("sums");
    let mut bytes = std::fs::read(&sums).unwrap();
    *bytes.last_mut().unwrap() ^= 0x40;
    std::fs::write(&sums, &bytes).unwrap();
    let before = segment_files(dir.path());

    let err = cache.compact(u64::MAX).unwrap_err();
    assert!(matches!(&err, Error::Corrupted { key: Some(k), .. } if *k == key(49)), "{err}");
    assert_eq!(segment_files(dir.path()), before, "the segments written for it are removed");
    // The handle goes on writing, and the cache is as it was.
    put_range(&mut cache, 60..70);
    cache.flush().unwrap();
    check_range(&cache, 0..40);
    check_range(&cache, 50..70);
    drop(cache);
    let reader = ArrowBackend::open(dir.path(), OpenMode::ReadOnly, options).unwrap();
    check_range(&reader, 50..70);
    assert!(reader.get(&key(49)).is_err(), "the damaged row is still reported");
}

/// How many key index run records the commit log holds (each merge that was recorded).
fn run_records(dir: &Path) -> usize {
    let log = std::fs::read(dir.join("stowage.log")).unwrap();
    log.windows(7).filter(|w| w == b"{\"run\":").count()
}

#[test]
fn a_merge_over_more_keys_than_merge_rows_goes_in_steps() {
    let dir = tempfile::tempdir().unwrap();
    // No background merge; merges of at most 45 fresh keys (4 segments of 10).
    let options = ArrowOptions { flush_every: 10, merge_after: 1000, merge_rows: 45, ..options() };
    let mut cache = ArrowBackend::create(dir.path(), &schema(), options.clone()).unwrap();
    put_range(&mut cache, 0..200);
    cache.finalize().unwrap();
    let log = commit_log::read(&dir.path().join("stowage.log")).unwrap();
    let runs: Vec<_> = log.own.runs.iter().map(|r| (r.first, r.through, r.keys)).collect();
    assert_eq!(runs, [(0, 19, 200)], "finalize ends with one run over every segment");
    assert!(run_records(dir.path()) >= 5, "{} merges recorded", run_records(dir.path()));
    check_range(&cache, 0..200);
    drop(cache);
    let reader = ArrowBackend::open(dir.path(), OpenMode::ReadOnly, options.clone()).unwrap();
    assert_eq!(reader.reader().unmerged_segments(), 0);
    check_range(&reader, 0..200);
    assert!(reader.validate(stowage_core::ValidationLevel::Full).unwrap().is_clean());
    drop(reader);
    // A compaction's rebuild goes in steps too.
    let before = run_records(dir.path());
    let options = ArrowOptions { max_segment_bytes: 25 * 280, ..options };
    let mut cache = ArrowBackend::open(dir.path(), OpenMode::Append, options).unwrap();
    let report = cache.compact(u64::MAX).unwrap();
    assert!(report.written.len() >= 8, "{report:?}");
    assert!(run_records(dir.path()) >= before + 2, "the rebuild was recorded in steps");
    check_range(&cache, 0..200);
}

#[test]
fn the_sample_cache_never_serves_a_value_written_over() {
    let dir = tempfile::tempdir().unwrap();
    let options = ArrowOptions { flush_every: 4, sample_cache_bytes: 1 << 20, ..options() };
    let mut cache = ArrowBackend::create(dir.path(), &schema(), options).unwrap();
    put_range(&mut cache, 0..8);
    check_range(&cache, 0..8); // now cached
    cache.put(&key(3), &sample(333)).unwrap();
    cache.flush().unwrap();
    let got = cache.get(&key(3)).unwrap().unwrap();
    assert_eq!(
        got.tensor("tensor").unwrap().bytes(),
        sample(333).tensor("tensor").unwrap().bytes()
    );
}

/// A segment another writer added (here: a copy under a new id, which nothing proves stowage's)
/// is read by every open, listed as unchecked, never deleted; stowage's next segment takes an id
/// above it, and a segment another writer publishes while a writer is open is never replaced:
/// the writer takes the next free id. Sidecar files beside another writer's segment are not
/// trusted (the next writer deletes them: only stowage writes sidecars).
#[test]
fn another_writers_segment_is_read_reported_and_never_removed_or_replaced() {
    let dir = tempfile::tempdir().unwrap();
    let options = ArrowOptions { flush_every: 10, ..options() };
    let mut cache = ArrowBackend::create(dir.path(), &schema(), options.clone()).unwrap();
    put_range(&mut cache, 0..20);
    drop(cache);
    let segments = dir.path().join("segments");
    let foreign = segments.join("segment_000007.arrow");
    std::fs::copy(segments.join("segment_000001.arrow"), &foreign).unwrap();
    // A stale sidecar beside it (of another segment): must not be used to find its keys.
    std::fs::copy(segments.join("segment_000000.keys"), segments.join("segment_000007.keys"))
        .unwrap();
    let foreign_bytes = std::fs::read(&foreign).unwrap();
    let reader = ArrowBackend::open(dir.path(), OpenMode::ReadOnly, options.clone()).unwrap();
    assert_eq!(reader.foreign_segments().len(), 1);
    assert_eq!(reader.foreign_segments()[0].writer, "another writer");
    check_range(&reader, 0..20);
    let report = reader.validate(stowage_core::ValidationLevel::Full).unwrap();
    assert!(report.is_undamaged(), "{:?}", report.problems);
    assert_eq!(report.unchecked.len(), 1, "{report:?}");
    assert_eq!(
        (report.unchecked[0].path.as_path(), report.unchecked[0].samples),
        (foreign.as_path(), 10)
    );
    assert!(!report.is_clean());
    drop(reader);

    let mut writer = ArrowBackend::open(dir.path(), OpenMode::Append, options.clone()).unwrap();
    assert_eq!(std::fs::read(&foreign).unwrap(), foreign_bytes);
    assert!(!segments.join("segment_000007.keys").exists(), "a stray sidecar was kept");
    put_range(&mut writer, 20..30);
    writer.flush().unwrap();
    // Another writer publishes the id the writer would take next, while the writer is open.
    let taken = segments.join("segment_000009.arrow");
    std::fs::copy(segments.join("segment_000000.arrow"), &taken).unwrap();
    let taken_bytes = std::fs::read(&taken).unwrap();
    put_range(&mut writer, 30..40);
    writer.flush().unwrap();
    drop(writer);
    assert_eq!(std::fs::read(&taken).unwrap(), taken_bytes, "another writer's file was replaced");
    assert_eq!(std::fs::read(&foreign).unwrap(), foreign_bytes);
    let log = commit_log::read(&dir.path().join("stowage.log")).unwrap();
    let ids: Vec<u64> = log.segments.iter().map(|s| s.id).collect();
    assert_eq!(ids, [0, 1, 8, 10], "ids above every file of the directory, none replaced");
    let reader = ArrowBackend::open(dir.path(), OpenMode::ReadOnly, options).unwrap();
    check_range(&reader, 0..40);
    assert_eq!(reader.foreign_segments().len(), 2);
}

/// torchcachex's `index.pkl` is left alone by read-only opens, `validate` and `adopt` (no
/// segment changes), and removed by the writer that makes a new segment visible.
#[test]
fn index_pkl_is_removed_by_a_write_only() {
    let dir = tempfile::tempdir().unwrap();
    let mut cache = ArrowBackend::create(dir.path(), &schema(), options()).unwrap();
    put_range(&mut cache, 0..5);
    cache.flush().unwrap();
    drop(cache);
    let segments = dir.path().join("segments");
    std::fs::copy(segments.join("segment_000000.arrow"), segments.join("segment_000003.arrow"))
        .unwrap();
    let index = dir.path().join("index.pkl");
    std::fs::write(&index, b"torchcachex's index").unwrap();
    let reader = ArrowBackend::open(dir.path(), OpenMode::ReadOnly, options()).unwrap();
    reader.validate(stowage_core::ValidationLevel::Full).unwrap();
    drop(reader);
    let mut writer = ArrowBackend::open(dir.path(), OpenMode::Append, options()).unwrap();
    let adoption = writer.adopt().unwrap();
    assert_eq!(adoption.samples, 5);
    writer.validate(stowage_core::ValidationLevel::Full).unwrap();
    writer.flush().unwrap();
    assert_eq!(std::fs::read(&index).unwrap(), b"torchcachex's index", "removed without a write");
    put_range(&mut writer, 5..6);
    writer.flush().unwrap();
    assert!(!index.exists(), "a new segment left index.pkl in place");
    check_range(&writer, 0..6);
    assert!(writer.validate(stowage_core::ValidationLevel::Full).unwrap().is_clean());
    // The adopted segment is never compacted away (its file is not stowage's to delete).
    let report = writer.compact(u64::MAX).unwrap();
    assert!(!report.removed.contains(&3), "{report:?}");
    drop(writer);
    assert!(segments.join("segment_000003.arrow").exists());
    let reader = ArrowBackend::open(dir.path(), OpenMode::ReadOnly, options()).unwrap();
    check_range(&reader, 0..6);
    assert!(reader.validate(stowage_core::ValidationLevel::Full).unwrap().is_clean());
}

/// `adopt` needs a writer: a read-only handle refuses it.
#[test]
fn adopt_on_a_read_only_handle_is_unsupported() {
    let dir = tempfile::tempdir().unwrap();
    let cache = ArrowBackend::create(dir.path(), &schema(), options()).unwrap();
    drop(cache);
    let mut reader = ArrowBackend::open(dir.path(), OpenMode::ReadOnly, options()).unwrap();
    let err = reader.adopt().unwrap_err();
    assert!(matches!(err, stowage_core::Error::Unsupported { .. }), "{err}");
}

/// Another writer's segment that does not read (a torn torchcachex write: it does no fsync)
/// hides nothing else: every open reads the rest, `validate` reports it as damage naming it,
/// `adopt` refuses naming it, and no writer deletes it.
#[test]
fn an_unreadable_segment_of_another_writer_hides_nothing_and_is_reported() {
    let dir = tempfile::tempdir().unwrap();
    let mut cache = ArrowBackend::create(dir.path(), &schema(), options()).unwrap();
    put_range(&mut cache, 0..5);
    cache.flush().unwrap();
    drop(cache);
    let torn = dir.path().join("segments/segment_000004.arrow");
    std::fs::write(&torn, b"ARROW1\0\0 torn").unwrap();
    let reader = ArrowBackend::open(dir.path(), OpenMode::ReadOnly, options()).unwrap();
    check_range(&reader, 0..5);
    assert_eq!(reader.keys().unwrap().len(), 5);
    let report = reader.validate(stowage_core::ValidationLevel::Full).unwrap();
    assert!(
        report.problems.iter().any(|p| p.path.as_deref() == Some(torn.as_path())),
        "{report:?}"
    );
    drop(reader);
    let mut writer = ArrowBackend::open(dir.path(), OpenMode::Append, options()).unwrap();
    let err = writer.adopt().unwrap_err();
    assert!(err.to_string().contains("segment_000004.arrow"), "{err}");
    drop(writer);
    assert!(torn.exists());
}

/// Another writer's segment whose id lies inside a key index run's range (the run covers
/// stowage's segments on both sides of it): its rows win over older segments and lose to newer
/// ones, as numeric segment order says; `validate` finds the run right.
#[test]
fn another_writers_segment_between_merged_segments_wins_by_its_id() {
    let options = ArrowOptions { flush_every: 2, merge_after: 100, ..options() };
    let dir = tempfile::tempdir().unwrap();
    let mut cache = ArrowBackend::create(dir.path(), &schema(), options.clone()).unwrap();
    cache.put("a", &sample(0)).unwrap();
    cache.put("b", &sample(0)).unwrap();
    cache.flush().unwrap();
    drop(cache);
    // The other writer's segment: a and c with values of its own, as segment 1.
    let other = tempfile::tempdir().unwrap();
    let mut writer = ArrowBackend::create(other.path(), &schema(), options.clone()).unwrap();
    writer.put("a", &sample(1)).unwrap();
    writer.put("c", &sample(1)).unwrap();
    writer.flush().unwrap();
    drop(writer);
    std::fs::copy(
        other.path().join("segments/segment_000000.arrow"),
        dir.path().join("segments/segment_000001.arrow"),
    )
    .unwrap();
    let mut cache = ArrowBackend::open(dir.path(), OpenMode::Append, options.clone()).unwrap();
    cache.put("c", &sample(2)).unwrap();
    cache.put("d", &sample(2)).unwrap();
    cache.flush().unwrap();
    cache.merge_index().unwrap();
    let runs = commit_log::read(&dir.path().join("stowage.log")).unwrap().own.runs;
    assert_eq!((runs.len(), runs[0].first, runs[0].through), (1, 0, 2), "{runs:?}");
    let check = |cache: &ArrowBackend| {
        for (key, value) in [("a", 1), ("b", 0), ("c", 2), ("d", 2)] {
            assert_eq!(cache.get(key).unwrap(), Some(sample(value)), "{key}");
        }
        assert_eq!(cache.len(), 4);
        let batch = cache.get_batch(&["d", "a", "c", "b"]).unwrap();
        assert_eq!(batch, [2, 1, 2, 0].map(|v| Some(sample(v))));
        let report = cache.validate(stowage_core::ValidationLevel::Full).unwrap();
        assert!(report.is_undamaged(), "{:?}", report.problems);
        assert_eq!(report.unchecked.len(), 1);
    };
    check(&cache);
    drop(cache);
    check(&ArrowBackend::open(dir.path(), OpenMode::ReadOnly, options.clone()).unwrap());
    // Adopted, it is covered like stowage's own once merged again.
    let mut cache = ArrowBackend::open(dir.path(), OpenMode::Append, options).unwrap();
    cache.adopt().unwrap();
    assert!(commit_log::read(&dir.path().join("stowage.log")).unwrap().own.runs.is_empty());
    cache.merge_index().unwrap();
    for (key, value) in [("a", 1), ("b", 0), ("c", 2), ("d", 2)] {
        assert_eq!(cache.get(key).unwrap(), Some(sample(value)), "{key}");
    }
    assert_eq!(cache.reader().unmerged_segments(), 0);
    assert!(cache.validate(stowage_core::ValidationLevel::Full).unwrap().is_clean());
}
