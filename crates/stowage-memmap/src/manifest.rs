//! `manifest.jsonl`, the writer's commit record of an unfinished cache: one JSON object per
//! committed row, written after the row's bytes.

use std::path::Path;
use std::sync::Arc;

use serde::Deserialize;
use stowage_core::{Error, IoResultExt, Result};

use crate::index::{JsonRef, RowEntry};

/// One committed row as the manifest records it.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct ManifestRow {
    /// The row number; equals the line's position.
    pub row: u64,
    /// The sample's source identity (its key).
    pub path: String,
    /// Shape of the row's `data`.
    pub data_shape: Vec<usize>,
    /// Shape of the row's `annotation`.
    pub ann_shape: Vec<usize>,
    /// Shape of the row's `scaler`.
    pub scaler_shape: Vec<usize>,
    /// False when the annotation row is a zero placeholder.
    pub has_annotation: bool,
    /// The allele-annotation JSON text, or null.
    pub allele_annotation_json: Option<String>,
    /// The adjusted panel JSON text, or null.
    pub adjusted_panel_json: Option<String>,
    /// The row's meta JSON text.
    pub meta_json: String,
}

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
    pub rows: Vec<ManifestRow>,
    /// The dropped torn last line, if there was one.
    pub torn_tail: Option<TornLine>,
}

impl Manifest {
    /// Reads and checks `manifest.jsonl`.
    pub fn read(path: &Path) -> Result<Manifest> {
        let text = std::fs::read(path).at(path)?;
        Self::parse(&text, path)
    }

    /// Parses a manifest. Every newline-terminated line must be a row object whose `row` equals its
    /// position and whose shapes equal the first row's; otherwise [`Error::Corrupted`] names the
    /// file and the line. A last line without a newline that does not parse is a torn write and is
    /// dropped (reported in [`Manifest::torn_tail`]); one that parses is a committed row.
    ///
    /// ```
    /// use stowage_memmap::manifest::Manifest;
    /// let line = r#"{"row": 0, "path": "/a", "data_shape": [1], "ann_shape": [1], "scaler_shape": [1], "has_annotation": true, "allele_annotation_json": null, "adjusted_panel_json": null, "meta_json": "{}"}"#;
    /// let text = format!("{line}\n{{\"row\": 1, \"pa");
    /// let manifest = Manifest::parse(text.as_bytes(), "manifest.jsonl".as_ref()).unwrap();
    /// assert_eq!(manifest.rows.len(), 1);
    /// assert_eq!(manifest.torn_tail.unwrap().line, 2);
    /// ```
    pub fn parse(text: &[u8], path: &Path) -> Result<Manifest> {
        let mut rows: Vec<ManifestRow> = Vec::new();
        let mut torn_tail = None;
        let mut lines = text.split(|&b| b == b'\n').enumerate().peekable();
        while let Some((i, line)) = lines.next() {
            let last = lines.peek().is_none();
            if last && line.is_empty() {
                break;
            }
            let row = match serde_json::from_slice::<ManifestRow>(line) {
                Ok(row) => row,
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
            if row.row != rows.len() as u64 {
                return Err(Error::corrupted(
                    path,
                    format!("line {} has row {}, expected {}", i + 1, row.row, rows.len()),
                ));
            }
            if let Some(first) = rows.first()
                && (&first.data_shape, &first.ann_shape, &first.scaler_shape)
                    != (&row.data_shape, &row.ann_shape, &row.scaler_shape)
            {
                return Err(Error::corrupted(
                    path,
                    format!(
                        "line {}: shapes data {:?} annotation {:?} scaler {:?} differ from row 0's \
                         {:?} {:?} {:?}",
                        i + 1,
                        row.data_shape,
                        row.ann_shape,
                        row.scaler_shape,
                        first.data_shape,
                        first.ann_shape,
                        first.scaler_shape
                    ),
                ));
            }
            rows.push(row);
        }
        Ok(Manifest { rows, torn_tail })
    }

    /// The rows as index entries; panel and allele texts are carried inline.
    pub fn entries(&self) -> Vec<RowEntry> {
        let inline = |text: &Option<String>| match text {
            Some(text) => JsonRef::Inline(Arc::from(text.as_str())),
            None => JsonRef::Null,
        };
        self.rows
            .iter()
            .map(|row| RowEntry {
                path: row.path.as_str().into(),
                has_annotation: row.has_annotation,
                panel: inline(&row.adjusted_panel_json),
                allele: inline(&row.allele_annotation_json),
                meta_json: Some(row.meta_json.as_str().into()),
            })
            .collect()
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
        Manifest::parse(text.as_bytes(), Path::new("/c/manifest.jsonl"))
    }

    #[test]
    fn committed_rows_and_torn_tail() {
        let text =
            format!("{}\n{}\n{{\"row\": 2, \"pa", line(0, "/a", "[1, 2]"), line(1, "/b", "[1, 2]"));
        let manifest = parse(&text).unwrap();
        assert_eq!(manifest.rows.len(), 2);
        assert_eq!(manifest.torn_tail, Some(TornLine { line: 3, bytes: 14 }));
        let entries = manifest.entries();
        assert_eq!(&*entries[1].path, "/b");
        assert!(!entries[1].has_annotation);
        assert_eq!(entries[0].panel, JsonRef::Inline("[1]".into()));
        assert_eq!(entries[0].allele, JsonRef::Null);
    }

    #[test]
    fn complete_last_line_without_newline_is_committed() {
        let text = format!("{}\n{}", line(0, "/a", "[1]"), line(1, "/b", "[1]"));
        let manifest = parse(&text).unwrap();
        assert_eq!((manifest.rows.len(), manifest.torn_tail), (2, None));
        assert_eq!(parse("").unwrap().rows.len(), 0);
    }

    #[test]
    fn damage_before_the_end_is_corruption() {
        for (text, needle) in [
            (format!("garbage\n{}\n", line(0, "/a", "[1]")), "line 1"),
            (format!("{}\ngarbage\n", line(0, "/a", "[1]")), "line 2"),
            (format!("{}\n", line(1, "/a", "[1]")), "has row 1, expected 0"),
            (format!("{}\n{}\n", line(0, "/a", "[1]"), line(1, "/b", "[2]")), "differ"),
        ] {
            let err = parse(&text).unwrap_err();
            let message = err.to_string();
            assert!(matches!(err, Error::Corrupted { .. }), "{message}");
            assert!(message.contains("manifest.jsonl") && message.contains(needle), "{message}");
        }
    }
}
