//! How a NUMPY_10 cache is checked from end to end ([`stowage_core::Reader::check_plan`]): the
//! structure check once (record log, markers, every record fits its file), then one unit per
//! collection file reading each selected record in it, its xxh64 checked.
//!
//! A bare hangar data directory has no reader (its records, and so its keys and checksums, are
//! in hangar's LMDB database): [`hangar_plan`] checks each collection file's header and size and
//! that every marker has its data file ([`crate::NpyFactory`]'s
//! [`stowage_core::BackendFactory::check_plan_unopened`]).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use stowage_core::check_plan::{CheckPlan, CheckUnit, Selection};
use stowage_core::{Error, Reader, Result, Unchecked, ValidationLevel, ValidationReport};

use crate::hangar_dir::HangarDir;
use crate::layout::Layout;
use crate::{NpyBackend, Numpy10Record};

/// How a damaged key of a stowage NUMPY_10 cache is repaired.
const REPAIR: &str = "put the damaged keys again (the new sample goes to a new slot) or rebuild the \
    cache";

/// The plan of `cache` for `selection`: a unit per collection file holding a selected record.
pub(crate) fn plan<'a>(cache: &'a NpyBackend, selection: &Selection) -> Result<CheckPlan<'a>> {
    let structure = cache.validate(ValidationLevel::Structure)?;
    let keys = cache.keys()?;
    let selected = selection.select(&keys);
    let fields: Vec<&str> = cache.schema().fields.iter().map(|f| f.name.as_str()).collect();
    // By file uid, so that each unit reads one file and the units come in a stable order.
    let mut by_file: BTreeMap<String, Vec<(String, String, Numpy10Record)>> = BTreeMap::new();
    for key in &selected {
        for field in &fields {
            if let Some(record) = cache.record(key, field) {
                by_file.entry(record.uid.clone()).or_default().push((
                    key.clone(),
                    (*field).to_owned(),
                    record,
                ));
            }
        }
    }
    let units = by_file.into_values().map(|records| file_unit(cache, records)).collect();
    Ok(CheckPlan {
        // The structure check counted the files the units read, but no sample.
        structure: ValidationReport { samples_checked: 0, ..structure },
        keys: keys.len() as u64,
        selected: selected.len() as u64,
        units,
        ..CheckPlan::new(ValidationReport::default(), REPAIR)
    })
}

/// A unit reading `records` (all in one collection file), each a problem naming the file, key and
/// field when it does not read back with its checksum.
fn file_unit(cache: &NpyBackend, records: Vec<(String, String, Numpy10Record)>) -> CheckUnit<'_> {
    CheckUnit::new(records.len() as u64, move |progress: &dyn Fn(u64)| {
        let mut report = ValidationReport { files_checked: 1, ..Default::default() };
        for (key, field, record) in &records {
            if let Err(e) = cache.read_record(field, record, true) {
                let file = cache.layout().data_file(&record.uid);
                let detail = match &e {
                    Error::Corrupted { detail, .. } => detail.clone(),
                    other => other.to_string(),
                };
                report.problem(Some(&file), Some(key), format!("field {field:?}: {detail}"));
            }
            progress(1);
        }
        report
    })
}

/// What checking a bare hangar data directory covers.
const HANGAR_SCOPE: &str = "a bare hangar data directory has no records: headers and sizes only";

/// Why a sample does not apply to a bare hangar data directory.
const HANGAR_NO_SAMPLE: &str =
    "a bare hangar data directory (it holds no records): every file was checked";

/// The plan of the bare hangar data directory at `path`: the scan's problems (a marker without a
/// data file) and lost stowage metadata once, then one unit per collection file checking its
/// header and size. No sample is drawn (there are no keys), and every file's samples are listed
/// as unchecked: only hangar's records carry their checksums.
pub(crate) fn hangar_plan(path: &Path) -> Result<CheckPlan<'static>> {
    let dir = HangarDir::scan(path)?;
    let mut structure = ValidationReport::default();
    for (file, detail) in &dir.problems {
        structure.problem(Some(file), None, detail.clone());
    }
    check_no_lost_metadata(path, &mut structure);
    for file in &dir.files {
        structure.unchecked.push(Unchecked {
            path: file.path.clone(),
            writer: "hangar".to_owned(),
            samples: 0,
            next_step: format!(
                "its samples' records (and their xxh64 checksums) are in hangar's database, not \
                 in this directory: check a sample with `stowage get {} --record REC`",
                path.display()
            ),
        });
    }
    let units = dir
        .files
        .into_iter()
        .map(|file| {
            CheckUnit::new(1, move |progress: &dyn Fn(u64)| {
                let mut report = ValidationReport { files_checked: 1, ..Default::default() };
                if let Some(problem) = file.check().problem {
                    report.problem(Some(&file.path), None, problem);
                }
                progress(1);
                report
            })
        })
        .collect();
    Ok(CheckPlan {
        units,
        scope: Some(HANGAR_SCOPE),
        sample_ignored: Some(HANGAR_NO_SAMPLE),
        ..CheckPlan::new(structure, "")
    })
}

/// A NUMPY_10 cache without `stowage.json` reads as a bare hangar data directory; but stowage's
/// own files beside it (its record log, its owned-files log, its complete marker) mean stowage
/// wrote it and its metadata is lost: damage, never "unchecked".
fn check_no_lost_metadata(path: &Path, report: &mut ValidationReport) {
    let layout = Layout::new(path);
    let stowage_files: Vec<PathBuf> =
        [layout.records_log(), layout.owned_files_log(), layout.complete_marker()]
            .into_iter()
            .filter(|p| p.exists())
            .collect();
    stowage_core::check_plan::report_lost_marker(
        report,
        &layout.metadata(),
        &stowage_files,
        "metadata (the schema) is lost",
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::NpyOptions;
    use stowage_core::{Backend, DType, Sample, Schema, ShapeRule, Tensor};

    fn cache(dir: &std::path::Path, n: u8) -> NpyBackend {
        let schema = Schema::new().tensor("x", DType::U8, ShapeRule::Fixed(vec![2]));
        let options = NpyOptions { collection_size: 4, ..NpyOptions::default() };
        let mut cache = NpyBackend::create(dir, &schema, options.clone()).unwrap();
        for i in 0..n {
            let sample = Sample::new().with("x", Tensor::from_slice(&[2], &[i, i]).unwrap());
            cache.put(&format!("k{i}"), &sample).unwrap();
        }
        cache.finalize().unwrap();
        NpyBackend::open_read_only(dir, options).unwrap()
    }

    #[test]
    fn one_unit_per_collection_file_and_a_damaged_sample_names_file_key_and_field() {
        let dir = tempfile::tempdir().unwrap();
        let cache = cache(dir.path(), 10);
        let plan = plan(&cache, &Selection::all()).unwrap();
        assert_eq!((plan.keys, plan.selected), (10, 10));
        // Units come in file-uid order (uids are random): compare their sizes sorted.
        let mut sizes: Vec<u64> = plan.units.iter().map(|u| u.samples).collect();
        sizes.sort_unstable();
        assert_eq!(sizes, [2, 4, 4]);
        assert_eq!(plan.structure.samples_checked, 0);
        let clean: Vec<ValidationReport> =
            plan.units.iter().map(|unit| (unit.check)(&|_| {})).collect();
        assert!(clean.iter().all(|r| r.problems.is_empty() && r.files_checked == 1), "{clean:?}");

        // Flip the last byte of k9's slot: its file's unit names it, the others stay clean.
        let record = cache.record("k9", "x").unwrap();
        let file = cache.layout().data_file(&record.uid);
        let data = crate::collection::CollectionFile::open(&file).unwrap().header().data_offset;
        let mut bytes = std::fs::read(&file).unwrap();
        bytes[data + 2 * record.collection_index as usize + 1] ^= 0xff;
        std::fs::write(&file, bytes).unwrap();
        let cache = NpyBackend::open_read_only(dir.path(), cache.options().clone()).unwrap();
        let plan = super::plan(&cache, &Selection::all()).unwrap();
        let reports: Vec<ValidationReport> =
            plan.units.iter().map(|unit| (unit.check)(&|_| {})).collect();
        let problems: Vec<_> = reports.iter().flat_map(|r| &r.problems).collect();
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert_eq!(problems[0].key.as_deref(), Some("k9"));
        assert_eq!(problems[0].path.as_deref(), Some(file.as_path()));
        assert!(problems[0].detail.starts_with("field \"x\": "), "{}", problems[0].detail);
    }

    #[test]
    fn a_hangar_directory_checks_each_file_and_leaves_its_samples_unchecked() {
        let dir = tempfile::tempdir().unwrap();
        let uids: Vec<String> = {
            let cache = cache(dir.path(), 6);
            let mut uids: Vec<String> = cache
                .records()
                .unwrap()
                .into_iter()
                .map(|(_, records)| records[0].uid.clone())
                .collect();
            uids.sort();
            uids.dedup();
            uids
        };
        assert_eq!(uids.len(), 2);
        // stowage.json gone: a bare hangar data directory whose stowage metadata is lost.
        std::fs::remove_file(dir.path().join("stowage.json")).unwrap();
        let layout = Layout::new(dir.path());
        let short = layout.data_file(&uids[0]);
        let size = std::fs::metadata(&short).unwrap().len();
        std::fs::OpenOptions::new().append(true).open(&short).unwrap().set_len(size - 1).unwrap();
        let plan = hangar_plan(dir.path()).unwrap();
        assert_eq!((plan.keys, plan.selected, plan.units.len()), (0, 0, 2));
        assert_eq!(plan.scope, Some(HANGAR_SCOPE));
        assert_eq!(plan.structure.unchecked.len(), 2);
        assert_eq!(plan.structure.problems.len(), 1, "{:?}", plan.structure.problems);
        assert_eq!(plan.structure.problems[0].path.as_deref(), Some(layout.metadata().as_path()));
        let reports: Vec<ValidationReport> =
            plan.units.iter().map(|unit| (unit.check)(&|_| {})).collect();
        assert_eq!(reports[0].problems.len(), 1, "{reports:?}");
        assert!(reports[0].problems[0].detail.contains("bytes too short"), "{reports:?}");
        assert!(reports[1].problems.is_empty(), "{reports:?}");
    }

    #[test]
    fn a_sample_reads_only_the_selected_records() {
        let dir = tempfile::tempdir().unwrap();
        let cache = cache(dir.path(), 10);
        let plan = plan(&cache, &Selection { fraction: Some(0.2), seed: 3 }).unwrap();
        assert_eq!((plan.keys, plan.selected), (10, 2));
        assert_eq!(plan.units.iter().map(|u| u.samples).sum::<u64>(), 2);
    }
}
