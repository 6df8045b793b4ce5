//! The parent's side of a trial: start the child, follow its announcements, and SIGKILL it at
//! the planned moment; then read what it managed to say before dying.

use crate::crash::child::Line;
use crate::crash::workload::{Op, Workload};
use rand::{Rng, rngs::StdRng};
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::mpsc::{RecvTimeoutError, channel};
use std::time::{Duration, Instant};

/// Tells whether an op is of one kind.
type OpKind = fn(&Op) -> bool;

/// What the parent needs to know of a child's op to follow it: the crash campaign's [`Op`], and
/// the steps of a mixed-sequence trial ([`crate::mixed::session::Step`]).
pub trait ChildOp {
    /// The op's name in reports (ops of one name share their timing).
    fn name(&self) -> &'static str;
    /// Whether the op returning makes every earlier put durable.
    fn acknowledges(&self) -> bool;
    /// How long the op is guessed to take before one of its kind has finished.
    fn first_guess(&self) -> Duration;
}

impl ChildOp for Op {
    fn name(&self) -> &'static str {
        Op::name(self)
    }

    fn acknowledges(&self) -> bool {
        Op::acknowledges(self)
    }

    fn first_guess(&self) -> Duration {
        Duration::from_millis(match self {
            Op::Put(_) => 1,
            Op::Flush => 3,
            _ => 6,
        })
    }
}

/// When to kill: once the child announces op `op`, after `fraction` of the time such an op has
/// taken so far in this run (a fraction above 1 may land just after it ends).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct KillPlan {
    /// The op whose start the kill is timed from.
    pub op: usize,
    /// Of the op's expected duration.
    pub fraction: f64,
}

impl KillPlan {
    /// A random plan for `workload`: inside create one time in twenty, inside a put batch,
    /// a flush, a compaction (when there is one) or finalize otherwise, weighted 6:6:3:4 (among
    /// the ops from [`Workload::kill_from`] on).
    pub fn random(workload: &Workload, rng: &mut StdRng) -> KillPlan {
        let kinds: [(OpKind, u32); 5] = [
            (|op| *op == Op::Create, 1),
            (|op| matches!(op, Op::Put(_)), 6),
            (|op| *op == Op::Flush, 6),
            (|op| *op == Op::Compact, 3),
            (|op| *op == Op::Finalize, 4),
        ];
        let choices = kinds.iter().map(|(kind, weight)| (workload.kill_candidates(*kind), *weight));
        KillPlan::weighted(choices, rng)
    }

    /// A plan aimed inside one op of a kind drawn by weight among `kinds` (each: the indexes of
    /// its ops, its weight; kinds without ops are left out), the op drawn among its kind's, at a
    /// random fraction (up to 1.3) of its expected time.
    ///
    /// # Panics
    /// When no kind has an op.
    pub fn weighted(kinds: impl IntoIterator<Item = (Vec<usize>, u32)>, rng: &mut StdRng) -> Self {
        let choices: Vec<(Vec<usize>, u32)> =
            kinds.into_iter().filter(|(ops, _)| !ops.is_empty()).collect();
        let mut pick = rng.random_range(0..choices.iter().map(|(_, w)| w).sum::<u32>());
        let (ops, _) = choices
            .iter()
            .find(|(_, weight)| {
                pick < *weight || {
                    pick -= weight;
                    false
                }
            })
            .expect("the pick is below the total weight");
        KillPlan { op: ops[rng.random_range(0..ops.len())], fraction: rng.random_range(0.0..1.3) }
    }
}

/// Where the child was when it died, from the last line it wrote.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Moment {
    /// Inside op `n`: it had announced the op and not its end.
    Inside(usize),
    /// Between op `n`'s end and the next op's start.
    After(usize),
    /// After every op (waiting to be killed).
    Done,
    /// Before it announced anything.
    Start,
}

/// What the parent learned from a killed child.
#[derive(Debug, Clone, Copy)]
pub struct Killed {
    /// Where it died.
    pub moment: Moment,
    /// The last op it started (its puts may have happened, partly or wholly).
    pub last_begun: Option<usize>,
    /// The last op that acknowledges earlier puts ([`Op::acknowledges`]) and returned.
    pub acknowledged: Option<usize>,
}

/// How long the parent waits for the child's next line before declaring it hung.
const LINE_TIMEOUT: Duration = Duration::from_secs(120);

/// Runs `command` (the child, its stdout the protocol of [`Line`], announcing `ops` in order),
/// kills it with SIGKILL at `plan`, and returns what it announced. Its stderr goes to
/// `stderr_path`.
///
/// Errors: the child failed an op or exited by itself, went silent for two minutes, or could
/// not be started; the message quotes its stderr.
pub fn run_child<O: ChildOp>(
    mut command: Command,
    ops: &[O],
    plan: KillPlan,
    stderr_path: &Path,
) -> Result<Killed, String> {
    // stderr goes to a file: a pipe nobody drains could fill up and block the child.
    let stderr = std::fs::File::create(stderr_path)
        .map_err(|e| format!("creating {}: {e}", stderr_path.display()))?;
    let mut child = command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(stderr)
        .spawn()
        .map_err(|e| format!("starting the crash child: {e}"))?;
    let stdout = child.stdout.take().expect("piped");
    let (sender, lines) = channel();
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if sender.send((Instant::now(), line)).is_err() {
                break;
            }
        }
    });
    let mut follow = Follower::new(ops);
    let mut outcome = Err("the crash child exited before the kill".to_string());
    loop {
        match lines.recv_timeout(LINE_TIMEOUT) {
            Ok((at, text)) => match follow.line(at, &text) {
                Err(failed) => {
                    outcome = Err(failed);
                    break;
                }
                Ok(Some(Line::Begin(n))) if n == plan.op => {
                    let expected = follow.expected_duration(&ops[n]);
                    std::thread::sleep(expected.mul_f64(plan.fraction));
                    outcome = Ok(());
                    break;
                }
                Ok(_) => {}
            },
            Err(RecvTimeoutError::Timeout) => {
                outcome = Err(format!("the crash child printed nothing for {LINE_TIMEOUT:?}"));
                break;
            }
            Err(RecvTimeoutError::Disconnected) => break,
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    let _ = reader.join();
    // Lines written before the kill landed that we had not read yet.
    for (at, text) in lines.try_iter() {
        if let Err(failed) = follow.line(at, &text) {
            outcome = outcome.and(Err(failed));
        }
    }
    outcome.map_err(|why| {
        let err = std::fs::read_to_string(stderr_path).unwrap_or_default();
        format!("{why} (kill planned at {plan:?}); the child's stderr: {err:?}")
    })?;
    Ok(follow.killed)
}

/// Follows the child's lines: where it is, what it acknowledged, how long ops take.
struct Follower<'w, O> {
    ops: &'w [O],
    killed: Killed,
    started: Option<Instant>,
    /// Total time and count of finished ops, by op name.
    durations: std::collections::HashMap<&'static str, (Duration, u32)>,
}

impl<'w, O: ChildOp> Follower<'w, O> {
    fn new(ops: &'w [O]) -> Self {
        let killed = Killed { moment: Moment::Start, last_begun: None, acknowledged: None };
        Follower { ops, killed, started: None, durations: Default::default() }
    }

    fn line(&mut self, at: Instant, text: &str) -> Result<Option<Line>, String> {
        let Some(line) = Line::parse(text) else {
            return Err(format!("the crash child reported {text:?}"));
        };
        match line {
            Line::Begin(n) if n >= self.ops.len() => {
                return Err(format!("the crash child began op {n} of {}", self.ops.len()));
            }
            Line::End(n) if n >= self.ops.len() => {
                return Err(format!("the crash child ended op {n} of {}", self.ops.len()));
            }
            Line::Begin(n) => {
                self.killed.moment = Moment::Inside(n);
                self.killed.last_begun = Some(n);
                self.started = Some(at);
            }
            Line::End(n) => {
                self.killed.moment = Moment::After(n);
                let op = &self.ops[n];
                if op.acknowledges() {
                    self.killed.acknowledged = Some(n);
                }
                if let Some(started) = self.started.take() {
                    let entry = self.durations.entry(op.name()).or_default();
                    *entry = (entry.0 + (at - started), entry.1 + 1);
                }
            }
            Line::Done => self.killed.moment = Moment::Done,
        }
        Ok(Some(line))
    }

    /// The mean time ops like `op` took so far, or a guess before the first.
    fn expected_duration(&self, op: &O) -> Duration {
        match self.durations.get(op.name()) {
            Some(&(total, count)) if count > 0 => total / count,
            _ => op.first_guess(),
        }
    }
}
