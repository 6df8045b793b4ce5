//! hangar 0.5.2 itself, for the mixed-writer tests of stowage-npy: the original tool writes into
//! stowage's caches and reads them back in those tests, so it must be the real one.
//!
//! hangar 0.5.2 needs numpy < 1.24 (it uses aliases numpy removed) and protobuf < 3.21 (its
//! generated `_pb2` modules are too old for newer protobuf), which the interop tests' own numpy
//! cannot be. So it lives in a venv of its own under the target directory, made once and checked
//! on every run; the tests find its interpreter in [`HANGAR_PYTHON_ENV`].

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::prerequisites::PYTHON;

/// The variable that tells the tests which interpreter has hangar 0.5.2.
pub const HANGAR_PYTHON_ENV: &str = "STOWAGE_HANGAR_PYTHON";

/// What the venv holds, as pip requirements.
const REQUIREMENTS: [&str; 3] = ["numpy<1.24", "hangar==0.5.2", "protobuf<3.21"];

/// The import the tests need, checked before every run.
const CHECK: &str = "import hangar, hangar.backends.numpy_10, numpy; \
    assert hangar.__version__ == '0.5.2', hangar.__version__";

/// The venv's interpreter, made (`python3 -m venv`, `pip install`) when it does not import
/// hangar 0.5.2 yet. The error names what failed and the commands that do it by hand.
pub fn ensure(target_dir: &Path) -> Result<PathBuf, String> {
    let venv = target_dir.join("hangar-venv");
    let python = venv.join("bin").join("python");
    if imports_hangar(&python) {
        return Ok(python);
    }
    let requirements = REQUIREMENTS.map(|r| format!("\"{r}\"")).join(" ");
    let by_hand = format!(
        "`{PYTHON} -m venv {venv} && {venv}/bin/pip install {requirements}`",
        venv = venv.display()
    );
    println!(
        "xtask: making a venv with hangar 0.5.2 for the NUMPY_10 mixed-writer tests at {}",
        venv.display()
    );
    let made = Command::new(PYTHON)
        .args(["-m", "venv", "--clear"])
        .arg(&venv)
        .status()
        .is_ok_and(|status| status.success());
    if !made {
        return Err(format!(
            "could not make a venv for hangar 0.5.2 with `{PYTHON} -m venv` (on Debian, \
             `apt-get install -y python3-venv`); by hand: {by_hand}"
        ));
    }
    let installed = Command::new(&python)
        .args(["-m", "pip", "install", "--quiet"])
        .args(REQUIREMENTS)
        .status()
        .is_ok_and(|status| status.success());
    if !installed || !imports_hangar(&python) {
        return Err(format!(
            "could not install hangar 0.5.2 into {} for the NUMPY_10 mixed-writer tests; by \
             hand: {by_hand}",
            venv.display()
        ));
    }
    Ok(python)
}

fn imports_hangar(python: &Path) -> bool {
    python.is_file()
        && Command::new(python)
            .args(["-c", CHECK])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|status| status.success())
}
