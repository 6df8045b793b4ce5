//! Builders of small caches for the unit tests.

use std::path::Path;
use std::sync::Arc;

use arrow_array::{ArrayRef, BooleanArray, Int32Array, Int64Array, RecordBatch, StringArray};
use parquet::arrow::ArrowWriter;

/// One row of a hand-built `index.parquet`.
pub struct IndexRow {
    pub path: String,
    pub has_annotation: bool,
    pub panel_key: Option<i32>,
    pub allele_key: Option<i32>,
    pub meta_json: String,
}

impl IndexRow {
    pub fn new(
        path: &str,
        has_annotation: bool,
        panel_key: Option<i32>,
        allele_key: Option<i32>,
        meta_json: &str,
    ) -> IndexRow {
        IndexRow {
            path: path.into(),
            has_annotation,
            panel_key,
            allele_key,
            meta_json: meta_json.into(),
        }
    }
}

pub fn write_parquet(path: &Path, batch: RecordBatch) {
    let file = std::fs::File::create(path).unwrap();
    let mut writer = ArrowWriter::try_new(file, batch.schema(), None).unwrap();
    writer.write(&batch).unwrap();
    writer.close().unwrap();
}

pub fn write_index(path: &Path, rows: &[IndexRow]) {
    let columns: Vec<(&str, ArrayRef)> = vec![
        ("row", Arc::new(Int64Array::from_iter_values(0..rows.len() as i64))),
        ("path", Arc::new(StringArray::from_iter_values(rows.iter().map(|r| &r.path)))),
        (
            "has_annotation",
            Arc::new(BooleanArray::from_iter(rows.iter().map(|r| Some(r.has_annotation)))),
        ),
        ("panel_key", Arc::new(Int32Array::from_iter(rows.iter().map(|r| r.panel_key)))),
        ("allele_key", Arc::new(Int32Array::from_iter(rows.iter().map(|r| r.allele_key)))),
        ("meta_json", Arc::new(StringArray::from_iter_values(rows.iter().map(|r| &r.meta_json)))),
    ];
    write_parquet(path, RecordBatch::try_from_iter(columns).unwrap());
}

/// A finalized DNANet cache of three rows with D = 2, L = 4 in `dir`. Row i's data holds
/// `i * 100 + j`, annotation `i + j`, scaler `i + j / 10`; row 1 has no annotation and no allele.
pub fn write_dnanet_cache(dir: &Path) {
    let rows = [
        IndexRow::new("/r/a.hid", true, Some(0), Some(0), "{}"),
        IndexRow::new("/r/b.hid", false, Some(1), None, r#"{"id": "b"}"#),
        IndexRow::new("/r/c.hid", true, None, Some(1), "{}"),
    ];
    let mut data = Vec::new();
    let mut annotation = Vec::new();
    let mut scaler = Vec::new();
    for i in 0..3i16 {
        for j in 0..8i16 {
            data.extend_from_slice(&(i * 100 + j).to_le_bytes());
            let ann = if i == 1 { 0 } else { (i + j) as i8 };
            annotation.extend_from_slice(&ann.to_le_bytes());
        }
        for j in 0..4 {
            scaler.extend_from_slice(&(f32::from(i) + j as f32 / 10.0).to_le_bytes());
        }
    }
    std::fs::write(dir.join("data.bin"), data).unwrap();
    std::fs::write(dir.join("annotation.bin"), annotation).unwrap();
    std::fs::write(dir.join("scaler.bin"), scaler).unwrap();
    write_index(&dir.join("index.parquet"), &rows);
    std::fs::write(dir.join("panels.json"), r#"{"0": "[\"p0\"]", "1": "[\"p1\"]"}"#).unwrap();
    std::fs::write(dir.join("alleles.json"), r#"{"0": "[\"a0\"]", "1": "[\"a1\"]"}"#).unwrap();
    std::fs::write(
        dir.join("shapes.json"),
        r#"{"n": 3, "data": {"shape": [2, 4], "dtype": "<i2"},
            "annotation": {"shape": [2, 4], "dtype": "|i1"},
            "scaler": {"shape": [4], "dtype": "<f4"}}"#,
    )
    .unwrap();
    std::fs::write(dir.join("fingerprint.json"), r#"{"cache_version": 5, "hash": "00"}"#).unwrap();
    std::fs::write(dir.join("_COMPLETE"), b"").unwrap();
}
