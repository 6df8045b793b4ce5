//! `stowage inspect PATH`: what kind of cache PATH is, its schema, its files and their sizes, and
//! whether its structure is intact.
//!
//! A memmap row cache gets the report of DNANet's own inspection tool, computed by
//! [`stowage_memmap::inspect::InspectReport`], followed by the same integrity line as the other
//! kinds; a directory of such caches (DNANet's cache root) gets one report per key directory.

use std::collections::HashMap;
use std::io::Write;
use std::path::Path;

use stowage_core::{
    Backend, FieldKind, FieldSpec, ShapeRule, ValidationLevel, ValidationReport, shape,
};
use stowage_memmap::inspect::InspectReport;
use stowage_memmap::{MemmapBackend, MemmapOptions};
use stowage_npy::layout::{CacheMetadata, Layout};
use stowage_npy::npy_header::storage_descr;
use stowage_npy::{NpyBackend, NpyOptions};

use crate::detect::{CacheKind, detect, io_error, subdirectories};
use crate::error::{CliError, Status, escape_control};
use crate::hangar::{HangarDir, allocated_bytes};
use crate::out::{count, display_key, size, size_on_disk, table};

/// Data files listed one by one; the rest are summed in one line.
const MAX_LISTED_FILES: usize = 50;

/// Prints the report for `path`. Exit status 0 whenever the cache could be inspected, even when
/// its integrity check found problems (that is `verify`'s job); an error when it is not a cache or
/// cannot be opened.
pub fn run(path: &Path, out: &mut dyn Write) -> Result<Status, CliError> {
    match detect(path)? {
        CacheKind::StowageNpy => stowage_npy(path, out),
        CacheKind::StowageMemmap | CacheKind::DnanetMemmap => match memmap(path, out)? {
            None => Ok(Status::Success),
            Some(error) => Err(error),
        },
        CacheKind::HangarNumpy10 => hangar(path, out),
        CacheKind::MemmapCacheRoot => memmap_root(path, out),
    }
}

/// The integrity line's text for a structure check of the cache at `path`: `clean (...)` or
/// `N problems (...)`. `verify_adds` says what `stowage verify` checks on top.
fn integrity(report: &ValidationReport, path: &Path, verify_adds: &str) -> String {
    if report.is_clean() {
        // A memmap cache's structure check reads no sample: "of 0 samples" would mislead.
        let samples = match report.samples_checked {
            0 => String::new(),
            n => format!("{} in ", count(n, "sample")),
        };
        format!(
            "clean (structure of {samples}{}; {verify_adds})",
            count(report.files_checked, "file")
        )
    } else {
        format!(
            "{} (structure check; `stowage verify {}` lists them)",
            count(report.problems.len() as u64, "problem"),
            path.display()
        )
    }
}

/// Prints DNANet's report of the memmap row cache at `path`, then stowage's integrity line (a
/// read-only open and `validate(ValidationLevel::Structure)`). Returns the first thing that could
/// not be read (a file of the report, or the cache as a whole), which makes the command fail after
/// the report is printed; the outer error is a failure to write the output.
fn memmap(path: &Path, out: &mut dyn Write) -> Result<Option<CliError>, CliError> {
    let mut report = InspectReport::read(path);
    write!(out, "{report}").map_err(CliError::stdout)?;
    let mut failure = (!report.errors.is_empty()).then(|| report.errors.remove(0).into());
    match MemmapBackend::open_read_only(path, MemmapOptions::default()) {
        Ok(cache) => {
            let verify_adds = "`stowage verify` also reads every row and checks its checksums, \
                               where stowage wrote them";
            let line = integrity(&cache.validate(ValidationLevel::Structure)?, path, verify_adds);
            say!(out, "  integrity:        {line}");
        }
        Err(e) => {
            say!(out, "  integrity:        cannot be opened: {}", escape_control(&e.to_string()));
            failure = failure.or(Some(e.into()));
        }
    }
    Ok(failure)
}

/// Reports every key directory of DNANet's cache root `path`, sorted by name, as DNANet's tool
/// does. A subdirectory that is not a memmap row cache gets a one-line note. Fails after the last
/// report when any cache could not be read completely, naming the first problem.
fn memmap_root(path: &Path, out: &mut dyn Write) -> Result<Status, CliError> {
    let dirs = subdirectories(path)?;
    let mut failures = Vec::new();
    let mut caches = 0;
    for dir in &dirs {
        match detect(dir) {
            Ok(kind) if kind.is_memmap() => {
                caches += 1;
                failures.extend(memmap(dir, out)?);
            }
            other => {
                let why = match other {
                    Ok(kind) => format!("a {} (inspect it on its own)", kind.description()),
                    Err(e) => e.one_line(),
                };
                say!(out, "\n{}", InspectReport::header(dir));
                say!(out, "  not a memmap row cache: {why}");
            }
        }
    }
    match failures.first() {
        None => Ok(Status::Success),
        Some(first) => Err(CliError::new(format!(
            "{} of {} memmap row caches in {} could not be read completely (see the reports \
             above); the first: {first}",
            failures.len(),
            caches,
            path.display()
        ))),
    }
}

fn stowage_npy(path: &Path, out: &mut dyn Write) -> Result<Status, CliError> {
    let layout = Layout::new(path);
    let meta = CacheMetadata::read(&layout.metadata())?;
    // Metadata that parses is worth showing even when the rest of the cache cannot be opened.
    let opened = NpyBackend::open_read_only(path, NpyOptions::default());
    say!(out, "{}: {}", path.display(), CacheKind::StowageNpy.description());
    say!(out, "format:      {} version {}", meta.format, meta.format_version);
    match &opened {
        Ok(cache) => {
            let state = if cache.is_finalized() {
                "finalized (complete)"
            } else {
                "not finalized (being written, or interrupted: a writer can resume it)"
            };
            say!(out, "state:       {state}");
            say!(out, "keys:        {}", cache.len());
        }
        Err(_) => {
            say!(out, "state:       unknown (cannot be opened)");
            say!(out, "keys:        unknown (cannot be opened)");
        }
    }
    say!(out, "collection:  {} slots per data file", meta.collection_size);
    say!(out, "schema:      {}", count(meta.schema.fields.len() as u64, "field"));
    let rows: Vec<Vec<String>> = meta.schema.fields.iter().map(field_row).collect();
    for line in table(&rows) {
        say!(out, "{line}");
    }

    let mut field_of_uid: HashMap<String, String> = HashMap::new();
    if let Ok(cache) = &opened {
        for (_, records) in cache.records() {
            for (record, field) in records.iter().zip(&meta.schema.fields) {
                field_of_uid.entry(record.uid.clone()).or_insert_with(|| field.name.clone());
            }
        }
    }
    say!(out, "files:");
    let mut rows = Vec::new();
    let data_files = list_files(&layout.data_dir())?;
    let shown = data_files.len().min(MAX_LISTED_FILES);
    for (name, meta) in &data_files[..shown] {
        let uid = name.strip_suffix(".npy").unwrap_or(name);
        let used_by = match field_of_uid.get(uid) {
            Some(field) => format!("field {field:?}"),
            None if opened.is_ok() => "no record uses it".to_owned(),
            None => String::new(),
        };
        let marker = if layout.store_dir().join(name).exists() {
            "committed"
        } else if layout.stage_dir().join(name).exists() {
            "staged"
        } else {
            "unmarked"
        };
        rows.push(vec![
            format!("data/10/{name}"),
            size_on_disk(meta.len(), allocated_bytes(meta)),
            format!("{used_by}, {marker}").trim_start_matches(", ").to_owned(),
        ]);
    }
    if data_files.len() > shown {
        let rest = &data_files[shown..];
        let bytes = rest.iter().map(|(_, m)| m.len()).sum();
        rows.push(vec![
            format!("... {} more", count(rest.len() as u64, "data file")),
            size(bytes),
            String::new(),
        ]);
    }
    if data_files.is_empty() {
        rows.push(vec!["data/10/".to_owned(), "no data files yet".to_owned()]);
    }
    for (file, what) in [
        (layout.records_log(), "record log"),
        (layout.metadata(), "metadata"),
        (layout.complete_marker(), "finalize marker"),
    ] {
        if let Ok(meta) = std::fs::metadata(&file) {
            let name = file.file_name().unwrap_or_default().to_string_lossy().into_owned();
            rows.push(vec![name, size(meta.len()), what.to_owned()]);
        }
    }
    let markers = list_files(&layout.store_dir())?.len() + list_files(&layout.stage_dir())?.len();
    rows.push(vec![
        "store_data/, stage_data/".to_owned(),
        count(markers as u64, "empty marker file"),
    ]);
    let (files, bytes, allocated) = totals(path)?;
    rows.push(vec!["total".to_owned(), size_on_disk(bytes, allocated), count(files, "file")]);
    for line in table(&rows) {
        say!(out, "{line}");
    }

    match opened {
        Ok(cache) => {
            let report = cache.validate(ValidationLevel::Structure)?;
            say!(
                out,
                "integrity:   {}",
                integrity(&report, path, "`stowage verify` also checks every checksum")
            );
            Ok(Status::Success)
        }
        Err(e) => {
            say!(out, "integrity:   cannot be opened (the error follows)");
            Err(e.into())
        }
    }
}

/// `name  float32  fixed (10, 10)  stored as <f4`.
fn field_row(field: &FieldSpec) -> Vec<String> {
    let mut row = vec![display_key(&field.name)];
    match &field.kind {
        FieldKind::Tensor { dtype, shape: rule } => {
            row.push(dtype.to_string());
            row.push(shape_rule(rule));
            row.push(format!("stored as {}", storage_descr(*dtype)));
        }
        FieldKind::Bytes => row.push("bytes".to_owned()),
        FieldKind::Json { deduplicate: true } => row.push("json (deduplicated)".to_owned()),
        FieldKind::Json { deduplicate: false } => row.push("json".to_owned()),
    }
    if field.nullable {
        row.push("nullable".to_owned());
    }
    row
}

/// `fixed (10, 10)`, `max (20, 2, 3)`, `ragged (*, 2)`, `any shape`.
pub fn shape_rule(rule: &ShapeRule) -> String {
    match rule {
        ShapeRule::Fixed(dims) => format!("fixed {}", shape::display(dims)),
        ShapeRule::Max(dims) => format!("max {}", shape::display(dims)),
        ShapeRule::RaggedLeading(dims) => {
            let mut all = vec!["*".to_owned()];
            all.extend(dims.iter().map(usize::to_string));
            if all.len() == 1 {
                "ragged (*,)".to_owned()
            } else {
                format!("ragged ({})", all.join(", "))
            }
        }
        ShapeRule::Any => "any shape".to_owned(),
    }
}

/// The regular files directly in `dir` (none when it does not exist), by name.
fn list_files(dir: &Path) -> Result<Vec<(String, std::fs::Metadata)>, CliError> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(io_error(dir, &e)),
    };
    let mut files = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| io_error(dir, &e))?;
        let meta = entry.metadata().map_err(|e| io_error(&entry.path(), &e))?;
        if meta.is_file() {
            files.push((entry.file_name().to_string_lossy().into_owned(), meta));
        }
    }
    files.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(files)
}

/// Number of regular files under `root` (symlinks not followed), their bytes, and their bytes on
/// disk where the platform reports it.
fn totals(root: &Path) -> Result<(u64, u64, Option<u64>), CliError> {
    let (mut files, mut bytes, mut allocated) = (0u64, 0u64, Some(0u64));
    let mut pending = vec![root.to_path_buf()];
    while let Some(dir) = pending.pop() {
        for entry in std::fs::read_dir(&dir).map_err(|e| io_error(&dir, &e))? {
            let entry = entry.map_err(|e| io_error(&dir, &e))?;
            let meta = entry.metadata().map_err(|e| io_error(&entry.path(), &e))?;
            if meta.is_dir() {
                pending.push(entry.path());
            } else if meta.is_file() {
                files += 1;
                bytes += meta.len();
                allocated = allocated.zip(allocated_bytes(&meta)).map(|(a, b)| a + b);
            }
        }
    }
    Ok((files, bytes, allocated))
}

fn hangar(path: &Path, out: &mut dyn Write) -> Result<Status, CliError> {
    let dir = HangarDir::scan(path)?;
    say!(out, "{}: {}", path.display(), CacheKind::HangarNumpy10.description());
    say!(
        out,
        "records:     none here (hangar keeps them in its LMDB database); read one sample with \
         `stowage get {} --record RECORD --out FILE.npy`",
        path.display()
    );
    let markers = match (dir.committed_markers, dir.staged_markers) {
        (None, None) => {
            "none (no store_data/10 or stage_data/10: every file is unmarked)".to_owned()
        }
        (store, stage) => {
            let part = |name: &str, n: Option<usize>| match n {
                Some(n) => format!("{name}: {}", count(n as u64, "file")),
                None => format!("{name} absent"),
            };
            format!("{}, {}", part("store_data/10", store), part("stage_data/10", stage))
        }
    };
    say!(out, "markers:     {markers}");
    say!(out, "files:       {} in data/10", count(dir.files.len() as u64, "collection file"));
    let mut rows = Vec::new();
    let mut problems = dir.problems.len();
    let mut details = Vec::new();
    for file in &dir.files {
        let check = file.check();
        let (descr, layout) = match &check.header {
            Some(h) if !h.shape.is_empty() => (
                h.descr.clone(),
                format!(
                    "{}: {} of {}",
                    shape::display(&h.shape),
                    count(h.shape[0] as u64, "slot"),
                    shape::display(&h.shape[1..])
                ),
            ),
            Some(h) => (h.descr.clone(), shape::display(&h.shape)),
            None => ("?".to_owned(), "header unreadable".to_owned()),
        };
        rows.push(vec![
            file.name.clone(),
            descr,
            layout,
            file.marker.name().to_owned(),
            size_on_disk(file.size, file.allocated),
        ]);
        if let Some(problem) = check.problem {
            problems += 1;
            details.push(format!("{}: {problem}", file.name));
        }
    }
    let total: u64 = dir.files.iter().map(|f| f.size).sum();
    rows.push(vec!["total".to_owned(), String::new(), String::new(), String::new(), size(total)]);
    for line in table(&rows) {
        say!(out, "{line}");
    }
    for (path, detail) in &dir.problems {
        details.push(format!("{}: {detail}", path.display()));
    }
    if problems == 0 {
        say!(out, "integrity:   clean (headers and sizes; no records here, so no checksums)");
    } else {
        say!(out, "integrity:   {}:", count(problems as u64, "problem"));
        for detail in details {
            say!(out, "  {detail}");
        }
    }
    Ok(Status::Success)
}
