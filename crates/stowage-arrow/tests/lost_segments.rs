//! A cache written without fsync (`durable: false`) after a power cut took a committed segment's
//! files, in whole or in part: the segment is lost (its samples absent, never partial), the cache
//! opens, validates clean, says what was lost, and the next writer goes on above the lost id. The
//! same damage in a durable cache, or to a segment a synced record vouches for, stays an error.
//! (The conformance suite's power-loss case drives the real thing, under the fault interposer.)

use std::fs::OpenOptions;
use std::path::{Path, PathBuf};

use rstest::rstest;
use stowage_arrow::{ArrowBackend, ArrowOptions};
use stowage_core::{
    Backend, DType, Error, OpenMode, Reader, Sample, Schema, ShapeRule, Tensor, ValidationLevel,
};

fn schema() -> Schema {
    Schema::new().tensor("x", DType::F32, ShapeRule::Any)
}

fn sample(i: usize) -> Sample {
    Sample::new().with("x", Tensor::from_slice(&[3], &[i as f32, 0.5, -(i as f32)]).unwrap())
}

fn options(durable: bool) -> ArrowOptions {
    ArrowOptions { durable, ..ArrowOptions::default() }
}

/// Writes keys 0..4 (segment 0) and 4..8 (segment 1), each batch flushed.
fn two_segments(dir: &Path, durable: bool) {
    let mut cache = ArrowBackend::create(dir, &schema(), options(durable)).unwrap();
    for i in 0..8 {
        cache.put(&format!("k{i}"), &sample(i)).unwrap();
        if i % 4 == 3 {
            cache.flush().unwrap();
        }
    }
}

/// The commit log's records (JSON between binary frames).
fn log_text(dir: &Path) -> String {
    String::from_utf8_lossy(&std::fs::read(dir.join("stowage.log")).unwrap()).into_owned()
}

fn segment(dir: &Path, id: u64) -> PathBuf {
    dir.join(format!("segments/segment_{id:06}.arrow"))
}

/// What a power cut can leave of a file never synced: nothing, or its first blocks.
#[derive(Debug, Clone, Copy)]
enum Cut {
    SegmentGone,
    SegmentTorn,
    ChecksumsEmpty,
    KeySidecarTorn,
}

impl Cut {
    fn apply(self, segment: &Path) {
        let truncate = |path: PathBuf, keep: u64| {
            let file = OpenOptions::new().write(true).open(&path).unwrap();
            file.set_len(keep).unwrap();
        };
        match self {
            Cut::SegmentGone => std::fs::remove_file(segment).unwrap(),
            Cut::SegmentTorn => truncate(segment.to_path_buf(), 512),
            Cut::ChecksumsEmpty => truncate(segment.with_extension("sums"), 0),
            Cut::KeySidecarTorn => truncate(segment.with_extension("keys"), 40),
        }
    }
}

fn assert_holds(cache: &dyn Reader, range: std::ops::Range<usize>) {
    for i in range {
        let got = cache.get(&format!("k{i}")).unwrap();
        assert_eq!(got.as_ref(), Some(&sample(i)), "k{i}");
    }
}

#[rstest]
fn a_non_durable_segment_a_power_cut_took_is_lost_not_damage(
    #[values(Cut::SegmentGone, Cut::SegmentTorn, Cut::ChecksumsEmpty, Cut::KeySidecarTorn)]
    cut: Cut,
) {
    let dir = tempfile::tempdir().unwrap();
    two_segments(dir.path(), false);
    let log = log_text(dir.path());
    assert_eq!(log.matches("\"unsynced\":true").count(), 2, "{log}");
    cut.apply(&segment(dir.path(), 1));

    let cache = ArrowBackend::open(dir.path(), OpenMode::ReadOnly, options(false)).unwrap();
    assert_holds(&cache, 0..4);
    for i in 4..8 {
        assert_eq!(cache.get(&format!("k{i}")).unwrap(), None, "k{i} of the lost segment");
    }
    assert_eq!(cache.len(), 4);
    let report = cache.validate(ValidationLevel::Full).unwrap();
    assert!(report.is_clean(), "{cut:?}: {:?}", report.problems);
    let lost: Vec<String> = (cache.describe().unwrap().details.into_iter())
        .filter(|d| d.label == "lost")
        .map(|d| d.value)
        .collect();
    assert_eq!(lost, ["1 segment (1, 4 rows) written without fsync: a power cut took their files"]);
    drop(cache);

    // The next writer records the loss and deletes the remains, never reuses the lost id, and
    // what it writes is durable and whole.
    let mut cache = ArrowBackend::open(dir.path(), OpenMode::Append, options(true)).unwrap();
    assert_eq!(log_text(dir.path()).matches("{\"lost\":[1]}").count(), 1);
    for extension in ["arrow", "keys", "sums"] {
        let remains = segment(dir.path(), 1).with_extension(extension);
        assert!(!remains.exists(), "{} left", remains.display());
    }
    for i in 4..8 {
        cache.put(&format!("k{i}"), &sample(i)).unwrap();
    }
    cache.finalize().unwrap();
    drop(cache);
    assert!(segment(dir.path(), 2).exists());
    let cache = ArrowBackend::open(dir.path(), OpenMode::ReadOnly, options(true)).unwrap();
    assert_holds(&cache, 0..8);
    let report = cache.validate(ValidationLevel::Full).unwrap();
    assert!(report.is_clean(), "{cut:?} after the next writer: {:?}", report.problems);
}

#[test]
fn a_durable_segment_that_is_gone_is_damage() {
    let dir = tempfile::tempdir().unwrap();
    two_segments(dir.path(), true);
    let log = log_text(dir.path());
    assert!(!log.contains("unsynced"), "{log}");
    Cut::SegmentGone.apply(&segment(dir.path(), 1));
    let opened = ArrowBackend::open(dir.path(), OpenMode::ReadOnly, options(true));
    assert!(matches!(opened, Err(Error::Io { .. })), "{opened:?}");
}

/// A record of Arrow's own kinds is synced after every segment before it: from then on those
/// segments are durable, and one that is gone is damage again.
#[test]
fn a_synced_record_makes_the_segments_before_it_durable() {
    let dir = tempfile::tempdir().unwrap();
    two_segments(dir.path(), false);
    let mut cache = ArrowBackend::open(dir.path(), OpenMode::Append, options(false)).unwrap();
    cache.merge_index().unwrap();
    drop(cache);
    Cut::SegmentTorn.apply(&segment(dir.path(), 1));
    let cache = ArrowBackend::open(dir.path(), OpenMode::ReadOnly, options(false)).unwrap();
    let report = cache.validate(ValidationLevel::Full).unwrap();
    assert!(!report.is_undamaged(), "the torn segment 1 went unreported");
    assert!(report.problems.iter().any(|p| p.path.as_deref() == Some(&*segment(dir.path(), 1))));
}
