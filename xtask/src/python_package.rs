//! The Python package `stowage` (`crates/stowage-py`) in `cargo xtask test`: a venv that sees the
//! system interpreter's packages, maturin and pytest in it, the package built into it with
//! `maturin develop`, and its pytest suite run, with pytest's totals and skips parsed for the
//! summary.
//!
//! The venv is `<target>/py-venv`, made with `python3 -m venv --system-site-packages` so the tests
//! see the numpy, pyarrow, h5py, PyTables and xxhash the prerequisites step installs for
//! `python3`. `maturin develop` builds the debug profile into the workspace's target directory
//! and installs the package editable: the extension module goes beside the Python sources in
//! `crates/stowage-py/python/stowage`, which the venv's `.pth` file names.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::prerequisites::{self, PYTHON};

/// The package's directory (its `pyproject.toml`), relative to the workspace root.
pub const PACKAGE_DIR: &str = "crates/stowage-py";

/// The package's pytest suite, relative to the workspace root.
pub const TESTS_DIR: &str = "crates/stowage-py/tests";

/// The maturin the venv gets, pinned (the package's build requirement is `maturin>=1.16,<2`).
const MATURIN: &str = "maturin==1.16.0";

/// What `maturin --version` prints for [`MATURIN`].
const MATURIN_VERSION: &str = "maturin 1.16.0";

/// The test runner the venv gets when it cannot import it.
const PYTEST: &str = "pytest";

/// The system interpreter's packages the tests import, seen through `--system-site-packages`.
const SYSTEM_MODULES: [&str; 5] = ["numpy", "pyarrow", "h5py", "tables", "xxhash"];

/// The venv below the target directory that the package is built into.
#[derive(Debug, Clone)]
pub struct Venv {
    dir: PathBuf,
}

impl Venv {
    /// `<target_dir>/py-venv`.
    pub fn at(target_dir: &Path) -> Venv {
        Venv { dir: target_dir.join("py-venv") }
    }

    /// The venv's directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The venv's interpreter.
    pub fn python(&self) -> PathBuf {
        self.bin("python")
    }

    fn bin(&self, program: &str) -> PathBuf {
        self.dir.join("bin").join(program)
    }

    /// Sets what activating the venv sets: `VIRTUAL_ENV`, and `PATH` with the venv's `bin` first
    /// (conda's `CONDA_PREFIX` removed: maturin refuses to choose between the two).
    fn activate<'c>(&self, command: &'c mut Command) -> &'c mut Command {
        let mut path = vec![self.dir.join("bin")];
        path.extend(std::env::var_os("PATH").iter().flat_map(std::env::split_paths));
        let path = std::env::join_paths(path).unwrap_or_else(|_| OsString::from(self.bin("")));
        command
            .env("VIRTUAL_ENV", &self.dir)
            .env("PATH", path)
            .env_remove("CONDA_PREFIX")
            .env_remove("PYTHONHOME")
    }

    /// Whether `pyvenv.cfg` says the venv sees the system site-packages.
    fn sees_system_site_packages(&self) -> bool {
        std::fs::read_to_string(self.dir.join("pyvenv.cfg")).is_ok_and(|cfg| {
            cfg.lines().any(|line| {
                line.split_once('=').is_some_and(|(key, value)| {
                    key.trim() == "include-system-site-packages"
                        && value.trim().eq_ignore_ascii_case("true")
                })
            })
        })
    }

    /// Whether the venv's `maturin --version` is [`MATURIN_VERSION`].
    fn has_maturin(&self) -> bool {
        let maturin = self.bin("maturin");
        maturin.is_file()
            && Command::new(&maturin).arg("--version").stderr(Stdio::null()).output().is_ok_and(
                |output| {
                    output.status.success()
                        && String::from_utf8_lossy(&output.stdout).trim() == MATURIN_VERSION
                },
            )
    }
}

/// The commands that make the venv by hand, for error messages.
fn by_hand(venv: &Venv) -> String {
    format!(
        "`{PYTHON} -m venv --system-site-packages {dir} && {dir}/bin/python -m pip install \
         \"{MATURIN}\" {PYTEST}`",
        dir = venv.dir.display()
    )
}

/// The venv at `<target_dir>/py-venv`, with [`MATURIN`] and pytest in it and the system
/// interpreter's numpy, pyarrow, h5py, PyTables and xxhash visible: made (`python3 -m venv
/// --system-site-packages`) when it has no interpreter or does not see the system packages, and
/// `pip install` run only for what is missing. The error names what failed and the commands that
/// do it by hand.
pub fn ensure(target_dir: &Path) -> Result<Venv, String> {
    let venv = Venv::at(target_dir);
    let python = venv.python();
    let usable = python.is_file()
        && venv.sees_system_site_packages()
        && prerequisites::missing_modules(&python, &SYSTEM_MODULES).is_ok_and(|m| m.is_empty());
    if !usable {
        println!(
            "xtask: making a venv for the stowage Python package at {} (--system-site-packages)",
            venv.dir.display()
        );
        let made = Command::new(PYTHON)
            .args(["-m", "venv", "--system-site-packages", "--clear"])
            .arg(&venv.dir)
            .status()
            .is_ok_and(|status| status.success());
        if !made || !python.is_file() {
            return Err(format!(
                "could not make a venv for the stowage Python package with `{PYTHON} -m venv \
                 --system-site-packages {}` (on Debian, `apt-get install -y python3-venv`); by \
                 hand: {}",
                venv.dir.display(),
                by_hand(&venv)
            ));
        }
        let missing = prerequisites::missing_modules(&python, &SYSTEM_MODULES)?;
        if !missing.is_empty() {
            return Err(format!(
                "the venv {} does not see {PYTHON}'s package(s) {} although it was made with \
                 --system-site-packages (is `{PYTHON}` on PATH the interpreter they were \
                 installed for?); check with `{} -c \"import {}\"`",
                venv.dir.display(),
                missing.join(" "),
                python.display(),
                missing.join(", ")
            ));
        }
    }

    let mut wanted: Vec<&str> = Vec::new();
    if !venv.has_maturin() {
        wanted.push(MATURIN);
    }
    if !prerequisites::missing_modules(&python, &[PYTEST])?.is_empty() {
        wanted.push(PYTEST);
    }
    if wanted.is_empty() {
        return Ok(venv);
    }
    let names = wanted.join(" ");
    println!(
        "xtask: installing {names} into {} for the stowage Python package",
        venv.dir.display()
    );
    let installed = Command::new(&python)
        .args(["-m", "pip", "install", "--quiet"])
        .args(&wanted)
        .status()
        .is_ok_and(|status| status.success());
    let still_missing =
        !venv.has_maturin() || !prerequisites::missing_modules(&python, &[PYTEST])?.is_empty();
    if !installed || still_missing {
        return Err(format!(
            "could not install {names} into the venv {} for the stowage Python package \
             (`{} -m pip install --quiet {names}` {}); by hand: {}",
            venv.dir.display(),
            python.display(),
            if installed { "ran, but they are still missing" } else { "failed" },
            by_hand(&venv)
        ));
    }
    Ok(venv)
}

/// `maturin develop` (debug profile) in the package's directory, with the venv activated and
/// cargo's target directory the workspace's, so the build shares it with the other steps.
pub fn develop_command(root: &Path, target_dir: &Path, venv: &Venv) -> Command {
    let mut command = Command::new(venv.bin("maturin"));
    command.arg("develop").current_dir(root.join(PACKAGE_DIR)).env("CARGO_TARGET_DIR", target_dir);
    venv.activate(&mut command);
    command
}

/// A test running longer than this gets the Python stacks of all its threads printed (pytest's
/// `faulthandler_timeout`; the test goes on), so a hang shows where it is.
const STACKS_AFTER_SECONDS: u32 = 300;

/// The pytest run of [`TESTS_DIR`] from the workspace root, with the venv activated, the
/// reference caches at `reference` (`STOWAGE_REQUIRE_REFERENCE=1` when `require_reference`),
/// and no cache or bytecode files written into the repository.
///
/// `-rfEs` ends the output with one `SKIPPED [n] file:line: reason` line per skip reason (and
/// the failures and errors), which [`PytestCounts`] reads.
pub fn pytest_command(
    root: &Path,
    venv: &Venv,
    reference: &Path,
    require_reference: bool,
) -> Command {
    let mut command = Command::new(venv.python());
    command
        .args(["-m", "pytest", TESTS_DIR, "-q", "-rfEs", "-p", "no:cacheprovider"])
        .args(["-o", &format!("faulthandler_timeout={STACKS_AFTER_SECONDS}")])
        .current_dir(root)
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .env("STOWAGE_REFERENCE_DIR", reference);
    if require_reference {
        command.env("STOWAGE_REQUIRE_REFERENCE", "1");
    }
    venv.activate(&mut command);
    command
}

/// The test files pytest would collect by its default rules (`test_*.py`, `*_test.py`) in `dir`
/// and below it.
pub fn test_files(dir: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(dir) = pending.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else { continue };
        for entry in entries.flatten() {
            let path = entry.path();
            let name = entry.file_name().to_string_lossy().into_owned();
            if path.is_dir() {
                if !name.starts_with('.') && name != "__pycache__" {
                    pending.push(path);
                }
            } else if name.ends_with(".py")
                && (name.starts_with("test_") || name.ends_with("_test.py"))
            {
                found.push(path);
            }
        }
    }
    found.sort();
    found
}

/// What pytest's exit status means (see `pytest.ExitCode`).
pub fn exit_meaning(code: Option<i32>) -> &'static str {
    match code {
        Some(0) => "all tests passed",
        Some(1) => "some tests failed",
        Some(2) => "interrupted",
        Some(3) => "pytest's internal error",
        Some(4) => "pytest's usage error",
        Some(5) => "no tests collected",
        _ => "killed or an unknown status",
    }
}

/// One `SKIPPED [<count>] <location>: <reason>` line of pytest's short test summary (`-rs`): the
/// `count` tests skipped at `location` (`file:line`) with `reason`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PytestSkip {
    pub count: u64,
    pub location: String,
    pub reason: String,
}

impl PytestSkip {
    /// The skip a line reports, or `None` for any other line.
    fn parse(line: &str) -> Option<PytestSkip> {
        let rest = line.trim_end().strip_prefix("SKIPPED [")?;
        let (count, rest) = rest.split_once("] ")?;
        let count = count.parse().ok()?;
        let (location, reason) = match rest.split_once(": ") {
            Some((location, reason)) => (location, reason),
            None => (rest, ""),
        };
        // pytest prefixes the reason of an unconditional skip mark with "Skipped: " in some
        // versions; the reason is the same either way.
        let reason = reason.strip_prefix("Skipped: ").unwrap_or(reason);
        Some(PytestSkip { count, location: location.to_owned(), reason: reason.to_owned() })
    }
}

/// Totals of one pytest run, read from its output.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct PytestCounts {
    pub passed: u64,
    /// Failed tests plus errors (a test whose set-up or collection raised).
    pub failed: u64,
    /// Skipped tests plus expected failures (`xfailed`: the test did not pass).
    pub skipped: u64,
    /// Whether the final summary line was seen.
    pub summary_seen: bool,
    /// The `SKIPPED` lines of the short test summary.
    pub skips: Vec<PytestSkip>,
}

impl PytestCounts {
    /// Adds one line of pytest's output: a `SKIPPED [n] file:line: reason` line, or the final
    /// `1 failed, 385 passed, 3 skipped, 1 xfailed, 2 warnings in 42.13s` line (with or without
    /// the `=` rule around it; `no tests ran in 0.01s` counts nothing).
    pub fn add_line(&mut self, line: &str) {
        if let Some(skip) = PytestSkip::parse(line) {
            self.skips.push(skip);
            return;
        }
        let Some(counts) = parse_summary_line(line) else {
            return;
        };
        // The last summary line is pytest's own (one per run); start over at each.
        (self.passed, self.failed, self.skipped) = (0, 0, 0);
        self.summary_seen = true;
        for (number, word) in counts {
            match word {
                "passed" | "xpassed" => self.passed += number,
                "failed" | "error" | "errors" => self.failed += number,
                "skipped" | "xfailed" => self.skipped += number,
                // warnings, deselected, rerun: not tests that ran.
                _ => {}
            }
        }
    }
}

/// The `(number, word)` pairs of pytest's final line, or `None` when `line` is not one.
fn parse_summary_line(line: &str) -> Option<Vec<(u64, &str)>> {
    let line = line.trim().trim_matches('=').trim();
    let (counts, duration) = line.rsplit_once(" in ")?;
    // "42.13s" or "62.50s (0:01:02)".
    let seconds = duration.split_whitespace().next()?.strip_suffix('s')?;
    seconds.parse::<f64>().ok()?;
    if counts == "no tests ran" {
        return Some(Vec::new());
    }
    counts
        .split(", ")
        .map(|part| {
            let (number, word) = part.split_once(' ')?;
            let number = number.parse().ok()?;
            word.bytes().all(|b| b.is_ascii_lowercase()).then_some((number, word))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pytest_summary_lines_are_added_up() {
        let mut counts = PytestCounts::default();
        for line in [
            "....s..F.sx",
            "=========================== short test summary info ============================",
            "SKIPPED [1] crates/stowage-py/tests/test_torch.py:241: torch is not installed",
            "SKIPPED [3] crates/stowage-py/tests/conftest.py:254: reference set dnanet-memmap \
             not found at /x/dnanet-memmap (set STOWAGE_REFERENCE_DIR)",
            "FAILED crates/stowage-py/tests/test_errors.py::test_x - assert 0",
            "1 failed, 385 passed, 4 skipped, 1 xfailed, 1 error, 2 warnings in 42.13s\n",
        ] {
            counts.add_line(line);
        }
        assert!(counts.summary_seen);
        assert_eq!((counts.passed, counts.failed, counts.skipped), (385, 2, 5));
        assert_eq!(
            counts.skips,
            [
                PytestSkip {
                    count: 1,
                    location: "crates/stowage-py/tests/test_torch.py:241".to_owned(),
                    reason: "torch is not installed".to_owned(),
                },
                PytestSkip {
                    count: 3,
                    location: "crates/stowage-py/tests/conftest.py:254".to_owned(),
                    reason: "reference set dnanet-memmap not found at /x/dnanet-memmap (set \
                             STOWAGE_REFERENCE_DIR)"
                        .to_owned(),
                },
            ]
        );
    }

    #[test]
    fn pytest_summary_line_forms() {
        let line = |text: &str| {
            let mut counts = PytestCounts::default();
            counts.add_line(text);
            (counts.summary_seen, counts.passed, counts.failed, counts.skipped)
        };
        assert_eq!(line("========= 3 passed, 1 skipped in 0.12s ========="), (true, 3, 0, 1));
        assert_eq!(line("12 passed, 1 xpassed in 62.50s (0:01:02)"), (true, 13, 0, 0));
        assert_eq!(line("2 errors in 0.30s"), (true, 0, 2, 0));
        assert_eq!(line("no tests ran in 0.01s"), (true, 0, 0, 0));
        assert_eq!(line("3 passed, 2 deselected in 1.00s"), (true, 3, 0, 0));
        // Lines that only look alike count nothing.
        for other in [
            "test_x.py::test_y PASSED",
            "the 3 passed in review",
            "E   assert 1 passed in 3s",
            "collected 3 items",
            "",
        ] {
            assert_eq!(line(other), (false, 0, 0, 0), "{other}");
        }
    }

    #[test]
    fn pytest_skip_lines_parse_with_colons_in_the_reason() {
        assert_eq!(
            PytestSkip::parse("SKIPPED [2] ../x/test_s.py:3: no way: x: y"),
            Some(PytestSkip {
                count: 2,
                location: "../x/test_s.py:3".to_owned(),
                reason: "no way: x: y".to_owned()
            })
        );
        assert_eq!(
            PytestSkip::parse("SKIPPED [1] test_s.py:9: Skipped: later").map(|s| s.reason),
            Some("later".to_owned())
        );
        assert_eq!(PytestSkip::parse("SKIPPED test=a bin=b kind=c reason=d"), None);
        assert_eq!(PytestSkip::parse("test_s.py::test_b SKIPPED (why)"), None);
    }

    #[test]
    fn test_files_are_found_by_pytest_default_names() {
        let dir = tempfile::tempdir().unwrap();
        assert!(test_files(dir.path()).is_empty());
        assert!(test_files(&dir.path().join("absent")).is_empty());
        for file in ["conftest.py", "helpers.py", "README.md", "__pycache__/test_old.py"] {
            let path = dir.path().join(file);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, "").unwrap();
        }
        assert!(test_files(dir.path()).is_empty());
        std::fs::create_dir(dir.path().join("sub")).unwrap();
        std::fs::write(dir.path().join("sub/reading_test.py"), "").unwrap();
        std::fs::write(dir.path().join("test_a.py"), "").unwrap();
        assert_eq!(
            test_files(dir.path()),
            [dir.path().join("sub/reading_test.py"), dir.path().join("test_a.py")]
        );
    }

    /// The commands: maturin in the package's directory, pytest from the root on the tests,
    /// both with the venv activated.
    #[test]
    fn commands_run_in_the_venv() {
        let root = Path::new("/w");
        let venv = Venv::at(Path::new("/w/target"));
        let develop = develop_command(root, Path::new("/w/target"), &venv);
        assert_eq!(develop.get_program(), "/w/target/py-venv/bin/maturin");
        assert_eq!(develop.get_current_dir(), Some(Path::new("/w/crates/stowage-py")));
        let env = |command: &Command, key: &str| {
            command.get_envs().find(|(k, _)| *k == key).and_then(|(_, v)| v.map(PathBuf::from))
        };
        assert_eq!(env(&develop, "VIRTUAL_ENV"), Some(PathBuf::from("/w/target/py-venv")));
        assert_eq!(env(&develop, "CARGO_TARGET_DIR"), Some(PathBuf::from("/w/target")));
        let path = env(&develop, "PATH").unwrap();
        assert!(path.to_string_lossy().starts_with("/w/target/py-venv/bin"), "{path:?}");

        let pytest = pytest_command(root, &venv, Path::new("/ref"), true);
        assert_eq!(pytest.get_program(), "/w/target/py-venv/bin/python");
        let args: Vec<_> = pytest.get_args().map(|a| a.to_string_lossy().into_owned()).collect();
        let pytest_args = ["-m", "pytest", TESTS_DIR, "-q", "-rfEs", "-p", "no:cacheprovider"];
        assert_eq!(args[..7], pytest_args);
        assert_eq!(args[7..], ["-o", "faulthandler_timeout=300"]);
        assert_eq!(env(&pytest, "STOWAGE_REFERENCE_DIR"), Some(PathBuf::from("/ref")));
        assert_eq!(env(&pytest, "STOWAGE_REQUIRE_REFERENCE"), Some(PathBuf::from("1")));
        assert_eq!(env(&pytest, "PYTHONDONTWRITEBYTECODE"), Some(PathBuf::from("1")));
        let optional = pytest_command(root, &venv, Path::new("/ref"), false);
        assert_eq!(env(&optional, "STOWAGE_REQUIRE_REFERENCE"), None);
    }

    #[test]
    fn venv_config_must_include_system_site_packages() {
        let dir = tempfile::tempdir().unwrap();
        let venv = Venv::at(dir.path());
        assert!(!venv.sees_system_site_packages());
        std::fs::create_dir_all(venv.dir()).unwrap();
        let cfg = venv.dir().join("pyvenv.cfg");
        std::fs::write(&cfg, "home = /usr/bin\ninclude-system-site-packages = false\n").unwrap();
        assert!(!venv.sees_system_site_packages());
        std::fs::write(&cfg, "home = /usr/bin\ninclude-system-site-packages = true\n").unwrap();
        assert!(venv.sees_system_site_packages());
    }
}
