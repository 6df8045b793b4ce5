//! The key index of an unfinished cache (`stowage_index/tail_*`): runs written at flush once the
//! tail reaches `MemmapOptions::key_index_tail` rows; a resume maps them and replays only the
//! manifest's tail; a stale index (another writer rewrote the manifest) is not used.

use std::path::Path;

use stowage_core::{Backend, Reader, Sample, Tensor, ValidationLevel, Value};
use stowage_memmap::{MemmapBackend, MemmapOptions, dnanet};

fn key(i: usize) -> String {
    format!("/r/{i:05}.hid")
}

fn row(i: usize) -> Sample {
    Sample::new()
        .with("data", Tensor::from_slice(&[1, 2], &[i as i16, -(i as i16)]).unwrap())
        .with("scaler", Tensor::from_slice(&[2], &[i as f32, 0.5]).unwrap())
        .with("annotation", Value::Null)
        .with("panel", Value::Json(format!("[{}]", i % 3)))
        .with("allele", Value::Null)
        .with("meta_json", Value::Json(format!("{{\"i\": {i}}}")))
}

fn options(tail: usize) -> MemmapOptions {
    MemmapOptions { key_index_tail: tail, ..MemmapOptions::default() }
}

/// Puts rows `from..to`, flushing every `every` rows.
fn put_rows(cache: &mut MemmapBackend, from: usize, to: usize, every: usize) {
    for i in from..to {
        cache.put(&key(i), &row(i)).unwrap();
        if (i + 1) % every == 0 {
            cache.flush().unwrap();
        }
    }
    cache.flush().unwrap();
}

fn check_rows(cache: &MemmapBackend, rows: usize) {
    assert_eq!(cache.len(), rows);
    for i in 0..rows {
        let got = cache.get(&key(i)).unwrap().unwrap();
        for (name, value) in row(i).fields() {
            assert_eq!(got.get(name), Some(value), "row {i} field {name}");
        }
        assert_eq!(cache.get_row(i as i64).unwrap(), got, "row {i} by number");
    }
    assert!(cache.get("/absent").unwrap().is_none());
    assert!(!cache.contains(&key(rows)).unwrap());
}

fn run_files(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir.join("stowage_index"))
        .map(|entries| {
            entries.flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect()
        })
        .unwrap_or_default();
    names.retain(|n| n.ends_with(".run"));
    names.sort();
    names
}

#[test]
fn resume_maps_the_runs_and_replays_only_the_tail() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let mut cache = MemmapBackend::create(dir, &dnanet(1, 2), options(8)).unwrap();
    put_rows(&mut cache, 0, 70, 3);
    assert!(!cache.index_loaded());
    let runs = run_files(dir);
    assert!(!runs.is_empty() && runs.len() < 6, "merged geometrically: {runs:?}");
    assert!(dir.join("stowage_index/tail_state").exists());
    drop(cache);

    let reader = MemmapBackend::open_read_only(dir, options(8)).unwrap();
    check_rows(&reader, 70);
    assert!(!reader.index_loaded(), "reads by key and number never replay the manifest");
    assert_eq!(reader.keys().unwrap(), (0..70).map(key).collect::<Vec<_>>());
    assert!(reader.validate(ValidationLevel::Full).unwrap().is_clean());

    let mut writer = MemmapBackend::open_append(dir, options(8)).unwrap();
    assert!(!writer.index_loaded());
    for i in [0, 5, 40, 69] {
        let err = writer.put(&key(i), &row(i)).unwrap_err().to_string();
        assert!(err.contains(&key(i)), "a covered key is refused: {err}");
    }
    put_rows(&mut writer, 70, 150, 5);
    check_rows(&writer, 150);
    drop(writer);

    let mut writer = MemmapBackend::open_append(dir, options(8)).unwrap();
    check_rows(&writer, 150);
    writer.finalize().unwrap();
    assert!(run_files(dir).is_empty(), "finalize removes the unfinished cache's runs");
    assert!(!dir.join("stowage_index/tail_state").exists());
    drop(writer);
    let reader = MemmapBackend::open_read_only(dir, MemmapOptions::default()).unwrap();
    check_rows(&reader, 150);
    assert!(reader.validate(ValidationLevel::Full).unwrap().is_clean());
}

#[test]
fn a_stale_index_is_not_used_and_validate_says_why() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let mut cache = MemmapBackend::create(dir, &dnanet(1, 2), options(4)).unwrap();
    put_rows(&mut cache, 0, 20, 4);
    drop(cache);
    // Another writer rewrites the manifest: same rows, one line's bytes differ (extra space).
    let manifest = dir.join("manifest.jsonl");
    let text = std::fs::read_to_string(&manifest).unwrap();
    let rewritten: String =
        text.lines().map(|l| format!("{}\n", l.replacen("{\"row\"", "{ \"row\"", 1))).collect();
    std::fs::write(&manifest, rewritten).unwrap();

    let reader = MemmapBackend::open_read_only(dir, MemmapOptions::default()).unwrap();
    check_rows(&reader, 20);
    let report = reader.validate(ValidationLevel::Structure).unwrap();
    assert!(
        report.problems.iter().any(|p| p.detail.contains("key index of the unfinished cache")),
        "{:?}",
        report.problems
    );

    let mut writer = MemmapBackend::open_append(dir, options(4)).unwrap();
    check_rows(&writer, 20);
    put_rows(&mut writer, 20, 30, 4);
    drop(writer);
    let reader = MemmapBackend::open_read_only(dir, MemmapOptions::default()).unwrap();
    check_rows(&reader, 30);
    let report = reader.validate(ValidationLevel::Structure).unwrap();
    assert!(
        !report.problems.iter().any(|p| p.detail.contains("key index")),
        "rebuilt by the writer: {:?}",
        report.problems
    );
}

#[test]
fn damaged_line_locations_never_return_another_keys_row() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let mut cache = MemmapBackend::create(dir, &dnanet(1, 2), options(4)).unwrap();
    put_rows(&mut cache, 0, 24, 4);
    drop(cache);
    let lines = dir.join("stowage_index/tail_lines.bin");
    let mut bytes = std::fs::read(&lines).unwrap();
    // Row 3's location points at row 4's line.
    let (a, b) = (3 * 16, 4 * 16);
    let row4 = bytes[b..b + 16].to_vec();
    bytes[a..a + 16].copy_from_slice(&row4);
    std::fs::write(&lines, bytes).unwrap();
    let reader = MemmapBackend::open_read_only(dir, MemmapOptions::default()).unwrap();
    check_rows(&reader, 24);
}

#[test]
fn validate_checks_the_runs_and_line_locations() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    let mut cache = MemmapBackend::create(dir, &dnanet(1, 2), options(4)).unwrap();
    put_rows(&mut cache, 0, 24, 4);
    drop(cache);
    let clean = MemmapBackend::open_read_only(dir, MemmapOptions::default()).unwrap();
    assert!(clean.validate(ValidationLevel::Structure).unwrap().is_clean());
    let run = dir.join("stowage_index").join(&run_files(dir)[0]);
    let mut bytes = std::fs::read(&run).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 0x40;
    std::fs::write(&run, bytes).unwrap();
    let reader = MemmapBackend::open_read_only(dir, MemmapOptions::default()).unwrap();
    let report = reader.validate(ValidationLevel::Structure).unwrap();
    assert!(
        report
            .problems
            .iter()
            .any(|p| p.detail.contains("key index of the unfinished cache is damaged")),
        "{:?}",
        report.problems
    );
    for i in 0..24 {
        if let Some(got) = reader.get(&key(i)).unwrap() {
            assert_eq!(got.get("meta_json"), row(i).get("meta_json"), "never another key's row");
        }
    }
}

/// The run file names `stowage_index/tail_state` lists.
fn named_runs(dir: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(dir.join("stowage_index/tail_state")).unwrap();
    let body: serde_json::Value = serde_json::from_str(text.lines().next().unwrap()).unwrap();
    body["runs"].as_array().unwrap().iter().map(|r| r[0].as_str().unwrap().to_owned()).collect()
}

#[test]
fn merges_run_beside_the_flushes_and_keep_the_runs_few() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    // A run per flush: 300 runs unless merged.
    let mut cache = MemmapBackend::create(dir, &dnanet(1, 2), options(1)).unwrap();
    put_rows(&mut cache, 0, 300, 1);
    let named = named_runs(dir);
    // A flush waits for a running merge once 16 runs piled up: at most 17 named.
    assert!(named.len() <= 17, "{} runs: {named:?}", named.len());
    let on_disk = run_files(dir);
    assert!(named.iter().all(|n| on_disk.contains(n)), "{named:?} vs {on_disk:?}");
    check_rows(&cache, 300);
    drop(cache); // stops a running merge: its run is named nowhere

    let mut writer = MemmapBackend::open_append(dir, options(1)).unwrap();
    let mut named = named_runs(dir);
    named.sort();
    assert_eq!(run_files(dir), named, "the next writer removes runs the state does not name");
    put_rows(&mut writer, 300, 400, 1);
    check_rows(&writer, 400);
    // Finalize stops the merge that the last flushes started before it removes the runs.
    writer.finalize().unwrap();
    assert!(run_files(dir).is_empty());
    drop(writer);
    let reader = MemmapBackend::open_read_only(dir, MemmapOptions::default()).unwrap();
    check_rows(&reader, 400);
}
