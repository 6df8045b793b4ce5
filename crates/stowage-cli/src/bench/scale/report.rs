//! The scale report: every backend at every size, the physical references beside, and issue 17's
//! targets as PASS, FAIL or not measured; rendered as markdown tables or JSON.

use std::fmt::Write as _;

use serde::Serialize;

use super::disk::DiskCheck;
use super::measure::{
    BATCH, COLD_BATCHES, COLD_QD32_READS, COLD_READS, DEPENDENT_LOADS, ScaleMeasured,
};
use super::physical::{CacheDrop, QUEUE_DEPTH};
use super::{LARGEST_FOR_ALL, ROW_SHAPE};
use crate::bench::FLUSH_EVERY;
use crate::bench::subject::Kind;

/// The size the ratio targets compare against.
pub const BASE_KEYS: usize = 100_000;

/// The whole run.
#[derive(Debug, Clone, Serialize)]
pub struct ScaleReport {
    /// Every size, ascending.
    pub sizes: Vec<SizeReport>,
    /// How the page cache was dropped for the cold reads (`None`: no cold read ran).
    pub cache_drop: Option<CacheDrop>,
    /// The disk check before the run.
    pub disk: DiskCheck,
    /// Issue 17's targets, per backend.
    pub targets: Vec<TargetResult>,
}

/// One size.
#[derive(Debug, Clone, Serialize)]
pub struct SizeReport {
    /// Keys in each cache.
    pub keys: usize,
    /// Warm random reads per measurement.
    pub warm_reads: usize,
    /// Rows per second copied out of a warm map of the same rows, in the warm read order.
    pub raw_copy_rows_per_s: Option<f64>,
    /// Why the raw copy could not be measured.
    pub raw_copy_error: Option<String>,
    /// Every backend.
    pub backends: Vec<Entry>,
}

/// One backend at one size.
#[derive(Debug, Clone, Serialize)]
pub struct Entry {
    /// The backend's name.
    pub backend: &'static str,
    /// What happened.
    pub outcome: Outcome,
}

/// What happened to one backend at one size.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// Every figure.
    Measured(Box<ScaleMeasured>),
    /// The error it stopped at (naming the phase and the size).
    Failed(String),
    /// Not run at this size, and why.
    NotPlanned(String),
}

/// A target's verdict.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum Verdict {
    /// Met.
    Pass,
    /// Not met, or the backend failed at the size.
    Fail,
    /// Could not be judged in this run (the size was not run); never a pass.
    NotMeasured,
}

/// One target of one backend.
#[derive(Debug, Clone, Serialize)]
pub struct TargetResult {
    /// The backend.
    pub backend: &'static str,
    /// The target, with the size it is judged at.
    pub target: String,
    /// The measured value (or why there is none).
    pub measured: String,
    /// The verdict.
    pub verdict: Verdict,
}

impl ScaleReport {
    /// The report of `sizes`, with its targets judged for `backends`.
    pub fn new(
        sizes: Vec<SizeReport>,
        backends: &[Kind],
        cache_drop: Option<CacheDrop>,
        disk: DiskCheck,
    ) -> ScaleReport {
        let targets = backends.iter().flat_map(|&kind| targets(&sizes, kind.name())).collect();
        ScaleReport { sizes, cache_drop, disk, targets }
    }

    /// Whether every planned backend ran at every size (FAILed targets do not count: they are
    /// what the suite measures).
    pub fn all_ran(&self) -> bool {
        self.sizes
            .iter()
            .flat_map(|s| &s.backends)
            .all(|e| !matches!(e.outcome, Outcome::Failed(_)))
            && self.sizes.iter().all(|s| s.raw_copy_error.is_none())
    }

    /// The report as JSON.
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("the report serializes")
    }

    /// The report as markdown: what ran, two tables (writes and opens; reads beside the
    /// references), what failed or did not run, then the targets.
    pub fn to_markdown(&self) -> String {
        let mut text = String::new();
        let row_bytes = ROW_SHAPE.iter().product::<usize>() * 4;
        let _ = writeln!(
            text,
            "Row: one float32[{}] tensor ({row_bytes} bytes), keys `f32x4/<index>`; writes put \
             every key with a durable flush every {} rows (the backends' default options), \
             leave the cache unfinished, resume it (the `resume` columns), finalize, then open \
             it read-only. Random reads draw keys uniformly with replacement from a seeded \
             generator (nothing the size of the cache is held). Warm: {} reads at the \
             smallest size, 200,000 from 200,000 keys up, done once untimed and each sample checked, then timed. Cold: the \
             page cache dropped with {}, then a handle opened (and its first get made) before \
             the drop, neither timed, reads {} random keys one `get` at a time, or {} \
             `get_batch`es of {BATCH}: the cold first get, with what a handle loads on first \
             need (memmap's index), is its own column above; the references read \
             random 4 KiB pages of the same cache's files with `pread`, {} from one thread \
             (QD1) and {} from {QUEUE_DEPTH} threads (QD32), the page cache dropped before \
             each. memmap's reads are measured twice: with its default cold-read advice \
             (`madvise(MADV_WILLNEED)` of a batch's pages when `mincore` finds a sampled page \
             missing, `stowage_core::cold_reads`) and, on the `advice off` row, without it; \
             its warm figures there are the best of 5 passes off, each beside a pass on (`on:`, \
             the best of those, with the ratio on/off). A verified memmap row reads two pages \
             (the row's and its checksum row's, in two files); the `checksums not verified` row \
             reads one. Every read sample's tensors have their first and last byte read (a \
             zero-copy get returns before reading its row). The dependent-load reference \
             makes {} random 8-byte loads, each address computed from the value the one before \
             read (as a lookup's slot, key and row follow one another), over an anonymous \
             map of the finished cache's size (at most 4 GiB; 4 KiB pages, every page written \
             first; the best of three passes): `per get` is how many of them a warm get's time would buy. \
             At small sizes the cache is a few MB, so cold reads soon find their pages \
             cached: the cold targets mean most at the largest size.\n",
            ROW_SHAPE[0],
            count(FLUSH_EVERY),
            count(self.sizes.first().map_or(0, |s| s.warm_reads)),
            self.cache_drop.map_or("(no cold read ran)", CacheDrop::describe),
            count(COLD_READS),
            COLD_BATCHES,
            count(COLD_READS),
            count(COLD_QD32_READS),
            count(DEPENDENT_LOADS),
        );
        let _ = writeln!(text, "{}\n", self.disk.summary().trim_start_matches("scale: "));
        let mut writes = vec![header(&[
            "backend",
            "keys",
            "write rows/s",
            "write peak RSS",
            "write peak anon",
            "resume open",
            "resume RSS",
            "resume first get",
            "finalize",
            "finalize peak anon",
            "open",
            "open RSS",
            "first get",
            "cold open",
            "cold first get",
            "bytes/key",
            "files",
        ])];
        let mut reads = vec![header(&[
            "backend",
            "keys",
            "warm get rows/s",
            "warm get_batch",
            "cold get",
            "cold get_batch",
            "QD1 4 KiB reads/s",
            "QD32 4 KiB reads/s",
            "dependent loads/s (warm map of the cache's size)",
        ])];
        let mut notes = Vec::new();
        for size in &self.sizes {
            let keys = count(size.keys);
            match (size.raw_copy_rows_per_s, &size.raw_copy_error) {
                (Some(rate), _) => reads.push(vec![
                    "raw copy (warm map)".into(),
                    keys.clone(),
                    rate_text(rate),
                    String::new(),
                    String::new(),
                    String::new(),
                    String::new(),
                    String::new(),
                    String::new(),
                ]),
                (None, Some(why)) => notes.push(format!("raw copy at {keys} keys: {why}")),
                (None, None) => {}
            }
            for entry in &size.backends {
                match &entry.outcome {
                    Outcome::Measured(m) => {
                        writes.push(vec![
                            entry.backend.into(),
                            keys.clone(),
                            rate_text(m.write_rows_per_s),
                            mib_text(m.write_peak_rss_mib),
                            mib_text(m.write_peak_anon_mib),
                            ms_text(m.resume_open_ms),
                            mib_text(m.resume_open_rss_mib),
                            ms_text(m.resume_first_get_ms),
                            ms_text(m.finalize_ms),
                            mib_text(m.finalize_peak_anon_mib),
                            ms_text(m.open_ms),
                            mib_text(m.open_rss_mib),
                            ms_text(m.first_get_ms),
                            ms_text(m.cold_open_ms),
                            ms_text(m.cold_first_get_ms),
                            format!("{:.1}", m.bytes_on_disk as f64 / size.keys as f64),
                            count(m.files),
                        ]);
                        let of = |rate: f64, reference: Option<f64>, name: &str| match reference {
                            Some(r) if r > 0.0 => {
                                format!("{} ({:.2}x {name})", rate_text(rate), rate / r)
                            }
                            _ => rate_text(rate),
                        };
                        reads.push(vec![
                            entry.backend.into(),
                            keys.clone(),
                            of(m.warm_get_rows_per_s, size.raw_copy_rows_per_s, "raw copy"),
                            rate_text(m.warm_batch_rows_per_s),
                            of(m.cold_get_rows_per_s, Some(m.qd1_reads_per_s), "QD1"),
                            of(m.cold_batch_rows_per_s, Some(m.qd32_reads_per_s), "QD32"),
                            rate_text(m.qd1_reads_per_s),
                            rate_text(m.qd32_reads_per_s),
                            dependent_loads_text(m),
                        ]);
                        if let Some(off) = &m.advice {
                            reads.push(vec![
                                format!("{} (cold-read advice off)", entry.backend),
                                keys.clone(),
                                format!(
                                    "{} (on: {}, {:.2}x)",
                                    rate_text(off.warm_get_rows_per_s),
                                    rate_text(off.warm_get_on_rows_per_s),
                                    off.warm_get_on_rows_per_s / off.warm_get_rows_per_s
                                ),
                                format!(
                                    "{} (on: {}, {:.2}x)",
                                    rate_text(off.warm_batch_rows_per_s),
                                    rate_text(off.warm_batch_on_rows_per_s),
                                    off.warm_batch_on_rows_per_s / off.warm_batch_rows_per_s
                                ),
                                of(off.cold_get_rows_per_s, Some(m.qd1_reads_per_s), "QD1"),
                                of(off.cold_batch_rows_per_s, Some(m.qd32_reads_per_s), "QD32"),
                                String::new(),
                                String::new(),
                                String::new(),
                            ]);
                            reads.push(vec![
                                format!("{} (checksums not verified)", entry.backend),
                                keys.clone(),
                                String::new(),
                                String::new(),
                                of(
                                    off.cold_get_unverified_rows_per_s,
                                    Some(m.qd1_reads_per_s),
                                    "QD1",
                                ),
                                of(
                                    off.cold_batch_unverified_rows_per_s,
                                    Some(m.qd32_reads_per_s),
                                    "QD32",
                                ),
                                String::new(),
                                String::new(),
                                String::new(),
                            ]);
                        }
                    }
                    Outcome::Failed(why) => {
                        notes.push(format!("**{} at {keys} keys FAILED**: {why}", entry.backend))
                    }
                    Outcome::NotPlanned(why) => {
                        notes.push(format!("{} at {keys} keys: {why}", entry.backend))
                    }
                }
            }
        }
        text.push_str("Writes and opens (open: median of 3 read-only opens with the page cache warm; RSS: resident memory the open added, page cache of its maps included; write peak anon: the most anonymous memory (`RssAnon`: heap, without mapped pages) the writer added, sampled every 5 ms while it wrote, resumed and finalized; finalize peak anon: the same, while it resumed and finalized only; times in ms):\n\n");
        text.push_str(&render(&writes));
        text.push_str("\nReads (rows per second; in parentheses the fraction of the physical reference of the same size in the same run):\n\n");
        text.push_str(&render(&reads));
        if !notes.is_empty() {
            text.push('\n');
            for note in notes {
                let _ = writeln!(text, "- {note}");
            }
        }
        text.push_str("\nIssue 17's targets:\n\n");
        let mut rows = vec![header(&["backend", "target", "measured", "verdict"])];
        for t in &self.targets {
            let verdict = match t.verdict {
                Verdict::Pass => "PASS",
                Verdict::Fail => "FAIL",
                Verdict::NotMeasured => "not measured",
            };
            rows.push(vec![t.backend.into(), t.target.clone(), t.measured.clone(), verdict.into()]);
        }
        text.push_str(&render(&rows));
        let passed = self.targets.iter().filter(|t| t.verdict == Verdict::Pass).count();
        let _ = writeln!(text, "\n{passed} of {} targets pass.", self.targets.len());
        text
    }
}

/// `kind`'s targets over `sizes`: absolute ones at the target size (10 M keys, or the largest
/// run when 10 M was not), ratios against [`BASE_KEYS`].
fn targets(sizes: &[SizeReport], backend: &'static str) -> Vec<TargetResult> {
    let outcome_at = |keys: usize| {
        sizes
            .iter()
            .find(|s| s.keys == keys)
            .and_then(|s| s.backends.iter().find(|e| e.backend == backend))
            .map(|e| &e.outcome)
    };
    let runs_at = |keys: usize| !matches!(outcome_at(keys), None | Some(Outcome::NotPlanned(_)));
    let at = if runs_at(LARGEST_FOR_ALL) {
        Some(LARGEST_FOR_ALL)
    } else {
        sizes.iter().map(|s| s.keys).filter(|&k| runs_at(k)).max()
    };
    let label = |what: &str| match at {
        Some(LARGEST_FOR_ALL) | None => format!("{what} at {} keys", count(LARGEST_FOR_ALL)),
        Some(keys) => {
            format!("{what} at {} keys ({} not run)", count(keys), count(LARGEST_FOR_ALL))
        }
    };
    let base = match outcome_at(BASE_KEYS) {
        Some(Outcome::Measured(m)) if at != Some(BASE_KEYS) => Some(m),
        _ => None,
    };
    let at_most = |what: &str, value: f64, unit: &str, max: f64| TargetResult {
        backend,
        target: label(&format!("{what} < {max} {unit}")),
        measured: format!("{value:.2} {unit}"),
        verdict: if value < max { Verdict::Pass } else { Verdict::Fail },
    };
    let ratio = |what: &str, value: f64, reference: Option<f64>, min: f64, of: &str| {
        let target = label(&format!("{what} >= {min}x {of}"));
        match reference {
            Some(r) if r > 0.0 => TargetResult {
                backend,
                target,
                measured: format!("{:.2}x ({} / {})", value / r, rate_text(value), rate_text(r)),
                verdict: if value / r >= min { Verdict::Pass } else { Verdict::Fail },
            },
            _ => TargetResult {
                backend,
                target,
                measured: format!(
                    "needs {} keys and a larger size in the same run",
                    count(BASE_KEYS)
                ),
                verdict: Verdict::NotMeasured,
            },
        }
    };
    let names = [
        "read-only open",
        "resume open",
        "RSS added by an open",
        "writer memory without mapped pages",
        "first get after open",
        "write rate",
        "warm random get",
        "cold get_batch of 1,024",
        "cold single get",
    ];
    let m = match at.and_then(outcome_at) {
        Some(Outcome::Measured(m)) => m,
        Some(Outcome::Failed(why)) => {
            return names
                .iter()
                .map(|name| TargetResult {
                    backend,
                    target: label(name),
                    measured: format!("failed: {why}"),
                    verdict: Verdict::Fail,
                })
                .collect();
        }
        _ => {
            return names
                .iter()
                .map(|name| TargetResult {
                    backend,
                    target: label(name),
                    measured: "not run".into(),
                    verdict: Verdict::NotMeasured,
                })
                .collect();
        }
    };
    let rss_mb = m
        .open_rss_mib
        .into_iter()
        .chain(m.resume_open_rss_mib)
        .fold(None, |a: Option<f64>, b| Some(a.map_or(b, |a| a.max(b))));
    let mut results = vec![
        at_most("read-only open", m.open_ms, "ms", 100.0),
        at_most("resume open", m.resume_open_ms, "ms", 100.0),
    ];
    results.push(match rss_mb {
        Some(mib) => at_most("RSS added by an open", mib * 1.048_576, "MB", 100.0),
        None => TargetResult {
            backend,
            target: label("RSS added by an open < 100 MB"),
            measured: "resident memory unknown on this system".into(),
            verdict: Verdict::NotMeasured,
        },
    });
    results.push(match m.write_peak_anon_mib {
        Some(mib) => at_most("writer memory without mapped pages", mib * 1.048_576, "MB", 100.0),
        None => TargetResult {
            backend,
            target: label("writer memory without mapped pages < 100 MB"),
            measured: "anonymous memory unknown on this system".into(),
            verdict: Verdict::NotMeasured,
        },
    });
    results.push(at_most(
        "first get after open",
        m.first_get_ms.max(m.resume_first_get_ms),
        "ms",
        10.0,
    ));
    let base_of = |f: fn(&ScaleMeasured) -> f64| base.map(|b| f(b));
    let base_label = format!("the {} rate", count(BASE_KEYS));
    results.push(ratio(
        "write rate",
        m.write_rows_per_s,
        base_of(|b| b.write_rows_per_s),
        0.8,
        &base_label,
    ));
    let mut warm = ratio(
        "warm random get",
        m.warm_get_rows_per_s,
        base_of(|b| b.warm_get_rows_per_s),
        0.5,
        &base_label,
    );
    if let (Some(now), Some(then)) =
        (m.dependent_loads_per_s, base.and_then(|b| b.dependent_loads_per_s))
    {
        let _ = write!(
            warm.measured,
            "; dependent loads over a warm map of the cache's size: {:.2}x ({} / {}), a get \
             costs the time of {:.1} of them at {} keys, {:.1} at {}",
            now / then,
            rate_text(now),
            rate_text(then),
            now / m.warm_get_rows_per_s,
            count(at.unwrap_or(LARGEST_FOR_ALL)),
            base.map_or(0.0, |b| then / b.warm_get_rows_per_s),
            count(BASE_KEYS),
        );
    }
    results.push(warm);
    results.push(ratio(
        "cold get_batch of 1,024",
        m.cold_batch_rows_per_s,
        Some(m.qd32_reads_per_s),
        0.7,
        "QD32",
    ));
    results.push(ratio(
        "cold single get",
        m.cold_get_rows_per_s,
        Some(m.qd1_reads_per_s),
        0.9,
        "QD1",
    ));
    results
}

/// The dependent-load reference of `m`, with how many of its loads a warm get costs.
fn dependent_loads_text(m: &ScaleMeasured) -> String {
    match m.dependent_loads_per_s {
        Some(loads) if m.warm_get_rows_per_s > 0.0 => {
            format!("{} ({:.1} per get)", rate_text(loads), loads / m.warm_get_rows_per_s)
        }
        Some(loads) => rate_text(loads),
        None => "not measured".into(),
    }
}

/// A markdown header row with its rule.
fn header(names: &[&str]) -> Vec<String> {
    names.iter().map(|n| (*n).to_owned()).collect()
}

/// Markdown table of `rows` (the first is the header).
fn render(rows: &[Vec<String>]) -> String {
    let mut text = String::new();
    for (i, row) in rows.iter().enumerate() {
        let _ = writeln!(text, "| {} |", row.join(" | "));
        if i == 0 {
            let _ = writeln!(text, "|{}", "---|".repeat(row.len()));
        }
    }
    text
}

/// `n` with thousands separators.
pub fn count(n: usize) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// A rate per second, short: `1.23 M/s`, `456 k/s`, `789/s`.
pub fn rate_text(per_second: f64) -> String {
    if per_second >= 1e6 {
        format!("{:.2} M/s", per_second / 1e6)
    } else if per_second >= 1e3 {
        format!("{:.0} k/s", per_second / 1e3)
    } else {
        format!("{per_second:.0}/s")
    }
}

/// Bytes, short: `1.5 GB`, `12.0 MB`, `3.4 kB`.
pub fn bytes(n: f64) -> String {
    if n >= 1e9 {
        format!("{:.1} GB", n / 1e9)
    } else if n >= 1e6 {
        format!("{:.1} MB", n / 1e6)
    } else {
        format!("{:.1} kB", n / 1e3)
    }
}

fn ms_text(ms: f64) -> String {
    if ms >= 100.0 { format!("{ms:.0}") } else { format!("{ms:.2}") }
}

fn mib_text(mib: Option<f64>) -> String {
    mib.map_or_else(|| "?".into(), |m| format!("{m:.1} MiB"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A measurement whose rates are `rate` and whose open costs `open_ms`.
    fn measured(rate: f64, open_ms: f64) -> ScaleMeasured {
        ScaleMeasured {
            write_rows_per_s: rate,
            write_peak_rss_mib: Some(10.0),
            write_peak_anon_mib: Some(8.0),
            resume_open_ms: open_ms,
            resume_open_rss_mib: Some(1.0),
            resume_first_get_ms: 0.1,
            finalize_ms: 1.0,
            finalize_peak_anon_mib: Some(6.0),
            open_ms,
            open_rss_mib: Some(2.0),
            first_get_ms: 0.1,
            cold_open_ms: open_ms,
            cold_first_get_ms: 0.2,
            warm_get_rows_per_s: rate,
            warm_batch_rows_per_s: rate,
            dependent_loads_per_s: Some(rate * 4.0),
            cold_get_rows_per_s: 1_000.0,
            cold_batch_rows_per_s: 1_000.0,
            qd1_reads_per_s: 1_000.0,
            qd32_reads_per_s: 10_000.0,
            bytes_on_disk: 1,
            files: 1,
            advice: None,
        }
    }

    fn size(keys: usize, outcome: Outcome) -> SizeReport {
        SizeReport {
            keys,
            warm_reads: 10,
            raw_copy_rows_per_s: Some(1e6),
            raw_copy_error: None,
            backends: vec![Entry { backend: "npy", outcome }],
        }
    }

    fn verdicts(sizes: &[SizeReport]) -> Vec<(String, Verdict)> {
        targets(sizes, "npy").into_iter().map(|t| (t.target, t.verdict)).collect()
    }

    /// Ratios compare the target size with 100 k; absolute bounds read the target size only.
    #[test]
    fn targets_compare_the_largest_size_with_100k() {
        let sizes = [
            size(100_000, Outcome::Measured(Box::new(measured(1_000_000.0, 1.0)))),
            size(10_000_000, Outcome::Measured(Box::new(measured(600_000.0, 150.0)))),
        ];
        let v = verdicts(&sizes);
        assert_eq!(v.len(), 9);
        assert_eq!(v[0], ("read-only open < 100 ms at 10,000,000 keys".into(), Verdict::Fail));
        assert_eq!(v[2].1, Verdict::Pass, "{v:?}");
        assert_eq!(
            v[3],
            (
                "writer memory without mapped pages < 100 MB at 10,000,000 keys".into(),
                Verdict::Pass
            )
        );
        assert_eq!(v[4].1, Verdict::Pass);
        assert_eq!(
            v[5],
            ("write rate >= 0.8x the 100,000 rate at 10,000,000 keys".into(), Verdict::Fail)
        );
        assert_eq!(v[6].1, Verdict::Pass, "0.6x >= 0.5x");
        let warm = &targets(&sizes, "npy")[6].measured;
        assert!(
            warm.contains("dependent loads over a warm map of the cache's size: 0.60x")
                && warm.contains("4.0 of them at 10,000,000 keys, 4.0 at 100,000"),
            "{warm}"
        );
        assert_eq!(v[7].1, Verdict::Fail, "0.1x QD32");
        assert_eq!(v[8].1, Verdict::Pass, "1.0x QD1");
    }

    /// Without 10 M the largest size run is judged and named; without 100 k the ratios are not
    /// measured (never a pass); a failure at the target size fails every target.
    #[test]
    fn missing_sizes_are_never_a_pass() {
        let only_base = [size(100_000, Outcome::Measured(Box::new(measured(1.0, 1.0))))];
        let v = verdicts(&only_base);
        assert!(v[0].0.contains("at 100,000 keys (10,000,000 not run)"), "{v:?}");
        assert_eq!(v[5].1, Verdict::NotMeasured);
        assert_eq!(v[6].1, Verdict::NotMeasured);

        let failed = [
            size(100_000, Outcome::Measured(Box::new(measured(1.0, 1.0)))),
            size(10_000_000, Outcome::Failed("npy at 10000000 keys: open: out of memory".into())),
        ];
        let v = targets(&failed, "npy");
        assert!(
            v.iter().all(|t| t.verdict == Verdict::Fail && t.measured.contains("out of memory"))
        );

        let none = [size(100_000, Outcome::NotPlanned("not run".into()))];
        assert!(verdicts(&none).iter().all(|(_, v)| *v == Verdict::NotMeasured));
    }

    #[test]
    fn numbers_read_well() {
        assert_eq!(count(100_000_000), "100,000,000");
        assert_eq!(count(999), "999");
        assert_eq!(rate_text(1_234_567.0), "1.23 M/s");
        assert_eq!(rate_text(45_600.0), "46 k/s");
        assert_eq!(bytes(2.5e9), "2.5 GB");
    }
}
