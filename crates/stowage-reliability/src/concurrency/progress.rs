//! How the writer tells every reader how far it is, without a channel to each: an append-only
//! text file of `announce <ops>` (puts `0..ops` may now happen), `ack <ops>` (a completed flush
//! made puts `0..ops` durable) and `done <ops>` (finalized) lines.
//!
//! Each line is one `write` to a file opened with `O_APPEND`, and the writer announces puts
//! before it makes them, so a reader that reads the file *after* opening the cache has seen
//! every announcement of a put the cache showed it; acknowledgements it reads *before* opening
//! are ones the cache must honour. A reader tolerates a line it reads half-written (it keeps the
//! bytes and completes the line on its next read).

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

/// Where the writer is, as a reader last read it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Progress {
    /// Puts `0..announced` may have happened.
    pub announced: u64,
    /// Puts `0..acknowledged` are durable (a flush that covered them returned).
    pub acknowledged: u64,
    /// The writer finalized the cache after exactly this many puts.
    pub done: Option<u64>,
    /// The campaign gave up on the writer (it failed): readers stop.
    pub aborted: bool,
}

/// The writer's end.
#[derive(Debug)]
pub struct ProgressWriter {
    file: File,
    path: PathBuf,
}

impl ProgressWriter {
    /// Creates (or truncates) the progress file at `path`.
    pub fn create(path: &Path) -> Result<ProgressWriter, String> {
        // Created empty, then reopened in append mode (Rust refuses truncate with append).
        let file = File::create(path)
            .and_then(|_| OpenOptions::new().append(true).open(path))
            .map_err(|e| format!("creating the progress file {}: {e}", path.display()))?;
        Ok(ProgressWriter { file, path: path.to_path_buf() })
    }

    /// Puts `0..ops` may happen from now on.
    pub fn announce(&mut self, ops: u64) -> Result<(), String> {
        self.line(&format!("announce {ops}\n"))
    }

    /// Puts `0..ops` are durable.
    pub fn acknowledge(&mut self, ops: u64) -> Result<(), String> {
        self.line(&format!("ack {ops}\n"))
    }

    /// The cache is finalized after `ops` puts.
    pub fn done(&mut self, ops: u64) -> Result<(), String> {
        self.line(&format!("done {ops}\n"))
    }

    /// The writer failed: readers stop. Written by the campaign process, not the writer.
    pub fn abort(&mut self) -> Result<(), String> {
        self.line("abort 0\n")
    }

    /// Opens an existing progress file for appending (the campaign's side, for [`Self::abort`]).
    pub fn append_to(path: &Path) -> Result<ProgressWriter, String> {
        let file = OpenOptions::new()
            .append(true)
            .open(path)
            .map_err(|e| format!("opening the progress file {}: {e}", path.display()))?;
        Ok(ProgressWriter { file, path: path.to_path_buf() })
    }

    fn line(&mut self, line: &str) -> Result<(), String> {
        // One write call per line: `write_all` would split it only on a short write.
        self.file
            .write_all(line.as_bytes())
            .map_err(|e| format!("writing {line:?} to {}: {e}", self.path.display()))
    }
}

/// A reader's end: reads what was appended since its last read.
#[derive(Debug)]
pub struct ProgressFollower {
    path: PathBuf,
    offset: u64,
    partial: Vec<u8>,
    progress: Progress,
}

impl ProgressFollower {
    /// Follows the progress file at `path` from its start.
    pub fn new(path: &Path) -> ProgressFollower {
        ProgressFollower {
            path: path.to_path_buf(),
            offset: 0,
            partial: Vec::new(),
            progress: Progress::default(),
        }
    }

    /// Reads the lines appended since the last call and returns the progress they add up to.
    ///
    /// Errors: the file cannot be read, or holds a line that is not the protocol's.
    pub fn refresh(&mut self) -> Result<Progress, String> {
        let fail = |e: std::io::Error| format!("reading {}: {e}", self.path.display());
        let mut file = File::open(&self.path).map_err(fail)?;
        file.seek(SeekFrom::Start(self.offset)).map_err(fail)?;
        let mut fresh = Vec::new();
        file.read_to_end(&mut fresh).map_err(fail)?;
        self.offset += fresh.len() as u64;
        self.partial.extend_from_slice(&fresh);
        let complete = self.partial.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
        let lines: Vec<u8> = self.partial.drain(..complete).collect();
        for line in String::from_utf8_lossy(&lines).lines() {
            let (word, number) = line
                .split_once(' ')
                .and_then(|(w, n)| Some((w, n.parse::<u64>().ok()?)))
                .ok_or_else(|| format!("{}: unexpected line {line:?}", self.path.display()))?;
            match word {
                "announce" => self.progress.announced = self.progress.announced.max(number),
                "ack" => self.progress.acknowledged = self.progress.acknowledged.max(number),
                "abort" => self.progress.aborted = true,
                "done" => {
                    self.progress.done = Some(number);
                    self.progress.acknowledged = number;
                }
                _ => return Err(format!("{}: unexpected line {line:?}", self.path.display())),
            }
        }
        Ok(self.progress)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_follower_sees_each_line_once_and_waits_for_a_half_line() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("progress");
        let mut writer = ProgressWriter::create(&path).unwrap();
        let mut follower = ProgressFollower::new(&path);
        assert_eq!(follower.refresh().unwrap(), Progress::default());
        writer.announce(10).unwrap();
        writer.acknowledge(4).unwrap();
        let seen = follower.refresh().unwrap();
        assert_eq!((seen.announced, seen.acknowledged, seen.done), (10, 4, None));
        let mut raw = OpenOptions::new().append(true).open(&path).unwrap();
        raw.write_all(b"ack 1").unwrap();
        assert_eq!(follower.refresh().unwrap().acknowledged, 4);
        raw.write_all(b"0\n").unwrap();
        assert_eq!(follower.refresh().unwrap().acknowledged, 10);
        writer.done(10).unwrap();
        assert_eq!(follower.refresh().unwrap().done, Some(10));
    }
}
