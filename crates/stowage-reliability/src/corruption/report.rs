//! Counting trial outcomes per backend and per file kind, and printing them as a table.

use super::trial::{DamageKind, Trial, Verdict};
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
}

impl Tally {
    /// Counts one trial of `kind` with outcome `verdict`.
    pub fn count(&mut self, kind: DamageKind, verdict: &Verdict) {
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
    }

    /// Trials that broke a rule: missed flips and truncations, wrong data, panics.
    pub fn failures(&self) -> u64 {
        self.flips_missed + self.truncations_missed + self.wrong_data + self.panics
    }
}

/// A trial that broke a rule, with everything needed to replay it.
#[derive(Debug, Clone)]
pub struct Failure {
    /// The trial (id, seed, file, offset).
    pub trial: Trial,
    /// What happened.
    pub verdict: Verdict,
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
        }
    }

    /// Counts `trial`'s outcome under `file_kind`, keeping it as a failure when it is one.
    pub fn record(&mut self, file_kind: &str, trial: &Trial, verdict: Verdict) {
        self.by_kind.entry(file_kind.to_string()).or_default().count(trial.id.kind, &verdict);
        if verdict.is_failure(trial.id.kind) {
            self.failures.push(Failure { trial: trial.clone(), verdict });
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
        self.failures.is_empty()
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
        let mut rows: Vec<Vec<String>> =
            self.by_kind.iter().map(|(kind, tally)| row(&format!("`{kind}`"), tally)).collect();
        rows.push(row("all", &total));
        out.push_str(&tally_table("file kind", &rows, markdown));
        let _ = writeln!(
            out,
            "\nOpen errors not naming the damaged file: {}; validate errors instead of reports: {}.",
            total.open_errors_not_naming_file, total.validate_errors
        );
        let failures: Vec<String> = self
            .failures
            .iter()
            .map(|failure| {
                format!(
                    "{}: {} — replay: `corruption --seed {} --backends {} --replay {}`",
                    failure.trial,
                    describe(&failure.verdict),
                    self.seed,
                    self.backend,
                    failure.trial.id
                )
            })
            .collect();
        out.push_str(&failure_list(&failures));
        out
    }
}

/// One line describing a failing verdict.
fn describe(verdict: &Verdict) -> String {
    match verdict {
        Verdict::Undetected => "truncation not reported by open or validate(Full)".into(),
        Verdict::Missed { detail } => format!("validate miss: {detail}"),
        Verdict::WrongData { detail } => format!("WRONG DATA: {detail}"),
        Verdict::Panicked { detail } => format!("PANIC: {detail}"),
        Verdict::DetectedAtOpen { .. } | Verdict::DetectedByValidate { .. } => "detected".into(),
    }
}

/// The columns of a table of [`Tally`] rows, after the label column.
const COLUMNS: [&str; 11] = [
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

/// A one-table summary over backends: one row of totals per backend.
pub fn summary(reports: &[BackendReport], markdown: bool) -> String {
    let rows: Vec<Vec<String>> = reports.iter().map(|r| row(r.backend, &r.total())).collect();
    tally_table("backend", &rows, markdown)
}
