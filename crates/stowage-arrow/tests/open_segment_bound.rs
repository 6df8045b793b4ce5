//! A cache of more segments than `max_open_segments` is written, opened, read, listed and
//! validated with at most that many segments mapped at once: memory maps are a per-process
//! resource (`vm.max_map_count`, about 65,530), so keeping every segment mapped would make a
//! cache of 100,000 segments unreadable.

use std::path::Path;

use stowage_arrow::{ArrowBackend, ArrowOptions};
use stowage_core::ValidationLevel;
use stowage_core::{Backend, DType, OpenMode, Reader, Sample, Schema, ShapeRule, Tensor};

const SEGMENTS: usize = 40;
const BOUND: usize = 4;

fn schema() -> Schema {
    Schema::new().tensor("x", DType::U32, ShapeRule::Fixed(vec![2]))
}

fn sample(i: usize) -> Sample {
    Sample::new().with("x", Tensor::from_slice(&[2], &[i as u32, 7]).unwrap())
}

fn options() -> ArrowOptions {
    // Merging every 8 segments: the runs cover most segments, the rest are read through sidecars.
    ArrowOptions { max_open_segments: BOUND, merge_after: 8, ..ArrowOptions::default() }
}

/// Memory maps of this process whose file lies under `dir/segments` (segments and their row
/// checksum and key sidecar files); `unmerged` segments are read through their key sidecars.
fn segment_maps(dir: &Path, unmerged: usize) -> usize {
    let segments = dir.join("segments").canonicalize().unwrap();
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
    let segments = segments.to_string_lossy();
    let lines: Vec<&str> = maps.lines().filter(|line| line.contains(segments.as_ref())).collect();
    if lines.len() > allowed(unmerged) {
        eprintln!("{}", lines.join("\n"));
    }
    lines.len()
}

/// The most segment maps the bound allows: a segment and its row checksums each, plus the key
/// sidecars of the `unmerged` segments no run covers, plus the segments a background merge is
/// reading (at most `merge_after`). No run covers more than `merge_after` segments once merges
/// keep up, but a flush may come while a merge is still running (a loaded machine): the count
/// is read from the reader, not assumed. Without the bound, every segment read stays mapped
/// with its row checksums: 80 maps here.
fn allowed(unmerged: usize) -> usize {
    2 * BOUND + unmerged + options().merge_after
}

#[test]
fn a_writer_keeps_at_most_the_bound_mapped() {
    let dir = tempfile::tempdir().unwrap();
    let mut cache = ArrowBackend::create(dir.path(), &schema(), options()).unwrap();
    for i in 0..SEGMENTS {
        cache.put(&format!("k{i}"), &sample(i)).unwrap();
        cache.flush().unwrap();
        // Read back every key so far: each read may open a segment.
        for j in 0..=i {
            let got = cache.get(&format!("k{j}")).unwrap().expect("flushed");
            assert_eq!(got.tensor("x").unwrap().to_vec::<u32>().unwrap(), [j as u32, 7]);
        }
        assert!(cache.reader().open_segment_count() <= BOUND, "after segment {i}");
        // Read before the maps: a merge that ends in between only unmaps.
        let unmerged = cache.reader().unmerged_segments();
        assert!(segment_maps(dir.path(), unmerged) <= allowed(unmerged), "after segment {i}");
    }
    cache.finalize().unwrap();
}

#[test]
fn a_reader_reads_validates_and_lists_with_at_most_the_bound_mapped() {
    let dir = tempfile::tempdir().unwrap();
    let mut cache = ArrowBackend::create(dir.path(), &schema(), options()).unwrap();
    for i in 0..SEGMENTS {
        cache.put(&format!("k{i}"), &sample(i)).unwrap();
        cache.flush().unwrap();
    }
    // Every key twice: overwrites send lookups to older segments to confirm candidates.
    for i in 0..SEGMENTS / 2 {
        cache.put(&format!("k{i}"), &sample(i + 1000)).unwrap();
        cache.flush().unwrap();
    }
    cache.finalize().unwrap();
    drop(cache);

    let reader = ArrowBackend::open(dir.path(), OpenMode::ReadOnly, options()).unwrap();
    let unmerged = reader.reader().unmerged_segments();
    let expect = |i: usize| if i < SEGMENTS / 2 { i + 1000 } else { i } as u32;
    for i in (0..SEGMENTS).rev() {
        let got = reader.get(&format!("k{i}")).unwrap().expect("written");
        assert_eq!(got.tensor("x").unwrap().to_vec::<u32>().unwrap()[0], expect(i));
        assert!(segment_maps(dir.path(), unmerged) <= allowed(unmerged), "get k{i}");
    }
    let keys: Vec<String> = (0..SEGMENTS).map(|i| format!("k{i}")).collect();
    let refs: Vec<&str> = keys.iter().map(String::as_str).collect();
    let batch = reader.get_batch(&refs).unwrap();
    for (i, got) in batch.iter().enumerate() {
        let got = got.as_ref().expect("written").tensor("x").unwrap().to_vec::<u32>().unwrap();
        assert_eq!(got[0], expect(i));
    }
    // A sample shares its segment's map: the batch's samples keep theirs mapped until dropped.
    drop(batch);
    assert!(segment_maps(dir.path(), unmerged) <= allowed(unmerged), "get_batch");
    assert_eq!(reader.keys().unwrap(), keys);
    assert_eq!(reader.len(), SEGMENTS);
    let report = reader.validate(ValidationLevel::Full).unwrap();
    assert!(report.is_clean(), "{report:?}");
    assert!(report.files_checked >= SEGMENTS as u64, "{report:?}");
    assert!(segment_maps(dir.path(), unmerged) <= allowed(unmerged), "keys, len and validate");
    assert!(reader.reader().open_segment_count() <= BOUND);
}

#[test]
fn samples_outlive_the_segment_they_were_read_from() {
    let dir = tempfile::tempdir().unwrap();
    let mut cache = ArrowBackend::create(dir.path(), &schema(), options()).unwrap();
    for i in 0..SEGMENTS {
        cache.put(&format!("k{i}"), &sample(i)).unwrap();
        cache.flush().unwrap();
    }
    // Read k0, then enough other segments that k0's closes; the sample still reads right.
    let first = cache.get("k0").unwrap().expect("written");
    for i in 1..SEGMENTS {
        cache.get(&format!("k{i}")).unwrap().expect("written");
    }
    assert_eq!(first.tensor("x").unwrap().to_vec::<u32>().unwrap(), [0, 7]);
}
