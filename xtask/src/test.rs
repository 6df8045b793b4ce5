//! `cargo xtask test`: every test of the project, in order, stopping at the first failure: the
//! Rust tests and then the Python package's pytest suite (built and run by [`python_package`]).

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsString;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use crate::architecture;
use crate::hangar_venv::{self, HANGAR_PYTHON_ENV};
use crate::prerequisites::{self, PREREQUISITES};
use crate::python_package::{self, PytestCounts, PytestSkip};
use crate::{cargo, display_command, is_ci, target_dir, workspace_root};

/// Environment variable naming the file every test that skips appends its `SKIPPED` line to
/// (written by `stowage_core::skip::report_skip`); set by [`run_counting_tests`].
const SKIP_LOG_ENV: &str = "STOWAGE_SKIP_LOG";

/// Runs the architecture check, the prerequisites step (which also makes the Python package's
/// venv) and then the steps: `cargo fmt --check`, `cargo clippy`, `cargo test`, the Python
/// package (`maturin develop` into the venv, then its pytest suite) and `cargo doc`; only
/// `cargo test` and the Python package when `quick`. The summary adds up the Rust and the
/// Python tests.
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
    // Here, not in the Python step, so a venv that cannot be made fails in seconds rather than
    // after `cargo test`.
    let py_venv = python_package::ensure(&target_dir())?;
    println!("xtask: maturin 1.16.0 and pytest in {}", py_venv.dir().display());
    if !quick {
        prerequisites::ensure_rust_components()?;
        println!("xtask: rustfmt and clippy present");
    }
    let reference =
        ReferenceDir::find(&workspace_root(), std::env::var_os("STOWAGE_REFERENCE_DIR"));
    let require_reference = reference.require(is_ci())?;
    timings.push(("prerequisites".to_owned(), step_started.elapsed().as_secs_f64()));

    let mut steps: Vec<Step> = Vec::new();
    if !quick {
        let mut fmt = cargo();
        fmt.args(["fmt", "--all", "--", "--check"]);
        steps.push(Step::plain(fmt));
        let mut clippy = cargo();
        clippy.args(["clippy", "--workspace", "--all-targets", "--", "-D", "warnings"]);
        steps.push(Step::plain(clippy));
    }
    let mut test = cargo();
    test.args(["test", "--workspace"])
        .env("STOWAGE_REQUIRE_PYTHON", "1")
        .env(HANGAR_PYTHON_ENV, &hangar_python)
        .env("STOWAGE_REFERENCE_DIR", &reference.path);
    if require_reference {
        test.env("STOWAGE_REQUIRE_REFERENCE", "1");
    }
    steps.push(Step { name: display_command(&test), command: test, kind: StepKind::CargoTest });
    steps.extend(python_steps(&workspace_root(), &py_venv, &reference.path, require_reference));
    if !quick {
        let mut doc = cargo();
        doc.args(["doc", "--workspace", "--no-deps"]).env("RUSTDOCFLAGS", "-D warnings");
        steps.push(Step::plain(doc));
    }

    let mut counts = TestCounts::default();
    run_steps(steps, &mut counts, &mut timings)?;

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

/// The Python package's steps: `maturin develop` into `venv`, then pytest on its tests.
fn python_steps(
    root: &Path,
    venv: &python_package::Venv,
    reference: &Path,
    require_reference: bool,
) -> Vec<Step> {
    let develop = python_package::develop_command(root, &target_dir(), venv);
    let shown_venv = shown(root, venv.dir());
    let name = format!(
        "cd {} && VIRTUAL_ENV={shown_venv} {shown_venv}/bin/maturin develop",
        python_package::PACKAGE_DIR
    );
    let pytest = python_package::pytest_command(root, venv, reference, require_reference);
    let tests = root.join(python_package::TESTS_DIR);
    vec![
        Step { name, command: develop, kind: StepKind::Plain },
        Step {
            name: format!("{} {}", shown(root, &venv.python()), args_of(&pytest)),
            command: pytest,
            kind: StepKind::Pytest { tests },
        },
    ]
}

/// Runs `steps` in order, stopping at the first that fails, adding the test steps' results to
/// `counts` and each step's wall time to `timings`.
fn run_steps(
    steps: Vec<Step>,
    counts: &mut TestCounts,
    timings: &mut Vec<(String, f64)>,
) -> Result<(), String> {
    for Step { name, mut command, kind } in steps {
        println!("xtask: ==> {name}");
        let step_started = Instant::now();
        let status = match kind {
            StepKind::Plain => {
                command.status().map_err(|error| format!("could not start `{name}`: {error}"))?
            }
            StepKind::CargoTest => run_counting_tests(&mut command, counts)?,
            StepKind::Pytest { ref tests } => {
                if python_package::test_files(tests).is_empty() {
                    // Nothing to run yet: the build above is all there is to check.
                    println!(
                        "xtask: no Python tests yet: {} holds no test_*.py file, so only the \
                         build of the package was checked",
                        tests.display()
                    );
                    timings.push((name, step_started.elapsed().as_secs_f64()));
                    continue;
                }
                run_pytest(&mut command, &name, counts)?
            }
        };
        let seconds = step_started.elapsed().as_secs_f64();
        let counted = !matches!(kind, StepKind::Plain);
        let skips = match kind {
            StepKind::Plain => Vec::new(),
            StepKind::CargoTest => counts.rust_skip_report(),
            StepKind::Pytest { .. } => python_skip_report(&counts.python.skips),
        };
        for line in skips {
            println!("xtask: {line}");
        }
        if !status.success() {
            if counted {
                println!("xtask: {}", counts.summary());
            }
            if let StepKind::Pytest { tests } = &kind {
                let code = status.code();
                let meaning = python_package::exit_meaning(code);
                if code == Some(5) {
                    return Err(format!(
                        "step `{name}` failed: pytest collected no tests (exit status 5) from \
                         {}, which holds test files: do they define test_* functions?",
                        tests.display()
                    ));
                }
                return Err(format!(
                    "step `{name}` failed ({status}, {meaning}) after {seconds:.1} s"
                ));
            }
            return Err(format!("step `{name}` failed ({status}) after {seconds:.1} s"));
        }
        println!("xtask: `{name}` passed in {seconds:.1} s");
        timings.push((name, seconds));
    }

    Ok(())
}

/// One step after the prerequisites: its command, the name it is shown by, and how its output
/// is read.
struct Step {
    name: String,
    command: Command,
    kind: StepKind,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum StepKind {
    /// Run with its output shown; only its exit status counts.
    Plain,
    /// `cargo test`: libtest's results and the skip log are added to [`TestCounts`].
    CargoTest,
    /// The Python package's pytest run of the test files in `tests`: pytest's totals and skips
    /// are added to [`TestCounts`]. Without test files there, it does not run.
    Pytest { tests: PathBuf },
}

impl Step {
    fn plain(command: Command) -> Step {
        Step { name: display_command(&command), command, kind: StepKind::Plain }
    }
}

/// `path` relative to `root` when it is below it, for messages.
fn shown(root: &Path, path: &Path) -> String {
    path.strip_prefix(root).unwrap_or(path).display().to_string()
}

/// A command's arguments joined by spaces, for messages.
fn args_of(command: &Command) -> String {
    command.get_args().map(|arg| arg.to_string_lossy()).collect::<Vec<_>>().join(" ")
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
    /// The Python package's pytest run (pytest counts its skips as skipped itself).
    python: PytestCounts,
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

    /// Adds the totals and skips of a pytest run.
    fn add_pytest(&mut self, run: PytestCounts) {
        self.python.passed += run.passed;
        self.python.failed += run.failed;
        self.python.skipped += run.skipped;
        self.python.summary_seen |= run.summary_seen;
        self.python.skips.extend(run.skips);
    }

    /// `<passed> passed, <failed> failed, <skipped> skipped`, the Rust tests and the Python
    /// tests together, with the Rust tests that reported a skip moved from passed to skipped
    /// (next to the `#[ignore]`d ones).
    fn summary(&self) -> String {
        let skipped = self.skipped_tests().count() as u64;
        let python = &self.python;
        format!(
            "{} passed, {} failed, {} skipped",
            self.passed.saturating_sub(skipped) + python.passed,
            self.failed + python.failed,
            self.ignored + skipped + python.skipped
        )
    }

    /// Every skipped test: [`TestCounts::rust_skip_report`] and then [`python_skip_report`]
    /// (`cargo xtask test` prints each after its step).
    #[cfg(test)]
    fn skip_report(&self) -> Vec<String> {
        let mut lines = self.rust_skip_report();
        lines.extend(python_skip_report(&self.python.skips));
        lines
    }

    /// The skipped Rust tests, grouped under one heading each: the missing prerequisites, then
    /// each way a conformance case does not apply (`kind=not-applicable`, by the why of its
    /// reason: the backend's capabilities rule it out, or the cache storage cannot run it);
    /// below each heading the reasons (or the backend, for a conformance case), the test
    /// binaries and a few test names.
    fn rust_skip_report(&self) -> Vec<String> {
        const NAMES_SHOWN: usize = 3;
        type ByBinary<'a> = BTreeMap<&'a str, Vec<String>>;
        // heading -> second-level line -> binary -> test names, in the order: prerequisites
        // (and other kinds) first, then the not-applicable groups, then Python.
        let mut groups: BTreeMap<(u8, String), BTreeMap<String, ByBinary>> = BTreeMap::new();
        for skip in self.skipped_tests() {
            let (bin, test) = skip.display_name();
            let (heading, detail) = match skip.kind.as_str() {
                "not-applicable" => {
                    let (subject, why) = split_conformance_reason(&skip.reason);
                    ((1, format!("not applicable: {why}")), subject.to_owned())
                }
                "prerequisite" => ((0, "prerequisite missing".to_owned()), skip.reason.clone()),
                other => ((0, other.to_owned()), skip.reason.clone()),
            };
            let details = groups.entry(heading).or_default();
            details.entry(detail).or_default().entry(bin).or_default().push(test);
        }
        let mut lines = Vec::new();
        for ((order, heading), details) in &groups {
            let count: usize = details.values().flat_map(|bins| bins.values()).map(Vec::len).sum();
            let s = if count == 1 { "" } else { "s" };
            let what = if *order == 1 { "conformance case" } else { "test" };
            lines.push(format!("{count} {what}{s} skipped ({heading}):"));
            for (detail, bins) in details {
                if !detail.is_empty() {
                    lines.push(format!("  {detail}:"));
                }
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

/// Splits a conformance skip's reason, `<case> [<backend>]: <why>` or `<case> [<backend> on
/// <storage>]: <why>` (as `stowage_conformance::runner` writes it), into `<backend>` (with the
/// storage) and `<why>`; a reason of another form is all `<why>`.
fn split_conformance_reason(reason: &str) -> (&str, &str) {
    let Some((head, why)) = reason.split_once("]: ") else {
        return ("", reason);
    };
    match head.rsplit_once(" [") {
        Some((case, backend)) if !case.contains(' ') => (backend, why),
        _ => ("", reason),
    }
}

/// The Python tests pytest skipped, by reason, with where each was skipped (`file:line`, as
/// pytest's `-rs` lines give it) and how many tests skipped there.
fn python_skip_report(skips: &[PytestSkip]) -> Vec<String> {
    let count: u64 = skips.iter().map(|skip| skip.count).sum();
    if count == 0 {
        return Vec::new();
    }
    let mut by_reason: BTreeMap<&str, Vec<&PytestSkip>> = BTreeMap::new();
    for skip in skips {
        by_reason.entry(&skip.reason).or_default().push(skip);
    }
    let s = if count == 1 { "" } else { "s" };
    let mut lines = vec![format!("{count} Python test{s} skipped (pytest):")];
    for (reason, skips) in by_reason {
        lines.push(format!("  {reason}:"));
        for skip in skips {
            let s = if skip.count == 1 { "" } else { "s" };
            lines.push(format!("    {}: {} test{s}", skip.location, skip.count));
        }
    }
    lines
}

/// Runs the Python package's pytest run, echoing its standard output line by line, and adds its
/// totals and skips to `counts`. A run that exits 0 must end with pytest's summary line.
fn run_pytest(
    command: &mut Command,
    name: &str,
    counts: &mut TestCounts,
) -> Result<std::process::ExitStatus, String> {
    let mut run = PytestCounts::default();
    let status = run_echoing(command, name, &mut |line| run.add_line(line))?;
    let summary_seen = run.summary_seen;
    counts.add_pytest(run);
    if status.success() && !summary_seen {
        return Err(format!(
            "`{name}` passed but printed no summary line (`N passed, M skipped ... in S s`), so \
             its tests cannot be counted"
        ));
    }
    Ok(status)
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
    let status = run_echoing(command.env(SKIP_LOG_ENV, &log), &name, &mut |line| {
        counts.add_line(line);
    });
    let skips = std::fs::read_to_string(&log);
    let _ = std::fs::remove_file(&log);
    counts.add_skip_log(&skips.map_err(|e| format!("cannot read {}: {e}", log.display()))?);
    status
}

/// Runs `command`, echoing its standard output line by line and handing each line to `add`.
fn run_echoing(
    command: &mut Command,
    name: &str,
    add: &mut dyn FnMut(&str),
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
                add(&String::from_utf8_lossy(&line));
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
             SKIPPED test=conformance::zero_copy_get_follows_capability bin=conformance-0123456789abcdef kind=not-applicable reason=zero_copy_get_follows_capability [npy]: zero_copy_get not declared\n\
             SKIPPED test=main@4242 bin=rust_out kind=prerequisite reason={missing}\n\
             some other line\n"
        ));
        assert_eq!(counts.summary(), "3 passed, 0 failed, 7 skipped");
        assert_eq!(
            counts.skip_report(),
            [
                "5 tests skipped (prerequisite missing):",
                "  reference set dnanet-memmap not found at /x/dnanet-memmap:",
                "    dnanet_reference: checks_hashes, fourth, reads_every_cache and 1 more",
                "    doctests: pid 4242",
                "1 conformance case skipped (not applicable: zero_copy_get not declared):",
                "  npy:",
                "    conformance: conformance::zero_copy_get_follows_capability",
            ]
        );
    }

    /// Conformance cases that do not apply are grouped by why, as the runner words it: a
    /// capability the backend does not declare is not the same as a storage that cannot run the
    /// case.
    #[test]
    fn not_applicable_skips_are_grouped_by_why() {
        let mut counts = TestCounts::default();
        counts.add_line("test result: ok. 5 passed; 0 failed; 0 ignored; 0 measured");
        let shared = "caches on memory:// are not shared between processes: the writer runs in \
                      a child process, whose caches this process would not see";
        let durable = "durable_flush not declared (a power cut may lose what flush acknowledged; \
                       kill -9 is checked by the crash cases)";
        counts.add_skip_log(&format!(
            "SKIPPED test=crash_loses_no_flushed_sample bin=conformance_memory-0123456789abcdef kind=not-applicable reason=crash_loses_no_flushed_sample [remote on memory://]: {shared}\n\
             SKIPPED test=failed_flush_poisons_the_handle bin=conformance_memory-0123456789abcdef kind=not-applicable reason=failed_flush_poisons_the_handle [remote on memory://]: {shared}\n\
             SKIPPED test=compressed::power_loss_during_finalize bin=conformance-0123456789abcdef kind=not-applicable reason=power_loss_during_finalize [arrow]: {durable}\n\
             SKIPPED test=odd bin=conformance-0123456789abcdef kind=not-applicable reason=no case named here\n"
        ));
        assert_eq!(counts.summary(), "1 passed, 0 failed, 4 skipped");
        assert_eq!(
            counts.skip_report(),
            [
                format!("2 conformance cases skipped (not applicable: {shared}):"),
                "  remote on memory://:".to_owned(),
                "    conformance_memory: crash_loses_no_flushed_sample, \
                 failed_flush_poisons_the_handle"
                    .to_owned(),
                format!("1 conformance case skipped (not applicable: {durable}):"),
                "  arrow:".to_owned(),
                "    conformance: compressed::power_loss_during_finalize".to_owned(),
                "1 conformance case skipped (not applicable: no case named here):".to_owned(),
                "    conformance: odd".to_owned(),
            ]
        );
    }

    #[test]
    fn conformance_reasons_split_into_backend_and_why() {
        assert_eq!(
            split_conformance_reason("big_sample [npy]: uint8 not among the declared dtypes"),
            ("npy", "uint8 not among the declared dtypes")
        );
        assert_eq!(
            split_conformance_reason("crash [remote on s3://]: caches on s3:// are not: x"),
            ("remote on s3://", "caches on s3:// are not: x")
        );
        assert_eq!(split_conformance_reason("odd reason [x]: y"), ("", "odd reason [x]: y"));
        assert_eq!(split_conformance_reason("plain"), ("", "plain"));
    }

    /// pytest's totals join the Rust tests' in the summary, and its skips are listed by reason;
    /// a Python skip is never a pass.
    #[test]
    fn python_tests_join_the_summary_and_the_skip_report() {
        let mut counts = TestCounts::default();
        counts.add_line("test result: ok. 10 passed; 1 failed; 2 ignored; 0 measured");
        counts.add_skip_log(
            "SKIPPED test=t bin=t-0123456789abcdef kind=prerequisite reason=no python3\n",
        );
        let mut run = PytestCounts::default();
        for line in [
            "..s.ss.F",
            "SKIPPED [2] crates/stowage-py/tests/conftest.py:254: reference set x not found",
            "SKIPPED [1] crates/stowage-py/tests/test_torch.py:241: torch is not installed",
            "SKIPPED [1] crates/stowage-py/tests/test_reference.py:9: reference set x not found",
            "1 failed, 20 passed, 4 skipped in 3.10s",
        ] {
            run.add_line(line);
        }
        counts.add_pytest(run);
        assert_eq!(counts.summary(), "29 passed, 2 failed, 7 skipped");
        assert_eq!(
            counts.skip_report(),
            [
                "1 test skipped (prerequisite missing):",
                "  no python3:",
                "    t: t",
                "4 Python tests skipped (pytest):",
                "  reference set x not found:",
                "    crates/stowage-py/tests/conftest.py:254: 2 tests",
                "    crates/stowage-py/tests/test_reference.py:9: 1 test",
                "  torch is not installed:",
                "    crates/stowage-py/tests/test_torch.py:241: 1 test",
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
