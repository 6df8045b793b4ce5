//! The campaign's table: per target, the trials by the step their kill landed in, and every
//! failure with what broke.

use super::trial::Verdict;
use crate::tables::{failure_list, table};

/// The steps a kill can land in, in the order they run.
const LANDINGS: [&str; 6] = ["startup", "create", "open", "copy", "flush", "finalize"];

/// One target's trials.
#[derive(Debug, Clone)]
pub struct TargetReport {
    /// The backend written (`--to`).
    pub target: &'static str,
    /// Each trial's number and verdict.
    pub trials: Vec<(u64, Verdict)>,
}

impl TargetReport {
    /// No trials yet.
    pub fn new(target: &'static str) -> TargetReport {
        TargetReport { target, trials: Vec::new() }
    }

    /// Adds trial `number`.
    pub fn add(&mut self, number: u64, verdict: Verdict) {
        self.trials.push((number, verdict));
    }

    /// Every failure, one line each.
    pub fn failures(&self) -> Vec<String> {
        self.trials
            .iter()
            .filter_map(|(n, v)| match v {
                Verdict::Failed { why, .. } => Some(format!("trial {n}: {why}")),
                _ => None,
            })
            .collect()
    }

    fn landed_in(&self, step: &str) -> usize {
        self.trials
            .iter()
            .filter(|(_, v)| match v {
                Verdict::Passed { landed } | Verdict::Failed { landed, .. } => landed == step,
                Verdict::NotKilled => false,
            })
            .count()
    }
}

/// The table of every target, then the failures.
pub fn summary(reports: &[TargetReport], markdown: bool) -> String {
    let mut header = vec!["target", "trials"];
    header.extend(LANDINGS.iter().copied());
    header.extend(["not killed", "failed"]);
    let rows: Vec<Vec<String>> = reports
        .iter()
        .map(|r| {
            let mut row = vec![r.target.to_owned(), r.trials.len().to_string()];
            row.extend(LANDINGS.iter().map(|s| r.landed_in(s).to_string()));
            let not_killed = r.trials.iter().filter(|(_, v)| *v == Verdict::NotKilled).count();
            row.push(not_killed.to_string());
            row.push(r.failures().len().to_string());
            row
        })
        .collect();
    let failures: Vec<String> = reports.iter().flat_map(|r| r.failures()).collect();
    format!("{}{}", table(&header, &rows, markdown), failure_list(&failures))
}
