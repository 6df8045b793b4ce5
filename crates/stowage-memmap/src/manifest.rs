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
    pub fn parse(text: &[u8], path: &Path, format: &RowFormat) -> Result<Manifest> {
        let mut rows: Vec<RowEntry> = Vec::new();
        let mut torn_tail = None;
        let mut committed_len = 0u64;
        let mut missing_newline = false;
        // Identical deduplicated texts share one allocation, as in the finalized cache's sidecar.
        let mut interned: Vec<HashSet<Arc<str>>> = vec![HashSet::default(); format.json.len()];
        let mut lines = text.split(|&b| b == b'\n').enumerate().peekable();
        let mut offset = 0u64;
        let mut foreign: Vec<Range<usize>> = Vec::new();
        let mut encoded = String::new();
        while let Some((i, line)) = lines.next() {
            let last = lines.peek().is_none();
            if last && line.is_empty() {
                break;
            }
            let object = match serde_json::from_slice::<Map<String, Json>>(line) {
                Ok(object) => object,
                Err(_) if last => {
                    torn_tail = Some(TornLine { line: i + 1, bytes: line.len() });
                    break;
                }
                Err(e) => {
                    return Err(Error::corrupted(
                        path,
                        format!("line {} is not a committed row entry: {e}", i + 1),
                    ));
                }
            };
            let entry = parse_row(&object, rows.len(), format, &mut interned)
                .map_err(|detail| Error::corrupted(path, format!("line {}: {detail}", i + 1)))?;
            encoded.clear();
            write_line(&mut encoded, format, rows.len(), &entry);
            if encoded.as_bytes().strip_suffix(b"\n") != Some(line) {
                match foreign.last_mut() {
                    Some(run) if run.end == rows.len() => run.end += 1,
                    _ => foreign.push(rows.len()..rows.len() + 1),
                }
            }
            rows.push(entry);
            offset += line.len() as u64 + u64::from(!last);
            committed_len = offset;
            missing_newline = last;
        }
        Ok(Manifest { rows, torn_tail, committed_len, missing_newline, foreign })
    }
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
        if missing_newline {
            file.write_all(b"\n").at(path)?;
            file.sync_data().at(path)?;
        }
        Ok(ManifestWriter { path: path.to_path_buf(), file, pending: String::new() })
    }

    /// Adds the line `write` appends to the pending text, to be written by the next commit
    /// (written in place: no buffer per line).
    pub fn push_with(&mut self, write: impl FnOnce(&mut String)) {
        write(&mut self.pending);
    }

    /// Writes the pending lines and fdatasyncs the file: the commit point of their rows.
    pub fn commit(&mut self) -> Result<()> {
        if self.pending.is_empty() {
            return Ok(());
        }
        self.file.write_all(self.pending.as_bytes()).at(&self.path)?;
        self.file.sync_data().at(&self.path)?;
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
