//! Reports of memmap row caches (stowage's and DNANet's): DNANet's own inspection report,
//! computed by [`InspectReport`], then stowage's lines.

use std::collections::HashSet;
use std::path::Path;

use stowage_core::{Format, Reader, ValidationLevel};
use stowage_memmap::index::JsonRef;
use stowage_memmap::inspect::{CacheState, InspectReport};
use stowage_memmap::row_format::JsonStorage;
use stowage_memmap::{MemmapBackend, MemmapOptions};

use super::report::{CacheReport, Dedup, Memory};
use crate::error::CliError;

/// The memmap report of the cache at `path`, of `format` (stowage's or DNANet's): DNANet's text
/// (to print first), the report, and the first thing that could not be read (a file of the
/// report, or the cache as a whole), which makes the command fail after the report is printed.
pub fn memmap(path: &Path, format: &'static Format) -> (String, CacheReport, Option<CliError>) {
    let mut original = InspectReport::read(path);
    let text = original.to_string();
    let mut report = CacheReport::new(path, format);
    report.format = Some(stowage_memmap::row_format::FORMAT_NAME.to_owned());
    report.version = Some("5 (DNANet's CACHE_VERSION)".into());
    report.finalized = Some(original.finalized);
    report.state = match &original.state {
        CacheState::Finalized => "finalized (_COMPLETE)".into(),
        CacheState::Unfinished { committed_rows, .. } => format!(
            "unfinished: manifest.jsonl commits {} rows; a writer resumes after them",
            committed_rows.map_or("an unknown number of".into(), |n| n.to_string())
        ),
        CacheState::FinalizeInterrupted => "finalize interrupted before _COMPLETE".into(),
        CacheState::NotStarted => "nothing committed yet".into(),
    };
    report.rows = original.rows;
    if let Some(index) = &original.index {
        report.detail("index columns", index.columns.join(", "));
    }
    report.detail(
        "written by",
        if original.written_by_stowage {
            "stowage (stowage.json)"
        } else {
            "DNANet (no stowage.json)"
        },
    );
    let _ = report.set_files(
        path,
        |name| {
            if name.ends_with(".bin") && name != "stowage_checksums.bin" {
                "tensor rows".into()
            } else {
                String::new()
            }
        },
        &[],
    );
    report.memory = original.projected_ram_bytes.map(|bytes| Memory {
        bytes,
        basis: "stowage's realization: tensors, index strings and sidecar texts".into(),
    });
    let mut failure: Option<CliError> =
        (!original.errors.is_empty()).then(|| original.errors.remove(0).into());
    report.errors = original.errors.iter().map(ToString::to_string).collect();
    match MemmapBackend::open_read_only(path, MemmapOptions::default()) {
        Ok(cache) => {
            report.keys = Some(cache.len() as u64);
            report.set_schema(cache.schema());
            coverage(&cache, &mut report);
            report.dedup = dedup(&cache);
            match cache.validate(ValidationLevel::Structure) {
                Ok(structure) => {
                    let verify_adds = "`stowage verify` also reads every row and checks its \
                                       checksums, where stowage wrote them";
                    report.set_integrity(&structure, verify_adds);
                }
                Err(e) => failure = failure.or(Some(e.into())),
            }
        }
        Err(e) => {
            report.integrity = format!("cannot be opened: {e}");
            failure = failure.or(Some(e.into()));
        }
    }
    (text, report, failure)
}

/// `stowage_checksums.bin` (caches stowage wrote) covers every row's key and fields; DNANet
/// writes none.
fn coverage(cache: &MemmapBackend, report: &mut CacheReport) {
    let format = cache.row_format();
    let data: Vec<String> =
        format.tensors.iter().map(|t| format!("{}.bin", t.layout.name)).collect();
    let rows = cache.len() as u64;
    report.checksums.samples = Some(rows);
    if format.checksums {
        report.checksums.scheme =
            "xxh3-64 per row over its key and every field, in stowage_checksums.bin".into();
        report.checksums.covered_files = data;
        report.checksums.covered_samples = Some(rows);
    } else {
        report.checksums.scheme = "none (DNANet writes no checksums)".into();
        report.checksums.uncovered_files = data;
        report.checksums.covered_samples = Some(0);
    }
}

/// Per deduplicated JSON field: the rows referencing its sidecar and the distinct texts stored.
fn dedup(cache: &MemmapBackend) -> Vec<Dedup> {
    let Ok(index) = cache.try_index() else { return Vec::new() };
    let format = cache.row_format();
    let mut out = Vec::new();
    for (j, column) in format.json.iter().enumerate() {
        let JsonStorage::Deduplicated { sidecar, .. } = &column.storage else { continue };
        let mut references = 0u64;
        let mut keys = HashSet::new();
        let mut inline = HashSet::new();
        for row in index.rows() {
            match &row.json[j] {
                JsonRef::Key(key) => {
                    references += 1;
                    keys.insert(*key);
                }
                JsonRef::Inline(text) => {
                    references += 1;
                    inline.insert(text.clone());
                }
                JsonRef::Null => {}
            }
        }
        let stored = (keys.len() + inline.len()) as u64;
        out.push(Dedup::new(
            format!("field {:?}", column.name),
            references,
            stored,
            format!("rows with a text -> distinct texts in {sidecar}"),
        ));
    }
    out
}
