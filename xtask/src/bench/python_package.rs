//! The release build of the `stowage` Python package that the python suite measures, made with
//! the venv and the `maturin develop` command of `cargo xtask test` ([`crate::python_package`]:
//! `<target>/py-venv`, which sees the system interpreter's numpy, pyarrow, PyTables, h5py and
//! xxhash), plus `--release`; and a snapshot of that build for the script to import.
//!
//! `maturin develop` installs the package editable: the extension module is written beside the
//! Python sources in `crates/stowage-py/python/stowage`, which every `maturin develop` (such as
//! `cargo xtask test`'s debug build) rewrites. So the script does not import it from there: the
//! package directory is copied into the bench data once the release build is checked, and the
//! script runs with that copy first on `PYTHONPATH`.

use std::path::{Path, PathBuf};

use super::shown_path;
use crate::python_package::{self as package, Venv};

/// The venv's interpreter.
pub fn interpreter(target_dir: &Path) -> PathBuf {
    Venv::at(target_dir).python()
}

/// The build command as the docs show it, paths relative to the root.
pub fn build_line(root: &Path, target_dir: &Path) -> String {
    let venv = shown_path(root, Venv::at(target_dir).dir());
    format!(
        "cd {} && VIRTUAL_ENV={venv} {venv}/bin/maturin develop --release",
        package::PACKAGE_DIR
    )
}

/// Ensures the venv (made, maturin installed, when missing), then builds and installs the package
/// in release (cargo's incremental build: quick when nothing changed), checks the installed
/// module is that build and copies the package to `<snapshot>/stowage`. Returns the venv's
/// interpreter; run the script with `PYTHONPATH=<snapshot>`.
pub fn build(root: &Path, target_dir: &Path, snapshot: &Path) -> Result<PathBuf, String> {
    let venv = package::ensure(target_dir)?;
    let line = build_line(root, target_dir);
    println!("xtask: ==> {line}");
    let mut command = package::develop_command(root, target_dir, &venv);
    let status = command
        .arg("--release")
        .status()
        .map_err(|error| format!("could not start `{line}`: {error}"))?;
    if !status.success() {
        return Err(format!("`{line}` failed ({status})"));
    }
    copy_package(root, snapshot)?;
    check_release_installed(root, &snapshot.join("stowage").join(MODULE), target_dir)?;
    Ok(venv.python())
}

/// The extension module's file name in the package directory.
const MODULE: &str = "_stowage.abi3.so";

/// Copies the package directory (the Python sources and the extension module) to
/// `<snapshot>/stowage`, replacing an earlier copy.
fn copy_package(root: &Path, snapshot: &Path) -> Result<(), String> {
    let from = root.join(INSTALLED).parent().map(Path::to_path_buf).unwrap_or_default();
    let to = snapshot.join("stowage");
    let failed = |error: std::io::Error| {
        format!("cannot copy {} to {}: {error}", from.display(), to.display())
    };
    if to.exists() {
        std::fs::remove_dir_all(&to).map_err(failed)?;
    }
    std::fs::create_dir_all(&to).map_err(failed)?;
    for entry in std::fs::read_dir(&from).map_err(failed)? {
        let entry = entry.map_err(failed)?;
        if entry.file_type().map_err(failed)?.is_file() {
            std::fs::copy(entry.path(), to.join(entry.file_name())).map_err(failed)?;
        }
    }
    Ok(())
}

/// The extension module `maturin develop` installs (beside the package's Python sources, which
/// the venv's `.pth` names), relative to the workspace root.
const INSTALLED: &str = "crates/stowage-py/python/stowage/_stowage.abi3.so";

/// Checks that the extension module at `installed` is the release build (`maturin develop`
/// copies `<target>/release/lib_stowage.so` into the package; a debug `maturin develop` run
/// meanwhile, by a test run, would have replaced it with a debug build).
pub fn check_release_installed(
    root: &Path,
    installed: &Path,
    target_dir: &Path,
) -> Result<(), String> {
    let release = target_dir.join("release").join("lib_stowage.so");
    let read = |path: &Path| {
        std::fs::read(path).map_err(|error| format!("cannot read {}: {error}", path.display()))
    };
    if read(installed)? == read(&release)? {
        Ok(())
    } else {
        Err(format!(
            "{} is not the release build {} (another `maturin develop` replaced it meanwhile?): \
             the measurements would not be of the release build; run the suite again",
            shown_path(root, installed),
            shown_path(root, &release)
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The venv and the build command line the docs record.
    #[test]
    fn the_build_line_names_the_venv_and_the_package() {
        let root = Path::new("/work/main");
        let target = root.join("target");
        assert_eq!(interpreter(&target), Path::new("/work/main/target/py-venv/bin/python"));
        assert_eq!(
            build_line(root, &target),
            "cd crates/stowage-py && VIRTUAL_ENV=target/py-venv target/py-venv/bin/maturin \
             develop --release"
        );
    }

    /// The installed module must be byte for byte the release build; a missing one is named.
    #[test]
    fn only_the_release_build_passes_the_check() {
        let dir = tempfile::tempdir().unwrap();
        let (root, target) = (dir.path(), dir.path().join("target"));
        let installed = root.join(INSTALLED);
        let error = check_release_installed(root, &installed, &target).unwrap_err();
        assert!(error.starts_with("cannot read ") && error.contains("_stowage.abi3.so"), "{error}");
        std::fs::create_dir_all(installed.parent().unwrap()).unwrap();
        std::fs::create_dir_all(target.join("release")).unwrap();
        std::fs::write(&installed, b"release").unwrap();
        std::fs::write(target.join("release/lib_stowage.so"), b"release").unwrap();
        check_release_installed(root, &installed, &target).unwrap();
        std::fs::write(root.join("crates/stowage-py/python/stowage/__init__.py"), b"").unwrap();
        copy_package(root, &root.join("snapshot")).unwrap();
        let copied = root.join("snapshot/stowage");
        assert!(copied.join("__init__.py").is_file());
        check_release_installed(root, &copied.join(MODULE), &target).unwrap();
        std::fs::write(&installed, b"debug").unwrap();
        let error = check_release_installed(root, &installed, &target).unwrap_err();
        assert!(
            error.starts_with(
                "crates/stowage-py/python/stowage/_stowage.abi3.so is not the release build \
             target/release/lib_stowage.so"
            ),
            "{error}"
        );
    }
}
