//! What `finalize` writes, each file atomically (temporary file, fsync, rename, directory fsync):
//! stowage's key index run (`stowage_index/run.bin`), the deduplicated sidecars, `index.parquet`,
//! the key file (`stowage_index/keys.bin`), `shapes.json` and `fingerprint.json`. Removing the
//! manifest and writing `_COMPLETE` (the commit) are the backend's last two steps.
//!
//! The rows stream through once, in row order, and are never all held: `index.parquet` is
//! written row group by row group ([`FinalizeBounds::row_group_rows`] rows at the most, fewer
//! when their bytes reach [`ROW_GROUP_BYTES`]) into its temporary, the key index a record and an
//! entry at a time ([`KeysBuilder`]). What finalize keeps for the whole pass is, per deduplicated
//! JSON field, its distinct texts and their keys: bounded by the distinct values, not the rows.
//!
//! In a cache with checksums, `index.parquet` records in its metadata
//! ([`crate::index::CHECKSUM_ROWS_KEY`]) that `stowage_checksums.bin` holds a row for each of its
//! rows: later, a checksum file shorter than that is damage, not rows another writer added.

use std::collections::HashMap;
use std::fs::File;
use std::io::BufWriter;
use std::path::Path;
use std::sync::Arc;

use arrow_array::builder::{BooleanBuilder, Int32Builder, StringBuilder};
use arrow_array::{ArrayRef, Int64Array, RecordBatch};
use arrow_schema::{DataType, Field, Schema as ArrowSchema, SchemaRef};
use parquet::arrow::ArrowWriter;
use parquet::basic::Compression;
use parquet::file::metadata::KeyValue;
use parquet::file::properties::WriterProperties;
use serde_json::{Map, Value as Json};
use stowage_core::file_safety::atomic_write;
use stowage_core::{Error, IoResultExt, Result};
use stowage_fingerprint::canonical_json::{PyJsonOptions, to_python_json};

use crate::file_io::Staged;
use crate::index::{CHECKSUM_ROWS_KEY, JsonRef, RowEntry};
use crate::key_index::{KeysBuilder, parquet_stamp};
use crate::layout::Layout;
use crate::row_format::{JsonStorage, RowFormat};

/// Rows of `index.parquet`'s row groups, at the most (`MemmapOptions::finalize_row_group_rows`):
/// parquet's default, as when the index was written in one batch, so that the file keeps its
/// size (measured at 10 M keys of short paths: 93 MB, against 119 MB in groups of 131,072 rows,
/// for 8 MiB more of memory); [`ROW_GROUP_BYTES`] bounds a group of long texts.
pub(crate) const ROW_GROUP_ROWS: usize = 1 << 20;

/// The estimated encoded bytes at which a row group of `index.parquet` ends before its row bound
/// (long paths or large plain JSON texts).
pub(crate) const ROW_GROUP_BYTES: usize = 32 << 20;

/// Rows (or, for long texts, [`BATCH_BYTES`]) gathered into one batch handed to the parquet
/// writer.
const BATCH_ROWS: usize = 8192;
const BATCH_BYTES: usize = 8 << 20;

/// How many rows finalize holds at a time.
#[derive(Debug, Clone, Copy)]
pub(crate) struct FinalizeBounds {
    /// Rows of an `index.parquet` row group, at the most.
    pub row_group_rows: usize,
    /// Key index entries gathered before they are written out as a run.
    pub run_rows: usize,
}

/// What a finalize held and wrote, for tests of its bounded memory.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FinalizeStats {
    /// Rows finalized.
    pub rows: usize,
    /// Row groups of `index.parquet`.
    pub row_groups: usize,
    /// The most rows gathered at once for the parquet writer (a batch).
    pub most_rows_batched: usize,
    /// The most rows the parquet writer's open row group held at once (after a batch).
    pub most_rows_in_row_group: usize,
    /// The most key index entries gathered at once.
    pub most_key_entries: usize,
    /// Scratch runs written on the way to `run.bin`.
    pub scratch_runs: usize,
}

/// Writes every derived file of a finalized cache from its `rows` committed rows, which
/// `each_row` streams (in row order) into the callback it is given, from `source` (named in
/// errors); `fingerprint` is the exact text of `fingerprint.json`. Stowage's key index
/// (`stowage_index/`, [`crate::key_index`]) when the cache has checksums.
pub(crate) fn write_finalize_files(
    layout: &Layout,
    format: &RowFormat,
    rows: usize,
    source: &Path,
    each_row: impl FnOnce(&mut dyn FnMut(usize, &RowEntry) -> Result<()>) -> Result<()>,
    fingerprint: &[u8],
    bounds: FinalizeBounds,
) -> Result<FinalizeStats> {
    let checksum_rows = format.checksums.then_some(rows);
    let mut index = IndexWriter::create(layout, format, checksum_rows, bounds.row_group_rows)?;
    let mut keys = KeysBuilder::create(layout, source, rows, bounds.run_rows)?;
    let mut sidecars: Vec<Option<Deduplicated>> = format
        .json
        .iter()
        .map(|field| match field.storage {
            JsonStorage::Deduplicated { .. } => Some(Deduplicated::default()),
            JsonStorage::Plain { .. } => None,
        })
        .collect();
    let mut refs: Vec<JsonRef> = Vec::with_capacity(format.json.len());
    let mut seen = 0usize;
    each_row(&mut |row, entry| {
        refs.clear();
        for ((j, field), sidecar) in format.json.iter().enumerate().zip(&mut sidecars) {
            refs.push(match (sidecar, &entry.json[j]) {
                (Some(sidecar), reference) => {
                    sidecar.key_of(reference, &entry.path, &field.name)?
                }
                (None, reference) => reference.clone(),
            });
        }
        index.push(row, entry, &refs)?;
        keys.push(row, entry, &refs)?;
        seen += 1;
        Ok(())
    })?;
    if seen != rows {
        return Err(Error::corrupted(source, format!("holds {seen} rows, the cache {rows}")));
    }
    let (parquet, mut stats) = index.finish()?;
    let stamp = parquet_stamp(parquet.staged.temp())?;
    stats.most_key_entries = keys.most_entries;
    stats.scratch_runs = keys.scratch_runs;
    // run.bin: the duplicate check of every path, before anything a reader would use.
    let keys = keys.finish(layout, format, stamp, checksum_rows, format.checksums)?;
    for (field, sidecar) in format.json.iter().zip(sidecars) {
        let (JsonStorage::Deduplicated { sidecar: name, .. }, Some(sidecar)) =
            (&field.storage, sidecar)
        else {
            continue;
        };
        let object: Map<String, Json> = sidecar
            .texts
            .into_iter()
            .enumerate()
            .map(|(key, text)| (key.to_string(), Json::String(text.to_string())))
            .collect();
        let text = to_python_json(&Json::Object(object), &PyJsonOptions::default());
        atomic_write(layout.file(name), text.as_bytes())?;
    }
    parquet.staged.publish(parquet.file)?;
    if let Some(keys) = keys {
        keys.publish()?;
    }
    write_shapes(layout, format, rows)?;
    atomic_write(layout.fingerprint(), fingerprint)?;
    Ok(stats)
}

/// The sidecar keys of one deduplicated JSON field: first-seen order, exact string equality.
/// Holds each distinct text once (shared with the map's key): bounded by the field's distinct
/// values, whatever the row count.
#[derive(Default)]
struct Deduplicated {
    keys_of: HashMap<Arc<str>, i32>,
    texts: Vec<Arc<str>>,
}

impl Deduplicated {
    /// The reference `index.parquet` holds for a row's `reference` (its text, or null) of field
    /// `name`: the text's sidecar key, a new one for a text not seen before.
    fn key_of(&mut self, reference: &JsonRef, path: &str, name: &str) -> Result<JsonRef> {
        match reference {
            JsonRef::Null => Ok(JsonRef::Null),
            JsonRef::Inline(text) => Ok(JsonRef::Key(match self.keys_of.get(text) {
                Some(&key) => key,
                None => {
                    let key = i32::try_from(self.texts.len()).map_err(|_| {
                        Error::invalid(format!(
                            "field {name:?}: more distinct texts than int32 keys"
                        ))
                    })?;
                    self.keys_of.insert(text.clone(), key);
                    self.texts.push(text.clone());
                    key
                }
            })),
            JsonRef::Key(_) => Err(Error::invalid(format!(
                "field {name:?} of row {path:?}: a finalized cache's sidecar key cannot be rewritten"
            ))),
        }
    }
}

/// One JSON field's column being gathered.
enum JsonColumn {
    Keys(Int32Builder),
    Texts(StringBuilder),
}

/// `index.parquet` being written into its temporary, a batch at a time: `row`, `path`,
/// `has_<field>`, `<field>_key`, plain JSON columns; snappy.
struct IndexWriter {
    staged: Staged,
    writer: ArrowWriter<BufWriter<File>>,
    schema: SchemaRef,
    /// The row number of the batch's first row.
    first: i64,
    paths: StringBuilder,
    /// Per tensor field with a `has_<field>` column: its position and the column.
    has: Vec<(usize, BooleanBuilder)>,
    json: Vec<JsonColumn>,
    /// Rows of a batch: [`BATCH_ROWS`], or fewer for smaller row groups.
    batch_rows: usize,
    batched: usize,
    batched_bytes: usize,
    stats: FinalizeStats,
}

/// `index.parquet`'s temporary, whole, to publish.
struct WrittenIndex {
    staged: Staged,
    file: File,
}

impl IndexWriter {
    fn create(
        layout: &Layout,
        format: &RowFormat,
        checksum_rows: Option<usize>,
        row_group_rows: usize,
    ) -> Result<IndexWriter> {
        let mut fields = vec![
            Field::new("row", DataType::Int64, true),
            Field::new("path", DataType::Utf8, true),
        ];
        let mut has = Vec::new();
        for (t, tensor) in format.tensors.iter().enumerate() {
            if let Some(name) = &tensor.has_column {
                fields.push(Field::new(name, DataType::Boolean, true));
                has.push((t, BooleanBuilder::new()));
            }
        }
        let mut json = Vec::new();
        for field in &format.json {
            match &field.storage {
                JsonStorage::Deduplicated { key_column, .. } => {
                    fields.push(Field::new(key_column, DataType::Int32, true));
                    json.push(JsonColumn::Keys(Int32Builder::new()));
                }
                JsonStorage::Plain { column } => {
                    fields.push(Field::new(column, DataType::Utf8, true));
                    json.push(JsonColumn::Texts(StringBuilder::new()));
                }
            }
        }
        let schema: SchemaRef = Arc::new(ArrowSchema::new(fields));
        let mut properties = WriterProperties::builder()
            .set_compression(Compression::SNAPPY)
            .set_max_row_group_row_count(Some(row_group_rows.max(1)))
            .set_max_row_group_bytes(Some(ROW_GROUP_BYTES));
        if let Some(rows) = checksum_rows {
            let rows = KeyValue::new(CHECKSUM_ROWS_KEY.to_owned(), rows.to_string());
            properties = properties.set_key_value_metadata(Some(vec![rows]));
        }
        let path = layout.index();
        let (staged, file) = Staged::create(&path)?;
        let out = BufWriter::with_capacity(1 << 20, file);
        let writer = ArrowWriter::try_new(out, schema.clone(), Some(properties.build()))
            .map_err(|e| Error::io(&path, std::io::Error::other(e.to_string())))?;
        Ok(IndexWriter {
            staged,
            writer,
            schema,
            first: 0,
            paths: StringBuilder::new(),
            has,
            json,
            batch_rows: BATCH_ROWS.min(row_group_rows).max(1),
            batched: 0,
            batched_bytes: 0,
            stats: FinalizeStats::default(),
        })
    }

    fn push(&mut self, row: usize, entry: &RowEntry, refs: &[JsonRef]) -> Result<()> {
        if self.batched == 0 {
            self.first = row as i64;
        }
        self.paths.append_value(&entry.path);
        self.batched_bytes += entry.path.len();
        for (t, column) in &mut self.has {
            column.append_value(entry.present[*t]);
        }
        for (column, reference) in self.json.iter_mut().zip(refs) {
            match (column, reference) {
                (JsonColumn::Keys(keys), JsonRef::Key(key)) => keys.append_value(*key),
                (JsonColumn::Keys(keys), _) => keys.append_null(),
                (JsonColumn::Texts(texts), JsonRef::Inline(text)) => {
                    texts.append_value(text);
                    self.batched_bytes += text.len();
                }
                (JsonColumn::Texts(texts), _) => texts.append_null(),
            }
        }
        self.batched += 1;
        self.stats.rows += 1;
        if self.batched >= self.batch_rows || self.batched_bytes >= BATCH_BYTES {
            self.write_batch()?;
        }
        Ok(())
    }

    fn failed(&self, e: impl std::fmt::Display) -> Error {
        Error::io(self.staged.temp(), std::io::Error::other(e.to_string()))
    }

    /// Hands the gathered rows to the parquet writer, which ends a row group at its bounds.
    fn write_batch(&mut self) -> Result<()> {
        if self.batched == 0 {
            return Ok(());
        }
        let rows = self.first..self.first + self.batched as i64;
        let mut columns: Vec<ArrayRef> =
            vec![Arc::new(Int64Array::from_iter_values(rows)), Arc::new(self.paths.finish())];
        columns.extend(self.has.iter_mut().map(|(_, c)| Arc::new(c.finish()) as ArrayRef));
        columns.extend(self.json.iter_mut().map(|c| match c {
            JsonColumn::Keys(keys) => Arc::new(keys.finish()) as ArrayRef,
            JsonColumn::Texts(texts) => Arc::new(texts.finish()) as ArrayRef,
        }));
        let batch =
            RecordBatch::try_new(self.schema.clone(), columns).map_err(|e| self.failed(e))?;
        self.stats.most_rows_batched = self.stats.most_rows_batched.max(self.batched);
        self.batched = 0;
        self.batched_bytes = 0;
        self.writer.write(&batch).map_err(|e| self.failed(e))?;
        let in_group = self.writer.in_progress_rows();
        self.stats.most_rows_in_row_group = self.stats.most_rows_in_row_group.max(in_group);
        Ok(())
    }

    /// Closes the file (not yet published).
    fn finish(mut self) -> Result<(WrittenIndex, FinalizeStats)> {
        self.write_batch()?;
        let temp = self.staged.temp().to_path_buf();
        let mut stats = self.stats;
        let failed = |e: parquet::errors::ParquetError| {
            Error::io(&temp, std::io::Error::other(e.to_string()))
        };
        self.writer.flush().map_err(failed)?;
        stats.row_groups = self.writer.flushed_row_groups().len();
        // The footer, then the buffer's last bytes.
        let out = self.writer.into_inner().map_err(failed)?;
        let file = out.into_inner().map_err(|e| e.into_error()).at(&temp)?;
        Ok((WrittenIndex { staged: self.staged, file }, stats))
    }
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
