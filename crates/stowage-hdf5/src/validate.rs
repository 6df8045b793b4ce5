//! `validate` of a generic cache: re-reads everything from disk (never from a handle's memory)
//! and lists every problem with its file and key.

use std::path::Path;

use stowage_core::file_safety::AppendLog;
use stowage_core::{Result, Schema, ValidationLevel, ValidationReport};

use crate::commit_log;
use crate::segment::Segment;

/// Checks the cache in `dir`: the commit log, the completion marker, every committed segment
/// (present, of the recorded size and xxh3, readable by libhdf5 with every row count as
/// recorded) and, at `Full`, every row's checksum (which reads every chunk through Fletcher32).
/// The schema is the log's, so a cache `open` refuses (one damaged segment) is checked too.
pub(crate) fn validate(dir: &Path, level: ValidationLevel) -> Result<ValidationReport> {
    let mut report = ValidationReport::default();
    let log_path = dir.join(super::backend::LOG_NAME);
    report.files_checked += 1;
    let committed = match AppendLog::read_all(&log_path)
        .and_then(|recovered| commit_log::interpret(&log_path, &recovered))
    {
        Ok(committed) => committed,
        Err(e) => {
            report.problem(Some(&log_path), None, e.to_string());
            return Ok(report);
        }
    };
    let schema: &Schema = &committed.header.schema;
    let marker_path = dir.join(super::backend::FINALIZED_MARKER_NAME);
    let marker = committed.check_marker(&log_path, &marker_path, &mut report);
    // Nothing but a segment follows `finalized` here, and a segment unfinalizes: a finalized
    // log holds exactly the records its marker counts.
    if let Some(marker) =
        marker.filter(|m| committed.finalized && m.log_records < committed.records)
    {
        report.problem(
            Some(&marker_path),
            None,
            format!(
                "records {} log records, the finalized log {} holds {}",
                marker.log_records,
                log_path.display(),
                committed.records
            ),
        );
    }
    for entry in &committed.segments {
        let path = super::backend::segment_path(dir, entry.id);
        report.files_checked += 1;
        let segment = match Segment::open(&path, schema, entry) {
            Ok(segment) => segment,
            Err(e) => {
                // Its keys are inside it: what can be said is how many samples it held.
                let lost = format!("{e} (the segment's {} samples are unreadable)", entry.rows);
                report.problem(Some(&path), None, lost);
                continue;
            }
        };
        if level == ValidationLevel::Full {
            for row in 0..segment.rows() {
                report.samples_checked += 1;
                if let Err(e) = segment.read(schema, row) {
                    report.problem(Some(&path), Some(&segment.keys()[row]), e.to_string());
                }
            }
        }
    }
    Ok(report)
}
