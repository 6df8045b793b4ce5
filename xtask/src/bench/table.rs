//! The markdown table of a suite: one line per rate or level, then one per target (a ratio or a
//! bound) with its verdict.

use std::fmt::Write as _;

use super::rate::{Row, Unit};
use super::suite::Target;

/// What a target's ratio says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// At or above the minimum.
    Pass,
    /// Below the minimum.
    Fail,
    /// A ratio shown without a minimum.
    Report,
    /// An operand is missing or the units differ.
    NotApplicable,
}

/// The value text and verdict of one target.
pub fn evaluate(rows: &[Row], target: &Target) -> (String, Verdict) {
    let find = |name: &str| rows.iter().find(|row| row.name == name).map(|row| &row.measured);
    match *target {
        Target::Ratio { numerator, denominator, minimum } => {
            let (Some(Ok(numerator)), Some(Ok(denominator))) = (find(numerator), find(denominator))
            else {
                return ("missing".to_owned(), Verdict::NotApplicable);
            };
            if numerator.unit != denominator.unit {
                return (
                    format!("n/a ({} vs {})", numerator.unit.name(), denominator.unit.name()),
                    Verdict::NotApplicable,
                );
            }
            let ratio = numerator.value / denominator.value;
            let verdict = match minimum {
                Some(minimum) if ratio >= minimum => Verdict::Pass,
                Some(_) => Verdict::Fail,
                None => Verdict::Report,
            };
            (format!("{ratio:.2}x"), verdict)
        }
        Target::AtMost { name, maximum } => {
            let Some(Ok(measured)) = find(name) else {
                return ("missing".to_owned(), Verdict::NotApplicable);
            };
            let (value, text) = match measured.mean_ns {
                _ if measured.unit.is_level() => {
                    (measured.value, format_rate(measured.value, measured.unit))
                }
                Some(ns) => (ns / 1e6, format_duration(ns)),
                None => return ("n/a (no time)".to_owned(), Verdict::NotApplicable),
            };
            let verdict = if value <= maximum { Verdict::Pass } else { Verdict::Fail };
            (text, verdict)
        }
    }
}

/// The goal column of a target: `>= 0.70x`, `<= 100 ms`, `<= 100 MiB`, or empty when reported.
fn goal(rows: &[Row], target: &Target) -> String {
    match *target {
        Target::Ratio { minimum, .. } => {
            minimum.map(|minimum| format!(">= {minimum:.2}x")).unwrap_or_default()
        }
        Target::AtMost { name, maximum } => {
            let level = rows.iter().find(|row| row.name == name).and_then(|row| {
                row.measured.as_ref().ok().filter(|m| m.unit.is_level()).map(|m| m.unit)
            });
            match level {
                Some(unit) => format!("<= {maximum} {}", unit.name()),
                None => format!("<= {maximum} ms"),
            }
        }
    }
}

/// The first column of a target's line: `a / b` for a ratio, `name bound` for a bound (its
/// measurement has a line of its own above).
fn label(target: &Target) -> String {
    match *target {
        Target::Ratio { numerator, denominator, .. } => format!("{numerator} / {denominator}"),
        Target::AtMost { name, .. } => format!("{name} bound"),
    }
}

/// How many of `targets` pass, for the "N of M targets pass" line (M counts only the targets with
/// a minimum).
pub fn passing(rows: &[Row], targets: &[Target]) -> usize {
    targets.iter().filter(|target| evaluate(rows, target).1 == Verdict::Pass).count()
}

/// The markdown table: one line per rate, then one per target ratio.
pub fn render_table(rows: &[Row], targets: &[Target]) -> String {
    let mut table = String::from(
        "| measurement | mean per iteration | rate | target | result |\n|---|---|---|---|---|\n",
    );
    for row in rows {
        let (mean, rate) = match &row.measured {
            Ok(measured) => {
                let mean = match (measured.mean_ns, measured.per_iteration) {
                    (Some(ns), Some(work)) => {
                        let (amount, unit) = work.amount_and_unit();
                        format!("{} per {amount} {}", format_duration(ns), unit.name())
                    }
                    (Some(ns), None) => format_duration(ns),
                    (None, _) => String::new(),
                };
                (mean, format_rate(measured.value, measured.unit))
            }
            Err(_) => ("missing".to_owned(), String::new()),
        };
        let _ = writeln!(table, "| {} | {mean} | {rate} |  |  |", row.name);
    }
    for target in targets {
        let (ratio, verdict) = evaluate(rows, target);
        let result = match verdict {
            Verdict::Pass => "PASS",
            Verdict::Fail => "FAIL",
            Verdict::Report => "report",
            Verdict::NotApplicable => "n/a",
        };
        let _ = writeln!(
            table,
            "| {} |  | {ratio} | {} | {result} |",
            label(target),
            goal(rows, target)
        );
    }
    table
}

/// `812.3 ns`, `81.2 µs`, `1.23 ms`, `2.345 s`: three or four significant digits at any scale.
pub fn format_duration(ns: f64) -> String {
    if ns < 1e3 {
        format!("{ns:.1} ns")
    } else if ns < 1e6 {
        format!("{:.1} µs", ns / 1e3)
    } else if ns < 1e9 {
        format!("{:.2} ms", ns / 1e6)
    } else {
        format!("{:.3} s", ns / 1e9)
    }
}

/// `12.35 M rows/s`, `1.20 G B/s`, `950 iter/s`: readable at any scale; a level as `12.3 MiB`.
pub fn format_rate(per_second: f64, unit: Unit) -> String {
    match unit {
        Unit::Milliseconds => return format!("{per_second:.3} ms"),
        Unit::Requests => return format!("{per_second:.0} requests"),
        Unit::Microseconds => return format!("{per_second:.2} µs"),
        _ if unit.is_level() => return format!("{per_second:.1} {}", unit.name()),
        _ => {}
    }
    let unit = unit.name();
    if per_second >= 1e9 {
        format!("{:.2} G {unit}/s", per_second / 1e9)
    } else if per_second >= 1e6 {
        format!("{:.2} M {unit}/s", per_second / 1e6)
    } else if per_second >= 1e3 {
        format!("{:.2} k {unit}/s", per_second / 1e3)
    } else {
        format!("{per_second:.1} {unit}/s")
    }
}

/// Table rows for the tests of this module and of the docs section.
#[cfg(test)]
pub mod fake {
    use crate::bench::rate::{Measured, Row, Throughput, Unit};

    /// A benchmark row of `per_second` rows per second, 100 rows per iteration.
    pub fn rows_per_second(name: &str, per_second: f64) -> Row {
        Row {
            name: name.to_owned(),
            measured: Ok(Measured {
                mean_ns: Some(1e9 / per_second * 100.0),
                per_iteration: Some(Throughput::Rows(100)),
                value: per_second,
                unit: Unit::Rows,
            }),
        }
    }

    /// A row with no measurement.
    pub fn missing(name: &str) -> Row {
        Row { name: name.to_owned(), measured: Err("no result".to_owned()) }
    }
}

#[cfg(test)]
mod tests {
    use super::fake::{missing, rows_per_second};
    use super::*;
    use crate::bench::rate::Measured;
    use crate::bench::suite::{MEMMAP, NUMPY10, Target};

    /// Each of `expected` is the line of `table` for its first cell (a rate or a ratio).
    fn assert_lines(table: &str, expected: &[&str]) {
        for expected in expected {
            let first_cell = &expected[..expected.find(" |").unwrap() + 2];
            let line = table
                .lines()
                .find(|line| line.starts_with(first_cell))
                .unwrap_or_else(|| panic!("{first_cell} in\n{table}"));
            assert_eq!(line, *expected);
        }
    }

    /// Rates, missing rates, ratios with PASS, FAIL and n/a, as numpy10 shows them.
    #[test]
    fn table_shows_rates_ratios_verdicts_and_missing() {
        let rows = vec![
            rows_per_second("reference_copy_xxh64", 1e6),
            rows_per_second("get_checksum", 8e5),
            rows_per_second("reference_raw_copy", 4e6),
            rows_per_second("get_no_checksum", 1e6),
            missing("put_flush"),
            rows_per_second("reference_write_fsync", 1e3),
            Row {
                name: "python_slice_xxhash".to_owned(),
                measured: Ok(Measured::rows_per_second(2e5)),
            },
        ];
        let table = render_table(&rows, NUMPY10.targets);
        assert_lines(
            &table,
            &[
                "| get_checksum | 125.0 µs per 100 rows | 800.00 k rows/s |  |  |",
                "| put_flush | missing |  |  |  |",
                "| python_slice_xxhash |  | 200.00 k rows/s |  |  |",
                "| get_checksum / reference_copy_xxh64 |  | 0.80x | >= 0.70x | PASS |",
                "| get_checksum / python_slice_xxhash |  | 4.00x | >= 3.00x | PASS |",
                "| get_no_checksum / reference_raw_copy |  | 0.25x | >= 0.50x | FAIL |",
                "| put_flush / reference_write_fsync |  | missing | >= 0.50x | n/a |",
            ],
        );
        assert_eq!(passing(&rows, NUMPY10.targets), 2);
    }

    /// Report-only ratios show their value with no minimum and no verdict, and never count as
    /// passing; a missing operand still shows n/a.
    #[test]
    fn report_only_ratios_have_no_minimum_and_do_not_count() {
        let rows = vec![
            rows_per_second("get_checksum_dnanet", 3e4),
            rows_per_second("python_memmap_copy_dnanet", 2e4),
            rows_per_second("open", 1e4),
            missing("first_get_after_open"),
            rows_per_second("open_1k_rows", 1.2e4),
        ];
        let table = render_table(&rows, MEMMAP.targets);
        assert_lines(
            &table,
            &[
                "| get_checksum_dnanet / python_memmap_copy_dnanet |  | 1.50x |  | report |",
                "| first_get_after_open / open |  | missing |  | n/a |",
                "| open / open_1k_rows |  | 0.83x | >= 0.50x | PASS |",
            ],
        );
        assert_eq!(passing(&rows, MEMMAP.targets), 1);
        let lines = table.lines().count();
        assert_eq!(lines, 2 + rows.len() + MEMMAP.targets.len());
    }

    /// A bound on a benchmark reads its mean time per iteration, a bound on a level the level;
    /// each passes at or below its maximum, and a missing measurement is n/a.
    #[test]
    fn bounds_read_mean_times_and_levels() {
        let rows = vec![
            rows_per_second("open_10m", 100.0 / 0.0123), // 12.3 ms per open
            Row {
                name: "open_rss_10m".to_owned(),
                measured: Ok(Measured::level(140.5, Unit::Mebibytes)),
            },
        ];
        let targets = [
            Target::AtMost { name: "open_10m", maximum: 100.0 },
            Target::AtMost { name: "open_rss_10m", maximum: 100.0 },
            Target::AtMost { name: "absent", maximum: 1.0 },
        ];
        let table = render_table(&rows, &targets);
        assert_lines(
            &table,
            &[
                "| open_rss_10m |  | 140.5 MiB |  |  |",
                "| open_10m bound |  | 12.30 ms | <= 100 ms | PASS |",
                "| open_rss_10m bound |  | 140.5 MiB | <= 100 MiB | FAIL |",
                "| absent bound |  | missing | <= 1 ms | n/a |",
            ],
        );
        assert_eq!(passing(&rows, &targets), 1);
    }

    /// Rows per second against bytes per second is no ratio.
    #[test]
    fn ratio_of_different_units_is_not_applicable() {
        let mut bytes = rows_per_second("reference_raw_copy", 1e9);
        if let Ok(measured) = &mut bytes.measured {
            measured.unit = Unit::Bytes;
        }
        let rows = vec![bytes, rows_per_second("get_no_checksum", 1e6)];
        let (text, verdict) = evaluate(&rows, &NUMPY10.targets[2]);
        assert_eq!(verdict, Verdict::NotApplicable);
        assert_eq!(text, "n/a (rows vs B)");
    }

    /// Durations and rates at every scale.
    #[test]
    fn durations_and_rates_are_readable() {
        assert_eq!(format_duration(812.34), "812.3 ns");
        assert_eq!(format_duration(81_234.0), "81.2 µs");
        assert_eq!(format_duration(1_234_567.0), "1.23 ms");
        assert_eq!(format_duration(2_345_000_000.0), "2.345 s");
        assert_eq!(format_rate(12_345_678.0, Unit::Rows), "12.35 M rows/s");
        assert_eq!(format_rate(950.0, Unit::Iterations), "950.0 iter/s");
        assert_eq!(format_rate(1.23456, Unit::Milliseconds), "1.235 ms");
        assert_eq!(format_rate(4.0, Unit::Requests), "4 requests");
    }

    /// A bound on a level in microseconds: the overhead per call, shown with two decimals.
    #[test]
    fn a_microsecond_level_has_its_bound() {
        let rows = vec![Row {
            name: "memmap_get_overhead".to_owned(),
            measured: Ok(Measured::level(0.625, Unit::Microseconds)),
        }];
        let targets = [Target::AtMost { name: "memmap_get_overhead", maximum: 1.0 }];
        let table = render_table(&rows, &targets);
        assert_lines(
            &table,
            &[
                "| memmap_get_overhead |  | 0.62 µs |  |  |",
                "| memmap_get_overhead bound |  | 0.62 µs | <= 1 µs | PASS |",
            ],
        );
        let slow = vec![Row {
            name: "memmap_get_overhead".to_owned(),
            measured: Ok(Measured::level(1.5, Unit::Microseconds)),
        }];
        assert_eq!(passing(&slow, &targets), 0);
    }
}
