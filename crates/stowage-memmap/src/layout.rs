//! Where each file of a DNANet memmap row cache lives, and `shapes.json`, which describes its rows.
//!
//! ```text
//! <cache>/<field>.bin       headerless C-order rows of one fixed-shape tensor field (data, annotation, scaler)
//! <cache>/index.parquet     one row per cache row: row, path, has_annotation, panel_key, allele_key, meta_json
//! <cache>/panels.json       {"0": "<json text>", ...}: deduplicated panel JSON texts
//! <cache>/alleles.json      the same for allele annotations
//! <cache>/shapes.json       {"n": N, "<field>": {"shape": [...], "dtype": "<i2"}, ...}
//! <cache>/fingerprint.json  {"cache_version": 5, "hash": ..., "config": ..., "sources": ...}
//! <cache>/manifest.jsonl    the writer's append-only log; exists only while the cache is being written
//! <cache>/_COMPLETE         empty; created last by finalize
//! ```

use std::path::{Path, PathBuf};
use stowage_core::{ByteOrder, DType, Error, Result, shape};

/// DNANet's `CACHE_VERSION` for this layout.
pub const CACHE_VERSION: u64 = 5;

/// Paths inside one cache directory.
#[derive(Debug, Clone)]
pub struct Layout {
    root: PathBuf,
}

impl Layout {
    /// The layout of the cache in `root`.
    pub fn new(root: impl Into<PathBuf>) -> Layout {
        Layout { root: root.into() }
    }

    /// The cache directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// `<field>.bin`, the rows of one tensor field.
    pub fn field_file(&self, field: &str) -> PathBuf {
        self.root.join(format!("{field}.bin"))
    }

    /// `index.parquet`.
    pub fn index(&self) -> PathBuf {
        self.root.join("index.parquet")
    }

    /// `panels.json`.
    pub fn panels(&self) -> PathBuf {
        self.root.join("panels.json")
    }

    /// `alleles.json`.
    pub fn alleles(&self) -> PathBuf {
        self.root.join("alleles.json")
    }

    /// `shapes.json`.
    pub fn shapes(&self) -> PathBuf {
        self.root.join("shapes.json")
    }

    /// `fingerprint.json`.
    pub fn fingerprint(&self) -> PathBuf {
        self.root.join("fingerprint.json")
    }

    /// `manifest.jsonl`.
    pub fn manifest(&self) -> PathBuf {
        self.root.join("manifest.jsonl")
    }

    /// `_COMPLETE`.
    pub fn complete_marker(&self) -> PathBuf {
        self.root.join("_COMPLETE")
    }

    /// `stowage.json`, the schema of a cache stowage wrote.
    pub fn stowage_meta(&self) -> PathBuf {
        self.root.join(crate::row_format::STOWAGE_META_FILE)
    }

    /// `stowage_checksums.bin`, the per-row checksums of a cache stowage wrote.
    pub fn checksums(&self) -> PathBuf {
        self.root.join(crate::row_format::CHECKSUMS_FILE)
    }

    /// A file of the cache by name (a sidecar).
    pub fn file(&self, name: &str) -> PathBuf {
        self.root.join(name)
    }

    /// Whether the directory holds any of the files DNANet's writer leaves in a cache, finalized
    /// or not ([`DNANET_FILES`]).
    ///
    /// ```
    /// let dir = tempfile::tempdir()?;
    /// let layout = stowage_memmap::test_support::Layout::new(dir.path());
    /// assert!(!layout.has_dnanet_files());
    /// std::fs::write(layout.manifest(), b"")?;
    /// assert!(layout.has_dnanet_files());
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn has_dnanet_files(&self) -> bool {
        DNANET_FILES.iter().any(|name| self.root.join(name).exists())
    }
}

/// The files DNANet's memmap writer leaves in a cache directory, finalized or not (its own
/// inspection tool looks for the first three).
pub const DNANET_FILES: [&str; 5] =
    ["shapes.json", "index.parquet", "fingerprint.json", "_COMPLETE", "manifest.jsonl"];

/// One fixed-shape tensor field: its name, per-row shape and stored element type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldLayout {
    /// The field name; its rows live in `<name>.bin`.
    pub name: String,
    /// The shape of one row.
    pub shape: Vec<usize>,
    /// The element type.
    pub dtype: DType,
    /// The byte order of the stored elements; big-endian rows are converted on read.
    pub byte_order: ByteOrder,
    /// The numpy dtype string as written (`"<i2"`).
    pub descr: String,
    /// Bytes of one row: the element count of `shape` times the item size.
    pub row_bytes: usize,
}

impl FieldLayout {
    /// A field from its numpy dtype string; the error names the field and the descr.
    ///
    /// ```
    /// use stowage_memmap::test_support::FieldLayout;
    /// let f = FieldLayout::new("data", vec![3, 32], "<i2").unwrap();
    /// assert_eq!(f.row_bytes, 192);
    /// assert!(FieldLayout::new("x", vec![2], "<c8").is_err());
    /// ```
    pub fn new(name: &str, shape: Vec<usize>, descr: &str) -> Result<FieldLayout> {
        let (dtype, byte_order) = DType::from_numpy_descr(descr)
            .map_err(|e| Error::invalid(format!("field {name:?}: dtype {descr:?}: {e}")))?;
        let row_bytes = shape::byte_count(&shape, dtype.item_size())
            .map_err(|e| Error::invalid(format!("field {name:?}: {e}")))?;
        Ok(FieldLayout {
            name: name.to_owned(),
            shape,
            dtype,
            byte_order,
            descr: descr.to_owned(),
            row_bytes,
        })
    }
}

/// The contents of `shapes.json`: the number of rows and every tensor field, in file order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Shapes {
    /// Number of rows `n`.
    pub rows: usize,
    /// The tensor fields, in the order `shapes.json` lists them.
    pub fields: Vec<FieldLayout>,
}

impl Shapes {
    /// Reads `shapes.json`. Errors: [`Error::NotFound`] when absent, [`Error::Corrupted`] naming the
    /// file (and the field) when it does not parse or a field is malformed.
    pub fn read(path: &Path) -> Result<Shapes> {
        Self::read_fields(path, true)
    }

    /// Like [`Shapes::read`], but a file listing no tensor field is accepted: a cache stowage
    /// wrote for a schema of JSON fields only.
    pub fn read_allowing_no_field(path: &Path) -> Result<Shapes> {
        Self::read_fields(path, false)
    }

    fn read_fields(path: &Path, require_field: bool) -> Result<Shapes> {
        let text = match std::fs::read(path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(Error::NotFound { what: format!("{}", path.display()) });
            }
            Err(e) => return Err(Error::io(path, e)),
        };
        Self::parse_fields(&text, path, require_field)
    }

    /// Parses the text of a `shapes.json`; `path` is named in errors.
    ///
    /// ```
    /// use stowage_memmap::test_support::Shapes;
    /// let text = br#"{"n": 2, "scaler": {"shape": [32], "dtype": "<f4"}}"#;
    /// let shapes = Shapes::parse(text, "shapes.json".as_ref()).unwrap();
    /// assert_eq!((shapes.rows, shapes.fields[0].row_bytes), (2, 128));
    /// let err = Shapes::parse(br#"{"n": 2, "x": {"shape": [1]}}"#, "shapes.json".as_ref());
    /// assert!(err.unwrap_err().to_string().contains("field \"x\""));
    /// ```
    #[cfg(any(test, feature = "fuzzing", feature = "test-support"))]
    pub fn parse(text: &[u8], path: &Path) -> Result<Shapes> {
        Self::parse_fields(text, path, true)
    }

    fn parse_fields(text: &[u8], path: &Path, require_field: bool) -> Result<Shapes> {
        let bad = |detail: String| Error::corrupted(path, detail);
        let value: serde_json::Value = serde_json::from_slice(text)
            .map_err(|e| bad(format!("does not parse as JSON: {e}")))?;
        let serde_json::Value::Object(object) = value else {
            return Err(bad("is not a JSON object".into()));
        };
        let rows = object
            .get("n")
            .ok_or_else(|| bad("has no \"n\" (row count)".into()))?
            .as_u64()
            .and_then(|n| usize::try_from(n).ok())
            .ok_or_else(|| bad(format!("\"n\" is {}, not a row count", object["n"])))?;
        let mut fields = Vec::new();
        for (name, spec) in object.iter().filter(|(k, _)| k.as_str() != "n") {
            let field_bad = |detail: &str| bad(format!("field {name:?}: {detail}"));
            check_field_name(name).map_err(|d| field_bad(&d))?;
            let shape = spec
                .get("shape")
                .and_then(serde_json::Value::as_array)
                .ok_or_else(|| field_bad("no \"shape\" list"))?
                .iter()
                .map(|d| d.as_u64().and_then(|d| usize::try_from(d).ok()))
                .collect::<Option<Vec<usize>>>()
                .ok_or_else(|| field_bad("\"shape\" holds something other than dimensions"))?;
            let descr = spec
                .get("dtype")
                .and_then(serde_json::Value::as_str)
                .ok_or_else(|| field_bad("no \"dtype\" string"))?;
            let field = FieldLayout::new(name, shape, descr).map_err(|e| bad(e.to_string()))?;
            fields.push(field);
        }
        if fields.is_empty() && require_field {
            return Err(bad("describes no field".into()));
        }
        Ok(Shapes { rows, fields })
    }
}

/// A field name becomes a file name: refuse anything that could leave the cache directory.
pub(crate) fn check_field_name(name: &str) -> std::result::Result<(), String> {
    let fine = !name.is_empty()
        && !name.starts_with('.')
        && !name.contains(['/', '\\', '\0'])
        && name.len() <= 200;
    if fine { Ok(()) } else { Err("is not usable as a file name".into()) }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Shapes> {
        Shapes::parse(text.as_bytes(), Path::new("/c/shapes.json"))
    }

    #[test]
    fn dnanet_shapes_parse_in_file_order() {
        let shapes = parse(
            r#"{"n": 6, "data": {"shape": [3, 32], "dtype": "<i2"},
                "annotation": {"shape": [3, 32], "dtype": "|i1"},
                "scaler": {"shape": [32], "dtype": "<f4"}}"#,
        )
        .unwrap();
        assert_eq!(shapes.rows, 6);
        let names: Vec<&str> = shapes.fields.iter().map(|f| f.name.as_str()).collect();
        assert_eq!(names, ["data", "annotation", "scaler"]);
        assert_eq!(shapes.fields[0].row_bytes, 192);
        assert_eq!(shapes.fields[1].dtype, DType::I8);
    }

    #[test]
    fn big_endian_is_recorded_not_misread() {
        let shapes = parse(r#"{"n": 1, "x": {"shape": [2], "dtype": ">i4"}}"#).unwrap();
        assert_eq!(shapes.fields[0].byte_order, ByteOrder::Big);
        assert_eq!(shapes.fields[0].dtype, DType::I32);
    }

    #[test]
    fn errors_name_the_file_and_field() {
        for (text, needle) in [
            ("garbage", "does not parse"),
            ("[1]", "not a JSON object"),
            (r#"{"x": {"shape": [1], "dtype": "<f4"}}"#, "no \"n\""),
            (r#"{"n": -1, "x": {"shape": [1], "dtype": "<f4"}}"#, "not a row count"),
            (r#"{"n": 1, "x": {"shape": [-1], "dtype": "<f4"}}"#, "field \"x\""),
            (r#"{"n": 1, "x": {"shape": [1], "dtype": "<U5"}}"#, "field \"x\""),
            (r#"{"n": 1, "../x": {"shape": [1], "dtype": "<f4"}}"#, "file name"),
            (r#"{"n": 1}"#, "no field"),
            (r#"{"n": 1, "x": {"shape": [4611686018427387904, 4], "dtype": "<f8"}}"#, "field"),
        ] {
            let err = parse(text).unwrap_err();
            let message = err.to_string();
            assert!(matches!(err, Error::Corrupted { .. }), "{text}: {message}");
            assert!(message.contains("/c/shapes.json"), "{message}");
            assert!(message.contains(needle), "{text}: {message}");
        }
    }

    #[test]
    fn missing_file_is_not_found() {
        let err = Shapes::read(Path::new("/definitely/not/here/shapes.json")).unwrap_err();
        assert!(matches!(err, Error::NotFound { .. }));
    }
}
