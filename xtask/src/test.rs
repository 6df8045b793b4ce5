//! `cargo xtask test`: every test of the project, in order, stopping at the first failure.

use std::ffi::OsString;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use crate::hangar_venv::{self, HANGAR_PYTHON_ENV};
use crate::prerequisites::{self, PREREQUISITES};
use crate::{cargo, display_command, is_ci, target_dir, workspace_root};

/// Runs the prerequisites step and then the cargo steps (only `cargo test` when `quick`).
pub fn run(quick: bool) -> Result<(), String> {
    let started = Instant::now();
    let mut timings: Vec<(String, f64)> = Vec::new();

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

/// Test totals added up from libtest's `test result:` lines.
#[derive(Debug, Default, PartialEq, Eq)]
struct TestCounts {
    passed: u64,
    failed: u64,
    ignored: u64,
}

impl TestCounts {
    /// Adds the counts of one `test result: ok. 5 passed; 0 failed; 1 ignored; ...` line.
    fn add_line(&mut self, line: &str) {
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

    fn summary(&self) -> String {
        format!("{} passed, {} failed, {} skipped", self.passed, self.failed, self.ignored)
    }
}

/// Runs `cargo test`, echoing its standard output line by line while adding up the results.
fn run_counting_tests(
    command: &mut Command,
    counts: &mut TestCounts,
) -> Result<std::process::ExitStatus, String> {
    let name = display_command(command);
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
        assert_eq!(counts, TestCounts { passed: 7, failed: 1, ignored: 1 });
        assert_eq!(counts.summary(), "7 passed, 1 failed, 1 skipped");
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
