//! The campaign's tallies per backend and failure model, as a text or markdown table.

use crate::crash::trial::{FailureModel, TrialReport};
use crate::crash::verify::RecoveredState;
use std::fmt::Write;

/// The counts of one backend under one failure model.
#[derive(Debug, Clone, Default)]
pub struct Tally {
    /// Trials run.
    pub trials: u64,
    /// Kills that landed inside `flush`.
    pub in_flush: u64,
    /// Inside `finalize`.
    pub in_finalize: u64,
    /// Inside Arrow's `compact`.
    pub in_compaction: u64,
    /// Inside a batch of puts.
    pub in_put: u64,
    /// Inside `create`.
    pub in_create: u64,
    /// Between two ops, or after the last.
    pub between: u64,
    /// Samples read and compared.
    pub samples_checked: u64,
    /// Samples acknowledged by a completed flush before the kill (each had to be there).
    pub acknowledged: u64,
    /// Trials whose cache was resumed, written and read back.
    pub resumed: u64,
    /// Trials whose cache was finalized (and refused further puts, as declared).
    pub complete: u64,
    /// Trials with no cache left (killed before any flush): created again and written.
    pub absent: u64,
    /// Power-loss trials where the power cut dropped unsynced data or names.
    pub power_cut_dropped: u64,
    /// Power-loss trials where the power cut tore a write (kept part of a file's unsynced bytes).
    pub torn: u64,
    /// Each failing trial's message (it names the seed).
    pub failures: Vec<String>,
}

impl Tally {
    /// Adds one trial.
    pub fn add(&mut self, trial: &TrialReport) {
        self.trials += 1;
        *match trial.inside {
            Some("flush") => &mut self.in_flush,
            Some("finalize") => &mut self.in_finalize,
            Some("compact") => &mut self.in_compaction,
            Some("put") => &mut self.in_put,
            Some("create") => &mut self.in_create,
            _ => &mut self.between,
        } += 1;
        self.acknowledged += trial.acknowledged as u64;
        if let Some(verified) = &trial.verified {
            self.samples_checked += verified.samples_checked;
            *match verified.state {
                RecoveredState::Resumed => &mut self.resumed,
                RecoveredState::Complete => &mut self.complete,
                RecoveredState::Absent => &mut self.absent,
            } += 1;
        }
        if trial.rebuilt.is_some_and(|r| r.lost > 0) {
            self.power_cut_dropped += 1;
        }
        if trial.rebuilt.is_some_and(|r| r.torn > 0) {
            self.torn += 1;
        }
        self.failures.extend(trial.failure.clone());
    }

    /// Kills outside flush, finalize and compaction.
    pub fn elsewhere(&self) -> u64 {
        self.in_put + self.in_create + self.between
    }
}

/// Every backend's tallies, in the order they ran.
#[derive(Debug, Clone, Default)]
pub struct CampaignReport {
    /// `(backend, model, tally)`.
    pub rows: Vec<(String, FailureModel, Tally)>,
}

impl CampaignReport {
    /// The tally of `backend` under `model`, created empty on first use.
    pub fn tally(&mut self, backend: &str, model: FailureModel) -> &mut Tally {
        let at = match self.rows.iter().position(|(b, m, _)| b == backend && *m == model) {
            Some(at) => at,
            None => {
                self.rows.push((backend.to_owned(), model, Tally::default()));
                self.rows.len() - 1
            }
        };
        &mut self.rows[at].2
    }

    /// Every failure message.
    pub fn failures(&self) -> impl Iterator<Item = &str> {
        self.rows.iter().flat_map(|(_, _, t)| t.failures.iter().map(String::as_str))
    }

    /// The table, as markdown or as aligned text, then the failures (each with its seed).
    pub fn render(&self, markdown: bool) -> String {
        let header = [
            "backend",
            "failure",
            "trials",
            "killed in flush",
            "in finalize",
            "in compaction",
            "elsewhere (put / create / between)",
            "acknowledged samples",
            "samples checked",
            "resumed / complete / absent",
            "power cut dropped data",
            "power cut tore a write",
            "failures",
        ];
        let rows: Vec<Vec<String>> = self
            .rows
            .iter()
            .map(|(backend, model, t)| {
                vec![
                    backend.clone(),
                    model.name().to_owned(),
                    t.trials.to_string(),
                    t.in_flush.to_string(),
                    t.in_finalize.to_string(),
                    t.in_compaction.to_string(),
                    format!("{} ({} / {} / {})", t.elsewhere(), t.in_put, t.in_create, t.between),
                    t.acknowledged.to_string(),
                    t.samples_checked.to_string(),
                    format!("{} / {} / {}", t.resumed, t.complete, t.absent),
                    match model {
                        FailureModel::PowerLoss => t.power_cut_dropped.to_string(),
                        FailureModel::Kill => "-".to_owned(),
                    },
                    match model {
                        FailureModel::PowerLoss => t.torn.to_string(),
                        FailureModel::Kill => "-".to_owned(),
                    },
                    t.failures.len().to_string(),
                ]
            })
            .collect();
        let mut out = table(&header, &rows, markdown);
        let failures: Vec<&str> = self.failures().collect();
        if !failures.is_empty() {
            out.push_str(if markdown { "\nFailing trials:\n\n" } else { "\nfailing trials:\n" });
            for failure in failures {
                let _ = writeln!(out, "- {failure}");
            }
        }
        out
    }
}

fn table(header: &[&str], rows: &[Vec<String>], markdown: bool) -> String {
    let mut out = String::new();
    if markdown {
        let _ = writeln!(out, "| {} |", header.join(" | "));
        let _ = writeln!(out, "|{}", "---|".repeat(header.len()));
        for row in rows {
            let _ = writeln!(out, "| {} |", row.join(" | "));
        }
        return out;
    }
    let widths: Vec<usize> = (0..header.len())
        .map(|i| rows.iter().map(|r| r[i].len()).chain([header[i].len()]).max().unwrap_or(0))
        .collect();
    let line = |cells: Vec<&str>| -> String {
        let padded: Vec<String> =
            cells.iter().zip(&widths).map(|(c, w)| format!("{c:<w$}")).collect();
        padded.join("  ").trim_end().to_owned()
    };
    let _ = writeln!(out, "{}", line(header.to_vec()));
    for row in rows {
        let _ = writeln!(out, "{}", line(row.iter().map(String::as_str).collect()));
    }
    out
}
