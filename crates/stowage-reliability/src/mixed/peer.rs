//! The original tools' side of a mixed trial: each tool's Python peer in `xtask/py/`, run as a
//! process per call with a JSON request on stdin and a JSON answer on stdout.
//!
//! torchcachex, DNANet and aenet run as their peers (reproductions of the tools' read and
//! write paths) in `python3` with numpy, pyarrow and tables; hangar runs for real, hangar 0.5.2
//! driven by `hangar_peer.py` in the Python named by `STOWAGE_HANGAR_PYTHON`.

use crate::mixed::pair::Pair;
use serde_json::Value as Json;
use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use stowage_test_support::python::{REQUIRE_PYTHON_ENV, python_with};

/// Environment variable naming the Python of a venv with hangar 0.5.2 (and `numpy<1.24`).
pub const HANGAR_PYTHON_ENV: &str = "STOWAGE_HANGAR_PYTHON";

/// A tool's peer, ready to run.
#[derive(Debug, Clone)]
pub struct ToolPeer {
    /// The interpreter.
    pub python: String,
    /// The peer script.
    pub script: PathBuf,
}

/// The peer script of `pair`'s tool.
///
/// ```
/// use stowage_reliability::mixed::{pair::Pair, peer::script};
/// assert!(script(Pair::Arrow).ends_with("xtask/py/torchcachex_peer.py"));
/// assert!(script(Pair::Npy).exists());
/// ```
pub fn script(pair: Pair) -> PathBuf {
    let name = match pair {
        Pair::Npy => "hangar_peer.py",
        Pair::Memmap => "dnanet_peer.py",
        Pair::Arrow => "torchcachex_peer.py",
        Pair::Hdf5 => "aenet_peer.py",
    };
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../xtask/py").join(name)
}

/// The modules `python3` needs for `pair`'s peer (hangar's venv is checked by running it).
pub fn modules(pair: Pair) -> &'static [&'static str] {
    match pair {
        Pair::Npy => &[],
        Pair::Memmap => &["numpy", "pyarrow", "pyarrow.parquet"],
        Pair::Arrow => &["numpy", "pyarrow", "pyarrow.ipc"],
        Pair::Hdf5 => &["numpy", "tables"],
    }
}

impl ToolPeer {
    /// `pair`'s peer run with `python`; for hangar, checked to be hangar 0.5.2.
    ///
    /// Errors: the script is missing, or hangar's `version` answer is not 0.5.2.
    pub fn new(pair: Pair, python: &str) -> Result<ToolPeer, String> {
        let script = script(pair);
        if !script.exists() {
            return Err(format!("{}'s peer {} is missing", pair.tool(), script.display()));
        }
        let peer = ToolPeer { python: python.to_owned(), script };
        if pair == Pair::Npy {
            let versions = peer.call(&["version"], &serde_json::json!({}))?;
            if versions["hangar"] != "0.5.2" {
                return Err(format!("{python} runs hangar {}, not 0.5.2", versions["hangar"]));
            }
        }
        Ok(peer)
    }

    /// `pair`'s peer for a campaign binary.
    ///
    /// Errors: `python3` lacks a module the peer needs, or `STOWAGE_HANGAR_PYTHON` is unset for
    /// hangar; the message says what to install or set.
    pub fn find(pair: Pair) -> Result<ToolPeer, String> {
        if pair == Pair::Npy {
            let python = std::env::var(HANGAR_PYTHON_ENV).ok().filter(|p| !p.is_empty());
            let python = python.ok_or_else(|| {
                format!(
                    "{HANGAR_PYTHON_ENV} is not set: the npy+hangar trials run hangar 0.5.2 \
                     itself; set it to the Python of a venv with hangar==0.5.2 and numpy<1.24"
                )
            })?;
            return ToolPeer::new(pair, &python);
        }
        if !stowage_test_support::python::imports("python3", modules(pair)) {
            return Err(format!(
                "python3 with {} is needed for {}'s peer (python3 -m pip install numpy pyarrow \
                 tables)",
                modules(pair).join(", "),
                pair.tool()
            ));
        }
        ToolPeer::new(pair, "python3")
    }

    /// `pair`'s peer for a test, or `None` after a visible `SKIPPED` line on the real stderr;
    /// with `STOWAGE_REQUIRE_PYTHON=1` a missing peer panics instead. For hangar the Python
    /// is `STOWAGE_HANGAR_PYTHON`'s.
    ///
    /// # Panics
    /// When the peer is missing and required, or is not what it should be (hangar not 0.5.2).
    pub fn for_test(pair: Pair, test: &str) -> Option<ToolPeer> {
        let python = if pair == Pair::Npy {
            match std::env::var(HANGAR_PYTHON_ENV) {
                Ok(python) if !python.is_empty() => python,
                _ => {
                    let what =
                        format!("{HANGAR_PYTHON_ENV} (the Python of a venv with hangar 0.5.2)");
                    if std::env::var(REQUIRE_PYTHON_ENV).is_ok_and(|v| v == "1") {
                        panic!("{test}: {what} is required ({REQUIRE_PYTHON_ENV}=1) but not set");
                    }
                    let reason = format!("{what} not set (set {REQUIRE_PYTHON_ENV}=1 to fail)");
                    stowage_core::skip::report_skip("prerequisite", &reason);
                    return None;
                }
            }
        } else {
            python_with(test, modules(pair))?.to_owned()
        };
        Some(ToolPeer::new(pair, &python).unwrap_or_else(|e| panic!("{test}: {e}")))
    }

    /// Runs the peer with `args`, `request` on its stdin; its JSON answer.
    ///
    /// Errors: the peer could not start, exited with failure, or printed something that is not
    /// JSON; the message quotes its stderr (a Python traceback names what failed).
    pub fn call(&self, args: &[&str], request: &Json) -> Result<Json, String> {
        let what = format!("{} {}", self.script.display(), args.join(" "));
        let mut child = Command::new(&self.python)
            .arg(&self.script)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("{what}: cannot start {}: {e}", self.python))?;
        let stdin = serde_json::to_vec(request).expect("JSON serializes");
        // A peer that fails before reading all of stdin closes it: its stderr says why.
        let _ = child.stdin.take().expect("piped").write_all(&stdin);
        let out = child.wait_with_output().map_err(|e| format!("{what}: {e}"))?;
        let stderr = String::from_utf8_lossy(&out.stderr);
        if !out.status.success() {
            return Err(format!("{what} failed ({}): {}", out.status, stderr.trim()));
        }
        let stdout = String::from_utf8_lossy(&out.stdout);
        serde_json::from_str(stdout.trim())
            .map_err(|e| format!("{what} printed {:?}, not JSON: {e}", clip(&stdout, 300)))
    }
}

/// `text` cut to `max` characters, with how much was left out.
///
/// ```
/// use stowage_reliability::mixed::peer::clip;
/// assert_eq!(clip("abcdef", 3), "abc… (3 more characters)");
/// assert_eq!(clip("abc", 3), "abc");
/// ```
pub fn clip(text: &str, max: usize) -> String {
    let count = text.chars().count();
    if count <= max {
        return text.to_owned();
    }
    let kept: String = text.chars().take(max).collect();
    format!("{kept}… ({} more characters)", count - max)
}
