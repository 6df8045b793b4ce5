//! `manifest.jsonl`, the writer's commit record of an unfinished cache: one JSON object per
//! committed row, written only after the row's bytes are durable.
//!
//! A line holds `row`, `path`, each tensor field's shape (`<field>_shape`), `has_<field>` for
//! nullable tensors and each JSON field's text (or null). For the [`crate::dnanet`] schema these
//! are exactly DNANet's keys (`data_shape`, `ann_shape`, `scaler_shape`, `has_annotation`,
//! `adjusted_panel_json`, `allele_annotation_json`, `meta_json`), so DNANet's recovery reads the
//! manifests stowage writes.
//!
//! Who wrote a line shows in its form: stowage writes the keys in the order above (tensor shapes,
//! presence flags, then JSON fields in schema order), DNANet in its own (`allele_annotation_json`
//! before `adjusted_panel_json`), and DNANet's recovery rewrites every line it keeps with
//! `json.dumps` of the parsed object, which gives back the same bytes. [`Manifest::foreign`] lists
//! the rows whose line is not byte for byte what stowage's writer writes.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use foldhash::HashSet;
use serde_json::{Map, Value as Json};
use stowage_core::file_safety::open_no_follow;
use stowage_core::{Error, IoResultExt, Result};
use stowage_fingerprint::canonical_json::write_python_string;

use crate::index::{JsonRef, RowEntry};
use crate::row_format::{JsonStorage, RowFormat};

/// A final line without its newline that did not parse: the torn write of a crashed append.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TornLine {
    /// 1-based line number.
    pub line: usize,
    /// Its length in bytes.
    pub bytes: usize,
}

/// The committed rows of an unfinished cache.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Manifest {
    /// Every committed row, in row order.
    pub rows: Vec<RowEntry>,
    /// The dropped torn last line, if there was one.
    pub torn_tail: Option<TornLine>,
    /// Bytes of the file holding the committed lines (where the next line goes once the torn
    /// tail is cut off).
    pub committed_len: u64,
    /// The last committed line has no newline (written completely, newline lost): the next
    /// writer adds it before appending.
    pub missing_newline: bool,
    /// Rows whose line is not exactly the one stowage writes (`write_line`): another writer
    /// (DNANet) committed them.
    /// Sorted, disjoint ranges of row numbers.
    pub foreign: Vec<Range<usize>>,
    /// Where each committed row's line is (offset in the manifest, length, checksum), for the
    /// key index of an unfinished cache.
    pub(crate) lines: Vec<crate::tail_index::LineLoc>,
}

impl Manifest {
    /// The shapes DNANet's first manifest line records for `data`, `annotation` and `scaler`
    /// (empty shapes when the manifest has no row), for caches without `stowage.json`.
    pub fn dnanet_shapes(text: &[u8], path: &Path) -> Result<[Vec<usize>; 3]> {
        let first = text.split(|&b| b == b'\n').next().unwrap_or_default();
        let Ok(line) = serde_json::from_slice::<Map<String, Json>>(first) else {
            return Ok([vec![], vec![], vec![]]);
        };
        let shape = |key: &str| {
            shape_of(line.get(key)).ok_or_else(|| {
                Error::corrupted(path, format!("line 1: {key:?} is not a list of dimensions"))
            })
        };
        Ok([shape("data_shape")?, shape("ann_shape")?, shape("scaler_shape")?])
    }

    /// Parses a manifest. Every newline-terminated line must be a row object whose `row` equals its
    /// position and whose shapes equal `format`'s; otherwise [`Error::Corrupted`] names the file
    /// and the line. A last line without a newline that does not parse is a torn write and is
    /// dropped (reported in [`Manifest::torn_tail`]); one that parses is a committed row. Rows
    /// whose line is not in the form stowage writes are listed in [`Manifest::foreign`].
    ///
    /// ```
    /// use stowage_memmap::test_support::{Manifest, RowFormat};
    /// let format = RowFormat::new(&stowage_memmap::dnanet(1, 1), false)?;
    /// let line = r#"{"row": 0, "path": "/a", "data_shape": [1, 1], "ann_shape": [1, 1], "scaler_shape": [1], "has_annotation": true, "allele_annotation_json": null, "adjusted_panel_json": null, "meta_json": "{}"}"#;
    /// let text = format!("{line}\n{{\"row\": 1, \"pa");
    /// let manifest = Manifest::parse(text.as_bytes(), "manifest.jsonl".as_ref(), &format)?;
    /// assert_eq!(manifest.rows.len(), 1);
    /// assert_eq!(manifest.torn_tail.unwrap().line, 2);
    /// assert_eq!(manifest.foreign, [0..1], "DNANet's key order, not stowage's");
    /// # Ok::<(), stowage_core::Error>(())
    /// ```
    #[allow(dead_code)] // The crate reads manifests from an offset; tests and fuzzing use this.
    pub fn parse(text: &[u8], path: &Path, format: &RowFormat) -> Result<Manifest> {
        Self::parse_from(text, path, format, 0, 0)
    }

    /// [`Manifest::parse`] of the manifest's bytes from `base_offset` on, whose first line is row
    /// `first_row` (the rows before are covered by the key index): row numbers, foreign ranges
    /// and line offsets are the whole manifest's, `committed_len` too.
    pub(crate) fn parse_from(
        text: &[u8],
        path: &Path,
        format: &RowFormat,
        first_row: usize,
        base_offset: u64,
    ) -> Result<Manifest> {
        Self::parse_inner(text, path, format, first_row, base_offset, true)
    }

    /// Every committed row's entry, as [`Manifest::parse`] finds them, without telling which
    /// lines another writer wrote or where they are (what finalize needs: faster).
    pub(crate) fn entries(text: &[u8], path: &Path, format: &RowFormat) -> Result<Vec<RowEntry>> {
        Ok(Self::parse_inner(text, path, format, 0, 0, false)?.rows)
    }

    fn parse_inner(
        text: &[u8],
        path: &Path,
        format: &RowFormat,
        first_row: usize,
        base_offset: u64,
        detailed: bool,
    ) -> Result<Manifest> {
        let mut lines_at = Vec::new();
        let shape_texts = shape_texts(format);
        let mut rows: Vec<RowEntry> = Vec::new();
        let mut torn_tail = None;
        let mut committed_len = base_offset;
        let mut missing_newline = false;
        // Identical deduplicated texts share one allocation, as in the finalized cache's sidecar.
        let mut interned: Vec<HashSet<Arc<str>>> = vec![HashSet::default(); format.json.len()];
        let mut lines = text.split(|&b| b == b'\n').enumerate().peekable();
        let mut offset = base_offset;
        let mut foreign: Vec<Range<usize>> = Vec::new();
        let mut encoded = String::new();
        while let Some((i, line)) = lines.next() {
            let last = lines.peek().is_none();
            if last && line.is_empty() {
                break;
            }
            let position = first_row + rows.len();
            // The writer's own lines parse fast; anything else goes through serde_json.
            let entry = match fast_row(line, position, format, &shape_texts, &mut interned) {
                Some(entry) => entry,
                None => {
                    let object = match serde_json::from_slice::<Map<String, Json>>(line) {
                        Ok(object) => object,
                        Err(_) if last => {
                            torn_tail =
                                Some(TornLine { line: first_row + i + 1, bytes: line.len() });
                            break;
                        }
                        Err(e) => {
                            return Err(Error::corrupted(
                                path,
                                format!(
                                    "line {} is not a committed row entry: {e}",
                                    first_row + i + 1
                                ),
                            ));
                        }
                    };
                    parse_row(&object, position, format, &mut interned).map_err(|detail| {
                        Error::corrupted(path, format!("line {}: {detail}", first_row + i + 1))
                    })?
                }
            };
            if detailed {
                encoded.clear();
                write_line(&mut encoded, format, position, &entry);
                if encoded.as_bytes().strip_suffix(b"\n") != Some(line) {
                    match foreign.last_mut() {
                        Some(run) if run.end == position => run.end += 1,
                        _ => foreign.push(position..position + 1),
                    }
                }
                lines_at.push(crate::tail_index::LineLoc::of(offset, line));
            }
            rows.push(entry);
            offset += line.len() as u64 + u64::from(!last);
            committed_len = offset;
            missing_newline = last;
        }
        Ok(Manifest { rows, torn_tail, committed_len, missing_newline, foreign, lines: lines_at })
    }
}

/// The committed rows of a manifest read one line at a time, as [`Manifest::entries`] finds them,
/// without holding them: what finalize, `validate` and `keys` of an unfinished cache stream
/// through (memory is one line and the parser's scratch, whatever the row count).
pub(crate) struct ManifestRows<R> {
    reader: R,
    path: PathBuf,
    format: RowFormat,
    shape_texts: Vec<String>,
    /// Cleared after every row: nothing is kept from one row to the next.
    interned: Vec<HashSet<Arc<str>>>,
    line: Vec<u8>,
    /// Rows returned so far (the next row's number).
    rows: usize,
    done: bool,
}

impl<R: std::io::BufRead> ManifestRows<R> {
    /// The rows of the manifest `reader` reads; `path` names it in errors.
    pub(crate) fn new(reader: R, path: &Path, format: &RowFormat) -> ManifestRows<R> {
        ManifestRows {
            reader,
            path: path.to_path_buf(),
            format: format.clone(),
            shape_texts: shape_texts(format),
            interned: vec![HashSet::default(); format.json.len()],
            line: Vec::new(),
            rows: 0,
            done: false,
        }
    }

    /// The next committed row's entry; `None` after the last (a torn last line is not a row).
    /// A line that is not a committed row entry (but a torn last one) is [`Error::Corrupted`]
    /// naming the file and the line, as [`Manifest::parse`] says.
    pub(crate) fn next_entry(&mut self) -> Result<Option<RowEntry>> {
        if self.done {
            return Ok(None);
        }
        self.line.clear();
        self.reader.read_until(b'\n', &mut self.line).at(&self.path)?;
        let last = self.line.last() != Some(&b'\n');
        if !last {
            self.line.pop();
        }
        if last && self.line.is_empty() {
            self.done = true;
            return Ok(None);
        }
        let position = self.rows;
        let (format, line) = (&self.format, &self.line[..]);
        let entry = match fast_row(line, position, format, &self.shape_texts, &mut self.interned) {
            Some(entry) => entry,
            None => match serde_json::from_slice::<Map<String, Json>>(line) {
                Ok(object) => {
                    parse_row(&object, position, format, &mut self.interned).map_err(|detail| {
                        Error::corrupted(&self.path, format!("line {}: {detail}", position + 1))
                    })?
                }
                Err(_) if last => {
                    self.done = true;
                    return Ok(None);
                }
                Err(e) => {
                    return Err(Error::corrupted(
                        &self.path,
                        format!("line {} is not a committed row entry: {e}", position + 1),
                    ));
                }
            },
        };
        self.interned.iter_mut().for_each(HashSet::clear);
        self.done = last;
        self.rows += 1;
        Ok(Some(entry))
    }
}

/// The entry of one manifest line (without its newline) that must be row `position`; `None`
/// when it is not.
pub(crate) fn parse_one(line: &[u8], position: usize, format: &RowFormat) -> Option<RowEntry> {
    let mut interned: Vec<HashSet<Arc<str>>> = vec![HashSet::default(); format.json.len()];
    if let Some(entry) = fast_row(line, position, format, &shape_texts(format), &mut interned) {
        return Some(entry);
    }
    let object = serde_json::from_slice::<Map<String, Json>>(line).ok()?;
    let mut interned: Vec<HashSet<Arc<str>>> = vec![HashSet::default(); format.json.len()];
    parse_row(&object, position, format, &mut interned).ok()
}

/// The fields of a line, borrowed: keys (unescaped only) and raw values.
struct RawFields<'a>(Vec<(&'a str, &'a serde_json::value::RawValue)>);

impl<'de> serde::Deserialize<'de> for RawFields<'de> {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        struct Fields;
        impl<'de> serde::de::Visitor<'de> for Fields {
            type Value = RawFields<'de>;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> std::result::Result<Self::Value, A::Error> {
                let mut fields = Vec::with_capacity(16);
                while let Some(entry) = map.next_entry()? {
                    fields.push(entry);
                }
                Ok(RawFields(fields))
            }
        }
        d.deserialize_map(Fields)
    }
}

/// Per tensor field, its shape as stowage and DNANet write it (`[1, 2]`).
fn shape_texts(format: &RowFormat) -> Vec<String> {
    format
        .tensors
        .iter()
        .map(|t| {
            let dims: Vec<String> = t.layout.shape.iter().map(ToString::to_string).collect();
            format!("[{}]", dims.join(", "))
        })
        .collect()
}

/// A JSON string's text from its raw form, borrowed when it has no escape.
fn raw_string(raw: &str) -> Option<std::borrow::Cow<'_, str>> {
    let inner = raw.strip_prefix('"')?.strip_suffix('"')?;
    if inner.contains('\\') {
        serde_json::from_str::<String>(raw).ok().map(std::borrow::Cow::Owned)
    } else {
        Some(std::borrow::Cow::Borrowed(inner))
    }
}

/// The entry of a line in the form stowage and DNANet write (keys unescaped, shapes as
/// [`shape_texts`]), parsed without building a JSON object; `None` for anything else (the
/// general parser then decides, with its errors).
fn fast_row(
    line: &[u8],
    position: usize,
    format: &RowFormat,
    shape_texts: &[String],
    interned: &mut [HashSet<Arc<str>>],
) -> Option<RowEntry> {
    let RawFields(fields) = serde_json::from_slice::<RawFields<'_>>(line).ok()?;
    let get = |key: &str| fields.iter().rev().find(|(k, _)| *k == key).map(|(_, v)| v.get());
    if get("row")?.parse::<u64>().ok()? != position as u64 {
        return None;
    }
    let path = raw_string(get("path")?)?;
    let mut present = Vec::with_capacity(format.tensors.len());
    for (tensor, shape) in format.tensors.iter().zip(shape_texts) {
        if get(&tensor.shape_key)? != shape {
            return None;
        }
        present.push(match &tensor.has_column {
            None => true,
            Some(key) => match get(key) {
                None | Some("true") => true,
                Some("false") => false,
                Some(_) => return None,
            },
        });
    }
    let mut json = Vec::with_capacity(format.json.len());
    for (field, interned) in format.json.iter().zip(interned) {
        json.push(match get(&field.manifest_key) {
            None | Some("null") => JsonRef::Null,
            Some(raw) => {
                let text = raw_string(raw)?;
                let text: Arc<str> = match &field.storage {
                    JsonStorage::Deduplicated { .. } => match interned.get(&*text) {
                        Some(shared) => shared.clone(),
                        None => {
                            let shared: Arc<str> = Arc::from(&*text);
                            interned.insert(shared.clone());
                            shared
                        }
                    },
                    JsonStorage::Plain { .. } => Arc::from(&*text),
                };
                JsonRef::Inline(text)
            }
        });
    }
    Some(RowEntry { path: path.into(), present: present.into(), json: json.into() })
}

fn shape_of(value: Option<&Json>) -> Option<Vec<usize>> {
    value?.as_array()?.iter().map(|d| d.as_u64().and_then(|d| usize::try_from(d).ok())).collect()
}

fn parse_row(
    object: &Map<String, Json>,
    position: usize,
    format: &RowFormat,
    interned: &mut [HashSet<Arc<str>>],
) -> std::result::Result<RowEntry, String> {
    let row = object.get("row").and_then(Json::as_u64);
    if row != Some(position as u64) {
        let got = object.get("row").map_or("nothing".into(), ToString::to_string);
        return Err(format!("has row {got}, expected {position}"));
    }
    let path = object.get("path").and_then(Json::as_str).ok_or("has no \"path\" string")?;
    let mut present = Vec::with_capacity(format.tensors.len());
    for tensor in &format.tensors {
        let shape = shape_of(object.get(&tensor.shape_key));
        if shape.as_deref() != Some(&tensor.layout.shape[..]) {
            return Err(format!(
                "{:?} is {}, the cache's rows of field {:?} have shape {:?} (the shapes differ)",
                tensor.shape_key,
                object.get(&tensor.shape_key).map_or("missing".into(), ToString::to_string),
                tensor.layout.name,
                tensor.layout.shape
            ));
        }
        present.push(match &tensor.has_column {
            None => true,
            Some(key) => match object.get(key) {
                None => true,
                Some(Json::Bool(flag)) => *flag,
                Some(other) => return Err(format!("{key:?} is {other}, not a bool")),
            },
        });
    }
    let mut json = Vec::with_capacity(format.json.len());
    for (field, interned) in format.json.iter().zip(interned) {
        json.push(match object.get(&field.manifest_key) {
            None | Some(Json::Null) => JsonRef::Null,
            Some(Json::String(text)) => {
                let text = match &field.storage {
                    JsonStorage::Deduplicated { .. } => match interned.get(text.as_str()) {
                        Some(shared) => shared.clone(),
                        None => {
                            let shared: Arc<str> = Arc::from(text.as_str());
                            interned.insert(shared.clone());
                            shared
                        }
                    },
                    JsonStorage::Plain { .. } => Arc::from(text.as_str()),
                };
                JsonRef::Inline(text)
            }
            Some(other) => {
                return Err(format!("{:?} is {other}, not a string", field.manifest_key));
            }
        });
    }
    Ok(RowEntry { path: path.into(), present: present.into(), json: json.into() })
}

/// The manifest line of one row (with its newline), in Python's `json.dumps` form: keys in
/// DNANet's order, `", "` and `": "` separators, non-ASCII escaped.
///
/// Written directly rather than through a JSON value: it runs once per `put`, and building and
/// encoding a map cost more than the row's checksum.
#[cfg(test)]
pub fn encode_line(format: &RowFormat, row: usize, entry: &RowEntry) -> Vec<u8> {
    let mut line = String::with_capacity(128 + entry.path.len());
    write_line(&mut line, format, row, entry);
    line.into_bytes()
}

/// Appends the manifest line of one row (with its newline) to `line`, as [`encode_line`].
pub fn write_line(line: &mut String, format: &RowFormat, row: usize, entry: &RowEntry) {
    use std::fmt::Write as _;
    let _ = write!(line, "{{\"row\": {row}, \"path\": ");
    write_python_string(line, &entry.path, true);
    let key = |line: &mut String, key: &str| {
        line.push_str(", ");
        write_python_string(line, key, true);
        line.push_str(": ");
    };
    for tensor in &format.tensors {
        key(line, &tensor.shape_key);
        line.push('[');
        for (i, dim) in tensor.layout.shape.iter().enumerate() {
            let _ = write!(line, "{}{dim}", if i == 0 { "" } else { ", " });
        }
        line.push(']');
    }
    for (tensor, present) in format.tensors.iter().zip(&entry.present) {
        if let Some(column) = &tensor.has_column {
            key(line, column);
            line.push_str(if *present { "true" } else { "false" });
        }
    }
    for (field, reference) in format.json.iter().zip(&entry.json) {
        key(line, &field.manifest_key);
        match reference {
            JsonRef::Inline(text) => write_python_string(line, text, true),
            // The writer keeps texts inline until finalize assigns sidecar keys.
            JsonRef::Null | JsonRef::Key(_) => line.push_str("null"),
        }
    }
    line.push_str("}\n");
}

/// [`encode_line`] through a JSON map and the general encoder: the oracle the direct writer is
/// tested against.
#[cfg(test)]
fn encode_line_through_json(format: &RowFormat, row: usize, entry: &RowEntry) -> Vec<u8> {
    use stowage_fingerprint::canonical_json::{PyJsonOptions, to_python_json};
    let mut object = Map::new();
    object.insert("row".into(), Json::from(row as u64));
    object.insert("path".into(), Json::from(&*entry.path));
    for tensor in &format.tensors {
        object.insert(tensor.shape_key.clone(), Json::from(tensor.layout.shape.clone()));
    }
    for (tensor, present) in format.tensors.iter().zip(&entry.present) {
        if let Some(key) = &tensor.has_column {
            object.insert(key.clone(), Json::Bool(*present));
        }
    }
    for (field, reference) in format.json.iter().zip(&entry.json) {
        let value = match reference {
            JsonRef::Inline(text) => Json::String(text.to_string()),
            // The writer keeps texts inline until finalize assigns sidecar keys.
            JsonRef::Null | JsonRef::Key(_) => Json::Null,
        };
        object.insert(field.manifest_key.clone(), value);
    }
    let mut line = to_python_json(&Json::Object(object), &PyJsonOptions::default()).into_bytes();
    line.push(b'\n');
    line
}

/// The open manifest of a writer: lines are gathered in memory and reach the file only in
/// [`ManifestWriter::commit`], which the writer calls after the rows' bytes are durable.
#[derive(Debug)]
pub struct ManifestWriter {
    path: PathBuf,
    file: File,
    pending: String,
    /// Bytes of the file (committed lines).
    len: u64,
}

impl ManifestWriter {
    /// Opens `path` for appending after `committed_len` bytes: a torn tail beyond them is cut off
    /// (and the cut made durable), and a lost final newline is restored.
    pub fn open(path: &Path, committed_len: u64, missing_newline: bool) -> Result<ManifestWriter> {
        // Never through a link: the cut and the appends would change the file it points to.
        let mut file =
            open_no_follow(OpenOptions::new().append(true).create(true), path).at(path)?;
        if file.metadata().at(path)?.len() != committed_len {
            file.set_len(committed_len).at(path)?;
            file.sync_data().at(path)?;
        }
        let mut len = committed_len;
        if missing_newline {
            file.write_all(b"\n").at(path)?;
            file.sync_data().at(path)?;
            len += 1;
        }
        Ok(ManifestWriter { path: path.to_path_buf(), file, pending: String::new(), len })
    }

    /// Adds the line `write` appends to the pending text, to be written by the next commit
    /// (written in place: no buffer per line). Returns where the line will be in the file.
    pub fn push_with(&mut self, write: impl FnOnce(&mut String)) -> crate::tail_index::LineLoc {
        let start = self.pending.len();
        write(&mut self.pending);
        let line = self.pending.as_bytes()[start..].strip_suffix(b"\n").unwrap_or_default();
        crate::tail_index::LineLoc::of(self.len + start as u64, line)
    }

    /// Bytes of the file once the pending lines are committed.
    pub(crate) fn committed_len(&self) -> u64 {
        self.len
    }

    /// Writes the pending lines and fdatasyncs the file: the commit point of their rows.
    pub fn commit(&mut self) -> Result<()> {
        if self.pending.is_empty() {
            return Ok(());
        }
        self.file.write_all(self.pending.as_bytes()).at(&self.path)?;
        self.file.sync_data().at(&self.path)?;
        self.len += self.pending.len() as u64;
        self.pending.clear();
        Ok(())
    }

    /// Whether lines are waiting for a commit.
    pub fn has_pending(&self) -> bool {
        !self.pending.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(row: u64, path: &str, shape: &str) -> String {
        format!(
            r#"{{"row": {row}, "path": "{path}", "data_shape": {shape}, "ann_shape": {shape}, "scaler_shape": [2], "has_annotation": {}, "allele_annotation_json": null, "adjusted_panel_json": "[1]", "meta_json": "{{}}"}}"#,
            row.is_multiple_of(2)
        )
    }

    fn parse(text: &str) -> Result<Manifest> {
        let format = RowFormat::new(&crate::dnanet(1, 2), false).unwrap();
        Manifest::parse(text.as_bytes(), Path::new("/c/manifest.jsonl"), &format)
    }

    #[test]
    fn committed_rows_and_torn_tail() {
        let text =
            format!("{}\n{}\n{{\"row\": 2, \"pa", line(0, "/a", "[1, 2]"), line(1, "/b", "[1, 2]"));
        let manifest = parse(&text).unwrap();
        assert_eq!(manifest.rows.len(), 2);
        assert_eq!(manifest.torn_tail, Some(TornLine { line: 3, bytes: 14 }));
        assert_eq!(manifest.committed_len as usize, text.len() - 14);
        let entries = &manifest.rows;
        assert_eq!(&*entries[1].path, "/b");
        assert_eq!(&*entries[1].present, [true, false, true]);
        assert_eq!(entries[0].json[0], JsonRef::Inline("[1]".into()));
        assert_eq!(entries[0].json[1], JsonRef::Null);
    }

    #[test]
    fn complete_last_line_without_newline_is_committed() {
        let text = format!("{}\n{}", line(0, "/a", "[1, 2]"), line(1, "/b", "[1, 2]"));
        let manifest = parse(&text).unwrap();
        assert_eq!((manifest.rows.len(), manifest.torn_tail), (2, None));
        assert!(manifest.missing_newline);
        assert_eq!(manifest.committed_len as usize, text.len());
        assert_eq!(parse("").unwrap().rows.len(), 0);
    }

    #[test]
    fn damage_before_the_end_is_corruption() {
        for (text, needle) in [
            (format!("garbage\n{}\n", line(0, "/a", "[1, 2]")), "line 1"),
            (format!("{}\ngarbage\n", line(0, "/a", "[1, 2]")), "line 2"),
            (format!("{}\n", line(1, "/a", "[1, 2]")), "has row 1, expected 0"),
            (format!("{}\n{}\n", line(0, "/a", "[1, 2]"), line(1, "/b", "[2]")), "differ"),
        ] {
            let err = parse(&text).unwrap_err();
            let message = err.to_string();
            assert!(matches!(err, Error::Corrupted { .. }), "{message}");
            assert!(message.contains("manifest.jsonl") && message.contains(needle), "{message}");
        }
    }

    /// Every entry [`ManifestRows`] streams from `text` (read through a tiny buffer, so that
    /// lines span reads), or its error.
    fn stream(text: &str) -> Result<Vec<RowEntry>> {
        let format = RowFormat::new(&crate::dnanet(1, 2), false).unwrap();
        let reader = std::io::BufReader::with_capacity(7, text.as_bytes());
        let mut rows = ManifestRows::new(reader, Path::new("/c/manifest.jsonl"), &format);
        let mut entries = Vec::new();
        while let Some(entry) = rows.next_entry()? {
            entries.push(entry);
        }
        assert!(rows.next_entry()?.is_none(), "the end stays the end");
        Ok(entries)
    }

    #[test]
    fn streamed_rows_are_the_parsed_ones_and_fail_alike() {
        let (a, b) = (line(0, "/a", "[1, 2]"), line(1, "/b", "[1, 2]"));
        // DNANet's key order (a foreign line) goes through the general parser.
        let foreign = r#"{"row": 2, "path": "/c", "data_shape": [1, 2], "ann_shape": [1, 2], "scaler_shape": [2], "has_annotation": false, "adjusted_panel_json": null, "allele_annotation_json": "{\"x\": 1}", "meta_json": "{}", "extra": [1, {"k": 2}]}"#;
        for text in [
            String::new(),
            format!("{a}\n{b}\n"),
            format!("{a}\n{b}"),
            format!("{a}\n{b}\n{{\"row\": 2, \"pa"),
            format!("{a}\n{b}\n{foreign}\n"),
        ] {
            assert_eq!(stream(&text).unwrap(), parse(&text).unwrap().rows, "{text}");
        }
        for text in [
            format!("garbage\n{a}\n"),
            format!("{a}\ngarbage\n"),
            format!("{}\n", line(1, "/a", "[1, 2]")),
            format!("{a}\n{}\n", line(1, "/b", "[2]")),
        ] {
            let (streamed, parsed) = (stream(&text).unwrap_err(), parse(&text).unwrap_err());
            assert!(matches!(streamed, Error::Corrupted { .. }), "{streamed}");
            assert_eq!(streamed.to_string(), parsed.to_string());
        }
    }

    #[test]
    fn lines_not_in_stowages_form_are_foreign() {
        let format = RowFormat::new(&crate::dnanet(1, 2), false).unwrap();
        let entry = |path: &str| RowEntry {
            path: path.into(),
            present: vec![true, false, true].into(),
            json: vec![JsonRef::Inline("[1]".into()), JsonRef::Null, JsonRef::Inline("{}".into())]
                .into(),
        };
        let mut text = Vec::new();
        text.extend(encode_line(&format, 0, &entry("/a")));
        text.extend(line(1, "/b", "[1, 2]").into_bytes()); // DNANet's key order
        text.push(b'\n');
        text.extend(encode_line(&format, 2, &entry("/c")));
        text.extend(line(3, "/d", "[1, 2]").into_bytes());
        text.push(b'\n');
        text.extend(line(4, "/e", "[1, 2]").into_bytes());
        let manifest = Manifest::parse(&text, Path::new("m"), &format).unwrap();
        assert_eq!(manifest.rows.len(), 5);
        assert_eq!(manifest.foreign, [1..2, 3..5]);
        // The same line without its newline is still stowage's.
        let last = encode_line(&format, 0, &entry("/a"));
        let manifest = Manifest::parse(&last[..last.len() - 1], Path::new("m"), &format).unwrap();
        assert!(manifest.missing_newline && manifest.foreign.is_empty());
    }

    #[test]
    fn the_fast_parser_agrees_with_the_general_one_or_declines() {
        let format = RowFormat::new(&crate::dnanet(1, 2), false).unwrap();
        let shapes = shape_texts(&format);
        let lines = [
            line(0, "/a", "[1, 2]"),
            line(0, "/a\\u00e9\\\"q", "[1, 2]"),
            line(0, "/a", "[1,2]"),
            line(0, "/a", "[1, 3]"),
            r#"{"row": 0, "path": "/a", "data_shape": [1, 2], "ann_shape": [1, 2], "scaler_shape": [2], "meta_json": "{\"x\": [1]}", "path": "/b"}"#.to_string(),
            r#"{"row": 0, "path": "/a", "data_shape": [1, 2], "ann_shape": [1, 2], "scaler_shape": [2], "has_annotation": 1}"#.to_string(),
            r#"{"row": 0.0, "path": "/a", "data_shape": [1, 2], "ann_shape": [1, 2], "scaler_shape": [2]}"#.to_string(),
            r#"{"r\u006fw": 0, "path": "/a", "data_shape": [1, 2], "ann_shape": [1, 2], "scaler_shape": [2]}"#.to_string(),
        ];
        for text in &lines {
            let mut interned = vec![HashSet::default(); format.json.len()];
            let fast = fast_row(text.as_bytes(), 0, &format, &shapes, &mut interned);
            let object: Map<String, Json> = serde_json::from_str(text).unwrap();
            let mut interned = vec![HashSet::default(); format.json.len()];
            let general = parse_row(&object, 0, &format, &mut interned).ok();
            if fast.is_some() {
                assert_eq!(fast, general, "{text}");
            }
            assert_eq!(parse_one(text.as_bytes(), 0, &format), general, "{text}");
        }
        assert!(fast_row(lines[0].as_bytes(), 1, &format, &shapes, &mut []).is_none());
    }

    #[test]
    fn encoded_lines_parse_back() {
        let format = RowFormat::new(&crate::dnanet(1, 2), false).unwrap();
        let entry = RowEntry {
            path: "/a\u{e9}".into(),
            present: vec![true, false, true].into(),
            json: vec![JsonRef::Inline("[1]".into()), JsonRef::Null, JsonRef::Inline("{}".into())]
                .into(),
        };
        let line = encode_line(&format, 0, &entry);
        let text = String::from_utf8(line.clone()).unwrap();
        assert!(
            text.starts_with(r#"{"row": 0, "path": "/a\u00e9", "data_shape": [1, 2]"#),
            "{text}"
        );
        let manifest = Manifest::parse(&line, Path::new("m"), &format).unwrap();
        assert_eq!(manifest.rows, [entry]);
    }

    #[test]
    fn direct_lines_equal_the_general_encoder() {
        let general = crate::preset::schema_for(&[
            crate::layout::FieldLayout::new("x", vec![], "<f8").unwrap(),
            crate::layout::FieldLayout::new("annotation", vec![0, 3], "|i1").unwrap(),
        ]);
        for schema in [crate::dnanet(2, 5), general] {
            let format = RowFormat::new(&schema, true).unwrap();
            let texts = ["", "{}", "\"q\" \\ \n\t\u{1}", "caf\u{e9} \u{1f600}", "\u{7f}"];
            for (i, text) in texts.iter().enumerate() {
                let entry = RowEntry {
                    path: format!("/srv/{text}/{i}.hid").into(),
                    present: (0..format.tensors.len()).map(|t| (i + t) % 2 == 0).collect(),
                    json: (0..format.json.len())
                        .map(|j| match (i + j) % 3 {
                            0 => JsonRef::Null,
                            1 => JsonRef::Key(7),
                            _ => JsonRef::Inline((*text).into()),
                        })
                        .collect(),
                };
                for row in [0, 9, usize::MAX] {
                    assert_eq!(
                        String::from_utf8(encode_line(&format, row, &entry)).unwrap(),
                        String::from_utf8(encode_line_through_json(&format, row, &entry)).unwrap()
                    );
                }
            }
        }
    }
}
