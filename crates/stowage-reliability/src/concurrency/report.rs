//! The campaign's table: one row per backend, then every failure.

use super::{BackendReport, Config};
use crate::tables::{failure_list, table};
use stowage_conformance::Outcome;

/// The table of `reports` as markdown (or aligned plain text), with the command that reproduces
/// it and every failure below.
pub fn render(reports: &[BackendReport], config: &Config, command: &str, markdown: bool) -> String {
    let header = [
        "backend",
        "single-shot cases",
        "reader's view",
        "writer puts / flushes",
        "reader opens",
        "samples checked",
        "reader failures",
        "two writers: one winner",
        "killed writer: next writer in (max attempts)",
        "readers during finalize: rounds (opens)",
        "result",
    ];
    let rows: Vec<Vec<String>> = reports.iter().map(row).collect();
    let mut out = String::new();
    out.push_str(&format!(
        "Concurrency campaign: live trial {} s (1 writer process, {} reader threads, {} reader \
         processes), {} two-writer races, {} killed writers, {} readers-during-finalize rounds \
         per backend, seed {}.\n",
        config.seconds,
        super::live::READER_THREADS,
        super::live::READER_PROCESSES,
        config.races,
        config.kills,
        config.finalize_rounds,
        config.seed
    ));
    if config.preload > 0 {
        out.push_str(&format!(
            "Realistic form: every backend at its default options; the live writer first writes \
             {} distinct keys at full speed (flushing every {} samples on arrow, every {} on the \
             others) while the readers read, then {} s at its steady pace.\n",
            config.preload,
            crate::corruption::scale::realistic_flush_every("arrow"),
            crate::corruption::scale::realistic_flush_every("npy"),
            config.seconds
        ));
    }
    out.push_str(&format!("Command: `{command}`\n\n"));
    out.push_str(&table(&header, &rows, markdown));
    let failures: Vec<String> = reports.iter().flat_map(|r| r.failures()).collect();
    out.push_str(&failure_list(&failures));
    out
}

fn row(report: &BackendReport) -> Vec<String> {
    let single = report
        .single_shot
        .iter()
        .map(|(_, o)| match o {
            Outcome::Passed => "passed",
            Outcome::Skipped(_) => "SKIPPED",
            Outcome::Failed(_) => "FAILED",
        })
        .collect::<Vec<_>>()
        .join(", ");
    let (view, writer, opens, checked, failures) = match &report.live {
        None => (
            "SKIPPED (no concurrent_readers)".to_string(),
            "-".into(),
            "-".into(),
            "-".into(),
            "-".into(),
        ),
        Some(Err(_)) => ("FAILED".to_string(), "-".into(), "-".into(), "-".into(), "1".into()),
        Some(Ok(live)) => {
            let readers = live.readers();
            let view = if readers.views_grew == 0 {
                format!(
                    "snapshot at open ({} of {} opens saw unacknowledged commits)",
                    readers.saw_unacknowledged, readers.opens
                )
            } else {
                format!("grew while open in {} of {} opens", readers.views_grew, readers.opens)
            };
            (
                view,
                format!("{} / {}", live.writer.puts, live.writer.flushes),
                format!(
                    "{} ({} threads, {} processes)",
                    readers.opens, live.threads.opens, live.processes.opens
                ),
                readers.samples_checked.to_string(),
                readers.failures.to_string(),
            )
        }
    };
    let won = report.races.iter().filter(|r| r.is_ok()).count();
    let got_in: Vec<u32> =
        report.kills.iter().filter_map(|r| r.as_ref().ok().map(|k| k.attempts)).collect();
    let kills = format!(
        "{} of {} ({})",
        got_in.len(),
        report.kills.len(),
        got_in.iter().max().map_or("-".into(), |m| m.to_string())
    );
    let rounds_ok: Vec<u64> =
        report.finalize_rounds.iter().filter_map(|r| r.as_ref().ok().copied()).collect();
    let rounds = format!(
        "{} of {} ({})",
        rounds_ok.len(),
        report.finalize_rounds.len(),
        rounds_ok.iter().sum::<u64>()
    );
    let result = if report.failures().is_empty() { "pass" } else { "FAIL" };
    vec![
        report.backend.to_string(),
        single,
        view,
        writer,
        opens,
        checked,
        failures,
        format!("{won} of {}", report.races.len()),
        kills,
        rounds,
        result.to_string(),
    ]
}
