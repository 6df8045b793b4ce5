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
    let index = backend.index();
    let mut files_seen = BTreeSet::new();
    for (key, slots) in index.iter() {
        report.samples_checked += 1;
        for (field, slot) in slots.iter().enumerate() {
            let field_name = &schema.fields[field].name;
            let data_file = layout.data_file(index.file_uid(slot.file));
            if files_seen.insert(slot.file) {
                report.files_checked += 1;
            }
            let file = match backend.collection(slot.file, field) {
                Ok(file) => file,
                Err(e) => {
                    let detail = format!("field {field_name:?}: {}", strip_path(&e));
                    report.problem(Some(&data_file), Some(key), detail);
                    continue;
                }
            };
            let shape = index.shape(field, slot);
            let fits = (slot.index as usize) < file.rows()
                && shape.iter().zip(file.slot_shape()).all(|(s, m)| s <= m);
            if !fits {
                let detail = format!(
                    "field {field_name:?}: record {} does not fit the file's {} slots of {}",
                    index.record(field, slot),
                    file.rows(),
                    shape::display(file.slot_shape())
                );
                report.problem(Some(&data_file), Some(key), detail);
                continue;
            }
            if level == ValidationLevel::Full
                && let Err(e) = backend.read_slot(field, slot, true)
            {
                let detail = format!("field {field_name:?}: {}", strip_path(&e));
                report.problem(Some(&data_file), Some(key), detail);
            }
        }
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
        for uid in files_seen.iter().map(|&f| index.file_uid(f)) {
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
