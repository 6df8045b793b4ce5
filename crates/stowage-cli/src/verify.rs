//! `stowage verify PATH`: checks every byte the cache can check and lists every problem.

use std::io::Write;
use std::path::Path;

use stowage_core::{Backend, ValidationLevel};

use crate::detect::{Cache, open};
use crate::error::{CliError, Status};
use crate::hangar::HangarDir;
use crate::out::count;

/// Prints each problem on its own line, then `N samples, M files checked: clean` (status 0) or
/// `...: K problems` (status 1). A cache that cannot be opened is an error (status 2).
pub fn run(path: &Path, out: &mut dyn Write) -> Result<Status, CliError> {
    match open(path)? {
        Cache::StowageNpy(cache) => backend(cache.as_ref(), out),
        Cache::Memmap(_, cache) => backend(cache.as_ref(), out),
        Cache::HangarNumpy10(dir) => hangar(&dir, out),
        root @ Cache::MemmapCacheRoot(_) => {
            Err(CliError::new(root.why_no_keys(path, "verify").unwrap_or_default()))
        }
    }
}

/// Full validation through the [`Backend`] trait: every structure check plus every checksum.
fn backend(cache: &dyn Backend, out: &mut dyn Write) -> Result<Status, CliError> {
    let report = cache.validate(ValidationLevel::Full)?;
    for problem in &report.problems {
        say!(out, "{}", crate::error::escape_control(&problem.to_string()));
    }
    summary(out, report.samples_checked, report.files_checked, report.problems.len(), "")
}

/// Every collection file's header and size, and every marker's data file.
fn hangar(dir: &HangarDir, out: &mut dyn Write) -> Result<Status, CliError> {
    let mut problems = 0;
    for file in &dir.files {
        if let Some(problem) = file.check().problem {
            problems += 1;
            say!(out, "{}: {problem}", file.path.display());
        }
    }
    for (path, detail) in &dir.problems {
        problems += 1;
        say!(out, "{}: {detail}", path.display());
    }
    summary(
        out,
        0,
        dir.files.len() as u64,
        problems,
        " (a bare hangar data directory has no records: headers and sizes only)",
    )
}

fn summary(
    out: &mut dyn Write,
    samples: u64,
    files: u64,
    problems: usize,
    suffix: &str,
) -> Result<Status, CliError> {
    let verdict =
        if problems == 0 { "clean".to_owned() } else { count(problems as u64, "problem") };
    say!(out, "{}, {} checked: {verdict}{suffix}", count(samples, "sample"), count(files, "file"));
    Ok(if problems == 0 { Status::Success } else { Status::ProblemsFound })
}
