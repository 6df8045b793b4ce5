//! Finding a Python interpreter with the modules an interop test needs, or skipping visibly.
//!
//! ```
//! if let Some(python) = stowage_test_support::python::python_with("doc example", &["json"]) {
//!     let out = std::process::Command::new(python).args(["-c", "print(1)"]).output().unwrap();
//!     assert!(out.status.success());
//! }
//! ```

use std::io::Write;
use std::process::{Command, Stdio};

/// Environment variable that turns a missing Python (or module) into a test failure when set to
/// `1`; `cargo xtask test` and CI set it, so the interop tests cannot silently stop running.
pub const REQUIRE_PYTHON_ENV: &str = "STOWAGE_REQUIRE_PYTHON";

/// `python3` when it runs and imports every module in `modules`. Otherwise reports the skip with
/// [`stowage_core::skip::report_skip`] (reason `python3 with <modules> not available ...`) and
/// returns `None`, or panics (naming `test`) when `STOWAGE_REQUIRE_PYTHON=1`.
///
/// # Panics
/// When Python or a module is missing and `STOWAGE_REQUIRE_PYTHON` is `1`.
pub fn python_with(test: &str, modules: &[&str]) -> Option<&'static str> {
    if imports("python3", modules) {
        return Some("python3");
    }
    let what = format!("python3 with {}", modules.join(", "));
    if std::env::var(REQUIRE_PYTHON_ENV).is_ok_and(|v| v == "1") {
        panic!("{test}: {what} is required ({REQUIRE_PYTHON_ENV}=1) but not available");
    }
    let reason = format!("{what} not available (set {REQUIRE_PYTHON_ENV}=1 to fail)");
    stowage_core::skip::report_skip("prerequisite", &reason);
    None
}

/// Whether `python` runs and imports every module in `modules`.
///
/// ```
/// assert!(!stowage_test_support::python::imports("python3", &["no_such_module_anywhere"]));
/// ```
pub fn imports(python: &str, modules: &[&str]) -> bool {
    let imports = if modules.is_empty() {
        "import sys".to_owned()
    } else {
        format!("import {}", modules.join(", "))
    };
    Command::new(python)
        .args(["-c", &imports])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Runs `script` with `python` (`python -c script args…`), feeds it `stdin`, and returns what it
/// printed, trimmed. Interop tests print a count of what they checked and compare it.
///
/// ```
/// if let Some(python) = stowage_test_support::python::python_with("doc example", &["sys"]) {
///     let out = stowage_test_support::python::run_script(
///         python,
///         "import sys; print(len(sys.stdin.read()) + len(sys.argv))",
///         &["a"],
///         b"abc",
///         "doc example",
///     );
///     assert_eq!(out, "5");
/// }
/// ```
///
/// # Panics
/// When the script cannot start or exits with failure: `what` and the script's stderr are in the
/// message (a failed Python assertion names what differed).
pub fn run_script(python: &str, script: &str, args: &[&str], stdin: &[u8], what: &str) -> String {
    let mut child = Command::new(python)
        .arg("-c")
        .arg(script)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{what}: cannot start {python}: {e}"));
    // A script that fails before reading all of stdin closes it: its stderr says why.
    let _ = child.stdin.take().expect("piped").write_all(stdin);
    let out = child.wait_with_output().unwrap_or_else(|e| panic!("{what}: {python}: {e}"));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{what} failed:\n{stderr}");
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}
