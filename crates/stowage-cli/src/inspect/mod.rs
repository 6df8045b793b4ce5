//! `stowage inspect PATH [--json]`: what kind of cache PATH is, its format and state, keys,
//! schema, files and sizes, checksum coverage, dedup, projected memory and a structure check; for
//! a directory of caches, the same for every cache below it.
//!
//! Each format fills in a [`report::CacheReport`]; text and `--json` are two renderings of it. A
//! memmap row cache's text starts with the report of DNANet's own inspection tool, byte for byte
//! ([`stowage_memmap::inspect::InspectReport`]), and stowage's lines follow.

mod arrow;
mod hdf5;
mod links;
mod memmap;
mod numpy10;
pub mod report;

use std::io::Write;
use std::path::Path;

use crate::detect::{CacheKind, detect};
use crate::error::{CliError, Status, escape_control};
use crate::walk::find_caches;
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
pub fn run(path: &Path, json: bool, out: &mut dyn Write) -> Result<Status, CliError> {
    let kind = detect(path)?;
    if kind != CacheKind::CacheRoot {
        let inspected = inspect(path, kind)?;
        if json {
            write_json(out, &inspected.report)?;
        } else {
            write_text(out, &inspected)?;
        }
        return match inspected.failure {
            None => Ok(Status::Success),
            Some(e) => Err(e),
        };
    }
    walk(path, json, out)
}

/// Every cache below `root`, in walk order; then fails naming the first that could not be read.
fn walk(root: &Path, json: bool, out: &mut dyn Write) -> Result<Status, CliError> {
    let found = find_caches(root)?;
    let mut failures = Vec::new();
    let mut reports = Vec::new();
    for (path, kind) in &found {
        let inspected = kind.clone().and_then(|kind| inspect(path, kind));
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

/// The report of the cache at `path`, of kind `kind` (not a directory of caches).
fn inspect(path: &Path, kind: CacheKind) -> Result<Inspected, CliError> {
    let mut inspected = inspect_format(path, kind)?;
    if path.is_dir() {
        inspected.report.links_outside =
            links::reaching_outside(path).iter().map(|l| escape_control(l)).collect();
    }
    Ok(inspected)
}

/// The format's own report of the cache at `path`.
fn inspect_format(path: &Path, kind: CacheKind) -> Result<Inspected, CliError> {
    let plain = |report: CacheReport| Inspected { report, original_text: None, failure: None };
    Ok(match kind {
        CacheKind::StowageNpy => {
            let (report, failure) = numpy10::stowage_npy(path)?;
            Inspected { report, original_text: None, failure }
        }
        CacheKind::StowageMemmap | CacheKind::DnanetMemmap => {
            let (text, report, failure) = memmap::memmap(path, kind);
            Inspected { report, original_text: Some(text), failure }
        }
        CacheKind::HangarNumpy10 => plain(numpy10::hangar(path)?),
        CacheKind::StowageArrow => plain(arrow::stowage_arrow(path)?),
        CacheKind::Torchcachex => plain(arrow::torchcachex(path)?),
        CacheKind::StowageHdf5 => plain(hdf5::stowage_hdf5(path)?),
        CacheKind::AenetHdf5 => plain(hdf5::aenet(path)?),
        CacheKind::CacheRoot => {
            return Err(CliError::new(format!(
                "{} is a directory of caches: inspect each",
                path.display()
            )));
        }
    })
}
