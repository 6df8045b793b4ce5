//! One mixed trial: the tool and stowage write the same cache in turn, a stowage child is
//! SIGKILLed at a random moment, the tool writes on, stowage maybe resumes, and both read
//! everything back ([`crate::mixed::check`]); then both write once more and read again.

use crate::crash::kill::{ChildOp, KillPlan, Moment, run_child};
use crate::mixed::check::check;
use crate::mixed::formats::{Format, MixedWriter};
use crate::mixed::ledger::{Adopted, Finalized, Key, Ledger, Phase, Protected, Writer, Written};
use crate::mixed::pair::Pair;
use crate::mixed::peer::ToolPeer;
use crate::mixed::session::Session;
use rand::{Rng, SeedableRng, rngs::StdRng};
use std::path::{Path, PathBuf};
use std::process::Command;
use stowage_core::Error;

/// Salt of the trial's own choices (order, batch sizes, resume), independent of the session's.
const TRIAL_SALT: u64 = 0x7472_6961_6C6D_6978;

/// A deliberately broken step, to prove that the checks catch what they exist for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sabotage {
    /// None: a real trial.
    None,
    /// Right after the kill, a "stowage step" deletes the first file the tool wrote (or
    /// overwrites its first byte, for a file both append to).
    DamageToolFile,
    /// The checks are fed a sample stowage acknowledged and never wrote: a lost sample.
    LoseAcknowledged,
}

/// Where and how a trial runs.
#[derive(Debug, Clone, Copy)]
pub struct TrialSetup<'a> {
    /// The executable started as the child (`--mixed-child <pair> <cache> <seed>`): the `crash`
    /// binary.
    pub exe: &'a Path,
    /// Where the trial's directory goes.
    pub scratch: &'a Path,
    /// Keep the directory of a failing trial (the cache and the child's stderr); it is removed
    /// otherwise.
    pub keep_failed: bool,
}

/// Everything one trial found.
#[derive(Debug, Clone)]
pub struct TrialReport {
    /// The pair.
    pub pair: Pair,
    /// The trial's seed (replay it with `crash --mixed --backends <pair> --seed <seed>
    /// --trials 1`).
    pub seed: u64,
    /// Whether the tool wrote first (else stowage created the cache).
    pub tool_first: bool,
    /// Where the kill was aimed.
    pub plan: KillPlan,
    /// The step the child was inside when it died (`None`: between steps or after them).
    pub inside: Option<&'static str>,
    /// stowage's samples acknowledged before the checks (each had to be there).
    pub stowage_acknowledged: usize,
    /// The tool's samples acknowledged before the checks.
    pub tool_acknowledged: usize,
    /// Samples compared by both readers, both checks.
    pub compared: u64,
    /// Whether stowage resumed once more after the tool's batch.
    pub resumed: bool,
    /// What a read-only `validate` reported that recovery (a writer's open) then cleared, at
    /// the first check where it did.
    pub cleared_by_recovery: Option<String>,
    /// stowage's temporary files (`.<name>.tmp-<pid>-<n>`) still in the trial's directory after
    /// the closing writes: what killed writers left that no later writer removed. Not a
    /// failure (nothing reads them), but disk the user must reclaim by hand.
    pub temporaries_left: usize,
    /// Why the trial failed, naming the pair and seed.
    pub failure: Option<String>,
}

/// Whether the tool writes first in the trial of `seed` (else stowage creates the cache): by
/// seed where the tool can start a cache, never for hangar.
///
/// ```
/// use stowage_reliability::mixed::{pair::Pair, trial::tool_writes_first};
/// assert!((0..20).all(|seed| !tool_writes_first(Pair::Npy, seed)));
/// assert!((0..20).any(|seed| tool_writes_first(Pair::Arrow, seed)));
/// ```
pub fn tool_writes_first(pair: Pair, seed: u64) -> bool {
    pair.tool_can_start() && StdRng::seed_from_u64(seed ^ TRIAL_SALT).random_bool(0.5)
}

/// The command that starts the child: `exe --mixed-child <pair> <cache> <seed>`.
pub fn child_command(exe: &Path, pair: Pair, cache: &Path, seed: u64) -> Command {
    let mut command = Command::new(exe);
    command.arg("--mixed-child").arg(pair.backend()).arg(cache).arg(seed.to_string());
    command
}

/// Runs the trial of `seed` in a fresh directory under `setup.scratch`; `plan` overrides the
/// kill plan the seed would choose, `sabotage` breaks a step on purpose.
///
/// ```no_run
/// use stowage_reliability::mixed::{Sabotage, TrialSetup, run_trial};
/// use stowage_reliability::mixed::{pair::Pair, peer::ToolPeer, session::Session};
/// let tool = ToolPeer::find(Pair::Memmap)?; // DNANet's peer: python3, numpy, pyarrow
/// let scratch = tempfile::tempdir().map_err(|e| e.to_string())?;
/// let setup = TrialSetup {
///     exe: "target/release/crash".as_ref(),
///     scratch: scratch.path(),
///     keep_failed: false,
/// };
/// // Killed a third of the way into the session's first flush.
/// let plan = Session::generate(Pair::Memmap, 42).aimed_at("flush", 0.3);
/// let trial = run_trial(Pair::Memmap, &tool, 42, setup, plan, Sabotage::None);
/// assert_eq!(trial.failure, None);
/// # Ok::<(), String>(())
/// ```
pub fn run_trial(
    pair: Pair,
    tool: &ToolPeer,
    seed: u64,
    setup: TrialSetup<'_>,
    plan: Option<KillPlan>,
    sabotage: Sabotage,
) -> TrialReport {
    let session = Session::generate(pair, seed);
    let plan = plan.unwrap_or_else(|| session.kill_plan(seed));
    let mut report = TrialReport {
        pair,
        seed,
        tool_first: false,
        plan,
        inside: None,
        stowage_acknowledged: 0,
        tool_acknowledged: 0,
        compared: 0,
        resumed: false,
        cleared_by_recovery: None,
        temporaries_left: 0,
        failure: None,
    };
    let dir = setup.scratch.join(format!("{}-{seed}", pair.label()));
    let mut trial = Trial {
        format: pair.format(),
        tool,
        seed,
        rng: StdRng::seed_from_u64(seed ^ TRIAL_SALT),
        cache: PathBuf::new(),
        ledger: Ledger::default(),
    };
    let result = trial.run(&session, &dir, setup.exe, sabotage, &mut report);
    report.stowage_acknowledged = trial.ledger.acknowledged(Writer::Stowage);
    report.tool_acknowledged = trial.ledger.acknowledged(Writer::Tool);
    if result.is_ok() || !setup.keep_failed {
        let _ = std::fs::remove_dir_all(&dir);
    }
    if let Err(why) = result {
        let inside = report.inside.map_or("between steps".to_string(), |s| format!("inside {s}"));
        let order = if report.tool_first { "tool first" } else { "stowage first" };
        report.failure = Some(format!(
            "{} mixed trial seed {seed} ({order}, killed {inside}, {} of stowage's and {} of {}'s \
             samples acknowledged): {why}",
            pair.label(),
            report.stowage_acknowledged,
            report.tool_acknowledged,
            pair.tool(),
        ));
    }
    report
}

/// The files under `dir` named as stowage names its temporaries, `.<name>.tmp-<pid>-<n>`.
fn temporaries_under(dir: &Path) -> usize {
    let Ok(entries) = std::fs::read_dir(dir) else { return 0 };
    entries
        .flatten()
        .map(|entry| {
            let name = entry.file_name().to_string_lossy().into_owned();
            match entry.file_type() {
                Ok(t) if t.is_dir() => temporaries_under(&entry.path()),
                _ => usize::from(name.starts_with('.') && name.contains(".tmp-")),
            }
        })
        .sum()
}

/// A trial under way.
struct Trial<'a> {
    format: &'static dyn Format,
    tool: &'a ToolPeer,
    seed: u64,
    rng: StdRng,
    cache: PathBuf,
    ledger: Ledger,
}

/// How stowage starts a batch in the parent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Start {
    Create,
    Open,
}

/// How stowage ends a batch in the parent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum End {
    Flush,
    /// Adopt (or not) and finalize.
    Finalize {
        adopt: bool,
    },
}

impl Trial<'_> {
    fn run(
        &mut self,
        session: &Session,
        dir: &Path,
        exe: &Path,
        sabotage: Sabotage,
        report: &mut TrialReport,
    ) -> Result<(), String> {
        let pair = self.format.pair();
        // The trial's first draw, as `tool_writes_first` makes it.
        report.tool_first = pair.tool_can_start() && self.rng.random_bool(0.5);
        let _ = std::fs::remove_dir_all(dir);
        std::fs::create_dir_all(dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
        self.cache = self.format.cache_in(dir);
        self.format.prepare(self.tool, &self.cache, report.tool_first)?;
        if !report.tool_first {
            let count = self.rng.random_range(3..=8);
            self.stowage_writes(Phase::StowageStarts, count, Start::Create, End::Flush)
                .map_err(|e| format!("stowage creating the cache: {e}"))?;
        }
        let count = self.rng.random_range(3..=8);
        self.tool_writes(Phase::ToolFirst, count)?;

        let command = child_command(exe, pair, &self.cache, self.seed);
        let killed = run_child(command, &session.steps, report.plan, &dir.join("child.stderr"))?;
        report.inside = match killed.moment {
            Moment::Inside(n) => Some(session.steps[n].name()),
            Moment::After(_) | Moment::Done | Moment::Start => None,
        };
        let format = self.format;
        self.ledger.record_session(session, &killed, |k| format.name(k));
        self.sabotage(sabotage)?;

        let count = self.rng.random_range(3..=8);
        self.tool_writes(Phase::ToolAfterKill, count)
            .map_err(|e| format!("{} writing after the kill: {e}", pair.tool()))?;
        if self.rng.random_bool(0.5) {
            report.resumed = true;
            let count = self.rng.random_range(2..=6);
            let adopt = pair.adopts() && self.rng.random_bool(0.5);
            self.stowage_writes(Phase::StowageResumes, count, Start::Open, End::Finalize { adopt })
                .map_err(|e| format!("stowage resuming after the tool's batch: {e}"))?;
        }
        self.check("after the kill and the tool's next batch", report)?;

        // The cache takes more writes from both.
        if self.format.tool_may_write(&self.cache) {
            let count = self.rng.random_range(2..=5);
            self.tool_writes(Phase::ToolMore, count)
                .map_err(|e| format!("{}'s closing batch: {e}", pair.tool()))?;
        }
        let count = self.rng.random_range(2..=5);
        self.stowage_writes(Phase::StowageMore, count, Start::Open, End::Flush)
            .map_err(|e| format!("stowage's closing batch: {e}"))?;
        self.check("after both wrote their closing batches", report)?;
        report.temporaries_left = temporaries_under(dir);
        Ok(())
    }

    /// The tool writes `count` new samples, which it acknowledges by returning.
    fn tool_writes(&mut self, phase: Phase, count: u32) -> Result<(), String> {
        let keys: Vec<Key> = (0..count).map(|n| Key::new(phase, n)).collect();
        let wrote = self.format.tool_write(self.tool, &self.cache, &keys, self.seed)?;
        for ((key, name), unit) in keys.iter().zip(wrote.names).zip(wrote.units) {
            self.ledger.record(*key, name, Written::Acknowledged, unit);
        }
        for (path, what) in wrote.protect {
            self.ledger.protect(path, what);
        }
        Ok(())
    }

    /// stowage writes `count` new samples in this process, as a user would, and acknowledges
    /// them by ending with a flush or finalize. On a finalized cache of a backend that does not
    /// append after finalize, the first put must be refused with `Error::Finalized`.
    fn stowage_writes(
        &mut self,
        phase: Phase,
        count: u32,
        start: Start,
        end: End,
    ) -> Result<(), String> {
        let (pair, seed) = (self.format.pair(), self.seed);
        let finalized = start == Start::Open && self.format.is_finalized(&self.cache)?;
        let mut writer: Box<dyn MixedWriter> = match start {
            Start::Create => self.format.create(&self.cache, seed),
            Start::Open => self.format.open_writer(&self.cache, seed),
        }
        .map_err(|e| format!("opening for writing: {e}"))?;
        let keys: Vec<Key> = (0..count).map(|n| Key::new(phase, n)).collect();
        if finalized && !pair.appends_after_finalize() {
            return match writer.put(keys[0]) {
                Err(Error::Finalized { .. }) => Ok(()),
                other => Err(format!("a put into the finalized cache returned {other:?}")),
            };
        }
        for key in &keys {
            writer.put(*key).map_err(|e| format!("put({:?}): {e}", self.format.name(*key)))?;
        }
        let adopt = matches!(end, End::Finalize { adopt: true });
        if adopt && !pair.flush_closes() {
            writer.adopt().map_err(|e| format!("adopt: {e}"))?;
            self.ledger.adopt(Adopted::Yes);
        }
        match end {
            End::Flush => writer.flush().map_err(|e| format!("flush: {e}"))?,
            End::Finalize { .. } => {
                for path in self.format.removed_by_finalize(&self.cache) {
                    self.ledger.unprotect(&path);
                }
                writer.finalize().map_err(|e| format!("finalize: {e}"))?;
            }
        }
        if adopt && pair.flush_closes() {
            writer.adopt().map_err(|e| format!("adopt: {e}"))?;
            self.ledger.adopt(Adopted::Yes);
        }
        for key in keys {
            self.ledger.record(key, self.format.name(key), Written::Acknowledged, None);
        }
        self.ledger.finalized = match end {
            End::Finalize { .. } if pair.finalizes() => Finalized::Yes,
            // An append after finalize reopens an Arrow cache.
            _ if finalized => Finalized::No,
            _ => self.ledger.finalized,
        };
        Ok(())
    }

    /// Runs every check; `when` goes in the message. Adds what it compared to `report`.
    fn check(&mut self, when: &str, report: &mut TrialReport) -> Result<(), String> {
        let finalized =
            self.format.is_finalized(&self.cache).map_err(|e| format!("{when}: {e}"))?;
        let expected = match self.ledger.finalized {
            Finalized::No => Some(false),
            Finalized::Maybe => None,
            Finalized::Yes => Some(true),
        };
        if expected.is_some_and(|e| e != finalized) {
            return Err(format!(
                "{when}: stowage reads the cache as {}finalized, but its finalize {}",
                if finalized { "" } else { "not " },
                if finalized { "was never called" } else { "returned" },
            ));
        }
        let checked = check(self.format, self.tool, &self.cache, &self.ledger, self.seed)
            .map_err(|e| format!("{when}: {e}"))?;
        report.compared += checked.compared;
        if report.cleared_by_recovery.is_none() {
            report.cleared_by_recovery = checked.cleared_by_recovery;
        }
        Ok(())
    }

    fn sabotage(&mut self, sabotage: Sabotage) -> Result<(), String> {
        match sabotage {
            Sabotage::None => {}
            Sabotage::DamageToolFile => {
                let target = self.ledger.protected().find_map(|(path, what)| match what {
                    Protected::Absent => None,
                    what => Some((path.to_path_buf(), matches!(what, Protected::Whole(_)))),
                });
                let Some((path, whole)) = target else {
                    return Err("sabotage: the tool wrote no file to damage".into());
                };
                let damaged = if whole {
                    std::fs::remove_file(&path)
                } else {
                    std::fs::read(&path).and_then(|mut bytes| {
                        bytes[0] ^= 0xff;
                        std::fs::write(&path, bytes)
                    })
                };
                damaged.map_err(|e| format!("sabotage of {}: {e}", path.display()))?;
            }
            Sabotage::LoseAcknowledged => {
                let key = Key::new(Phase::StowageKilled, 90);
                self.ledger.record(key, self.format.name(key), Written::Acknowledged, None);
            }
        }
        Ok(())
    }
}
