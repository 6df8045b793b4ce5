//! The `stowage` command the campaigns run as users do: `$STOWAGE_BIN` when set, else the
//! binary of this workspace's `stowage-cli`, built on first use with the same profile as the
//! campaign (`cargo build [--release] -p stowage-cli --bin stowage`), its path taken from
//! cargo's own report of what it built (so `CARGO_TARGET_DIR` and profiles need no guessing).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// The environment variable naming a `stowage` binary to use instead of building one.
pub const VARIABLE: &str = "STOWAGE_BIN";

/// The path of the `stowage` binary, built once per process when [`VARIABLE`] is not set.
///
/// Errors: [`VARIABLE`] names no file; the build failed (the end of its output is quoted).
pub fn stowage_bin() -> Result<PathBuf, String> {
    static BIN: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    BIN.get_or_init(|| match std::env::var_os(VARIABLE).map(PathBuf::from) {
        Some(path) if path.is_file() => Ok(path),
        Some(path) => Err(format!("{VARIABLE}={} is not a file", path.display())),
        None => build(),
    })
    .clone()
}

fn build() -> Result<PathBuf, String> {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR")).join("../stowage-cli/Cargo.toml");
    // `CARGO` is the cargo running us (under `cargo run` or `cargo test`), same toolchain.
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut command = Command::new(cargo);
    command.args(["build", "--bin", "stowage", "--message-format=json-render-diagnostics"]);
    command.arg("--manifest-path").arg(&manifest);
    if !cfg!(debug_assertions) {
        command.arg("--release");
    }
    eprintln!("building the stowage command (`cargo build --bin stowage`) ...");
    let output = command.output().map_err(|e| format!("starting cargo: {e}"))?;
    if !output.status.success() {
        let stderr = String::from_utf8_lossy(&output.stderr);
        let tail: Vec<&str> = stderr.lines().rev().take(30).collect();
        return Err(format!(
            "building the stowage command failed ({}): {}; or set {VARIABLE}",
            output.status,
            tail.into_iter().rev().collect::<Vec<_>>().join("\n")
        ));
    }
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .filter(|m| m["reason"] == "compiler-artifact" && m["target"]["name"] == "stowage")
        .filter_map(|m| m["executable"].as_str().map(PathBuf::from))
        .next_back()
        .ok_or_else(|| "cargo built no `stowage` executable".to_string())
}
