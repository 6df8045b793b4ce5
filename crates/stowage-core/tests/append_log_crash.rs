//! Real crashes: a child process (this test binary, re-executed for one test) is killed with
//! `SIGKILL` mid-work, then the parent checks what survived.
//!
//! The child side of each test runs when its environment variable is set; it reports progress on
//! stdout after a [`MARK`] (libtest's own output shares those lines and is ignored).
//!
//! Where a kill lands depends on timing, so every run of the append-log test uses a new base seed
//! and prints it. A failure names its trial's seed; `STOWAGE_APPEND_LOG_SEED=<seed>
//! STOWAGE_APPEND_LOG_TRIALS=1` replays that trial's records and kill schedule, and a larger
//! `STOWAGE_APPEND_LOG_TRIALS` makes a soak run.

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use stowage_core::Error;
use stowage_core::file_safety::{AppendLog, DamageKind, WriterLock};

/// Set for the append-log child: the log it appends to.
const LOG_CHILD_ENV: &str = "STOWAGE_APPEND_LOG_CHILD";
/// The base seed of a run (optional); for the child, its trial's seed.
const SEED_ENV: &str = "STOWAGE_APPEND_LOG_SEED";
/// Number of kill trials, 10 unless set.
const TRIALS_ENV: &str = "STOWAGE_APPEND_LOG_TRIALS";
/// Set for the lock-holder child: the cache directory whose lock it holds.
const LOCK_CHILD_ENV: &str = "STOWAGE_LOCK_CHILD";

/// Precedes each progress message of a child on its stdout.
const MARK: &str = "stowage-child: ";

/// The child's progress message in `line`, if it holds one.
fn message(line: &str) -> Option<&str> {
    line.split_once(MARK).map(|(_, message)| message)
}

/// A child that outlives a failed parent stops by itself after this long.
const CHILD_LIFETIME: Duration = Duration::from_secs(30);

/// splitmix64: small, deterministic, good enough to vary sizes and kill points.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// Record `index` of the run with `seed`: random size (mostly small, often larger than the log's
/// write buffer) and content, both derived from the seed and the index alone. Cheap to build, so
/// that the child spends its time writing and a kill often lands in the middle of a write.
fn record(seed: u64, index: u64) -> Vec<u8> {
    let mut rng = Rng(seed ^ index.wrapping_mul(0xd6e8_feb8_6659_fd93));
    let len = if rng.below(4) == 0 { rng.below(1 << 20) } else { rng.below(2_000) } as usize;
    let unit = [rng.next().to_le_bytes(), index.to_le_bytes(), rng.next().to_le_bytes()].concat();
    let mut bytes = unit.repeat(len / unit.len() + 1);
    bytes.truncate(len);
    bytes
}

fn env_u64(key: &str) -> Option<u64> {
    std::env::var(key).ok().map(|value| value.parse().unwrap())
}

/// Kills and reaps the child however the test ends, so no process outlives a failed assertion.
struct KillOnDrop(Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Re-executes this test binary running only `test_name`, with `env` set.
fn spawn_child(test_name: &str, env: &[(&str, String)]) -> KillOnDrop {
    let mut command = Command::new(std::env::current_exe().unwrap());
    command
        .args([test_name, "--exact", "--nocapture", "--test-threads=1"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    for (key, value) in env {
        command.env(key, value);
    }
    KillOnDrop(command.spawn().unwrap())
}

/// Child side: appends random-size records in random batches, forever, and reports each sync.
fn append_until_killed(path: &Path, seed: u64) {
    let (mut log, recovered) = AppendLog::open(path, true).unwrap();
    assert!(recovered.records.is_empty());
    let mut rng = Rng(seed);
    let mut stdout = std::io::stdout();
    let mut appended = 0;
    let started = Instant::now();
    while started.elapsed() < CHILD_LIFETIME {
        for _ in 0..1 + rng.below(4) {
            log.append(&record(seed, appended)).unwrap();
            appended += 1;
        }
        log.sync().unwrap();
        // Only after `sync` returned may the parent count these records as durable.
        if writeln!(stdout, "{MARK}synced {appended}").and_then(|()| stdout.flush()).is_err() {
            return; // the parent is gone
        }
    }
}

#[test]
fn sigkill_during_appends_loses_no_synced_record() {
    if let Ok(path) = std::env::var(LOG_CHILD_ENV) {
        append_until_killed(Path::new(&path), env_u64(SEED_ENV).unwrap());
        return;
    }

    let base_seed = env_u64(SEED_ENV).unwrap_or_else(|| {
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap();
        now.as_nanos() as u64
    });
    let trials = env_u64(TRIALS_ENV).unwrap_or(10);
    eprintln!("append-log crash test: {SEED_ENV}={base_seed} {TRIALS_ENV}={trials}");

    let dir = tempfile::tempdir().unwrap();
    let mut torn_tails = 0;
    for trial in 0..trials {
        let seed = base_seed.wrapping_add(trial);
        let kill_after = 1 + Rng(seed ^ 0xdead).below(60);
        let path = dir.path().join(format!("trial-{trial}.log"));

        let mut child = spawn_child(
            "sigkill_during_appends_loses_no_synced_record",
            &[(LOG_CHILD_ENV, path.display().to_string()), (SEED_ENV, seed.to_string())],
        );
        // Kept open until the kill: a closed pipe would let the child stop (and exit) on its own.
        let mut lines = BufReader::new(child.0.stdout.take().unwrap()).lines();
        let mut synced = 0;
        for line in lines.by_ref() {
            let line = line.unwrap();
            if let Some(count) = message(&line).and_then(|m| m.strip_prefix("synced ")) {
                synced = count.parse().unwrap();
                if synced >= kill_after {
                    break;
                }
            }
        }
        assert!(synced >= kill_after, "seed {seed}: child stopped after {synced} synced records");
        // A random delay moves the kill to any point of the child's append/sync cycle.
        std::thread::sleep(Duration::from_micros(Rng(seed ^ 0xbeef).below(3_000)));
        // `Child::kill` is SIGKILL on unix: no destructor, no flush, no chance to finish a record.
        child.0.kill().unwrap();
        let status = child.0.wait().unwrap();
        assert!(!status.success(), "seed {seed}: child was not killed: {status}");
        drop(lines);

        // A reader sees every synced record intact, and nothing partial.
        let read = AppendLog::read_all(&path).unwrap();
        let found = read.records.len() as u64;
        assert!(found >= synced, "seed {seed}: {found} records < {synced} synced");
        for (index, got) in read.records.iter().enumerate() {
            assert!(*got == record(seed, index as u64), "seed {seed}: record {index} differs");
        }
        if let Some(damage) = &read.damage {
            // A kill leaves at most an incomplete last record: anything else is a bug.
            assert_eq!(damage.kind, DamageKind::TornTail, "seed {seed}: {damage}");
            torn_tails += 1;
        }

        // The next writer recovers the same records, cuts the torn tail and appends cleanly.
        let (mut log, recovered) = AppendLog::open(&path, false).unwrap();
        assert_eq!(recovered.records, read.records, "seed {seed}");
        log.append(b"after the crash").unwrap();
        log.sync().unwrap();
        drop(log);
        let after = AppendLog::read_all(&path).unwrap();
        assert!(after.is_clean(), "seed {seed}: {:?}", after.damage);
        assert_eq!(after.records.len() as u64, found + 1, "seed {seed}");
        assert_eq!(after.records.last().unwrap(), b"after the crash");
    }
    eprintln!("append-log crash test: {trials} trials, {torn_tails} with a torn tail");
}

#[test]
fn sigkill_of_lock_holder_does_not_block_next_writer() {
    if let Ok(dir) = std::env::var(LOCK_CHILD_ENV) {
        let _lock = WriterLock::acquire(&dir).unwrap();
        println!("{MARK}locked");
        std::io::stdout().flush().unwrap();
        std::thread::sleep(CHILD_LIFETIME);
        return;
    }

    let dir = tempfile::tempdir().unwrap();
    for round in 0..3 {
        let mut child = spawn_child(
            "sigkill_of_lock_holder_does_not_block_next_writer",
            &[(LOCK_CHILD_ENV, dir.path().display().to_string())],
        );
        let mut lines = BufReader::new(child.0.stdout.take().unwrap()).lines();
        let locked = lines.any(|line| message(&line.unwrap()) == Some("locked"));
        assert!(locked, "round {round}: child exited without taking the lock");

        match WriterLock::acquire(dir.path()) {
            Err(Error::Locked { cache, .. }) => assert_eq!(cache, dir.path()),
            other => panic!(
                "round {round}: expected Error::Locked while the child holds it, got {other:?}"
            ),
        }
        assert_eq!(WriterLock::holder_pid(dir.path()), Some(child.0.id()), "round {round}");

        child.0.kill().unwrap();
        child.0.wait().unwrap();
        drop(lines);
        // The OS released the dead holder's lock; its pid is still in the file, and irrelevant.
        let lock = WriterLock::acquire(dir.path()).unwrap();
        assert_eq!(WriterLock::holder_pid(dir.path()), Some(std::process::id()));
        drop(lock);
    }
}
