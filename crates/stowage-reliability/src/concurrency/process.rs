//! A child process of a campaign binary that the parent talks to by lines: commands on its stdin,
//! reports on its stdout, read on a thread so that every wait has a bound. Its stderr goes to a
//! file (a pipe nobody drains could fill up and block it) that failures quote. Dropping it kills
//! the process, so a failing campaign leaves nothing running.
//!
//! The faults campaign uses it too.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::time::Duration;

/// A running child.
#[derive(Debug)]
pub struct Child {
    what: String,
    process: std::process::Child,
    lines: Receiver<String>,
    stderr: PathBuf,
}

impl Child {
    /// Starts `exe args` with the extra environment `env`; `what` names it in errors and
    /// `stderr` is the file its standard error goes to.
    pub fn spawn(
        what: &str,
        exe: &Path,
        args: &[String],
        env: &[(String, String)],
        stderr: &Path,
    ) -> Result<Child, String> {
        let err_file = std::fs::File::create(stderr)
            .map_err(|e| format!("{what}: creating {}: {e}", stderr.display()))?;
        let mut process = Command::new(exe)
            .args(args)
            .envs(env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(err_file)
            .spawn()
            .map_err(|e| format!("{what}: starting {}: {e}", exe.display()))?;
        let stdout = process.stdout.take().expect("stdout is piped");
        let (send, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if send.send(line).is_err() {
                    break;
                }
            }
        });
        Ok(Child { what: what.to_string(), process, lines, stderr: stderr.to_path_buf() })
    }

    /// The process id.
    pub fn id(&self) -> u32 {
        self.process.id()
    }

    /// Sends one line to the child's stdin.
    pub fn send(&mut self, line: &str) -> Result<(), String> {
        let stdin = self.process.stdin.as_mut().expect("stdin is piped");
        writeln!(stdin, "{line}")
            .and_then(|()| stdin.flush())
            .map_err(|e| format!("{}: sending {line:?}: {e}; {}", self.what, self.stderr_tail()))
    }

    /// The next line the child prints, waiting at most `timeout`.
    ///
    /// Errors: the child printed nothing for `timeout`, or closed its stdout (exited); both quote
    /// the end of its stderr.
    pub fn next_line(&mut self, timeout: Duration) -> Result<String, String> {
        match self.lines.recv_timeout(timeout) {
            Ok(line) => Ok(line),
            Err(RecvTimeoutError::Timeout) => Err(format!(
                "{}: printed nothing for {timeout:?}; {}",
                self.what,
                self.stderr_tail()
            )),
            Err(RecvTimeoutError::Disconnected) => {
                let status = self.process.wait().map(|s| s.to_string()).unwrap_or_default();
                Err(format!("{}: exited ({status}); {}", self.what, self.stderr_tail()))
            }
        }
    }

    /// The next line starting with `word ` (other lines, a library's chatter, are skipped); the
    /// rest of it.
    pub fn expect(&mut self, word: &str, timeout: Duration) -> Result<String, String> {
        let deadline = std::time::Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            let line = self.next_line(left)?;
            if let Some(rest) = line.strip_prefix(word).and_then(|r| r.strip_prefix(' ')) {
                return Ok(rest.to_string());
            }
            if line == word {
                return Ok(String::new());
            }
        }
    }

    /// Kills the child with SIGKILL and reaps it: when this returns, the process is gone and
    /// every file (and lock) it held is closed.
    pub fn kill(&mut self) -> Result<ExitStatus, String> {
        self.process.kill().map_err(|e| format!("{}: kill: {e}", self.what))?;
        self.process.wait().map_err(|e| format!("{}: wait: {e}", self.what))
    }

    /// Waits for the child to exit by itself, at most `timeout` (then kills it).
    pub fn wait(&mut self, timeout: Duration) -> Result<ExitStatus, String> {
        let deadline = std::time::Instant::now() + timeout;
        loop {
            match self.process.try_wait() {
                Ok(Some(status)) => return Ok(status),
                Ok(None) if std::time::Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(20))
                }
                Ok(None) => {
                    let _ = self.kill();
                    return Err(format!(
                        "{}: still running after {timeout:?} (killed); {}",
                        self.what,
                        self.stderr_tail()
                    ));
                }
                Err(e) => return Err(format!("{}: wait: {e}", self.what)),
            }
        }
    }

    /// The last 1,500 bytes of the child's stderr, on one line.
    pub fn stderr_tail(&self) -> String {
        let text = std::fs::read(&self.stderr).unwrap_or_default();
        let tail = String::from_utf8_lossy(&text[text.len().saturating_sub(1500)..]);
        format!("its stderr ends: {:?}", tail.trim().replace('\n', " | "))
    }
}

impl Drop for Child {
    fn drop(&mut self) {
        if let Ok(None) = self.process.try_wait() {
            let _ = self.process.kill();
            let _ = self.process.wait();
        }
    }
}
