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
/// Errors: the build failed, or cargo reported no executable (the message says which).
pub fn stowage_bin() -> Result<PathBuf, String> {
    static BIN: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    BIN.get_or_init(|| match std::env::var_os(VARIABLE) {
        Some(path) => Ok(PathBuf::from(path)),
        None => build(),
    })
    .clone()
}

fn build() -> Result<PathBuf, String> {
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let mut command = Command::new(cargo);
    command
        .current_dir(&workspace)
        .args(["build", "--quiet", "-p", "stowage-cli", "--bin", "stowage"])
        .arg("--message-format=json");
    if !cfg!(debug_assertions) {
        command.arg("--release");
    }
    let output = command.output().map_err(|e| format!("running cargo to build stowage: {e}"))?;
    if !output.status.success() {
        return Err(format!(
            "cargo build -p stowage-cli --bin stowage failed ({}): {}",
            output.status,
            String::from_utf8_lossy(&output.stderr).trim()
        ));
    }
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .filter(|message| message["target"]["name"] == "stowage")
        .find_map(|message| message["executable"].as_str().map(PathBuf::from))
        .ok_or_else(|| "cargo built stowage-cli but reported no stowage executable".to_owned())
}
