//! One trial: start `stowage convert`, kill it as planned, run the same command again, and
//! check the target against the source.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use stowage_core::{BackendFactory, OpenMode, ValidationLevel};

use super::Config;
use super::timeline::{KillPlan, parse};
use crate::stowage_bin::stowage_bin;

/// How long a conversion may run before the trial gives up on it.
const TIMEOUT: Duration = Duration::from_secs(600);

/// What a trial found.
#[derive(Debug, Clone, PartialEq)]
pub enum Verdict {
    /// Killed inside `landed` (the last step its trace shows); the rerun gave the right target.
    Passed {
        /// The step the kill landed in (`startup` before the first).
        landed: String,
    },
    /// The command finished before the planned kill; its result was checked all the same.
    NotKilled,
    /// A rule was broken.
    Failed {
        /// The step the kill landed in, or the planned one when the trial could not tell.
        landed: String,
        /// What went wrong.
        why: String,
    },
}

impl Verdict {
    /// A failure in `landed`.
    pub fn failed(landed: &str, why: String) -> Verdict {
        Verdict::Failed { landed: landed.to_owned(), why }
    }
}

/// `stowage convert SOURCE DST --to TARGET [--flush-every N]`, tracing its steps to `trace`.
pub fn command(
    source: &Path,
    dst: &Path,
    target: &str,
    config: &Config,
    trace: Option<&Path>,
) -> Result<Command, String> {
    let mut command = Command::new(stowage_bin()?);
    command.arg("convert").arg(source).arg(dst).args(["--to", target]);
    if let Some(n) = config.flush_every {
        command.args(["--flush-every", &n.to_string()]);
    }
    if let Some(trace) = trace {
        command.env("STOWAGE_PHASE_TRACE", trace);
    }
    command.stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::null());
    Ok(command)
}

/// Runs one trial converting `source` into the fresh directory `dst`.
///
/// Errors: a child could not be started or waited for.
pub fn run(
    source: &Path,
    dst: &Path,
    target: &str,
    config: &Config,
    plan: &KillPlan,
) -> Result<Verdict, String> {
    let trace = dst.with_extension("trace");
    let _ = std::fs::remove_file(&trace);
    let mut child = command(source, dst, target, config, Some(&trace))?
        .spawn()
        .map_err(|e| format!("starting stowage convert: {e}"))?;
    let started = Instant::now();
    let killed = loop {
        if child.try_wait().map_err(|e| e.to_string())?.is_some() {
            break false;
        }
        let steps = parse(&std::fs::read_to_string(&trace).unwrap_or_default());
        if steps.iter().filter(|s| s.name == plan.step).count() >= plan.occurrence {
            std::thread::sleep(plan.delay);
            let _ = child.kill(); // SIGKILL
            break true;
        }
        if started.elapsed() > TIMEOUT {
            let _ = child.kill();
            let _ = child.wait();
            return Ok(Verdict::failed(plan.step, format!("no {} within {TIMEOUT:?}", plan.step)));
        }
        std::thread::sleep(Duration::from_micros(100));
    };
    let status = child.wait().map_err(|e| e.to_string())?;
    let steps = parse(&std::fs::read_to_string(&trace).unwrap_or_default());
    let landed = steps.last().map_or("startup".to_owned(), |s| s.name.clone());
    // A kill that arrives after the command exited, or after it traced `done`, interrupted
    // nothing that matters.
    let interrupted = killed && status.code().is_none() && landed != "done";

    let rerun = command(source, dst, target, config, None)?
        .arg("--verify")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .output()
        .map_err(|e| format!("rerunning stowage convert: {e}"))?;
    let fail = |why: String| Ok(Verdict::failed(&landed, why));
    if !rerun.status.success() {
        return fail(format!(
            "{target}, killed in {landed}: the rerun exits {}: {}{}",
            rerun.status,
            String::from_utf8_lossy(&rerun.stdout).trim(),
            String::from_utf8_lossy(&rerun.stderr).trim()
        ));
    }
    if !String::from_utf8_lossy(&rerun.stdout).contains(": identical") {
        return fail(format!(
            "{target}, killed in {landed}: the rerun's --verify does not say identical: {}",
            String::from_utf8_lossy(&rerun.stdout).trim()
        ));
    }
    if let Err(why) = check_target(dst, target, config.samples) {
        return fail(format!("{target}, killed in {landed}: {why}"));
    }
    Ok(match interrupted {
        true => Verdict::Passed { landed },
        false => Verdict::NotKilled,
    })
}

/// The factory that opens `target`'s caches.
fn factory(target: &str) -> Box<dyn BackendFactory> {
    match target {
        "memmap" => Box::new(stowage_memmap::MemmapFactory::default()),
        "arrow" => Box::new(stowage_arrow::ArrowFactory::default()),
        "hdf5" => Box::new(stowage_hdf5::Hdf5Factory),
        _ => Box::new(stowage_npy::NpyFactory::default()),
    }
}

/// What an uninterrupted run leaves: finalized, clean, exactly the source's samples, `stowage
/// verify` exit 0, no temporary file.
pub fn check_target(dst: &Path, target: &str, samples: usize) -> Result<(), String> {
    let cache = factory(target).open(dst, OpenMode::ReadOnly).map_err(|e| format!("open: {e}"))?;
    if !cache.is_finalized() {
        return Err("the target is not finalized".into());
    }
    let report = cache.validate(ValidationLevel::Full).map_err(|e| format!("validate: {e}"))?;
    if !report.is_clean() {
        return Err(format!("validate(Full) is not clean: {report:?}"));
    }
    let mut keys = cache.keys().map_err(|e| format!("keys: {e}"))?;
    keys.sort_unstable();
    let want: Vec<String> = (0..samples).map(super::source::key).collect();
    if keys != want || cache.len() != samples {
        return Err(format!(
            "{} keys listed, len() {}, {samples} expected (first listed {:?})",
            keys.len(),
            cache.len(),
            keys.first()
        ));
    }
    for i in 0..samples {
        let key = super::source::key(i);
        let got = cache.get(&key).map_err(|e| format!("get {key}: {e}"))?;
        if got.as_ref() != Some(&super::source::sample(i)) {
            return Err(format!("{key}: the target's sample differs from the source's"));
        }
    }
    let verify = Command::new(stowage_bin()?)
        .arg("verify")
        .arg(dst)
        .output()
        .map_err(|e| format!("running stowage verify: {e}"))?;
    if verify.status.code() != Some(0) {
        return Err(format!(
            "stowage verify exits {}: {}",
            verify.status,
            String::from_utf8_lossy(&verify.stdout).trim()
        ));
    }
    if let Some(temporary) = temporaries(dst).first() {
        return Err(format!("a temporary file is left: {temporary}"));
    }
    Ok(())
}

/// Files under `dir` named as stowage's temporaries (`.<name>.tmp-<pid>-<n>`).
fn temporaries(dir: &Path) -> Vec<String> {
    let mut found = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
            } else if entry.file_name().to_string_lossy().contains(".tmp-") {
                found.push(path.display().to_string());
            }
        }
    }
    found
}
