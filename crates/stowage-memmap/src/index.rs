//! The row index: for every cache row its `path` (the sample key), whether it has an annotation,
//! its sidecar keys and its `meta_json`, read from `index.parquet` (or built from the manifest of
//! an unfinished cache), with a path -> row hash table built once.

use std::fs::File;
use std::path::Path;
use std::sync::Arc;

use arrow_array::{Array, BooleanArray, Int32Array, Int64Array, LargeStringArray, StringArray};
use arrow_schema::{DataType, Schema as ArrowSchema};
use hashbrown::HashTable;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use std::hash::BuildHasher;
use stowage_core::{Error, IoResultExt, Result};

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
    /// False when the annotation row is a zero placeholder (the field reads as null).
    pub has_annotation: bool,
    /// The row's panel JSON.
    pub panel: JsonRef,
    /// The row's allele-annotation JSON.
    pub allele: JsonRef,
    /// The row's `meta_json` text; `None` when null or when the index has no such column.
    pub meta_json: Option<Box<str>>,
}

/// Every row's entry, in row order, with an O(1) lookup by path.
#[derive(Debug)]
pub struct RowIndex {
    rows: Vec<RowEntry>,
    /// Row numbers, hashed by their row's path.
    table: HashTable<usize>,
    hasher: foldhash::fast::RandomState,
}

impl RowIndex {
    /// Builds the index from entries in row order. A path that occurs twice is
    /// [`Error::Corrupted`] naming `source`, the path and both rows: a key must address one row.
    pub fn from_entries(rows: Vec<RowEntry>, source: &Path) -> Result<RowIndex> {
        let hasher = foldhash::fast::RandomState::default();
        let mut table = HashTable::with_capacity(rows.len());
        for (i, entry) in rows.iter().enumerate() {
            let hash = hasher.hash_one(&*entry.path);
            if let Some(&first) = table.find(hash, |&j: &usize| rows[j].path == entry.path) {
                return Err(Error::corrupted(
                    source,
                    format!("path {:?} is stored in rows {first} and {i}", entry.path),
                ));
            }
            table.insert_unique(hash, i, |&j| hasher.hash_one(&*rows[j].path));
        }
        Ok(RowIndex { rows, table, hasher })
    }

    /// Reads `index.parquet`.
    ///
    /// Columns are found by name in any order. `row` (int64) and `path` (utf8 or large utf8) are
    /// required and must not be null; `row` must equal the position. `has_annotation` (bool, absent
    /// means true), `panel_key` / `allele_key` (int32, null means none) and `meta_json` (utf8, absent
    /// means null) are optional. A column of another type is [`Error::Corrupted`] naming the column,
    /// its type and the type wanted. A file the parquet reader cannot read is `Corrupted` naming it.
    pub fn read_parquet(path: &Path) -> Result<RowIndex> {
        // The parquet crate is not hardened against every malformed file; a panic inside it must
        // not take down the caller, so it is turned into a corruption error naming the file.
        match std::panic::catch_unwind(|| read_parquet_entries(path)) {
            Ok(rows) => Self::from_entries(rows?, path),
            Err(_) => Err(Error::corrupted(path, "the parquet reader failed on this file")),
        }
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
        let hash = self.hasher.hash_one(path);
        self.table.find(hash, |&i| &*self.rows[i].path == path).copied()
    }
}

fn read_parquet_entries(path: &Path) -> Result<Vec<RowEntry>> {
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
    let schema = builder.schema().clone();
    let columns = Columns::locate(&schema, path)?;
    let reader = builder.with_batch_size(8192).build().map_err(|e| unreadable(&e))?;
    let mut rows = Vec::new();
    for batch in reader {
        let batch = batch.map_err(|e| unreadable(&e))?;
        let column = |i: usize| batch.column(i).as_ref();
        let row = downcast::<Int64Array>(column(columns.row), "row", path)?;
        let paths = Strings::of(column(columns.path), path)?;
        let has_annotation = columns
            .has_annotation
            .map(|i| downcast::<BooleanArray>(column(i), "has_annotation", path))
            .transpose()?;
        let panel = columns.panel_key.map(|i| downcast::<Int32Array>(column(i), "panel_key", path));
        let panel = panel.transpose()?;
        let allele =
            columns.allele_key.map(|i| downcast::<Int32Array>(column(i), "allele_key", path));
        let allele = allele.transpose()?;
        let meta = columns.meta_json.map(|i| Strings::of(column(i), path)).transpose()?;
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
            let has_annotation = match has_annotation {
                None => true,
                Some(column) if column.is_null(i) => return Err(null("has_annotation")),
                Some(column) => column.value(i),
            };
            let key_of = |column: Option<&Int32Array>| match column {
                Some(c) if c.is_valid(i) => JsonRef::Key(c.value(i)),
                _ => JsonRef::Null,
            };
            rows.push(RowEntry {
                path: key.into(),
                has_annotation,
                panel: key_of(panel),
                allele: key_of(allele),
                meta_json: meta.as_ref().and_then(|m| m.get(i)).map(Into::into),
            });
        }
    }
    Ok(rows)
}

/// Column positions of the index, checked against the types they must have.
struct Columns {
    row: usize,
    path: usize,
    has_annotation: Option<usize>,
    panel_key: Option<usize>,
    allele_key: Option<usize>,
    meta_json: Option<usize>,
}

impl Columns {
    fn locate(schema: &ArrowSchema, path: &Path) -> Result<Columns> {
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
        Ok(Columns {
            row: required("row", &[DataType::Int64])?,
            path: required("path", &text)?,
            has_annotation: find("has_annotation", &[DataType::Boolean])?,
            panel_key: find("panel_key", &[DataType::Int32])?,
            allele_key: find("allele_key", &[DataType::Int32])?,
            meta_json: find("meta_json", &text)?,
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
    use crate::test_support::{IndexRow, write_index, write_parquet};
    use arrow_array::{ArrayRef, RecordBatch};
    use std::sync::Arc;

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
        let index = RowIndex::read_parquet(&path).unwrap();
        assert_eq!(index.len(), 3);
        assert_eq!(index.find("/b.hid"), Some(1));
        assert_eq!(index.find("/zzz"), None);
        let b = index.row(1).unwrap();
        assert!(!b.has_annotation);
        assert_eq!((&b.panel, &b.allele), (&JsonRef::Key(0), &JsonRef::Null));
        assert_eq!(b.meta_json.as_deref(), Some(r#"{"x": 1}"#));
        assert_eq!(index.row(2).unwrap().panel, JsonRef::Null);
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
        let index = RowIndex::read_parquet(&path).unwrap();
        assert!(index.rows().iter().all(|r| r.has_annotation && r.meta_json.is_none()));
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
            let err = RowIndex::read_parquet(&path).unwrap_err();
            let message = err.to_string();
            assert!(matches!(err, Error::Corrupted { .. }), "{message}");
            assert!(message.contains("index.parquet") && message.contains(needle), "{message}");
        }
    }

    #[test]
    fn garbage_and_missing_files_are_corruption() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("index.parquet");
        assert!(RowIndex::read_parquet(&path).unwrap_err().to_string().contains("missing"));
        std::fs::write(&path, b"PAR1 this is not parquet at all PAR1").unwrap();
        let err = RowIndex::read_parquet(&path).unwrap_err();
        assert!(matches!(err, Error::Corrupted { .. }), "{err}");
    }
}
