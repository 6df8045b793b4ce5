//! Finalize streams the rows once and never holds them all: `index.parquet` is written row group
//! by row group, the key index a chunk of entries at a time (scratch runs merged into
//! `stowage_index/run.bin`). These tests run it with small bounds (hidden options), so that a
//! few thousand rows cross every boundary: the files must hold exactly what the manifest held,
//! row by row; the memory held is counted in rows (deterministic), never timed; two rows holding
//! one key are refused as before; and a finalize killed (and power-cut) anywhere leaves a cache
//! the next writer finishes.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use arrow_array::{Array, BooleanArray, Int32Array, Int64Array, StringArray};
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use stowage_core::{Backend, Error, Reader, Sample, Tensor, ValidationLevel, Value};
use stowage_memmap::{MemmapBackend, MemmapOptions, dnanet};

/// Rows of the streamed caches.
const ROWS: usize = 200_000;

fn small_bounds() -> MemmapOptions {
    MemmapOptions {
        finalize_row_group_rows: 1000,
        finalize_run_rows: 5000,
        ..MemmapOptions::default()
    }
}

/// Row `i`: a nullable annotation present on two rows in three, panels shared by many rows
/// (deduplicated), alleles on some rows, a plain meta text per row.
fn row(i: usize) -> Sample {
    let mut sample = Sample::new()
        .with(
            "data",
            Tensor::from_slice(&[1, 2], &[(i % 30_000) as i16, -((i % 30_000) as i16)]).unwrap(),
        )
        .with("scaler", Tensor::from_slice(&[2], &[i as f32, 0.5]).unwrap())
        .with("panel", Value::Json(format!("[\"panel-{}\"]", i % 37)))
        .with("meta_json", Value::Json(format!("{{\"i\": {i}}}")));
    if !i.is_multiple_of(3) {
        sample = sample.with("annotation", Tensor::from_slice(&[1, 2], &[1i8, 0]).unwrap());
    }
    if i.is_multiple_of(5) {
        sample = sample.with("allele", Value::Json(format!("{{\"a\": {}}}", i % 11)));
    }
    sample
}

fn key(i: usize) -> String {
    format!("/data/sample-{i:07}.hid")
}

fn write_rows(dir: &Path, rows: usize, options: MemmapOptions) -> MemmapBackend {
    let mut cache = MemmapBackend::create(dir, &dnanet(1, 2), options).unwrap();
    for i in 0..rows {
        cache.put(&key(i), &row(i)).unwrap();
    }
    cache.flush().unwrap();
    cache
}

/// The parsed lines of `manifest.jsonl`.
fn manifest_lines(dir: &Path) -> Vec<serde_json::Value> {
    let text = std::fs::read_to_string(dir.join("manifest.jsonl")).unwrap();
    text.lines().map(|line| serde_json::from_str(line).unwrap()).collect()
}

/// Every row of `index.parquet` as (row, path, has_annotation, panel text, alleles text, meta
/// text), the sidecar keys resolved through the sidecars; and each row group's row count.
type IndexRow = (i64, String, bool, Option<String>, Option<String>, Option<String>);

fn read_index(dir: &Path) -> (Vec<IndexRow>, Vec<usize>) {
    let sidecar = |name: &str| -> HashMap<i32, String> {
        let text = std::fs::read_to_string(dir.join(name)).unwrap();
        let object: serde_json::Map<String, serde_json::Value> =
            serde_json::from_str(&text).unwrap();
        object
            .into_iter()
            .map(|(k, v)| (k.parse().unwrap(), v.as_str().unwrap().to_owned()))
            .collect()
    };
    let (panels, alleles) = (sidecar("panels.json"), sidecar("alleles.json"));
    let file = std::fs::File::open(dir.join("index.parquet")).unwrap();
    let builder = ParquetRecordBatchReaderBuilder::try_new(file).unwrap();
    let groups: Vec<usize> =
        builder.metadata().row_groups().iter().map(|g| g.num_rows() as usize).collect();
    let names: Vec<String> = builder.schema().fields().iter().map(|f| f.name().clone()).collect();
    assert_eq!(
        names,
        ["row", "path", "has_annotation", "panel_key", "allele_key", "meta_json"],
        "the columns of today's index.parquet, in order"
    );
    assert!(builder.schema().fields().iter().all(|f| f.is_nullable()));
    let mut rows = Vec::new();
    for batch in builder.build().unwrap() {
        let batch = batch.unwrap();
        let col = |i: usize| batch.column(i).clone();
        let row = col(0);
        let row = row.as_any().downcast_ref::<Int64Array>().unwrap();
        let path = col(1);
        let path = path.as_any().downcast_ref::<StringArray>().unwrap();
        let has = col(2);
        let has = has.as_any().downcast_ref::<BooleanArray>().unwrap();
        let panel = col(3);
        let panel = panel.as_any().downcast_ref::<Int32Array>().unwrap();
        let allele = col(4);
        let allele = allele.as_any().downcast_ref::<Int32Array>().unwrap();
        let meta = col(5);
        let meta = meta.as_any().downcast_ref::<StringArray>().unwrap();
        for i in 0..batch.num_rows() {
            let text = |keys: &Int32Array, sidecar: &HashMap<i32, String>| {
                keys.is_valid(i).then(|| sidecar[&keys.value(i)].clone())
            };
            rows.push((
                row.value(i),
                path.value(i).to_owned(),
                has.value(i),
                text(panel, &panels),
                text(allele, &alleles),
                meta.is_valid(i).then(|| meta.value(i).to_owned()),
            ));
        }
    }
    (rows, groups)
}

/// What a manifest line says of its row, in [`IndexRow`]'s form.
fn from_line(line: &serde_json::Value) -> IndexRow {
    let text = |key: &str| line[key].as_str().map(str::to_owned);
    (
        line["row"].as_i64().unwrap(),
        line["path"].as_str().unwrap().to_owned(),
        line["has_annotation"].as_bool().unwrap(),
        text("adjusted_panel_json"),
        text("allele_annotation_json"),
        text("meta_json"),
    )
}

#[test]
fn a_streamed_finalize_writes_exactly_the_manifests_rows_in_bounded_row_groups() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cache");
    let mut cache = write_rows(&path, ROWS, small_bounds());
    let lines = manifest_lines(&path);
    assert_eq!(lines.len(), ROWS);
    cache.finalize().unwrap();

    // Memory, counted in rows: one batch, one row group, one chunk of key entries at a time.
    let stats = cache.finalize_stats().unwrap();
    assert_eq!(stats.rows, ROWS);
    assert!(stats.most_rows_batched <= 1000, "{stats:?}");
    assert!(stats.most_rows_in_row_group <= 1000, "{stats:?}");
    assert!(stats.most_key_entries <= 5000, "{stats:?}");
    // 40 runs of 5,000 entries, two merges of 16: every path compared across runs.
    assert_eq!(stats.scratch_runs, 42, "{stats:?}");
    assert_eq!(stats.row_groups, 200, "{stats:?}");

    // index.parquet, row by row, against the manifest's lines.
    let (rows, groups) = read_index(&path);
    assert!(groups.iter().all(|&n| n <= 1000) && groups.len() == 200, "{groups:?}");
    assert_eq!(rows.len(), ROWS);
    for (i, (line, got)) in lines.iter().zip(&rows).enumerate() {
        assert_eq!(&from_line(line), got, "row {i}");
    }
    let shapes: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path.join("shapes.json")).unwrap()).unwrap();
    assert_eq!(shapes["n"], ROWS);
    // No scratch run or temporary is left.
    let left: Vec<String> = std::fs::read_dir(path.join("stowage_index"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(sorted(left), ["keys.bin", "run.bin"]);

    // The finalizing handle reads through the key index it wrote; so does a reader.
    for handle in [&cache, &MemmapBackend::open_read_only(&path, MemmapOptions::default()).unwrap()]
    {
        assert!(handle.uses_key_index());
        for i in (0..ROWS).step_by(7919).chain([ROWS - 1]) {
            let got = handle.get(&key(i)).unwrap().unwrap();
            assert_eq!(got.get("meta_json"), row(i).get("meta_json"), "row {i}");
            assert_eq!(got.get("panel"), row(i).get("panel"), "row {i}");
        }
        assert!(handle.get("/data/absent.hid").unwrap().is_none());
        assert!(!handle.index_loaded(), "no read loaded index.parquet");
    }
    let reader = MemmapBackend::open_read_only(&path, MemmapOptions::default()).unwrap();
    let report = reader.validate(ValidationLevel::Full).unwrap();
    assert!(report.is_clean(), "{report:?}");
}

fn sorted(mut names: Vec<String>) -> Vec<String> {
    names.sort();
    names
}

#[test]
fn small_bounds_and_one_pass_write_the_same_key_index() {
    // The same rows finalized in one chunk (the default bounds) and in 40 merged chunks: the
    // run's slots and the key file's records are the same bytes (only the headers, which name
    // index.parquet's footer, differ with its row groups).
    let dir = tempfile::tempdir().unwrap();
    let rows = 60_000;
    let mut built = Vec::new();
    for (name, options) in [("one", MemmapOptions::default()), ("chunked", small_bounds())] {
        let path = dir.path().join(name);
        let options = MemmapOptions { finalize_run_rows: options.finalize_run_rows / 4, ..options };
        let mut cache = write_rows(&path, rows, options);
        cache.finalize().unwrap();
        let run = std::fs::read(path.join("stowage_index/run.bin")).unwrap();
        let keys = std::fs::read(path.join("stowage_index/keys.bin")).unwrap();
        built.push((run, keys, read_index(&path).0));
    }
    let (one, chunked) = (&built[0], &built[1]);
    assert_eq!(one.0.len(), chunked.0.len());
    assert!(one.0[80..] == chunked.0[80..], "run.bin slots differ");
    assert!(one.1[80..] == chunked.1[80..], "keys.bin offsets or records differ");
    assert_eq!(one.2, chunked.2, "index.parquet rows differ");
}

/// Appends a copy of row `of` to every `.bin` file of the unfinished cache at `dir` and its
/// manifest line as row `as_row`, as another writer that stored a key twice would.
fn append_copy_of_row(dir: &Path, of: usize, as_row: usize) {
    let lines = manifest_lines(dir);
    let rows = lines.len();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "bin") {
            let bytes = std::fs::read(&path).unwrap();
            let row_bytes = bytes.len() / rows;
            let mut grown = bytes.clone();
            grown.extend_from_slice(&bytes[of * row_bytes..(of + 1) * row_bytes]);
            std::fs::write(&path, grown).unwrap();
        }
    }
    let text = std::fs::read_to_string(dir.join("manifest.jsonl")).unwrap();
    let line = text.lines().nth(of).unwrap();
    let copy = line.replacen(&format!("{{\"row\": {of},"), &format!("{{\"row\": {as_row},"), 1);
    std::fs::write(dir.join("manifest.jsonl"), format!("{text}{copy}\n")).unwrap();
}

#[test]
fn a_key_stored_twice_is_refused_across_runs_and_nothing_is_published() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cache");
    // Key index runs of the unfinished cache cover the first rows: the copy, in the tail, is
    // not refused at open (finding it there would cost a lookup per tail row).
    let options = MemmapOptions { key_index_tail: 100, ..small_bounds() };
    let cache = write_rows(&path, 12_000, options.clone());
    drop(cache);
    append_copy_of_row(&path, 17, 12_000);
    // validate streams the rows and looks each key up: the copy is a problem naming both rows.
    let reader = MemmapBackend::open_read_only(&path, MemmapOptions::default()).unwrap();
    let report = reader.validate(ValidationLevel::Structure).unwrap();
    let named = format!("{:?} is stored in rows 17 and 12000", key(17));
    assert!(report.problems.iter().any(|p| p.detail.contains(&named)), "{report:?}");
    assert!(!reader.index_loaded());
    drop(reader);
    for run_rows in [5000, 3, 100_000] {
        let options = MemmapOptions { finalize_run_rows: run_rows, ..options.clone() };
        let mut cache = MemmapBackend::open_append(&path, options).unwrap();
        assert_eq!(cache.len(), 12_001);
        let err = cache.finalize().unwrap_err();
        let message = err.to_string();
        assert!(matches!(err, Error::Corrupted { .. }), "{message}");
        assert!(
            message.contains(&format!("{:?} is stored in rows 17 and 12000", key(17)))
                && message.contains("manifest.jsonl"),
            "run_rows {run_rows}: {message}"
        );
        // Found before anything was published: the handle is not poisoned, and says it again.
        assert!(cache.contains(&key(17)).unwrap());
        let again = cache.finalize().unwrap_err();
        assert!(matches!(again, Error::Corrupted { .. }), "{again}");
        drop(cache);
        assert!(path.join("manifest.jsonl").exists() && !path.join("_COMPLETE").exists());
        assert!(!path.join("index.parquet").exists(), "run_rows {run_rows}");
        let left: Vec<String> = std::fs::read_dir(path.join("stowage_index"))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|name| !name.starts_with("tail"))
            .collect();
        assert!(left.is_empty(), "run_rows {run_rows}: {left:?}");
    }
}

#[test]
fn validate_adopt_describe_and_keys_of_an_unfinished_cache_stream_its_rows() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cache");
    let rows = 3000;
    let options = MemmapOptions { key_index_tail: 100, ..MemmapOptions::default() };
    drop(write_rows(&path, rows, options.clone()));
    let reader = MemmapBackend::open_read_only(&path, options.clone()).unwrap();
    let report = reader.validate(ValidationLevel::Full).unwrap();
    assert!(report.is_clean(), "{report:?}");
    assert_eq!(report.samples_checked, rows as u64, "every row it calls clean was read");
    let description = reader.describe().unwrap();
    let panels = description.dedup.iter().find(|d| d.what == "field \"panel\"").unwrap();
    assert_eq!((panels.references, panels.stored), (rows as u64, 37), "{panels:?}");
    assert_eq!(reader.keys().unwrap().len(), rows);
    assert!(!reader.index_loaded(), "no call loaded every row");
    drop(reader);
    let mut writer = MemmapBackend::open_append(&path, options).unwrap();
    assert!(writer.adopt().unwrap().is_empty(), "stowage's own rows: nothing to adopt");
    assert!(writer.validate(ValidationLevel::Full).unwrap().is_clean());
    assert!(!writer.index_loaded(), "no call loaded every row");
}

/// The child of the kill test: finalizes the cache its parent names, with small bounds.
#[test]
fn finalize_child() {
    let Some(path) = std::env::var_os("STOWAGE_MEMMAP_FINALIZE_CHILD") else { return };
    let mut cache = MemmapBackend::open_append(PathBuf::from(path), small_bounds()).unwrap();
    cache.finalize().unwrap();
}

#[test]
fn a_killed_streamed_finalize_leaves_a_cache_the_next_writer_finishes() {
    use stowage_conformance::durable_image::{self, DurableImage, Tearing};
    let rows = 20_000;
    let base = tempfile::tempdir().unwrap();
    let base = base.path().canonicalize().unwrap();
    let power = durable_image::library().is_some();
    if !power {
        println!(
            "SKIPPED power cuts: {}; the finalizes are killed only",
            durable_image::UNAVAILABLE
        );
    }
    // Trial 0 runs to the end and times the finalize; the others kill it part way.
    let mut full = Duration::from_millis(500);
    let trials = 10u32;
    let mut outcomes = (0, 0);
    for trial in 0..trials {
        let image = DurableImage::prepare(&base.join(format!("trial-{trial}"))).unwrap();
        let path = image.root().join("cache");
        drop(write_rows(&path, rows, MemmapOptions { key_index_tail: 4096, ..small_bounds() }));
        image.sync_all().unwrap();
        let mut command = Command::new(std::env::current_exe().unwrap());
        command
            .args(["--exact", "finalize_child", "--nocapture", "--test-threads", "1"])
            .env("STOWAGE_MEMMAP_FINALIZE_CHILD", &path);
        if power {
            image.attach(&mut command).unwrap();
        }
        let started = Instant::now();
        let mut child = command.spawn().unwrap();
        if trial == 0 {
            assert!(child.wait().unwrap().success());
            full = started.elapsed();
        } else {
            std::thread::sleep(full * trial / trials);
            let _ = child.kill();
            child.wait().unwrap();
        }
        if power {
            assert!(image.was_loaded());
            assert_eq!(image.unmodeled(), Vec::<String>::new(), "no write it cannot model");
            image.cut_power_torn(Some(Tearing::for_trial(u64::from(trial)))).unwrap();
        }
        // What the kill (and the power cut) left opens, with every row.
        let reader = MemmapBackend::open_read_only(&path, MemmapOptions::default())
            .unwrap_or_else(|e| panic!("trial {trial}: {e}"));
        assert_eq!(reader.len(), rows, "trial {trial}");
        let finalized = reader.is_finalized();
        if finalized {
            outcomes.0 += 1;
        } else {
            outcomes.1 += 1;
            drop(reader);
            let mut cache = MemmapBackend::open_append(&path, MemmapOptions::default())
                .unwrap_or_else(|e| panic!("trial {trial}: {e}"));
            cache.finalize().unwrap_or_else(|e| panic!("trial {trial}: {e}"));
        }
        let reader = MemmapBackend::open_read_only(&path, MemmapOptions::default()).unwrap();
        assert!(reader.is_finalized() && reader.uses_key_index(), "trial {trial}");
        for i in (0..rows).step_by(997) {
            let got = reader.get(&key(i)).unwrap().unwrap_or_else(|| panic!("trial {trial}: {i}"));
            assert_eq!(got.get("meta_json"), row(i).get("meta_json"), "trial {trial}");
        }
        let report = reader.validate(ValidationLevel::Full).unwrap();
        assert!(
            report.is_clean(),
            "trial {trial} (finalized by the child: {finalized}): {report:?}"
        );
        let mut left: Vec<String> = std::fs::read_dir(path.join("stowage_index"))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        left.sort();
        assert_eq!(left, ["keys.bin", "run.bin"], "trial {trial}");
    }
    println!("finalized by the child: {}, by the next writer: {}", outcomes.0, outcomes.1);
    assert!(outcomes.1 > 0, "no finalize was killed part way ({full:?})");
}
