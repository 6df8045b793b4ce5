//! How a cache is checked from end to end ([`CheckPlan`]): the checks made once for the whole
//! cache, and independent [`CheckUnit`]s of sample checks that a tool (`stowage verify`) runs on
//! as many threads as it likes.
//!
//! The format knows how its samples split into independent pieces (a collection file of NUMPY_10,
//! a segment of an Arrow cache, runs of keys when rows are spread over every file or reads are
//! serialized), so the plan is made by the reader ([`crate::Reader::check_plan`]) or, for a cache
//! that does not open, by its factory ([`crate::BackendFactory::check_plan_unopened`]). The tool
//! only runs the units, puts their reports back in unit order and prints the verdict, so the
//! output is the same for any number of threads and any format.
//!
//! ```
//! use stowage_core::check_plan::Selection;
//! let keys: Vec<String> = (0..100).map(|i| format!("k{i}")).collect();
//! let tenth = Selection { fraction: Some(0.1), seed: 7 }.select(&keys);
//! assert_eq!(tenth.len(), 10);
//! assert_eq!(Selection::all().select(&keys), keys);
//! ```

use std::path::{Path, PathBuf};

use crate::{Error, Problem, Reader, Result, Sample, ValidationLevel, ValidationReport, Value};

/// Samples per unit when a format's samples are checked in runs of keys ([`key_units`]): enough
/// to keep a thread busy, few enough that the runs spread over the threads.
pub const KEYS_PER_UNIT: usize = 1024;

/// How a damaged key of a format that says nothing more specific is repaired.
pub const GENERIC_REPAIR: &str = "put the damaged keys again, or rebuild the cache (delete it and \
    write it again, or `stowage convert` from an intact copy)";

/// How a damaged file of a format that says nothing more specific is repaired.
pub const GENERIC_FILE_REPAIR: &str =
    "restore the listed files from an intact copy, or delete the cache and write it again";

/// Which keys' samples are checked: every one, or a seeded sample of them.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Selection {
    /// The fraction of keys whose samples are checked, in `(0, 1]`; `None` (or `1.0`) checks
    /// every one.
    pub fraction: Option<f64>,
    /// Seed of the sample: the same seed picks the same keys.
    pub seed: u64,
}

impl Selection {
    /// Every key.
    pub fn all() -> Selection {
        Selection { fraction: None, seed: 0 }
    }

    /// Whether this is a sample of the keys rather than all of them (a fraction below 1).
    pub fn is_sample(&self) -> bool {
        self.fraction.is_some_and(|f| f < 1.0)
    }

    /// The keys whose samples are checked: all of them, or the `ceil(fraction * n)` keys with the
    /// smallest seeded hash (the same keys for the same seed, whatever the number of threads), in
    /// their cache order.
    pub fn select(&self, keys: &[String]) -> Vec<String> {
        let Some(fraction) = self.fraction.filter(|f| *f < 1.0) else { return keys.to_vec() };
        let want = ((keys.len() as f64) * fraction).ceil() as usize;
        let mut ranked: Vec<(u64, usize)> = keys
            .iter()
            .enumerate()
            .map(|(i, key)| (xxhash_rust::xxh3::xxh3_64_with_seed(key.as_bytes(), self.seed), i))
            .collect();
        ranked.sort_unstable();
        let mut chosen: Vec<usize> = ranked.into_iter().take(want).map(|(_, i)| i).collect();
        chosen.sort_unstable();
        chosen.into_iter().map(|i| keys[i].clone()).collect()
    }
}

/// The check a [`CheckUnit`] runs: given a callback that reports progress (in the unit's
/// [`CheckUnit::samples`] units), it returns what it found.
pub type UnitCheck<'a> = dyn Fn(&dyn Fn(u64)) -> ValidationReport + Send + Sync + 'a;

/// One independent piece of sample checks, run on any thread.
pub struct CheckUnit<'a> {
    /// How much work it is, for a progress bar: samples, or bytes for a unit that reads a whole
    /// file. Its check reports exactly this much progress in total.
    pub samples: u64,
    /// Runs the checks, reporting progress through its argument.
    pub check: Box<UnitCheck<'a>>,
}

impl<'a> CheckUnit<'a> {
    /// A unit of `samples` worth of work done by `check`.
    pub fn new(
        samples: u64,
        check: impl Fn(&dyn Fn(u64)) -> ValidationReport + Send + Sync + 'a,
    ) -> CheckUnit<'a> {
        CheckUnit { samples, check: Box::new(check) }
    }
}

impl std::fmt::Debug for CheckUnit<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CheckUnit").field("samples", &self.samples).finish_non_exhaustive()
    }
}

/// Samples a cache's format stores without checksums (the original tools write none): the plan
/// reads them and checks what it can (decoding, shapes, JSON), but not their bytes, so they are
/// reported as [`crate::Unchecked`] (with the number of samples checked) and the cache is never
/// called clean.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NoChecksums {
    /// The cache.
    pub path: PathBuf,
    /// The tool that wrote them.
    pub writer: &'static str,
    /// What was checked instead, and how to get checksums.
    pub next_step: &'static str,
}

/// Everything checking one cache takes.
///
/// Build one with struct update syntax over [`CheckPlan::new`], which fills in an empty plan:
/// `CheckPlan { units, keys, selected, ..CheckPlan::new(structure, repair) }`.
#[derive(Debug)]
pub struct CheckPlan<'a> {
    /// The checks made once for the whole cache (logs, markers, sizes, indexes), already run.
    pub structure: ValidationReport,
    /// The sample checks, not yet run.
    pub units: Vec<CheckUnit<'a>>,
    /// Keys in the cache (the sample's denominator).
    pub keys: u64,
    /// Keys whose samples the units check.
    pub selected: u64,
    /// Samples the format stores without checksums, reported as unchecked.
    pub no_checksums: Option<NoChecksums>,
    /// How a damaged key can be repaired, for the advice after the damaged keys.
    pub repair: &'static str,
    /// How damaged files whose keys cannot be named are repaired, when the format has such files
    /// (a damaged segment of a stowage HDF5 cache): then they are listed with this advice.
    pub file_repair: Option<&'static str>,
    /// What the checks cover when that is less than the samples (a bare hangar data directory
    /// holds no records: headers and sizes only), said after the verdict.
    pub scope: Option<&'static str>,
    /// Why a sample of the keys cannot be drawn and everything is checked instead, said as a note
    /// when one was asked for, after `--sample does not apply to `: `a bare hangar data directory
    /// (it holds no records): every file was checked`.
    pub sample_ignored: Option<&'static str>,
}

impl<'a> CheckPlan<'a> {
    /// A plan with `structure` alone: no units, no keys, every sample covered by checksums, no
    /// files listed on their own.
    pub fn new(structure: ValidationReport, repair: &'static str) -> CheckPlan<'a> {
        CheckPlan {
            structure,
            units: Vec::new(),
            keys: 0,
            selected: 0,
            no_checksums: None,
            repair,
            file_repair: None,
            scope: None,
            sample_ignored: None,
        }
    }

    /// The plan of a format with nothing more specific to say: `structure` is a whole validation
    /// (its samples are the keys), with the generic repair advice for keys and files.
    pub fn validated(structure: ValidationReport) -> CheckPlan<'a> {
        CheckPlan {
            keys: structure.samples_checked,
            selected: structure.samples_checked,
            file_repair: Some(GENERIC_FILE_REPAIR),
            ..CheckPlan::new(structure, GENERIC_REPAIR)
        }
    }
}

/// Why a factory made no plan for a cache that does not open
/// ([`crate::BackendFactory::check_plan_unopened`]).
#[derive(Debug, thiserror::Error)]
pub enum Unplanned {
    /// The error to report (usually the open's).
    #[error(transparent)]
    Error(#[from] Error),
    /// A sample of the keys was asked for, but the keys cannot be listed while the cache does not
    /// open; without a sample the factory checks `scope` (`"the whole cache"`, `"every
    /// segment"`).
    #[error("{error} (the keys cannot be listed, so no sample of them can be drawn)")]
    NoSample {
        /// Why the cache does not open.
        error: Error,
        /// What checking without a sample covers.
        scope: &'static str,
    },
}

/// A problem from an error: its file when the error names one, the key (`key`, else the one the
/// error names), the rest as detail.
pub fn problem_of(e: &Error, key: Option<&str>) -> Problem {
    let (path, detail, named) = match e {
        Error::Corrupted { path, key, detail } => (Some(path.clone()), detail.clone(), key.clone()),
        Error::Incompatible { path, detail } => (Some(path.clone()), detail.clone(), None),
        Error::Io { path, source } => (Some(path.clone()), source.to_string(), None),
        other => (None, other.to_string(), None),
    };
    Problem { path, key: key.map(str::to_owned).or(named), detail }
}

/// The report of a cache whose damage keeps it from opening or validating: `Error::Corrupted` is
/// one problem in the file it names (finding damage is the check's job); any other error is
/// returned.
pub fn damage_report(e: Error) -> Result<ValidationReport> {
    match e {
        Error::Corrupted { .. } => Ok(ValidationReport {
            files_checked: 1,
            problems: vec![problem_of(&e, None)],
            ..Default::default()
        }),
        other => Err(other),
    }
}

/// Reports `missing`, the file that tells a stowage cache from its original tool's, as lost when
/// any of `stowage_files` (stowage's own files, found beside it) is there: stowage wrote this
/// cache, so reading it as the original tool's would hide damage. `lost` ends the sentence
/// ("commit log is lost, ...").
///
/// ```
/// use std::path::{Path, PathBuf};
/// use stowage_core::check_plan::report_lost_marker;
/// let mut report = stowage_core::ValidationReport::default();
/// let log = Path::new("/c/log");
/// report_lost_marker(&mut report, log, &[PathBuf::from("/c/run.bin")], "log is lost");
/// assert_eq!(report.problems.len(), 1);
/// assert!(report.problems[0].detail.starts_with("missing, but 1 file of stowage's are here"));
/// report_lost_marker(&mut report, log, &[], "log is lost");
/// assert_eq!(report.problems.len(), 1, "no file of stowage's: nothing to report");
/// ```
pub fn report_lost_marker(
    report: &mut ValidationReport,
    missing: &Path,
    stowage_files: &[PathBuf],
    lost: &str,
) {
    if let Some(first) = stowage_files.first() {
        let n = stowage_files.len();
        report.problem(
            Some(missing),
            None,
            format!(
                "missing, but {n} {} of stowage's are here ({} among them): stowage wrote this \
                 cache and its {lost}",
                if n == 1 { "file" } else { "files" },
                first.display()
            ),
        );
    }
}

/// Every JSON field of `sample` parses; `path` is the file the sample came from, when known.
pub fn check_json(report: &mut ValidationReport, path: Option<&Path>, key: &str, sample: &Sample) {
    for (name, value) in sample.fields() {
        if let Value::Json(text) = value
            && let Err(e) = serde_json::from_str::<serde_json::Value>(text)
        {
            report.problem(path, Some(key), format!("field {name:?} is not valid JSON: {e}"));
        }
    }
}

/// Reads `key` through `source` (which checks its checksums, where the format has them) and
/// checks its JSON fields; a problem when it is missing or damaged. Counts one sample.
pub fn check_key<R: Reader + ?Sized>(report: &mut ValidationReport, source: &R, key: &str) {
    report.samples_checked += 1;
    match source.get(key) {
        Ok(Some(sample)) => check_json(report, None, key, &sample),
        Ok(None) => report.problem(
            Some(source.path()),
            Some(key),
            "listed among the keys but not found by a lookup",
        ),
        Err(e) => report.problems.push(Problem {
            path: None,
            key: Some(key.to_owned()),
            detail: e.to_string(),
        }),
    }
}

/// Units of [`KEYS_PER_UNIT`] keys, each key checked by `check` (one progress step per key).
pub fn key_units<'a, F>(keys: &[String], check: F) -> Vec<CheckUnit<'a>>
where
    F: Fn(&mut ValidationReport, &str) + Copy + Send + Sync + 'a,
{
    keys.chunks(KEYS_PER_UNIT)
        .map(|chunk| {
            let chunk = chunk.to_vec();
            CheckUnit::new(chunk.len() as u64, move |progress: &dyn Fn(u64)| {
                let mut report = ValidationReport::default();
                for key in &chunk {
                    check(&mut report, key);
                    progress(1);
                }
                report
            })
        })
        .collect()
}

/// The plan of a format with no plan of its own ([`crate::Reader::check_plan`]'s default):
/// without a sample, the reader's full validation (a `Corrupted` error from it is reported as a
/// problem); with one, the structure check once and each selected key read through
/// [`Reader::get`] with its JSON fields parsed ([`check_key`]), in runs of keys.
pub fn by_keys<'a, R: Reader + ?Sized>(
    reader: &'a R,
    selection: &Selection,
) -> Result<CheckPlan<'a>> {
    if !selection.is_sample() {
        let structure = match reader.validate(ValidationLevel::Full) {
            Ok(structure) => structure,
            Err(e) => damage_report(e)?,
        };
        return Ok(CheckPlan::validated(structure));
    }
    let structure = reader.validate(ValidationLevel::Structure)?;
    let keys = reader.keys()?;
    let selected = selection.select(&keys);
    Ok(CheckPlan {
        keys: keys.len() as u64,
        selected: selected.len() as u64,
        units: key_units(&selected, move |report, key| check_key(report, reader, key)),
        file_repair: Some(GENERIC_FILE_REPAIR),
        ..CheckPlan::new(structure, GENERIC_REPAIR)
    })
}

/// The structure check once, then every selected key read through [`Reader::get`] (which checks
/// its checksums) in runs of keys: the plan of a format whose samples do not split by file (a row
/// spread over every field's file, reads that a library serializes). A key list that cannot be
/// read after the structure check found damage leaves no key to check (the damage is reported);
/// otherwise its error is returned.
pub fn every_key<'a, R: Reader + ?Sized>(
    reader: &'a R,
    selection: &Selection,
    repair: &'static str,
) -> Result<CheckPlan<'a>> {
    let structure = reader.validate(ValidationLevel::Structure)?;
    let keys = match reader.keys() {
        Ok(keys) => keys,
        Err(_) if !structure.is_undamaged() => Vec::new(),
        Err(e) => return Err(e),
    };
    let selected = selection.select(&keys);
    Ok(CheckPlan {
        keys: keys.len() as u64,
        selected: selected.len() as u64,
        units: key_units(&selected, move |report, key| check_key(report, reader, key)),
        ..CheckPlan::new(structure, repair)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sample_is_seeded_sized_and_in_cache_order() {
        let keys: Vec<String> = (0..1000).map(|i| format!("k{i}")).collect();
        let pick = |fraction, seed| Selection { fraction, seed }.select(&keys);
        let tenth = pick(Some(0.1), 7);
        assert_eq!(tenth.len(), 100);
        assert_eq!(tenth, pick(Some(0.1), 7));
        assert_ne!(tenth, pick(Some(0.1), 8));
        let positions: Vec<usize> =
            tenth.iter().map(|k| keys.iter().position(|x| x == k).unwrap()).collect();
        assert!(positions.windows(2).all(|w| w[0] < w[1]));
        assert_eq!(pick(Some(0.0001), 7).len(), 1);
        assert_eq!(pick(None, 7), keys);
        assert_eq!(pick(Some(1.0), 7), keys);
        assert!(Selection { fraction: Some(0.5), seed: 0 }.is_sample());
        assert!(!Selection { fraction: Some(1.0), seed: 0 }.is_sample());
        assert!(!Selection::all().is_sample());
    }

    #[test]
    fn a_problem_names_the_file_and_the_key_the_error_names() {
        let e = Error::corrupted("/c/seg.arrow", "checksum 1 != 2").for_key("k");
        let p = problem_of(&e, None);
        assert_eq!(p.path.as_deref(), Some(Path::new("/c/seg.arrow")));
        assert_eq!(p.key.as_deref(), Some("k"));
        assert_eq!(p.detail, "checksum 1 != 2");
        assert_eq!(problem_of(&e, Some("other")).key.as_deref(), Some("other"));
        let e = Error::InvalidArgument { detail: "x".into() };
        assert_eq!(problem_of(&e, None).path, None);
    }

    #[test]
    fn only_corruption_is_a_damage_report() {
        let report = damage_report(Error::corrupted("/c/log", "torn")).unwrap();
        assert_eq!(report.files_checked, 1);
        assert_eq!(report.problems[0].path.as_deref(), Some(Path::new("/c/log")));
        let e = damage_report(Error::NotFound { what: "cache /c".into() }).unwrap_err();
        assert!(matches!(e, Error::NotFound { .. }), "{e}");
    }

    #[test]
    fn key_units_split_in_runs_and_report_progress_per_key() {
        let keys: Vec<String> = (0..KEYS_PER_UNIT + 3).map(|i| format!("k{i}")).collect();
        let units = key_units(&keys, |report, _key| report.samples_checked += 1);
        assert_eq!(units.iter().map(|u| u.samples).collect::<Vec<_>>(), [1024, 3]);
        let done = std::sync::atomic::AtomicU64::new(0);
        let tick = |n| {
            done.fetch_add(n, std::sync::atomic::Ordering::Relaxed);
        };
        let report = (units[1].check)(&tick);
        assert_eq!(report.samples_checked, 3);
        assert_eq!(done.into_inner(), 3);
    }
}
