//! `cargo xtask test`: every test of the project, in order, stopping at the first failure.

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsString;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use crate::architecture;
use crate::hangar_venv::{self, HANGAR_PYTHON_ENV};
use crate::prerequisites::{self, PREREQUISITES};
use crate::{cargo, display_command, is_ci, target_dir, workspace_root};

/// Environment variable naming the file every test that skips appends its `SKIPPED` line to
/// (written by `stowage_core::skip::report_skip`); set by [`run_counting_tests`].
const SKIP_LOG_ENV: &str = "STOWAGE_SKIP_LOG";

/// Runs the architecture check, the prerequisites step and then the cargo steps (only
/// `cargo test` when `quick`).
pub fn run(quick: bool) -> Result<(), String> {
    let started = Instant::now();
    let mut timings: Vec<(String, f64)> = Vec::new();

    // First, as it is cheap and needs nothing installed.
    println!("xtask: ==> architecture");
    let step_started = Instant::now();
    architecture::run()?;
    timings.push(("architecture".to_owned(), step_started.elapsed().as_secs_f64()));

    println!("xtask: ==> prerequisites");
    let step_started = Instant::now();
    let python = prerequisites::python_version()?;
    prerequisites::ensure(PREREQUISITES)?;
    println!("xtask: {python} with numpy, xxhash, pyarrow, tables and h5py; libhdf5-dev present");
    let hangar_python = hangar_venv::ensure(&target_dir())?;
    println!("xtask: hangar 0.5.2 in {}", hangar_python.display());
    if !quick {
        prerequisites::ensure_rust_components()?;
        println!("xtask: rustfmt and clippy present");
    }
    let reference =
        ReferenceDir::find(&workspace_root(), std::env::var_os("STOWAGE_REFERENCE_DIR"));
    let require_reference = reference.require(is_ci())?;
    timings.push(("prerequisites".to_owned(), step_started.elapsed().as_secs_f64()));

    let mut steps: Vec<Command> = Vec::new();
    if !quick {
        let mut fmt = cargo();
        fmt.args(["fmt", "--all", "--", "--check"]);
        steps.push(fmt);
        let mut clippy = cargo();
        clippy.args(["clippy", "--workspace", "--all-targets", "--", "-D", "warnings"]);
        steps.push(clippy);
    }
    let mut test = cargo();
    test.args(["test", "--workspace"])
        .env("STOWAGE_REQUIRE_PYTHON", "1")
        .env(HANGAR_PYTHON_ENV, &hangar_python)
        .env("STOWAGE_REFERENCE_DIR", &reference.path);
    if require_reference {
        test.env("STOWAGE_REQUIRE_REFERENCE", "1");
    }
    steps.push(test);
    if !quick {
        let mut doc = cargo();
        doc.args(["doc", "--workspace", "--no-deps"]).env("RUSTDOCFLAGS", "-D warnings");
        steps.push(doc);
    }

    let mut counts = TestCounts::default();
    for mut step in steps {
        let name = display_command(&step);
        println!("xtask: ==> {name}");
        let step_started = Instant::now();
        let is_test_step = step.get_args().next().is_some_and(|arg| arg == "test");
        let status = if is_test_step {
            run_counting_tests(&mut step, &mut counts)?
        } else {
            step.status().map_err(|error| format!("could not start `{name}`: {error}"))?
        };
        let seconds = step_started.elapsed().as_secs_f64();
        if is_test_step {
            for line in counts.skip_report() {
                println!("xtask: {line}");
            }
        }
        if !status.success() {
            if is_test_step {
                println!("xtask: {}", counts.summary());
            }
            return Err(format!("step `{name}` failed ({status}) after {seconds:.1} s"));
        }
        println!("xtask: `{name}` passed in {seconds:.1} s");
        timings.push((name, seconds));
    }

    println!("xtask: summary");
    for (name, seconds) in &timings {
        println!("xtask:   {seconds:>7.1} s  {name}");
    }
    println!(
        "xtask: all {} steps passed in {:.1} s",
        timings.len(),
        started.elapsed().as_secs_f64()
    );
    println!("xtask: {}", counts.summary());
    Ok(())
}

/// Where the reference caches are and whether they exist.
#[derive(Debug)]
pub(crate) struct ReferenceDir {
    /// Absolute path, passed to the tests as `STOWAGE_REFERENCE_DIR`.
    pub(crate) path: PathBuf,
    /// Where the path came from, for messages.
    source: &'static str,
}

impl ReferenceDir {
    /// `overridden` (the value of `$STOWAGE_REFERENCE_DIR`, relative to the current directory) or
    /// `<root>/../shared/reference`.
    pub(crate) fn find(root: &Path, overridden: Option<OsString>) -> ReferenceDir {
        let (path, source) = match overridden.filter(|value| !value.is_empty()) {
            Some(value) => (PathBuf::from(value), "STOWAGE_REFERENCE_DIR"),
            None => (root.join("..").join("shared").join("reference"), "the default"),
        };
        let path = path.canonicalize().or_else(|_| std::path::absolute(&path)).unwrap_or(path);
        ReferenceDir { path, source }
    }

    /// Whether the tests must use the reference caches; an error in CI when they are missing.
    fn require(&self, ci: bool) -> Result<bool, String> {
        let path = self.path.display();
        if self.path.is_dir() {
            println!(
                "xtask: reference caches at {path} ({}); STOWAGE_REQUIRE_REFERENCE=1",
                self.source
            );
            Ok(true)
        } else if ci {
            Err(format!(
                "CI is set but the reference caches are missing: {path} ({}) is not a directory; \
                 CI needs ../shared/reference beside the clone, or STOWAGE_REFERENCE_DIR",
                self.source
            ))
        } else {
            println!(
                "xtask: reference caches not found at {path} ({}); the reference tests will print \
                 SKIPPED (set STOWAGE_REFERENCE_DIR to run them)",
                self.source
            );
            Ok(false)
        }
    }
}

/// A test that reported a skip: one line
/// `SKIPPED test=<libtest name> bin=<test executable> kind=<kind> reason=<why>`, as
/// `stowage_core::skip::report_skip` writes it (`kind` is `prerequisite` or
/// `not-applicable`).
#[derive(Debug)]
struct Skip {
    test: String,
    bin: String,
    kind: String,
    reason: String,
}

impl Skip {
    /// The skip a line reports, or `None` for any other line.
    fn parse(line: &str) -> Option<Skip> {
        let rest = line.trim_end().strip_prefix("SKIPPED test=")?;
        let (test, rest) = rest.split_once(" bin=")?;
        let (bin, rest) = rest.split_once(" kind=")?;
        let (kind, reason) = rest.split_once(" reason=")?;
        let (test, bin, kind, reason) =
            (test.to_owned(), bin.to_owned(), kind.to_owned(), reason.to_owned());
        Some(Skip { test, bin, kind, reason })
    }

    /// The test binary's name without cargo's hash (`doctests` for a doctest, which runs on the
    /// main thread of a process of its own) and the test's name (`pid <n>` for a doctest).
    fn display_name(&self) -> (&str, String) {
        if let Some(pid) = self.test.strip_prefix("main@") {
            return ("doctests", format!("pid {pid}"));
        }
        let bin = match self.bin.rsplit_once('-') {
            Some((stem, hash))
                if hash.len() == 16 && hash.bytes().all(|b| b.is_ascii_hexdigit()) =>
            {
                stem
            }
            _ => &self.bin,
        };
        (bin, self.test.clone())
    }
}

/// Test totals added up from libtest's output and the tests' skip lines.
///
/// The rule: a test counts as skipped when it reported a skip and libtest did not report it
/// `FAILED` (matched by name, as libtest's lines do not name the binary). A test calls the skip
/// helpers before checking anything and returns when they report a skip, so it checked nothing,
/// yet libtest counts it as passed: here it moves from passed to skipped. A test that skips an
/// optional part after checking the rest counts as skipped too, so the count errs toward "not
/// run", never toward "passed". A conformance case that the backend's declared capabilities
/// rule out is a `#[test]` of its own that checked nothing: skipped as well, and listed apart.
#[derive(Debug, Default)]
struct TestCounts {
    passed: u64,
    failed: u64,
    ignored: u64,
    /// Names of the tests libtest reported `FAILED`.
    failed_tests: BTreeSet<String>,
    /// The first skip each (test executable, test name) reported.
    skips: BTreeMap<(String, String), Skip>,
}

impl TestCounts {
    /// Adds one line of libtest's output: the counts of a
    /// `test result: ok. 5 passed; 0 failed; 1 ignored; ...` line, the name of a
    /// `test <name> ... FAILED` line.
    fn add_line(&mut self, line: &str) {
        if let Some(name) =
            line.trim().strip_prefix("test ").and_then(|r| r.strip_suffix(" ... FAILED"))
        {
            self.failed_tests.insert(name.to_owned());
            return;
        }
        let Some(rest) = line.trim().strip_prefix("test result: ") else {
            return;
        };
        for part in rest.split(';') {
            let mut words = part.split_whitespace().rev();
            let (Some(kind), Some(number)) = (words.next(), words.next()) else {
                continue;
            };
            let Ok(number) = number.parse::<u64>() else {
                continue;
            };
            match kind {
                "passed" => self.passed += number,
                "failed" => self.failed += number,
                "ignored" => self.ignored += number,
                _ => {}
            }
        }
    }

    /// Adds the skips of a skip log (other lines are ignored).
    fn add_skip_log(&mut self, log: &str) {
        for skip in log.lines().filter_map(Skip::parse) {
            self.skips.entry((skip.bin.clone(), skip.test.clone())).or_insert(skip);
        }
    }

    /// The tests counted as skipped: those that reported a skip and did not fail.
    fn skipped_tests(&self) -> impl Iterator<Item = &Skip> {
        self.skips.values().filter(|skip| !self.failed_tests.contains(&skip.test))
    }

    /// `<passed> passed, <failed> failed, <skipped> skipped`, with the tests that reported a
    /// skip moved from passed to skipped (next to the `#[ignore]`d ones).
    fn summary(&self) -> String {
        let skipped = self.skipped_tests().count() as u64;
        format!(
            "{} passed, {} failed, {} skipped",
            self.passed.saturating_sub(skipped),
            self.failed,
            self.ignored + skipped
        )
    }

    /// The skipped tests, grouped by kind, reason and test binary, a few names per binary.
    fn skip_report(&self) -> Vec<String> {
        const NAMES_SHOWN: usize = 3;
        type ByBinary<'a> = BTreeMap<&'a str, Vec<String>>;
        let mut groups: BTreeMap<&str, BTreeMap<&str, ByBinary>> = BTreeMap::new();
        for skip in self.skipped_tests() {
            let (bin, test) = skip.display_name();
            let reasons = groups.entry(&skip.kind).or_default();
            reasons.entry(&skip.reason).or_default().entry(bin).or_default().push(test);
        }
        let mut lines = Vec::new();
        for (kind, reasons) in &groups {
            let count: usize = reasons.values().flat_map(|bins| bins.values()).map(Vec::len).sum();
            let s = if count == 1 { "" } else { "s" };
            lines.push(match *kind {
                "not-applicable" => {
                    format!("{count} conformance case{s} skipped (capability not declared):")
                }
                "prerequisite" => format!("{count} test{s} skipped (prerequisite missing):"),
                other => format!("{count} test{s} skipped ({other}):"),
            });
            for (reason, bins) in reasons {
                lines.push(format!("  {reason}:"));
                for (bin, tests) in bins {
                    let mut shown = tests[..tests.len().min(NAMES_SHOWN)].join(", ");
                    if tests.len() > NAMES_SHOWN {
                        shown.push_str(&format!(" and {} more", tests.len() - NAMES_SHOWN));
                    }
                    lines.push(format!("    {bin}: {shown}"));
                }
            }
        }
        lines
    }
}

/// Runs `cargo test`, echoing its standard output line by line while adding up the results, and
/// then adds the skips the tests appended to a fresh skip log ([`SKIP_LOG_ENV`]).
fn run_counting_tests(
    command: &mut Command,
    counts: &mut TestCounts,
) -> Result<std::process::ExitStatus, String> {
    let name = display_command(command);
    // A file, not the tests' stderr: libtest captures the output of passing tests in some
    // set-ups (doctests run in processes of their own), and a file loses no line.
    let log = std::env::temp_dir().join(format!("stowage-skip-log-{}.txt", std::process::id()));
    std::fs::write(&log, "").map_err(|e| format!("cannot create {}: {e}", log.display()))?;
    let status = run_echoing(command.env(SKIP_LOG_ENV, &log), &name, counts);
    let skips = std::fs::read_to_string(&log);
    let _ = std::fs::remove_file(&log);
    counts.add_skip_log(&skips.map_err(|e| format!("cannot read {}: {e}", log.display()))?);
    status
}

/// Runs `command`, echoing its standard output line by line into `counts`.
fn run_echoing(
    command: &mut Command,
    name: &str,
    counts: &mut TestCounts,
) -> Result<std::process::ExitStatus, String> {
    let mut child = command
        .stdout(Stdio::piped())
        .spawn()
        .map_err(|error| format!("could not start `{name}`: {error}"))?;
    let mut reader = BufReader::new(child.stdout.take().expect("stdout is piped"));
    let mut stdout = std::io::stdout();
    let mut line = Vec::new();
    loop {
        line.clear();
        match reader.read_until(b'\n', &mut line) {
            Ok(0) => break,
            Ok(_) => {
                let _ = stdout.write_all(&line);
                let _ = stdout.flush();
                counts.add_line(&String::from_utf8_lossy(&line));
            }
            Err(error) => {
                let _ = child.kill();
                return Err(format!("reading the output of `{name}` failed: {error}"));
            }
        }
    }
    child.wait().map_err(|error| format!("`{name}` did not finish: {error}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn test_counts_add_up_libtest_result_lines() {
        let mut counts = TestCounts::default();
        counts.add_line("running 3 tests");
        counts.add_line(
            "test result: ok. 5 passed; 0 failed; 1 ignored; 0 measured; 0 filtered out; finished in 0.01s\n",
        );
        counts.add_line(
            "test result: FAILED. 2 passed; 1 failed; 0 ignored; 0 measured; 3 filtered out",
        );
        counts.add_line("test something ... ok");
        assert_eq!((counts.passed, counts.failed, counts.ignored), (7, 1, 1));
        assert_eq!(counts.summary(), "7 passed, 1 failed, 1 skipped");
    }

    /// Tests that reported a skip move from passed to skipped, once each per test executable,
    /// and are listed by kind and reason.
    #[test]
    fn skipped_tests_are_counted_as_skipped_not_passed() {
        let mut counts = TestCounts::default();
        for line in [
            "running 6 tests",
            "test reads_every_cache ... ok",
            "test checks_hashes ... ok",
            "test conformance::zero_copy_get_follows_capability ... ok",
            "test plain ... ok",
            "test third ... ok",
            "test fourth ... ok",
            "test result: ok. 6 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out",
            "test result: ok. 3 passed; 0 failed; 1 ignored; 0 measured; 0 filtered out",
        ] {
            counts.add_line(line);
        }
        let missing = "reference set dnanet-memmap not found at /x/dnanet-memmap";
        counts.add_skip_log(&format!(
            "SKIPPED test=reads_every_cache bin=dnanet_reference-0123456789abcdef kind=prerequisite reason={missing}\n\
             SKIPPED test=reads_every_cache bin=dnanet_reference-0123456789abcdef kind=prerequisite reason={missing}\n\
             SKIPPED test=checks_hashes bin=dnanet_reference-0123456789abcdef kind=prerequisite reason={missing}\n\
             SKIPPED test=third bin=dnanet_reference-0123456789abcdef kind=prerequisite reason={missing}\n\
             SKIPPED test=fourth bin=dnanet_reference-0123456789abcdef kind=prerequisite reason={missing}\n\
             SKIPPED test=conformance::zero_copy_get_follows_capability bin=conformance-0123456789abcdef kind=not-applicable reason=backend npy: zero_copy_get not declared\n\
             SKIPPED test=main@4242 bin=rust_out kind=prerequisite reason={missing}\n\
             some other line\n"
        ));
        assert_eq!(counts.summary(), "3 passed, 0 failed, 7 skipped");
        assert_eq!(
            counts.skip_report(),
            [
                "1 conformance case skipped (capability not declared):",
                "  backend npy: zero_copy_get not declared:",
                "    conformance: conformance::zero_copy_get_follows_capability",
                "5 tests skipped (prerequisite missing):",
                "  reference set dnanet-memmap not found at /x/dnanet-memmap:",
                "    dnanet_reference: checks_hashes, fourth, reads_every_cache and 1 more",
                "    doctests: pid 4242",
            ]
        );
    }

    /// A test that reported a skip but then failed is a failure, not a skip.
    #[test]
    fn a_failed_test_is_not_counted_as_skipped() {
        let mut counts = TestCounts::default();
        counts.add_line("test half_skipped ... FAILED");
        counts.add_line("test result: FAILED. 2 passed; 1 failed; 0 ignored; 0 measured");
        counts.add_skip_log(
            "SKIPPED test=half_skipped bin=t-0123456789abcdef kind=prerequisite reason=no python3\n",
        );
        assert_eq!(counts.summary(), "2 passed, 1 failed, 0 skipped");
        assert!(counts.skip_report().is_empty());
    }

    #[test]
    fn missing_reference_dir_fails_only_in_ci() {
        let dir = tempfile::tempdir().unwrap();
        let missing = ReferenceDir { path: dir.path().join("absent"), source: "the default" };
        assert_eq!(missing.require(false), Ok(false));
        let error = missing.require(true).unwrap_err();
        assert!(error.contains("reference caches are missing"), "{error}");
        assert!(error.contains("absent"), "{error}");
        let present = ReferenceDir { path: dir.path().to_path_buf(), source: "the default" };
        assert_eq!(present.require(true), Ok(true));
    }

    #[test]
    fn reference_dir_defaults_beside_the_workspace_and_is_absolute() {
        let found = ReferenceDir::find(&workspace_root(), None);
        assert!(found.path.is_absolute());
        assert!(found.path.ends_with("shared/reference"), "{}", found.path.display());
        assert_eq!(found.source, "the default");

        let empty = ReferenceDir::find(&workspace_root(), Some(OsString::new()));
        assert_eq!(empty.source, "the default");

        let relative = ReferenceDir::find(&workspace_root(), Some(OsString::from("some/where")));
        assert!(relative.path.is_absolute());
        assert!(relative.path.ends_with("some/where"));
        assert_eq!(relative.source, "STOWAGE_REFERENCE_DIR");
    }
}
