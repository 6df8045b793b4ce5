//! The report of a cache of any registered format this crate has no report of its own for (a
//! third party's backend), from what every factory and reader offers: the format, the finalized
//! state, keys, schema, capabilities, files and sizes, projected memory and a structure check.

use std::path::Path;

use stowage_core::{Capabilities, Reader, ValidationLevel};

use super::report::{CacheReport, FileReport, Total, projected_memory};
use crate::error::{CliError, io_error};
use crate::hangar::allocated_bytes;
use crate::locate::Recognized;

/// The report of the cache at `path`, and the error that kept it from opening, if one did (the
/// report then says what could be seen without opening it, and the command fails after printing
/// it).
pub fn report(
    path: &Path,
    recognized: Recognized<'_>,
) -> Result<(CacheReport, Option<CliError>), CliError> {
    let factory = recognized.factory;
    let mut report = CacheReport::new(path, recognized.format);
    report.format = Some(recognized.format.id.to_owned());
    report.detail("backend", format!("{} (a registered backend)", factory.name()));
    set_files(&mut report, path)?;
    let reader = match factory.open_reader(path) {
        Ok(reader) => reader,
        Err(e) => {
            report.state = "unknown (cannot be opened)".into();
            // What the factory can still check of a cache that does not open.
            match factory.validate_path(path, ValidationLevel::Structure) {
                Ok(structure) if !structure.is_undamaged() => report
                    .set_integrity(&structure, "`stowage verify` lists every problem it finds"),
                _ => report.integrity = "cannot be opened (the error follows)".into(),
            }
            report.errors.push(e.to_string());
            return Ok((report, Some(e.into())));
        }
    };
    report.finalized = Some(reader.is_finalized());
    report.state = if reader.is_finalized() {
        "finalized (committed as complete)".into()
    } else {
        "not finalized (being written, or interrupted)".into()
    };
    report.set_schema(reader.schema());
    report.detail("supports", capability_names(reader.capabilities()));
    let keys = reader.keys()?;
    report.keys = Some(keys.len() as u64);
    report.checksums.samples = Some(keys.len() as u64);
    if reader.capabilities().checksums {
        report.checksums.scheme =
            format!("the {} backend's own, over every sample's bytes", reader.name());
        // Which files hold the checksums is the backend's business: only the samples are known.
        report.checksums.covered_samples = Some(keys.len() as u64);
    } else {
        report.checksums.scheme = format!("none (the {} backend declares none)", reader.name());
        report.checksums.covered_samples = Some(0);
    }
    (report.memory, _) = projected_memory(reader.as_ref(), &keys);
    let structure = reader.validate(ValidationLevel::Structure)?;
    report.set_integrity(&structure, "`stowage verify` also reads every sample");
    Ok((report, None))
}

/// Every file of the cache: under a directory, each with its size; a cache that is one file,
/// that file.
fn set_files(report: &mut CacheReport, path: &Path) -> Result<(), CliError> {
    if path.is_dir() {
        return report.set_files(path, |_| String::new(), &[]);
    }
    let meta = std::fs::metadata(path).map_err(|e| io_error(path, &e))?;
    let name = path.file_name().unwrap_or_default().to_string_lossy().into_owned();
    report.files = vec![FileReport {
        name,
        bytes: meta.len(),
        allocated_bytes: allocated_bytes(&meta),
        role: "the cache".into(),
    }];
    report.total = Total { files: 1, bytes: meta.len(), allocated_bytes: allocated_bytes(&meta) };
    Ok(())
}

/// The capabilities a backend declares, as words: `overwrite, resume, checksums`.
fn capability_names(caps: &Capabilities) -> String {
    let flags = [
        (caps.variable_shapes, "variable shapes"),
        (caps.ragged, "ragged shapes"),
        (caps.nullable, "nullable fields"),
        (caps.bytes_fields, "bytes fields"),
        (caps.json_fields, "JSON fields"),
        (caps.overwrite, "overwrite"),
        (caps.append_after_finalize, "append after finalize"),
        (caps.resume, "resume"),
        (caps.checksums, "checksums"),
        (caps.zero_copy_get, "zero-copy get"),
        (caps.concurrent_readers, "concurrent readers"),
    ];
    let names: Vec<&str> = flags.iter().filter(|(on, _)| *on).map(|(_, name)| *name).collect();
    if names.is_empty() { "none beyond fixed-shape tensors".into() } else { names.join(", ") }
}
