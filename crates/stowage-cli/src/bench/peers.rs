//! `--peers`: each original tool's read path, in Python, on the caches stowage just wrote and in
//! the same read order (`peers.py`, run with `python3`).

use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};

use serde::Serialize;
use serde_json::{Value, json};

use super::subject::Kind;
use super::workload::Workload;

/// The script, shipped inside the binary.
const SCRIPT: &str = include_str!("peers.py");
/// How long each peer reads.
const MAX_SECONDS: f64 = 3.0;

/// One peer's rate, or why it did not run.
#[derive(Debug, Clone, Serialize)]
pub struct PeerRate {
    /// The backend whose files it read (`arrow`: torchcachex's read of the Arrow cache).
    pub name: String,
    /// What one read does; or, when `rows_per_s` is `None`, why the peer did not run.
    pub what: String,
    /// Rows per second.
    pub rows_per_s: Option<f64>,
    /// Whether it reads in batches (compared with stowage's batched get, not its single get).
    pub batched: bool,
}

/// What a peer needs to read `kind`'s cache in `dir` in `order`; `None` for a backend whose
/// cache needs more than the workload gives (a NUMPY_10 cache needs its record strings, which
/// `records` supplies as (record, field) per row).
pub fn plan(
    kind: Kind,
    dir: &Path,
    workload: &Workload,
    order: &[usize],
    records: Option<&[Vec<(String, String)>]>,
) -> Option<Value> {
    let dir = dir.display().to_string();
    let keys: Vec<String> = order.iter().map(|&i| workload.key(i)).collect();
    Some(match kind {
        Kind::Npy => {
            let records = records?;
            let reads: Vec<&(String, String)> =
                order.iter().flat_map(|&i| records.get(i).into_iter().flatten()).collect();
            json!({"backend": "npy", "dir": dir, "records": reads})
        }
        Kind::Memmap => json!({"backend": "memmap", "dir": dir, "rows": order}),
        Kind::Arrow => json!({"backend": "arrow", "dir": dir, "keys": keys}),
        Kind::Hdf5 => json!({"backend": "hdf5", "dir": dir, "keys": keys}),
    })
}

/// Runs the peers of `caches` (from [`plan`]); every rate, or the reason each is missing.
pub fn run(caches: Vec<Value>) -> Vec<PeerRate> {
    let names: Vec<String> =
        caches.iter().map(|c| c["backend"].as_str().unwrap_or_default().to_owned()).collect();
    let missing = |why: String| {
        names
            .iter()
            .map(|name| PeerRate {
                name: name.clone(),
                what: why.clone(),
                rows_per_s: None,
                batched: false,
            })
            .collect()
    };
    if caches.is_empty() {
        return Vec::new();
    }
    let plan = json!({"max_seconds": MAX_SECONDS, "caches": caches}).to_string();
    let child = Command::new("python3")
        .args(["-c", SCRIPT])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn();
    let mut child = match child {
        Ok(child) => child,
        Err(e) => return missing(format!("python3 could not be started: {e}")),
    };
    if let Some(mut stdin) = child.stdin.take() {
        // A peer that dies early closes its stdin; its exit status says why.
        let _ = stdin.write_all(plan.as_bytes());
    }
    let output = match child.wait_with_output() {
        Ok(output) => output,
        Err(e) => return missing(format!("waiting for python3: {e}")),
    };
    if !output.status.success() {
        let stderr = String::from_utf8_lossy(&output.stderr);
        let last = stderr.lines().last().unwrap_or("no message");
        return missing(format!("the peer script failed ({}): {last}", output.status));
    }
    parse(&String::from_utf8_lossy(&output.stdout)).unwrap_or_else(missing)
}

/// The rates of the peer script's JSON line.
fn parse(stdout: &str) -> Result<Vec<PeerRate>, String> {
    let line = stdout.lines().last().ok_or("the peer script printed nothing")?;
    let json: Value =
        serde_json::from_str(line).map_err(|e| format!("the peer script printed {line:?}: {e}"))?;
    let rates = json["rates"].as_array().ok_or("the peer script's line has no rates")?;
    Ok(rates
        .iter()
        .map(|rate| {
            let name = rate["name"].as_str().unwrap_or("?").to_owned();
            let batched = rate["batched"].as_bool().unwrap_or(false);
            match (rate["rows_per_s"].as_f64(), rate["what"].as_str()) {
                (Some(rows_per_s), Some(what)) => {
                    PeerRate { name, what: what.to_owned(), rows_per_s: Some(rows_per_s), batched }
                }
                _ => {
                    let why = rate["missing"].as_str().unwrap_or("no rate").to_owned();
                    PeerRate { name, what: why, rows_per_s: None, batched }
                }
            }
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_and_missing_peers_are_read_from_the_scripts_line() {
        let line = r#"{"rates": [{"name": "arrow", "what": "pyarrow", "rows_per_s": 39000.5},
            {"name": "hdf5", "missing": "Python package missing: h5py"}], "python": "3.11.7"}"#;
        let rates = parse(&line.replace('\n', "")).unwrap();
        assert_eq!(rates[0].rows_per_s, Some(39000.5));
        assert_eq!(
            (rates[1].rows_per_s, rates[1].what.as_str()),
            (None, "Python package missing: h5py")
        );
        assert!(parse("not json").unwrap_err().contains("not json"));
        assert!(run(Vec::new()).is_empty());
    }

    #[test]
    fn a_plan_reads_in_the_given_order() {
        let workload = Workload::flat(3, stowage_core::DType::F32, vec![2]);
        let plan = plan(Kind::Arrow, Path::new("/c"), &workload, &[2, 0], None).unwrap();
        assert_eq!(plan["keys"], json!(["f32x2/00000002", "f32x2/00000000"]));
        assert!(super::plan(Kind::Npy, Path::new("/c"), &workload, &[0], None).is_none());
    }
}
