//! `validate` of a generic cache: re-reads everything from disk (never from a handle's memory)
//! and lists every problem with its file and key.

use std::path::Path;

use stowage_core::file_safety::AppendLog;
use stowage_core::{Error, Result, Schema, ValidationLevel, ValidationReport};

use crate::commit_log;
use crate::segment::Segment;

/// Whether `error` says a file is not there.
fn is_missing(error: &Error) -> bool {
    matches!(error, Error::Io { source, .. } if source.kind() == std::io::ErrorKind::NotFound)
}

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
        // Always hashed here, whatever a handle verified before: validate re-reads from disk.
        let opened = Segment::open(&path, schema, entry, None)
            .and_then(|(segment, _)| Ok((segment.keys()?, segment)));
        let (keys, segment) = match opened {
            Ok(opened) => opened,
            // The operating system refused (no descriptor or memory left, no permission, a lock):
            // nothing is known about the segment, so the check fails instead of reporting it
            // damaged. A committed segment that is missing is damage.
            Err(e @ Error::Io { .. }) if !is_missing(&e) => return Err(e),
            Err(e) => {
                // Its keys are inside it: what can be said is how many samples it held.
                let lost = format!("{e} (the segment's {} samples are unreadable)", entry.rows);
                report.problem(Some(&path), None, lost);
                continue;
            }
        };
        if level == ValidationLevel::Full {
            // As many keys as rows: `Segment::open` checked every dataset's row count.
            for (row, key) in keys.iter().enumerate() {
                report.samples_checked += 1;
                if let Err(e) = segment.read(schema, row, key) {
                    report.problem(Some(&path), Some(key), e.to_string());
                }
            }
        }
    }
    Ok(report)
}
