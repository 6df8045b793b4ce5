//! What the tests and the benchmark need besides the Rust toolchain: one table of packages, checked
//! and installed here, plus the rustfmt and clippy components.
//!
//! When something cannot be installed, the error is one line that names exactly what is missing and
//! the command that installs it by hand.

use std::path::Path;
use std::process::{Command, Stdio};

use crate::cargo;

/// The Python interpreter the interop tests and the benchmark peer run with.
pub const PYTHON: &str = "python3";

const PYTHON_INTEROP: &str = "the Python interop tests";

/// moto's S3 server, which the object-storage tests run against (pinned: its S3 semantics, such
/// as conditional puts, are what the tests rely on).
const S3_SERVER: &str = "the object-storage tests (moto's S3 server)";

/// stowage-hdf5 links the system libhdf5 (found through pkg-config) at build time.
const HDF5_BACKEND: &str = "the HDF5 backend (stowage-hdf5 links libhdf5)";

/// How a prerequisite is checked and installed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Installer {
    /// A Python package, checked with `python3 -c "import <module>"` and installed with
    /// `python3 -m pip install --quiet <package>`.
    Pip {
        /// The name it is imported by.
        module: &'static str,
    },
    /// A Debian package, checked with `dpkg -s` and installed with `apt-get install -y` (after one
    /// `apt-get update`).
    Apt,
}

/// One package the project needs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Prerequisite {
    /// The name the installer knows it by.
    pub package: &'static str,
    /// How it is checked and installed.
    pub installer: Installer,
    /// What needs it, for the "installing ... for ..." line.
    pub needed_for: &'static str,
}

const fn pip(
    package: &'static str,
    module: &'static str,
    needed_for: &'static str,
) -> Prerequisite {
    Prerequisite { package, installer: Installer::Pip { module }, needed_for }
}

const fn apt(package: &'static str, needed_for: &'static str) -> Prerequisite {
    Prerequisite { package, installer: Installer::Apt, needed_for }
}

/// Every package the project needs besides the Rust toolchain, one line each. Debian packages are
/// installed before Python packages (a Python package may build against one). Later backends add,
/// for example:
///
/// ```text
/// pip("tables", "tables", PYTHON_INTEROP),
/// pip("h5py", "h5py", PYTHON_INTEROP),
/// apt("libhdf5-dev", "the HDF5 backend"),
/// ```
pub const PREREQUISITES: &[Prerequisite] = &[
    apt("libhdf5-dev", HDF5_BACKEND),
    apt("pkg-config", HDF5_BACKEND),
    pip("numpy", "numpy", PYTHON_INTEROP),
    pip("xxhash", "xxhash", PYTHON_INTEROP),
    pip("pyarrow", "pyarrow", PYTHON_INTEROP),
    pip("tables", "tables", PYTHON_INTEROP),
    pip("h5py", "h5py", PYTHON_INTEROP),
    pip("moto[server]==5.2.1", "moto.server", S3_SERVER),
    // The remote benchmark's peer signs its range GETs with boto3 (moto's server brings it).
    pip("boto3", "boto3", S3_SERVER),
];

/// Checks every prerequisite in `wanted` and installs the missing ones, saying so.
pub fn ensure(wanted: &[Prerequisite]) -> Result<(), String> {
    let debian: Vec<Prerequisite> =
        wanted.iter().copied().filter(|p| p.installer == Installer::Apt).collect();
    let python: Vec<Prerequisite> =
        wanted.iter().copied().filter(|p| matches!(p.installer, Installer::Pip { .. })).collect();
    if !debian.is_empty() {
        ensure_debian_packages(&debian)?;
    }
    if !python.is_empty() {
        ensure_python_packages(&python)?;
    }
    Ok(())
}

/// The interpreter's version line, e.g. `Python 3.11.7`, or the error that it is missing.
pub fn python_version() -> Result<String, String> {
    let missing = || {
        format!(
            "{PYTHON} not found on PATH; it runs the Python interop tests and the benchmark peer: \
             install it with `apt-get install -y python3 python3-pip`"
        )
    };
    let output = Command::new(PYTHON).arg("--version").output().map_err(|_| missing())?;
    if !output.status.success() {
        return Err(missing());
    }
    let text = if output.stdout.is_empty() { output.stderr } else { output.stdout };
    Ok(String::from_utf8_lossy(&text).trim().to_owned())
}

fn ensure_python_packages(wanted: &[Prerequisite]) -> Result<(), String> {
    python_version()?;
    let missing = missing_python_packages(wanted)?;
    if missing.is_empty() {
        return Ok(());
    }
    let names = package_names(&missing);
    let by_hand = format!("{PYTHON} -m pip install {names}");
    println!("xtask: installing {names} for {}", purposes(&missing));
    let installed = Command::new(PYTHON)
        .args(["-m", "pip", "install", "--quiet"])
        .args(missing.iter().map(|p| p.package))
        .status()
        .is_ok_and(|status| status.success());
    if !installed {
        return Err(format!(
            "missing Python package(s) {names}: `{PYTHON} -m pip install --quiet {names}` failed; \
             install them by hand with `{by_hand}`"
        ));
    }
    let still_missing = missing_python_packages(&missing)?;
    if !still_missing.is_empty() {
        return Err(format!(
            "Python package(s) {} still cannot be imported by {PYTHON} after pip install; \
             install them by hand with `{by_hand}`",
            package_names(&still_missing)
        ));
    }
    Ok(())
}

/// The packages whose module does not import, found with one interpreter run.
fn missing_python_packages(wanted: &[Prerequisite]) -> Result<Vec<Prerequisite>, String> {
    let modules: Vec<&str> = wanted
        .iter()
        .filter_map(|p| match p.installer {
            Installer::Pip { module } => Some(module),
            Installer::Apt => None,
        })
        .collect();
    let missing_modules = missing_modules(Path::new(PYTHON), &modules)?;
    Ok(wanted
        .iter()
        .copied()
        .filter(|p| matches!(p.installer, Installer::Pip { module } if missing_modules.iter().any(|m| m == module)))
        .collect())
}

/// The `modules` that `python` cannot import, found with one interpreter run.
pub fn missing_modules(python: &Path, modules: &[&str]) -> Result<Vec<String>, String> {
    const SCRIPT: &str = "import importlib, sys\n\
        missing = []\n\
        for name in sys.argv[1:]:\n    \
            try:\n        importlib.import_module(name)\n    \
            except Exception:\n        missing.append(name)\n\
        print(' '.join(missing))\n";
    let shown = python.display();
    let output = Command::new(python)
        .args(["-c", SCRIPT])
        .args(modules)
        .stderr(Stdio::inherit())
        .output()
        .map_err(|error| format!("could not run {shown}: {error}"))?;
    if !output.status.success() {
        return Err(format!("{shown} could not check its packages ({})", output.status));
    }
    Ok(String::from_utf8_lossy(&output.stdout).split_whitespace().map(str::to_owned).collect())
}

fn ensure_debian_packages(wanted: &[Prerequisite]) -> Result<(), String> {
    let missing: Vec<Prerequisite> =
        wanted.iter().copied().filter(|p| !debian_package_installed(p.package)).collect();
    if missing.is_empty() {
        return Ok(());
    }
    let names = package_names(&missing);
    let by_hand = format!("apt-get update && apt-get install -y {names}");
    println!("xtask: installing {names} (apt) for {}", purposes(&missing));
    let updated = Command::new("apt-get")
        .args(["update", "-qq"])
        .status()
        .is_ok_and(|status| status.success());
    if !updated {
        return Err(format!(
            "missing Debian package(s) {names}: `apt-get update` failed; install them by hand \
             with `{by_hand}`"
        ));
    }
    let installed = Command::new("apt-get")
        .args(["install", "-y", "-q"])
        .args(missing.iter().map(|p| p.package))
        .env("DEBIAN_FRONTEND", "noninteractive")
        .status()
        .is_ok_and(|status| status.success());
    let still_missing: Vec<Prerequisite> =
        missing.iter().copied().filter(|p| !debian_package_installed(p.package)).collect();
    if !installed || !still_missing.is_empty() {
        return Err(format!(
            "missing Debian package(s) {}: `apt-get install -y {names}` failed; install them by \
             hand with `{by_hand}`",
            package_names(if still_missing.is_empty() { &missing } else { &still_missing })
        ));
    }
    Ok(())
}

fn debian_package_installed(package: &str) -> bool {
    Command::new("dpkg").args(["-s", package]).stderr(Stdio::null()).output().is_ok_and(|output| {
        output.status.success()
            && String::from_utf8_lossy(&output.stdout)
                .lines()
                .any(|line| line.trim() == "Status: install ok installed")
    })
}

/// Checks that `cargo fmt` and `cargo clippy` work, adding the components with rustup if not.
pub fn ensure_rust_components() -> Result<(), String> {
    for (component, subcommand) in [("rustfmt", "fmt"), ("clippy", "clippy")] {
        if cargo_subcommand_works(subcommand) {
            continue;
        }
        println!("xtask: {component} is missing; running `rustup component add {component}`");
        let added = Command::new("rustup")
            .args(["component", "add", component])
            .status()
            .is_ok_and(|status| status.success());
        if !added || !cargo_subcommand_works(subcommand) {
            return Err(format!(
                "the Rust component {component} is missing (`cargo {subcommand} --version` fails) \
                 and `rustup component add {component}` did not install it; install it by hand \
                 with `rustup component add {component}`"
            ));
        }
    }
    Ok(())
}

fn cargo_subcommand_works(subcommand: &str) -> bool {
    cargo()
        .args([subcommand, "--version"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|status| status.success())
}

fn package_names(prerequisites: &[Prerequisite]) -> String {
    prerequisites.iter().map(|p| p.package).collect::<Vec<_>>().join(" ")
}

/// The distinct `needed_for` texts, in table order, joined with "and".
fn purposes(prerequisites: &[Prerequisite]) -> String {
    let mut distinct: Vec<&str> = Vec::new();
    for prerequisite in prerequisites {
        if !distinct.contains(&prerequisite.needed_for) {
            distinct.push(prerequisite.needed_for);
        }
    }
    match distinct.split_last() {
        Some((last, rest)) if !rest.is_empty() => format!("{} and {last}", rest.join(", ")),
        _ => distinct.join(""),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn install_line_names_packages_and_purpose_once() {
        let python: Vec<Prerequisite> = PREREQUISITES
            .iter()
            .copied()
            .filter(|p| matches!(p.installer, Installer::Pip { .. }))
            .collect();
        let line =
            format!("xtask: installing {} for {}", package_names(&python), purposes(&python));
        assert_eq!(
            line,
            "xtask: installing numpy xxhash pyarrow tables h5py moto[server]==5.2.1 boto3 for the \
             Python interop tests and the object-storage tests (moto's S3 server)"
        );
        assert_eq!(
            purposes(PREREQUISITES),
            "the HDF5 backend (stowage-hdf5 links libhdf5), the Python interop tests and the \
             object-storage tests (moto's S3 server)"
        );
    }

    #[test]
    fn purposes_are_joined_in_table_order() {
        let table = [
            pip("h5py", "h5py", PYTHON_INTEROP),
            apt("libhdf5-dev", "the HDF5 backend"),
            pip("tables", "tables", PYTHON_INTEROP),
        ];
        assert_eq!(purposes(&table), "the Python interop tests and the HDF5 backend");
        let three = [pip("a", "a", "one"), pip("b", "b", "two"), pip("c", "c", "three")];
        assert_eq!(purposes(&three), "one, two and three");
        assert_eq!(purposes(&three[..1]), "one");
        assert_eq!(purposes(&[]), "");
    }
}
