//! Running a suite's Python peer on the bench data and reading the rates of its JSON line.

use std::path::Path;
use std::process::{Command, Stdio};

use serde_json::Value;

use super::rate::{Measured, Row};
use super::shown_path;
use super::suite::Peer;
use crate::prerequisites::{self, PREREQUISITES, PYTHON, Prerequisite};

/// What a peer printed: one measurement per rate, and the versions it ran with.
#[derive(Clone, Debug)]
pub struct PeerOutput {
    /// One per rate of the peer, in the peer's order.
    pub rates: Vec<PeerMeasurement>,
    /// `Python 3.11.7, numpy 2.4.6, xxhash 4.1.0` when the peer reported every version.
    pub versions: Option<String>,
    /// The JSON line the rates were read from (levels, for a suite whose peer measures them).
    pub json: Value,
}

/// One rate of a peer's JSON line, with how much it read when the line says.
#[derive(Clone, Debug)]
pub struct PeerMeasurement {
    /// The table row: the rate's name and rows per second, or why the line has no such rate.
    pub row: Row,
    /// Rows read for the rate.
    pub rows: Option<u64>,
    /// Seconds those reads took.
    pub seconds: Option<f64>,
}

/// The peer's command line as the docs show it: `python3 <script> <bench data>`.
pub fn command_line(root: &Path, peer: &Peer, bench_data: &Path) -> String {
    command_line_with(root, Path::new(PYTHON), peer, bench_data)
}

/// [`command_line`] with another interpreter (shown relative to the root when inside it).
pub fn command_line_with(root: &Path, python: &Path, peer: &Peer, bench_data: &Path) -> String {
    format!(
        "{} {} {}",
        shown_path(root, python),
        shown_path(root, &root.join(peer.script)),
        shown_path(root, bench_data)
    )
}

/// Checks the bench data is there, ensures the peer's Python packages, then runs the peer and
/// reads its rates. `line` is [`command_line`], for messages.
pub fn run(root: &Path, peer: &Peer, bench_data: &Path, line: &str) -> Result<PeerOutput, String> {
    run_with(root, Path::new(PYTHON), &[], peer, bench_data, line)
}

/// [`run`] with another interpreter (the venv the Python package is installed in) and
/// environment variables.
pub fn run_with(
    root: &Path,
    python: &Path,
    env: &[(&str, &std::ffi::OsStr)],
    peer: &Peer,
    bench_data: &Path,
    line: &str,
) -> Result<PeerOutput, String> {
    if let Some(missing) =
        peer.needs.iter().map(|file| bench_data.join(file)).find(|path| !path.is_file())
    {
        return Err(format!(
            "{} does not exist (the benchmark writes it; run `cargo xtask bench` without \
             --report-only)",
            shown_path(root, &missing)
        ));
    }
    let wanted: Vec<Prerequisite> = PREREQUISITES
        .iter()
        .filter(|p| peer.packages.contains(&p.package))
        .map(|p| Prerequisite { needed_for: "the benchmark's Python peer", ..*p })
        .collect();
    prerequisites::ensure(&wanted)?;
    println!("xtask: ==> {line}");
    let output = Command::new(python)
        .envs(env.iter().copied())
        .arg(root.join(peer.script))
        .arg(bench_data)
        .stderr(Stdio::inherit())
        .output()
        .map_err(|error| format!("could not start `{line}`: {error}"))?;
    let stdout = String::from_utf8_lossy(&output.stdout);
    print!("{stdout}");
    if !output.status.success() {
        return Err(format!("`{line}` failed ({}); see its message above", output.status));
    }
    parse_output(peer, &stdout).ok_or_else(|| {
        let keys: Vec<&str> = peer.rates.iter().map(|rate| rate.key).collect();
        format!("`{line}` printed no JSON line with {}", keys.join(" or "))
    })
}

/// The last JSON line of the peer's output that holds any of the peer's rate keys; a rate whose
/// key that line lacks (or whose value is not a positive number) is a missing row.
pub fn parse_output(peer: &Peer, stdout: &str) -> Option<PeerOutput> {
    let json: Value = stdout.lines().rev().find_map(|line| {
        let json: Value = serde_json::from_str(line.trim()).ok()?;
        peer.rates.iter().any(|rate| json.get(rate.key).is_some()).then_some(json)
    })?;
    let rates = peer
        .rates
        .iter()
        .map(|rate| {
            let measured = json
                .get(rate.key)
                .and_then(Value::as_f64)
                .filter(|per_second| *per_second > 0.0)
                .map(Measured::rows_per_second)
                .ok_or_else(|| format!("the peer's JSON line has no positive {}", rate.key));
            PeerMeasurement {
                row: Row { name: rate.name.to_owned(), measured },
                rows: json.pointer(rate.rows_at).and_then(Value::as_u64),
                seconds: json.pointer(rate.seconds_at).and_then(Value::as_f64),
            }
        })
        .collect();
    let text = |key: &str| json.get(key).and_then(Value::as_str).map(str::to_owned);
    let versions = std::iter::once(text("python").map(|version| format!("Python {version}")))
        .chain(
            peer.packages
                .iter()
                .map(|package| text(package).map(|version| format!("{package} {version}"))),
        )
        .collect::<Option<Vec<String>>>()
        .map(|parts| parts.join(", "));
    Some(PeerOutput { rates, versions, json })
}

/// Where a suite without a criterion bench keeps its peer's last JSON line (in its bench data),
/// which `--report-only` reads back.
pub const SAVED_LINE: &str = "peer-output.json";

/// Keeps `output`'s JSON line in `<bench data>/peer-output.json`.
pub fn save(bench_data: &Path, output: &PeerOutput) -> Result<(), String> {
    let path = bench_data.join(SAVED_LINE);
    std::fs::create_dir_all(bench_data)
        .and_then(|()| std::fs::write(&path, format!("{}\n", output.json)))
        .map_err(|error| format!("cannot write {}: {error}", path.display()))
}

/// The rates of the line [`save`] kept, or why there are none.
pub fn read_saved(root: &Path, peer: &Peer, bench_data: &Path) -> Result<PeerOutput, String> {
    let path = bench_data.join(SAVED_LINE);
    let text = std::fs::read_to_string(&path).map_err(|_| {
        format!(
            "{} does not exist (the suite keeps its last run's results there; run `cargo xtask \
             bench` without --report-only)",
            shown_path(root, &path)
        )
    })?;
    parse_output(peer, &text).ok_or_else(|| {
        format!("{} holds no JSON line with the peer's rates", shown_path(root, &path))
    })
}

/// The table rows of the peer's rates: measured, or each missing for the reason the peer did not
/// run.
pub fn rows(peer: &Peer, output: &Result<PeerOutput, String>) -> Vec<Row> {
    match output {
        Ok(output) => output.rates.iter().map(|rate| rate.row.clone()).collect(),
        Err(reason) => peer
            .rates
            .iter()
            .map(|rate| Row { name: rate.name.to_owned(), measured: Err(reason.clone()) })
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::suite::{MEMMAP, NUMPY10, PYTHON};

    /// A line without the rate key, or no JSON at all, is not the peer's result.
    #[test]
    fn peer_output_needs_the_rate_key() {
        assert!(parse_output(&NUMPY10.peer, "{\"other\": 1}\nnot json\n").is_none());
        let peer =
            parse_output(&NUMPY10.peer, "{\"python_slice_xxhash_rows_per_s\": 12.5}").unwrap();
        assert_eq!(peer.rates[0].row.measured.as_ref().unwrap().value, 12.5);
        assert_eq!(peer.rates[0].rows, None);
        assert_eq!(peer.versions, None);
    }

    /// numpy10's peer: one rate, rows and seconds at the top level, three versions.
    #[test]
    fn numpy10_peer_line_gives_its_rate_counts_and_versions() {
        let peer = parse_output(
            &NUMPY10.peer,
            "warming\n{\"python_slice_xxhash_rows_per_s\": 200000.0, \"rows\": 200000, \"seconds\": 1.0, \"python\": \"3.11.7\", \"numpy\": \"2.4.6\", \"xxhash\": \"4.1.0\"}\n",
        )
        .unwrap();
        assert_eq!(peer.versions.as_deref(), Some("Python 3.11.7, numpy 2.4.6, xxhash 4.1.0"));
        assert_eq!(peer.rates.len(), 1);
        assert_eq!(peer.rates[0].row.name, "python_slice_xxhash");
        assert_eq!(peer.rates[0].rows, Some(200_000));
        assert_eq!(peer.rates[0].seconds, Some(1.0));
    }

    /// memmap's peer: two rates from one line, each with its own cache's rows and seconds; a rate
    /// the line lacks is missing while the other is kept.
    #[test]
    fn several_peer_keys_are_read_from_one_line() {
        let line = r#"{"python_memmap_copy_rows_per_s": 400000.0, "python_memmap_copy_dnanet_rows_per_s": 20000.0, "rows": {"f32x512": 200000, "dnanet": 40000}, "seconds": {"f32x512": 0.5, "dnanet": 2.0}, "python": "3.11.7", "numpy": "2.4.6"}"#;
        let peer = parse_output(&MEMMAP.peer, line).unwrap();
        assert_eq!(peer.versions.as_deref(), Some("Python 3.11.7, numpy 2.4.6"));
        let names: Vec<&str> = peer.rates.iter().map(|rate| rate.row.name.as_str()).collect();
        assert_eq!(names, ["python_memmap_copy", "python_memmap_copy_dnanet"]);
        assert_eq!(peer.rates[0].row.measured.as_ref().unwrap().value, 400_000.0);
        assert_eq!((peer.rates[0].rows, peer.rates[0].seconds), (Some(200_000), Some(0.5)));
        assert_eq!(peer.rates[1].row.measured.as_ref().unwrap().value, 20_000.0);
        assert_eq!((peer.rates[1].rows, peer.rates[1].seconds), (Some(40_000), Some(2.0)));

        let half = parse_output(
            &MEMMAP.peer,
            r#"{"python_memmap_copy_rows_per_s": 1.5, "python_memmap_copy_dnanet_rows_per_s": 0}"#,
        )
        .unwrap();
        assert!(half.rates[0].row.measured.is_ok());
        assert_eq!(
            half.rates[1].row.measured.as_ref().unwrap_err(),
            "the peer's JSON line has no positive python_memmap_copy_dnanet_rows_per_s"
        );
        assert_eq!(half.versions, None);
    }

    /// A peer that did not run leaves every one of its rates missing, for the same reason.
    #[test]
    fn a_peer_that_did_not_run_leaves_every_rate_missing() {
        let rows = rows(&MEMMAP.peer, &Err("no bench data".to_owned()));
        assert_eq!(rows.len(), 2);
        assert!(rows.iter().all(|row| row.measured.as_ref().unwrap_err() == "no bench data"));
    }

    /// The peer is not started (and nothing installed) when its bench data is absent.
    #[test]
    fn missing_bench_data_is_named_without_starting_the_peer() {
        let dir = tempfile::tempdir().unwrap();
        let root = crate::workspace_root();
        let line = command_line(&root, &MEMMAP.peer, dir.path());
        let error = run(&root, &MEMMAP.peer, dir.path(), &line).unwrap_err();
        assert!(
            error.starts_with(&format!(
                "{}/f32x512/shapes.json does not exist",
                dir.path().display()
            )),
            "{error}"
        );
        let in_workspace = root.join("target/no-such-bench-data");
        let error = run(&root, &NUMPY10.peer, &in_workspace, "peer").unwrap_err();
        assert!(
            error.starts_with("target/no-such-bench-data/records.txt does not exist"),
            "{error}"
        );
        assert_eq!(
            command_line(&root, &MEMMAP.peer, &root.join("target/bench-data/memmap")),
            "python3 xtask/py/memmap_peer.py target/bench-data/memmap"
        );
    }

    /// The python suite's line: many rates, each with its own rows and seconds, the versions
    /// with the stowage package's, and its levels kept in the JSON for the caller.
    #[test]
    fn the_python_script_line_gives_rates_versions_and_levels() {
        let line = r#"{"memmap_rust_get_rows_per_s": 800000.0, "memmap_py_get_rows_per_s": 400000.0, "rows": {"memmap_rust_get": 10240, "memmap_py_get": 10240}, "seconds": {"memmap_rust_get": 0.0128, "memmap_py_get": 0.0256}, "levels": {"memmap_get_overhead": {"value": 1.25, "unit": "µs"}}, "python": "3.11.7", "numpy": "2.4.6", "pyarrow": "26.0.1", "tables": "3.11.1", "h5py": "3.16.0", "xxhash": "4.1.0", "stowage": "0.1.0"}"#;
        let peer = parse_output(&PYTHON.peer, &format!("python_bench: built\n{line}\n")).unwrap();
        assert_eq!(
            peer.versions.as_deref(),
            Some(
                "Python 3.11.7, numpy 2.4.6, pyarrow 26.0.1, tables 3.11.1, h5py 3.16.0, \
                 xxhash 4.1.0, stowage 0.1.0"
            )
        );
        assert_eq!(peer.rates.len(), PYTHON.peer.rates.len());
        let rust = &peer.rates[0];
        assert_eq!(rust.row.name, "memmap_rust_get");
        assert_eq!(rust.row.measured.as_ref().unwrap().value, 800_000.0);
        assert_eq!((rust.rows, rust.seconds), (Some(10_240), Some(0.0128)));
        let python = &peer.rates[1];
        assert_eq!((python.row.name.as_str(), python.rows), ("memmap_py_get", Some(10_240)));
        let missing = peer.rates.iter().find(|rate| rate.row.name == "hdf5_py_get").unwrap();
        assert_eq!(
            missing.row.measured.as_ref().unwrap_err(),
            "the peer's JSON line has no positive hdf5_py_get_rows_per_s"
        );
        assert_eq!(peer.json["levels"]["memmap_get_overhead"]["value"], 1.25);
    }

    /// A suite without a criterion bench keeps its line for `--report-only`, which reads it back
    /// whole, or says where it would be.
    #[test]
    fn a_kept_line_is_read_back() {
        let dir = tempfile::tempdir().unwrap();
        let root = crate::workspace_root();
        let error = read_saved(&root, &PYTHON.peer, dir.path()).unwrap_err();
        assert!(error.ends_with("peer-output.json does not exist (the suite keeps its last run's results there; run `cargo xtask bench` without --report-only)"), "{error}");
        let line = r#"{"npy_py_get_rows_per_s": 3e5, "rows": {"npy_py_get": 1024}, "seconds": {"npy_py_get": 0.003}, "levels": {}}"#;
        let output = parse_output(&PYTHON.peer, line).unwrap();
        save(&dir.path().join("python"), &output).unwrap();
        let again = read_saved(&root, &PYTHON.peer, &dir.path().join("python")).unwrap();
        assert_eq!(again.json, output.json);
        let npy = again.rates.iter().find(|rate| rate.row.name == "npy_py_get").unwrap();
        assert_eq!(npy.row.measured.as_ref().unwrap().value, 3e5);
        std::fs::write(dir.path().join("python").join(SAVED_LINE), "not json\n").unwrap();
        let error = read_saved(&root, &PYTHON.peer, &dir.path().join("python")).unwrap_err();
        assert!(error.ends_with("peer-output.json holds no JSON line with the peer's rates"));
        assert_eq!(
            command_line_with(
                &root,
                &root.join("target/py-venv/bin/python"),
                &PYTHON.peer,
                &root.join("target/bench-data/python")
            ),
            "target/py-venv/bin/python xtask/py/python_bench.py target/bench-data/python"
        );
    }
}
