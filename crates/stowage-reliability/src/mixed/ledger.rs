//! What a mixed trial's two writers did, as the parent knows it: every sample each was asked to
//! write and whether it was acknowledged, which of the tool's samples stowage adopted, and the
//! files of the tool that stowage must leave as the tool left them.

use crate::crash::kill::Killed;
use crate::mixed::session::{Session, Step};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The steps of a trial, in order; each writes samples of its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Phase {
    /// stowage creates the cache and writes a first batch (when stowage starts it).
    StowageStarts,
    /// The tool's first batch.
    ToolFirst,
    /// The stowage child that is killed.
    StowageKilled,
    /// The tool's batch after the kill.
    ToolAfterKill,
    /// stowage resuming once more (some seeds).
    StowageResumes,
    /// The tool's batch among the closing writes.
    ToolMore,
    /// stowage's batch among the closing writes.
    StowageMore,
}

impl Phase {
    /// Every phase, in trial order.
    pub const ALL: [Phase; 7] = [
        Phase::StowageStarts,
        Phase::ToolFirst,
        Phase::StowageKilled,
        Phase::ToolAfterKill,
        Phase::StowageResumes,
        Phase::ToolMore,
        Phase::StowageMore,
    ];

    /// Who writes in this phase.
    pub fn writer(self) -> Writer {
        match self {
            Phase::ToolFirst | Phase::ToolAfterKill | Phase::ToolMore => Writer::Tool,
            _ => Writer::Stowage,
        }
    }

    /// The phase's number (its position in [`Phase::ALL`]), used in key names.
    pub fn number(self) -> u32 {
        Phase::ALL.iter().position(|p| *p == self).expect("listed") as u32
    }

    /// The phase in messages.
    pub fn describe(self) -> &'static str {
        match self {
            Phase::StowageStarts => "stowage's first batch",
            Phase::ToolFirst => "the tool's first batch",
            Phase::StowageKilled => "the killed stowage session",
            Phase::ToolAfterKill => "the tool's batch after the kill",
            Phase::StowageResumes => "stowage's resume",
            Phase::ToolMore => "the tool's closing batch",
            Phase::StowageMore => "stowage's closing batch",
        }
    }
}

/// One of the two writers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Writer {
    /// stowage's backend.
    Stowage,
    /// The original tool (its peer).
    Tool,
}

/// A sample of a trial: the `n`-th of its phase. Each is written at most once (the two writers'
/// keys never meet), so a key has exactly one value ([`crate::mixed::formats::Format::expected`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Key {
    /// The phase that writes it.
    pub phase: Phase,
    /// Its number in the phase.
    pub n: u32,
}

impl Key {
    /// The key `n` of `phase`.
    pub fn new(phase: Phase, n: u32) -> Key {
        Key { phase, n }
    }

    /// Who writes it.
    pub fn writer(self) -> Writer {
        self.phase.writer()
    }
}

/// Whether a sample was written, as far as its writer told.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Written {
    /// Acknowledged: the tool's call returned, or a stowage flush, adopt or finalize after its
    /// put returned. It must be there, intact, for both readers.
    Acknowledged,
    /// Put, or maybe put, by a stowage child killed before an acknowledgement: there intact, or
    /// absent.
    Maybe,
    /// Never put (the child died before the op that would put it): it must be absent.
    Never,
}

/// Whether stowage adopted a sample of the tool's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Adopted {
    /// No adopt ran after it was written: `validate` lists it unchecked.
    No,
    /// An adopt was killed after it was written: adopted or not.
    Maybe,
    /// A completed adopt covers it.
    Yes,
}

/// What the ledger knows of one sample.
#[derive(Debug, Clone)]
pub struct Entry {
    /// Its name in the cache: the key, or for hangar's samples the record hangar returned.
    pub name: String,
    /// Whether it was written.
    pub written: Written,
    /// For the tool's samples: whether stowage adopted it.
    pub adopted: Adopted,
    /// The file that holds it, where the format reports unchecked data per file (a
    /// torchcachex segment, a hangar collection file).
    pub unit: Option<PathBuf>,
}

/// A file of the tool's and what it must still hold.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Protected {
    /// Exactly these bytes.
    Whole(Vec<u8>),
    /// These bytes first (the tool and stowage both append after them).
    Prefix(Vec<u8>),
    /// No file (a marker stowage must never create for the tool's files).
    Absent,
}

/// Whether stowage finalized the cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Finalized {
    /// Never asked to.
    No,
    /// Killed inside finalize.
    Maybe,
    /// A finalize returned.
    Yes,
}

/// Everything the parent knows of a trial's writes.
#[derive(Debug, Clone)]
pub struct Ledger {
    entries: BTreeMap<Key, Entry>,
    names: BTreeMap<String, Key>,
    protected: BTreeMap<PathBuf, Protected>,
    /// Whether stowage finalized the cache.
    pub finalized: Finalized,
}

impl Default for Ledger {
    fn default() -> Self {
        Ledger {
            entries: BTreeMap::new(),
            names: BTreeMap::new(),
            protected: BTreeMap::new(),
            finalized: Finalized::No,
        }
    }
}

impl Ledger {
    /// Records `key`, named `name` in the cache.
    ///
    /// ```
    /// use stowage_reliability::mixed::ledger::{Key, Ledger, Phase, Written};
    /// let mut ledger = Ledger::default();
    /// let key = Key::new(Phase::ToolFirst, 0);
    /// ledger.record(key, "t1-0000".into(), Written::Acknowledged, None);
    /// assert_eq!(ledger.key_named("t1-0000"), Some(key));
    /// assert_eq!(ledger.acknowledged(stowage_reliability::mixed::ledger::Writer::Tool), 1);
    /// ```
    pub fn record(&mut self, key: Key, name: String, written: Written, unit: Option<PathBuf>) {
        self.names.insert(name.clone(), key);
        self.entries.insert(key, Entry { name, written, adopted: Adopted::No, unit });
    }

    /// The key named `name`.
    pub fn key_named(&self, name: &str) -> Option<Key> {
        self.names.get(name).copied()
    }

    /// The entry of `key`.
    pub fn entry(&self, key: Key) -> Option<&Entry> {
        self.entries.get(&key)
    }

    /// Every key and its entry, in phase order.
    pub fn entries(&self) -> impl Iterator<Item = (Key, &Entry)> {
        self.entries.iter().map(|(k, e)| (*k, e))
    }

    /// The keys of `phase`, in order.
    pub fn keys_of(&self, phase: Phase) -> Vec<Key> {
        self.entries.keys().filter(|k| k.phase == phase).copied().collect()
    }

    /// How many of `writer`'s samples were acknowledged.
    pub fn acknowledged(&self, writer: Writer) -> usize {
        self.entries
            .iter()
            .filter(|(k, e)| k.writer() == writer && e.written == Written::Acknowledged)
            .count()
    }

    /// Records what the killed stowage `session` did, from what its child announced: puts
    /// before the last acknowledging step that returned are acknowledged, puts of steps begun
    /// after it may be there, the others were never made; an adopt that returned covers every
    /// sample of the tool's written before it, one it was killed inside may have.
    pub fn record_session(
        &mut self,
        session: &Session,
        killed: &Killed,
        name: impl Fn(Key) -> String,
    ) {
        let acknowledged_end = killed.acknowledged.map_or(0, |n| n + 1);
        let begun_end = killed.last_begun.map_or(0, |n| n + 1);
        for (i, step) in session.steps.iter().enumerate() {
            match step {
                Step::Put(numbers) => {
                    let written = if i < acknowledged_end {
                        Written::Acknowledged
                    } else if i < begun_end {
                        Written::Maybe
                    } else {
                        Written::Never
                    };
                    for &n in numbers {
                        let key = Key::new(Phase::StowageKilled, n);
                        self.record(key, name(key), written, None);
                    }
                }
                Step::Adopt if i < acknowledged_end => self.adopt(Adopted::Yes),
                Step::Adopt if i < begun_end => self.adopt(Adopted::Maybe),
                Step::Finalize if i < acknowledged_end => self.finalized = Finalized::Yes,
                Step::Finalize if i < begun_end => self.finalized = Finalized::Maybe,
                _ => {}
            }
        }
    }

    /// A stowage adopt ran over every sample of the tool's written so far; `how` is
    /// [`Adopted::Yes`] when it returned, [`Adopted::Maybe`] when it was killed.
    pub fn adopt(&mut self, how: Adopted) {
        for (key, entry) in self.entries.iter_mut() {
            if key.writer() == Writer::Tool && entry.adopted != Adopted::Yes {
                entry.adopted = how;
            }
        }
    }

    /// The tool's samples that `validate` must list as unchecked (`must`), and those it may
    /// (`may`: an adopt was killed after they were written).
    pub fn unchecked(&self) -> (BTreeSet<Key>, BTreeSet<Key>) {
        let (mut must, mut may) = (BTreeSet::new(), BTreeSet::new());
        for (key, entry) in &self.entries {
            if key.writer() != Writer::Tool || entry.written != Written::Acknowledged {
                continue;
            }
            match entry.adopted {
                Adopted::No => must.insert(*key),
                Adopted::Maybe => may.insert(*key),
                Adopted::Yes => false,
            };
        }
        (must, may)
    }

    /// `path`, a file of the tool's, must hold `what` from now on. A longer prefix replaces a
    /// prefix only when it extends it: a file changed before the tool appended to it again
    /// stays held to what it held before.
    pub fn protect(&mut self, path: PathBuf, what: Protected) {
        if let (Some(Protected::Prefix(old)), Protected::Prefix(new)) =
            (self.protected.get(&path), &what)
            && !new.starts_with(old)
        {
            return;
        }
        self.protected.insert(path, what);
    }

    /// Stops protecting `path` (a file the tool's protocol lets stowage remove).
    pub fn unprotect(&mut self, path: &Path) {
        self.protected.remove(path);
    }

    /// The protected files, and what each must hold.
    pub fn protected(&self) -> impl Iterator<Item = (&Path, &Protected)> {
        self.protected.iter().map(|(p, what)| (p.as_path(), what))
    }

    /// Every protected file holds what it must. The error names the file, who wrote it and how
    /// it differs.
    pub fn check_protected(&self) -> Result<usize, String> {
        for (path, what) in &self.protected {
            let now = std::fs::read(path);
            let problem = match (what, now) {
                (Protected::Absent, Err(_)) => None,
                (Protected::Absent, Ok(bytes)) => {
                    Some(format!("exists ({} bytes); stowage must never create it", bytes.len()))
                }
                (_, Err(e)) => Some(format!("is gone: {e}")),
                (Protected::Whole(want), Ok(got)) if got != *want => Some(difference(want, &got)),
                (Protected::Prefix(want), Ok(got)) if !got.starts_with(want) => {
                    Some(format!("(its first {} bytes) {}", want.len(), difference(want, &got)))
                }
                _ => None,
            };
            if let Some(problem) = problem {
                return Err(format!("{} (the tool's file) {problem}", path.display()));
            }
        }
        Ok(self.protected.len())
    }
}

/// How `got` differs from `want`: where, and both lengths.
fn difference(want: &[u8], got: &[u8]) -> String {
    let at = want.iter().zip(got).position(|(a, b)| a != b).unwrap_or(want.len().min(got.len()));
    format!(
        "changed: {} bytes now, {} as the tool left it, first difference at byte {at}",
        got.len(),
        want.len()
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crash::kill::Moment;

    #[test]
    fn a_session_is_acknowledged_up_to_its_last_returned_flush() {
        let session = Session {
            steps: vec![
                Step::Open,
                Step::Put(vec![0, 1]),
                Step::Flush,
                Step::Adopt,
                Step::Put(vec![2]),
                Step::Flush,
                Step::Put(vec![3]),
                Step::Finalize,
            ],
        };
        let mut ledger = Ledger::default();
        let tool = Key::new(Phase::ToolFirst, 0);
        ledger.record(tool, "t".into(), Written::Acknowledged, None);
        // Killed inside the second flush.
        let killed =
            Killed { moment: Moment::Inside(5), last_begun: Some(5), acknowledged: Some(3) };
        ledger.record_session(&session, &killed, |k| format!("s{}", k.n));
        let written = |n| ledger.entry(Key::new(Phase::StowageKilled, n)).unwrap().written;
        assert_eq!(
            [written(0), written(1), written(2), written(3)],
            [Written::Acknowledged, Written::Acknowledged, Written::Maybe, Written::Never]
        );
        assert_eq!(ledger.entry(tool).unwrap().adopted, Adopted::Yes);
        assert_eq!(ledger.finalized, Finalized::No);
        assert_eq!(ledger.unchecked(), (BTreeSet::new(), BTreeSet::new()));
    }

    #[test]
    fn a_changed_protected_file_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("segment_000000.arrow");
        std::fs::write(&path, b"abcdef").unwrap();
        let mut ledger = Ledger::default();
        ledger.protect(path.clone(), Protected::Whole(b"abcdef".to_vec()));
        ledger.protect(dir.path().join("marker"), Protected::Absent);
        assert_eq!(ledger.check_protected(), Ok(2));
        std::fs::write(&path, b"abcXef").unwrap();
        let error = ledger.check_protected().unwrap_err();
        assert!(error.contains("segment_000000.arrow") && error.contains("byte 3"), "{error}");
    }

    #[test]
    fn a_prefix_changed_before_the_next_append_stays_held() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("data.bin");
        let mut ledger = Ledger::default();
        ledger.protect(path.clone(), Protected::Prefix(b"rows".to_vec()));
        // Damaged, then appended to: the new prefix does not extend the old one.
        std::fs::write(&path, b"XowsMORE").unwrap();
        ledger.protect(path.clone(), Protected::Prefix(b"XowsMORE".to_vec()));
        assert!(ledger.check_protected().unwrap_err().contains("first difference at byte 0"));
        std::fs::write(&path, b"rowsMORE").unwrap();
        ledger.protect(path.clone(), Protected::Prefix(b"rowsMORE".to_vec()));
        std::fs::write(&path, b"rowsMOR").unwrap();
        assert!(ledger.check_protected().is_err(), "the longer prefix is held now");
    }
}
