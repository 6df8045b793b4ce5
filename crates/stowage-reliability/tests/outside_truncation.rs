//! A cache's files truncated by another process while a reader has them open (and mapped).
//!
//! This is outside the contract (docs/reliability.md, "Unsafe code": no stowage writer truncates
//! a file a reader may have mapped), and what happens is what that section says: the reader gets
//! each sample intact, an error, or a miss (the key reads as absent: the part of a truncated
//! index's last page past the new end reads as zeros, an empty slot), or the process dies of
//! `SIGBUS` on a lost page of a map. It never gets other bytes, and it does not panic or die of
//! anything else.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{Command, Stdio};
use stowage_core::{BackendFactory, OpenMode};
use stowage_reliability::backends::{Subject, all};
use stowage_reliability::corruption::pristine::{Pristine, samples, schema_for};

/// Set in the child: `<backend>\n<cache dir>`.
const CHILD: &str = "STOWAGE_OUTSIDE_TRUNCATION_CHILD";
const TEST: &str = "a_reader_whose_files_are_truncated_from_outside_never_returns_other_bytes";
const SIGBUS: i32 = 7;

#[test]
fn a_reader_whose_files_are_truncated_from_outside_never_returns_other_bytes() {
    if let Ok(spec) = std::env::var(CHILD) {
        return child(&spec);
    }
    let mut outcomes = Vec::new();
    for subject in all() {
        outcomes.push(format!("{}: {}", subject.name, trial(&subject)));
    }
    println!("{}", outcomes.join("\n"));
}

/// Builds a finalized cache, starts a reader process on it, truncates every file of the cache to
/// half its length once the reader has read every sample, lets it read them all again, and says
/// how the reader ended.
fn trial(subject: &Subject) -> String {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("cache");
    let pristine = Pristine::build(&*subject.factory, &path).unwrap();
    let mut reader = Command::new(std::env::current_exe().unwrap())
        .args([TEST, "--exact", "--nocapture", "--test-threads=1"])
        .env(CHILD, format!("{}\n{}", subject.name, path.display()))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut said = BufReader::new(reader.stdout.take().unwrap())
        .lines()
        .map_while(Result::ok)
        // libtest's "test NAME ... " may begin the line the child's first word ends.
        .filter_map(|line| line.split_once("child: ").map(|(_, said)| said.to_owned()));
    let first = said.next();
    assert_eq!(first.as_deref(), Some("ready"), "{}: the reader did not start", subject.name);
    for (file, len) in &pristine.files {
        let file = std::fs::OpenOptions::new().write(true).open(path.join(file)).unwrap();
        file.set_len(len / 2).unwrap();
    }
    writeln!(reader.stdin.take().unwrap(), "go").unwrap();
    let rest: Vec<String> = said.collect();
    let output = reader.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    let wrong: Vec<&String> = rest.iter().filter(|l| l.starts_with("wrong")).collect();
    let misses = rest.iter().filter(|l| l.starts_with("absent")).count();
    assert!(wrong.is_empty(), "{}: other bytes returned: {wrong:?}", subject.name);
    match (output.status.signal(), rest.last()) {
        (Some(SIGBUS), _) => format!("died of SIGBUS ({misses} misses before)"),
        (None, Some(done)) if output.status.success() && done.starts_with("done") => done.clone(),
        _ => panic!(
            "{}: the reader ended with {} (only intact samples, errors, misses or SIGBUS are \
             documented); \
             it said {rest:?}; stderr: {stderr}",
            subject.name, output.status
        ),
    }
}

/// The reader: opens the cache read-only, reads every sample, says `ready`, waits for `go`, then
/// reads every sample again, saying `wrong <key>` for a sample that differs from what was
/// written, `absent <key>` for a miss, and the counts at the end.
fn child(spec: &str) {
    let (name, dir) = spec.split_once('\n').expect("backend and directory");
    let subject = all().into_iter().find(|s| s.name == name).expect("a known backend");
    let factory: &dyn BackendFactory = &*subject.factory;
    let expected = samples(&schema_for(&factory.capabilities()));
    let cache = factory.open(Path::new(dir), OpenMode::ReadOnly).expect("opening the cache");
    for (key, sample) in &expected {
        assert_eq!(cache.get(key).expect("an intact cache").as_ref(), Some(sample), "{key}");
    }
    say("ready");
    let mut line = String::new();
    std::io::stdin().read_line(&mut line).expect("the parent's go");
    let (mut intact, mut errors, mut misses) = (0, 0, 0);
    for (key, sample) in &expected {
        match cache.get(key) {
            Ok(Some(got)) if got == *sample => intact += 1,
            Ok(Some(_)) => say(&format!("wrong {key}")),
            Ok(None) => {
                say(&format!("absent {key}"));
                misses += 1;
            }
            Err(_) => errors += 1,
        }
    }
    say(&format!("done: {intact} intact, {errors} errors, {misses} misses"));
}

/// A line to the parent, past libtest's capture of `println!` (which holds a test's output until
/// it ends).
fn say(line: &str) {
    let mut stdout = std::io::stdout().lock();
    writeln!(stdout, "child: {line}").and_then(|()| stdout.flush()).expect("writing to the parent");
}
