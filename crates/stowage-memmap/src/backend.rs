//! `MemmapBackend`: the read side of the [`Backend`] over a DNANet memmap row cache.

use std::path::Path;
use std::sync::Arc;

use stowage_core::{
    Backend, Capabilities, DType, Error, Result, Sample, Schema, ValidationLevel, ValidationReport,
    Value,
};

use crate::MemmapOptions;
use crate::field_file::{FieldFile, SizeCheck};
use crate::index::{JsonRef, RowIndex};
use crate::layout::{Layout, Shapes};
use crate::manifest::{Manifest, TornLine};
use crate::preset::{self, ALLELE_FIELD, ANNOTATION_FIELD, META_FIELD, PANEL_FIELD};
use crate::sidecar::Sidecar;

/// The backend's name in errors and capability reports.
pub const BACKEND_NAME: &str = "memmap";

/// What the read side of a memmap row cache can do.
///
/// Fixed-shape tensor fields of every numpy-expressible dtype, a nullable `annotation`, JSON fields
/// (`panel` and `allele` deduplicated, `meta_json` plain), zero-copy reads and concurrent readers.
/// Not yet: writing (`put`, `flush`, `finalize` return `Error::Unsupported`; the writer comes with
/// the rest of issue 3), resume, and checksums (the original format has none; stowage's checksum
/// sidecar arrives with the writer).
pub fn capabilities() -> Capabilities {
    Capabilities {
        variable_shapes: false,
        ragged: false,
        nullable: true,
        bytes_fields: false,
        json_fields: true,
        overwrite: false,
        append_after_finalize: false,
        resume: false,
        checksums: false,
        zero_copy_get: true,
        concurrent_readers: true,
        dtypes: DType::ALL.into_iter().filter(|d| *d != DType::BF16).collect(),
        max_rank: None,
        max_key_bytes: None,
        max_fields: None,
    }
}

/// Picks a row's reference into one sidecar.
pub(crate) type SidecarRef = fn(&crate::index::RowEntry) -> &JsonRef;

/// How the cache was found on disk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum State {
    /// `_COMPLETE` present: `shapes.json`, `index.parquet` and the sidecars describe it.
    Finalized,
    /// No `_COMPLETE`, but finalize's files are there and the manifest is gone: finalize crashed
    /// just before its last step. Read like a finalized cache, reported as unfinished.
    FinalizeInterrupted,
    /// No `_COMPLETE`, `manifest.jsonl` present: the committed rows of an unfinished write.
    Unfinished {
        /// The dropped torn last line of the manifest.
        torn_tail: Option<TornLine>,
    },
}

/// A DNANet memmap row cache (cache version 5), opened read-only.
///
/// ```no_run
/// use stowage_core::Backend;
/// use stowage_memmap::{MemmapBackend, MemmapOptions};
///
/// let cache = MemmapBackend::open_read_only("cache_root/aed9b48500e9acfd", MemmapOptions::default())?;
/// let last = cache.get_row(-1)?;
/// let by_key = cache.get(&cache.keys()?[cache.len() - 1])?.unwrap();
/// assert_eq!(last, by_key);
/// # Ok::<(), stowage_core::Error>(())
/// ```
pub struct MemmapBackend {
    layout: Layout,
    options: MemmapOptions,
    capabilities: Capabilities,
    schema: Schema,
    state: State,
    index: RowIndex,
    files: Vec<FieldFile>,
    /// Position in `files` of the field `has_annotation` nulls.
    annotation: Option<usize>,
    /// Field names shared by every returned sample: tensor fields, then panel, allele, meta_json.
    names: Vec<Arc<str>>,
    panels: Sidecar,
    alleles: Sidecar,
}

impl MemmapBackend {
    /// Opens the cache in `dir` read-only. No lock is taken; memory maps open on the first row read.
    ///
    /// - With `_COMPLETE`: reads `shapes.json` and `index.parquet`, and checks each `.bin` file's
    ///   size against `n * row_bytes` (shorter: `Error::Corrupted` naming the file and both sizes;
    ///   longer: the same unless [`MemmapOptions::allow_trailing_bytes`]). The index must hold `n`
    ///   rows.
    /// - Without `_COMPLETE` but with `manifest.jsonl`: serves the manifest's committed rows; the
    ///   shapes come from the manifest and the dtypes are DNANet's (`<i2`, `|i1`, `<f4`), as there is
    ///   no `shapes.json` yet, so this fallback only knows DNANet's three fields. Bytes beyond the
    ///   committed rows are a torn append and are ignored. [`Backend::is_finalized`] is false.
    /// - Without both, but with `shapes.json` and `index.parquet`: finalize was interrupted just
    ///   before writing `_COMPLETE`; read like a complete cache, reported as unfinished.
    /// - Anything else: `Error::NotFound`.
    pub fn open_read_only(dir: impl AsRef<Path>, options: MemmapOptions) -> Result<MemmapBackend> {
        let layout = Layout::new(dir.as_ref());
        if !layout.root().is_dir() {
            return Err(Error::NotFound {
                what: format!("memmap row cache directory {}", layout.root().display()),
            });
        }
        let complete = layout.complete_marker().exists();
        if !complete && layout.manifest().exists() {
            return Self::open_unfinished(layout, options);
        }
        let state = if complete { State::Finalized } else { State::FinalizeInterrupted };
        let finalize_files = layout.shapes().exists() && layout.index().exists();
        if !(complete || finalize_files) {
            return Err(Error::NotFound {
                what: format!(
                    "memmap row cache in {} (no _COMPLETE, manifest.jsonl or shapes.json + \
                     index.parquet)",
                    layout.root().display()
                ),
            });
        }
        let shapes = Shapes::read(&layout.shapes()).map_err(|e| match e {
            Error::NotFound { .. } => {
                Error::corrupted(layout.shapes(), "file is missing from a finalized cache")
            }
            other => other,
        })?;
        let files: Vec<FieldFile> = shapes
            .fields
            .iter()
            .map(|f| FieldFile::new(layout.field_file(&f.name), f.clone(), shapes.rows))
            .collect();
        for file in &files {
            if let SizeCheck::Trailing(extra) = file.check_size()?
                && !options.allow_trailing_bytes
            {
                return Err(trailing_error(file, extra));
            }
        }
        let index = RowIndex::read_parquet(&layout.index())?;
        if index.len() != shapes.rows {
            return Err(Error::corrupted(
                layout.index(),
                format!("holds {} rows, shapes.json says n = {}", index.len(), shapes.rows),
            ));
        }
        Ok(Self::assemble(layout, options, state, index, files))
    }

    fn open_unfinished(layout: Layout, options: MemmapOptions) -> Result<MemmapBackend> {
        let manifest = Manifest::read(&layout.manifest())?;
        let (data, annotation, scaler) = match manifest.rows.first() {
            Some(row) => (&row.data_shape[..], &row.ann_shape[..], &row.scaler_shape[..]),
            None => (&[][..], &[][..], &[][..]),
        };
        for (name, shape) in [("data", data), (ANNOTATION_FIELD, annotation), ("scaler", scaler)] {
            // Checked here so that dnanet_fields never meets an overflowing shape.
            stowage_core::shape::byte_count(shape, 8)
                .map_err(|e| Error::corrupted(layout.manifest(), format!("{name} shape: {e}")))?;
        }
        let rows = manifest.rows.len();
        let files: Vec<FieldFile> = preset::dnanet_fields(data, annotation, scaler)
            .into_iter()
            .map(|f| FieldFile::new(layout.field_file(&f.name), f, rows))
            .collect();
        for file in &files {
            file.check_size()?;
        }
        let index = RowIndex::from_entries(manifest.entries(), &layout.manifest())?;
        let state = State::Unfinished { torn_tail: manifest.torn_tail };
        Ok(Self::assemble(layout, options, state, index, files))
    }

    fn assemble(
        layout: Layout,
        options: MemmapOptions,
        state: State,
        index: RowIndex,
        files: Vec<FieldFile>,
    ) -> MemmapBackend {
        let fields: Vec<_> = files.iter().map(|f| f.field().clone()).collect();
        let schema = preset::schema_for(&fields);
        let names = files
            .iter()
            .map(|f| Arc::from(f.field().name.as_str()))
            .chain([PANEL_FIELD, ALLELE_FIELD, META_FIELD].map(Arc::from))
            .collect();
        MemmapBackend {
            annotation: files.iter().position(|f| f.field().name == ANNOTATION_FIELD),
            panels: Sidecar::new(layout.panels()),
            alleles: Sidecar::new(layout.alleles()),
            capabilities: capabilities(),
            layout,
            options,
            schema,
            state,
            index,
            files,
            names,
        }
    }

    /// The cache's directory layout.
    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    /// The options this handle was opened with.
    pub fn options(&self) -> &MemmapOptions {
        &self.options
    }

    /// The row index (paths, annotation flags, sidecar keys, meta JSON).
    pub fn index(&self) -> &RowIndex {
        &self.index
    }

    /// The torn last line of an unfinished cache's manifest that was dropped, if any.
    pub fn dropped_manifest_tail(&self) -> Option<&TornLine> {
        match &self.state {
            State::Unfinished { torn_tail } => torn_tail.as_ref(),
            _ => None,
        }
    }

    pub(crate) fn state(&self) -> &State {
        &self.state
    }

    pub(crate) fn files(&self) -> &[FieldFile] {
        &self.files
    }

    pub(crate) fn sidecars(&self) -> [(&Sidecar, SidecarRef); 2] {
        [(&self.panels, |r| &r.panel), (&self.alleles, |r| &r.allele)]
    }

    /// Row `i` of the cache; negative `i` counts from the end (`-1` is the last row).
    ///
    /// Errors: [`Error::InvalidArgument`] naming `i` and the row count when out of range;
    /// [`Error::Corrupted`] naming the file when a `.bin` file or a sidecar is damaged.
    pub fn get_row(&self, i: i64) -> Result<Sample> {
        let n = self.index.len();
        let position = if i < 0 { i.checked_add(n as i64) } else { Some(i) };
        let row =
            position.and_then(|p| usize::try_from(p).ok()).filter(|&p| p < n).ok_or_else(|| {
                Error::invalid(format!(
                    "row {i} out of range for a cache of {n} rows ({})",
                    self.layout.root().display()
                ))
            })?;
        self.read_row(row)
    }

    /// Reads row `row` (in range).
    pub(crate) fn read_row(&self, row: usize) -> Result<Sample> {
        let entry = self.index.row(row).expect("the caller checked the range");
        let mut sample = Sample::new();
        for (i, file) in self.files.iter().enumerate() {
            let value = if self.annotation == Some(i) && !entry.has_annotation {
                Value::Null
            } else {
                Value::Tensor(file.read_row(row)?)
            };
            sample.insert(self.names[i].clone(), value);
        }
        let tensors = self.files.len();
        let panel = json_value(&self.panels, &entry.panel)?;
        let allele = json_value(&self.alleles, &entry.allele)?;
        let meta = entry.meta_json.as_deref().map_or(Value::Null, |t| Value::Json(t.to_owned()));
        sample.insert(self.names[tensors].clone(), panel);
        sample.insert(self.names[tensors + 1].clone(), allele);
        sample.insert(self.names[tensors + 2].clone(), meta);
        Ok(sample)
    }

    fn read_only(&self, operation: &str) -> Error {
        Error::unsupported(
            BACKEND_NAME,
            format!(
                "{operation} through a read-only handle of {} (the memmap writer is not built yet)",
                self.layout.root().display()
            ),
        )
    }
}

fn json_value(sidecar: &Sidecar, reference: &JsonRef) -> Result<Value> {
    Ok(match reference {
        JsonRef::Null => Value::Null,
        JsonRef::Key(key) => Value::Json(sidecar.lookup(*key)?.to_string()),
        JsonRef::Inline(text) => Value::Json(text.to_string()),
    })
}

pub(crate) fn trailing_error(file: &FieldFile, extra: u64) -> Error {
    let expected = file.expected_len().unwrap_or(0);
    Error::corrupted(
        file.path(),
        format!(
            "file is {} bytes, expected {expected} ({} rows of {} bytes): {extra} trailing bytes \
             (DNANet ignores them; set MemmapOptions::allow_trailing_bytes to read the {} rows)",
            expected + extra,
            file.rows(),
            file.field().row_bytes,
            file.rows()
        ),
    )
}

impl Backend for MemmapBackend {
    fn name(&self) -> &'static str {
        BACKEND_NAME
    }

    fn capabilities(&self) -> &Capabilities {
        &self.capabilities
    }

    fn schema(&self) -> &Schema {
        &self.schema
    }

    fn path(&self) -> &Path {
        self.layout.root()
    }

    fn put(&mut self, _key: &str, _sample: &Sample) -> Result<()> {
        Err(self.read_only("put"))
    }

    fn get(&self, key: &str) -> Result<Option<Sample>> {
        let Some(row) = self.index.find(key) else { return Ok(None) };
        self.read_row(row).map(Some).map_err(|e| match e {
            Error::Corrupted { path, detail } => {
                Error::Corrupted { path, detail: format!("key {key:?} (row {row}): {detail}") }
            }
            other => other,
        })
    }

    fn contains(&self, key: &str) -> Result<bool> {
        Ok(self.index.find(key).is_some())
    }

    fn len(&self) -> usize {
        self.index.len()
    }

    fn keys(&self) -> Result<Vec<String>> {
        Ok(self.index.rows().iter().map(|r| r.path.to_string()).collect())
    }

    fn flush(&mut self) -> Result<()> {
        Err(self.read_only("flush"))
    }

    fn finalize(&mut self) -> Result<()> {
        Err(self.read_only("finalize"))
    }

    fn is_finalized(&self) -> bool {
        self.state == State::Finalized
    }

    fn validate(&self, level: ValidationLevel) -> Result<ValidationReport> {
        Ok(crate::validate::validate(self, level))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::write_dnanet_cache;
    use stowage_core::{BackendExt, FieldKind, ShapeRule};

    fn open(dir: &Path) -> Result<MemmapBackend> {
        MemmapBackend::open_read_only(dir, MemmapOptions::default())
    }

    #[test]
    fn reads_rows_by_key_and_index() {
        let dir = tempfile::tempdir().unwrap();
        write_dnanet_cache(dir.path());
        let cache = open(dir.path()).unwrap();
        assert!(cache.is_finalized());
        assert_eq!(cache.len(), 3);
        assert_eq!(cache.keys().unwrap(), ["/r/a.hid", "/r/b.hid", "/r/c.hid"]);
        let row = cache.get("/r/c.hid").unwrap().unwrap();
        let data = row.tensor("data").unwrap();
        assert!(data.is_zero_copy());
        assert_eq!(data.to_vec::<i16>().unwrap(), (200..208).collect::<Vec<i16>>());
        assert_eq!(row.tensor("scaler").unwrap().to_vec::<f32>().unwrap()[1], 2.1);
        assert_eq!(row.get("panel"), Some(&Value::Null));
        assert_eq!(row.get("allele"), Some(&Value::Json("[\"a1\"]".into())));
        assert_eq!(cache.get_row(-1).unwrap(), row);
        assert_eq!(cache.get_row(2).unwrap(), row);
        cache.schema().validate(&row).unwrap();
        assert!(cache.get("/nope").unwrap().is_none());
        assert!(!cache.contains("/nope").unwrap() && cache.contains("/r/a.hid").unwrap());
    }

    #[test]
    fn unannotated_rows_read_as_null_not_zeros() {
        let dir = tempfile::tempdir().unwrap();
        write_dnanet_cache(dir.path());
        let cache = open(dir.path()).unwrap();
        let b = cache.get_row(1).unwrap();
        assert_eq!(b.get("annotation"), Some(&Value::Null));
        assert_eq!(b.get("allele"), Some(&Value::Null));
        assert_eq!(b.get("meta_json"), Some(&Value::Json(r#"{"id": "b"}"#.into())));
        cache.schema().validate(&b).unwrap();
    }

    #[test]
    fn out_of_range_rows_name_i_and_n() {
        let dir = tempfile::tempdir().unwrap();
        write_dnanet_cache(dir.path());
        let cache = open(dir.path()).unwrap();
        for i in [3, -4, i64::MIN, i64::MAX] {
            let err = cache.get_row(i).unwrap_err().to_string();
            assert!(err.contains(&format!("row {i} ")) && err.contains("3 rows"), "{err}");
        }
    }

    #[test]
    fn schema_is_dnanet() {
        let dir = tempfile::tempdir().unwrap();
        write_dnanet_cache(dir.path());
        let cache = open(dir.path()).unwrap();
        assert_eq!(cache.schema(), &crate::dnanet(2, 4));
        let ann = cache.schema().get("annotation").unwrap();
        assert!(ann.nullable);
        assert_eq!(
            ann.kind,
            FieldKind::Tensor { dtype: DType::I8, shape: ShapeRule::Fixed(vec![2, 4]) }
        );
    }

    #[test]
    fn writes_are_unsupported() {
        let dir = tempfile::tempdir().unwrap();
        write_dnanet_cache(dir.path());
        let mut cache = open(dir.path()).unwrap();
        let sample = cache.get_row(0).unwrap();
        for result in [cache.put("x", &sample), cache.flush(), cache.finalize()] {
            assert!(matches!(result, Err(Error::Unsupported { backend: BACKEND_NAME, .. })));
        }
        assert!(!cache.is_empty());
    }

    #[test]
    fn not_a_cache_is_not_found() {
        let dir = tempfile::tempdir().unwrap();
        assert!(matches!(open(dir.path()).err(), Some(Error::NotFound { .. })));
        assert!(matches!(open(&dir.path().join("x")).err(), Some(Error::NotFound { .. })));
    }

    #[test]
    fn trailing_bytes_are_refused_unless_allowed() {
        let dir = tempfile::tempdir().unwrap();
        write_dnanet_cache(dir.path());
        let mut scaler = std::fs::read(dir.path().join("scaler.bin")).unwrap();
        scaler.extend_from_slice(&[1, 2, 3]);
        std::fs::write(dir.path().join("scaler.bin"), scaler).unwrap();
        let err = open(dir.path()).err().unwrap().to_string();
        assert!(err.contains("scaler.bin") && err.contains("3 trailing bytes"), "{err}");
        let allowed = MemmapOptions { allow_trailing_bytes: true };
        let cache = MemmapBackend::open_read_only(dir.path(), allowed).unwrap();
        assert_eq!(cache.get_row(-1).unwrap().tensor("scaler").unwrap().shape(), &[4]);
        let report = cache.validate(ValidationLevel::Structure).unwrap();
        assert_eq!(report.problems.len(), 1, "{:?}", report.problems);
        assert!(report.problems[0].detail.contains("trailing"));
    }

    #[test]
    fn validate_reports_missing_sidecar_keys() {
        let dir = tempfile::tempdir().unwrap();
        write_dnanet_cache(dir.path());
        let cache = open(dir.path()).unwrap();
        assert!(cache.validate(ValidationLevel::Full).unwrap().is_clean());
        std::fs::write(dir.path().join("alleles.json"), r#"{"0": "[]"}"#).unwrap();
        let cache = open(dir.path()).unwrap();
        let report = cache.validate(ValidationLevel::Full).unwrap();
        assert!(report.problems.iter().any(|p| p.key.as_deref() == Some("/r/c.hid")
            && p.path.as_deref() == Some(dir.path().join("alleles.json").as_path())));
        let err = cache.get("/r/c.hid").unwrap_err().to_string();
        assert!(err.contains("alleles.json") && err.contains("\"1\"") && err.contains("/r/c.hid"));
    }

    #[test]
    fn finalize_interrupted_before_complete_is_read_as_unfinished() {
        let dir = tempfile::tempdir().unwrap();
        write_dnanet_cache(dir.path());
        std::fs::remove_file(dir.path().join("_COMPLETE")).unwrap();
        let cache = open(dir.path()).unwrap();
        assert!(!cache.is_finalized());
        assert_eq!(cache.len(), 3);
    }
}
