//! The campaign's table: one row per backend and fault kind, then every failure.

use super::trial::Verdict;
use super::{BackendReport, Config};
use crate::tables::{failure_list, table};
use std::collections::BTreeMap;

/// The table of `reports`, with the command that reproduces it and every failure below.
pub fn render(reports: &[BackendReport], config: &Config, command: &str, markdown: bool) -> String {
    let header = [
        "backend",
        "fault",
        "calls (dry run)",
        "trials",
        "passed",
        "not reached",
        "failed",
        "operation that reported it (trials)",
        "result",
    ];
    let mut rows = Vec::new();
    for report in reports {
        for kind in &report.kinds {
            let count = |p: fn(&Verdict) -> bool| kind.trials.iter().filter(|(_, v)| p(v)).count();
            let mut steps: BTreeMap<&str, usize> = BTreeMap::new();
            for (_, verdict) in &kind.trials {
                if let Verdict::Passed { step, .. } = verdict {
                    *steps.entry(step.split(' ').next().unwrap_or(step)).or_default() += 1;
                }
            }
            let steps: Vec<String> = steps.iter().map(|(s, n)| format!("{s} {n}")).collect();
            let failed = count(|v| matches!(v, Verdict::Failed(_))) + kind.error.iter().count();
            let not_reached = count(|v| matches!(v, Verdict::NotReached));
            rows.push(vec![
                report.backend.to_string(),
                kind.kind.label(),
                kind.calls.to_string(),
                kind.trials.len().to_string(),
                count(|v| matches!(v, Verdict::Passed { .. })).to_string(),
                not_reached.to_string(),
                failed.to_string(),
                steps.join(", "),
                if kind.not_called() {
                    "not called (no trial)"
                } else if failed + not_reached == 0 {
                    "pass"
                } else {
                    "FAIL"
                }
                .to_string(),
            ]);
        }
    }
    let mut out = format!(
        "Resource-fault campaign{}: up to {} fault points per backend and fault, seed {}.\n\
         Command: `{command}`\n\n",
        if config.realistic { " at default options, from 100,000-sample caches" } else { "" },
        config.points,
        config.seed
    );
    out.push_str(&table(&header, &rows, markdown));
    let failures: Vec<String> = reports.iter().flat_map(|r| r.failures()).collect();
    out.push_str(&failure_list(&failures));
    out
}
