//! Finding a Python interpreter with the modules an interop test needs, or skipping visibly.
//!
//! ```
//! if let Some(python) = stowage_conformance::python::python_with("doc example", &["json"]) {
//!     let out = std::process::Command::new(python).args(["-c", "print(1)"]).output().unwrap();
//!     assert!(out.status.success());
//! }
//! ```

use std::io::Write;
use std::process::{Command, Stdio};

/// Environment variable that turns a missing Python (or module) into a test failure when set to
/// `1`; `cargo xtask test` and CI set it, so the interop tests cannot silently stop running.
pub const REQUIRE_PYTHON_ENV: &str = "STOWAGE_REQUIRE_PYTHON";

/// `python3` when it runs and imports every module in `modules`. Otherwise prints
/// `SKIPPED: <test>: python3 with <modules> not available` to the real stderr (past the test
/// harness's capture) and returns `None`, or panics when `STOWAGE_REQUIRE_PYTHON=1`.
///
/// # Panics
/// When Python or a module is missing and `STOWAGE_REQUIRE_PYTHON` is `1`.
pub fn python_with(test: &str, modules: &[&str]) -> Option<&'static str> {
    let imports = if modules.is_empty() {
        "import sys".to_owned()
    } else {
        format!("import {}", modules.join(", "))
    };
    let works = Command::new("python3")
        .args(["-c", &imports])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if works {
        return Some("python3");
    }
    let what = format!("python3 with {}", modules.join(", "));
    if std::env::var(REQUIRE_PYTHON_ENV).is_ok_and(|v| v == "1") {
        panic!("{test}: {what} is required ({REQUIRE_PYTHON_ENV}=1) but not available");
    }
    let line =
        format!("SKIPPED: {test}: {what} not available (set {REQUIRE_PYTHON_ENV}=1 to fail)\n");
    let _ = std::io::stderr().lock().write_all(line.as_bytes());
    None
}
