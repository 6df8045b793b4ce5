//! `stowage verify PATH [--sample FRACTION] [--jobs N]`: checks every byte the cache can check
//! (or a seeded sample of its keys) and lists every problem.
//!
//! The checks are the format's own, split in two ([`CheckPlan`]): the checks made once for the
//! whole cache (its structure: logs, markers, sizes, indexes), and independent [`CheckUnit`]s of
//! sample checks, one per data file where the format allows. The reader makes the plan
//! ([`stowage_core::Reader::check_plan`]); a cache that does not open (too damaged, or a bare
//! hangar data directory, which has no reader) gets its plan from its factory
//! ([`BackendFactory::check_plan_unopened`]). This module is the engine, the same for every
//! format, a third party's included: it runs the units on `--jobs` threads, puts their results
//! back in unit order (so the output is the same for any number of jobs), prints the problems,
//! the repair advice and the verdict, and chooses the exit status.

use std::collections::HashSet;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use stowage_core::check_plan::{CheckPlan, CheckUnit, Selection, Unplanned};
use stowage_core::{BackendFactory, Error, Registry, ValidationReport};

use crate::error::{CliError, Status, escape_control};
use crate::locate::{Located, locate};
use crate::open::directory_has_no_keys;
use crate::out::{Progress, count, display_key, note};

/// What to check.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct VerifyOptions {
    /// The fraction of keys whose samples are checked, in `(0, 1]`; `None` checks every one.
    pub sample: Option<f64>,
    /// Seed of the sample: the same seed picks the same keys.
    pub seed: u64,
    /// Threads checking units at once (at least 1).
    pub jobs: usize,
}

/// Prints each problem on its own line, then the damaged keys and how to repair them, then
/// the data no checksum covers, then `N samples, M files checked: clean` (status 0),
/// `...: K problems` (status 1) or `...: no problem, U samples unchecked` (status 3). A cache
/// that cannot be opened, and whose factory finds no damage to report, is an error (status 2).
/// Notes go to `notes`.
pub fn run(
    registry: &Registry,
    path: &Path,
    options: VerifyOptions,
    out: &mut dyn Write,
    notes: &mut dyn Write,
) -> Result<Status, CliError> {
    let recognized = match locate(registry, path)? {
        Located::Cache(recognized) => recognized,
        Located::Directory(found) => return Err(directory_has_no_keys(path, &found, "verify")),
    };
    let selection = Selection { fraction: options.sample, seed: options.seed };
    let factory: &dyn BackendFactory = recognized.factory;
    // Declared before the plan, which may borrow it.
    let reader;
    let plan = match factory.open_reader(path) {
        Ok(opened) => {
            reader = opened;
            match reader.check_plan(&selection) {
                Ok(plan) => plan,
                // A cache that opens but cannot list its keys (a damaged segment holds some; a
                // backend reads its segments on first use) is checked as one that does not open.
                Err(e @ Error::Corrupted { .. }) => {
                    factory.check_plan_unopened(path, e, &selection).map_err(unplanned)?
                }
                Err(e) => return Err(e.into()),
            }
        }
        Err(e) => factory.check_plan_unopened(path, e, &selection).map_err(unplanned)?,
    };
    if options.sample.is_some()
        && let Some(why) = plan.sample_ignored
    {
        note(notes, &format!("--sample does not apply to {why}"));
    }
    report(plan, options, out)
}

/// The error of a cache that does not open and that its factory made no plan for; when a sample
/// was asked for, with why none can be drawn and what verify checks without one.
fn unplanned(e: Unplanned) -> CliError {
    match e {
        Unplanned::Error(e) => e.into(),
        Unplanned::NoSample { error, scope } => CliError::new(format!(
            "{error} (the keys cannot be listed, so no sample of them can be drawn; run verify \
             without --sample to check {scope})"
        )),
    }
}

/// Runs the units on `jobs` threads and merges their reports into `structure`'s, in unit order;
/// a problem a unit finds for a file and key the structure check already named is dropped.
/// Returns the merged report and the units' sample count.
fn execute(
    units: Vec<CheckUnit<'_>>,
    structure: ValidationReport,
    options: VerifyOptions,
) -> (ValidationReport, u64) {
    let total: u64 = units.iter().map(|u| u.samples).sum();
    let progress = Progress::new(total, "verifying");
    let results: Mutex<Vec<Option<ValidationReport>>> =
        Mutex::new((0..units.len()).map(|_| None).collect());
    let next = AtomicUsize::new(0);
    std::thread::scope(|scope| {
        for _ in 0..options.jobs.clamp(1, units.len().max(1)) {
            scope.spawn(|| {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some(unit) = units.get(i) else { break };
                    let report = (unit.check)(&|steps| progress.inc(steps));
                    results.lock().unwrap_or_else(|e| e.into_inner())[i] = Some(report);
                }
            });
        }
    });
    progress.finish();
    let mut merged = structure;
    let known: HashSet<(Option<PathBuf>, Option<String>)> =
        merged.problems.iter().map(|p| (p.path.clone(), p.key.clone())).collect();
    let results = results.into_inner().unwrap_or_else(|e| e.into_inner());
    for report in results.into_iter().flatten() {
        merged.samples_checked += report.samples_checked;
        merged.files_checked += report.files_checked;
        merged.unchecked.extend(report.unchecked);
        merged.problems.extend(
            report
                .problems
                .into_iter()
                .filter(|p| p.key.is_none() || !known.contains(&(p.path.clone(), p.key.clone()))),
        );
    }
    (merged, total)
}

/// `clean`, `K problems`, or `no problem, U samples unchecked`: a cache holding data that no
/// checksum covers is never called clean.
fn verdict(report: &ValidationReport) -> String {
    if !report.problems.is_empty() {
        return count(report.problems.len() as u64, "problem");
    }
    if report.unchecked.is_empty() {
        return "clean".to_owned();
    }
    let samples: u64 = report.unchecked.iter().map(|u| u.samples).sum();
    let files = count(report.unchecked.len() as u64, "file");
    match samples {
        0 => format!("no problem, {files} unchecked"),
        _ => format!("no problem, {} unchecked", count(samples, "sample")),
    }
}

/// Exit 1 for problems, 3 for unchecked data and no problem, 0 for a clean cache.
fn status(report: &ValidationReport) -> Status {
    if !report.problems.is_empty() {
        Status::ProblemsFound
    } else if !report.unchecked.is_empty() {
        Status::CannotTell
    } else {
        Status::Success
    }
}

/// Each file holding data another writer added, with what to do next.
fn print_unchecked(report: &ValidationReport, out: &mut dyn Write) -> Result<(), CliError> {
    for unchecked in &report.unchecked {
        say!(out, "unchecked: {}", escape_control(&unchecked.to_string()));
    }
    Ok(())
}

/// Runs `plan` and prints its problems, the damaged keys and how to repair them, and the summary.
fn report(
    plan: CheckPlan<'_>,
    options: VerifyOptions,
    out: &mut dyn Write,
) -> Result<Status, CliError> {
    let (keys, selected, repair, file_repair, no_checksums, scope) =
        (plan.keys, plan.selected, plan.repair, plan.file_repair, plan.no_checksums, plan.scope);
    let (mut report, _) = execute(plan.units, plan.structure, options);
    if let Some(no_checksums) = no_checksums {
        report.unchecked.push(stowage_core::Unchecked {
            path: no_checksums.path,
            writer: no_checksums.writer.to_owned(),
            samples: report.samples_checked,
            next_step: no_checksums.next_step.to_owned(),
        });
    }
    for problem in &report.problems {
        say!(out, "{}", escape_control(&problem.to_string()));
    }
    let mut damaged: Vec<&str> = report.problems.iter().filter_map(|p| p.key.as_deref()).collect();
    damaged.sort_unstable();
    damaged.dedup();
    if !damaged.is_empty() {
        let shown: Vec<String> = damaged.iter().take(20).map(|k| display_key(k)).collect();
        let more = if damaged.len() > 20 {
            format!(" and {} more", damaged.len() - 20)
        } else {
            String::new()
        };
        say!(out, "damaged keys ({}): {}{more}", damaged.len(), shown.join(", "));
        say!(out, "to repair: {repair}");
    }
    if let Some(file_repair) = file_repair {
        let mut files: Vec<String> = report
            .problems
            .iter()
            .filter(|p| p.key.is_none())
            .filter_map(|p| p.path.as_ref().map(|path| path.display().to_string()))
            .collect();
        files.sort_unstable();
        files.dedup();
        if !files.is_empty() {
            say!(out, "damaged files ({}): {}", files.len(), escape_control(&files.join(", ")));
            say!(out, "to repair: {file_repair}");
        }
    }
    print_unchecked(&report, out)?;
    let samples = if selected < keys {
        let percent = 100.0 * selected as f64 / keys.max(1) as f64;
        format!("{} of {keys} samples ({percent:.1}%, seed {})", selected, options.seed)
    } else {
        count(report.samples_checked.max(selected), "sample")
    };
    let scope = scope.map(|scope| format!(" ({scope})")).unwrap_or_default();
    say!(
        out,
        "{samples}, {} checked: {}{scope}",
        count(report.files_checked, "file"),
        verdict(&report)
    );
    Ok(status(&report))
}

#[cfg(test)]
mod tests {
    use super::*;
    use stowage_core::Error;

    /// Unit `i` reports one problem for key `k{i}`, after a delay that makes later units finish
    /// first; unit 0 also repeats a problem the structure check already named.
    fn units() -> Vec<CheckUnit<'static>> {
        (0..6u64)
            .map(|i| {
                CheckUnit::new(2, move |progress: &dyn Fn(u64)| {
                    std::thread::sleep(std::time::Duration::from_millis(5 * (6 - i)));
                    let mut report = ValidationReport { samples_checked: 2, ..Default::default() };
                    report.problem(Some(Path::new("/c/f")), Some(&format!("k{i}")), "bad");
                    if i == 0 {
                        report.problem(Some(Path::new("/c/s")), Some("known"), "again");
                    }
                    progress(2);
                    report
                })
            })
            .collect()
    }

    #[test]
    fn results_come_in_unit_order_for_any_number_of_jobs_without_repeats() {
        let mut structure = ValidationReport::default();
        structure.problem(Some(Path::new("/c/s")), Some("known"), "structure");
        let options = |jobs| VerifyOptions { sample: None, seed: 0, jobs };
        let (one, total) = execute(units(), structure.clone(), options(1));
        let (four, _) = execute(units(), structure, options(4));
        assert_eq!(one, four);
        assert_eq!(total, 12);
        assert_eq!(one.samples_checked, 12);
        let keys: Vec<&str> = one.problems.iter().filter_map(|p| p.key.as_deref()).collect();
        assert_eq!(keys, ["known", "k0", "k1", "k2", "k3", "k4", "k5"]);
        assert_eq!(one.problems[0].detail, "structure");
    }

    #[test]
    fn a_sample_that_cannot_be_drawn_says_what_verify_checks_without_one() {
        let error = Error::corrupted("/c/segments/segment_0.arrow", "magic missing");
        let e = unplanned(Unplanned::NoSample { error, scope: "every segment" }).to_string();
        assert!(
            e.starts_with("corrupted data in /c/segments/segment_0.arrow: magic missing"),
            "{e}"
        );
        assert!(e.ends_with("run verify without --sample to check every segment)"), "{e}");
        let e = unplanned(Unplanned::Error(Error::NotFound { what: "x".into() })).to_string();
        assert_eq!(e, "not found: x");
    }
}
