//! Writer child processes: the cases that kill a writer (`crash`, `power_loss`) or make its
//! writes fail (`faults`, `io_errors`) run it in a copy of the test executable, re-run with
//! `--exact <this test>` and [`CHILD_DIR_ENV`] set. [`crate::run_case_as_test`] sees the variable
//! and calls [`child_main`], which runs the writer that [`CHILD_MODE_ENV`] names instead of the
//! test. The power-loss and fault cases load an `LD_PRELOAD` interposer into the child through
//! its environment.
//!
//! The child talks to the parent in lines on its stdout, each `stowage-child: <word> <args>`
//! (libtest may print `test <name> ... ` in front of the first one); its stderr goes to a file
//! that a failure quotes.

use crate::{ChildLauncher, Failure};
use std::cell::RefCell;
use std::ffi::OsString;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError, channel};
use std::sync::{PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::thread::JoinHandle;
use std::time::Duration;
use stowage_core::BackendFactory;

/// Set in the child's environment to the cache directory it must write.
pub const CHILD_DIR_ENV: &str = "STOWAGE_CONFORMANCE_CRASH_CHILD";
/// Set in the child's environment to the writer it runs ([`Mode::env_value`]); absent means
/// [`Mode::FlushCrash`].
pub const CHILD_MODE_ENV: &str = "STOWAGE_CONFORMANCE_CHILD_MODE";
/// Set in the child's environment to its random seed.
pub(crate) const CHILD_SEED_ENV: &str = "STOWAGE_CONFORMANCE_CRASH_SEED";
/// What every protocol line starts with.
const PREFIX: &str = "stowage-child: ";
/// How long the parent waits for the child's next line before declaring it hung.
pub(crate) const LINE_TIMEOUT: Duration = Duration::from_secs(60);

/// Which writer a child runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Puts and flushes until killed ([`crate::crash::crash_loses_no_flushed_sample`]).
    FlushCrash,
    /// Puts, flushes, puts more, then finalizes, and is killed around the finalize
    /// ([`crate::crash::crash_during_finalize_leaves_resumable_or_complete`]).
    FinalizeCrash,
    /// Puts and flushes under a fault injector until a flush fails, then tries to write on
    /// ([`crate::faults::failed_flush_poisons_the_handle`]).
    FailedFlush,
    /// Opens (or creates) a cache, puts, flushes and finalizes under an injected write or sync
    /// failure, then tries to write on
    /// ([`crate::io_errors::io_errors_are_reported_and_lose_no_flushed_sample`]).
    IoErrors,
}

impl Mode {
    /// The value of [`CHILD_MODE_ENV`] for this mode.
    pub fn env_value(self) -> &'static str {
        match self {
            Mode::FlushCrash => "flush-crash",
            Mode::FinalizeCrash => "finalize-crash",
            Mode::FailedFlush => "failed-flush",
            Mode::IoErrors => "io-errors",
        }
    }
}

/// The child's side: runs the writer [`CHILD_MODE_ENV`] names on a new cache in `dir`, and exits
/// the process (it never returns to the test harness).
pub fn child_main(factory: &dyn BackendFactory, dir: &Path) -> ! {
    let mode = std::env::var(CHILD_MODE_ENV).unwrap_or_default();
    let seed = std::env::var(CHILD_SEED_ENV).ok().and_then(|s| s.parse().ok()).unwrap_or(0);
    // libtest has printed "test <name> ... " without a newline: start on a line of its own.
    say("");
    match mode.as_str() {
        "" | "flush-crash" => crate::crash::flush_writer(factory, dir, seed),
        "finalize-crash" => crate::crash::finalize_writer(factory, dir),
        "failed-flush" => crate::faults::failed_flush_writer(factory, dir),
        "io-errors" => crate::io_errors::io_errors_writer(factory, dir),
        other => {
            eprintln!("stowage conformance child: unknown {CHILD_MODE_ENV}={other:?}");
            std::process::exit(3)
        }
    }
}

/// Prints one protocol line (`stowage-child: <line>`) and flushes it to the parent at once.
pub(crate) fn say(line: &str) {
    let mut out = std::io::stdout().lock();
    let text = if line.is_empty() { String::new() } else { format!("{PREFIX}{line}") };
    let _ = writeln!(out, "{text}").and_then(|()| out.flush());
}

/// Ends the child after a failure it cannot report as a protocol line.
pub(crate) fn die(what: &str, e: impl std::fmt::Display) -> ! {
    eprintln!("stowage conformance child: {what}: {e}");
    std::process::exit(3)
}

/// Orders the suite's child spawns against the case bodies running in this process, so that no
/// spawn copies a case's open files into the child.
///
/// Spawning a process duplicates every descriptor of the parent into the child until it execs
/// (`O_CLOEXEC` closes them only then), and a writer lock (`flock`) belongs to the open file:
/// a case on another thread that drops a writer in that window and opens the cache again would
/// find it still locked, by a process that never opened it. So each case body holds this gate
/// shared ([`CaseGate`]) and a spawn takes it exclusively ([`Spawning`]), waiting for the cases
/// running on other threads to finish (a case that spawns gives up its own share meanwhile).
///
/// stowage's own `WriterLock` no longer needs it (its drop unlocks explicitly, and a lock held
/// by another process id is never taken for this one's), but the suite runs third-party
/// backends whose locks it does not know: a plain `flock` held by the descriptor alone is the
/// common way to write one. The gate costs the spawning cases some parallelism, never a result.
static GATE: RwLock<()> = RwLock::new(());

thread_local! {
    /// This thread's share of [`GATE`], while it runs a case body.
    static SHARE: RefCell<Option<RwLockReadGuard<'static, ()>>> = const { RefCell::new(None) };
}

/// Holds this thread's share of [`GATE`] while a case body runs (the runner takes it around
/// every case); nested cases on one thread share it.
pub(crate) struct CaseGate {
    entered: bool,
}

impl CaseGate {
    /// Takes this thread's share of the gate, unless it holds one already.
    pub(crate) fn enter() -> CaseGate {
        let entered = SHARE.with(|share| {
            let mut share = share.borrow_mut();
            if share.is_some() {
                return false;
            }
            *share = Some(GATE.read().unwrap_or_else(PoisonError::into_inner));
            true
        });
        CaseGate { entered }
    }
}

impl Drop for CaseGate {
    fn drop(&mut self) {
        if self.entered {
            SHARE.with(|share| share.borrow_mut().take());
        }
    }
}

/// Holds [`GATE`] exclusively while a child is spawned, this thread's share given up meanwhile
/// and taken again afterwards.
struct Spawning {
    exclusive: Option<RwLockWriteGuard<'static, ()>>,
    had_share: bool,
}

impl Spawning {
    fn begin() -> Spawning {
        let had_share = SHARE.with(|share| share.borrow_mut().take().is_some());
        let exclusive = Some(GATE.write().unwrap_or_else(PoisonError::into_inner));
        Spawning { exclusive, had_share }
    }
}

impl Drop for Spawning {
    fn drop(&mut self) {
        drop(self.exclusive.take());
        if self.had_share {
            let share = GATE.read().unwrap_or_else(PoisonError::into_inner);
            SHARE.with(|slot| *slot.borrow_mut() = Some(share));
        }
    }
}

/// A running child, from the parent's side.
pub(crate) struct Child {
    process: std::process::Child,
    lines: Receiver<String>,
    reader: Option<JoinHandle<()>>,
    stderr: PathBuf,
    label: String,
}

impl Child {
    /// Starts the writer `mode` on the cache `dir` (which the child creates, or opens), with
    /// `seed` and the extra environment `env`. The child's stderr goes to the file `stderr`
    /// (outside any tree an interposer models).
    pub(crate) fn spawn(
        launcher: &ChildLauncher,
        mode: Mode,
        dir: &Path,
        stderr: &Path,
        seed: u64,
        env: &[(OsString, OsString)],
    ) -> Result<Child, Failure> {
        let label = format!("{} child for {}", mode.env_value(), dir.display());
        // A file, not a pipe: a pipe nobody drains could fill up and block the child.
        let stderr = stderr.to_path_buf();
        let stderr_file = std::fs::File::create(&stderr)
            .map_err(|e| Failure::new(format!("creating {}", stderr.display()), "success", e))?;
        // Returns once the child has exec'd: it holds none of this process's files any more.
        let spawning = Spawning::begin();
        let mut process = Command::new(&launcher.exe)
            .args(["--exact", &launcher.test_name, "--nocapture", "--test-threads=1"])
            .env(CHILD_DIR_ENV, dir)
            .env(CHILD_MODE_ENV, mode.env_value())
            .env(CHILD_SEED_ENV, seed.to_string())
            .envs(env.iter().map(|(k, v)| (k, v)))
            .stdout(Stdio::piped())
            .stderr(stderr_file)
            .spawn()
            .map_err(|e| {
                Failure::new(
                    format!("starting the {label} ({})", launcher.exe.display()),
                    "a running child process",
                    e,
                )
            })?;
        drop(spawning);
        let stdout = process.stdout.take().expect("stdout is piped");
        let (sender, lines) = channel();
        let reader = std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if let Some((_, said)) = line.split_once(PREFIX)
                    && sender.send(said.to_owned()).is_err()
                {
                    break;
                }
            }
        });
        Ok(Child { process, lines, reader: Some(reader), stderr, label })
    }

    /// The child's next protocol line; `None` once it has ended. A child silent for
    /// [`LINE_TIMEOUT`] is a failure.
    pub(crate) fn next_line(&mut self) -> Result<Option<String>, Failure> {
        match self.lines.recv_timeout(LINE_TIMEOUT) {
            Ok(line) => Ok(Some(line)),
            Err(RecvTimeoutError::Disconnected) => Ok(None),
            Err(RecvTimeoutError::Timeout) => Err(Failure::new(
                format!("waiting for the {}", self.label),
                format!("a line within {LINE_TIMEOUT:?}"),
                format!("silence; its stderr: {}", self.stderr_text()),
            )),
        }
    }

    /// Kills the child (`SIGKILL`) and waits for it; returns the lines it printed that were
    /// not read yet (a step it finished just before the kill).
    pub(crate) fn kill(&mut self) -> Result<Vec<String>, Failure> {
        self.process.kill().map_err(|e| {
            Failure::new(format!("killing the {}", self.label), "a killed child", e)
        })?;
        Ok(self.reap())
    }

    /// Waits for the child to end by itself; returns the lines it printed that were not read
    /// yet.
    pub(crate) fn finish(&mut self) -> Vec<String> {
        self.reap()
    }

    fn reap(&mut self) -> Vec<String> {
        let _ = self.process.wait();
        if let Some(reader) = self.reader.take() {
            let _ = reader.join();
        }
        self.lines.try_iter().collect()
    }

    /// What the child wrote to its stderr so far.
    pub(crate) fn stderr_text(&self) -> String {
        std::fs::read_to_string(&self.stderr).unwrap_or_default()
    }
}

impl Drop for Child {
    /// A child the parent gave up on (a failed check) must not outlive the case.
    fn drop(&mut self) {
        if self.reader.is_some() {
            let _ = self.process.kill();
            self.reap();
        }
    }
}
