//! Reports of NUMPY_10 caches: stowage's (`stowage-npy`) and bare hangar data directories.

use std::collections::{HashMap, HashSet};
use std::path::Path;

use stowage_core::npy_header::storage_descr;
use stowage_core::{FieldKind, Format, Reader, ValidationLevel, shape};
use stowage_npy::layout::{CacheMetadata, Layout};
use stowage_npy::{NpyBackend, NpyOptions};

use super::report::{CacheReport, Dedup, Memory};
use crate::error::CliError;
use crate::hangar::HangarDir;
use crate::out::count;

/// hangar's empty marker files, listed as one line.
const MARKERS: &[(&[&str], &str)] = &[(&["store_data/", "stage_data/"], "empty marker file")];

/// A stowage NUMPY_10 cache, of `format` ([`stowage_npy::STOWAGE_NPY`]). Metadata that parses is
/// reported even when the rest cannot be opened; the open error is returned beside the report.
pub fn stowage_npy(
    path: &Path,
    format: &'static Format,
) -> Result<(CacheReport, Option<CliError>), CliError> {
    let layout = Layout::new(path);
    let meta = CacheMetadata::read(&layout.metadata())?;
    let opened = NpyBackend::open_read_only(path, NpyOptions::default());
    let mut report = CacheReport::new(path, format);
    report.format = Some(meta.format.clone());
    report.version = Some(meta.format_version.to_string());
    report.set_schema(&meta.schema);
    for (field, spec) in report.schema.iter_mut().zip(&meta.schema.fields) {
        if let FieldKind::Tensor { dtype, .. } = spec.kind {
            field.note = Some(format!("stored as {}", storage_descr(dtype)));
        }
    }
    report.detail("collection", format!("{} slots per data file", meta.collection_size));

    let mut field_of_uid: HashMap<String, String> = HashMap::new();
    if let Ok(cache) = &opened {
        report.finalized = Some(cache.is_finalized());
        report.state = if cache.is_finalized() {
            "finalized (complete)".into()
        } else {
            "not finalized (being written, or interrupted: a writer can resume it)".into()
        };
        report.keys = Some(cache.len() as u64);
        let mut bytes = 0u64;
        let mut records = vec![0u64; meta.schema.fields.len()];
        let mut slots: Vec<HashSet<(String, u64)>> = vec![HashSet::new(); records.len()];
        for (_, field_records) in cache.records() {
            for (f, (record, field)) in field_records.iter().zip(&meta.schema.fields).enumerate() {
                field_of_uid.entry(record.uid.clone()).or_insert_with(|| field.name.clone());
                if let FieldKind::Tensor { dtype, .. } = field.kind {
                    bytes +=
                        record.shape.iter().product::<usize>() as u64 * dtype.item_size() as u64;
                }
                records[f] += 1;
                slots[f].insert((record.uid.clone(), record.collection_index));
            }
        }
        for (f, field) in meta.schema.fields.iter().enumerate() {
            report.dedup.push(Dedup::new(
                format!("field {:?}", field.name),
                records[f],
                slots[f].len() as u64,
                "records sharing a slot hold identical bytes (hangar's NUMPY_10 dedup)".into(),
            ));
        }
        report.memory = Some(Memory {
            bytes,
            basis: "every key's tensors at their own shapes, from the records".into(),
        });
        let samples = cache.len() as u64;
        report.checksums.covered_samples = Some(samples);
        report.checksums.samples = Some(samples);
    } else {
        report.state = "unknown (cannot be opened)".into();
    }
    report.checksums.scheme =
        "xxh64 per sample and field, in each record (records.log), hangar's".into();
    let used = opened.is_ok();
    // Files stowage created that no record uses yet (a session that crashed before a flush)
    // are its own; every other unused file is another writer's (hangar's).
    let claimed = stowage_npy::ownership::read_claims(&layout).map(|c| c.uids).unwrap_or_default();
    report.set_files(
        path,
        |name| {
            let Some(file) = name.strip_prefix("data/10/") else {
                return match name {
                    "records.log" => "record log".into(),
                    "owned_files.log" => "collection files stowage created".into(),
                    "stowage.json" => "metadata".into(),
                    "_COMPLETE" => "finalize marker".into(),
                    n if n.starts_with("store_data/") => "committed marker".into(),
                    n if n.starts_with("stage_data/") => "staged marker".into(),
                    _ => String::new(),
                };
            };
            let uid = file.strip_suffix(".npy").unwrap_or(file);
            let used_by = match field_of_uid.get(uid) {
                Some(field) => format!("field {field:?}"),
                None if used && claimed.contains(uid) => "stowage's, no record uses it".to_owned(),
                None if used => "another writer's (no stowage record)".to_owned(),
                None => String::new(),
            };
            let marker = if layout.store_dir().join(file).exists() {
                "committed"
            } else if layout.stage_dir().join(file).exists() {
                "staged"
            } else {
                "unmarked"
            };
            format!("{used_by}, {marker}").trim_start_matches(", ").to_owned()
        },
        MARKERS,
    )?;
    let (covered, uncovered): (Vec<String>, Vec<String>) = report
        .files
        .iter()
        .filter(|f| f.name.starts_with("data/10/"))
        .map(|f| f.name.clone())
        .partition(|name| {
            let uid = name.trim_start_matches("data/10/").trim_end_matches(".npy");
            field_of_uid.contains_key(uid) || claimed.contains(uid)
        });
    report.checksums.covered_files = covered;
    report.checksums.uncovered_files = uncovered;
    match opened {
        Ok(cache) => {
            let structure = cache.validate(ValidationLevel::Structure)?;
            report.set_integrity(&structure, "`stowage verify` also checks every checksum");
            Ok((report, None))
        }
        Err(e) => {
            report.integrity = "cannot be opened (the error follows)".into();
            report.errors.push(e.to_string());
            Ok((report, Some(e.into())))
        }
    }
}

/// A bare hangar data directory, of `format` ([`stowage_npy::HANGAR_NUMPY10`]): its collection
/// files, their headers, markers and sizes.
pub fn hangar(path: &Path, format: &'static Format) -> Result<CacheReport, CliError> {
    let dir = HangarDir::scan(path)?;
    let mut report = CacheReport::new(path, format);
    report.format = Some("hangar NUMPY_10 (backend 10)".into());
    report.state = "no completion marker in this format: store_data marks committed files, \
                    stage_data staged ones"
        .into();
    report.detail(
        "records",
        format!(
            "none here (hangar keeps them in its LMDB database); read one sample with `stowage \
             get {} --record RECORD --out FILE.npy`",
            path.display()
        ),
    );
    let markers = match (dir.committed_markers, dir.staged_markers) {
        (None, None) => {
            "none (no store_data/10 or stage_data/10: every file is unmarked)".to_owned()
        }
        (store, stage) => {
            let part = |name: &str, n: Option<usize>| match n {
                Some(n) => format!("{name}: {}", count(n as u64, "file")),
                None => format!("{name} absent"),
            };
            format!("{}, {}", part("store_data/10", store), part("stage_data/10", stage))
        }
    };
    report.detail("markers", markers);
    report.detail("collections", count(dir.files.len() as u64, "collection file") + " in data/10");
    let mut roles = HashMap::new();
    let mut problems = stowage_core::ValidationReport::default();
    let mut slot_bytes = 0u64;
    for file in &dir.files {
        problems.files_checked += 1;
        let check = file.check();
        let layout = match &check.header {
            Some(h) if !h.shape.is_empty() => {
                slot_bytes += h.data_len().unwrap_or(0) as u64;
                format!(
                    "{} {}: {} of {}",
                    h.descr,
                    shape::display(&h.shape),
                    count(h.shape[0] as u64, "slot"),
                    shape::display(&h.shape[1..])
                )
            }
            Some(h) => format!("{} {}", h.descr, shape::display(&h.shape)),
            None => "header unreadable".to_owned(),
        };
        roles.insert(format!("data/10/{}", file.name), format!("{layout}, {}", file.marker.name()));
        if let Some(problem) = check.problem {
            problems.problem(Some(&file.path), None, problem);
        }
    }
    for (path, detail) in &dir.problems {
        problems.problem(Some(path), None, detail.clone());
    }
    report.set_files(path, |name| roles.get(name).cloned().unwrap_or_default(), MARKERS)?;
    report.checksums.scheme = "none here: hangar keeps each sample's xxh64 in its LMDB records, \
                               which are not in this directory"
        .into();
    report.checksums.uncovered_files =
        dir.files.iter().map(|f| format!("data/10/{}", f.name)).collect();
    report.memory = Some(Memory {
        bytes: slot_bytes,
        basis: "at most: every slot of every collection file (which slots hold samples is in \
                hangar's records)"
            .into(),
    });
    report.set_integrity(&problems, "headers and sizes; no records here, so no checksums");
    Ok(report)
}
