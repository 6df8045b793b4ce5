//! Two writer processes racing to open one cache for append: exactly one gets the lock, the
//! other `Error::Locked`, and the cache afterwards holds the base samples and the winner's,
//! intact, with `validate(Full)` clean.
//!
//! Both children do all their setup, say `ready`, and block on their stdin; the parent then
//! sends `go` to both back to back, so the two opens start within microseconds of each other.
//! The winner writes and flushes, says `acquired`, and keeps the lock until told `release`, so
//! the loser's open always meets a held lock, however late it runs.

use super::child::{ChildArgs, Role};
use super::process::Child;
use crate::backends::Subject;
use crate::checks::validate_clean;
use std::io::{BufRead, Write};
use std::path::Path;
use std::time::Duration;
use stowage_conformance::cases::{check_all, put_generated};
use stowage_conformance::generate::{basic_schema, key, sample_for};
use stowage_core::{BackendFactory, Error, OpenMode};

/// Samples in the cache before the race.
const BASE: usize = 32;
/// Samples the winner adds.
const WINNER_PUTS: usize = 16;
/// The bound on every wait for a child.
const TIMEOUT: Duration = Duration::from_secs(120);

/// The first key number racer `id` writes.
fn racer_start(id: u32) -> usize {
    10_000 * (id as usize + 1)
}

/// The racer's side: `ready`, wait for `go`, open for append, then `acquired` (after writing and
/// flushing) and wait for `release`, or `locked`, or `error <message>`.
pub fn racer(
    factory: &dyn BackendFactory,
    dir: &Path,
    id: u32,
    out: &mut dyn Write,
) -> Result<(), String> {
    let say = |out: &mut dyn Write, line: &str| {
        writeln!(out, "{line}").and_then(|()| out.flush()).map_err(|e| format!("stdout: {e}"))
    };
    let schema = basic_schema(&factory.capabilities());
    let mut stdin = std::io::stdin().lock();
    say(out, "ready")?;
    let mut line = String::new();
    stdin.read_line(&mut line).map_err(|e| format!("stdin: {e}"))?;
    match factory.open(dir, OpenMode::Append) {
        Ok(mut cache) => {
            let start = racer_start(id);
            let written = put_generated(&mut *cache, &schema, start..start + WINNER_PUTS);
            match written.and_then(|_| cache.flush().map_err(|e| format!("flush: {e}"))) {
                Ok(()) => say(out, "acquired")?,
                Err(e) => say(out, &format!("error after acquiring the lock: {e}"))?,
            }
            line.clear();
            stdin.read_line(&mut line).map_err(|e| format!("stdin: {e}"))?;
            Ok(())
        }
        Err(Error::Locked { .. }) => say(out, "locked"),
        Err(e) => say(out, &format!("error {e}")),
    }
}

/// What a racer said after `go`.
fn outcome(child: &mut Child) -> Result<String, String> {
    loop {
        let line = child.next_line(TIMEOUT)?;
        if line == "acquired" || line == "locked" || line.starts_with("error") {
            return Ok(line);
        }
    }
}

/// One race on a fresh cache under `work`. `Ok` when exactly one racer won and the cache is
/// intact; the error names the backend, the trial and what each racer said.
pub fn trial(exe: &Path, subject: &Subject, work: &Path, trial: u32) -> Result<(), String> {
    let factory = &*subject.factory;
    let label = format!("{} two-writer race {trial}", subject.name);
    let path = work.join(format!("race-{trial}"));
    let schema = basic_schema(&factory.capabilities());
    let mut base = {
        let mut cache =
            factory.create(&path, &schema).map_err(|e| format!("{label}: create: {e}"))?;
        let written =
            put_generated(&mut *cache, &schema, 0..BASE).map_err(|e| format!("{label}: {e}"))?;
        cache.flush().map_err(|e| format!("{label}: flush: {e}"))?;
        written
    };
    let mut racers = Vec::new();
    for id in 0..2 {
        let args = ChildArgs {
            role: Role::Racer,
            backend: subject.name.into(),
            dir: path.clone(),
            progress: path.clone(),
            seed: trial as u64,
            seconds: 0.0,
            id,
            preload: 0,
        };
        let stderr = work.join(format!("race-{trial}-racer-{id}.stderr"));
        let mut child =
            Child::spawn(&format!("{label} racer {id}"), exe, &args.to_args(), &[], &stderr)?;
        child.expect("ready", TIMEOUT)?;
        racers.push(child);
    }
    for racer in &mut racers {
        racer.send("go")?;
    }
    let said = [outcome(&mut racers[0])?, outcome(&mut racers[1])?];
    let winner = match (said[0].as_str(), said[1].as_str()) {
        ("acquired", "locked") => 0,
        ("locked", "acquired") => 1,
        _ => {
            return Err(format!(
                "{label}: expected one racer to say acquired and the other locked; racer 0 said \
                 {:?}, racer 1 said {:?}",
                said[0], said[1]
            ));
        }
    };
    racers[winner].send("release")?;
    for racer in &mut racers {
        let status = racer.wait(TIMEOUT)?;
        if !status.success() {
            return Err(format!("{label}: a racer exited with {status}; {}", racer.stderr_tail()));
        }
    }
    let start = racer_start(winner as u32);
    base.extend((start..start + WINNER_PUTS).map(|i| (key(i), sample_for(&schema, i as u64))));
    let reader =
        factory.open(&path, OpenMode::ReadOnly).map_err(|e| format!("{label}: reopen: {e}"))?;
    check_all(&*reader, &base).map_err(|e| format!("{label}: after racer {winner} won: {e}"))?;
    validate_clean(&*reader).map_err(|e| format!("{label}: after the race: {e}"))?;
    factory
        .open(&path, OpenMode::Append)
        .map(drop)
        .map_err(|e| format!("{label}: append-open after both racers exited: {e}"))
}
