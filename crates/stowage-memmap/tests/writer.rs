//! The write side: DNANet's preset written and re-read, resume after a simulated crash, and the
//! defects of the original writer that stowage must not repeat.

use std::path::Path;

use stowage_conformance::corrupt::copy_tree;
use stowage_core::{Backend, BackendExt, Error, Reader, Sample, Tensor, ValidationLevel, Value};
use stowage_fingerprint::{FingerprintFile, SourceStamp};
use stowage_memmap::{MemmapBackend, MemmapOptions, dnanet};
use stowage_test_support::reference::reference_set;

#[path = "common/dnanet_rows.rs"]
mod dnanet_rows;
use dnanet_rows::{D, L, key};

/// DNANet row `i` (four distinct panels with a non-ASCII name).
fn dnanet_row(i: usize) -> Sample {
    dnanet_rows::dnanet_row(i, format!("{{\"panel\": {}, \"name\": \"p\\u00eb\"}}", i % 4))
}

fn create(dir: &Path) -> MemmapBackend {
    MemmapBackend::create(dir, &dnanet(D, L), MemmapOptions::default()).unwrap()
}

/// Puts DNANet rows `range` into `cache`.
fn put_rows(cache: &mut MemmapBackend, range: std::ops::Range<usize>) {
    for i in range {
        cache.put(&key(i), &dnanet_row(i)).unwrap();
    }
}

/// Creates a DNANet cache in `dir` holding rows `range`, flushed but not finalized, and closes it.
fn write_flushed(dir: &Path, range: std::ops::Range<usize>) {
    let mut cache = create(dir);
    put_rows(&mut cache, range);
    cache.flush().unwrap();
}

/// Creates a finalized DNANet cache in `dir` holding rows `range`, and closes it.
fn write_finalized(dir: &Path, range: std::ops::Range<usize>) {
    let mut cache = create(dir);
    put_rows(&mut cache, range);
    cache.finalize().unwrap();
}

fn read_only(dir: &Path) -> stowage_core::Result<MemmapBackend> {
    MemmapBackend::open_read_only(dir, MemmapOptions::default())
}

fn append(dir: &Path) -> stowage_core::Result<MemmapBackend> {
    MemmapBackend::open_append(dir, MemmapOptions::default())
}

/// Every `(key, row)` of `range` reads back exactly, by key and by row number.
fn check_rows(cache: &MemmapBackend, range: std::ops::Range<usize>) {
    assert_eq!(cache.len(), range.len());
    for (position, i) in range.enumerate() {
        let want = dnanet_row(i);
        let got = cache.get(&key(i)).unwrap().unwrap_or_else(|| panic!("{} missing", key(i)));
        for (name, value) in want.fields() {
            assert_eq!(got.get(name), Some(value), "row {i} field {name}");
        }
        assert_eq!(cache.get_row(position as i64).unwrap(), got);
    }
}

#[test]
fn dnanet_preset_round_trips_through_the_read_side() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("aed9b48500e9acfd");
    let mut cache = create(&dir);
    for i in 0..10 {
        cache.put(&key(i), &dnanet_row(i)).unwrap();
        if i == 4 {
            cache.flush().unwrap();
        }
    }
    check_rows(&cache, 0..10);
    let config = serde_json::json!({"cache_version": 5, "root": "/data", "scanpoints": L});
    let stamps = vec![SourceStamp::ContentHash { path: "run000.hid".into(), content_hash: None }];
    cache.finalize_with_fingerprint(config.clone(), stamps).unwrap();
    assert!(cache.is_finalized());
    drop(cache);

    assert!(!dir.join("manifest.jsonl").exists(), "finalize removes the manifest");
    assert_eq!(std::fs::read(dir.join("_COMPLETE")).unwrap(), b"");
    let shapes = std::fs::read_to_string(dir.join("shapes.json")).unwrap();
    assert!(
        shapes.starts_with("{\n  \"n\": 10,\n  \"data\": {\n    \"shape\": [\n      3,\n      8\n    ],\n    \"dtype\": \"<i2\""),
        "{shapes}"
    );
    let panels: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("panels.json")).unwrap()).unwrap();
    assert_eq!(panels.as_object().unwrap().len(), 4, "four distinct panels stored once");
    assert_eq!(panels["1"], "{\"panel\": 1, \"name\": \"p\\u00eb\"}");
    let alleles: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("alleles.json")).unwrap()).unwrap();
    assert_eq!(alleles.as_object().unwrap().len(), 1);
    let fingerprint = FingerprintFile::read(dir.join("fingerprint.json")).unwrap();
    assert_eq!((fingerprint.cache_version, &fingerprint.config), (5, &config));
    assert_eq!(fingerprint.recompute_hash(), fingerprint.hash);
    assert_eq!(std::fs::metadata(dir.join("data.bin")).unwrap().len(), 10 * 2 * (D * L) as u64);

    let reader = read_only(&dir).unwrap();
    assert!(reader.is_finalized());
    assert_eq!(reader.schema(), &dnanet(D, L));
    check_rows(&reader, 0..10);
    assert!(reader.get_row(3).unwrap().tensor("data").unwrap().is_zero_copy());
    for level in [ValidationLevel::Structure, ValidationLevel::Full] {
        let report = reader.validate(level).unwrap();
        assert!(report.is_clean(), "{level:?}: {:?}", report.problems);
    }
}

#[test]
fn flushed_rows_are_readable_before_finalize_and_unflushed_ones_are_not() {
    let tmp = tempfile::tempdir().unwrap();
    let mut cache = create(tmp.path());
    put_rows(&mut cache, 0..5);
    cache.flush().unwrap();
    put_rows(&mut cache, 5..7);
    let reader = read_only(tmp.path()).unwrap();
    assert!(!reader.is_finalized());
    check_rows(&reader, 0..5);
    drop(cache); // the two unflushed rows are lost, as documented
    let reader = read_only(tmp.path()).unwrap();
    check_rows(&reader, 0..5);
    assert!(reader.validate(ValidationLevel::Full).unwrap().is_clean());
}

#[test]
fn resume_after_a_crash_recovers_exactly_the_committed_rows() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    write_flushed(dir, 0..4);
    // What a crash in the middle of the next flush leaves: part of a fifth row in each .bin file
    // and a torn manifest line.
    let row_bytes = [("data.bin", 2 * D * L), ("annotation.bin", D * L), ("scaler.bin", 4 * L)];
    for (file, bytes) in row_bytes {
        let mut content = std::fs::read(dir.join(file)).unwrap();
        assert_eq!(content.len(), 4 * bytes);
        content.extend(std::iter::repeat_n(0xAB, bytes / 2));
        std::fs::write(dir.join(file), content).unwrap();
    }
    let mut manifest = std::fs::read(dir.join("manifest.jsonl")).unwrap();
    let committed = manifest.len();
    manifest.extend_from_slice(b"{\"row\": 4, \"path\": \"/data/ru");
    std::fs::write(dir.join("manifest.jsonl"), manifest).unwrap();

    let reader = read_only(dir).unwrap();
    check_rows(&reader, 0..4);
    assert_eq!(reader.dropped_manifest_tail().unwrap().line, 5);
    drop(reader);

    let mut cache = append(dir).unwrap();
    assert_eq!(cache.keys().unwrap(), (0..4).map(key).collect::<Vec<_>>());
    assert!(cache.contains(&key(3)).unwrap() && !cache.contains(&key(4)).unwrap());
    for (file, bytes) in row_bytes {
        assert_eq!(std::fs::metadata(dir.join(file)).unwrap().len(), 4 * bytes as u64, "{file}");
    }
    assert_eq!(std::fs::metadata(dir.join("manifest.jsonl")).unwrap().len(), committed as u64);
    put_rows(&mut cache, 4..8);
    cache.finalize().unwrap();
    drop(cache);
    let reader = read_only(dir).unwrap();
    check_rows(&reader, 0..8);
    assert!(reader.validate(ValidationLevel::Full).unwrap().is_clean());
}

#[test]
fn a_short_bin_file_is_corruption_and_is_never_padded() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    write_flushed(dir, 0..3);
    let scaler = dir.join("scaler.bin");
    let short = std::fs::read(&scaler).unwrap().len() as u64 - 5;
    std::fs::OpenOptions::new().write(true).open(&scaler).unwrap().set_len(short).unwrap();
    for result in [append(dir).map(|_| ()), read_only(dir).map(|_| ())] {
        let err = result.unwrap_err();
        assert!(matches!(err, Error::Corrupted { .. }), "{err}");
        assert!(err.to_string().contains("scaler.bin"), "{err}");
    }
    assert_eq!(std::fs::metadata(&scaler).unwrap().len(), short, "never zero-padded");
}

#[test]
fn a_new_cache_never_appends_to_stale_bin_files() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    // A crash after DNANet's finalize deleted the manifest but before _COMPLETE, minus the index:
    // only stale rows remain.
    std::fs::write(dir.join("data.bin"), vec![7u8; 5 * 2 * D * L]).unwrap();
    let mut cache = create(dir);
    cache.put(&key(0), &dnanet_row(0)).unwrap();
    cache.finalize().unwrap();
    assert_eq!(std::fs::metadata(dir.join("data.bin")).unwrap().len(), 2 * (D * L) as u64);
    check_rows(&read_only(dir).unwrap(), 0..1);
}

#[test]
fn finalized_caches_stay_complete_when_a_writer_opens_them() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let mut cache = create(dir);
    cache.put(&key(0), &dnanet_row(0)).unwrap();
    cache.finalize().unwrap();
    assert!(matches!(cache.put(&key(1), &dnanet_row(1)), Err(Error::Finalized { .. })));
    drop(cache);
    let mut writer = append(dir).unwrap();
    assert!(dir.join("_COMPLETE").exists(), "opening a writer must not invalidate the cache");
    assert!(writer.is_finalized());
    assert!(matches!(writer.put(&key(1), &dnanet_row(1)), Err(Error::Finalized { .. })));
    assert!(matches!(append(dir).err(), Some(Error::Locked { .. })));
    assert!(matches!(
        MemmapBackend::create(dir, &dnanet(D, L), MemmapOptions::default()).err(),
        Some(Error::AlreadyExists { .. })
    ));
    check_rows(&read_only(dir).unwrap(), 0..1);
}

#[test]
fn bad_samples_and_empty_caches_are_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let mut cache = create(tmp.path());
    // int32 values where the schema says int16: refused, never wrapped.
    let wide =
        dnanet_row(0).with("data", Tensor::from_slice(&[D, L], &[70_000i32; D * L]).unwrap());
    let err = cache.put("wide", &wide).unwrap_err();
    assert!(matches!(&err, Error::SchemaMismatch { field, .. } if field == "data"), "{err}");
    let shape = dnanet_row(0).with("scaler", Tensor::from_slice(&[2], &[1f32, 2.]).unwrap());
    assert!(matches!(cache.put("shape", &shape), Err(Error::SchemaMismatch { .. })));
    assert!(cache.is_empty());
    let err = cache.finalize().unwrap_err();
    assert!(matches!(err, Error::InvalidArgument { .. }), "{err}");
    cache.put(&key(0), &dnanet_row(0)).unwrap();
    let err = cache.put(&key(0), &dnanet_row(1)).unwrap_err();
    assert!(matches!(err, Error::Unsupported { .. }), "{err}");
    cache.finalize().unwrap();
}

#[test]
fn damaged_rows_are_refused_by_get_and_reported_by_validate() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    write_finalized(dir, 0..3);
    let data = dir.join("data.bin");
    let mut bytes = std::fs::read(&data).unwrap();
    bytes[2 * D * L + 3] ^= 0x01; // row 1
    std::fs::write(&data, bytes).unwrap();
    let reader = read_only(dir).unwrap();
    let err = reader.get(&key(1)).unwrap_err();
    assert!(matches!(err, Error::Corrupted { .. }), "{err}");
    assert!(err.to_string().contains("data.bin") && err.to_string().contains("run001"), "{err}");
    let err = reader.get_row(1).unwrap_err();
    assert!(err.to_string().contains("data.bin") && err.to_string().contains("run001"), "{err}");
    assert!(reader.get(&key(0)).unwrap().is_some());
    let report = reader.validate(ValidationLevel::Full).unwrap();
    assert_eq!(report.problems.len(), 1, "{:?}", report.problems);
    assert_eq!(report.problems[0].key.as_deref(), Some(key(1).as_str()));
    let unchecked = MemmapOptions { verify_checksums: false, ..MemmapOptions::default() };
    let reader = MemmapBackend::open_read_only(dir, unchecked).unwrap();
    assert!(reader.get(&key(1)).unwrap().is_some(), "verification is switchable");
}

/// A flipped key checksum: a get by that key is refused (the index must not hand out another
/// key's row), a get by row number, which returns no key, serves the intact values, and validate
/// reports the key.
#[test]
fn a_damaged_key_checksum_is_refused_by_key_and_reported_by_validate() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    write_finalized(dir, 0..3);
    let row_bytes = 8 * (dnanet(D, L).fields.len() as u64 + 1);
    stowage_conformance::corrupt::flip_byte(&dir.join("stowage_checksums.bin"), 2 * row_bytes)
        .unwrap();
    let reader = read_only(dir).unwrap();
    let err = reader.get(&key(2)).unwrap_err();
    assert!(matches!(err, Error::Corrupted { .. }), "{err}");
    assert!(err.to_string().contains("key") && err.to_string().contains("run002"), "{err}");
    let want = dnanet_row(2);
    let got = reader.get_row(2).unwrap();
    assert!(want.fields().all(|(name, value)| got.get(name) == Some(value)));
    let report = reader.validate(ValidationLevel::Full).unwrap();
    assert_eq!(report.problems.len(), 1, "{:?}", report.problems);
    assert_eq!(report.problems[0].key.as_deref(), Some(key(2).as_str()));
}

#[test]
fn an_unfinished_dnanet_cache_resumes_and_finalizes() {
    let Some(set) = reference_set("dnanet-memmap") else { return };
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("d3c3787192a40966");
    copy_tree(&set.join("cache_root").join("d3c3787192a40966"), &dir).unwrap();
    let before = read_only(&dir).unwrap();
    let rows: Vec<Sample> = (0..before.len() as i64).map(|i| before.get_row(i).unwrap()).collect();
    let keys = before.keys().unwrap();
    drop(before);
    let mut cache = append(&dir).unwrap();
    assert_eq!(cache.keys().unwrap(), keys);
    let mut extra = rows[0].clone();
    extra.insert("meta_json", Value::Json("{\"resumed\": true}".into()));
    cache.put("/resumed.hid", &extra).unwrap();
    cache.finalize().unwrap();
    drop(cache);
    let after = read_only(&dir).unwrap();
    assert!(after.is_finalized());
    assert_eq!(after.len(), keys.len() + 1);
    for (i, row) in rows.iter().enumerate() {
        assert_eq!(&after.get_row(i as i64).unwrap(), row, "row {i}");
    }
    assert_eq!(after.get("/resumed.hid").unwrap().unwrap(), extra);
    // stowage checksummed its own row; DNANet's rows are reported unchecked, not damaged.
    assert!(dir.join("stowage.json").exists() && dir.join("stowage_checksums.bin").exists());
    let report = after.validate(ValidationLevel::Full).unwrap();
    assert!(report.is_undamaged(), "{:?}", report.problems);
    assert_eq!(report.unchecked.len(), 1, "{:?}", report.unchecked);
    assert_eq!(report.unchecked[0].samples, keys.len() as u64);
    assert_eq!(report.unchecked[0].writer, "DNANet");
    drop(after);
    let adoption = append(&dir).unwrap().adopt().unwrap();
    assert_eq!(adoption.samples, keys.len() as u64);
    let after = read_only(&dir).unwrap();
    assert!(after.validate(ValidationLevel::Full).unwrap().is_clean());
    for (i, row) in rows.iter().enumerate() {
        assert_eq!(&after.get_row(i as i64).unwrap(), row, "row {i} after adopt");
    }
}

#[test]
fn manifest_lines_carry_exactly_dnanets_keys() {
    let tmp = tempfile::tempdir().unwrap();
    let mut cache = create(tmp.path());
    cache.put(&key(1), &dnanet_row(1)).unwrap();
    cache.flush().unwrap();
    let text = std::fs::read_to_string(tmp.path().join("manifest.jsonl")).unwrap();
    assert!(text.ends_with('\n'), "{text}");
    let line: serde_json::Map<String, serde_json::Value> =
        serde_json::from_str(text.trim_end()).unwrap();
    let mut keys: Vec<&str> = line.keys().map(String::as_str).collect();
    keys.sort_unstable();
    assert_eq!(
        keys,
        [
            "adjusted_panel_json",
            "allele_annotation_json",
            "ann_shape",
            "data_shape",
            "has_annotation",
            "meta_json",
            "path",
            "row",
            "scaler_shape"
        ]
    );
    assert_eq!(line["ann_shape"], serde_json::json!([D, L]));
    assert_eq!(line["has_annotation"], true);
    assert_eq!(line["allele_annotation_json"], serde_json::Value::Null);
}

#[test]
fn any_schema_maps_onto_files_and_columns_by_field_name() {
    use stowage_core::{DType, FieldKind, FieldSpec, Schema, ShapeRule};
    let schema = Schema::new()
        .tensor("image", DType::U8, ShapeRule::Fixed(vec![2, 2]))
        .nullable_tensor("mask", DType::Bool, ShapeRule::Fixed(vec![2, 2]))
        .tensor("label", DType::I64, ShapeRule::Fixed(vec![]))
        .json("caption", false)
        .field(FieldSpec {
            name: "source".into(),
            kind: FieldKind::Json { deduplicate: true },
            nullable: true,
        });
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let mut cache = MemmapBackend::create(dir, &schema, MemmapOptions::default()).unwrap();
    let mut written = Vec::new();
    for i in 0..6u8 {
        let mut sample = Sample::new()
            .with("image", Tensor::from_slice(&[2, 2], &[i, i + 1, i + 2, 255]).unwrap())
            .with("label", Tensor::scalar(-(i as i64)))
            .with("caption", Value::Json(format!("\"caption {i}\"")));
        if i % 2 == 0 {
            sample
                .insert("mask", Tensor::from_bools(&[2, 2], &[true, false, i > 2, true]).unwrap());
        }
        if i != 5 {
            sample.insert("source", Value::Json(format!("{{\"shard\": {}}}", i / 3)));
        }
        cache.put(&format!("item-{i}"), &sample).unwrap();
        written.push(sample);
    }
    cache.finalize().unwrap();
    drop(cache);
    for file in ["image.bin", "mask.bin", "label.bin", "source.json", "stowage.json"] {
        assert!(dir.join(file).exists(), "{file}");
    }
    let sidecar: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("source.json")).unwrap()).unwrap();
    assert_eq!(sidecar, serde_json::json!({"0": "{\"shard\": 0}", "1": "{\"shard\": 1}"}));
    let reader = read_only(dir).unwrap();
    assert_eq!(reader.schema(), &schema);
    for (i, want) in written.iter().enumerate() {
        let got = reader.get(&format!("item-{i}")).unwrap().unwrap();
        for field in &schema.fields {
            let want = want.get(&field.name).unwrap_or(&Value::Null);
            assert_eq!(got.get(&field.name), Some(want), "item-{i} {}", field.name);
        }
    }
    assert!(reader.validate(ValidationLevel::Full).unwrap().is_clean());
}

#[test]
fn a_finalize_stopped_before_complete_is_completed_by_the_next_writer() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let mut cache = create(dir);
    cache.put(&key(0), &dnanet_row(0)).unwrap();
    cache.finalize().unwrap();
    drop(cache);
    std::fs::remove_file(dir.join("_COMPLETE")).unwrap();
    assert!(!read_only(dir).unwrap().is_finalized());
    let writer = append(dir).unwrap();
    assert!(writer.is_finalized());
    assert!(dir.join("_COMPLETE").exists());
    drop(writer);
    check_rows(&read_only(dir).unwrap(), 0..1);
}

#[test]
fn a_writer_without_a_manifest_restarts_from_empty_files() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    write_flushed(dir, 0..3);
    // The manifest is gone (a crash of create, or a lost file): nothing is committed, and the
    // rows still in the .bin files must not be served as the new rows.
    std::fs::remove_file(dir.join("manifest.jsonl")).unwrap();
    assert_eq!(read_only(dir).unwrap().len(), 0);
    let mut cache = append(dir).unwrap();
    assert!(cache.is_empty());
    assert_eq!(std::fs::metadata(dir.join("data.bin")).unwrap().len(), 0);
    cache.put(&key(7), &dnanet_row(7)).unwrap();
    cache.finalize().unwrap();
    drop(cache);
    check_rows(&read_only(dir).unwrap(), 7..8);
}

#[test]
fn a_killed_writers_temporaries_are_removed_by_the_next_writer_and_dnanets_files_never() {
    let dir = tempfile::tempdir().unwrap();
    // As a create killed inside the atomic write of stowage.json leaves it (no cache yet): the
    // next create removes it.
    let meta_temp = dir.path().join(".stowage.json.tmp-4194305-0");
    std::fs::write(&meta_temp, b"{\"form").unwrap();
    write_flushed(dir.path(), 0..4);
    assert!(!meta_temp.exists());
    // As writers killed inside an adopt (the checksum file rewritten), a finalize (sidecars,
    // index, shapes, fingerprint, marker) or a resume of a DNANet cache (stowage.json) leave
    // them, named as `atomic_write` names them (no process has a pid above 2^22) ...
    let leftovers = [
        ".stowage_checksums.bin.tmp-4194305-1",
        ".panels.json.tmp-4194305-2",
        ".alleles.json.tmp-4194305-3",
        ".index.parquet.tmp-4194305-4",
        ".shapes.json.tmp-4194305-5",
        ".fingerprint.json.tmp-4194305-6",
        "._COMPLETE.tmp-4194305-7",
        ".stowage.json.tmp-4194305-8",
    ];
    // ... and files that are not stowage's temporaries: names stowage never writes atomically
    // (DNANet's row files and manifest), other programs' names and forms.
    let others = [
        ".data.bin.tmp-4194305-9",
        ".manifest.jsonl.tmp-4194305-10",
        ".notes.txt.tmp-4194305-11",
        "index.parquet.tmp-1-1",
        ".index.parquet.tmp",
        ".shapes.json.tmp-1-x",
    ];
    for name in leftovers.iter().chain(&others) {
        std::fs::write(dir.path().join(name), b"partial").unwrap();
    }
    let files = |names: &[&str]| -> Vec<Vec<u8>> {
        let mut all: Vec<&str> = vec!["data.bin", "annotation.bin", "scaler.bin", "manifest.jsonl"];
        all.extend(names);
        all.iter().map(|name| std::fs::read(dir.path().join(name)).unwrap()).collect()
    };
    let before = files(&others);
    check_rows(&read_only(dir.path()).unwrap(), 0..4);
    assert!(leftovers.iter().all(|name| dir.path().join(name).exists()), "a reader removed one");

    let mut writer = append(dir.path()).unwrap();
    for name in leftovers {
        assert!(!dir.path().join(name).exists(), "{name} left in place");
    }
    assert_eq!(files(&others), before, "DNANet's files and the others are as they were");
    put_rows(&mut writer, 4..6);
    writer.finalize().unwrap();
    check_rows(&writer, 0..6);
    assert!(writer.validate(ValidationLevel::Full).unwrap().is_clean());
}
