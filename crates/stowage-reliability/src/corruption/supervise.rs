//! Running trials in a child process, so that an abort, a fatal signal (SIGSEGV, SIGBUS) or a hang
//! of a backend is recorded as one failed trial and the campaign goes on.
//!
//! The supervisor builds the pristine cache and plans every trial; the worker (the same binary,
//! started with [`worker_args`]) runs them from a given index and prints two lines per trial:
//! `begin <index>` before it and `verdict <index> <json>` after it. When the worker dies or stops
//! printing, the trial it had begun is the culprit; a new worker continues after it.

use super::cli_check::CliVerdict;
use super::pristine::{Pristine, samples_of};
use super::report::BackendReport;
use super::scale::{Layout, Scale};
use super::trial::{self, Outcome, Trial, Verdict};
use super::{Config, build_pristine, kinds_by_file};
use crate::backends::Subject;
use serde_json::{Value, json};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// How to start workers.
#[derive(Debug, Clone)]
pub struct Supervisor {
    /// The executable that runs [`worker`] when given [`worker_args`] (the `corruption` binary).
    pub exe: PathBuf,
    /// A trial without a verdict after this long is killed and counted as hung.
    pub trial_timeout: Duration,
}

/// The arguments that make the `corruption` binary a worker running `config`'s trials from
/// `start` on the pristine cache at `pristine`, copying it to `scratch`.
pub fn worker_args(
    backend: &str,
    config: &Config,
    pristine: &Path,
    scratch: &Path,
    start: usize,
) -> Vec<String> {
    let mut args = vec![
        "--worker".to_string(),
        "--pristine".into(),
        pristine.display().to_string(),
        "--scratch".into(),
        scratch.display().to_string(),
        "--start".into(),
        start.to_string(),
        "--backends".into(),
        backend.to_string(),
        "--seed".into(),
        config.seed.to_string(),
        "--flips".into(),
        config.flips.to_string(),
        "--truncations".into(),
        config.truncations.to_string(),
    ];
    if let Some(id) = config.replay {
        args.extend(["--replay".into(), id.to_string()]);
    }
    if config.scale == Scale::Realistic {
        args.push("--realistic".into());
    }
    match &config.cli {
        Some(cli) => args.extend([
            "--stowage-bin".into(),
            cli.bin.display().to_string(),
            "--cli-gets".into(),
            cli.gets.to_string(),
            "--cli-timeout".into(),
            cli.timeout.as_secs().to_string(),
        ]),
        None => args.push("--no-cli".into()),
    }
    args
}

/// The worker: runs `config`'s trials from index `start` on the pristine cache another process
/// built at `pristine_dir`, printing `begin` and `verdict` lines to `out`.
///
/// Errors: the pristine cache cannot be listed, a copy cannot be made, or `out` fails.
pub fn worker(
    subject: &Subject,
    config: &Config,
    pristine_dir: &Path,
    scratch: &Path,
    start: usize,
    out: &mut dyn Write,
) -> Result<(), String> {
    let layout = Layout::of(config.scale, subject.name, &subject.factory.capabilities());
    let written = samples_of(&layout.schema, layout.samples);
    let pristine = Pristine::existing(&*subject.factory, pristine_dir, written)?;
    let io = |e: std::io::Error| format!("writing to the supervisor: {e}");
    for (index, id) in config.trial_ids().into_iter().enumerate().skip(start) {
        writeln!(out, "begin {index}").and_then(|()| out.flush()).map_err(io)?;
        let trial = Trial::plan(config.seed, id, &pristine);
        let outcome =
            trial::run(&*subject.factory, &pristine, &trial, scratch, config.cli.as_ref())?;
        writeln!(out, "verdict {index} {}", encode(&outcome))
            .and_then(|()| out.flush())
            .map_err(io)?;
    }
    Ok(())
}

/// What a worker printed, as the supervisor's reading thread passes it on.
enum Line {
    Begin(usize),
    Verdict(usize, Outcome),
}

/// Builds `subject`'s pristine cache under `work` and runs `config`'s trials in worker processes,
/// restarting after each trial that killed or hung its worker.
///
/// Errors: the pristine cache could not be built, a worker could not be started, or a worker
/// failed outside any trial, exiting unsuccessfully after its last one included (its stderr is
/// quoted).
pub fn supervise(
    supervisor: &Supervisor,
    subject: &Subject,
    config: &Config,
    work: &Path,
) -> Result<BackendReport, String> {
    let started = Instant::now();
    let (pristine, mut report) = build_pristine(subject, config, work)?;
    let kinds = kinds_by_file(&pristine);
    let trials: Vec<Trial> =
        config.trial_ids().into_iter().map(|id| Trial::plan(config.seed, id, &pristine)).collect();
    let stderr_path = work.join("worker-stderr.log");
    let mut start = 0;
    while start < trials.len() {
        let stderr = std::fs::File::create(&stderr_path)
            .map_err(|e| format!("creating {}: {e}", stderr_path.display()))?;
        let args = worker_args(subject.name, config, &pristine.path, &work.join("copy"), start);
        let mut child = Command::new(&supervisor.exe)
            .args(&args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(stderr)
            .spawn()
            .map_err(|e| format!("starting worker {}: {e}", supervisor.exe.display()))?;
        let lines = spawn_reader(child.stdout.take().expect("stdout is piped"));
        let mut begun: Option<usize> = None;
        let mut exited_cleanly = false;
        let died = loop {
            match lines.recv_timeout(supervisor.trial_timeout) {
                Ok(Line::Begin(index)) => begun = Some(index),
                Ok(Line::Verdict(index, outcome)) => {
                    let trial = &trials[index];
                    report.record(&kinds[&trial.file], trial, outcome);
                    // A realistic trial takes seconds: say how far the campaign is, ten times.
                    if (index + 1) % trials.len().div_ceil(10) == 0 {
                        eprintln!(
                            "corruption: {}: {} of {} trials, {:.0} s",
                            subject.name,
                            index + 1,
                            trials.len(),
                            started.elapsed().as_secs_f64()
                        );
                    }
                    begun = None;
                    start = index + 1;
                }
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    let _ = child.kill();
                    let _ = child.wait();
                    break format!(
                        "hung: no verdict after {:?} (worker killed)",
                        supervisor.trial_timeout
                    );
                }
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    let status =
                        child.wait().map_err(|e| format!("waiting for the worker: {e}"))?;
                    exited_cleanly = status.success();
                    break format!("worker died: {status}");
                }
            }
        };
        let tail = stderr_tail(&stderr_path);
        match begun {
            Some(index) => {
                let trial = &trials[index];
                let detail = format!("{died}; worker stderr ends: {tail}");
                let cli = CliVerdict::NotRun { why: "the worker died first".into() };
                let outcome = Outcome { verdict: Verdict::Panicked { detail }, cli };
                report.record(&kinds[&trial.file], trial, outcome);
                start = index + 1;
            }
            // After its last trial a worker must exit cleanly: a sanitizer's report at exit (a
            // leak) is a failure of the campaign too.
            None if start >= trials.len() && exited_cleanly => {}
            None => {
                return Err(format!(
                    "{}: worker stopped outside a trial ({died}) at trial {start} of {}; stderr \
                     ends: {tail}",
                    subject.name,
                    trials.len()
                ));
            }
        }
    }
    report.elapsed = started.elapsed();
    Ok(report)
}

/// Reads the worker's stdout on a thread, so the supervisor can wait with a timeout. Lines that
/// are not the protocol's (a library printing to stdout) are skipped.
fn spawn_reader(stdout: std::process::ChildStdout) -> mpsc::Receiver<Line> {
    let (send, receive) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if let Some(parsed) = parse_line(&line)
                && send.send(parsed).is_err()
            {
                break;
            }
        }
    });
    receive
}

fn parse_line(line: &str) -> Option<Line> {
    let mut parts = line.splitn(3, ' ');
    match (parts.next()?, parts.next()?.parse().ok()?, parts.next()) {
        ("begin", index, None) => Some(Line::Begin(index)),
        ("verdict", index, Some(json)) => Some(Line::Verdict(index, decode(json)?)),
        _ => None,
    }
}

/// The last 2,000 bytes of the worker's stderr, on one line.
fn stderr_tail(path: &Path) -> String {
    let text = std::fs::read(path).unwrap_or_default();
    let tail = &text[text.len().saturating_sub(2000)..];
    String::from_utf8_lossy(tail).trim().replace('\n', " | ")
}

/// An outcome as one line of JSON: `{"library": ..., "cli": ...}`.
fn encode(outcome: &Outcome) -> String {
    let library = match &outcome.verdict {
        Verdict::DetectedAtOpen { names_file } => json!({"open": names_file}),
        Verdict::DetectedByValidate { by_error } => json!({"validate": by_error}),
        Verdict::Undetected => json!({"undetected": true}),
        Verdict::Missed { detail } => json!({"missed": detail}),
        Verdict::WrongData { detail } => json!({"wrong": detail}),
        Verdict::Inconsistent { detail } => json!({"inconsistent": detail}),
        Verdict::Panicked { detail } => json!({"panic": detail}),
    };
    let cli = match &outcome.cli {
        CliVerdict::NotRun { why } => json!({"not_run": why}),
        CliVerdict::Passed { verify_exit, damage, gets } => {
            json!({"passed": [verify_exit, damage, gets]})
        }
        CliVerdict::SaidClean { detail } => json!({"said_clean": detail}),
        CliVerdict::Refused { detail } => json!({"refused": detail}),
        CliVerdict::WrongData { detail } => json!({"wrong": detail}),
        CliVerdict::Crashed { detail } => json!({"crashed": detail}),
    };
    json!({"library": library, "cli": cli}).to_string()
}

/// The inverse of [`encode`].
fn decode(text: &str) -> Option<Outcome> {
    let value: Value = serde_json::from_str(text).ok()?;
    let tagged = |key: &str| -> Option<(String, Value)> {
        let (tag, field) = value.get(key)?.as_object()?.iter().next()?;
        Some((tag.clone(), field.clone()))
    };
    let (tag, field) = tagged("library")?;
    let detail = || field.as_str().map(str::to_string);
    let verdict = match tag.as_str() {
        "open" => Verdict::DetectedAtOpen { names_file: field.as_bool()? },
        "validate" => Verdict::DetectedByValidate { by_error: field.as_bool()? },
        "undetected" => Verdict::Undetected,
        "missed" => Verdict::Missed { detail: detail()? },
        "wrong" => Verdict::WrongData { detail: detail()? },
        "inconsistent" => Verdict::Inconsistent { detail: detail()? },
        "panic" => Verdict::Panicked { detail: detail()? },
        _ => return None,
    };
    let (tag, field) = tagged("cli")?;
    let detail = || field.as_str().map(str::to_string);
    let cli = match tag.as_str() {
        "not_run" => CliVerdict::NotRun { why: detail()? },
        "passed" => CliVerdict::Passed {
            verify_exit: i32::try_from(field.get(0)?.as_i64()?).ok()?,
            damage: field.get(1)?.as_bool()?,
            gets: field.get(2)?.as_u64()?,
        },
        "said_clean" => CliVerdict::SaidClean { detail: detail()? },
        "refused" => CliVerdict::Refused { detail: detail()? },
        "wrong" => CliVerdict::WrongData { detail: detail()? },
        "crashed" => CliVerdict::Crashed { detail: detail()? },
        _ => return None,
    };
    Some(Outcome { verdict, cli })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_verdict_survives_the_line_protocol() {
        let verdicts = [
            Verdict::DetectedAtOpen { names_file: false },
            Verdict::DetectedByValidate { by_error: true },
            Verdict::Undetected,
            Verdict::Missed { detail: "a\nb \"c\"".into() },
            Verdict::WrongData { detail: "key".into() },
            Verdict::Inconsistent { detail: "len".into() },
            Verdict::Panicked { detail: "boom".into() },
        ];
        let clis = [
            CliVerdict::NotRun { why: "w".into() },
            CliVerdict::Passed { verify_exit: 3, damage: false, gets: 48 },
            CliVerdict::SaidClean { detail: "s".into() },
            CliVerdict::Refused { detail: "r".into() },
            CliVerdict::WrongData { detail: "x".into() },
            CliVerdict::Crashed { detail: "c".into() },
        ];
        for (i, verdict) in verdicts.into_iter().enumerate() {
            let outcome = Outcome { verdict, cli: clis[i % clis.len()].clone() };
            let line = format!("verdict 3 {}", encode(&outcome));
            match parse_line(&line) {
                Some(Line::Verdict(3, back)) => assert_eq!(back, outcome),
                _ => panic!("{line:?} did not parse back"),
            }
        }
        assert!(matches!(parse_line("begin 12"), Some(Line::Begin(12))));
        assert!(parse_line("HDF5-DIAG: error").is_none());
    }
}
