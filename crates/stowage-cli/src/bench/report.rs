//! What `stowage bench` found, and its three renderings: a plain table, markdown, JSON.

use std::fmt::Write as _;

use serde::Serialize;

use super::measure::Measured;
use super::peers::PeerRate;
use super::reference::Reference;

/// The whole run.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// One entry per workload, in order.
    pub workloads: Vec<WorkloadReport>,
}

/// One workload through every backend.
#[derive(Debug, Clone, Serialize)]
pub struct WorkloadReport {
    /// The workload's name (`f32x512`, `dnanet`, `aenet`).
    pub name: String,
    /// Samples written.
    pub rows: usize,
    /// Random reads timed per measurement (a shuffled epoch over the rows).
    pub reads: usize,
    /// The physical references on the same bytes; `Err` says why they could not be measured.
    pub reference: Result<Reference, String>,
    /// One entry per backend asked for, in order.
    pub backends: Vec<BackendReport>,
    /// The Python peers run on the same files (empty without `--peers`).
    pub peers: Vec<PeerRate>,
}

/// One backend's outcome on one workload.
#[derive(Debug, Clone, Serialize)]
pub struct BackendReport {
    /// The backend's name.
    pub backend: &'static str,
    /// What happened.
    pub outcome: Outcome,
}

/// A backend measured, refused the workload's schema, or failed (a failure fails the run).
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// Written, verified and measured.
    Measured(Measured),
    /// The backend cannot hold the schema: why, naming the field (not a failure).
    Refused(String),
    /// Writing, verifying or reading failed: the error.
    Failed(String),
}

impl Report {
    /// Whether every backend that could hold its workload was written, verified and measured.
    pub fn all_verified(&self) -> bool {
        self.workloads
            .iter()
            .flat_map(|w| &w.backends)
            .all(|b| !matches!(b.outcome, Outcome::Failed(_)))
    }

    /// The report as JSON.
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("a report serializes")
    }

    /// The report as markdown: one table per workload, then the notes.
    pub fn to_markdown(&self) -> String {
        self.render(true)
    }

    /// The report as aligned plain text for a terminal.
    pub fn to_table(&self) -> String {
        self.render(false)
    }

    fn render(&self, markdown: bool) -> String {
        let mut out = String::new();
        for workload in &self.workloads {
            let heading = format!(
                "{}: {} samples written, {} random reads per measurement",
                workload.name, workload.rows, workload.reads
            );
            if markdown {
                let _ = writeln!(out, "### {heading}\n");
            } else {
                let _ = writeln!(out, "{heading}\n");
            }
            let rows = table_rows(workload);
            out.push_str(&render_rows(&rows, markdown));
            let notes = notes(workload);
            if !notes.is_empty() {
                out.push('\n');
            }
            for (name, why) in notes {
                // Markdown joins lines of one paragraph: a list keeps one note per line.
                let bullet = if markdown { "- " } else { "" };
                let _ = writeln!(out, "{bullet}{name}: {why}");
            }
            out.push('\n');
        }
        out
    }
}

const HEADER: [&str; 10] = [
    "backend",
    "write rows/s (durable)",
    "open",
    "get rows/s",
    "get p50 / p99",
    "get rows/s, no checksum",
    "get_batch rows/s",
    "bytes on disk / row",
    "peak RSS added",
    "verified",
];

/// The table's cells: a header, one line per measured backend, the physical reference, the
/// peers.
fn table_rows(workload: &WorkloadReport) -> Vec<Vec<String>> {
    let reference = workload.reference.as_ref().ok();
    let of = |rate: f64, limit: Option<f64>| match limit {
        Some(limit) if limit > 0.0 => format!("{} ({:.2}x)", rate_text(rate), rate / limit),
        _ => rate_text(rate),
    };
    let copy = reference.map(|r| r.raw_copy_rows_per_s);
    let fsync = reference.map(|r| r.write_fsync_rows_per_s);
    let mut rows = vec![HEADER.iter().map(|h| h.to_string()).collect::<Vec<_>>()];
    for backend in &workload.backends {
        let Outcome::Measured(m) = &backend.outcome else { continue };
        rows.push(vec![
            backend.backend.to_owned(),
            of(m.write_rows_per_s, fsync),
            format!("{:.2} ms", m.open_ms),
            of(m.get.rows_per_s, copy),
            format!("{:.1} / {:.1} µs", m.get.p50_us, m.get.p99_us),
            m.get_no_checksum.as_ref().map_or("n/a (always checked)".into(), |r| {
                format!("{} (p50 {:.1} µs)", of(r.rows_per_s, copy), r.p50_us)
            }),
            of(m.get_batch_rows_per_s, copy),
            bytes_text(m.bytes_on_disk as f64 / workload.rows.max(1) as f64),
            m.peak_rss_mib.map_or("unknown".into(), |mib| format!("{mib:.0} MiB")),
            "yes".into(),
        ]);
    }
    if let Some(r) = reference {
        rows.push(vec![
            "physical reference".into(),
            format!("{} (write + fdatasync)", rate_text(r.write_fsync_rows_per_s)),
            String::new(),
            format!("{} (raw copy, warm map)", rate_text(r.raw_copy_rows_per_s)),
            String::new(),
            String::new(),
            String::new(),
            bytes_text(r.bytes as f64 / workload.rows.max(1) as f64),
            String::new(),
            String::new(),
        ]);
    }
    for peer in &workload.peers {
        let Some(rows_per_s) = peer.rows_per_s else { continue };
        let mut row = vec![format!("python: {}", peer.name), String::new(), String::new()];
        // The peer reads what stowage's own backend of that name reads: how many times faster
        // stowage is (by batch where the peer reads by batch).
        let stowage = workload.backends.iter().find_map(|b| match &b.outcome {
            Outcome::Measured(m) if b.backend == peer.name => {
                Some(if peer.batched { m.get_batch_rows_per_s } else { m.get.rows_per_s })
            }
            _ => None,
        });
        row.push(match stowage {
            Some(rate) => format!("{} (stowage {:.1}x)", rate_text(rows_per_s), rate / rows_per_s),
            None => rate_text(rows_per_s),
        });
        row.extend(std::iter::repeat_n(String::new(), HEADER.len() - row.len()));
        rows.push(row);
    }
    rows
}

/// Why each backend that is not in the table is not: refused or failed.
fn notes(workload: &WorkloadReport) -> Vec<(String, String)> {
    let mut notes: Vec<(String, String)> = workload
        .backends
        .iter()
        .filter_map(|b| match &b.outcome {
            Outcome::Measured(_) => None,
            Outcome::Refused(why) => Some((b.backend.to_owned(), format!("not measured: {why}"))),
            Outcome::Failed(why) => Some((b.backend.to_owned(), format!("FAILED: {why}"))),
        })
        .collect();
    if let Err(why) = &workload.reference {
        notes.push(("physical reference".into(), format!("not measured: {why}")));
    }
    for peer in &workload.peers {
        let what = match peer.rows_per_s {
            Some(_) => peer.what.clone(),
            None => format!("not measured: {}", peer.what),
        };
        notes.push((format!("python: {}", peer.name), what));
    }
    notes
}

fn render_rows(rows: &[Vec<String>], markdown: bool) -> String {
    let mut out = String::new();
    if markdown {
        for (i, row) in rows.iter().enumerate() {
            let _ = writeln!(out, "| {} |", row.join(" | "));
            if i == 0 {
                let _ = writeln!(out, "|{}", "---|".repeat(row.len()));
            }
        }
        return out;
    }
    let widths: Vec<usize> = (0..HEADER.len())
        .map(|c| rows.iter().map(|row| row[c].chars().count()).max().unwrap_or(0))
        .collect();
    for row in rows {
        let cells: Vec<String> =
            row.iter().zip(&widths).map(|(cell, w)| format!("{cell:<w$}")).collect();
        let _ = writeln!(out, "{}", cells.join("  ").trim_end());
    }
    out
}

/// `12.3 M/s`, `950 k/s`, `41/s`.
fn rate_text(per_second: f64) -> String {
    if per_second >= 1e6 {
        format!("{:.2} M/s", per_second / 1e6)
    } else if per_second >= 1e3 {
        format!("{:.1} k/s", per_second / 1e3)
    } else {
        format!("{per_second:.0}/s")
    }
}

/// `2.03 KiB`, `88.1 KiB`, `512 B`.
fn bytes_text(bytes: f64) -> String {
    if bytes >= 1024.0 * 1024.0 {
        format!("{:.2} MiB", bytes / (1024.0 * 1024.0))
    } else if bytes >= 1024.0 {
        format!("{:.2} KiB", bytes / 1024.0)
    } else {
        format!("{bytes:.0} B")
    }
}

#[cfg(test)]
mod tests {
    use super::super::measure::Reads;
    use super::*;

    fn report() -> Report {
        let measured = Measured {
            write_rows_per_s: 5e5,
            open_ms: 0.04,
            get: Reads { rows_per_s: 1e6, p50_us: 0.8, p99_us: 3.5 },
            get_no_checksum: None,
            get_batch_rows_per_s: 2e6,
            bytes_on_disk: 2_100_000,
            peak_rss_mib: Some(310.0),
        };
        Report {
            workloads: vec![WorkloadReport {
                name: "f32x512".into(),
                rows: 1000,
                reads: 1000,
                reference: Ok(Reference {
                    write_fsync_rows_per_s: 1e6,
                    write_fsync_bytes_per_s: 2e9,
                    raw_copy_rows_per_s: 4e6,
                    bytes: 2_048_000,
                }),
                backends: vec![
                    BackendReport { backend: "arrow", outcome: Outcome::Measured(measured) },
                    BackendReport {
                        backend: "memmap",
                        outcome: Outcome::Refused("ragged shapes".into()),
                    },
                ],
                peers: vec![
                    PeerRate {
                        name: "arrow".into(),
                        what: "pyarrow get_batch".into(),
                        rows_per_s: Some(40e3),
                        batched: true,
                    },
                    PeerRate {
                        name: "hdf5".into(),
                        what: "no h5py".into(),
                        rows_per_s: None,
                        batched: false,
                    },
                ],
            }],
        }
    }

    #[test]
    fn tables_show_rates_fractions_of_the_reference_and_why_a_backend_is_missing() {
        let report = report();
        assert!(report.all_verified());
        let markdown = report.to_markdown();
        assert!(markdown.contains("| arrow | 500.0 k/s (0.50x) | 0.04 ms | 1.00 M/s (0.25x) |"));
        assert!(markdown.contains("n/a (always checked)"));
        assert!(markdown.contains("| 2.05 KiB | 310 MiB | yes |"));
        assert!(markdown.contains("| physical reference | 1.00 M/s (write + fdatasync) |"));
        assert!(markdown.contains("| python: arrow |  |  | 40.0 k/s (stowage 50.0x) |"));
        assert!(markdown.contains("\n- python: arrow: pyarrow get_batch\n"));
        assert!(markdown.contains("\n- memmap: not measured: ragged shapes\n"));
        assert!(markdown.contains("\n- python: hdf5: not measured: no h5py\n"));
        let table = report.to_table();
        assert!(table.lines().any(|l| l.starts_with("arrow ") && l.contains("0.50x")));
        let json: serde_json::Value = serde_json::from_str(&report.to_json()).unwrap();
        assert_eq!(json["workloads"][0]["backends"][1]["outcome"]["refused"], "ragged shapes");
        let mut failed = report;
        failed.workloads[0].backends[1].outcome = Outcome::Failed("boom".into());
        assert!(!failed.all_verified());
        assert!(failed.to_table().contains("memmap: FAILED: boom"));
    }
}
