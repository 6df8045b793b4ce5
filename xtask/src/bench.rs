//! `cargo xtask bench`: the numpy10 benchmark, hangar's Python read path beside it, and the table
//! of rates and target ratios that `docs/benchmarks.md` records.
//!
//! Contract with the criterion bench (`crates/stowage-npy/benches/numpy10.rs`): it is run as
//! `cargo bench -p stowage-npy --bench numpy10 -- --noplot` with `STOWAGE_BENCH_DIR` set, leaves
//! its generated cache there (`records.txt` plus `data/10/<uid>.npy`), and reports the benchmarks
//! [`BENCHMARK_IDS`] in the criterion group [`GROUP`], each with a throughput in elements (rows).

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::Value;

use crate::prerequisites::{self, PREREQUISITES, PYTHON, Prerequisite};
use crate::{cargo, display_command, target_dir, workspace_root};

/// The criterion group of the benchmark.
pub const GROUP: &str = "numpy10";

/// The benchmarks the table reports, in table order.
pub const BENCHMARK_IDS: &[&str] = &[
    "reference_raw_copy",
    "reference_copy_xxh64",
    "reference_xxh64_in_place",
    "reference_write_fsync",
    "get_checksum",
    "get_no_checksum",
    "get_record_checksum",
    "put_flush",
    "open",
    "reference_raw_copy_64x64",
    "reference_copy_xxh64_64x64",
    "reference_xxh64_in_place_64x64",
    "get_checksum_64x64",
    "get_no_checksum_64x64",
    "get_record_checksum_64x64",
];

/// The name of the Python peer's rate in the table.
const PYTHON_PEER: &str = "python_slice_xxhash";

/// The key of the Python peer's JSON line.
const PYTHON_PEER_KEY: &str = "python_slice_xxhash_rows_per_s";

/// The Python packages the peer imports.
const PEER_PACKAGES: &[&str] = &["numpy", "xxhash"];

/// A ratio of two rates that the project aims for.
#[derive(Clone, Copy, Debug)]
struct Target {
    numerator: &'static str,
    denominator: &'static str,
    minimum: f64,
}

const TARGETS: &[Target] = &[
    Target { numerator: "get_checksum", denominator: "reference_copy_xxh64", minimum: 0.70 },
    Target { numerator: "get_checksum", denominator: PYTHON_PEER, minimum: 3.0 },
    Target { numerator: "get_no_checksum", denominator: "reference_raw_copy", minimum: 0.50 },
    Target { numerator: "put_flush", denominator: "reference_write_fsync", minimum: 0.50 },
    Target {
        numerator: "get_checksum_64x64",
        denominator: "reference_copy_xxh64_64x64",
        minimum: 0.70,
    },
    Target {
        numerator: "get_no_checksum_64x64",
        denominator: "reference_raw_copy_64x64",
        minimum: 0.50,
    },
];

const BEGIN_MARKER: &str = "<!-- xtask-bench:begin -->";
const END_MARKER: &str = "<!-- xtask-bench:end -->";

/// Runs the benchmark (unless `report_only`) and the Python peer, prints the table and writes it to
/// `docs/benchmarks.md`.
pub fn run(report_only: bool) -> Result<(), String> {
    let root = workspace_root();
    let target = target_dir();
    let bench_data = target.join("bench-data");
    let criterion_home = std::env::var_os("CRITERION_HOME")
        .filter(|value| !value.is_empty())
        .map(|value| root.join(value))
        .unwrap_or_else(|| target.join("criterion"));

    let mut bench = cargo();
    bench
        .args(["bench", "-p", "stowage-npy", "--bench", GROUP, "--", "--noplot"])
        .env("STOWAGE_BENCH_DIR", &bench_data)
        .env("CRITERION_HOME", &criterion_home);
    let bench_line =
        format!("STOWAGE_BENCH_DIR={} {}", shown_path(&root, &bench_data), display_command(&bench));
    if report_only {
        println!(
            "xtask: --report-only: reading the criterion results of an earlier `{bench_line}`"
        );
    } else {
        let bench_source = root.join("crates/stowage-npy/benches/numpy10.rs");
        if !bench_source.is_file() {
            return Err(format!(
                "the numpy10 benchmark is not runnable yet: {} does not exist (cargo xtask bench \
                 runs `{bench_line}`)",
                shown_path(&root, &bench_source)
            ));
        }
        std::fs::create_dir_all(&bench_data)
            .map_err(|error| format!("cannot create {}: {error}", bench_data.display()))?;
        println!("xtask: ==> {bench_line}");
        let status =
            bench.status().map_err(|error| format!("could not start `{bench_line}`: {error}"))?;
        if !status.success() {
            return Err(format!("`{bench_line}` failed ({status})"));
        }
    }

    let mut rows: Vec<Row> = read_criterion(&criterion_home, GROUP, BENCHMARK_IDS)
        .into_iter()
        .map(|(name, measured)| Row { name, measured })
        .collect();

    for row in &rows {
        if let Err(reason) = &row.measured {
            println!("xtask: {} is missing: {reason}", row.name);
        }
    }

    let peer_script = root.join("xtask/py/numpy10_peer.py");
    let peer_line =
        format!("{PYTHON} {} {}", shown_path(&root, &peer_script), shown_path(&root, &bench_data));
    let peer = run_python_peer(&peer_script, &bench_data, &peer_line);
    if let Err(reason) = &peer {
        println!("xtask: the Python peer did not run: {reason}");
    }
    rows.push(Row {
        name: PYTHON_PEER.to_owned(),
        measured: peer.as_ref().map(|peer| peer.measured.clone()).map_err(Clone::clone),
    });

    let table = render_table(&rows, TARGETS);
    println!();
    print!("{table}");
    println!();

    let machine = Machine::detect(peer.as_ref().ok());
    let command = if report_only { "cargo xtask bench --report-only" } else { "cargo xtask bench" };
    let section = render_section(&machine, command, &bench_line, &peer_line, &table, &peer);
    let docs_path = root.join("docs/benchmarks.md");
    let old = std::fs::read_to_string(&docs_path).unwrap_or_else(|_| "# Benchmarks\n".to_owned());
    std::fs::write(&docs_path, replace_section(&old, &section))
        .map_err(|error| format!("cannot write {}: {error}", docs_path.display()))?;
    let passing = TARGETS.iter().filter(|t| evaluate(&rows, t).1 == Verdict::Pass).count();
    println!(
        "xtask: {passing} of {} targets pass; wrote the table to {}",
        TARGETS.len(),
        shown_path(&root, &docs_path)
    );
    Ok(())
}

/// How much one iteration of a benchmark processes, from criterion's `benchmark.json`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Throughput {
    /// Rows (criterion's `Elements`, or the elements of `ElementsAndBytes`).
    Rows(u64),
    /// Bytes (`Bytes` or `BytesDecimal`).
    Bytes(u64),
    /// Bits.
    Bits(u64),
}

impl Throughput {
    fn from_json(value: &Value) -> Option<Throughput> {
        let value = match value {
            Value::Array(items) => items.first()?,
            other => other,
        };
        let object = value.as_object()?;
        let (kind, amount) = object.iter().next()?;
        match kind.as_str() {
            "Elements" => amount.as_u64().map(Throughput::Rows),
            "Bytes" | "BytesDecimal" => amount.as_u64().map(Throughput::Bytes),
            "Bits" => amount.as_u64().map(Throughput::Bits),
            "ElementsAndBytes" => amount.get("elements")?.as_u64().map(Throughput::Rows),
            _ => None,
        }
    }

    fn amount_and_unit(self) -> (u64, Unit) {
        match self {
            Throughput::Rows(n) => (n, Unit::Rows),
            Throughput::Bytes(n) => (n, Unit::Bytes),
            Throughput::Bits(n) => (n, Unit::Bits),
        }
    }
}

/// What a rate counts per second.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Unit {
    Rows,
    Bytes,
    Bits,
    /// The benchmark declared no throughput: iterations per second.
    Iterations,
}

impl Unit {
    fn name(self) -> &'static str {
        match self {
            Unit::Rows => "rows",
            Unit::Bytes => "B",
            Unit::Bits => "bit",
            Unit::Iterations => "iter",
        }
    }
}

/// One measured rate.
#[derive(Clone, Debug, PartialEq)]
struct Measured {
    /// Criterion's mean time of one iteration (none for the Python peer).
    mean_ns: Option<f64>,
    /// What one iteration processes (none for the Python peer or without a declared throughput).
    per_iteration: Option<Throughput>,
    /// Units per second.
    per_second: f64,
    unit: Unit,
}

impl Measured {
    /// From criterion's mean time per iteration: rate = amount / (mean_ns * 1e-9).
    fn from_criterion(mean_ns: f64, per_iteration: Option<Throughput>) -> Measured {
        let (amount, unit) =
            per_iteration.map_or((1, Unit::Iterations), Throughput::amount_and_unit);
        Measured {
            mean_ns: Some(mean_ns),
            per_iteration,
            per_second: amount as f64 / (mean_ns * 1e-9),
            unit,
        }
    }
}

/// One line of the table: a benchmark or the Python peer, with the reason when it is missing.
#[derive(Clone, Debug)]
struct Row {
    name: String,
    measured: Result<Measured, String>,
}

/// Reads criterion's results for each of `ids` in `group` under `criterion_home`.
///
/// Criterion writes `<home>/<directory>/new/benchmark.json` and `.../new/estimates.json`, where the
/// directory is the filename-safe form of `group/function[/value]` (`numpy10/get_checksum`, or
/// `numpy10_get_checksum` for a benchmark named `"numpy10/get_checksum"` outside a group, or
/// `numpy10/get_checksum/1000` with a parameter). The id is matched on the `full_id` recorded in
/// `benchmark.json`: `group/id` exactly, else the first `group/id/<value>` in directory order.
fn read_criterion(
    criterion_home: &Path,
    group: &str,
    ids: &[&str],
) -> Vec<(String, Result<Measured, String>)> {
    let mut found: Vec<PathBuf> = Vec::new();
    find_benchmark_files(criterion_home, &mut found);
    found.sort();
    let recorded: Vec<(String, &Path)> = found
        .iter()
        .filter_map(|path| {
            let text = std::fs::read_to_string(path).ok()?;
            let json: Value = serde_json::from_str(&text).ok()?;
            let full_id = json.get("full_id")?.as_str()?.to_owned();
            Some((full_id, path.as_path()))
        })
        .collect();

    ids.iter()
        .map(|id| {
            let exact = format!("{group}/{id}");
            let prefix = format!("{exact}/");
            let chosen = recorded
                .iter()
                .find(|(full_id, _)| *full_id == exact)
                .or_else(|| recorded.iter().find(|(full_id, _)| full_id.starts_with(&prefix)));
            let measured = match chosen {
                Some((_, benchmark_json)) => read_measurement(benchmark_json),
                None => Err(format!(
                    "no criterion result for {exact} under {}",
                    criterion_home.display()
                )),
            };
            (id.to_string(), measured)
        })
        .collect()
}

/// Every `new/benchmark.json` below `dir` (criterion's current results, not saved baselines).
fn find_benchmark_files(dir: &Path, found: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            find_benchmark_files(&path, found);
        } else if path.file_name().is_some_and(|name| name == "benchmark.json")
            && dir.file_name().is_some_and(|name| name == "new")
        {
            found.push(path);
        }
    }
}

/// The mean (from `estimates.json`) and throughput (from `benchmark.json`) of one benchmark.
fn read_measurement(benchmark_json: &Path) -> Result<Measured, String> {
    let read_json = |path: &Path| -> Result<Value, String> {
        let text = std::fs::read_to_string(path)
            .map_err(|error| format!("cannot read {}: {error}", path.display()))?;
        serde_json::from_str(&text)
            .map_err(|error| format!("{} is not JSON: {error}", path.display()))
    };
    let benchmark = read_json(benchmark_json)?;
    let estimates_path = benchmark_json.with_file_name("estimates.json");
    let estimates = read_json(&estimates_path)?;
    let mean_ns = estimates
        .pointer("/mean/point_estimate")
        .and_then(Value::as_f64)
        .filter(|mean| *mean > 0.0)
        .ok_or_else(|| {
            format!("{} has no positive mean.point_estimate", estimates_path.display())
        })?;
    let throughput = benchmark.get("throughput").and_then(Throughput::from_json);
    Ok(Measured::from_criterion(mean_ns, throughput))
}

/// The Python peer's measurement and the versions it ran with.
#[derive(Clone, Debug)]
struct PeerResult {
    measured: Measured,
    /// `Python 3.11.7, numpy 2.4.6, xxhash 4.1.0` when the peer reported them.
    versions: Option<String>,
    rows: Option<u64>,
    seconds: Option<f64>,
}

/// Ensures numpy and xxhash, then runs the peer on the bench data.
fn run_python_peer(
    script: &Path,
    bench_data: &Path,
    peer_line: &str,
) -> Result<PeerResult, String> {
    let records = bench_data.join("records.txt");
    if !records.is_file() {
        return Err(format!(
            "{} does not exist (the benchmark writes it; run `cargo xtask bench` without \
             --report-only)",
            records.display()
        ));
    }
    let wanted: Vec<Prerequisite> = PREREQUISITES
        .iter()
        .filter(|p| PEER_PACKAGES.contains(&p.package))
        .map(|p| Prerequisite { needed_for: "the benchmark's Python peer", ..*p })
        .collect();
    prerequisites::ensure(&wanted)?;
    println!("xtask: ==> {peer_line}");
    let output = Command::new(PYTHON)
        .arg(script)
        .arg(bench_data)
        .stderr(Stdio::inherit())
        .output()
        .map_err(|error| format!("could not start `{peer_line}`: {error}"))?;
    let stdout = String::from_utf8_lossy(&output.stdout);
    print!("{stdout}");
    if !output.status.success() {
        return Err(format!("`{peer_line}` failed ({}); see its message above", output.status));
    }
    parse_peer_output(&stdout)
        .ok_or_else(|| format!("`{peer_line}` printed no JSON line with {PYTHON_PEER_KEY}"))
}

/// The last JSON line of the peer's output that holds [`PYTHON_PEER_KEY`].
fn parse_peer_output(stdout: &str) -> Option<PeerResult> {
    stdout.lines().rev().find_map(|line| {
        let json: Value = serde_json::from_str(line.trim()).ok()?;
        let per_second = json.get(PYTHON_PEER_KEY)?.as_f64().filter(|rate| *rate > 0.0)?;
        let text = |key: &str| json.get(key).and_then(Value::as_str).map(str::to_owned);
        let versions = match (text("python"), text("numpy"), text("xxhash")) {
            (Some(python), Some(numpy), Some(xxhash)) => {
                Some(format!("Python {python}, numpy {numpy}, xxhash {xxhash}"))
            }
            _ => None,
        };
        Some(PeerResult {
            measured: Measured { mean_ns: None, per_iteration: None, per_second, unit: Unit::Rows },
            versions,
            rows: json.get("rows").and_then(Value::as_u64),
            seconds: json.get("seconds").and_then(Value::as_f64),
        })
    })
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Verdict {
    Pass,
    Fail,
    /// An operand is missing or the units differ.
    NotApplicable,
}

/// The ratio text and verdict of one target.
fn evaluate(rows: &[Row], target: &Target) -> (String, Verdict) {
    let find = |name: &str| rows.iter().find(|row| row.name == name).map(|row| &row.measured);
    match (find(target.numerator), find(target.denominator)) {
        (Some(Ok(numerator)), Some(Ok(denominator))) => {
            if numerator.unit != denominator.unit {
                return (
                    format!("n/a ({} vs {})", numerator.unit.name(), denominator.unit.name()),
                    Verdict::NotApplicable,
                );
            }
            let ratio = numerator.per_second / denominator.per_second;
            let verdict = if ratio >= target.minimum { Verdict::Pass } else { Verdict::Fail };
            (format!("{ratio:.2}x"), verdict)
        }
        _ => ("missing".to_owned(), Verdict::NotApplicable),
    }
}

/// The markdown table: one line per rate, then one per target ratio.
fn render_table(rows: &[Row], targets: &[Target]) -> String {
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
                (mean, format_rate(measured.per_second, measured.unit))
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
            Verdict::NotApplicable => "n/a",
        };
        let _ = writeln!(
            table,
            "| {} / {} |  | {ratio} | >= {:.2}x | {result} |",
            target.numerator, target.denominator, target.minimum
        );
    }
    table
}

/// `812.3 ns`, `81.2 µs`, `1.23 ms`, `2.345 s`.
fn format_duration(ns: f64) -> String {
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

/// `12.35 M rows/s`, `1.20 G B/s`, `950 iter/s`.
fn format_rate(per_second: f64, unit: Unit) -> String {
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

/// What the numbers were measured on.
#[derive(Debug)]
struct Machine {
    cpu: String,
    cores: usize,
    memory: String,
    rustc: String,
    python: Option<String>,
    date: String,
}

impl Machine {
    fn detect(peer: Option<&PeerResult>) -> Machine {
        let read = |path: &str| std::fs::read_to_string(path).unwrap_or_default();
        let rustc = std::env::var_os("RUSTC").unwrap_or_else(|| "rustc".into());
        let rustc = Command::new(rustc)
            .arg("--version")
            .output()
            .ok()
            .filter(|output| output.status.success())
            .map(|output| String::from_utf8_lossy(&output.stdout).trim().to_owned())
            .unwrap_or_else(|| "rustc (version unknown)".to_owned());
        let seconds = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
        Machine {
            cpu: cpu_model(&read("/proc/cpuinfo")).unwrap_or_else(|| "unknown CPU".to_owned()),
            cores: std::thread::available_parallelism().map_or(1, |n| n.get()),
            memory: total_memory(&read("/proc/meminfo")).unwrap_or_else(|| "unknown".to_owned()),
            rustc,
            python: peer.and_then(|peer| peer.versions.clone()),
            date: utc_timestamp(seconds),
        }
    }
}

/// The first `model name` of `/proc/cpuinfo`.
fn cpu_model(cpuinfo: &str) -> Option<String> {
    cpuinfo.lines().find_map(|line| {
        let (key, value) = line.split_once(':')?;
        (key.trim() == "model name").then(|| value.trim().to_owned())
    })
}

/// `MemTotal` of `/proc/meminfo` in GiB, e.g. `7.8 GiB`.
fn total_memory(meminfo: &str) -> Option<String> {
    let line = meminfo.lines().find(|line| line.starts_with("MemTotal:"))?;
    let kib: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(format!("{:.1} GiB", kib / (1024.0 * 1024.0)))
}

/// `YYYY-MM-DD HH:MM UTC` for seconds since the Unix epoch.
fn utc_timestamp(seconds: u64) -> String {
    let days = (seconds / 86_400) as i64;
    let minute_of_day = (seconds % 86_400) / 60;
    // Howard Hinnant's days-to-civil algorithm.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let day_of_era = z.rem_euclid(146_097);
    let year_of_era =
        (day_of_era - day_of_era / 1460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let month_index = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * month_index + 2) / 5 + 1;
    let month = if month_index < 10 { month_index + 3 } else { month_index - 9 };
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02} {:02}:{:02} UTC", minute_of_day / 60, minute_of_day % 60)
}

/// The text between the markers of `docs/benchmarks.md`.
fn render_section(
    machine: &Machine,
    command: &str,
    bench_line: &str,
    peer_line: &str,
    table: &str,
    peer: &Result<PeerResult, String>,
) -> String {
    let mut text = String::new();
    let _ = writeln!(
        text,
        "## numpy10: stowage-npy against the reference loops and hangar's read path\n"
    );
    let _ = writeln!(
        text,
        "Measured {} on {} ({} cores available, {} memory), {}{}.\n",
        machine.date,
        machine.cpu,
        machine.cores,
        machine.memory,
        machine.rustc,
        machine.python.as_ref().map(|python| format!(", {python}")).unwrap_or_default()
    );
    let (bench_verb, peer_verb) = if command.ends_with("--report-only") {
        ("reads the criterion results of an earlier", "runs")
    } else {
        ("runs", "then")
    };
    let _ = writeln!(
        text,
        "Command: `{command}`, which {bench_verb} `{bench_line}` and {peer_verb} `{peer_line}`.\n"
    );
    let _ = writeln!(
        text,
        "Maps warm: the bench touches every page before timing. Rows not in the CPU cache: every \
         read benchmark walks the same shuffled epoch over all rows, 1000 new rows per iteration.\n"
    );
    text.push_str(table);
    match peer {
        Ok(PeerResult { rows: Some(rows), seconds: Some(seconds), .. }) => {
            let _ = writeln!(
                text,
                "\n`{PYTHON_PEER}`: hangar's read of one random record, `np.ascontiguousarray(mm[idx, \
                 :d0, ...])` then `xxhash.xxh64_hexdigest(a.tobytes())`, {rows} reads in {seconds:.2} s."
            );
        }
        Ok(_) => {}
        Err(reason) => {
            let _ = writeln!(text, "\n`{PYTHON_PEER}` is missing: {reason}");
        }
    }
    text
}

/// `doc` with the text between the markers replaced by `section`; the markers are appended when
/// absent.
fn replace_section(doc: &str, section: &str) -> String {
    let body = format!("{BEGIN_MARKER}\n{}\n{END_MARKER}", section.trim_end());
    if let Some(begin) = doc.find(BEGIN_MARKER)
        && let Some(end) = doc[begin..].find(END_MARKER)
    {
        let end = begin + end + END_MARKER.len();
        return format!("{}{body}{}", &doc[..begin], &doc[end..]);
    }
    let mut out = doc.trim_end().to_owned();
    out.push_str("\n\n");
    out.push_str(&body);
    out.push('\n');
    out
}

/// `path` relative to the workspace root when inside it, for messages and the docs.
fn shown_path(root: &Path, path: &Path) -> String {
    path.strip_prefix(root).unwrap_or(path).display().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Writes criterion's two files for one benchmark below `home/<directory>/new/`.
    fn write_result(home: &Path, directory: &str, full_id: &str, throughput: &str, mean_ns: f64) {
        let new = home.join(directory).join("new");
        std::fs::create_dir_all(&new).unwrap();
        let benchmark = format!(
            r#"{{"group_id":"numpy10","function_id":null,"value_str":null,"throughput":{throughput},"full_id":"{full_id}","directory_name":"{directory}","title":"{full_id}"}}"#
        );
        std::fs::write(new.join("benchmark.json"), benchmark).unwrap();
        let estimate = format!(
            r#"{{"confidence_interval":{{"confidence_level":0.95,"lower_bound":{mean_ns},"upper_bound":{mean_ns}}},"point_estimate":{mean_ns},"standard_error":1.0}}"#
        );
        let estimates = format!(
            r#"{{"mean":{estimate},"median":{estimate},"median_abs_dev":{estimate},"slope":null,"std_dev":{estimate}}}"#
        );
        std::fs::write(new.join("estimates.json"), estimates).unwrap();
    }

    fn rate(results: &[(String, Result<Measured, String>)], id: &str) -> Result<Measured, String> {
        results.iter().find(|(name, _)| name == id).unwrap().1.clone()
    }

    #[test]
    fn criterion_results_are_read_from_every_directory_layout() {
        let home = tempfile::tempdir().unwrap();
        let home = home.path();
        // A function in the group: numpy10/<id>/new.
        write_result(
            home,
            "numpy10/get_checksum",
            "numpy10/get_checksum",
            r#"{"Elements":1000}"#,
            1e6,
        );
        // A parameterised function: numpy10/<id>/<value>/new.
        write_result(
            home,
            "numpy10/put_flush/4096",
            "numpy10/put_flush/4096",
            r#"{"Elements":500}"#,
            1e9,
        );
        // A benchmark named "numpy10/open" outside a group: the slash is sanitised away.
        write_result(home, "numpy10_open", "numpy10/open", "null", 2e3);
        // Bytes throughput.
        write_result(
            home,
            "numpy10/reference_raw_copy",
            "numpy10/reference_raw_copy",
            r#"{"Bytes":4096}"#,
            1e3,
        );
        // Elements and bytes: the elements count.
        write_result(
            home,
            "numpy10/get_no_checksum",
            "numpy10/get_no_checksum",
            r#"{"ElementsAndBytes":{"elements":10,"bytes":40}}"#,
            1e4,
        );
        // A saved baseline is not the current result.
        write_result(
            home,
            "numpy10/reference_copy_xxh64/base",
            "numpy10/reference_copy_xxh64",
            "null",
            1.0,
        );
        std::fs::rename(
            home.join("numpy10/reference_copy_xxh64/base/new"),
            home.join("numpy10/reference_copy_xxh64/base/old"),
        )
        .unwrap();
        // An estimates.json without a mean.
        write_result(
            home,
            "numpy10/reference_write_fsync",
            "numpy10/reference_write_fsync",
            "null",
            1.0,
        );
        std::fs::write(home.join("numpy10/reference_write_fsync/new/estimates.json"), "{}")
            .unwrap();

        let results = read_criterion(home, GROUP, BENCHMARK_IDS);
        assert_eq!(results.len(), BENCHMARK_IDS.len());

        let get = rate(&results, "get_checksum").unwrap();
        assert_eq!(get.unit, Unit::Rows);
        assert!((get.per_second - 1e6).abs() < 1e-6, "{}", get.per_second);
        assert_eq!(get.mean_ns, Some(1e6));

        let put = rate(&results, "put_flush").unwrap();
        assert!((put.per_second - 500.0).abs() < 1e-9);

        let open = rate(&results, "open").unwrap();
        assert_eq!(open.unit, Unit::Iterations);
        assert!((open.per_second - 5e5).abs() < 1e-6);

        let raw = rate(&results, "reference_raw_copy").unwrap();
        assert_eq!(raw.unit, Unit::Bytes);
        assert!((raw.per_second - 4096e6).abs() < 1e-3);

        let no_checksum = rate(&results, "get_no_checksum").unwrap();
        assert_eq!(no_checksum.per_iteration, Some(Throughput::Rows(10)));
        assert_eq!(no_checksum.unit, Unit::Rows);

        assert!(
            rate(&results, "reference_copy_xxh64").unwrap_err().contains("no criterion result")
        );
        assert!(
            rate(&results, "reference_write_fsync").unwrap_err().contains("mean.point_estimate")
        );
        assert!(rate(&results, "reference_xxh64_in_place").is_err());
    }

    #[test]
    fn exact_id_wins_over_a_parameterised_one() {
        let home = tempfile::tempdir().unwrap();
        let home = home.path();
        // "numpy10/open/1" sorts before "numpy10/open/new"; the exact id still wins.
        write_result(home, "numpy10/open/1", "numpy10/open/1", "null", 10.0);
        write_result(home, "numpy10/open", "numpy10/open", "null", 20.0);
        let results = read_criterion(home, GROUP, &["open"]);
        assert_eq!(rate(&results, "open").unwrap().mean_ns, Some(20.0));
    }

    #[test]
    fn missing_criterion_directory_reports_every_id_missing() {
        let home = tempfile::tempdir().unwrap();
        let results = read_criterion(&home.path().join("absent"), GROUP, BENCHMARK_IDS);
        assert!(results.iter().all(|(_, measured)| measured.is_err()));
    }

    fn rows_per_second(name: &str, per_second: f64) -> Row {
        Row {
            name: name.to_owned(),
            measured: Ok(Measured {
                mean_ns: Some(1e9 / per_second * 100.0),
                per_iteration: Some(Throughput::Rows(100)),
                per_second,
                unit: Unit::Rows,
            }),
        }
    }

    #[test]
    fn table_shows_rates_ratios_verdicts_and_missing() {
        let rows = vec![
            rows_per_second("reference_copy_xxh64", 1e6),
            rows_per_second("get_checksum", 8e5),
            rows_per_second("reference_raw_copy", 4e6),
            rows_per_second("get_no_checksum", 1e6),
            Row { name: "put_flush".to_owned(), measured: Err("no result".to_owned()) },
            rows_per_second("reference_write_fsync", 1e3),
            Row { name: PYTHON_PEER.to_owned(), measured: parse_peer_output(
                "warming\n{\"python_slice_xxhash_rows_per_s\": 200000.0, \"rows\": 200000, \"seconds\": 1.0, \"python\": \"3.11.7\", \"numpy\": \"2.4.6\", \"xxhash\": \"4.1.0\"}\n",
            ).map(|peer| peer.measured).ok_or_else(String::new) },
        ];
        let table = render_table(&rows, TARGETS);
        let line = |start: &str| {
            table
                .lines()
                .find(|line| line.starts_with(start))
                .unwrap_or_else(|| panic!("{start} in\n{table}"))
        };
        assert_eq!(
            line("| get_checksum |"),
            "| get_checksum | 125.0 µs per 100 rows | 800.00 k rows/s |  |  |"
        );
        assert_eq!(line("| put_flush |"), "| put_flush | missing |  |  |  |");
        assert_eq!(
            line("| python_slice_xxhash |"),
            "| python_slice_xxhash |  | 200.00 k rows/s |  |  |"
        );
        assert_eq!(
            line("| get_checksum / reference_copy_xxh64 |"),
            "| get_checksum / reference_copy_xxh64 |  | 0.80x | >= 0.70x | PASS |"
        );
        assert_eq!(
            line("| get_checksum / python_slice_xxhash |"),
            "| get_checksum / python_slice_xxhash |  | 4.00x | >= 3.00x | PASS |"
        );
        assert_eq!(
            line("| get_no_checksum / reference_raw_copy |"),
            "| get_no_checksum / reference_raw_copy |  | 0.25x | >= 0.50x | FAIL |"
        );
        assert_eq!(
            line("| put_flush / reference_write_fsync |"),
            "| put_flush / reference_write_fsync |  | missing | >= 0.50x | n/a |"
        );
    }

    #[test]
    fn ratio_of_different_units_is_not_applicable() {
        let mut bytes = rows_per_second("reference_raw_copy", 1e9);
        if let Ok(measured) = &mut bytes.measured {
            measured.unit = Unit::Bytes;
        }
        let rows = vec![bytes, rows_per_second("get_no_checksum", 1e6)];
        let (text, verdict) = evaluate(&rows, &TARGETS[2]);
        assert_eq!(verdict, Verdict::NotApplicable);
        assert_eq!(text, "n/a (rows vs B)");
    }

    #[test]
    fn peer_output_needs_the_rate_key() {
        assert!(parse_peer_output("{\"other\": 1}\nnot json\n").is_none());
        let peer = parse_peer_output("{\"python_slice_xxhash_rows_per_s\": 12.5}").unwrap();
        assert_eq!(peer.measured.per_second, 12.5);
        assert_eq!(peer.versions, None);
    }

    #[test]
    fn section_between_markers_is_replaced_and_the_rest_kept() {
        let doc =
            format!("# Benchmarks\n\nintro\n\n{BEGIN_MARKER}\nold table\n{END_MARKER}\n\nafter\n");
        let replaced = replace_section(&doc, "new table\n");
        assert_eq!(
            replaced,
            format!("# Benchmarks\n\nintro\n\n{BEGIN_MARKER}\nnew table\n{END_MARKER}\n\nafter\n")
        );
        assert_eq!(replace_section(&replaced, "new table\n"), replaced);

        let appended = replace_section("# Benchmarks\n", "table");
        assert_eq!(appended, format!("# Benchmarks\n\n{BEGIN_MARKER}\ntable\n{END_MARKER}\n"));
    }

    #[test]
    fn machine_facts_are_parsed_from_proc() {
        let cpuinfo = "processor\t: 0\nvendor_id\t: GenuineIntel\nmodel name\t: Intel(R) Xeon(R) CPU @ 2.20GHz\n";
        assert_eq!(cpu_model(cpuinfo).as_deref(), Some("Intel(R) Xeon(R) CPU @ 2.20GHz"));
        assert_eq!(cpu_model("processor: 0\n"), None);
        let meminfo = "MemTotal:        8152132 kB\nMemFree:          123 kB\n";
        assert_eq!(total_memory(meminfo).as_deref(), Some("7.8 GiB"));
    }

    #[test]
    fn utc_timestamps_follow_the_calendar() {
        assert_eq!(utc_timestamp(0), "1970-01-01 00:00 UTC");
        assert_eq!(utc_timestamp(951_782_400), "2000-02-29 00:00 UTC");
        assert_eq!(utc_timestamp(1_767_225_600 + 3_600 + 120), "2026-01-01 01:02 UTC");
    }

    #[test]
    fn durations_and_rates_are_readable() {
        assert_eq!(format_duration(812.34), "812.3 ns");
        assert_eq!(format_duration(81_234.0), "81.2 µs");
        assert_eq!(format_duration(1_234_567.0), "1.23 ms");
        assert_eq!(format_duration(2_345_000_000.0), "2.345 s");
        assert_eq!(format_rate(12_345_678.0, Unit::Rows), "12.35 M rows/s");
        assert_eq!(format_rate(950.0, Unit::Iterations), "950.0 iter/s");
    }
}
