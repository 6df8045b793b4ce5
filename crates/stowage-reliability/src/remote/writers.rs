//! The multi-writer campaign: writer *processes* on one cache (each its own rank), rounds of
//! puts and a flush, killed with `kill -9` at random moments by the parent and restarted with
//! the same rank.
//!
//! Each writer counts its requests through a [`FaultyStore`] with no rules around its store, and
//! appends one line per acknowledged flush to its own file (`acks/<rank>`, a line written only
//! after the flush returned: a kill between the two only under-reports):
//! `ack <round> <keys> <part puts> <commit puts> <version puts> <pointer puts>`.
//!
//! Checked at the end, after one last handle merged what the killed writers left and finalized:
//! - no acknowledged sample lost (each reads back exactly for a fresh reader), and each writer
//!   read its own keys back before it exited;
//! - no key twice: `keys()` lists each key once and `len()` is that count (the writers' keys
//!   are disjoint and each finished every round, so it is writers x rounds x keys);
//! - a round is all there or not at all when a restarted writer looks (one flush, one part);
//! - the merge is deterministic: folding every commit afresh onto no base gives the final
//!   manifest's parts, watermarks and rows, whatever order the merges happened in;
//! - every version 1 to the newest is whole ([`super::check_every_version`]);
//! - the conditional puts of each acknowledged flush: exactly 3 part objects and 1 commit, at
//!   most [`MERGE_ATTEMPTS`] version puts (one per merge attempt: the first, plus one per race
//!   lost to another writer's merge; the merge stops without a version of its own when another
//!   writer's merge folded its commit first) and at most 1 pointer put (after its version is
//!   created, never after a lost race): at most
//!   `4 + MERGE_ATTEMPTS + 1` = [`MAX_PUTS_PER_FLUSH`].

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

use rand::{Rng, SeedableRng};
use stowage_core::{Backend, Reader, ValidationLevel};
use stowage_remote::faults::{FaultyStore, Operation};
use stowage_remote::merge::{self, MERGE_ATTEMPTS};
use stowage_remote::{RemoteCache, versions};
use stowage_test_support::fork::{Ended, fork_child, kill_child, wait_child};

use super::{check_every_version, options, read_exactly, sample_of, schema};

/// The bound on the conditional puts of one acknowledged flush (see the module docs).
pub const MAX_PUTS_PER_FLUSH: usize = 3 + 1 + MERGE_ATTEMPTS as usize + 1;

/// A writer's exit code when a restart found a round partly visible.
pub const EXIT_PARTIAL: i32 = 4;
/// A writer's exit code when it could not read back its own keys.
pub const EXIT_READ_BACK: i32 = 5;
/// A writer's exit code when the store failed it (the message is on stderr).
pub const EXIT_STORE: i32 = 3;

/// What a campaign run does.
#[derive(Clone, Debug)]
pub struct Config {
    /// The cache's URL (`file://...` or `s3://...`).
    pub url: String,
    /// The store's settings (an S3 endpoint and credentials).
    pub store_options: Vec<(String, String)>,
    /// Writer processes (ranks `w0`, `w1`, ...).
    pub writers: usize,
    /// Rounds each writer completes.
    pub rounds: usize,
    /// Keys per round.
    pub keys_per_round: usize,
    /// `kill -9`s the parent sends, at random moments, to random running writers.
    pub kills: usize,
    /// The longest wait between two kills (each is uniform up to it).
    pub kill_gap: Duration,
    /// A writer's pause between rounds (its computing), so that kills land mid-run.
    pub pause: Duration,
    /// Seed of the kill schedule.
    pub seed: u64,
    /// Directory for the acknowledgement files and node caches.
    pub work: PathBuf,
    /// A writer's time limit (`SIGALRM` ends a hung one), in seconds.
    pub timeout_secs: u32,
}

/// What a campaign run found.
#[derive(Clone, Debug, Default)]
pub struct Report {
    /// Kills that landed on a running writer (each restarted with its rank).
    pub kills: usize,
    /// Kills that found the writer already done.
    pub kills_missed: usize,
    /// Flushes acknowledged, over all writers.
    pub acked_flushes: usize,
    /// Keys in the final cache.
    pub keys: usize,
    /// Versions created.
    pub versions: u64,
    /// Versions read whole by the torn-version check.
    pub versions_read_whole: u64,
    /// The most conditional puts one acknowledged flush cost.
    pub max_puts_per_flush: usize,
    /// Conditional puts per acknowledged flush, on average.
    pub mean_puts_per_flush: f64,
    /// Merge races lost, over all acknowledged flushes (version puts past the first).
    pub lost_races: usize,
    /// Acknowledged flushes whose merge found its commit folded by another writer's merge.
    pub merged_by_others: usize,
    /// Everything that broke a promise; empty when the run passed.
    pub problems: Vec<String>,
}

/// One line of a writer's acknowledgement file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Ack {
    round: usize,
    keys: usize,
    part_puts: usize,
    commit_puts: usize,
    version_puts: usize,
    pointer_puts: usize,
}

impl Ack {
    fn parse(line: &str) -> Option<Ack> {
        let mut fields = line.strip_prefix("ack ")?.split(' ').map(|f| f.parse::<usize>().ok());
        let mut next = || fields.next().flatten();
        Some(Ack {
            round: next()?,
            keys: next()?,
            part_puts: next()?,
            commit_puts: next()?,
            version_puts: next()?,
            pointer_puts: next()?,
        })
    }

    fn puts(&self) -> usize {
        self.part_puts + self.commit_puts + self.version_puts + self.pointer_puts
    }
}

/// The key `i` of `rank`'s round `round`.
pub fn key(rank: &str, round: usize, i: usize) -> String {
    format!("{rank}-{round:04}-{i:03}")
}

fn store_options(config: &Config) -> Vec<(&str, &str)> {
    config.store_options.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect()
}

/// A writer process's work: rank `rank`, every round it has not committed yet. Its exit code.
pub fn writer(config: &Config, rank: &str) -> i32 {
    match writer_rounds(config, rank) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("writer {rank}: {e}");
            EXIT_STORE
        }
    }
}

fn writer_rounds(config: &Config, rank: &str) -> Result<i32, Box<dyn std::error::Error>> {
    let (store, faulty) = FaultyStore::wrap(&config.url, &store_options(config))?;
    let opts = options(&config.work.join("node"), Some(rank), &config.store_options);
    let mut acks = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(config.work.join("acks").join(rank))?;
    // Opening for writing merges what this rank (killed) committed but did not merge.
    let mut cache = RemoteCache::open_in(store.clone(), &opts, true)?;
    let mut round = 0;
    while round < config.rounds {
        let keys: Vec<String> = (0..config.keys_per_round).map(|i| key(rank, round, i)).collect();
        let mut present = 0;
        for k in &keys {
            present += usize::from(cache.contains(k)?);
        }
        if present == keys.len() {
            round += 1;
            continue;
        }
        if present != 0 {
            writeln!(acks, "partial {round} {present}")?;
            return Ok(EXIT_PARTIAL);
        }
        for k in &keys {
            cache.put(k, &sample_of(k))?;
        }
        faulty.clear_log();
        if let Err(e) = cache.flush() {
            // Not acknowledged: reopen (merging what is durable) and look at the round again.
            writeln!(acks, "error {round} {}", e.to_string().replace('\n', " "))?;
            cache = RemoteCache::open_in(store.clone(), &opts, true)?;
            continue;
        }
        let puts: Vec<String> = faulty
            .requests()
            .into_iter()
            .filter(|r| r.operation == Operation::Put)
            .map(|r| r.path)
            .collect();
        let count = |part: &str| puts.iter().filter(|p| p.contains(part)).count();
        writeln!(
            acks,
            "ack {round} {} {} {} {} {}",
            keys.len(),
            count("/ranks/"),
            count("/commits/"),
            count("/versions/"),
            count("/latest")
        )?;
        round += 1;
        std::thread::sleep(config.pause);
    }
    for round in 0..config.rounds {
        for i in 0..config.keys_per_round {
            let k = key(rank, round, i);
            if cache.get(&k)? != Some(sample_of(&k)) {
                eprintln!("writer {rank}: its own key {k} does not read back");
                return Ok(EXIT_READ_BACK);
            }
        }
    }
    Ok(0)
}

/// Whether `child` has ended, without waiting.
fn try_wait(child: libc::pid_t) -> Option<Ended> {
    let mut status = 0;
    // SAFETY: polls a child of this process.
    let waited = unsafe { libc::waitpid(child, &raw mut status, libc::WNOHANG) };
    if waited != child {
        return None;
    }
    Some(if libc::WIFEXITED(status) {
        Ended::Exited(libc::WEXITSTATUS(status))
    } else {
        Ended::Signaled(libc::WTERMSIG(status))
    })
}

/// Runs the campaign (forking the writers: call it from a process with no other busy thread).
///
/// Errors: what keeps the campaign from running (the cache cannot be created or checked);
/// broken promises (a writer that failed among them) are in the report's problems.
pub fn run(config: &Config) -> Result<Report, String> {
    std::fs::create_dir_all(config.work.join("acks")).map_err(|e| e.to_string())?;
    // Created in a child too: the parent makes no store (and no runtime thread) before forking.
    let create = fork_child(config.timeout_secs, || {
        let opts = options(&config.work.join("node"), None, &config.store_options);
        match FaultyStore::wrap(&config.url, &store_options(config))
            .and_then(|(store, _)| RemoteCache::create_in(store, &schema(), &opts))
        {
            Ok(_) => 0,
            Err(e) => {
                eprintln!("creating {}: {e}", config.url);
                EXIT_STORE
            }
        }
    });
    if wait_child(create) != Ended::Exited(0) {
        return Err(format!("could not create the cache at {}", config.url));
    }
    let ranks: Vec<String> = (0..config.writers).map(|w| format!("w{w}")).collect();
    let spawn = |rank: &str| fork_child(config.timeout_secs, || writer(config, rank));
    let mut running: Vec<Option<libc::pid_t>> = ranks.iter().map(|r| Some(spawn(r))).collect();
    let mut report = Report::default();
    let mut rng = rand::rngs::StdRng::seed_from_u64(config.seed);
    // A writer that fails is a problem of the run, not a reason to leave the others running.
    let ended = |rank: &str, how: Ended, report: &mut Report| match how {
        Ended::Exited(0) => {}
        Ended::Exited(EXIT_PARTIAL) => {
            report.problems.push(format!("{rank}: a restart found a round partly visible"));
        }
        other => report.problems.push(format!("writer {rank} ended {other:?} (see its stderr)")),
    };
    for _ in 0..config.kills {
        let gap = rng.random_range(0..config.kill_gap.as_millis().max(1) as u64);
        std::thread::sleep(Duration::from_millis(gap));
        for (i, slot) in running.iter_mut().enumerate() {
            if let Some(pid) = *slot
                && let Some(how) = try_wait(pid)
            {
                ended(&ranks[i], how, &mut report);
                *slot = None;
            }
        }
        let alive: Vec<usize> = (0..ranks.len()).filter(|i| running[*i].is_some()).collect();
        if alive.is_empty() {
            report.kills_missed += 1;
            continue;
        }
        let victim = alive[rng.random_range(0..alive.len())];
        let pid = running[victim].expect("alive");
        kill_child(pid);
        match wait_child(pid) {
            Ended::Signaled(libc::SIGKILL) => {
                report.kills += 1;
                running[victim] = Some(spawn(&ranks[victim]));
            }
            how => {
                report.kills_missed += 1;
                ended(&ranks[victim], how, &mut report);
                running[victim] = None;
            }
        }
    }
    for (i, slot) in running.iter().enumerate() {
        if let Some(pid) = slot {
            ended(&ranks[i], wait_child(*pid), &mut report);
        }
    }
    check(config, &ranks, &mut report)?;
    Ok(report)
}

/// The checks of the module docs, once every writer is done.
fn check(config: &Config, ranks: &[String], report: &mut Report) -> Result<(), String> {
    let fail = |e: stowage_core::Error| e.to_string();
    let (store, _) = FaultyStore::wrap(&config.url, &store_options(config)).map_err(fail)?;
    // One last handle merges what killed writers committed and nobody merged, and finalizes.
    let opts = options(&config.work.join("node"), Some("final"), &config.store_options);
    let mut last = RemoteCache::open_in(store.clone(), &opts, true).map_err(fail)?;
    last.finalize().map_err(fail)?;
    drop(last);

    let mut acked: BTreeMap<&str, BTreeSet<usize>> = BTreeMap::new();
    let mut puts = Vec::new();
    for rank in ranks {
        let text = std::fs::read_to_string(config.work.join("acks").join(rank)).unwrap_or_default();
        for line in text.lines() {
            match Ack::parse(line) {
                Some(ack) => {
                    acked.entry(rank).or_default().insert(ack.round);
                    report.acked_flushes += 1;
                    check_puts(rank, &ack, config.keys_per_round, report);
                    puts.push(ack.puts());
                }
                None if line.starts_with("error ") => {}
                None => report.problems.push(format!("{rank}: {line}")),
            }
        }
    }
    report.max_puts_per_flush = puts.iter().copied().max().unwrap_or(0);
    report.mean_puts_per_flush = puts.iter().sum::<usize>() as f64 / puts.len().max(1) as f64;

    let fresh = config.work.join("fresh-node");
    let reader =
        RemoteCache::open_in(store.clone(), &options(&fresh, None, &[]), false).map_err(fail)?;
    let expected = config.writers * config.rounds * config.keys_per_round;
    let listed = reader.keys().map_err(fail)?;
    let distinct: BTreeSet<&String> = listed.iter().collect();
    report.keys = listed.len();
    if listed.len() != expected || distinct.len() != expected || reader.len() != expected {
        report.problems.push(format!(
            "{expected} keys written; keys() lists {} ({} distinct), len() is {}",
            listed.len(),
            distinct.len(),
            reader.len()
        ));
    }
    let acked_keys: Vec<String> = acked
        .iter()
        .flat_map(|(rank, rounds)| {
            rounds.iter().flat_map(move |round| {
                (0..config.keys_per_round).map(move |i| key(rank, *round, i))
            })
        })
        .collect();
    let lost = read_exactly(&|batch| reader.get_batch(batch), &acked_keys);
    report.problems.extend(lost.into_iter().map(|p| format!("acknowledged: {p}")));
    if !reader.is_finalized() {
        report.problems.push("the final cache is not finalized".into());
    }
    match reader.validate(ValidationLevel::Full) {
        Ok(v) if v.is_clean() => {}
        other => report.problems.push(format!("validate(Full): {other:?}")),
    }

    // Deterministic merge: every commit folded afresh onto no base is the final manifest.
    let newest = versions::newest(&store).map_err(fail)?.ok_or("no version at all")?;
    let pending = merge::pending(&store, None).map_err(fail)?;
    let all = merge::fold(None, stowage_remote::identity::FORMAT_ID, &pending).map_err(fail)?;
    if all.parts != newest.parts || all.watermarks != newest.watermarks || all.rows != newest.rows {
        report.problems.push(format!(
            "the final version {} ({} parts, {} rows) is not the fold of its {} commits ({} \
             parts, {} rows)",
            newest.version,
            newest.parts.len(),
            newest.rows,
            pending.len(),
            all.parts.len(),
            all.rows
        ));
    }
    if newest.keys != newest.rows {
        report.problems.push(format!(
            "the final version counts {} keys in {} rows of disjoint keys",
            newest.keys, newest.rows
        ));
    }
    // Every version whole on a small cache; some 30 of them (and the others' objects) on a large
    // one, where reading all would cost versions x keys reads.
    let stride = if newest.rows <= 5_000 { 1 } else { (newest.version / 30).max(1) };
    match check_every_version(&store, &fresh, stride) {
        Ok(read) => {
            report.versions = read.versions;
            report.versions_read_whole = read.read_whole;
        }
        Err(torn) => report.problems.push(format!("versions: {torn}")),
    }
    Ok(())
}

/// The puts of one acknowledged flush against the bound of the module docs.
fn check_puts(rank: &str, ack: &Ack, keys: usize, report: &mut Report) {
    let bounded = ack.keys == keys
        && ack.part_puts == 3
        && ack.commit_puts == 1
        && ack.version_puts <= MERGE_ATTEMPTS as usize
        && ack.pointer_puts <= 1
        && ack.pointer_puts <= ack.version_puts.min(1)
        && ack.puts() <= MAX_PUTS_PER_FLUSH;
    if !bounded {
        report.problems.push(format!("{rank}: a flush's puts out of bounds: {ack:?}"));
    }
    // A version put not followed by the pointer's lost its race; a flush whose merge ended
    // with no version of its own found its commit folded by another writer's merge.
    report.lost_races += ack.version_puts - ack.pointer_puts;
    report.merged_by_others += usize::from(ack.pointer_puts == 0);
}

/// Where a campaign's cache goes: a `file://` URL under `work`.
pub fn file_url(work: &Path) -> String {
    format!("file://{}/cache", work.display())
}
