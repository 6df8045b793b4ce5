//! `stowage inspect PATH [--json]`: what kind of cache PATH is, its format and state, keys,
//! schema, files and sizes, checksum coverage, dedup, projected memory and a structure check; for
//! a directory of caches, the same for every cache below it.
//!
//! Every format is inspected the same way: the cache's reader says what its format knows
//! ([`stowage_core::Reader::describe`]), or, when the cache does not open (or has no reader: a
//! bare hangar data directory), its factory says what it can
//! ([`stowage_core::BackendFactory::describe_unopened`]). This command adds what it sees itself
//! (keys, schema, files and sizes, links leading outside) into a [`report::CacheReport`]; text
//! and `--json` are two renderings of it. When the format has the original tool's own report (a
//! memmap row cache: DNANet's inspection text), the text starts with it, byte for byte, and
//! stowage's lines follow.

mod links;
pub mod report;

use std::io::Write;
use std::path::Path;

use stowage_core::Registry;

use crate::error::{CliError, Status, escape_control};
use crate::locate::{Located, Recognized, locate};
use crate::walk::Found;
use report::CacheReport;

/// One inspected cache: its report, DNANet's text for a memmap cache, and what could not be read
/// (the command fails after printing).
struct Inspected {
    report: CacheReport,
    original_text: Option<String>,
    failure: Option<CliError>,
}

/// Prints the report for `path` (as one JSON document with `json`; an array for a directory of
/// caches). Exit status 0 whenever every cache could be inspected, even when a structure check
/// found problems (judging is `verify`'s job); an error when it is not a cache, or after the
/// reports when one could not be read completely.
pub fn run(
    registry: &Registry,
    path: &Path,
    json: bool,
    out: &mut dyn Write,
) -> Result<Status, CliError> {
    let found = match locate(registry, path)? {
        Located::Cache(recognized) => recognized,
        Located::Directory(found) => return walk(path, found, json, out),
    };
    let inspected = inspect(path, found)?;
    if json {
        write_json(out, &inspected.report)?;
    } else {
        write_text(out, &inspected)?;
    }
    match inspected.failure {
        None => Ok(Status::Success),
        Some(e) => Err(e),
    }
}

/// Every cache `found` below `root`, in walk order; then fails naming the first that could not
/// be read.
fn walk(
    root: &Path,
    found: Vec<Found<'_>>,
    json: bool,
    out: &mut dyn Write,
) -> Result<Status, CliError> {
    let mut failures = Vec::new();
    let mut reports = Vec::new();
    for (path, recognized) in &found {
        let inspected = recognized.clone().and_then(|recognized| inspect(path, recognized));
        match inspected {
            Ok(inspected) => {
                if !json {
                    write_text(out, &inspected)?;
                    if inspected.original_text.is_none() {
                        say!(out, "");
                    }
                }
                failures.extend(inspected.failure);
                reports.push(serde_json::to_value(&inspected.report).map_err(json_error)?);
            }
            Err(e) => {
                if !json {
                    say!(
                        out,
                        "{}: cannot be read: {}\n",
                        escape_control(&path.display().to_string()),
                        e.one_line()
                    );
                }
                reports.push(serde_json::json!({"path": path, "error": e.one_line()}));
                failures.push(e);
            }
        }
    }
    if json {
        let text = serde_json::to_string_pretty(&reports).map_err(json_error)?;
        say!(out, "{text}");
    }
    match failures.first() {
        None => Ok(Status::Success),
        Some(first) => Err(CliError::new(format!(
            "{} of {} caches in {} could not be read completely (see the reports above); the \
             first: {first}",
            failures.len(),
            found.len(),
            root.display()
        ))),
    }
}

fn json_error(e: serde_json::Error) -> CliError {
    CliError::new(format!("writing JSON: {e}"))
}

fn write_json(out: &mut dyn Write, report: &CacheReport) -> Result<(), CliError> {
    let text = serde_json::to_string_pretty(report).map_err(json_error)?;
    say!(out, "{text}");
    Ok(())
}

fn write_text(out: &mut dyn Write, inspected: &Inspected) -> Result<(), CliError> {
    match &inspected.original_text {
        Some(text) => {
            write!(out, "{text}").map_err(CliError::stdout)?;
            inspected.report.write_tail(out, "  ", 17, false)
        }
        None => inspected.report.write_text(out),
    }
}

/// The report of the cache at `path`, which `recognized` says what it is.
fn inspect(path: &Path, recognized: Recognized<'_>) -> Result<Inspected, CliError> {
    let mut inspected = inspect_format(path, recognized)?;
    // A URL names no local directory to look for links in.
    if !crate::locate::is_url(path) && path.is_dir() {
        inspected.report.links_outside =
            links::reaching_outside(path).iter().map(|l| escape_control(l)).collect();
    }
    Ok(inspected)
}

/// The report of the cache at `path` from what its format describes: through its reader, or
/// through its factory when it does not open.
fn inspect_format(path: &Path, recognized: Recognized<'_>) -> Result<Inspected, CliError> {
    let factory = recognized.factory;
    let (description, keys, schema) = match factory.open_reader(path) {
        Ok(reader) => {
            let description = reader.describe()?;
            (description, Some(reader.len() as u64), Some(reader.schema().clone()))
        }
        Err(e) => (factory.describe_unopened(path, recognized.format, e)?, None, None),
    };
    let original_text = description.original_report.clone();
    let (report, failure) =
        CacheReport::described(path, recognized.format, description, keys, schema.as_ref())?;
    Ok(Inspected { report, original_text, failure: failure.map(CliError::from) })
}
