//! `validate` for NUMPY_10 caches: structure (log, files, headers, records) and full checksums.

use crate::NpyBackend;
use std::collections::BTreeSet;
use stowage_core::file_safety::AppendLog;
use stowage_core::{Error, Reader, Result, ValidationLevel, ValidationReport, shape};

/// Checks the cache behind `backend` without changing any file.
///
/// Structure: the record log is undamaged (a torn tail is normal after a crash of an unfinished
/// cache, and reported only on a finalized one), every referenced collection file exists with a
/// header matching its field and its full size, every record's slot index and shape fit the file,
/// and a finalized cache has a `store_data` marker per file. Full: also every sample's xxh64.
/// Both levels list every collection file stowage did not write as unchecked.
pub fn validate(backend: &NpyBackend, level: ValidationLevel) -> Result<ValidationReport> {
    let layout = backend.layout();
    let mut report = ValidationReport::default();
    let log_path = layout.records_log();
    match AppendLog::read_all(&log_path) {
        Ok(scan) => {
            report.files_checked += 1;
            if let Some(damage) = scan.damage
                && (damage.is_mid_log() || backend.is_finalized())
            {
                report.problem(Some(&log_path), None, damage.to_string());
            }
        }
        Err(e) => report.problem(Some(&log_path), None, e.to_string()),
    }

    let schema = &backend.metadata().schema;
    // Every key's records, from a pass over the log; a log damaged where the runs cover it
    // leaves only the tail to check (the damage is the problem).
    let (full, log_readable) = match backend.full_index() {
        Ok(full) => (full, true),
        Err(e) => {
            if !report.problems.iter().any(|p| p.path.as_deref() == Some(log_path.as_path())) {
                report.problem(Some(&log_path), None, strip_path(&e));
            }
            (None, false)
        }
    };
    let index = full.as_ref().unwrap_or(backend.index());
    let mut files_seen = BTreeSet::new();
    for (key, slots) in index.iter() {
        report.samples_checked += 1;
        for (field, slot) in slots.iter().enumerate() {
            let field_name = &schema.fields[field].name;
            let uid = index.file_uid(slot.file);
            let data_file = layout.data_file(uid);
            if files_seen.insert(uid.to_owned()) {
                report.files_checked += 1;
            }
            let record = index.record(field, slot);
            let Some(file_id) = backend.index().file_id(uid) else {
                let detail = format!(
                    "field {field_name:?}: record {record} points into a collection file \
                     index/current does not list"
                );
                report.problem(Some(&data_file), Some(key), detail);
                continue;
            };
            let file = match backend.collection(file_id, field) {
                Ok(file) => file,
                Err(e) => {
                    let detail = format!("field {field_name:?}: {}", strip_path(&e));
                    report.problem(Some(&data_file), Some(key), detail);
                    continue;
                }
            };
            let shape = &record.shape;
            let fits = (slot.index as usize) < file.rows()
                && shape.iter().zip(file.slot_shape()).all(|(s, m)| s <= m);
            if !fits {
                let detail = format!(
                    "field {field_name:?}: record {record} does not fit the file's {} slots of {}",
                    file.rows(),
                    shape::display(file.slot_shape())
                );
                report.problem(Some(&data_file), Some(key), detail);
                continue;
            }
            if level == ValidationLevel::Full
                && let Err(e) = backend.read_record_in(field, record.as_ref(), true)
            {
                let detail = format!("field {field_name:?}: {}", strip_path(&e));
                report.problem(Some(&data_file), Some(key), detail);
            }
        }
    }
    if log_readable {
        check_key_index(backend, index, &mut report)?;
    }
    if backend.is_finalized() {
        if !layout.complete_marker().exists() {
            report.problem(
                Some(&layout.complete_marker()),
                None,
                "missing although the log records a finalize (an interrupted finalize, or a deleted \
                 file): open the cache in append mode to rewrite it",
            );
        }
        for uid in &files_seen {
            let marker = layout.store_dir().join(format!("{uid}.npy"));
            if !marker.exists() {
                report.problem(
                    Some(&marker),
                    None,
                    "committed marker missing for a data file the records use",
                );
            }
        }
    }
    crate::foreign_files::report_unchecked(backend, &mut report);
    Ok(report)
}

/// The detail of an error whose path the report already names.
pub(crate) fn strip_path(e: &Error) -> String {
    match e {
        Error::Corrupted { detail, .. } => detail.clone(),
        other => other.to_string(),
    }
}

/// The on-disk key index against the log: every run's slots against their checksum, and every
/// key the index answers with the latest record of the log (`index` holds every key, from the
/// log). A `current` that could not be used is reported with why.
fn check_key_index(
    backend: &NpyBackend,
    index: &crate::index::KeyIndex,
    report: &mut ValidationReport,
) -> Result<()> {
    let current = crate::runs::current_path(backend.layout());
    let (runs, note) = backend.key_runs();
    if let Some(why) = note {
        report.problem(
            Some(&current),
            None,
            format!(
                "the key index is not used (rebuilt from records.log at every open until a \
                 writer opens the cache): {why}"
            ),
        );
    }
    let Some(runs) = runs.filter(|r| !r.runs().is_empty()) else { return Ok(()) };
    // Both passes below read every page of the runs (and the log's): in large requests, with
    // the kernel's read-around, whatever the handle's reads otherwise use.
    let _sequential = SequentialPass::start(runs, backend.reads_at_random());
    for run in runs.runs() {
        report.files_checked += 1;
        if let Err(e) = run.verify() {
            report.problem(Some(run.path()), None, format!("key index run: {}", strip_path(&e)));
        }
    }
    // The latest record of each key, by a pass over the log (the runs cover its start).
    let log = AppendLog::read_all(backend.layout().records_log())?;
    let mut latest: std::collections::HashMap<String, u64> = std::collections::HashMap::new();
    let mut offset = AppendLog::MAGIC.len() as u64;
    for payload in &log.records {
        if offset < runs.current().log_end
            && let Some(key) = crate::runs::entry_key(payload)
        {
            latest.insert(key.into_owned(), offset);
        }
        offset += (AppendLog::RECORD_HEADER_LEN + payload.len()) as u64;
    }
    let mut wrong = 0u64;
    for key in index.keys() {
        let expected = latest.get(key).copied();
        let found = backend.located(key);
        let right = match found {
            // The tail holds the records after the runs: a key there needs no run.
            Some(None) => true,
            Some(Some(at)) => Some(at) == expected,
            None => false,
        };
        if !right {
            wrong += 1;
            if wrong <= 10 {
                report.problem(
                    Some(&current),
                    Some(key),
                    format!(
                        "the key index answers with the record at byte offset {}, the log's \
                         latest is at {}",
                        found.flatten().map_or("none".into(), |o| o.to_string()),
                        expected.map_or("none".into(), |o| o.to_string())
                    ),
                );
            }
        }
    }
    if wrong > 10 {
        report.problem(Some(&current), None, format!("{wrong} keys answered wrongly in all"));
    }
    if backend.len() != index.len() {
        report.problem(
            Some(&current),
            None,
            format!("the key index counts {} keys, the log holds {}", backend.len(), index.len()),
        );
    }
    Ok(())
}

/// The runs (and the log) mapped for the kernel's read-around while it lives, for random
/// access again after, when the handle reads them at random.
struct SequentialPass<'a> {
    runs: &'a crate::runs::Runs,
    random_after: bool,
}

impl<'a> SequentialPass<'a> {
    fn start(runs: &'a crate::runs::Runs, random_after: bool) -> SequentialPass<'a> {
        if random_after {
            runs.set_random_access(false);
        }
        SequentialPass { runs, random_after }
    }
}

impl Drop for SequentialPass<'_> {
    fn drop(&mut self) {
        if self.random_after {
            self.runs.set_random_access(true);
        }
    }
}
