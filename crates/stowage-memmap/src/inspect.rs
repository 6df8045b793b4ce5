//! The report of DNANet's cache inspection tool (`python -m dnanet.data.cache.inspect <dir>`) for
//! one cache directory, computed without Python: [`InspectReport::read`], printed by its
//! [`Display`](std::fmt::Display) impl.
//!
//! The first block is the original's, line for line and number for number:
//!
//! ```text
//!
//! === aed9b48500e9acfd ===
//!   complete marker:  True
//!   rows (n):         6
//!   on-disk:
//!     data.bin                  0.00 MB
//!     ...
//!     TOTAL                     0.01 MB
//!   index columns:    ['row', 'path', 'has_annotation', 'panel_key', 'allele_key', 'meta_json']
//!   index in-RAM (string columns, approx):
//!     path                      0.00 MB
//!     meta_json                 0.00 MB
//!     STRING TOTAL              0.00 MB
//!   panels.json:      2 unique (avg=572 B, max=573 B)
//!   alleles.json:     3 unique (avg=281 B, max=443 B)
//!   memmap realize:     0.00 GB if load_in_memory=True (416 B/sample)
//! ```
//!
//! How each number is computed (as the original does; MB = 1e6 bytes, GB = 1e9 bytes):
//!
//! - `on-disk`: the size of each file the original knows (every tensor field's `.bin`,
//!   `index.parquet`, every deduplicated sidecar, `shapes.json`, `fingerprint.json`), 0 for a
//!   missing one; `TOTAL` is their sum.
//! - `index in-RAM`: per string column of `index.parquet`, the sum over its non-null values of
//!   the text's length in characters (Python's `len(str)`, so `é` counts 1), printed only when
//!   not 0; `STRING TOTAL` is their sum. Other column types are not counted.
//! - sidecars: the number of entries, the integer mean (floor of sum / count) and the max of the
//!   texts' lengths in characters; a sidecar with no entry is not printed.
//! - `memmap realize`: `bytes_per_sample` = the sum over the tensor fields of `shapes.json` of
//!   `prod(shape) * itemsize`; the projection is `bytes_per_sample * rows`, with the rows of the
//!   index (which equal `n` in a sound cache).
//!
//! Where the original crashes or stops, this report goes on: `index.parquet` without
//! `shapes.json` (the original's crash) prints the index part, `memmap realize: unknown`, and an
//! error naming `shapes.json`; a half-built cache (`manifest.jsonl`, no index) prints its
//! committed rows and its realization. What stowage adds comes after the original's block, each
//! line only when it applies: `also on disk` (files the original does not list:
//! `manifest.jsonl`, and `stowage.json` and `stowage_checksums.bin` in a cache stowage wrote),
//! `written by`, `unfinished` (the committed rows and the torn tail a resume drops), `stowage
//! realize` ([`MemmapBackend::projected_realization_bytes`], what the RAM guard checks) and one
//! `cannot read` line per file that could not be read ([`InspectReport::errors`]).

use std::fmt;
use std::fs::File;
use std::path::{Path, PathBuf};

use arrow_array::Array;
use arrow_array::cast::AsArray;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use stowage_core::{Error, IoResultExt, Reader, Result};

use crate::layout::{Layout, Shapes};
use crate::manifest::TornLine;
use crate::row_format::{JsonStorage, RowFormat, StowageMeta};
use crate::sidecar::Sidecar;
use crate::{MemmapBackend, MemmapOptions, preset};

/// What DNANet's inspection tool reports about one cache directory, plus stowage's additions.
///
/// ```
/// use stowage_core::{Backend, Sample, Tensor, Value};
/// use stowage_memmap::test_support::InspectReport;
/// use stowage_memmap::{MemmapBackend, MemmapOptions, dnanet};
///
/// let dir = tempfile::tempdir()?;
/// let mut cache = MemmapBackend::create(dir.path(), &dnanet(2, 3), MemmapOptions::default())?;
/// let row = Sample::new()
///     .with("data", Tensor::from_slice(&[2, 3], &[1i16; 6])?)
///     .with("scaler", Tensor::from_slice(&[3], &[1f32; 3])?)
///     .with("panel", Value::Json("[1]".into()))
///     .with("meta_json", Value::Json("{}".into()));
/// cache.put("/runs/a.hid", &row)?;
/// cache.finalize()?;
///
/// let report = InspectReport::read(dir.path());
/// assert!(report.finalized && report.errors.is_empty());
/// assert_eq!((report.rows, report.bytes_per_sample), (Some(1), Some(12 + 6 + 12)));
/// let text = report.to_string();
/// assert!(text.contains("\n  panels.json:      1 unique (avg=3 B, max=3 B)\n"));
/// assert!(text.contains("\n  memmap realize:     0.00 GB if load_in_memory=True (30 B/sample)\n"));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct InspectReport {
    /// The directory's name, printed as `=== <name> ===`.
    pub name: String,
    /// Whether the cache is finalized: `_COMPLETE` exists.
    pub finalized: bool,
    /// How far the cache got.
    pub state: CacheState,
    /// Whether stowage wrote the cache (it has `stowage.json`).
    pub written_by_stowage: bool,
    /// `n` of `shapes.json` (finalized caches), or the rows the manifest commits (unfinished ones);
    /// `None` when neither could be read.
    pub rows: Option<u64>,
    /// The files the original lists, in its order, with their sizes (0 when missing).
    pub files: Vec<FileSize>,
    /// Files of the cache the original does not list (`manifest.jsonl`, `stowage.json`,
    /// `stowage_checksums.bin`); only those present.
    pub other_files: Vec<FileSize>,
    /// What `index.parquet` holds; `None` when it is missing or could not be read.
    pub index: Option<IndexSummary>,
    /// Every deduplicated JSON sidecar that exists and could be read, in schema order.
    pub sidecars: Vec<SidecarSummary>,
    /// Bytes of one row of every tensor field; `None` when the row shapes are unknown.
    pub bytes_per_sample: Option<u64>,
    /// [`MemmapBackend::projected_realization_bytes`]: tensors plus index strings and sidecar
    /// texts, what the RAM guard checks; `None` when the cache cannot be opened.
    pub projected_ram_bytes: Option<u64>,
    /// The files that could not be read, each error naming its file. The report shows everything
    /// else.
    pub errors: Vec<Error>,
}

/// How far a cache got.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CacheState {
    /// Finalized: `_COMPLETE` exists.
    Finalized,
    /// No `_COMPLETE`, `manifest.jsonl` present: being written, or interrupted (a writer resumes
    /// it).
    Unfinished {
        /// The rows the manifest commits; `None` when it could not be read.
        committed_rows: Option<u64>,
        /// The torn last line of the manifest, dropped on resume.
        torn_manifest_line: Option<TornLine>,
        /// Per field file holding bytes past the committed rows (a torn append, cut off on
        /// resume): its name and the number of those bytes.
        torn_bytes: Vec<(String, u64)>,
    },
    /// No `_COMPLETE` and no manifest, but `shapes.json` and `index.parquet`: finalize stopped
    /// just before its last step (a writer adds `_COMPLETE`).
    FinalizeInterrupted,
    /// No `_COMPLETE`, no manifest and no finalized files: nothing committed yet (a cache stowage
    /// created), or a damaged directory.
    NotStarted,
}

/// A file and its size.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileSize {
    /// The file name inside the cache directory.
    pub name: String,
    /// Its size in bytes; 0 when missing.
    pub bytes: u64,
    /// Whether it exists.
    pub present: bool,
}

/// The columns and string bytes of `index.parquet`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IndexSummary {
    /// Column names, in file order.
    pub columns: Vec<String>,
    /// Number of rows.
    pub rows: u64,
    /// Per string column with a non-zero total, in file order: its name and the summed length
    /// of its values in characters.
    pub string_columns: Vec<(String, u64)>,
}

impl IndexSummary {
    /// The sum over [`IndexSummary::string_columns`].
    pub fn string_total(&self) -> u64 {
        self.string_columns.iter().map(|(_, chars)| chars).sum()
    }
}

/// The entries of one deduplicated JSON sidecar.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SidecarSummary {
    /// The file name (`panels.json`).
    pub file: String,
    /// Number of entries (distinct texts).
    pub unique: u64,
    /// Floor of the mean text length in characters (0 without entries).
    pub average: u64,
    /// The longest text's length in characters (0 without entries).
    pub max: u64,
}

impl InspectReport {
    /// Inspects the cache in `dir`, read-only. Never fails: what cannot be read is left out of
    /// the report and listed in [`InspectReport::errors`].
    pub fn read(dir: &Path) -> InspectReport {
        let layout = Layout::new(dir);
        let mut errors = Vec::new();
        let finalized = layout.complete_marker().exists();
        let has_manifest = layout.manifest().exists();
        let meta = StowageMeta::read(&layout.stowage_meta()).unwrap_or_else(|e| {
            errors.push(e);
            None
        });
        let shapes = if layout.shapes().exists() {
            Shapes::read_allowing_no_field(&layout.shapes()).map_err(|e| errors.push(e)).ok()
        } else {
            if !has_manifest {
                errors.extend(missing_shapes_error(&layout));
            }
            None
        };
        // Trailing bytes are allowed here so that the report can be made; the caller's integrity
        // check (a default open and `validate`) judges them.
        let options = MemmapOptions { allow_trailing_bytes: true, ..MemmapOptions::default() };
        let (backend, open_error) = match MemmapBackend::open_read_only(dir, options) {
            Ok(backend) => (Some(backend), None),
            Err(e) => (None, Some(e)),
        };
        let unfinished = !finalized && has_manifest;

        let format: Option<RowFormat> = match (&backend, &meta, &shapes) {
            (Some(backend), _, _) => Some(backend.row_format().clone()),
            (None, Some(meta), _) => RowFormat::new(&meta.schema, true).ok(),
            (None, None, Some(shapes)) => RowFormat::with_layouts(
                preset::schema_for(&shapes.fields),
                shapes.fields.clone(),
                false,
            )
            .ok(),
            (None, None, None) => None,
        };

        let state = if finalized {
            CacheState::Finalized
        } else if unfinished {
            // The manifest is what tells the committed rows: its reader's error is the report's.
            errors.extend(open_error);
            unfinished_state(&layout, backend.as_ref())
        } else if shapes.is_some() && layout.index().exists() {
            CacheState::FinalizeInterrupted
        } else {
            CacheState::NotStarted
        };

        let rows = match &state {
            CacheState::Unfinished { committed_rows, .. } => *committed_rows,
            CacheState::NotStarted => backend.as_ref().map(|b| b.len() as u64),
            _ => shapes.as_ref().map(|s| s.rows as u64),
        };
        let bytes_per_sample: Option<u64> = match (&shapes, &backend) {
            (Some(shapes), _) => Some(shapes.fields.iter().map(|f| f.row_bytes as u64).sum()),
            // No shapes.json yet: the shapes the manifest records.
            (None, Some(backend)) if unfinished => {
                Some(backend.row_format().tensors.iter().map(|t| t.layout.row_bytes as u64).sum())
            }
            _ => None,
        };

        // Without any description of the fields, DNANet's own file names.
        let format = format.or_else(|| RowFormat::new(&crate::dnanet(1, 1), false).ok());
        let sidecar_names = format.as_ref().map(sidecar_files).unwrap_or_default();
        let mut known: Vec<String> = format
            .iter()
            .flat_map(|f| &f.tensors)
            .map(|t| format!("{}.bin", t.layout.name))
            .collect();
        known.push(file_name(&layout.index()));
        known.extend(sidecar_names.iter().cloned());
        known.push(file_name(&layout.shapes()));
        known.push(file_name(&layout.fingerprint()));
        let files = known.iter().map(|name| file_size(&layout, name)).collect();
        let other_files = [layout.manifest(), layout.stowage_meta(), layout.checksums()]
            .iter()
            .map(|path| file_size(&layout, &file_name(path)))
            .filter(|f| f.present)
            .collect();

        let index = if layout.index().exists() {
            summarize_index(&layout.index()).map_err(|e| errors.push(e)).ok()
        } else {
            None
        };
        let sidecars = sidecar_names
            .iter()
            .filter(|name| layout.file(name).exists())
            .filter_map(|name| summarize_sidecar(&layout, name).map_err(|e| errors.push(e)).ok())
            .collect();
        // Only when the index loads: its failure is already listed above.
        let projected_ram_bytes = backend
            .as_ref()
            .filter(|b| {
                // An unfinished cache's rows are streamed, never loaded, to project them.
                matches!(b.recorded(), crate::backend::Recorded::ByManifest { .. })
                    || b.try_index().is_ok()
            })
            .and_then(|b| b.projected_realization_bytes().ok());

        dedup_errors(&mut errors);
        InspectReport {
            name: dir_name(dir),
            finalized,
            state,
            written_by_stowage: layout.stowage_meta().exists(),
            rows,
            files,
            other_files,
            index,
            sidecars,
            bytes_per_sample,
            projected_ram_bytes,
            errors,
        }
    }

    /// The header line the original prints before each cache: `=== <dir name> ===` (the unit
    /// tests' expectation of what `Display` writes first).
    #[cfg(test)]
    pub fn header(dir: &Path) -> String {
        format!("=== {} ===", escape_control(&dir_name(dir)))
    }

    /// The rows the realization is projected for: the index's rows (as the original does), else
    /// [`InspectReport::rows`].
    pub fn realized_rows(&self) -> Option<u64> {
        self.index.as_ref().map(|i| i.rows).or(self.rows)
    }
}

/// The error for a cache that lost `shapes.json`: `_COMPLETE` or `index.parquet` says it was
/// finalized, but the row count and shapes are gone (DNANet's tool crashes on it). `None` when
/// neither is there.
fn missing_shapes_error(layout: &Layout) -> Option<Error> {
    let names: Vec<String> = [layout.complete_marker(), layout.index()]
        .iter()
        .filter(|p| p.exists())
        .map(|p| file_name(p))
        .collect();
    let verb = match names.len() {
        0 => return None,
        1 => "is",
        _ => "are",
    };
    Some(Error::corrupted(
        layout.shapes(),
        format!(
            "file is missing, but {} {verb} there: the row count and row shapes are not recorded",
            names.join(" and ")
        ),
    ))
}

/// The entry count and text lengths of the sidecar `name`.
fn summarize_sidecar(layout: &Layout, name: &str) -> Result<SidecarSummary> {
    let sidecar = Sidecar::new(layout.file(name));
    let lengths: Vec<u64> =
        sidecar.entries()?.values().map(|text| text.chars().count() as u64).collect();
    let unique = lengths.len() as u64;
    Ok(SidecarSummary {
        file: name.to_owned(),
        unique,
        average: lengths.iter().sum::<u64>() / unique.max(1),
        max: lengths.iter().copied().max().unwrap_or(0),
    })
}

/// The state of an unfinished cache from its opened reader (`None` when it could not be opened).
fn unfinished_state(layout: &Layout, backend: Option<&MemmapBackend>) -> CacheState {
    let Some(backend) = backend else {
        return CacheState::Unfinished {
            committed_rows: None,
            torn_manifest_line: None,
            torn_bytes: Vec::new(),
        };
    };
    let rows = backend.len() as u64;
    let format = backend.row_format();
    let mut row_files: Vec<(PathBuf, u64)> = format
        .tensors
        .iter()
        .map(|t| (layout.field_file(&t.layout.name), t.layout.row_bytes as u64))
        .collect();
    if format.checksums {
        row_files.push((layout.checksums(), format.checksum_layout().row_bytes as u64));
    }
    let torn_bytes = row_files
        .iter()
        .filter_map(|(path, row_bytes)| {
            let size = std::fs::metadata(path).ok()?.len();
            let extra = size.checked_sub(rows.saturating_mul(*row_bytes))?;
            (extra > 0).then(|| (file_name(path), extra))
        })
        .collect();
    CacheState::Unfinished {
        committed_rows: Some(rows),
        torn_manifest_line: backend.dropped_manifest_tail().cloned(),
        torn_bytes,
    }
}

/// The sidecar files of `format`'s deduplicated JSON fields, in schema order.
fn sidecar_files(format: &RowFormat) -> Vec<String> {
    format
        .json
        .iter()
        .filter_map(|field| match &field.storage {
            JsonStorage::Deduplicated { sidecar, .. } => Some(sidecar.clone()),
            JsonStorage::Plain { .. } => None,
        })
        .collect()
}

fn file_size(layout: &Layout, name: &str) -> FileSize {
    match std::fs::metadata(layout.file(name)) {
        Ok(meta) => FileSize { name: name.to_owned(), bytes: meta.len(), present: true },
        Err(_) => FileSize { name: name.to_owned(), bytes: 0, present: false },
    }
}

fn file_name(path: &Path) -> String {
    path.file_name().unwrap_or_default().to_string_lossy().into_owned()
}

/// The last component of `dir` (of its absolute form for `.` and the like).
fn dir_name(dir: &Path) -> String {
    let name = |p: &Path| p.file_name().map(|n| n.to_string_lossy().into_owned());
    name(dir)
        .or_else(|| std::fs::canonicalize(dir).ok().and_then(|p| name(&p)))
        .unwrap_or_else(|| dir.display().to_string())
}

/// Reads the column names and string lengths of `index.parquet`.
fn summarize_index(path: &Path) -> Result<IndexSummary> {
    // The parquet crate is not hardened against every malformed file (see index.rs): a panic in
    // it becomes an error naming the file.
    let read = std::panic::AssertUnwindSafe(|| summarize_index_unguarded(path));
    std::panic::catch_unwind(read)
        .unwrap_or_else(|_| Err(Error::corrupted(path, "the parquet reader failed on this file")))
}

fn summarize_index_unguarded(path: &Path) -> Result<IndexSummary> {
    let unreadable =
        |e: &dyn fmt::Display| Error::corrupted(path, format!("not a readable parquet index: {e}"));
    let file = File::open(path).at(path)?;
    let builder = ParquetRecordBatchReaderBuilder::try_new(file).map_err(|e| unreadable(&e))?;
    let columns: Vec<String> = builder.schema().fields().iter().map(|f| f.name().clone()).collect();
    let mut chars = vec![0u64; columns.len()];
    let mut rows = 0u64;
    for batch in builder.build().map_err(|e| unreadable(&e))? {
        let batch = batch.map_err(|e| unreadable(&e))?;
        rows += batch.num_rows() as u64;
        for (total, column) in chars.iter_mut().zip(batch.columns()) {
            *total += string_chars(column.as_ref());
        }
    }
    let string_columns =
        columns.iter().cloned().zip(chars).filter(|(_, chars)| *chars > 0).collect();
    Ok(IndexSummary { columns, rows, string_columns })
}

/// The summed character count of a string column's non-null values; 0 for other types.
fn string_chars(array: &dyn Array) -> u64 {
    let count = |s: &str| s.chars().count() as u64;
    if let Some(a) = array.as_string_opt::<i32>() {
        a.iter().flatten().map(count).sum()
    } else if let Some(a) = array.as_string_opt::<i64>() {
        a.iter().flatten().map(count).sum()
    } else if let Some(a) = array.as_string_view_opt() {
        a.iter().flatten().map(count).sum()
    } else {
        0
    }
}

/// Drops errors whose message repeats an earlier one (the reader reports a damaged
/// `stowage.json` that the report also read).
fn dedup_errors(errors: &mut Vec<Error>) {
    let mut seen = std::collections::HashSet::new();
    errors.retain(|e| seen.insert(e.to_string()));
}

/// `text` with control characters escaped, so that each report line stays one line.
fn escape_control(text: &str) -> String {
    text.chars()
        .map(|c| if c.is_control() { c.escape_debug().to_string() } else { c.to_string() })
        .collect()
}

/// A string as Python's `repr` prints it: single quotes unless the text holds a single quote and
/// no double quote; backslashes, the quote and control characters escaped.
fn python_repr(text: &str) -> String {
    let quote = if text.contains('\'') && !text.contains('"') { '"' } else { '\'' };
    let mut out = String::from(quote);
    for c in text.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c == quote => {
                out.push('\\');
                out.push(c);
            }
            c if (c as u32) < 0x20 || (0x7f..0xa0).contains(&(c as u32)) => {
                out.push_str(&format!("\\x{:02x}", c as u32));
            }
            c => out.push(c),
        }
    }
    out.push(quote);
    out
}

/// `{n / 1e6:>8.2f} MB`, the original's `_mb`.
fn megabytes(bytes: u64) -> String {
    format!("{:>8.2} MB", bytes as f64 / 1e6)
}

/// `{n / 1e9:>6.2f} GB`, the original's `_gb`.
fn gigabytes(bytes: u64) -> String {
    format!("{:>6.2} GB", bytes as f64 / 1e9)
}

/// `  <label padded to 18><value>`, the original's two-column line.
fn labelled(f: &mut fmt::Formatter<'_>, label: &str, value: impl fmt::Display) -> fmt::Result {
    writeln!(f, "  {:<17} {value}", format!("{label}:"))
}

/// `    <name padded to 20>  <size> MB`, the original's file line.
fn file_line(f: &mut fmt::Formatter<'_>, name: &str, bytes: u64) -> fmt::Result {
    writeln!(f, "    {:<20}  {}", escape_control(name), megabytes(bytes))
}

impl fmt::Display for InspectReport {
    /// The original's block (starting with an empty line, as the original prints it), then
    /// stowage's lines. Every line ends with a newline.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f)?;
        writeln!(f, "=== {} ===", escape_control(&self.name))?;
        labelled(f, "complete marker", if self.finalized { "True" } else { "False" })?;
        if let Some(rows) = self.rows {
            labelled(f, "rows (n)", rows)?;
        }
        writeln!(f, "  on-disk:")?;
        for file in &self.files {
            file_line(f, &file.name, file.bytes)?;
        }
        file_line(f, "TOTAL", self.files.iter().map(|file| file.bytes).sum())?;
        if let Some(index) = &self.index {
            let columns: Vec<String> = index.columns.iter().map(|c| python_repr(c)).collect();
            labelled(f, "index columns", escape_control(&format!("[{}]", columns.join(", "))))?;
            writeln!(f, "  index in-RAM (string columns, approx):")?;
            for (column, chars) in &index.string_columns {
                file_line(f, column, *chars)?;
            }
            file_line(f, "STRING TOTAL", index.string_total())?;
        }
        for sidecar in self.sidecars.iter().filter(|s| s.unique > 0) {
            let summary = format!(
                "{} unique (avg={} B, max={} B)",
                sidecar.unique, sidecar.average, sidecar.max
            );
            labelled(f, &sidecar.file, summary)?;
        }
        match (self.bytes_per_sample, self.realized_rows()) {
            (Some(per_sample), Some(rows)) => labelled(
                f,
                "memmap realize",
                format!(
                    "{} if load_in_memory=True ({per_sample} B/sample)",
                    gigabytes(per_sample.saturating_mul(rows))
                ),
            )?,
            (None, _) if self.index.is_some() => labelled(
                f,
                "memmap realize",
                "unknown: no readable shapes.json, so the row shapes are not recorded",
            )?,
            _ => {}
        }

        // stowage's additions.
        if !self.other_files.is_empty() {
            writeln!(f, "  also on disk:")?;
            for file in &self.other_files {
                file_line(f, &file.name, file.bytes)?;
            }
        }
        let writer = if self.written_by_stowage {
            "stowage (stowage.json)"
        } else {
            "DNANet (no stowage.json)"
        };
        labelled(f, "written by", writer)?;
        if let Some(state) = self.state_line() {
            labelled(f, "unfinished", escape_control(&state))?;
        }
        if let Some(bytes) = self.projected_ram_bytes {
            labelled(
                f,
                "stowage realize",
                format!(
                    "{} ({bytes} B) with the index strings and sidecar texts: what the RAM \
                     guard checks",
                    gigabytes(bytes).trim_start()
                ),
            )?;
        }
        for error in &self.errors {
            labelled(f, "cannot read", escape_control(&error.to_string()))?;
        }
        Ok(())
    }
}

impl InspectReport {
    /// The `unfinished:` line; `None` for a finalized cache.
    fn state_line(&self) -> Option<String> {
        Some(match &self.state {
            CacheState::Finalized => return None,
            CacheState::Unfinished { committed_rows: None, .. } => {
                "no _COMPLETE; manifest.jsonl cannot be read (see below)".to_owned()
            }
            CacheState::Unfinished {
                committed_rows: Some(rows),
                torn_manifest_line,
                torn_bytes,
            } => {
                let mut torn: Vec<String> = Vec::new();
                if let Some(line) = torn_manifest_line {
                    torn.push(format!(
                        "manifest.jsonl line {} ({} bytes, no newline)",
                        line.line, line.bytes
                    ));
                }
                for (file, bytes) in torn_bytes {
                    torn.push(format!("{bytes} bytes at the end of {file}"));
                }
                let tail = if torn.is_empty() {
                    "no torn tail".to_owned()
                } else {
                    format!("a resume drops the torn tail: {}", torn.join(", "))
                };
                format!(
                    "no _COMPLETE; manifest.jsonl commits {rows} row{}; a writer resumes after \
                     them; {tail}",
                    if *rows == 1 { "" } else { "s" }
                )
            }
            CacheState::FinalizeInterrupted => "no _COMPLETE and no manifest.jsonl, but \
                shapes.json and index.parquet: finalize stopped just before its last step; a \
                writer (open_append) adds _COMPLETE"
                .to_owned(),
            CacheState::NotStarted => {
                "no _COMPLETE, no manifest.jsonl, no index: nothing committed".to_owned()
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::unit_fixtures::write_dnanet_cache;
    use stowage_core::{Backend, Sample, Tensor, Value};

    #[test]
    fn reports_a_dnanet_cache_as_the_original_does() {
        let dir = tempfile::tempdir().unwrap();
        let cache = dir.path().join("0123456789abcdef");
        std::fs::create_dir(&cache).unwrap();
        write_dnanet_cache(&cache);
        let report = InspectReport::read(&cache);
        assert!(report.errors.is_empty(), "{:?}", report.errors);
        let size = |name: &str| std::fs::metadata(cache.join(name)).unwrap().len();
        let total: u64 = [
            "data.bin",
            "annotation.bin",
            "scaler.bin",
            "index.parquet",
            "panels.json",
            "alleles.json",
            "shapes.json",
            "fingerprint.json",
        ]
        .iter()
        .map(|f| size(f))
        .sum();
        assert_eq!(report.files.iter().map(|f| f.bytes).sum::<u64>(), total);
        // 3 rows of data (2, 4) <i2 = 16 B, annotation (2, 4) |i1 = 8 B, scaler (4,) <f4 = 16 B.
        assert_eq!((report.rows, report.bytes_per_sample), (Some(3), Some(40)));
        let index = report.index.as_ref().unwrap();
        // Paths "/r/a.hid" x3 = 24 characters; meta_json "{}" + {"id": "b"} + "{}" = 15.
        assert_eq!(index.string_columns, [("path".to_owned(), 24), ("meta_json".to_owned(), 15)]);
        let text = report.to_string();
        let expected = "\n=== 0123456789abcdef ===\n  complete marker:  True\n  rows (n):         3\n  \
             on-disk:\n    data.bin                  0.00 MB\n";
        assert!(text.starts_with(expected), "{text}");
        for line in [
            "  index columns:    ['row', 'path', 'has_annotation', 'panel_key', 'allele_key', 'meta_json']",
            "  index in-RAM (string columns, approx):",
            "    path                      0.00 MB",
            "    STRING TOTAL              0.00 MB",
            "  panels.json:      2 unique (avg=6 B, max=6 B)",
            "  alleles.json:     2 unique (avg=6 B, max=6 B)",
            "  memmap realize:     0.00 GB if load_in_memory=True (40 B/sample)",
            "  written by:       DNANet (no stowage.json)",
        ] {
            assert!(text.lines().any(|l| l == line), "no line {line:?} in\n{text}");
        }
        assert!(!text.contains("unfinished") && !text.contains("also on disk"), "{text}");
    }

    #[test]
    fn numbers_are_formatted_as_python_does() {
        assert_eq!(megabytes(15_970_000), "   15.97 MB");
        assert_eq!(megabytes(125_000), "    0.12 MB", "ties round to even, as Python's format");
        assert_eq!(gigabytes(30_000_000), "  0.03 GB");
        assert_eq!(python_repr("path"), "'path'");
        assert_eq!(python_repr("it's"), "\"it's\"");
        assert_eq!(python_repr("a'\"b\\\n"), "'a\\'\"b\\\\\\n'");
        assert_eq!(python_repr("é\u{1}"), "'é\\x01'");
    }

    #[test]
    fn lengths_count_characters_and_the_average_is_floored() {
        let dir = tempfile::tempdir().unwrap();
        write_dnanet_cache(dir.path());
        std::fs::write(dir.path().join("panels.json"), r#"{"0": "ééé", "1": "abcd", "2": "x"}"#)
            .unwrap();
        let report = InspectReport::read(dir.path());
        let panels = &report.sidecars[0];
        assert_eq!((panels.unique, panels.average, panels.max), (3, 2, 4), "(3 + 4 + 1) / 3");
        std::fs::write(dir.path().join("alleles.json"), "{}").unwrap();
        let report = InspectReport::read(dir.path());
        assert_eq!(report.sidecars[1].unique, 0);
        assert!(!report.to_string().contains("alleles.json:"), "an empty sidecar is not printed");
    }

    #[test]
    fn an_index_without_shapes_is_reported_not_a_crash() {
        let dir = tempfile::tempdir().unwrap();
        write_dnanet_cache(dir.path());
        std::fs::remove_file(dir.path().join("shapes.json")).unwrap();
        let report = InspectReport::read(dir.path());
        assert_eq!(report.rows, None);
        assert_eq!(report.index.as_ref().unwrap().rows, 3);
        let text = report.to_string();
        assert!(text.contains("  memmap realize:   unknown: no readable shapes.json"), "{text}");
        assert!(text.contains("    shapes.json               0.00 MB"), "{text}");
        assert_eq!(report.errors.len(), 1, "{:?}", report.errors);
        assert!(report.errors[0].to_string().contains("shapes.json: file is missing"));
    }

    #[test]
    fn a_garbage_index_and_sidecar_are_errors_naming_the_file() {
        let dir = tempfile::tempdir().unwrap();
        write_dnanet_cache(dir.path());
        std::fs::write(dir.path().join("index.parquet"), b"PAR1 garbage garbage PAR1").unwrap();
        std::fs::write(dir.path().join("panels.json"), b"{\"0\": ").unwrap();
        let report = InspectReport::read(dir.path());
        assert!(report.index.is_none());
        let errors: Vec<String> = report.errors.iter().map(ToString::to_string).collect();
        assert_eq!(errors.len(), 2, "{errors:?}");
        assert!(errors[0].contains("index.parquet") && errors[0].contains("parquet"), "{errors:?}");
        assert!(errors[1].contains("panels.json"), "{errors:?}");
        let text = report.to_string();
        assert_eq!(text.matches("  cannot read:      ").count(), 2, "{text}");
        assert!(text.contains("  rows (n):         3"), "what can be read is reported: {text}");
    }

    fn row(i: i16) -> Sample {
        Sample::new()
            .with("data", Tensor::from_slice(&[1, 2], &[i, i]).unwrap())
            .with("scaler", Tensor::from_slice(&[2], &[1f32, 2.]).unwrap())
            .with("meta_json", Value::Json("{}".into()))
    }

    #[test]
    fn an_unfinished_cache_reports_its_committed_rows_and_torn_tail() {
        let dir = tempfile::tempdir().unwrap();
        let mut cache =
            MemmapBackend::create(dir.path(), &crate::dnanet(1, 2), MemmapOptions::default())
                .unwrap();
        for i in 0..3 {
            cache.put(&format!("/k{i}"), &row(i)).unwrap();
        }
        cache.flush().unwrap();
        drop(cache);
        let data = dir.path().join("data.bin");
        let mut bytes = std::fs::read(&data).unwrap();
        bytes.extend_from_slice(&[9, 9, 9]);
        std::fs::write(&data, bytes).unwrap();
        let mut manifest = std::fs::read(dir.path().join("manifest.jsonl")).unwrap();
        manifest.extend_from_slice(b"{\"row\": 3, \"pa");
        std::fs::write(dir.path().join("manifest.jsonl"), manifest).unwrap();

        let report = InspectReport::read(dir.path());
        assert!(report.errors.is_empty(), "{:?}", report.errors);
        assert!(!report.finalized && report.written_by_stowage);
        assert_eq!(report.rows, Some(3));
        let CacheState::Unfinished { committed_rows, torn_manifest_line, torn_bytes } =
            &report.state
        else {
            panic!("{:?}", report.state)
        };
        assert_eq!(*committed_rows, Some(3));
        assert_eq!(torn_manifest_line.as_ref().map(|t| (t.line, t.bytes)), Some((4, 14)));
        assert_eq!(torn_bytes, &[("data.bin".to_owned(), 3)]);
        let text = report.to_string();
        for needle in [
            "  complete marker:  False\n  rows (n):         3\n",
            "  also on disk:\n    manifest.jsonl",
            "    stowage.json ",
            "    stowage_checksums.bin",
            "  written by:       stowage (stowage.json)",
            "  unfinished:       no _COMPLETE; manifest.jsonl commits 3 rows; a writer resumes \
             after them; a resume drops the torn tail: manifest.jsonl line 4 (14 bytes, no \
             newline), 3 bytes at the end of data.bin",
            // data 4 B + annotation 2 B + scaler 8 B.
            "  memmap realize:     0.00 GB if load_in_memory=True (14 B/sample)",
        ] {
            assert!(text.contains(needle), "no {needle:?} in\n{text}");
        }
        assert!(!text.contains("index columns"), "{text}");
    }

    #[test]
    fn a_garbage_manifest_is_an_error_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("manifest.jsonl"), b"\x00garbage\nmore\n").unwrap();
        let report = InspectReport::read(dir.path());
        assert_eq!(report.rows, None);
        assert_eq!(report.errors.len(), 1, "{:?}", report.errors);
        assert!(report.errors[0].to_string().contains("manifest.jsonl"), "{:?}", report.errors);
        assert!(report.to_string().contains("manifest.jsonl cannot be read"));
    }
}
