//! Counting trial outcomes per backend and per file kind, and printing them as a table.

use super::cli_check::CliVerdict;
use super::trial::{DamageKind, Outcome, Trial, Verdict};
use crate::tables::{failure_list, table};
use std::collections::BTreeMap;
use std::fmt::Write as _;

/// Outcome counts of the trials on one kind of file (or on a whole backend).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Tally {
    /// Files of this kind in the pristine cache.
    pub files: u64,
    /// Flip trials run.
    pub flips: u64,
    /// Flips the open refused.
    pub flips_detected_at_open: u64,
    /// Flips `validate(Full)` reported.
    pub flips_detected_by_validate: u64,
    /// Flips nothing noticed and nothing suffered from.
    pub flips_harmless: u64,
    /// Flips a `get` suffered from (error, lost key) but validate and open missed.
    pub flips_missed: u64,
    /// Truncation trials run.
    pub truncations: u64,
    /// Truncations reported by open or validate.
    pub truncations_detected: u64,
    /// Truncations neither open nor validate reported.
    pub truncations_missed: u64,
    /// Trials in which a `get` returned bytes other than those written.
    pub wrong_data: u64,
    /// Trials that panicked, aborted or hung.
    pub panics: u64,
    /// Detections at open whose error did not name the damaged file (detected, but less helpful).
    pub open_errors_not_naming_file: u64,
    /// Detections in which validate returned an error instead of a report.
    pub validate_errors: u64,
    /// Trials in which `len()` disagreed with `keys()`.
    pub inconsistent: u64,
    /// The `stowage` command's results on the same trials.
    pub cli: CliTally,
}

/// Counts of the `stowage` command's results ([`CliVerdict`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CliTally {
    /// Trials where the library saw damage and `verify` reported it (exit 1) or could not open
    /// the copy (exit 2).
    pub detected: u64,
    /// Trials where the library saw no damage and `verify` agreed (exit 0, or 3).
    pub clean: u64,
    /// Trials where the library saw no damage but `verify` listed problems (exit 1): stricter
    /// than the library, not a failure.
    pub stricter: u64,
    /// `stowage get` runs made.
    pub gets: u64,
    /// Failures: `verify` said clean (or `no problem`) about damage the library sees.
    pub said_clean: u64,
    /// Failures: the command refused a copy or key where nothing reported damage.
    pub refused: u64,
    /// Failures: `get` exited 0 with other bytes than the pristine sample's.
    pub wrong_data: u64,
    /// Failures: a signal, an exit status outside 0-3, or a timeout.
    pub crashed: u64,
    /// Trials the command was not run on (a backend it does not read).
    pub not_run: u64,
}

impl CliTally {
    /// Counts one trial's command verdict.
    pub fn count(&mut self, verdict: &CliVerdict) {
        match verdict {
            CliVerdict::NotRun { .. } => self.not_run += 1,
            CliVerdict::Passed { verify_exit, damage, gets } => {
                self.gets += gets;
                match (damage, verify_exit) {
                    (true, _) => self.detected += 1,
                    (false, 1) => self.stricter += 1,
                    (false, _) => self.clean += 1,
                }
            }
            CliVerdict::SaidClean { .. } => self.said_clean += 1,
            CliVerdict::Refused { .. } => self.refused += 1,
            CliVerdict::WrongData { .. } => self.wrong_data += 1,
            CliVerdict::Crashed { .. } => self.crashed += 1,
        }
    }

    /// Adds `other`'s counts to these.
    pub fn add(&mut self, other: &CliTally) {
        let CliTally {
            detected,
            clean,
            stricter,
            gets,
            said_clean,
            refused,
            wrong_data,
            crashed,
            not_run,
        } = other;
        self.detected += detected;
        self.clean += clean;
        self.stricter += stricter;
        self.gets += gets;
        self.said_clean += said_clean;
        self.refused += refused;
        self.wrong_data += wrong_data;
        self.crashed += crashed;
        self.not_run += not_run;
    }

    /// Trials in which the command broke a rule.
    pub fn failures(&self) -> u64 {
        self.said_clean + self.refused + self.wrong_data + self.crashed
    }
}

impl Tally {
    /// Counts one trial of `kind` with `outcome`.
    pub fn count(&mut self, kind: DamageKind, outcome: &Outcome) {
        self.cli.count(&outcome.cli);
        let verdict = &outcome.verdict;
        let flip = kind == DamageKind::Flip;
        if flip {
            self.flips += 1;
        } else {
            self.truncations += 1;
        }
        let detected = |t: &mut Tally| {
            if !flip {
                t.truncations_detected += 1;
            }
        };
        match verdict {
            Verdict::DetectedAtOpen { names_file } => {
                self.flips_detected_at_open += u64::from(flip);
                detected(self);
                self.open_errors_not_naming_file += u64::from(!names_file);
            }
            Verdict::DetectedByValidate { by_error } => {
                self.flips_detected_by_validate += u64::from(flip);
                detected(self);
                self.validate_errors += u64::from(*by_error);
            }
            Verdict::Undetected if flip => self.flips_harmless += 1,
            Verdict::Undetected => self.truncations_missed += 1,
            Verdict::Missed { .. } if flip => self.flips_missed += 1,
            Verdict::Missed { .. } => self.truncations_missed += 1,
            Verdict::WrongData { .. } => self.wrong_data += 1,
            Verdict::Inconsistent { .. } => self.inconsistent += 1,
            Verdict::Panicked { .. } => self.panics += 1,
        }
    }

    /// Adds `other`'s counts to these.
    pub fn add(&mut self, other: &Tally) {
        let Tally {
            files,
            flips,
            flips_detected_at_open,
            flips_detected_by_validate,
            flips_harmless,
            flips_missed,
            truncations,
            truncations_detected,
            truncations_missed,
            wrong_data,
            panics,
            open_errors_not_naming_file,
            validate_errors,
            inconsistent,
            cli,
        } = other;
        self.files += files;
        self.flips += flips;
        self.flips_detected_at_open += flips_detected_at_open;
        self.flips_detected_by_validate += flips_detected_by_validate;
        self.flips_harmless += flips_harmless;
        self.flips_missed += flips_missed;
        self.truncations += truncations;
        self.truncations_detected += truncations_detected;
        self.truncations_missed += truncations_missed;
        self.wrong_data += wrong_data;
        self.panics += panics;
        self.open_errors_not_naming_file += open_errors_not_naming_file;
        self.validate_errors += validate_errors;
        self.inconsistent += inconsistent;
        self.cli.add(cli);
    }

    /// Library rules broken: missed flips and truncations, wrong data, `len()` against `keys()`,
    /// panics. (A trial can also break a command rule: [`CliTally::failures`].)
    pub fn failures(&self) -> u64 {
        self.flips_missed
            + self.truncations_missed
            + self.wrong_data
            + self.inconsistent
            + self.panics
    }
}

/// A trial that broke a rule, with everything needed to replay it.
#[derive(Debug, Clone)]
pub struct Failure {
    /// The trial (id, seed, file, offset).
    pub trial: Trial,
    /// What happened.
    pub outcome: Outcome,
}

/// The results of one backend's campaign.
#[derive(Debug, Clone)]
pub struct BackendReport {
    /// The backend's name.
    pub backend: &'static str,
    /// The campaign seed (each trial's own seed derives from it and the trial id).
    pub seed: u64,
    /// Counts per file kind.
    pub by_kind: BTreeMap<String, Tally>,
    /// Every failing trial.
    pub failures: Vec<Failure>,
    /// Wall time of the trials.
    pub elapsed: std::time::Duration,
    /// Failures outside any trial: the `stowage` command failing on the undamaged cache.
    pub setup_failures: Vec<String>,
    /// What the pristine cache was: samples, files, and how it was written.
    pub pristine: String,
}

impl BackendReport {
    /// An empty report; `files_per_kind` fills in the `files` column.
    pub fn new(backend: &'static str, seed: u64, kinds: &[String]) -> BackendReport {
        let mut by_kind: BTreeMap<String, Tally> = BTreeMap::new();
        for kind in kinds {
            by_kind.entry(kind.clone()).or_default().files += 1;
        }
        BackendReport {
            backend,
            seed,
            by_kind,
            failures: Vec::new(),
            elapsed: std::time::Duration::ZERO,
            setup_failures: Vec::new(),
            pristine: String::new(),
        }
    }

    /// Counts `trial`'s outcome under `file_kind`, keeping it as a failure when it is one.
    pub fn record(&mut self, file_kind: &str, trial: &Trial, outcome: Outcome) {
        self.by_kind.entry(file_kind.to_string()).or_default().count(trial.id.kind, &outcome);
        if outcome.is_failure(trial.id.kind) {
            self.failures.push(Failure { trial: trial.clone(), outcome });
        }
    }

    /// The counts over every file kind.
    pub fn total(&self) -> Tally {
        let mut total = Tally::default();
        self.by_kind.values().for_each(|t| total.add(t));
        total
    }

    /// Whether no trial broke a rule.
    pub fn is_success(&self) -> bool {
        self.failures.is_empty() && self.setup_failures.is_empty()
    }

    /// The report as a section: a heading, a table of counts per file kind and a total row, the
    /// notes, and each failure (or `No failures.`) with the command that replays it. `markdown` selects markdown
    /// table syntax; otherwise columns are aligned as plain text.
    pub fn render(&self, markdown: bool) -> String {
        let total = self.total();
        let mut out = String::new();
        let heading = format!(
            "{} — {} flips, {} truncations, seed {}, {:.1} s",
            self.backend,
            total.flips,
            total.truncations,
            self.seed,
            self.elapsed.as_secs_f64()
        );
        if markdown {
            let _ = writeln!(out, "### {heading}\n");
        } else {
            let _ = writeln!(out, "{heading}");
        }
        if !self.pristine.is_empty() {
            let _ = writeln!(out, "{}\n", self.pristine);
        }
        let mut rows: Vec<Vec<String>> =
            self.by_kind.iter().map(|(kind, tally)| row(&format!("`{kind}`"), tally)).collect();
        rows.push(row("all", &total));
        out.push_str(&tally_table("file kind", &rows, markdown));
        let _ = writeln!(
            out,
            "\nOpen errors not naming the damaged file: {}; validate errors instead of reports: {}.",
            total.open_errors_not_naming_file, total.validate_errors
        );
        let _ = writeln!(out, "\nThe `stowage` command on the same copies (`verify`, `get`):\n");
        let cli_rows: Vec<Vec<String>> = self
            .by_kind
            .iter()
            .map(|(kind, tally)| cli_row(&format!("`{kind}`"), &tally.cli))
            .chain(std::iter::once(cli_row("all", &total.cli)))
            .collect();
        out.push_str(&cli_table("file kind", &cli_rows, markdown));
        let mut failures: Vec<String> =
            self.setup_failures.iter().map(|f| format!("{}: {f}", self.backend)).collect();
        failures.extend(self.failures.iter().map(|failure| {
            format!(
                "{}: {} — replay: `corruption --seed {} --backends {} --replay {}`",
                failure.trial,
                describe(&failure.outcome, failure.trial.id.kind),
                self.seed,
                self.backend,
                failure.trial.id
            )
        }));
        out.push_str(&failure_list(&failures));
        out
    }
}

/// One line describing a failing outcome: the library's failure, the command's, or both.
pub fn describe(outcome: &Outcome, kind: DamageKind) -> String {
    let library = match &outcome.verdict {
        Verdict::Undetected => Some("truncation not reported by open or validate(Full)".into()),
        Verdict::Missed { detail } => Some(format!("validate miss: {detail}")),
        Verdict::WrongData { detail } => Some(format!("WRONG DATA: {detail}")),
        Verdict::Inconsistent { detail } => Some(format!("keys()/len() disagree: {detail}")),
        Verdict::Panicked { detail } => Some(format!("PANIC: {detail}")),
        Verdict::DetectedAtOpen { .. } | Verdict::DetectedByValidate { .. } => None,
    };
    let cli = match &outcome.cli {
        CliVerdict::SaidClean { detail } => Some(format!("CLI SAID CLEAN: {detail}")),
        CliVerdict::Refused { detail } => Some(format!("CLI REFUSED: {detail}")),
        CliVerdict::WrongData { detail } => Some(format!("CLI WRONG DATA: {detail}")),
        CliVerdict::Crashed { detail } => Some(format!("CLI CRASHED: {detail}")),
        CliVerdict::NotRun { .. } | CliVerdict::Passed { .. } => None,
    };
    // A harmless flip (undetected) may come with a command failure: name only what failed.
    let library = library.filter(|_| outcome.verdict.is_failure(kind));
    match (library, cli) {
        (Some(l), Some(c)) => format!("{l}; {c}"),
        (Some(l), None) => l,
        (None, Some(c)) => c,
        (None, None) => "detected".into(),
    }
}

/// The columns of a table of [`CliTally`] rows, after the label column.
const CLI_COLUMNS: [&str; 10] = [
    "verify detected",
    "verify clean, undamaged",
    "verify stricter",
    "gets",
    "said clean",
    "refused",
    "get wrong data",
    "crashed",
    "failures",
    "not run",
];

fn cli_row(label: &str, t: &CliTally) -> Vec<String> {
    let mut cells = vec![label.to_string()];
    cells.extend(
        [
            t.detected,
            t.clean,
            t.stricter,
            t.gets,
            t.said_clean,
            t.refused,
            t.wrong_data,
            t.crashed,
            t.failures(),
            t.not_run,
        ]
        .map(|n| n.to_string()),
    );
    cells
}

/// `rows` under a header of `label` then [`CLI_COLUMNS`].
fn cli_table(label: &str, rows: &[Vec<String>], markdown: bool) -> String {
    let header: Vec<&str> = std::iter::once(label).chain(CLI_COLUMNS).collect();
    table(&header, rows, markdown)
}

/// The columns of a table of [`Tally`] rows, after the label column.
const COLUMNS: [&str; 12] = [
    "files",
    "flips",
    "detected at open",
    "detected by validate",
    "harmless",
    "missed",
    "truncations",
    "detected",
    "missed",
    "wrong data",
    "keys/len disagree",
    "panics",
];

fn row(label: &str, t: &Tally) -> Vec<String> {
    let mut cells = vec![label.to_string()];
    cells.extend(
        [
            t.files,
            t.flips,
            t.flips_detected_at_open,
            t.flips_detected_by_validate,
            t.flips_harmless,
            t.flips_missed,
            t.truncations,
            t.truncations_detected,
            t.truncations_missed,
            t.wrong_data,
            t.inconsistent,
            t.panics,
        ]
        .map(|n| n.to_string()),
    );
    cells
}

/// `rows` under a header of `label` then [`COLUMNS`].
fn tally_table(label: &str, rows: &[Vec<String>], markdown: bool) -> String {
    let header: Vec<&str> = std::iter::once(label).chain(COLUMNS).collect();
    table(&header, rows, markdown)
}

/// A summary over backends: one row of totals per backend, for the library and for the command.
pub fn summary(reports: &[BackendReport], markdown: bool) -> String {
    let rows: Vec<Vec<String>> = reports.iter().map(|r| row(r.backend, &r.total())).collect();
    let cli_rows: Vec<Vec<String>> =
        reports.iter().map(|r| cli_row(r.backend, &r.total().cli)).collect();
    format!(
        "{}\nThe `stowage` command:\n\n{}",
        tally_table("backend", &rows, markdown),
        cli_table("backend", &cli_rows, markdown)
    )
}
