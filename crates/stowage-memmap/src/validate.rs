//! `validate` for memmap row caches.

use std::path::{Path, PathBuf};

use stowage_core::{Error, ValidationLevel, ValidationReport, Value};

use crate::MemmapBackend;
use crate::backend::{Recorded, trailing_error};
use crate::coverage::{self, Verdict};
use crate::field_file::SizeCheck;
use crate::index::{JsonRef, RowEntry};
use crate::key_index::KeyIndexState;
use crate::layout::CACHE_VERSION;

/// Rows without their checksum listed one by one (by key); the rest are summed up in one problem
/// (a checksum file lost from a large cache would otherwise list every row).
const MISSING_LISTED: usize = 100;

/// Checks the cache behind `backend` without changing any file.
///
/// Structure: every `.bin` file exists with exactly `n * row_bytes` bytes (a finalized cache) or
/// at least the committed rows' bytes (an unfinished one, whose tail is a torn append); every
/// sidecar of a finalized cache loads and holds every key the index references;
/// `fingerprint.json` parses with `cache_version` 5. Index rows (`row` = position, distinct paths,
/// `n` rows) are checked when the index is loaded (by this call, for a finalized cache opened
/// read-only that has not loaded it yet); an index that fails to load is listed as a problem of
/// `index.parquet`, and then no row is checked.
///
/// In a cache with checksums, `stowage_checksums.bin` and every row are judged by who committed
/// the row ([`crate::coverage`]): a row another writer (DNANet) committed without a checksum is
/// listed in [`ValidationReport::unchecked`] (one entry naming its rows and how to adopt them),
/// never as a problem; a row stowage committed whose checksum row is gone is a problem, and so is
/// a checksum file of a finalized cache that does not fit its rows (longer than them, a partial
/// row, or shorter than the rows stowage's finalize recorded).
///
/// Full: also every row is read (bool bytes checked), its key and values checked against
/// `stowage_checksums.bin` when a checksum vouches for it, and every JSON text parsed.
pub fn validate(backend: &MemmapBackend, level: ValidationLevel) -> ValidationReport {
    let mut report = ValidationReport::default();
    let finalized_files = matches!(backend.recorded(), Recorded::ByFinalize);
    // A writer's files were cut back to the committed rows when it opened; its maps are unused.
    if !backend.is_writing() {
        for file in backend.files() {
            report.files_checked += 1;
            match file.check_size() {
                Ok(SizeCheck::Exact) => {}
                Ok(SizeCheck::Trailing(extra)) if finalized_files => {
                    problem(&mut report, None, trailing_error(file, extra));
                }
                Ok(SizeCheck::Trailing(_)) => {}
                Err(e) => problem(&mut report, None, e),
            }
        }
    }
    if finalized_files {
        check_fingerprint(&mut report, &backend.layout().fingerprint());
    }
    if !finalized_files && !backend.index_loaded() {
        check_streamed_rows(backend, level, &mut report);
        return report;
    }
    let rows = match backend.try_index() {
        Ok(index) => index.rows(),
        Err(e) => {
            report.files_checked += 1;
            problem(&mut report, None, e);
            &[]
        }
    };
    for (j, sidecar) in backend.sidecars() {
        let referenced = rows.iter().any(|r| matches!(r.json[j], JsonRef::Key(_)));
        if !(finalized_files || referenced) {
            continue;
        }
        report.files_checked += 1;
        let entries = match sidecar.entries() {
            Ok(entries) => entries,
            Err(e) => {
                problem(&mut report, None, e);
                continue;
            }
        };
        for row in rows {
            if let JsonRef::Key(key) = &row.json[j]
                && !entries.contains_key(key)
            {
                let detail = format!("has no key \"{key}\" referenced by the index");
                report.problem(Some(sidecar.path()), Some(&row.path), detail);
            }
        }
    }
    check_key_index(backend, Some(rows), &mut report);
    // Rows whose missing checksum is already reported are not read again.
    let mut skip = Vec::new();
    if backend.row_format().checksums && backend.try_index().is_ok() {
        report.files_checked += 1;
        for error in backend.checksum_file_problems() {
            problem(&mut report, None, error);
        }
        let mut unchecked = Vec::new();
        let (mut missing, mut missing_rows) = (Vec::new(), 0);
        for (i, row) in rows.iter().enumerate() {
            match backend.verdict(i, &row.path) {
                Ok(Verdict::Verify(_)) => {}
                Ok(Verdict::Unchecked) => coverage::push_row(&mut unchecked, i),
                Ok(Verdict::Missing) => {
                    if missing_rows < MISSING_LISTED {
                        let error = backend.missing_checksum(i, &row.path);
                        problem(&mut report, Some(&row.path), error);
                    }
                    missing_rows += 1;
                    coverage::push_row(&mut missing, i);
                    coverage::push_row(&mut skip, i);
                }
                Err(e) => {
                    problem(&mut report, Some(&row.path), e);
                    coverage::push_row(&mut skip, i);
                }
            }
        }
        report_unchecked_rows(&mut report, backend, missing_rows, &missing, &unchecked);
    } else if !rows.is_empty() {
        // A cache DNANet wrote alone has no checksums: every row is unchecked, never clean.
        report.unchecked.push(backend.unchecked_report(std::slice::from_ref(&(0..rows.len()))));
    }
    if level == ValidationLevel::Full {
        for (i, row) in rows.iter().enumerate() {
            if coverage::contains(&skip, i) {
                continue;
            }
            report.samples_checked += 1;
            match backend.read_row(i, true) {
                Ok(sample) => check_json(&mut report, &row.path, &sample),
                Err(e) => problem(&mut report, Some(&row.path), e),
            }
        }
    }
    report
}

/// An unfinished cache's rows, streamed once from its manifest ([`MemmapBackend::each_row`]:
/// never all in memory, whatever the row count): per row its checksum verdict, as for a loaded
/// index; a lookup of another row holding its key (a key stored twice is a problem naming both
/// rows, as loading the rows would have said; the key index's own damage is checked above, in
/// `check_key_index`); and at `Full` the row read and checked. What is kept: ranges of rows,
/// and the problems.
fn check_streamed_rows(
    backend: &MemmapBackend,
    level: ValidationLevel,
    report: &mut ValidationReport,
) {
    check_key_index(backend, None, report);
    let checksums = backend.row_format().checksums;
    let manifest = backend.layout().manifest();
    let mut unchecked = Vec::new();
    let (mut missing, mut missing_rows) = (Vec::new(), 0);
    let mut reported_pairs: std::collections::HashSet<(usize, usize)> = Default::default();
    let streamed = backend.each_row(&mut |i, row| {
        let key = &*row.path;
        match backend.other_row_with_key(key, i) {
            Ok(None) => {}
            Ok(Some(found)) => {
                let pair = (found.min(i), found.max(i));
                if reported_pairs.len() < MISSING_LISTED && reported_pairs.insert(pair) {
                    let detail =
                        format!("path {key:?} is stored in rows {} and {}", pair.0, pair.1);
                    report.problem(Some(&manifest), Some(key), detail);
                }
            }
            Err(e) => problem(report, Some(key), e),
        }
        let mut skip = false;
        if checksums {
            match backend.verdict(i, key) {
                Ok(Verdict::Verify(_)) => {}
                Ok(Verdict::Unchecked) => coverage::push_row(&mut unchecked, i),
                Ok(Verdict::Missing) => {
                    if missing_rows < MISSING_LISTED {
                        problem(report, Some(key), backend.missing_checksum(i, key));
                    }
                    missing_rows += 1;
                    coverage::push_row(&mut missing, i);
                    skip = true;
                }
                Err(e) => {
                    problem(report, Some(key), e);
                    skip = true;
                }
            }
        }
        if level == ValidationLevel::Full && !skip {
            report.samples_checked += 1;
            match backend.read_row_of(i, Some(key), true) {
                Ok(sample) => check_json(report, key, &sample),
                Err(e) => problem(report, Some(key), e),
            }
        }
        Ok(())
    });
    if let Err(e) = streamed {
        report.files_checked += 1;
        problem(report, None, e);
        return;
    }
    if !checksums {
        // No checksums at all (DNANet wrote it alone): every row is unchecked, never clean.
        let rows = stowage_core::Reader::len(backend);
        if rows > 0 {
            report.unchecked.push(backend.unchecked_report(std::slice::from_ref(&(0..rows))));
        }
        return;
    }
    report.files_checked += 1;
    for error in backend.checksum_file_problems() {
        problem(report, None, error);
    }
    report_unchecked_rows(report, backend, missing_rows, &missing, &unchecked);
}

/// After the rows: the committed rows without a checksum row past the first
/// [`MISSING_LISTED`] (listed by key already), as one problem naming their row runs, and the
/// rows left unchecked.
fn report_unchecked_rows(
    report: &mut ValidationReport,
    backend: &MemmapBackend,
    missing_rows: usize,
    missing: &[std::ops::Range<usize>],
    unchecked: &[std::ops::Range<usize>],
) {
    if missing_rows > MISSING_LISTED {
        let detail = format!(
            "{} more rows stowage committed have no checksum row (rows {}; the first \
             {MISSING_LISTED} are listed by key)",
            missing_rows - MISSING_LISTED,
            coverage::describe_runs(missing)
        );
        report.problem(Some(&backend.layout().checksums()), None, detail);
    }
    if !unchecked.is_empty() {
        report.unchecked.push(backend.unchecked_report(unchecked));
    }
}

/// Stowage's key index (`stowage_index/`) of a finalized cache: when present but not used, why
/// (a problem: reads by key then load `index.parquet`, correct but slow); when used, checked
/// against `rows` (`index.parquet`'s entries) fully ([`crate::key_index::KeyIndex::check`]).
/// Derived data: not counted in `files_checked`, which counts the cache's own files.
fn check_key_index(
    backend: &MemmapBackend,
    rows: Option<&[RowEntry]>,
    report: &mut ValidationReport,
) {
    if let Some(why) = backend.tail_unusable()
        && !backend.is_writing()
    {
        let detail = format!(
            "the key index of the unfinished cache is not used (its manifest is replayed whole \
             at open, correct but slower; the next writer rebuilds it): {why}"
        );
        report.problem(Some(&crate::key_index::dir(backend.layout())), None, detail);
    }
    if let Some(covered) = backend.tail_covered() {
        for detail in covered.check(backend.row_format()) {
            let detail = format!(
                "the key index of the unfinished cache is damaged (a key it hides reads as \
                 absent; removing stowage_index/ is safe): {detail}"
            );
            report.problem(Some(covered.dir()), None, detail);
        }
    }
    let Some(rows) = rows.filter(|rows| rows.len() == stowage_core::Reader::len(backend)) else {
        return; // index.parquet did not load: that is the problem listed, this follows from it.
    };
    match backend.key_index_state() {
        KeyIndexState::Absent => {}
        KeyIndexState::Unusable(reason) => {
            let detail = format!(
                "the key index is not used (get, contains and keys read index.parquet instead, \
                 correct but slower): {reason}"
            );
            report.problem(Some(&crate::key_index::dir(backend.layout())), None, detail);
        }
        KeyIndexState::Ready(index) => {
            for detail in index.check(rows) {
                report.problem(Some(index.path()), None, detail);
            }
        }
    }
}

fn check_json(report: &mut ValidationReport, key: &str, sample: &stowage_core::Sample) {
    for (name, value) in sample.fields() {
        if let Value::Json(text) = value
            && let Err(e) = serde_json::from_str::<serde::de::IgnoredAny>(text)
        {
            report.problem(
                None,
                Some(key),
                format!("field {name:?}: JSON text does not parse: {e}"),
            );
        }
    }
}

fn check_fingerprint(report: &mut ValidationReport, path: &Path) {
    report.files_checked += 1;
    let text = match std::fs::read(path) {
        Ok(text) => text,
        Err(e) => {
            report.problem(Some(path), None, format!("cannot read: {e}"));
            return;
        }
    };
    match serde_json::from_slice::<serde_json::Value>(&text) {
        Ok(value) => {
            let version = value.get("cache_version").and_then(serde_json::Value::as_u64);
            if version != Some(CACHE_VERSION) {
                let detail = format!("cache_version is {version:?}, expected {CACHE_VERSION}");
                report.problem(Some(path), None, detail);
            }
        }
        Err(e) => report.problem(Some(path), None, format!("does not parse as JSON: {e}")),
    }
}

/// Records `error`, moving the file path and key it names into the problem's (`key`, when
/// given, is the row's key).
fn problem(report: &mut ValidationReport, key: Option<&str>, error: Error) {
    let (path, named, detail): (Option<PathBuf>, Option<String>, String) = match error {
        Error::Corrupted { path, key, detail } => (Some(path), key, detail),
        other => (None, None, other.to_string()),
    };
    report.problem(path.as_deref(), key.or(named.as_deref()), detail);
}
