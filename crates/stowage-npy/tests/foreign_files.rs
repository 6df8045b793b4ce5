//! Collection files stowage did not write, made by hand here (the real hangar writes them in
//! `tests/hangar_mixed_writers.rs`): validate reports each as unchecked with what the layout
//! tells, finalize leaves them and their markers exactly as they were, and `read_record` reads
//! them. Files of stowage's own sessions that no record points into are stowage's, not another
//! writer's.

#[path = "common/mixed.rs"]
mod mixed;

use mixed::{assert_unchanged, snapshot, uids_in};
use std::path::PathBuf;
use stowage_core::npy_header::write_header;
use stowage_core::{
    Backend, DType, Error, Reader, Sample, Schema, ShapeRule, Tensor, ValidationLevel,
    ValidationReport,
};
use stowage_npy::Numpy10Record;
use stowage_npy::test_support::Layout;
use stowage_npy::test_support::xxh64;
use stowage_npy::{NpyBackend, NpyOptions};

fn schema() -> Schema {
    Schema::new().tensor("x", DType::F32, ShapeRule::Max(vec![3, 4])).tensor(
        "y",
        DType::U8,
        ShapeRule::Fixed(vec![2]),
    )
}

fn sample(i: u8) -> Sample {
    let rows = 1 + usize::from(i % 3);
    let x: Vec<f32> = (0..rows * 4).map(|v| f32::from(i) * 10.0 + v as f32).collect();
    Sample::new()
        .with("x", Tensor::from_slice(&[rows, 4], &x).unwrap())
        .with("y", Tensor::from_slice(&[2], &[i, i.wrapping_mul(3)]).unwrap())
}

const OPTIONS: NpyOptions = NpyOptions {
    collection_size: 4,
    verify_checksums: true,
    cold_read_advice: stowage_core::cold_reads::ColdReadAdvice::Adaptive,
    // Fewer files mapped than the caches have: reads close and reopen them.
    max_open_files: 4,
};

/// A collection file of `rows` slots of `dtype` `slot`, written as another writer would, with
/// `first` (C-order bytes of shape `first_shape`) in the corner of slot 0; its record.
fn foreign_file(
    layout: &Layout,
    uid: &str,
    dtype: DType,
    slot: &[usize],
    rows: usize,
    (first, first_shape): (&[u8], &[usize]),
) -> Numpy10Record {
    let mut shape = vec![rows];
    shape.extend_from_slice(slot);
    let mut bytes = write_header(dtype, &shape);
    let start = bytes.len();
    let slot_len: usize = slot.iter().product::<usize>() * dtype.item_size();
    bytes.resize(start + rows * slot_len, 0);
    // Row-major corner: first_shape's leading rows, each of the slot's last axis (the tests use
    // full-width rows).
    bytes[start..start + first.len()].copy_from_slice(first);
    std::fs::write(layout.data_file(uid), bytes).unwrap();
    Numpy10Record {
        uid: uid.into(),
        checksum: xxh64(first),
        collection_index: 0,
        shape: first_shape.to_vec(),
    }
}

fn unchecked_by_uid(report: &ValidationReport) -> Vec<(String, String)> {
    let mut found: Vec<(String, String)> = report
        .unchecked
        .iter()
        .map(|u| {
            let name = u.path.file_name().unwrap().to_string_lossy();
            (name.trim_end_matches(".npy").to_owned(), u.writer.clone())
        })
        .collect();
    found.sort();
    found
}

#[test]
fn files_of_other_writers_are_reported_and_left_alone() {
    let dir = tempfile::tempdir().unwrap();
    let mut cache = NpyBackend::create(dir.path(), &schema(), OPTIONS).unwrap();
    for i in 0..6 {
        cache.put(&format!("k{i}"), &sample(i)).unwrap();
    }
    cache.flush().unwrap();
    let layout = cache.layout().clone();

    let values = 1.5f64.to_le_bytes();
    let row: Vec<u8> = [1f32, 2., 3., 4.].iter().flat_map(|v| v.to_le_bytes()).collect();
    let staged = foreign_file(&layout, "hangar01", DType::F32, &[3, 4], 1000, (&row, &[1, 4]));
    std::fs::write(layout.stage_marker("hangar01"), b"").unwrap();
    let committed = foreign_file(&layout, "hangar02", DType::U8, &[2], 10, (&[5, 6], &[2]));
    std::fs::write(layout.store_marker("hangar02"), b"").unwrap();
    let unmarked = foreign_file(&layout, "orphan03", DType::F32, &[3, 4], 1000, (&row, &[1, 4]));
    let other = foreign_file(&layout, "other004", DType::F64, &[7], 3, (&values, &[1]));
    std::fs::write(layout.stage_marker("other004"), b"").unwrap();
    std::fs::write(layout.data_file("broken05"), b"\x93NUMPY\x01\x00").unwrap();
    std::fs::write(layout.stage_marker("broken05"), b"").unwrap();
    // Not collection files: ignored.
    std::fs::write(layout.data_dir().join("notes.txt"), b"hello").unwrap();
    std::fs::create_dir(layout.data_dir().join("zzzzzzzz.npy")).unwrap();
    let others: Vec<PathBuf> = ["hangar01", "hangar02", "orphan03", "other004", "broken05"]
        .iter()
        .map(|uid| layout.data_file(uid))
        .chain(["hangar01", "other004", "broken05"].iter().map(|uid| layout.stage_marker(uid)))
        .chain([layout.store_marker("hangar02")])
        .collect();
    let before = snapshot(&others);

    let want = [
        ("broken05", "hangar"),
        ("hangar01", "hangar"),
        ("hangar02", "hangar"),
        ("orphan03", "another writer"),
        ("other004", "hangar"),
    ]
    .map(|(u, w)| (u.to_owned(), w.to_owned()));
    let report = cache.validate(ValidationLevel::Full).unwrap();
    assert!(report.problems.is_empty(), "{:?}", report.problems);
    assert!(!report.is_clean() && report.is_undamaged());
    assert_eq!(unchecked_by_uid(&report), want);
    let text = |uid: &str| {
        let u = report.unchecked.iter().find(|u| u.path == layout.data_file(uid)).unwrap();
        assert_eq!(u.samples, 0, "{u}: hangar's records are not in the cache");
        u.to_string()
    };
    assert!(text("hangar01").contains("1000 slots of <f4 (3, 4) (the layout of field \"x\")"));
    assert!(text("hangar01").contains("staged"), "{}", text("hangar01"));
    assert!(
        text("hangar02").contains("10 slots of |u1 (2,) (the layout of field \"y\")"),
        "{}",
        text("hangar02")
    );
    assert!(text("hangar02").contains("committed"), "{}", text("hangar02"));
    assert!(text("other004").contains("a layout no field of this cache has"));
    assert!(text("broken05").contains("a header stowage cannot read"), "{}", text("broken05"));
    assert!(text("orphan03").contains("no marker") && !text("orphan03").contains("--record"));
    assert!(text("hangar01").contains("--record REC"), "{}", text("hangar01"));

    cache.put("k6", &sample(6)).unwrap();
    cache.finalize().unwrap();
    assert_unchanged(&before, "finalize");
    assert_eq!(uids_in(&layout.stage_dir()), ["broken05", "hangar01", "other004"]);
    let own: Vec<String> =
        cache.records().unwrap().into_iter().map(|(_, r)| r[0].uid.clone()).collect();
    let mut committed_markers = own.clone();
    committed_markers.extend(cache.records().unwrap().into_iter().map(|(_, r)| r[1].uid.clone()));
    committed_markers.push("hangar02".into());
    committed_markers.sort();
    committed_markers.dedup();
    assert_eq!(uids_in(&layout.store_dir()), committed_markers);
    let report = cache.validate(ValidationLevel::Full).unwrap();
    assert!(report.problems.is_empty(), "{:?}", report.problems);
    assert_eq!(unchecked_by_uid(&report), want);

    // Reads through the records of the other writer's files, in every marker state.
    let got = cache.read_record("x", &staged, true).unwrap();
    assert_eq!((got.shape(), got.to_vec::<f32>().unwrap()), (&[1, 4][..], vec![1., 2., 3., 4.]));
    assert_eq!(cache.read_record("y", &committed, true).unwrap().bytes(), [5, 6]);
    assert_eq!(cache.read_record("x", &unmarked, true).unwrap().shape(), [1, 4]);
    let bad = Numpy10Record { checksum: staged.checksum ^ 1, ..staged.clone() };
    let err = cache.read_record("x", &bad, true).unwrap_err();
    assert!(matches!(err, Error::Corrupted { .. }), "{err}");
    assert!(err.to_string().contains("hangar01.npy") && err.to_string().contains(&bad.to_string()));
    let err = cache.read_record("x", &other, true).unwrap_err();
    assert!(matches!(err, Error::Incompatible { .. }), "{err}");
    assert!(err.to_string().contains("<f8") && err.to_string().contains("\"x\""), "{err}");
    let err = cache.read_record("y", &staged, true).unwrap_err();
    assert!(matches!(err, Error::InvalidArgument { .. }), "fixed shape (2): {err}");
    let absent = Numpy10Record { uid: "absent00".into(), ..staged.clone() };
    assert!(matches!(cache.read_record("x", &absent, true), Err(Error::NotFound { .. })));
    let hostile = Numpy10Record { uid: "../../x".into(), ..staged.clone() };
    assert!(matches!(cache.read_record("x", &hostile, true), Err(Error::InvalidArgument { .. })));
    drop(cache);
    assert_unchanged(&before, "reads");
}

/// A session that created files but was killed before its first flush leaves files no record
/// points into: they are stowage's (claimed before they were created), so validate stays clean
/// and finalize clears their staging markers.
#[test]
fn files_of_a_session_that_never_flushed_are_stowages_own() {
    let dir = tempfile::tempdir().unwrap();
    let mut cache = NpyBackend::create(dir.path(), &schema(), OPTIONS).unwrap();
    cache.put("k0", &sample(0)).unwrap();
    cache.flush().unwrap();
    drop(cache);
    let mut cache = NpyBackend::open_append(dir.path(), OPTIONS).unwrap();
    for i in 1..6 {
        cache.put(&format!("lost{i}"), &sample(i)).unwrap();
    }
    let layout = cache.layout().clone();
    // Dropped without a flush: the puts' records never reach records.log, as after a kill.
    drop(cache);
    let data_files = uids_in(&layout.data_dir());
    assert_eq!(data_files.len(), 2 + 4, "k0's two files, then two per field (rotation)");
    assert_eq!(uids_in(&layout.stage_dir()), data_files);

    let reader = NpyBackend::open_read_only(dir.path(), OPTIONS).unwrap();
    assert_eq!(reader.keys().unwrap(), ["k0"]);
    let report = reader.validate(ValidationLevel::Full).unwrap();
    assert!(report.is_clean(), "{:?} {:?}", report.problems, report.unchecked);
    drop(reader);

    let mut cache = NpyBackend::open_append(dir.path(), OPTIONS).unwrap();
    cache.put("k1", &sample(1)).unwrap();
    cache.finalize().unwrap();
    assert!(uids_in(&layout.stage_dir()).is_empty(), "every staging marker was stowage's");
    assert_eq!(uids_in(&layout.store_dir()).len(), 4, "k0's and k1's files are committed");
    let report = cache.validate(ValidationLevel::Full).unwrap();
    assert!(report.is_clean(), "{:?} {:?}", report.problems, report.unchecked);
}

/// Losing `owned_files.log` of a finalized cache is reported (its record count is in
/// `_COMPLETE`); in a cache written before the log existed, only `records.log` tells which files
/// are stowage's.
#[test]
fn a_lost_ownership_log_is_reported_and_a_cache_without_one_still_validates() {
    let dir = tempfile::tempdir().unwrap();
    let mut cache = NpyBackend::create(dir.path(), &schema(), OPTIONS).unwrap();
    cache.put("k0", &sample(0)).unwrap();
    cache.finalize().unwrap();
    let layout = cache.layout().clone();
    drop(cache);
    std::fs::remove_file(layout.owned_files_log()).unwrap();
    let report = NpyBackend::open_read_only(dir.path(), OPTIONS)
        .unwrap()
        .validate(ValidationLevel::Structure)
        .unwrap();
    assert_eq!(report.problems.len(), 1, "{:?}", report.problems);
    assert!(report.problems[0].to_string().contains("owned_files.log"), "{:?}", report.problems);
    assert!(report.unchecked.is_empty(), "the records still name every file");

    // As written before owned_files.log existed: _COMPLETE without its count.
    let text = std::fs::read_to_string(layout.complete_marker()).unwrap();
    let mut marker: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert!(marker.as_object_mut().unwrap().remove("owned_files_records").is_some());
    std::fs::write(layout.complete_marker(), marker.to_string()).unwrap();
    let report = NpyBackend::open_read_only(dir.path(), OPTIONS)
        .unwrap()
        .validate(ValidationLevel::Full)
        .unwrap();
    assert!(report.is_clean(), "{:?} {:?}", report.problems, report.unchecked);
}

/// A finalize interrupted between its commit point and `_COMPLETE` is rolled forward by the next
/// writer's open; that, too, commits and unstages only stowage's files.
#[test]
fn a_rolled_forward_finalize_leaves_other_writers_markers_alone() {
    let dir = tempfile::tempdir().unwrap();
    let mut cache = NpyBackend::create(dir.path(), &schema(), OPTIONS).unwrap();
    cache.put("k0", &sample(0)).unwrap();
    cache.flush().unwrap();
    let layout = cache.layout().clone();
    let row: Vec<u8> = [1f32, 2., 3., 4.].iter().flat_map(|v| v.to_le_bytes()).collect();
    let staged = foreign_file(&layout, "hangar01", DType::F32, &[3, 4], 1000, (&row, &[1, 4]));
    std::fs::write(layout.stage_marker("hangar01"), b"").unwrap();
    cache.finalize().unwrap();
    drop(cache);
    // As if the finalize had been killed after its finalize record: no _COMPLETE, and stowage's
    // staging markers back.
    std::fs::remove_file(layout.complete_marker()).unwrap();
    let own = uids_in(&layout.store_dir());
    for uid in &own {
        std::fs::write(layout.stage_marker(uid), b"").unwrap();
    }
    let before = snapshot(&[layout.data_file("hangar01"), layout.stage_marker("hangar01")]);

    let cache = NpyBackend::open_append(dir.path(), OPTIONS).unwrap();
    assert!(layout.complete_marker().exists(), "the open rolled the finalize forward");
    assert_unchanged(&before, "the roll-forward");
    assert_eq!(uids_in(&layout.stage_dir()), ["hangar01"]);
    assert!(!layout.store_marker("hangar01").exists());
    assert_eq!(cache.read_record("x", &staged, true).unwrap().shape(), [1, 4]);
    let report = cache.validate(ValidationLevel::Full).unwrap();
    assert!(report.problems.is_empty(), "{:?}", report.problems);
    assert_eq!(unchecked_by_uid(&report), [("hangar01".to_owned(), "hangar".to_owned())]);
}
