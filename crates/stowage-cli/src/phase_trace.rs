//! `STOWAGE_PHASE_TRACE=<file>`: each step of `convert` appended to a file as it starts, for
//! the crash campaign, which kills the command inside each step (create, copy, flush, finalize)
//! and must know where the kill landed.
//!
//! A line is `<microseconds since the command started> <step>`, written with one `write` call
//! to a file opened for appending, so a line is either whole or missing after a `kill -9`.
//! Without the variable nothing is written. The trace never holds keys or data.

use std::fs::File;
use std::io::Write;
use std::time::Instant;

/// The environment variable naming the trace file.
pub const VARIABLE: &str = "STOWAGE_PHASE_TRACE";

/// Where steps are traced, if anywhere.
pub struct PhaseTrace {
    file: Option<File>,
    start: Instant,
}

impl PhaseTrace {
    /// The trace [`VARIABLE`] names; a file that cannot be opened is a note to `notes`, not an
    /// error (the command does not depend on its trace).
    pub fn from_env(notes: &mut dyn Write) -> PhaseTrace {
        let file = std::env::var_os(VARIABLE).and_then(|path| {
            std::fs::OpenOptions::new()
                .append(true)
                .create(true)
                .open(&path)
                .map_err(|e| {
                    let text = format!("{VARIABLE}: {}: {e}", path.to_string_lossy());
                    crate::out::note(notes, &text)
                })
                .ok()
        });
        PhaseTrace { file, start: Instant::now() }
    }

    /// Records that `step` starts now.
    pub fn mark(&self, step: &str) {
        if let Some(mut file) = self.file.as_ref() {
            let line = format!("{} {step}\n", self.start.elapsed().as_micros());
            let _ = file.write_all(line.as_bytes());
        }
    }
}
