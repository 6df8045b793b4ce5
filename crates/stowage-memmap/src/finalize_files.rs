//! What `finalize` writes, each file atomically (temporary file, fsync, rename, directory fsync):
//! the deduplicated sidecars, `index.parquet`, `shapes.json` and `fingerprint.json`. Removing the
//! manifest and writing `_COMPLETE` (the commit) are the backend's last two steps.
//!
//! In a cache with checksums, `index.parquet` records in its metadata
//! ([`crate::index::CHECKSUM_ROWS_KEY`]) that `stowage_checksums.bin` holds a row for each of its
//! rows: later, a checksum file shorter than that is damage, not rows another writer added.

use std::collections::HashMap;
use std::sync::Arc;

use arrow_array::{ArrayRef, BooleanArray, Int32Array, Int64Array, RecordBatch, StringArray};
use parquet::arrow::ArrowWriter;
use parquet::basic::Compression;
use parquet::file::metadata::KeyValue;
use parquet::file::properties::WriterProperties;
use serde_json::{Map, Value as Json};
use stowage_core::file_safety::{atomic_write, atomic_write_with};
use stowage_core::{Error, Result};
use stowage_fingerprint::canonical_json::{PyJsonOptions, to_python_json};

use crate::index::{CHECKSUM_ROWS_KEY, JsonRef, RowIndex};
use crate::layout::Layout;
use crate::row_format::{JsonStorage, RowFormat};

/// Writes every derived file of a finalized cache from the committed rows in `index`;
/// `fingerprint` is the exact text of `fingerprint.json`. After `index.parquet`, stowage's key
/// index (`stowage_index/`, [`crate::key_index`]) when the cache has checksums.
pub(crate) fn write_finalize_files(
    layout: &Layout,
    format: &RowFormat,
    index: &RowIndex,
    fingerprint: &[u8],
) -> Result<()> {
    let mut key_columns = Vec::with_capacity(format.json.len());
    for (j, field) in format.json.iter().enumerate() {
        let JsonStorage::Deduplicated { sidecar, .. } = &field.storage else {
            key_columns.push(None);
            continue;
        };
        let (keys, texts) = deduplicate(index, j, &field.name)?;
        let object: Map<String, Json> = texts
            .into_iter()
            .enumerate()
            .map(|(key, text)| (key.to_string(), Json::String(text.to_string())))
            .collect();
        let text = to_python_json(&Json::Object(object), &PyJsonOptions::default());
        atomic_write(layout.file(sidecar), text.as_bytes())?;
        key_columns.push(Some(keys));
    }
    write_index(layout, format, index, &key_columns)?;
    if format.checksums {
        let checksum_rows = Some(index.len());
        crate::key_index::write(layout, format, index.rows(), &key_columns, checksum_rows)?;
    }
    write_shapes(layout, format, index.len())?;
    atomic_write(layout.fingerprint(), fingerprint)
}

/// Per row, its sidecar key (null for a null text); then the distinct texts in key order.
type Deduplicated = (Vec<Option<i32>>, Vec<Arc<str>>);

/// Sidecar keys of JSON field `j` for every row (first-seen order, exact string equality) and the
/// distinct texts in key order.
fn deduplicate(index: &RowIndex, j: usize, name: &str) -> Result<Deduplicated> {
    let mut keys_of: HashMap<Arc<str>, i32> = HashMap::new();
    let mut texts = Vec::new();
    let mut keys = Vec::with_capacity(index.len());
    for row in index.rows() {
        keys.push(match &row.json[j] {
            JsonRef::Null => None,
            JsonRef::Inline(text) => Some(match keys_of.get(text) {
                Some(&key) => key,
                None => {
                    let key = i32::try_from(texts.len()).map_err(|_| {
                        Error::invalid(format!("field {name:?}: more distinct texts than int32 keys"))
                    })?;
                    keys_of.insert(text.clone(), key);
                    texts.push(text.clone());
                    key
                }
            }),
            JsonRef::Key(_) => {
                return Err(Error::invalid(format!(
                    "field {name:?} of row {:?}: a finalized cache's sidecar key cannot be rewritten",
                    row.path
                )));
            }
        });
    }
    Ok((keys, texts))
}

/// `index.parquet`: `row`, `path`, `has_<field>`, `<field>_key`, plain JSON columns; snappy.
fn write_index(
    layout: &Layout,
    format: &RowFormat,
    index: &RowIndex,
    key_columns: &[Option<Vec<Option<i32>>>],
) -> Result<()> {
    let rows = index.rows();
    let mut columns: Vec<(String, ArrayRef)> = vec![
        ("row".into(), Arc::new(Int64Array::from_iter_values(0..rows.len() as i64))),
        ("path".into(), Arc::new(StringArray::from_iter_values(rows.iter().map(|r| &*r.path)))),
    ];
    for (t, tensor) in format.tensors.iter().enumerate() {
        if let Some(name) = &tensor.has_column {
            let flags: Vec<bool> = rows.iter().map(|r| r.present[t]).collect();
            columns.push((name.clone(), Arc::new(BooleanArray::from(flags))));
        }
    }
    for ((j, field), keys) in format.json.iter().enumerate().zip(key_columns) {
        match (&field.storage, keys) {
            (JsonStorage::Deduplicated { key_column, .. }, Some(keys)) => {
                columns.push((key_column.clone(), Arc::new(Int32Array::from(keys.clone()))));
            }
            (JsonStorage::Plain { column }, _) => {
                let texts = rows.iter().map(|r| match &r.json[j] {
                    JsonRef::Inline(text) => Some(text.to_string()),
                    _ => None,
                });
                columns.push((column.clone(), Arc::new(StringArray::from_iter(texts))));
            }
            (JsonStorage::Deduplicated { .. }, None) => {
                unreachable!("keys built for every sidecar")
            }
        }
    }
    let path = layout.index();
    let batch = RecordBatch::try_from_iter_with_nullable(
        columns.into_iter().map(|(name, array)| (name, array, true)),
    )
    .map_err(|e| Error::invalid(format!("building {}: {e}", path.display())))?;
    let mut properties = WriterProperties::builder().set_compression(Compression::SNAPPY);
    if format.checksums {
        let rows = KeyValue::new(CHECKSUM_ROWS_KEY.to_owned(), rows.len().to_string());
        properties = properties.set_key_value_metadata(Some(vec![rows]));
    }
    let properties = properties.build();
    atomic_write_with(&path, |out| {
        let mut writer = ArrowWriter::try_new(out, batch.schema(), Some(properties))
            .map_err(std::io::Error::other)?;
        writer.write(&batch).map_err(std::io::Error::other)?;
        writer.close().map_err(std::io::Error::other)?;
        Ok(())
    })
}

/// `shapes.json`: `{"n": N, "<field>": {"shape": [...], "dtype": "<i2"}, ...}`, indent=2 like Python.
fn write_shapes(layout: &Layout, format: &RowFormat, rows: usize) -> Result<()> {
    let mut object = Map::new();
    object.insert("n".into(), Json::from(rows as u64));
    for tensor in &format.tensors {
        let mut spec = Map::new();
        spec.insert("shape".into(), Json::from(tensor.layout.shape.clone()));
        spec.insert("dtype".into(), Json::from(tensor.layout.descr.clone()));
        object.insert(tensor.layout.name.clone(), Json::Object(spec));
    }
    let text = to_python_json(&Json::Object(object), &PyJsonOptions::indented(2));
    atomic_write(layout.shapes(), text.as_bytes())
}
