//! A writer killed in the middle of a flush's upload: a writer process flushes one round
//! (acknowledged), then its next flush stalls in one request (a [`Fault::Slow`] rule on the
//! `.rows`, `.keys`, commit or version put) and the parent sends `kill -9` while it waits.
//!
//! Checked: what the kill left is what that moment allows (objects no commit names, or a
//! commit no version folds yet), a reader opened then sees the acknowledged round exactly and
//! none of the killed round (no partial part); the next writer, with the same rank, resumes
//! (the killed round all there, or none of it, when it opens), finishes and finalizes; a fresh
//! reader then reads every key once and exactly, and every version is whole.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use stowage_core::{Backend, Reader, ValidationLevel};
use stowage_remote::RemoteCache;
use stowage_remote::faults::{Fault, FaultyStore, Operation, Rule};
use stowage_remote::manifest::Manifest;
use stowage_test_support::fork::{Ended, fork_child, kill_child, wait_child};

use super::{check_every_version, options, sample_of, schema};

/// Where the killed flush stalls: (name, path substring of the stalled put, the objects under
/// `ranks/` no commit names after the kill, whether the killed round's commit exists).
pub const STALLS: &[(&str, &str, usize, bool)] = &[
    ("rows", ".rows", 0, false),
    ("keys", ".keys", 2, false),
    ("commit", "commits/", 3, false),
    ("version", "versions/", 0, true),
];

/// Keys per round.
pub const KEYS: usize = 25;

/// What one kill found.
#[derive(Clone, Debug, Default)]
pub struct Outcome {
    /// The stall's name.
    pub stall: &'static str,
    /// Objects under `ranks/` that no commit names, right after the kill.
    pub orphans: usize,
    /// Whether the killed round was visible when the next writer opened (its commit had been
    /// made: the open merged it).
    pub resumed_with_round: bool,
    /// Everything that broke a promise; empty when it passed.
    pub problems: Vec<String>,
}

fn round_keys(round: usize) -> Vec<String> {
    (0..KEYS).map(|i| format!("r{round}-{i:03}")).collect()
}

/// The first writer: round 0 flushed, then round 1's flush stalled in the put of `stall`,
/// after `marker` is written.
fn first_writer(url: &str, node: &Path, stall: &str, marker: &Path) -> i32 {
    let go = || -> Result<(), Box<dyn std::error::Error>> {
        let (store, faulty) = FaultyStore::wrap(url, &[])?;
        let mut cache = RemoteCache::create_in(store, &schema(), &options(node, Some("w"), &[]))?;
        for round in 0..2 {
            for key in round_keys(round) {
                cache.put(&key, &sample_of(&key))?;
            }
            if round == 1 {
                faulty.inject(Rule::once(
                    Operation::Put,
                    stall,
                    Fault::Slow(Duration::from_secs(600)),
                ));
                std::fs::write(marker, b"flushing")?;
            }
            cache.flush()?;
        }
        Err("the stalled flush returned".into())
    };
    match go() {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("first writer: {e}");
            3
        }
    }
}

/// The next writer: same rank, resumes the killed round unless it is there, then round 2 and
/// the finalize.
fn next_writer(url: &str, node: &Path) -> Result<bool, String> {
    let fail = |e: stowage_core::Error| e.to_string();
    let (store, _) = FaultyStore::wrap(url, &[]).map_err(fail)?;
    let mut cache =
        RemoteCache::open_in(store, &options(node, Some("w"), &[]), true).map_err(fail)?;
    let killed = round_keys(1);
    let present = killed.iter().filter(|k| cache.contains(k).unwrap_or(false)).count();
    if present != 0 && present != KEYS {
        return Err(format!("{present} of the killed round's {KEYS} keys visible"));
    }
    for round in [1, 2] {
        if round == 1 && present == KEYS {
            continue;
        }
        for key in round_keys(round) {
            cache.put(&key, &sample_of(&key)).map_err(fail)?;
        }
        cache.flush().map_err(fail)?;
    }
    cache.finalize().map_err(fail)?;
    Ok(present == KEYS)
}

/// Runs the kill for `stall` (an entry of [`STALLS`]) in a fresh directory under `work`
/// (forks: call it from a process with no other busy thread).
pub fn run(work: &Path, stall: (&'static str, &str, usize, bool)) -> Outcome {
    let (name, target, orphans_expected, commit_expected) = stall;
    let mut outcome = Outcome { stall: name, ..Outcome::default() };
    let dir: PathBuf = work.join(format!("killed-{name}"));
    let _ = std::fs::create_dir_all(&dir);
    let url = format!("file://{}/cache", dir.display());
    let (node, marker) = (dir.join("node"), dir.join("marker"));
    let child = fork_child(300, || first_writer(&url, &node, target, &marker));
    let started = Instant::now();
    while !marker.exists() && started.elapsed() < Duration::from_secs(60) {
        std::thread::sleep(Duration::from_millis(5));
    }
    // The stalled request waits 600 s; the requests before it take milliseconds.
    std::thread::sleep(Duration::from_millis(400));
    kill_child(child);
    match wait_child(child) {
        Ended::Signaled(libc::SIGKILL) => {}
        other => {
            outcome.problems.push(format!("the first writer ended {other:?} before the kill"));
            return outcome;
        }
    }
    if let Err(e) = check_after_kill(&url, &dir, orphans_expected, commit_expected, &mut outcome) {
        outcome.problems.push(e);
        return outcome;
    }
    match next_writer(&url, &dir.join("node-next")) {
        Ok(resumed) => outcome.resumed_with_round = resumed,
        Err(e) => {
            outcome.problems.push(format!("the next writer: {e}"));
            return outcome;
        }
    }
    if resumed_mismatch(commit_expected, outcome.resumed_with_round) {
        outcome.problems.push(format!(
            "the killed round's commit {} made, yet the next writer found the round {}",
            if commit_expected { "was" } else { "was not" },
            if outcome.resumed_with_round { "there" } else { "missing" }
        ));
    }
    check_final(&url, &dir.join("node-fresh"), &mut outcome);
    outcome
}

fn resumed_mismatch(commit_expected: bool, resumed: bool) -> bool {
    commit_expected != resumed
}

/// Right after the kill: the objects and commits the moment allows, and a reader that sees the
/// acknowledged round and nothing of the killed one.
fn check_after_kill(
    url: &str,
    dir: &Path,
    orphans_expected: usize,
    commit_expected: bool,
    outcome: &mut Outcome,
) -> Result<(), String> {
    let fail = |e: stowage_core::Error| e.to_string();
    let (store, _) = FaultyStore::wrap(url, &[]).map_err(fail)?;
    let commits: Vec<String> =
        store.list("commits/w").map_err(fail)?.into_iter().map(|o| o.name).collect();
    let mut named = BTreeSet::new();
    for name in &commits {
        let bytes = store.get(name).map_err(fail)?;
        let record =
            stowage_remote::commits::CommitRecord::parse(url, name, &bytes).map_err(fail)?;
        named.extend(record.objects.into_iter().map(|o| o.name));
    }
    let objects: Vec<String> =
        store.list("ranks").map_err(fail)?.into_iter().map(|o| o.name).collect();
    outcome.orphans = objects.iter().filter(|o| !named.contains(*o)).count();
    if outcome.orphans != orphans_expected || commits.len() != 1 + usize::from(commit_expected) {
        outcome.problems.push(format!(
            "after the kill: {} objects no commit names (expected {orphans_expected}), {} \
             commits (expected {})",
            outcome.orphans,
            commits.len(),
            1 + usize::from(commit_expected)
        ));
    }
    let reader =
        RemoteCache::open_in(store.clone(), &options(&dir.join("node-reader"), None, &[]), false)
            .map_err(fail)?;
    if reader.version() != Some(1) {
        outcome.problems.push(format!(
            "a reader after the kill opens version {:?}, not the acknowledged round's 1 ({})",
            reader.version(),
            Manifest::name_of(1)
        ));
    }
    for key in round_keys(0) {
        match reader.get(&key) {
            Ok(Some(s)) if s == sample_of(&key) => {}
            other => outcome.problems.push(format!("acknowledged {key} after the kill: {other:?}")),
        }
    }
    let visible = round_keys(1).iter().filter(|k| reader.contains(k).unwrap_or(true)).count();
    if visible != 0 || reader.len() != KEYS {
        outcome.problems.push(format!(
            "a reader after the kill sees {visible} keys of the killed round, {} in all",
            reader.len()
        ));
    }
    Ok(())
}

/// The end: every key of the three rounds once and exactly, finalized, clean, every version
/// whole.
fn check_final(url: &str, node: &Path, outcome: &mut Outcome) {
    let go = || -> Result<Vec<String>, String> {
        let fail = |e: stowage_core::Error| e.to_string();
        let (store, _) = FaultyStore::wrap(url, &[]).map_err(fail)?;
        let reader =
            RemoteCache::open_in(store.clone(), &options(node, None, &[]), false).map_err(fail)?;
        let mut problems = Vec::new();
        let all: Vec<String> = (0..3).flat_map(round_keys).collect();
        let listed = reader.keys().map_err(fail)?;
        let distinct: BTreeSet<&String> = listed.iter().collect();
        if listed.len() != all.len() || distinct.len() != all.len() || reader.len() != all.len() {
            problems.push(format!(
                "{} keys written; {} listed, {} distinct, len {}",
                all.len(),
                listed.len(),
                distinct.len(),
                reader.len()
            ));
        }
        for key in &all {
            match reader.get(key) {
                Ok(Some(s)) if s == sample_of(key) => {}
                other => problems.push(format!("{key}: {other:?}")),
            }
        }
        if !reader.is_finalized() {
            problems.push("not finalized".into());
        }
        match reader.validate(ValidationLevel::Full) {
            Ok(report) if report.is_clean() => {}
            other => problems.push(format!("validate(Full): {other:?}")),
        }
        if let Err(torn) = check_every_version(&store, node, 1) {
            problems.push(torn);
        }
        Ok(problems)
    };
    match go() {
        Ok(problems) => outcome.problems.extend(problems),
        Err(e) => outcome.problems.push(e),
    }
}
