//! The child process of a crash trial: it runs its workload and announces each op on stdout,
//! `begin <op>` before starting it and `end <op>` after it returned, so that the parent knows
//! which flushes were acknowledged (an `end` is written only after `flush` returned) and where
//! the child was when it was killed. After the last op it prints `done` and waits to be killed.

use crate::crash::subject::{CrashSubject, Handle};
use crate::crash::workload::Op;
use std::io::{Read, Write};
use std::path::Path;

/// One line of the child's protocol.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Line {
    /// About to start op `n`.
    Begin(usize),
    /// Op `n` returned successfully.
    End(usize),
    /// Every op returned.
    Done,
}

impl Line {
    /// Parses a line the child wrote; `None` for anything else (an error report).
    ///
    /// ```
    /// use stowage_reliability::crash::child::Line;
    /// assert_eq!(Line::parse("begin 4"), Some(Line::Begin(4)));
    /// assert_eq!(Line::parse(&Line::End(9).to_string()), Some(Line::End(9)));
    /// assert_eq!(Line::parse("failed 2 flush: disk full"), None);
    /// ```
    pub fn parse(text: &str) -> Option<Line> {
        let (word, number) = text.trim().split_once(' ').unwrap_or((text.trim(), ""));
        match word {
            "begin" => number.parse().ok().map(Line::Begin),
            "end" => number.parse().ok().map(Line::End),
            "done" => Some(Line::Done),
            _ => None,
        }
    }
}

impl std::fmt::Display for Line {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Line::Begin(n) => write!(f, "begin {n}"),
            Line::End(n) => write!(f, "end {n}"),
            Line::Done => f.write_str("done"),
        }
    }
}

/// The child's main: writes the workload of `seed` into a new cache at `dir` with the subject
/// labelled `label`, then waits (holding the cache open) until killed or its stdin closes.
/// Exits with status 3 after printing `failed <op> <error>` when an op fails.
pub fn child_main(label: &str, dir: &Path, seed: u64) -> ! {
    let Some(subject) = CrashSubject::by_label(label) else {
        println!("failed 0 no crash subject is labelled {label:?}");
        std::process::exit(3)
    };
    let workload = subject.workload(seed);
    let mut out = std::io::stdout().lock();
    let mut say = |line: &dyn std::fmt::Display| {
        // The parent counts on seeing each line as soon as it is true.
        let _ = writeln!(out, "{line}").and_then(|()| out.flush());
    };
    let mut cache: Option<Handle> = None;
    for (n, op) in workload.ops.iter().enumerate() {
        say(&Line::Begin(n));
        let result = match (op, cache.as_mut()) {
            (Op::Create, _) => subject.create(dir, &workload.schema).map(|h| cache = Some(h)),
            (Op::Put(batch), Some(h)) => batch
                .iter()
                .try_for_each(|put| h.backend().put(&put.key, &workload.value(put.number))),
            (Op::Flush, Some(h)) => h.backend().flush(),
            (Op::Compact, Some(h)) => h.compact(),
            (Op::Finalize, Some(h)) => h.backend().finalize(),
            (_, None) => unreachable!("Create is the first op"),
        };
        if let Err(e) = result {
            say(&format_args!("failed {n} {}: {e}", op.name()));
            std::process::exit(3)
        }
        say(&Line::End(n));
    }
    say(&Line::Done);
    // Wait, writer lock held, for the kill; a parent that died closes our stdin.
    let _ = std::io::stdin().read_to_end(&mut Vec::new());
    std::process::exit(0)
}
