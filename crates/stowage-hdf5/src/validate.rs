//! `validate` of a generic cache: re-reads everything from disk (never from a handle's memory)
//! and lists every problem with its file and key.

use std::collections::HashMap;
use std::path::Path;

use stowage_core::file_safety::AppendLog;
use stowage_core::key_runs::key_hash;
use stowage_core::{Error, Result, Schema, ValidationLevel, ValidationReport};

use crate::commit_log::{self, RunEntry};
use crate::key_index::{Location, open_run, run_path};
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
    // The keys of every segment that reads, by position, for the key index runs' check.
    let mut segment_keys: Vec<Option<Vec<String>>> = Vec::with_capacity(committed.segments.len());
    for entry in &committed.segments {
        segment_keys.push(None);
        let path = super::backend::segment_path(dir, entry.id);
        report.files_checked += 1;
        // Always hashed here, whatever a handle verified before: validate re-reads from disk.
        let opened = Segment::open(&path, schema, entry, None, true, None)
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
        *segment_keys.last_mut().expect("pushed above") = Some(keys);
    }
    check_runs(dir, &committed.own.runs, &segment_keys, &mut report);
    check_key_count(&committed, &segment_keys, &mut report);
    Ok(report)
}

/// Checks the log's latest key count (when it counts every segment, and every segment's keys
/// were read) against the distinct keys of the segments: a reader reports that count as its
/// `len` without counting.
fn check_key_count(
    committed: &crate::commit_log::Committed,
    segment_keys: &[Option<Vec<String>>],
    report: &mut ValidationReport,
) {
    let Some((through, recorded)) = committed.own.keys else { return };
    if through as usize + 1 != committed.segments.len() {
        return; // Not the last segment's: readers count the keys themselves.
    }
    let mut distinct: std::collections::HashSet<&str> = std::collections::HashSet::new();
    for keys in segment_keys {
        let Some(keys) = keys else { return }; // An unreadable segment, already reported.
        distinct.extend(keys.iter().map(String::as_str));
    }
    if distinct.len() as u64 != recorded {
        report.problem(
            None,
            None,
            format!(
                "the commit log counts {recorded} distinct keys after segment {through}, the \
                 segments hold {}: readers report the wrong number of samples",
                distinct.len()
            ),
        );
    }
}

/// Checks the key index runs `entries` the log vouches for: each opens as recorded, its slots
/// match their checksum, and every key of the segments it covers (`segment_keys`, by position;
/// `None` for a segment that does not read, already reported) is found at its latest row there.
/// A damaged run is never used by a reader (nor any newer one), so its segments' keys are still
/// found; it is reported so that it can be rebuilt.
fn check_runs(
    dir: &Path,
    entries: &[RunEntry],
    segment_keys: &[Option<Vec<String>>],
    report: &mut ValidationReport,
) {
    for entry in entries {
        let path = run_path(dir, entry.first, entry.through);
        report.files_checked += 1;
        let run = match open_run(dir, entry, false) {
            Ok(run) => run,
            Err(e) => {
                let why = "readers do not use it, and read its segments' keys at open instead";
                report.problem(Some(&path), None, format!("{e} ({why})"));
                continue;
            }
        };
        if let Err(e) = run.verify() {
            let why =
                "readers use it: a damaged slot can hide a key, never return another's sample";
            report.problem(Some(&path), None, format!("{e} ({why}); rebuild it"));
            continue;
        }
        let covered = entry.first as usize..=entry.through as usize;
        let mut latest: HashMap<&str, Location> = HashMap::new();
        for segment in covered.clone() {
            let Some(Some(keys)) = segment_keys.get(segment) else { continue };
            for (row, key) in keys.iter().enumerate() {
                latest.insert(key, Location { segment, row });
            }
        }
        let key_at = |payload: u64| {
            let location = Location::of_payload(payload);
            let keys = segment_keys.get(location.segment)?.as_ref()?;
            covered.contains(&location.segment).then(|| keys.get(location.row)).flatten()
        };
        let mut wrong = 0usize;
        let mut example = None;
        for (key, location) in &latest {
            let found =
                run.find(key_hash(key.as_bytes()), |p| key_at(p).map(String::as_str) == Some(*key));
            if found.map(Location::of_payload) != Some(*location) {
                wrong += 1;
                example.get_or_insert(*key);
            }
        }
        // A segment that does not read is reported already, and its keys are unknown here.
        let all_read = covered.clone().all(|s| matches!(segment_keys.get(s), Some(Some(_))));
        if wrong > 0 || (all_read && run.keys() != latest.len() as u64) {
            report.problem(
                Some(&path),
                example,
                format!(
                    "the key index run holds {} keys, its segments {} ({wrong} not found at their                      latest row; the key index run is still used, and hides them)",
                    run.keys(),
                    latest.len()
                ),
            );
        }
    }
}
