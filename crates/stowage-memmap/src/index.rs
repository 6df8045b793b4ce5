//! The row index: for every cache row its `path` (the sample key), which nullable tensor fields it
//! has (`has_<field>`), and where each JSON field's text comes from (a sidecar key, or the text),
//! read from `index.parquet` (or built from the manifest of an unfinished cache, or by the writer
//! as rows are put), with a path -> row hash table.
//!
//! An `index.parquet` stowage's finalize wrote carries one key-value metadata entry,
//! [`CHECKSUM_ROWS_KEY`]: the number of rows `stowage_checksums.bin` held for it, one per row.
//! DNANet's reader ignores it; an index another writer finalized has none.

use std::fs::File;
use std::path::Path;
use std::sync::Arc;

use arrow_array::{Array, BooleanArray, Int32Array, Int64Array, LargeStringArray, StringArray};
use arrow_schema::{DataType, Schema as ArrowSchema};
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use stowage_core::key_table::{CompactEntry, KeyTable};
use stowage_core::{Error, IoResultExt, Result};

use crate::row_format::{JsonStorage, RowFormat};

/// Where a row's JSON text of a deduplicated field comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JsonRef {
    /// The row has none (null).
    Null,
    /// A key into the field's sidecar (`panels.json` / `alleles.json`).
    Key(i32),
    /// The text itself (rows of an unfinished cache, read from its manifest).
    Inline(Arc<str>),
}

/// What the index says about one row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RowEntry {
    /// The sample's source identity: its key.
    pub path: Box<str>,
    /// Per tensor field of the [`RowFormat`]: false when the row is a zero placeholder (the field
    /// reads as null). Always true for a field that is not nullable.
    pub present: Box<[bool]>,
    /// Per JSON field of the [`RowFormat`]: where the row's text comes from.
    pub json: Box<[JsonRef]>,
}

/// The key of the `index.parquet` metadata entry in which stowage's finalize records how many
/// checksum rows it wrote (decimal, one per index row).
pub const CHECKSUM_ROWS_KEY: &str = "stowage.checksum_rows";

/// Every row's entry, in row order, with an O(1) lookup by path.
#[derive(Debug)]
pub struct RowIndex {
    rows: Vec<RowEntry>,
    /// [`CHECKSUM_ROWS_KEY`] of the `index.parquet` this index was read from, or set by the writer
    /// that finalized it; `None` for an index another writer finalized, and while unfinished.
    checksum_rows: Option<usize>,
    /// Every path, back to back, in row order: a lookup compares against these bytes.
    key_arena: String,
    /// Path -> row, pointing into the arena: 16 bytes a slot, so that a million rows take 32 MiB
    /// at the most.
    table: KeyTable<CompactEntry>,
}

/// Why an entry cannot join the index.
enum Refused {
    /// Its path is already stored, in this row.
    Duplicate(usize),
    /// Its path (this many bytes), or the index, outgrew a table slot.
    TooLarge(usize),
}

impl RowIndex {
    /// Builds the index from entries in row order. A path that occurs twice is
    /// [`Error::Corrupted`] naming `source`, the path and both rows: a key must address one row.
    pub fn from_entries(rows: Vec<RowEntry>, source: &Path) -> Result<RowIndex> {
        let mut index = RowIndex {
            rows: Vec::with_capacity(rows.len()),
            checksum_rows: None,
            key_arena: String::with_capacity(rows.iter().map(|r| r.path.len()).sum()),
            table: KeyTable::new(),
        };
        for entry in rows {
            let row = index.rows.len();
            match index.try_push(entry) {
                Ok(_) => {}
                Err(Refused::Duplicate(first)) => {
                    let path = &index.rows[first].path;
                    return Err(Error::corrupted(
                        source,
                        format!("path {path:?} is stored in rows {first} and {row}"),
                    ));
                }
                Err(Refused::TooLarge(len)) => {
                    return Err(Error::corrupted(
                        source,
                        format!("row {row}: a path of {len} bytes is beyond what an index holds"),
                    ));
                }
            }
        }
        Ok(index)
    }

    /// Appends the entry of the next row; a path already stored is [`Error::InvalidArgument`]
    /// naming it and its row.
    pub fn push(&mut self, entry: RowEntry) -> Result<usize> {
        self.try_push(entry).map_err(|refused| match refused {
            Refused::Duplicate(row) => {
                let path = &self.rows[row].path;
                Error::invalid(format!("key {path:?} is already stored in row {row}"))
            }
            Refused::TooLarge(len) => {
                Error::invalid(format!("a key of {len} bytes is beyond what an index holds"))
            }
        })
    }

    /// Appends `entry` and returns its row, or why it cannot.
    fn try_push(&mut self, entry: RowEntry) -> std::result::Result<usize, Refused> {
        let hash = self.table.hash(&entry.path);
        if let Some(found) = self.table.find(hash, &entry.path, &self.key_arena) {
            return Err(Refused::Duplicate(found.value()));
        }
        let row = self.rows.len();
        let slot = CompactEntry::new(hash, self.key_arena.len(), entry.path.len(), row)
            .ok_or(Refused::TooLarge(entry.path.len()))?;
        self.table.insert_new(slot);
        self.key_arena.push_str(&entry.path);
        self.rows.push(entry);
        Ok(row)
    }

    /// Reads `index.parquet`.
    ///
    /// Columns are found by name in any order. `row` (int64) and `path` (utf8 or large utf8) are
    /// required and must not be null; `row` must equal the position. The columns `format` names
    /// are optional: `has_<field>` (bool, absent means true), `<field>_key` (int32, null or absent
    /// means none) and plain JSON columns (utf8, absent means null). A column of another type is [`Error::Corrupted`] naming the column,
    /// its type and the type wanted. A file the parquet reader cannot read is `Corrupted` naming it.
    /// A [`CHECKSUM_ROWS_KEY`] entry that is not the decimal row count is `Corrupted` too.
    pub fn read_parquet(path: &Path, format: &RowFormat) -> Result<RowIndex> {
        // The parquet crate is not hardened against every malformed file; a panic inside it must
        // not take down the caller, so it is turned into a corruption error naming the file.
        let read = std::panic::AssertUnwindSafe(|| read_parquet_entries(path, format));
        let (rows, checksum_rows) = match std::panic::catch_unwind(read) {
            Ok(read) => read?,
            Err(_) => return Err(Error::corrupted(path, "the parquet reader failed on this file")),
        };
        let mut index = Self::from_entries(rows, path)?;
        if let Some(recorded) = &checksum_rows {
            let count = recorded.parse::<usize>().ok().filter(|n| n.to_string() == *recorded);
            if count != Some(index.len()) {
                return Err(Error::corrupted(
                    path,
                    format!(
                        "metadata {CHECKSUM_ROWS_KEY:?} is {recorded:?}, the index holds {} rows",
                        index.len()
                    ),
                ));
            }
            index.checksum_rows = count;
        }
        Ok(index)
    }

    /// The checksum rows stowage's finalize recorded in `index.parquet` (one per row), or `None`
    /// when another writer finalized the cache, or it is unfinished.
    ///
    /// ```
    /// use stowage_core::{Backend, DType, Sample, Schema, ShapeRule, Tensor};
    /// use stowage_memmap::{MemmapBackend, MemmapOptions};
    /// let dir = tempfile::tempdir()?;
    /// let schema = Schema::new().tensor("x", DType::U8, ShapeRule::Fixed(vec![1]));
    /// let mut cache = MemmapBackend::create(dir.path(), &schema, MemmapOptions::default())?;
    /// cache.put("a", &Sample::new().with("x", Tensor::from_slice(&[1], &[7u8])?))?;
    /// assert_eq!(cache.try_index()?.stowage_checksum_rows(), None, "unfinished");
    /// cache.finalize()?;
    /// let reader = MemmapBackend::open_read_only(dir.path(), MemmapOptions::default())?;
    /// assert_eq!(reader.try_index()?.stowage_checksum_rows(), Some(1));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn stowage_checksum_rows(&self) -> Option<usize> {
        self.checksum_rows
    }

    /// Records that stowage's finalize wrote this index with a checksum row per row.
    pub(crate) fn mark_finalized_by_stowage(&mut self) {
        self.checksum_rows = Some(self.rows.len());
    }

    /// Number of rows.
    pub fn len(&self) -> usize {
        self.rows.len()
    }

    /// Whether there are no rows.
    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }

    /// The entry of row `row`.
    pub fn row(&self, row: usize) -> Option<&RowEntry> {
        self.rows.get(row)
    }

    /// Every entry in row order.
    pub fn rows(&self) -> &[RowEntry] {
        &self.rows
    }

    /// The row stored under `path`, in O(1).
    pub fn find(&self, path: &str) -> Option<usize> {
        self.find_with(path, |_| {})
    }

    /// Like [`RowIndex::find`]; `candidate` sees each row whose hash matches before its path is
    /// compared, so a reader can start loading that row's bytes while the comparison waits for the
    /// stored path.
    pub fn find_with(&self, path: &str, candidate: impl Fn(usize)) -> Option<usize> {
        let hash = self.table.hash(path);
        let found = self.table.find_with(hash, path, &self.key_arena, |slot| {
            // The row's entry is read next by every reader: start it with the caller's loads.
            if let Some(entry) = self.rows.get(slot.value()) {
                stowage_core::prefetch::prefetch_value(entry);
            }
            candidate(slot.value());
        });
        found.map(CompactEntry::value)
    }
}

/// The entries of `index.parquet`, and its [`CHECKSUM_ROWS_KEY`] metadata value, if any.
fn read_parquet_entries(
    path: &Path,
    format: &RowFormat,
) -> Result<(Vec<RowEntry>, Option<String>)> {
    let unreadable = |e: &dyn std::fmt::Display| {
        Error::corrupted(path, format!("not a readable parquet index: {e}"))
    };
    let file = match File::open(path) {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(Error::corrupted(path, "index file is missing"));
        }
        Err(e) => return Err(e).at(path),
    };
    let builder = ParquetRecordBatchReaderBuilder::try_new(file).map_err(|e| unreadable(&e))?;
    let checksum_rows = builder
        .metadata()
        .file_metadata()
        .key_value_metadata()
        .and_then(|entries| entries.iter().find(|kv| kv.key == CHECKSUM_ROWS_KEY))
        .map(|kv| kv.value.clone().unwrap_or_default());
    let schema = builder.schema().clone();
    let columns = Columns::locate(&schema, path, format)?;
    let reader = builder.with_batch_size(8192).build().map_err(|e| unreadable(&e))?;
    let mut rows = Vec::new();
    for batch in reader {
        let batch = batch.map_err(|e| unreadable(&e))?;
        let column = |i: usize| batch.column(i).as_ref();
        let row = downcast::<Int64Array>(column(columns.row), "row", path)?;
        let paths = Strings::of(column(columns.path), path)?;
        let mut has = Vec::new();
        for (i, name) in &columns.has {
            has.push(i.map(|i| downcast::<BooleanArray>(column(i), name, path)).transpose()?);
        }
        let mut json = Vec::new();
        for (i, name, deduplicated) in &columns.json {
            json.push(match (i, deduplicated) {
                (None, _) => JsonColumnData::Absent,
                (Some(i), true) => JsonColumnData::Keys(downcast(column(*i), name, path)?),
                (Some(i), false) => JsonColumnData::Texts(Strings::of(column(*i), path)?),
            });
        }
        for i in 0..batch.num_rows() {
            let position = rows.len();
            let null = |name: &str| {
                Error::corrupted(path, format!("column {name:?} is null in row {position}"))
            };
            if row.is_null(i) {
                return Err(null("row"));
            }
            if row.value(i) != position as i64 {
                return Err(Error::corrupted(
                    path,
                    format!("column \"row\" holds {} at position {position}", row.value(i)),
                ));
            }
            let key = paths.get(i).ok_or_else(|| null("path"))?;
            let mut present = Vec::with_capacity(has.len());
            for (column, (_, name)) in has.iter().zip(&columns.has) {
                present.push(match column {
                    None => true,
                    Some(column) if column.is_null(i) => return Err(null(name)),
                    Some(column) => column.value(i),
                });
            }
            let json_refs = json
                .iter()
                .map(|column| match column {
                    JsonColumnData::Keys(c) if c.is_valid(i) => JsonRef::Key(c.value(i)),
                    JsonColumnData::Texts(c) => {
                        c.get(i).map_or(JsonRef::Null, |t| JsonRef::Inline(t.into()))
                    }
                    _ => JsonRef::Null,
                })
                .collect();
            rows.push(RowEntry { path: key.into(), present: present.into(), json: json_refs });
        }
    }
    Ok((rows, checksum_rows))
}

/// One JSON field's column in a batch.
enum JsonColumnData<'a> {
    Absent,
    Keys(&'a Int32Array),
    Texts(Strings<'a>),
}

/// Column positions of the index, checked against the types they must have.
struct Columns {
    row: usize,
    path: usize,
    /// Per tensor field: its `has_<field>` column, if the field is nullable and the column exists.
    has: Vec<(Option<usize>, String)>,
    /// Per JSON field: its column, name, and whether it holds sidecar keys.
    json: Vec<(Option<usize>, String, bool)>,
}

impl Columns {
    fn locate(schema: &ArrowSchema, path: &Path, format: &RowFormat) -> Result<Columns> {
        let find = |name: &str, wanted: &[DataType]| -> Result<Option<usize>> {
            let Ok(i) = schema.index_of(name) else { return Ok(None) };
            let got = schema.field(i).data_type();
            if wanted.contains(got) {
                return Ok(Some(i));
            }
            let names: Vec<String> = wanted.iter().map(ToString::to_string).collect();
            Err(Error::corrupted(
                path,
                format!("column {name:?} has type {got}, expected {}", names.join(" or ")),
            ))
        };
        let required = |name: &str, wanted: &[DataType]| {
            find(name, wanted)?.ok_or_else(|| {
                Error::corrupted(
                    path,
                    format!("has no column {name:?} (columns: {})", names(schema)),
                )
            })
        };
        let text = [DataType::Utf8, DataType::LargeUtf8];
        let mut has = Vec::new();
        for tensor in &format.tensors {
            match &tensor.has_column {
                Some(name) => has.push((find(name, &[DataType::Boolean])?, name.clone())),
                None => has.push((None, String::new())),
            }
        }
        let mut json = Vec::new();
        for field in &format.json {
            json.push(match &field.storage {
                JsonStorage::Deduplicated { key_column, .. } => {
                    (find(key_column, &[DataType::Int32])?, key_column.clone(), true)
                }
                JsonStorage::Plain { column } => (find(column, &text)?, column.clone(), false),
            });
        }
        Ok(Columns {
            row: required("row", &[DataType::Int64])?,
            path: required("path", &text)?,
            has,
            json,
        })
    }
}

fn names(schema: &ArrowSchema) -> String {
    schema.fields().iter().map(|f| f.name().as_str()).collect::<Vec<_>>().join(", ")
}

fn downcast<'a, T: 'static>(array: &'a dyn Array, name: &str, path: &Path) -> Result<&'a T> {
    array.as_any().downcast_ref::<T>().ok_or_else(|| {
        Error::corrupted(path, format!("column {name:?} has type {}", array.data_type()))
    })
}

/// A utf8 or large-utf8 column.
enum Strings<'a> {
    Small(&'a StringArray),
    Large(&'a LargeStringArray),
}

impl<'a> Strings<'a> {
    fn of(array: &'a dyn Array, path: &Path) -> Result<Strings<'a>> {
        if let Some(a) = array.as_any().downcast_ref::<StringArray>() {
            return Ok(Strings::Small(a));
        }
        Ok(Strings::Large(downcast::<LargeStringArray>(array, "string", path)?))
    }

    fn get(&self, i: usize) -> Option<&'a str> {
        match self {
            Strings::Small(a) => a.is_valid(i).then(|| a.value(i)),
            Strings::Large(a) => a.is_valid(i).then(|| a.value(i)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::unit_fixtures::{IndexRow, write_index, write_parquet};
    use arrow_array::{ArrayRef, RecordBatch};
    use std::sync::Arc;

    fn dnanet_format() -> RowFormat {
        RowFormat::new(&crate::dnanet(2, 4), false).unwrap()
    }

    fn rows() -> Vec<IndexRow> {
        vec![
            IndexRow::new("/a.hid", true, Some(0), Some(0), "{}"),
            IndexRow::new("/b.hid", false, Some(0), None, r#"{"x": 1}"#),
            IndexRow::new("/c.hid", true, None, Some(1), "{}"),
        ]
    }

    #[test]
    fn reads_every_column_and_finds_paths() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("index.parquet");
        write_index(&path, &rows());
        let index = RowIndex::read_parquet(&path, &dnanet_format()).unwrap();
        assert_eq!(index.len(), 3);
        assert_eq!(index.find("/b.hid"), Some(1));
        assert_eq!(index.find("/zzz"), None);
        let b = index.row(1).unwrap();
        assert_eq!(&*b.present, [true, false, true]);
        assert_eq!(&b.json[..2], [JsonRef::Key(0), JsonRef::Null]);
        assert_eq!(b.json[2], JsonRef::Inline(r#"{"x": 1}"#.into()));
        assert_eq!(index.row(2).unwrap().json[0], JsonRef::Null);
    }

    #[test]
    fn column_order_does_not_matter_and_has_annotation_defaults_to_true() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("index.parquet");
        let columns: Vec<(&str, ArrayRef)> = vec![
            ("path", Arc::new(StringArray::from(vec!["/x", "/y"]))),
            ("row", Arc::new(Int64Array::from(vec![0i64, 1]))),
        ];
        write_parquet(&path, RecordBatch::try_from_iter(columns).unwrap());
        let index = RowIndex::read_parquet(&path, &dnanet_format()).unwrap();
        assert!(
            index.rows().iter().all(|r| r.present.iter().all(|p| *p) && r.json[2] == JsonRef::Null)
        );
        assert_eq!(index.find("/y"), Some(1));
    }

    #[test]
    fn wrong_types_wrong_rows_and_duplicates_are_corruption() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("index.parquet");
        let cases: Vec<(Vec<(&str, ArrayRef)>, &str)> = vec![
            (
                vec![
                    ("row", Arc::new(Int32Array::from(vec![0]))),
                    ("path", Arc::new(StringArray::from(vec!["/x"]))),
                ],
                "column \"row\" has type Int32, expected Int64",
            ),
            (
                vec![
                    ("row", Arc::new(Int64Array::from(vec![0, 2]))),
                    ("path", Arc::new(StringArray::from(vec!["/x", "/y"]))),
                ],
                "holds 2 at position 1",
            ),
            (
                vec![
                    ("row", Arc::new(Int64Array::from(vec![0, 1]))),
                    ("path", Arc::new(StringArray::from(vec!["/x", "/x"]))),
                ],
                "rows 0 and 1",
            ),
            (
                vec![
                    ("row", Arc::new(Int64Array::from(vec![0]))),
                    ("path", Arc::new(StringArray::from(vec![None::<&str>]))),
                ],
                "\"path\" is null in row 0",
            ),
            (vec![("row", Arc::new(Int64Array::from(vec![0])))], "no column \"path\""),
        ];
        for (columns, needle) in cases {
            write_parquet(&path, RecordBatch::try_from_iter(columns).unwrap());
            let err = RowIndex::read_parquet(&path, &dnanet_format()).unwrap_err();
            let message = err.to_string();
            assert!(matches!(err, Error::Corrupted { .. }), "{message}");
            assert!(message.contains("index.parquet") && message.contains(needle), "{message}");
        }
    }

    #[test]
    fn garbage_and_missing_files_are_corruption() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("index.parquet");
        assert!(
            RowIndex::read_parquet(&path, &dnanet_format())
                .unwrap_err()
                .to_string()
                .contains("missing")
        );
        std::fs::write(&path, b"PAR1 this is not parquet at all PAR1").unwrap();
        let err = RowIndex::read_parquet(&path, &dnanet_format()).unwrap_err();
        assert!(matches!(err, Error::Corrupted { .. }), "{err}");
    }
}
