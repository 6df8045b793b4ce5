//! One reader of the live trial (a thread of the campaign process or a reader process): opens the
//! cache read-only again and again while the writer writes, and checks each handle against the
//! progress the writer published around the open.
//!
//! Per open: the listing holds every key acknowledged before the open and none put after it
//! ([`Schedule::check_listing`]); a sample of the keys (the newest ones, which a torn commit would
//! hit, and random ones) is read in one to three rounds, each value one of the versions its key
//! may hold ([`Schedule::check_sample`]). After the writer's `done`, one last open checks every
//! key, that the cache is finalized, and `validate(Full)`.

use super::progress::{Progress, ProgressFollower};
use super::schedule::{Schedule, key_number, schema};
use crate::checks::validate_clean;
use rand::seq::IndexedRandom;
use rand::{Rng, SeedableRng, rngs::StdRng};
use serde_json::json;
use std::path::Path;
use std::time::{Duration, Instant};
use stowage_core::{Backend, BackendFactory, OpenMode, Schema};

/// Failure messages a reader keeps (the count goes on).
const KEPT_MESSAGES: usize = 5;

/// What one or more readers did and found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReaderStats {
    /// Read-only opens.
    pub opens: u64,
    /// `get` calls.
    pub reads: u64,
    /// Samples compared with their expected value.
    pub samples_checked: u64,
    /// Opens whose listing held puts not yet acknowledged when the open began (commits seen
    /// before the writer's flush returned, or made by a `put` that flushed by itself).
    pub saw_unacknowledged: u64,
    /// Handles whose `len()` changed while they were open (a view that grows after the open).
    pub views_grew: u64,
    /// Checks that failed.
    pub failures: u64,
    /// The first failure messages, naming the reader.
    pub messages: Vec<String>,
    /// Readers that made their final check after the writer finished.
    pub finished: u64,
}

impl ReaderStats {
    /// Adds `other`'s counts (and messages, up to the kept number) to these.
    pub fn merge(&mut self, other: &ReaderStats) {
        self.opens += other.opens;
        self.reads += other.reads;
        self.samples_checked += other.samples_checked;
        self.saw_unacknowledged += other.saw_unacknowledged;
        self.views_grew += other.views_grew;
        self.failures += other.failures;
        self.finished += other.finished;
        let room = (2 * KEPT_MESSAGES).saturating_sub(self.messages.len());
        self.messages.extend(other.messages.iter().take(room).cloned());
    }

    /// As one line of JSON, for a reader process's report.
    pub fn to_json(&self) -> String {
        json!({
            "opens": self.opens, "reads": self.reads, "samples_checked": self.samples_checked,
            "saw_unacknowledged": self.saw_unacknowledged, "views_grew": self.views_grew,
            "failures": self.failures, "messages": self.messages, "finished": self.finished,
        })
        .to_string()
    }

    /// Parses [`ReaderStats::to_json`]'s line.
    pub fn from_json(text: &str) -> Result<ReaderStats, String> {
        let v: serde_json::Value =
            serde_json::from_str(text).map_err(|e| format!("reader summary {text:?}: {e}"))?;
        let n = |name: &str| {
            v[name].as_u64().ok_or_else(|| format!("reader summary {text:?} lacks {name:?}"))
        };
        let messages = v["messages"]
            .as_array()
            .map(|m| m.iter().filter_map(|s| s.as_str().map(str::to_owned)).collect())
            .unwrap_or_default();
        Ok(ReaderStats {
            opens: n("opens")?,
            reads: n("reads")?,
            samples_checked: n("samples_checked")?,
            saw_unacknowledged: n("saw_unacknowledged")?,
            views_grew: n("views_grew")?,
            failures: n("failures")?,
            messages,
            finished: n("finished")?,
        })
    }

    fn fail(&mut self, message: String) {
        self.failures += 1;
        if self.messages.len() < KEPT_MESSAGES {
            self.messages.push(message);
        }
    }
}

/// Who is reading and where.
#[derive(Clone)]
pub struct ReaderSetup<'a> {
    /// The backend.
    pub factory: &'a dyn BackendFactory,
    /// The cache.
    pub dir: &'a Path,
    /// The writer's progress file.
    pub progress: &'a Path,
    /// The campaign seed (the schedule's).
    pub seed: u64,
    /// This reader's name in messages (`thread 3`, `process 1`).
    pub name: String,
    /// The reader gives up (a failure) if the writer has not finished by then.
    pub deadline: Instant,
}

/// Reads until the writer has finalized and one last open has checked everything, or until the
/// deadline. Never panics on what the backend returns: every problem is a counted failure.
pub fn read_until_done(setup: &ReaderSetup<'_>) -> ReaderStats {
    let caps = setup.factory.capabilities();
    let schema = schema(&caps);
    let mut schedule = Schedule::new(setup.seed, caps.overwrite);
    let mut follower = ProgressFollower::new(setup.progress);
    let mut rng = StdRng::seed_from_u64(setup.seed ^ name_hash(&setup.name));
    let mut stats = ReaderStats::default();
    let label = format!("{} reader {} (seed {})", setup.factory.name(), setup.name, setup.seed);
    loop {
        if Instant::now() > setup.deadline {
            stats.fail(format!("{label}: the writer had not finalized by the deadline"));
            return stats;
        }
        let before = match follower.refresh() {
            Ok(p) => p,
            Err(e) => {
                stats.fail(format!("{label}: {e}"));
                return stats;
            }
        };
        let handle = match setup.factory.open(setup.dir, OpenMode::ReadOnly) {
            Ok(handle) => handle,
            Err(e) => {
                stats.fail(format!(
                    "{label}: open read-only of {} ({} puts acknowledged): {e}",
                    setup.dir.display(),
                    before.acknowledged
                ));
                std::thread::sleep(Duration::from_millis(20));
                continue;
            }
        };
        if before.aborted {
            stats.fail(format!("{label}: stopped: the writer failed"));
            return stats;
        }
        stats.opens += 1;
        let mut check = HandleCheck {
            handle: &*handle,
            schema: &schema,
            seed: setup.seed,
            schedule: &mut schedule,
            follower: &mut follower,
            stats: &mut stats,
        };
        if let Err(e) = check.run(before, &mut rng) {
            stats.fail(format!("{label}: {e}"));
        }
        if before.done.is_some() {
            stats.finished += 1;
            return stats;
        }
    }
}

fn name_hash(name: &str) -> u64 {
    name.bytes().fold(0xCBF2_9CE4_8422_2325, |h, b| (h ^ b as u64).wrapping_mul(0x100_0000_01B3))
}

/// The checks of one open handle.
struct HandleCheck<'a> {
    handle: &'a dyn Backend,
    schema: &'a Schema,
    seed: u64,
    schedule: &'a mut Schedule,
    follower: &'a mut ProgressFollower,
    stats: &'a mut ReaderStats,
}

impl HandleCheck<'_> {
    /// `before`: the progress read just before the open.
    fn run(&mut self, before: Progress, rng: &mut StdRng) -> Result<(), String> {
        let upper = self.follower.refresh()?.announced;
        let lower = before.acknowledged;
        let keys = self.handle.keys().map_err(|e| format!("keys(): {e}"))?;
        let len = self.handle.len();
        if keys.len() != len {
            return Err(format!("keys() lists {} keys, len() says {len}", keys.len()));
        }
        self.schedule
            .check_listing(&keys, lower, upper)
            .map_err(|e| format!("listing of {len} keys: {e}"))?;
        if keys.len() > self.schedule.keys_created_by(lower) {
            self.stats.saw_unacknowledged += 1;
        }
        let last = before.done.is_some();
        let rounds = if last { 1 } else { rng.random_range(1..=3) };
        for round in 0..rounds {
            let upper = if round == 0 { upper } else { self.follower.refresh()?.announced };
            let picks: Vec<&String> = if last {
                keys.iter().collect()
            } else {
                let newest = keys.iter().rev().take(8);
                newest.chain(keys.choose_multiple(rng, 24)).collect()
            };
            for key in picks {
                self.read(key, (lower, upper))?;
            }
        }
        if self.handle.len() != len {
            self.stats.views_grew += 1;
        }
        if last {
            self.final_checks(keys.len(), before)?;
        }
        Ok(())
    }

    fn read(&mut self, key: &str, bounds: (u64, u64)) -> Result<(), String> {
        let n = key_number(key).ok_or_else(|| format!("listed key {key:?} was never put"))?;
        let got = self.handle.get(key).map_err(|e| format!("get {key:?}: {e}"))?;
        self.stats.reads += 1;
        self.schedule.check_sample(self.schema, self.seed, n, got.as_ref(), bounds)?;
        self.stats.samples_checked += 1;
        if !self.handle.contains(key).map_err(|e| format!("contains {key:?}: {e}"))? {
            return Err(format!("contains({key:?}) is false for a key get returns"));
        }
        Ok(())
    }

    fn final_checks(&mut self, listed: usize, before: Progress) -> Result<(), String> {
        let puts = before.done.unwrap_or_default();
        let keys = self.schedule.keys_created_by(puts);
        if listed != keys {
            return Err(format!(
                "after the writer finalized {puts} puts: {listed} keys, expected {keys}"
            ));
        }
        if !self.handle.is_finalized() {
            return Err("after the writer finalized: is_finalized() is false".into());
        }
        validate_clean(self.handle).map_err(|e| format!("the finished cache: {e}"))
    }
}
