//! How a test that cannot run says so: one machine-readable `SKIPPED` line that `cargo xtask
//! test` counts as skipped, not passed. For the tests of every stowage crate and of third-party
//! backends (the conformance suite reports its skipped cases through it).

use std::io::Write;
use std::path::Path;

/// Environment variable naming a file that [`report_skip`] appends its line to as well;
/// `cargo xtask test` sets it, and counts the tests that skipped from that file.
pub const SKIP_LOG_ENV: &str = "STOWAGE_SKIP_LOG";

/// Reports that the running test skips: writes the line
/// `SKIPPED test=<test> bin=<executable> kind=<kind> reason=<reason>` to the real stderr (past the
/// test harness's capture, so the skip is visible) and appends it to the file `$STOWAGE_SKIP_LOG`
/// names, when set. The caller then returns without checking anything more.
///
/// `<test>` is the name libtest reports for the test (the name of the thread it runs on), or
/// `main@<pid>` off a test thread (rustdoc runs each doctest on the main thread of a process of
/// its own); `<executable>` is the file name of the test binary. `kind` is `prerequisite` (an
/// optional prerequisite, such as the reference caches or python3, is missing) or `not-applicable`
/// (a conformance case the backend's declared capabilities rule out).
pub fn report_skip(kind: &str, reason: &str) {
    let test = match std::thread::current().name() {
        Some(name) if name != "main" => name.to_owned(),
        _ => format!("main@{}", std::process::id()),
    };
    let exe = std::env::current_exe().ok();
    let bin = exe.as_deref().and_then(Path::file_name).unwrap_or_default().to_string_lossy();
    // One line per skip, whatever the reason says.
    let reason = reason.replace(['\n', '\r'], " ");
    let line = format!("SKIPPED test={test} bin={bin} kind={kind} reason={reason}\n");
    // Written to the real stderr, not through eprintln!, which the test harness captures.
    let _ = std::io::stderr().lock().write_all(line.as_bytes());
    if let Some(log) = std::env::var_os(SKIP_LOG_ENV).filter(|log| !log.is_empty()) {
        // One append of the whole line, so the lines of tests running at once do not interleave.
        let file = std::fs::OpenOptions::new().create(true).append(true).open(log);
        let _ = file.and_then(|mut file| file.write_all(line.as_bytes()));
    }
}
