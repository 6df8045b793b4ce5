//! What `inspect` says about one cache, as data: printed as text ([`CacheReport::write_text`])
//! or serialized as JSON (`--json`), so both always say the same.
//!
//! The report is built from what the cache's format describes ([`Description`]: its state,
//! details, file roles, checksums, dedup, memory, structure check) and what this command sees
//! itself: the path, the format's id and description, the keys and schema a reader gives, and
//! the files with their sizes.

use std::io::Write;
use std::path::Path;

use serde::Serialize;
use stowage_core::describe::{Coverage, Dedup, Description, Detail, FileRoles, Integrity, Memory};
use stowage_core::{FieldKind, FieldSpec, Format, Schema, ShapeRule, ValidationReport, shape};

use crate::error::{CliError, escape_control};
use crate::out::{count, display_key, human, size, size_on_disk, table};

/// Bytes a sample holds in memory (what `convert` reports it copied).
pub use stowage_core::describe::sample_bytes;

/// One cache's report.
#[derive(Debug, Clone, Serialize)]
pub struct CacheReport {
    /// The cache's path as given.
    pub path: String,
    /// The format's id ([`Format::id`]: `stowage-npy`, `torchcachex`).
    pub kind: &'static str,
    /// The format's description ([`Format::description`]: `stowage NUMPY_10 cache`).
    pub description: &'static str,
    /// The format's name (`stowage-npy`, `aenet.torch_training.cache.v2`).
    pub format: Option<String>,
    /// The format's version, as the cache records it.
    pub version: Option<String>,
    /// Whether the cache is finalized (complete); `None` when the format cannot tell or the
    /// cache could not be opened.
    pub finalized: Option<bool>,
    /// The state in words: what finalized or unfinished means here.
    pub state: String,
    /// Distinct keys; `None` when the cache holds no keys or could not be read.
    pub keys: Option<u64>,
    /// Physical rows when they differ from keys (overwritten keys keep their old rows).
    pub rows: Option<u64>,
    /// Format-specific facts, each a labelled line.
    pub details: Vec<Detail>,
    /// The fields.
    pub schema: Vec<FieldReport>,
    /// Every file, with its size (none for a cache at a URL: only local files are listed).
    pub files: Vec<FileReport>,
    /// Files of the cache not listed one by one (beyond the first [`MAX_LISTED_FILES`]).
    pub unlisted_files: u64,
    /// Totals over every file.
    pub total: Total,
    /// Which files and rows carry checksums.
    pub checksums: Coverage,
    /// Sharing of stored values between keys, where the format deduplicates.
    pub dedup: Vec<Dedup>,
    /// Memory needed to hold every sample in RAM.
    pub memory: Option<Memory>,
    /// The structure check: `clean`, or the number of problems.
    pub integrity: String,
    /// The structure check's problems, one line each.
    pub problems: Vec<String>,
    /// Data another writer added that stowage's checksums do not cover, one line each (the file,
    /// its writer, the samples, what to do next).
    pub unchecked: Vec<String>,
    /// What could not be read, one line each.
    pub errors: Vec<String>,
    /// Symbolic links inside the cache directory that lead outside it, `link -> target` each
    /// ([`super::links::reaching_outside`]).
    pub links_outside: Vec<String>,
}

/// Data files listed one by one; the rest are summed in [`CacheReport::unlisted_files`].
pub const MAX_LISTED_FILES: usize = 50;

/// Problems of the structure check printed one by one in text; `--json` lists them all.
const MAX_LISTED_PROBLEMS: usize = 20;

/// One field of the schema.
#[derive(Debug, Clone, Serialize)]
pub struct FieldReport {
    /// The field name.
    pub name: String,
    /// `tensor`, `bytes` or `json`.
    pub kind: &'static str,
    /// The dtype of a tensor field.
    pub dtype: Option<String>,
    /// The shape rule of a tensor field, in words (`fixed (2, 3)`, `ragged (*, 6)`).
    pub shape: Option<String>,
    /// Whether the field may be null.
    pub nullable: bool,
    /// Anything else: how it is stored, the shapes seen.
    pub note: Option<String>,
}

/// One file of the cache.
#[derive(Debug, Clone, Serialize)]
pub struct FileReport {
    /// The path, relative to the cache.
    pub name: String,
    /// Its size in bytes.
    pub bytes: u64,
    /// Bytes allocated on disk, where the platform says (sparse files use fewer).
    pub allocated_bytes: Option<u64>,
    /// What the file is.
    pub role: String,
}

/// Totals over the files.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Total {
    /// Regular files.
    pub files: u64,
    /// Their bytes.
    pub bytes: u64,
    /// Their bytes on disk, where the platform says.
    pub allocated_bytes: Option<u64>,
}

impl CacheReport {
    /// The report of the cache at `path`, of `format`, from what its format describes, the
    /// distinct `keys` and the `schema` a reader gave (`None` for a cache that did not open: then
    /// the schema its description records, if any), and the files under `path` (or `path`
    /// itself, for a cache that is one file). The description's failure is returned beside the
    /// report, to fail the command after printing it.
    ///
    /// Errors: the files cannot be listed.
    pub fn described(
        path: &Path,
        format: &'static Format,
        description: Description,
        keys: Option<u64>,
        schema: Option<&Schema>,
    ) -> Result<(CacheReport, Option<stowage_core::Error>), CliError> {
        let mut report = CacheReport::new(path, format);
        report.format = description.format_name;
        report.version = description.version;
        report.finalized = description.finalized;
        report.state = description.state;
        report.keys = keys;
        report.rows = description.rows;
        report.details = description.details;
        if let Some(schema) = schema.or(description.schema.as_ref()) {
            report.schema = schema.fields.iter().map(field_report).collect();
        }
        for field in &mut report.schema {
            let note = description.field_notes.iter().rev().find(|n| n.field == field.name);
            if let Some(note) = note {
                field.note = Some(note.note.clone());
            }
        }
        report.checksums = description.checksums;
        report.dedup = description.dedup;
        report.memory = description.memory;
        match &description.integrity {
            Integrity::Checked { report: structure, verify_adds } => {
                report.set_integrity(structure, verify_adds);
            }
            Integrity::NotChecked(why) => report.integrity = why.clone(),
        }
        report.errors = description.errors;
        // A cache at a URL has no local files to list; its backend's objects are its own.
        if !crate::locate::is_url(path) {
            report.set_files(path, &description.files)?;
        }
        Ok((report, description.failure))
    }

    /// An empty report of a cache of `format` at `path`, to be filled in.
    fn new(path: &Path, format: &'static Format) -> CacheReport {
        CacheReport {
            path: path.display().to_string(),
            kind: format.id,
            description: format.description,
            format: None,
            version: None,
            finalized: None,
            state: "unknown".into(),
            keys: None,
            rows: None,
            details: Vec::new(),
            schema: Vec::new(),
            files: Vec::new(),
            unlisted_files: 0,
            total: Total::default(),
            checksums: Coverage::default(),
            dedup: Vec::new(),
            memory: None,
            integrity: "not checked".into(),
            problems: Vec::new(),
            unchecked: Vec::new(),
            errors: Vec::new(),
            links_outside: Vec::new(),
        }
    }

    /// Sets the structure check's result; `verify_adds` says what `stowage verify` checks on top.
    fn set_integrity(&mut self, report: &ValidationReport, verify_adds: &str) {
        self.integrity = integrity(report, Path::new(&self.path), verify_adds);
        self.problems = report.problems.iter().map(|p| escape_control(&p.to_string())).collect();
        self.unchecked = report.unchecked.iter().map(|u| escape_control(&u.to_string())).collect();
    }

    /// Lists the cache's files with the role `roles` gives each. Under a directory: every regular
    /// file (links not followed), the first [`MAX_LISTED_FILES`] one by one, in name order, the
    /// rest summed, and the files of each of `roles`' groups summed in one line instead (hangar's
    /// empty markers). A cache that is one file: that file (`the cache`, unless its role says
    /// more).
    fn set_files(&mut self, root: &Path, roles: &FileRoles) -> Result<(), CliError> {
        if !root.is_dir() {
            let meta = std::fs::metadata(root).map_err(|e| crate::error::io_error(root, &e))?;
            let name = root.file_name().unwrap_or_default().to_string_lossy().into_owned();
            let role = match roles.role(&name) {
                role if role.is_empty() => "the cache".to_owned(),
                role => role,
            };
            let allocated = allocated_bytes(&meta);
            self.files =
                vec![FileReport { name, bytes: meta.len(), allocated_bytes: allocated, role }];
            self.total = Total { files: 1, bytes: meta.len(), allocated_bytes: allocated };
            return Ok(());
        }
        let files = files_under(root)?;
        self.total = Total {
            files: files.len() as u64,
            bytes: files.iter().map(|f| f.1.len()).sum(),
            allocated_bytes: files
                .iter()
                .map(|f| allocated_bytes(&f.1))
                .try_fold(0u64, |sum, a| a.map(|a| sum + a)),
        };
        let (grouped, single): (Vec<_>, Vec<_>) =
            files.into_iter().partition(|(name, _)| roles.group_of(name).is_some());
        self.unlisted_files = single.len().saturating_sub(MAX_LISTED_FILES) as u64;
        self.files = single
            .into_iter()
            .take(MAX_LISTED_FILES)
            .map(|(name, meta)| FileReport {
                role: roles.role(&name),
                bytes: meta.len(),
                allocated_bytes: allocated_bytes(&meta),
                name,
            })
            .collect();
        for (g, group) in roles.groups.iter().enumerate() {
            let members: Vec<&(String, std::fs::Metadata)> =
                grouped.iter().filter(|(name, _)| roles.group_of(name) == Some(g)).collect();
            self.files.push(FileReport {
                name: group.prefixes.join(", "),
                bytes: members.iter().map(|f| f.1.len()).sum(),
                allocated_bytes: None,
                role: count(members.len() as u64, &group.what),
            });
        }
        Ok(())
    }

    /// The report as text: a title line, labelled lines, the schema and file tables.
    pub fn write_text(&self, out: &mut dyn Write) -> Result<(), CliError> {
        say!(out, "{}: {}", escape_control(&self.path), self.description);
        let line = |label: &str, value: &str| format!("{:<12} {value}", format!("{label}:"));
        let mut lines = Vec::new();
        if let Some(format) = &self.format {
            let version = self.version.as_ref().map_or(String::new(), |v| format!(" version {v}"));
            lines.push(line("format", &format!("{format}{version}")));
        }
        lines.push(line("state", &self.state));
        if let Some(keys) = self.keys {
            lines.push(line("keys", &keys.to_string()));
        }
        if let Some(rows) = self.rows {
            lines.push(line("rows", &rows.to_string()));
        }
        for detail in &self.details {
            lines.push(line(&detail.label, &detail.value));
        }
        for text in lines {
            say!(out, "{}", escape_control(&text));
        }
        if !self.schema.is_empty() {
            say!(out, "schema:      {}", count(self.schema.len() as u64, "field"));
            for row in table(&self.schema.iter().map(field_row).collect::<Vec<_>>()) {
                say!(out, "{}", escape_control(&row));
            }
        }
        if crate::locate::is_url(Path::new(&self.path)) {
            say!(out, "files:       not listed (a cache at a URL: its objects are its backend's)");
            return self.write_tail(out, "", 12, true);
        }
        say!(out, "files:");
        let mut rows: Vec<Vec<String>> = self
            .files
            .iter()
            .map(|f| vec![f.name.clone(), size_on_disk(f.bytes, f.allocated_bytes), f.role.clone()])
            .collect();
        if self.unlisted_files > 0 {
            let listed: u64 = self.files.iter().map(|f| f.bytes).sum();
            rows.push(vec![
                format!("... {} more", count(self.unlisted_files, "file")),
                size(self.total.bytes - listed),
                String::new(),
            ]);
        }
        rows.push(vec![
            "total".to_owned(),
            size_on_disk(self.total.bytes, self.total.allocated_bytes),
            count(self.total.files, "file"),
        ]);
        for row in table(&rows) {
            say!(out, "{}", escape_control(&row));
        }
        self.write_tail(out, "", 12, true)
    }

    /// The lines after the tables: checksums, dedup, memory (with `memory_and_errors`; DNANet's
    /// report has its own), what could not be read (likewise), integrity and its problems, each
    /// label padded to `width` and indented by `indent`.
    pub fn write_tail(
        &self,
        out: &mut dyn Write,
        indent: &str,
        width: usize,
        memory_and_errors: bool,
    ) -> Result<(), CliError> {
        let line = |label: &str, value: &str| {
            escape_control(&format!("{indent}{:<width$} {value}", format!("{label}:")))
        };
        say!(out, "{}", line("checksums", &coverage_text(&self.checksums)));
        for dedup in &self.dedup {
            let text = format!(
                "{}: {} -> {} stored ({:.2}x); {}",
                dedup.what, dedup.references, dedup.stored, dedup.ratio, dedup.note
            );
            say!(out, "{}", line("dedup", &text));
        }
        if let Some(memory) = self.memory.as_ref().filter(|_| memory_and_errors) {
            let text = format!("{} ({})", human(memory.bytes), memory.basis);
            say!(out, "{}", line("in memory", &text));
        }
        for error in self.errors.iter().filter(|_| memory_and_errors) {
            say!(out, "{}", line("cannot read", error));
        }
        for link in &self.links_outside {
            let text = format!("{link} (outside the cache directory: read, never written)");
            say!(out, "{}", line("link", &text));
        }
        say!(out, "{}", line("integrity", &self.integrity));
        for problem in self.problems.iter().take(MAX_LISTED_PROBLEMS) {
            say!(out, "{indent}  {problem}");
        }
        if self.problems.len() > MAX_LISTED_PROBLEMS {
            say!(out, "{indent}  ... {} more", self.problems.len() - MAX_LISTED_PROBLEMS);
        }
        for unchecked in self.unchecked.iter().take(MAX_LISTED_PROBLEMS) {
            say!(out, "{indent}  unchecked: {unchecked}");
        }
        if self.unchecked.len() > MAX_LISTED_PROBLEMS {
            say!(
                out,
                "{indent}  ... {} more unchecked",
                self.unchecked.len() - MAX_LISTED_PROBLEMS
            );
        }
        Ok(())
    }
}

/// What `coverage` says in words: `none`, or the scheme, then which samples and files it covers.
fn coverage_text(coverage: &Coverage) -> String {
    let mut text = coverage.scheme.clone();
    if let (Some(covered), Some(all)) = (coverage.covered_samples, coverage.samples) {
        text.push_str(&format!("; {covered} of {} carry one", count(all, "sample")));
    }
    if !coverage.uncovered_files.is_empty() {
        let shown: Vec<&str> =
            coverage.uncovered_files.iter().take(5).map(String::as_str).collect();
        let more = coverage.uncovered_files.len().saturating_sub(5);
        let more = if more > 0 { format!(" and {more} more") } else { String::new() };
        text.push_str(&format!("; not covered: {}{more}", shown.join(", ")));
    }
    text
}

/// The integrity line for a structure check of the cache at `path`: `clean (...)`,
/// `N problems (...)`, or, when another writer's data is not covered by stowage's checksums,
/// `no problem, N files unchecked (...)`. `verify_adds` says what `stowage verify` checks on top.
pub fn integrity(report: &ValidationReport, path: &Path, verify_adds: &str) -> String {
    if report.is_undamaged() && !report.unchecked.is_empty() {
        format!(
            "no problem in the structure, {} holding data another writer added that stowage's \
             checksums do not cover (listed below)",
            count(report.unchecked.len() as u64, "file")
        )
    } else if report.is_clean() {
        // A structure check that reads no sample: "of 0 samples" would mislead.
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

fn field_report(field: &FieldSpec) -> FieldReport {
    let (kind, dtype, shape, note) = match &field.kind {
        FieldKind::Tensor { dtype, shape } => {
            ("tensor", Some(dtype.to_string()), Some(shape_rule(shape)), None)
        }
        FieldKind::Bytes => ("bytes", None, None, None),
        FieldKind::Json { deduplicate } => {
            ("json", None, None, deduplicate.then(|| "deduplicated".to_owned()))
        }
    };
    FieldReport { name: field.name.clone(), kind, dtype, shape, nullable: field.nullable, note }
}

/// `name  float32  fixed (10, 10)  note  nullable`.
fn field_row(field: &FieldReport) -> Vec<String> {
    let mut row = vec![display_key(&field.name)];
    match (&field.dtype, &field.shape) {
        (Some(dtype), Some(shape)) => {
            row.push(dtype.clone());
            row.push(shape.clone());
        }
        _ => row.push(field.kind.to_owned()),
    }
    row.extend(field.note.clone());
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

/// Every regular file under `root` (links not followed): its path relative to `root` and its
/// metadata, by path.
pub fn files_under(root: &Path) -> Result<Vec<(String, std::fs::Metadata)>, CliError> {
    let mut files = Vec::new();
    let mut pending = vec![root.to_path_buf()];
    while let Some(dir) = pending.pop() {
        let entries = std::fs::read_dir(&dir).map_err(|e| crate::error::io_error(&dir, &e))?;
        for entry in entries {
            let entry = entry.map_err(|e| crate::error::io_error(&dir, &e))?;
            let meta = std::fs::symlink_metadata(entry.path())
                .map_err(|e| crate::error::io_error(&entry.path(), &e))?;
            if meta.is_dir() {
                pending.push(entry.path());
            } else if meta.is_file() {
                files.push((stowage_core::describe::relative_name(&entry.path(), root), meta));
            }
        }
    }
    files.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(files)
}

/// Bytes a file occupies on disk, where the platform reports it.
pub fn allocated_bytes(meta: &std::fs::Metadata) -> Option<u64> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        Some(meta.blocks().saturating_mul(512))
    }
    #[cfg(not(unix))]
    {
        let _ = meta;
        None
    }
}
