//! How an HDF5 cache is checked from end to end ([`stowage_core::Reader::check_plan`]).
//!
//! libhdf5 serializes reads, so stowage's HDF5 cache is checked in runs of keys (the structure
//! check once, then every selected key read and its checksum checked), and an aenet torch cache
//! entry by entry (features and derivatives, each array's shape against its section's
//! attributes). A cache that does not open is checked from disk as far as it can be
//! ([`unopened`]): each damaged segment of stowage's cache is named with how many samples it held.

use std::path::Path;

use stowage_core::check_plan::{self, CheckPlan, Selection, Unplanned, key_units, problem_of};
use stowage_core::{BackendFactory, Error, Reader, Result, ValidationLevel, ValidationReport};

use crate::{AenetReader, Hdf5Backend, TorchCache};

/// How a damaged key of stowage's HDF5 cache is repaired.
const STOWAGE_REPAIR: &str =
    "put the damaged keys again (a later segment's row replaces them) or rebuild the cache";

/// How a damaged file of stowage's HDF5 cache is repaired, when its keys cannot be named.
const STOWAGE_FILE_REPAIR: &str = "a damaged segment's keys cannot be read from it, so the cache \
    cannot list them: restore the listed files from an intact copy, or delete the cache \
    directory and write it again";

/// How a damaged aenet torch cache is repaired.
const AENET_REPAIR: &str = "rebuild the torch cache with aenet (delete /torch_cache from the \
    dataset file, or use an intact copy)";

/// What checking a cache that does not open covers without a sample.
const EVERY_SEGMENT: &str = "every segment";

/// The plan of stowage's HDF5 cache: as [`check_plan::every_key`], except that keys that cannot
/// be listed (a damaged segment, read on its first use, holds some) are the plan's error, never
/// an empty list: the caller then checks the cache from disk ([`unopened`]), segment by segment,
/// every intact row included.
pub(crate) fn stowage_plan<'a>(
    cache: &'a Hdf5Backend,
    selection: &Selection,
) -> Result<CheckPlan<'a>> {
    let keys = cache.keys()?;
    let structure = cache.validate(ValidationLevel::Structure)?;
    let selected = selection.select(&keys);
    Ok(CheckPlan {
        keys: keys.len() as u64,
        selected: selected.len() as u64,
        units: key_units(&selected, move |report, key| check_plan::check_key(report, cache, key)),
        ..CheckPlan::new(structure, STOWAGE_REPAIR)
    })
}

/// The plan of an aenet torch cache: opening it checked the index tables (every row points into
/// its payload, no entry twice) and the structure check lists the rows stowage's checksums do not
/// cover (aenet's); each unit reads its entries' features and derivatives, checking stowage's
/// rows against their checksums and every array's shape against the section's attributes.
pub(crate) fn aenet_plan<'a>(
    source: &'a AenetReader,
    selection: &Selection,
) -> Result<CheckPlan<'a>> {
    let structure = source.cache().check(ValidationLevel::Structure);
    let keys = source.keys()?;
    let selected = selection.select(&keys);
    Ok(CheckPlan {
        keys: keys.len() as u64,
        selected: selected.len() as u64,
        units: key_units(&selected, move |report, key| check_aenet_entry(report, source, key)),
        ..CheckPlan::new(structure, AENET_REPAIR)
    })
}

/// Reads the features and derivatives of entry `key`; a problem for each that does not read or
/// does not match its section's shape.
fn check_aenet_entry(report: &mut ValidationReport, source: &AenetReader, key: &str) {
    report.samples_checked += 1;
    let cache = source.cache();
    let path = cache.path();
    let entry: i64 = key.parse().unwrap_or(-1);
    if let Err(e) = cache.features(entry) {
        report.problems.push(problem_of(&e, Some(key)));
    }
    let Some(layout) = cache.derivative_layout() else { return };
    match cache.derivatives(entry) {
        Ok(Some(d)) => {
            if let Err(e) =
                d.check(layout.n_radial_features, layout.n_angular_features, layout.multi)
            {
                report.problem(Some(path), Some(key), format!("derivatives: {e}"));
            }
        }
        Ok(None) => {}
        Err(e) => report.problems.push(problem_of(&e, Some(key))),
    }
}

/// A cache at `path` that did not open (`error`), reported with the damage a check from disk
/// sees: for a regular file, the aenet torch cache's validation; for a directory, stowage's
/// cache validated segment by segment ([`BackendFactory::validate_path`]). `error` when that sees
/// no damage (a permission error, say). A sample needs the keys, so it is refused.
pub(crate) fn unopened(
    factory: &crate::Hdf5Factory,
    path: &Path,
    error: Error,
    selection: &Selection,
) -> std::result::Result<CheckPlan<'static>, Unplanned> {
    if selection.is_sample() {
        return Err(Unplanned::NoSample { error, scope: EVERY_SEGMENT });
    }
    let (structure, repair, file_repair) = if path.is_file() {
        (TorchCache::validate(path, ValidationLevel::Full)?, AENET_REPAIR, None)
    } else {
        let structure = factory.validate_path(path, ValidationLevel::Full)?;
        (structure, STOWAGE_REPAIR, Some(STOWAGE_FILE_REPAIR))
    };
    if structure.is_undamaged() {
        return Err(error.into());
    }
    Ok(CheckPlan { file_repair, ..CheckPlan::new(structure, repair) })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Hdf5Factory;
    use stowage_core::{Backend, DType, OpenMode, Sample, Schema, ShapeRule, Tensor};

    /// A finalized stowage HDF5 cache of 5 samples; its segment files.
    fn cache(dir: &Path) -> Vec<std::path::PathBuf> {
        let schema = Schema::new().tensor("x", DType::U8, ShapeRule::Fixed(vec![2]));
        let mut cache = Hdf5Backend::create(dir, &schema).unwrap();
        for i in 0..5u8 {
            let sample = Sample::new().with("x", Tensor::from_slice(&[2], &[i, i]).unwrap());
            cache.put(&format!("k{i}"), &sample).unwrap();
        }
        cache.finalize().unwrap();
        let mut segments: Vec<_> = std::fs::read_dir(dir.join("segments"))
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|e| e == "h5"))
            .collect();
        segments.sort();
        segments
    }

    #[test]
    fn every_selected_key_is_read_in_runs() {
        let dir = tempfile::tempdir().unwrap();
        cache(dir.path());
        let cache = Hdf5Backend::open(dir.path(), OpenMode::ReadOnly).unwrap();
        let plan = cache.check_plan(&Selection::all()).unwrap();
        assert_eq!((plan.keys, plan.selected, plan.repair), (5, 5, STOWAGE_REPAIR));
        let report = (plan.units[0].check)(&|_| {});
        assert_eq!(report.samples_checked, 5);
        assert!(report.problems.is_empty(), "{:?}", report.problems);
        let plan = cache.check_plan(&Selection { fraction: Some(0.4), seed: 2 }).unwrap();
        assert_eq!((plan.keys, plan.selected), (5, 2));
    }

    #[test]
    fn a_cache_that_does_not_open_names_its_damaged_segment() {
        let dir = tempfile::tempdir().unwrap();
        let segments = cache(dir.path());
        std::fs::write(&segments[0], b"not hdf5").unwrap();
        // Without its key index run, open reads every segment's keys, and fails on the damaged
        // one (with the run, open never reads it: its first get does).
        std::fs::remove_dir_all(dir.path().join("index")).unwrap();
        let open = || Hdf5Backend::open(dir.path(), OpenMode::ReadOnly).map(|_| ()).unwrap_err();
        let sample = Selection { fraction: Some(0.5), seed: 0 };
        match Hdf5Factory.check_plan_unopened(dir.path(), open(), &sample) {
            Err(Unplanned::NoSample { scope, .. }) => assert_eq!(scope, EVERY_SEGMENT),
            other => panic!("a sample needs the keys: {other:?}"),
        }
        let plan = Hdf5Factory.check_plan_unopened(dir.path(), open(), &Selection::all()).unwrap();
        assert!(plan.units.is_empty());
        assert_eq!(plan.file_repair, Some(STOWAGE_FILE_REPAIR));
        let problem = &plan.structure.problems[0];
        assert_eq!(problem.path.as_deref(), Some(segments[0].as_path()));
    }

    #[test]
    fn an_undamaged_cache_that_does_not_open_is_the_open_error() {
        let dir = tempfile::tempdir().unwrap();
        cache(dir.path());
        let error = Error::InvalidArgument { detail: "no permission, say".into() };
        match Hdf5Factory.check_plan_unopened(dir.path(), error, &Selection::all()) {
            Err(Unplanned::Error(Error::InvalidArgument { detail })) => {
                assert_eq!(detail, "no permission, say")
            }
            other => panic!("{other:?}"),
        }
    }
}
