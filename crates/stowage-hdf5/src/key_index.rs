//! The key index of a generic cache: which segment and row hold each key's latest sample, found
//! without reading every segment at open.
//!
//! Most segments are covered by key index runs ([`stowage_core::key_runs`]): memory-mapped hash
//! tables in `index/run_<first>_<through>.bin` over the segments at positions `first..=through`
//! of the commit log, each vouched for by a `run` record ([`crate::commit_log::RunEntry`]). The
//! newest segments, which no run covers yet (the *tail*), are read at open into an in-memory map;
//! the writer turns the tail into a run once it holds [`MERGE_AFTER_SEGMENTS`] segments or
//! [`MERGE_AFTER_KEYS`] keys, folding in the newest runs no larger than what it gathered
//! ([`plan_merge`]), and finalize merges everything into one run. Opening then costs the log, a
//! header check per run and the tail's keys, whatever the number of keys; a flush costs its own
//! rows plus, now and then, a merge whose cost is logarithmic per key over the cache's life.
//!
//! A slot holds a hash: every candidate is confirmed by reading the key at its segment and row,
//! so a damaged or colliding slot can hide a key but never return another key's sample; a
//! segment that cannot be read while confirming is the lookup's error, never a missing key. A run
//! that does not open as its record says is not used, nor is any newer one: their segments are
//! read into the tail instead (slower to open, never wrong), and `validate` reports the run.

use std::cell::RefCell;
use std::collections::HashMap;
use std::path::{Path, PathBuf};

use stowage_core::cold_reads::PagePlan;
use stowage_core::file_safety::create_dir_within_durably;
use stowage_core::key_runs::{KeyRun, RunSpec, key_hash, plan_merge, write_run_file};
use stowage_core::{Error, IoResultExt, Result};

use crate::commit_log::RunEntry;

/// The directory of the run files, inside the cache directory.
pub(crate) const INDEX_DIR: &str = "index";

/// Tail segments after which a flush writes a run: a lookup probes the tail's map, so the bound
/// is on what open reads.
pub(crate) const MERGE_AFTER_SEGMENTS: usize = 32;

/// Tail keys after which a flush writes a run (open reads the tail's keys).
pub(crate) const MERGE_AFTER_KEYS: usize = 65_536;

/// How many keys ahead adding a segment's keys fetches their runs' slots.
const PREFETCH_AHEAD: usize = 8;

/// Where a committed key's sample lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Location {
    /// The segment's position in the commit log.
    pub segment: usize,
    pub row: usize,
}

impl Location {
    /// The run payload of this location: segment position in the high 32 bits, row + 1 in the
    /// low 32 (0 marks an empty slot).
    fn payload(self) -> Result<u64> {
        let segment = u32::try_from(self.segment).ok();
        let row = u32::try_from(self.row).ok().filter(|&r| r != u32::MAX);
        match (segment, row) {
            (Some(segment), Some(row)) => Ok(u64::from(segment) << 32 | u64::from(row + 1)),
            _ => Err(Error::unsupported(
                crate::error::BACKEND,
                format!(
                    "a key index run locates at most 2^32 segments of 2^32 - 1 rows; segment {} \
                     row {} is beyond",
                    self.segment, self.row
                ),
            )),
        }
    }

    /// The location of a run payload (never 0).
    pub fn of_payload(payload: u64) -> Location {
        let row = (payload & u64::from(u32::MAX)).saturating_sub(1);
        Location { segment: (payload >> 32) as usize, row: row as usize }
    }
}

/// The file of the run over segment positions `first..=through`.
pub(crate) fn run_path(dir: &Path, first: u64, through: u64) -> PathBuf {
    dir.join(INDEX_DIR).join(format!("run_{first:06}_{through:06}.bin"))
}

/// Runs larger than this are mapped with `MADV_RANDOM` by a reader ([`open_run`]'s `random`):
/// eight read-around windows of the scale suite's disk (`read_ahead_kb` 8192). A lookup in a
/// larger run touches one slot page; with the default advice its fault reads 8 MiB around it
/// (measured at 10 M keys, a 256 MiB run: 8,256 KiB read for the first cold get, ~1.2 MiB per
/// get over 300 of them). A smaller run is read whole by a few such faults and then stays
/// cached, which serves a small cache's random gets better than a page at a time (npy measured
/// the same, `stowage_npy`'s runs).
pub(crate) const RANDOM_ACCESS_MIN_BYTES: usize = 64 << 20;

/// Maps the run `entry` of the cache in `dir` and checks its header against the entry; with
/// `random` (a reader's random lookups) a run larger than [`RANDOM_ACCESS_MIN_BYTES`] is advised
/// `MADV_RANDOM` (a fault reads its own page), else it keeps the kernel's read-around (a writer's
/// merges and `validate` stream through runs).
///
/// Errors: [`Error::Io`] when the file cannot be opened or mapped; [`Error::Corrupted`] naming
/// it when its header is damaged or says something else than the record.
pub(crate) fn open_run(dir: &Path, entry: &RunEntry, random: bool) -> Result<KeyRun> {
    let path = run_path(dir, entry.first, entry.through);
    let map = map(&path)?;
    advise_run(&map, random);
    let run = KeyRun::from_bytes(&path, map)?;
    let header = run.header();
    let found = (header.first, header.through, header.keys, header.new_keys);
    let recorded = (entry.first, entry.through, entry.keys, entry.new_keys);
    if found != recorded || header.header_checksum != entry.header_xxh3 {
        return Err(Error::corrupted(
            &path,
            format!(
                "key index run over segments {} to {} with {} keys ({} new), header checksum \
                 {:016x}; the commit log records segments {} to {} with {} keys ({} new), \
                 {:016x}",
                found.0,
                found.1,
                found.2,
                found.3,
                header.header_checksum,
                recorded.0,
                recorded.1,
                recorded.2,
                recorded.3,
                entry.header_xxh3
            ),
        ));
    }
    Ok(run)
}

/// `MADV_RANDOM` on a run's map when `random` and it is larger than
/// [`RANDOM_ACCESS_MIN_BYTES`] ([`open_run`]); nothing otherwise. A hint: refused, the map keeps
/// its read-around and reads stay the same.
fn advise_run(map: &memmap2::Mmap, random: bool) {
    if random && map.len() > RANDOM_ACCESS_MIN_BYTES {
        #[cfg(unix)]
        let _ = map.advise(memmap2::Advice::Random);
    }
}

/// A read-only map of the run file at `path`.
fn map(path: &Path) -> Result<memmap2::Mmap> {
    let file = std::fs::File::open(path).at(path)?;
    // SAFETY: run files are written once, to a temporary name, and renamed into place; a later
    // run gets a new name, never rewrites one in place. Truncating one under a reader is outside
    // the cache contract (as for the segments).
    unsafe { memmap2::Mmap::map(&file) }.at(path)
}

/// Reads the key stored at a location: `Ok(None)` when no committed segment has that row (a
/// damaged slot's payload), an error when the segment does not read.
pub(crate) type KeyOf<'a> = &'a dyn Fn(Location) -> Result<Option<String>>;

/// Confirms run candidates through a [`KeyOf`], keeping its first error: a candidate whose key
/// cannot be read ends the probe, and the caller returns the error instead of an answer.
struct Confirmer<'a> {
    key_of: KeyOf<'a>,
    /// Keys already in memory by payload (the tail's, during a merge): never read again.
    known: HashMap<u64, &'a str>,
    failure: RefCell<Option<Error>>,
}

impl<'a> Confirmer<'a> {
    fn new(key_of: KeyOf<'a>) -> Confirmer<'a> {
        Confirmer { key_of, known: HashMap::new(), failure: RefCell::new(None) }
    }

    /// The key at run payload `payload`; `None` when there is none or it failed (kept).
    fn key_at(&self, payload: u64) -> Option<String> {
        if let Some(key) = self.known.get(&payload) {
            return Some((*key).to_owned());
        }
        match (self.key_of)(Location::of_payload(payload)) {
            Ok(key) => key,
            Err(e) => {
                self.failure.borrow_mut().get_or_insert(e);
                None
            }
        }
    }

    /// Whether the candidate at `payload` holds `key`; true on a failure, to end the probe.
    fn holds(&self, payload: u64, key: &str) -> bool {
        let held = self.key_at(payload);
        held.as_deref() == Some(key) || self.failure.borrow().is_some()
    }

    /// `answer`, unless a read failed on the way.
    fn finish<T>(self, answer: T) -> Result<T> {
        match self.failure.into_inner() {
            Some(e) => Err(e),
            None => Ok(answer),
        }
    }
}

/// The key index of one handle.
#[derive(Debug, Default)]
pub(crate) struct KeyIndex {
    /// The runs in use with their records, oldest first, covering positions `0..tail_first`.
    runs: Vec<(RunEntry, KeyRun)>,
    /// The latest location of every key of the tail's segments, and whether a run holds the key
    /// too (`None`: not looked up, for a tail counted by the log).
    tail: HashMap<String, (Location, Option<bool>)>,
    /// The first segment position no run covers.
    tail_first: usize,
    /// Segments in the tail.
    tail_segments: usize,
    /// Tail keys no run holds.
    tail_new: usize,
}

impl KeyIndex {
    /// An index of no segment.
    pub fn new() -> KeyIndex {
        KeyIndex::default()
    }

    /// The runs `entries` (the commit log's, oldest first) of the cache in `dir`, as far as each
    /// opens as recorded: a run that does not is not used, nor any newer one. The tail is empty;
    /// the caller adds the segments from [`KeyIndex::tail_first`] on.
    pub fn open(dir: &Path, entries: &[RunEntry], random: bool) -> KeyIndex {
        let runs: Vec<(RunEntry, KeyRun)> = entries
            .iter()
            .map_while(|entry| open_run(dir, entry, random).ok().map(|run| (*entry, run)))
            .collect();
        let tail_first = runs.last().map_or(0, |(entry, _)| entry.through as usize + 1);
        KeyIndex { runs, tail_first, ..KeyIndex::default() }
    }

    /// The first segment position whose keys the runs do not hold.
    pub fn tail_first(&self) -> usize {
        self.tail_first
    }

    /// The runs in use, oldest first.
    #[cfg(test)]
    fn runs(&self) -> impl Iterator<Item = &RunEntry> {
        self.runs.iter().map(|(entry, _)| entry)
    }

    /// Adds the keys (by row) of segment `number`, the next after every one the index holds.
    /// `key_of` reads the key at a location (to confirm a run's candidate).
    ///
    /// Errors: `key_of`'s, for a segment that does not read while confirming (the keys added so
    /// far stay).
    pub fn add_segment(
        &mut self,
        number: usize,
        keys: impl IntoIterator<Item = String>,
        key_of: KeyOf<'_>,
    ) -> Result<()> {
        let keys: Vec<String> = keys.into_iter().collect();
        let hashes: Vec<u64> = keys.iter().map(|key| key_hash(key.as_bytes())).collect();
        for (row, key) in keys.into_iter().enumerate() {
            // The slots of a few keys ahead are fetched meanwhile: each is a cache miss in a
            // large run, and the lookups do not depend on each other.
            if let Some(&ahead) = hashes.get(row + PREFETCH_AHEAD) {
                self.runs.iter().for_each(|(_, run)| run.prefetch(ahead));
            }
            let location = Location { segment: number, row };
            let held = match self.tail.get(&key) {
                Some(&(_, held)) => held,
                None => {
                    let held = self.find_in_runs(&key, key_of)?.is_some();
                    self.tail_new += usize::from(!held);
                    Some(held)
                }
            };
            self.tail.insert(key, (location, held));
        }
        self.tail_segments += 1;
        Ok(())
    }

    /// The tail's keys that no run holds, when the cache's log counts `keys` distinct keys after
    /// the tail's last segment; `None` when the count is below what the runs alone hold (a
    /// damaged record: the caller counts instead, with [`KeyIndex::add_segment`]).
    pub fn tail_new_of(&self, keys: u64) -> Option<usize> {
        let in_runs: u64 = self.runs.iter().map(|(entry, _)| entry.new_keys).sum();
        usize::try_from(keys.checked_sub(in_runs)?).ok()
    }

    /// Adds the keys (by row) of the tail's segments from `first` on, of which `tail_new` no
    /// run holds ([`KeyIndex::tail_new_of`]): no key is looked up in the runs to count it (each
    /// lookup in a large run touches a page of it).
    pub fn add_counted_tail(&mut self, first: usize, segments: Vec<Vec<String>>, tail_new: usize) {
        for (offset, segment_keys) in segments.into_iter().enumerate() {
            for (row, key) in segment_keys.into_iter().enumerate() {
                self.tail.insert(key, (Location { segment: first + offset, row }, None));
            }
            self.tail_segments += 1;
        }
        self.tail_new = tail_new;
    }

    /// The location of `key`'s latest sample, if any.
    ///
    /// Errors: `key_of`'s, for a segment that does not read while confirming a candidate.
    pub fn find(&self, key: &str, key_of: KeyOf<'_>) -> Result<Option<Location>> {
        self.find_confirmed(key, |location| Ok(key_of(location)?.as_deref() == Some(key)))
    }

    fn find_in_runs(&self, key: &str, key_of: KeyOf<'_>) -> Result<Option<Location>> {
        self.find_in_runs_confirmed(key, |location| Ok(key_of(location)?.as_deref() == Some(key)))
    }

    /// As [`KeyIndex::find`], each run candidate confirmed by `confirm` (which may read the
    /// candidate's row instead of its key: `get` confirms by the row's checksum, which covers
    /// the key). A tail key needs no confirmation. `confirm`'s first error ends the lookup.
    pub fn find_confirmed(
        &self,
        key: &str,
        confirm: impl FnMut(Location) -> Result<bool>,
    ) -> Result<Option<Location>> {
        match self.tail.get(key) {
            Some((location, _)) => Ok(Some(*location)),
            None => self.find_in_runs_confirmed(key, confirm),
        }
    }

    /// Calls `each` with every location a lookup of `key` could confirm (its tail location, or
    /// every run candidate, unconfirmed): the segments a batch will read, to open them first.
    pub fn candidates(&self, key: &str, mut each: impl FnMut(Location)) {
        if let Some((location, _)) = self.tail.get(key) {
            return each(*location);
        }
        let hash = key_hash(key.as_bytes());
        for (_, run) in self.runs.iter().rev() {
            run.find(hash, |payload| {
                each(Location::of_payload(payload));
                false
            });
        }
    }

    /// Adds to `plan` the run slots lookups of `keys` read first (each key's home slot in every
    /// run; tail keys read none): a batch advises them together before its lookups.
    pub fn plan_slots<'a>(&'a self, keys: &[&str], plan: &mut PagePlan<'a>) {
        for key in keys.iter().filter(|key| !self.tail.contains_key(**key)) {
            let hash = key_hash(key.as_bytes());
            for (_, run) in &self.runs {
                let (bytes, slot) = run.home_slot(hash);
                // In the run: the run computed it.
                let _ = plan.add(bytes, slot);
            }
        }
    }

    fn find_in_runs_confirmed(
        &self,
        key: &str,
        mut confirm: impl FnMut(Location) -> Result<bool>,
    ) -> Result<Option<Location>> {
        let hash = key_hash(key.as_bytes());
        // Runs cover disjoint, increasing ranges: the newest holding the key has its latest row.
        for (_, run) in self.runs.iter().rev() {
            if let Some(payload) =
                run.try_find(hash, |payload| confirm(Location::of_payload(payload)))?
            {
                return Ok(Some(Location::of_payload(payload)));
            }
        }
        Ok(None)
    }

    /// Distinct keys.
    pub fn len(&self) -> usize {
        let in_runs: u64 = self.runs.iter().map(|(entry, _)| entry.new_keys).sum();
        in_runs as usize + self.tail_new
    }

    /// Whether the writer should turn the tail into a run now: the tail reached a bound, or
    /// (`finalizing`) anything is left that one run does not cover.
    pub fn wants_merge(&self, finalizing: bool) -> bool {
        match finalizing {
            true => self.tail_segments > 0 || self.runs.len() > 1,
            false => {
                self.tail_segments >= MERGE_AFTER_SEGMENTS || self.tail.len() >= MERGE_AFTER_KEYS
            }
        }
    }

    /// Turns the tail (and, `all`, every run; else the newest runs [`plan_merge`] picks) into one
    /// run over segment positions up to `through` (the last committed), stamped with `stamp` (the
    /// last segment's checksum); writes it to `dir` (durably) and returns its record. The index
    /// is unchanged until [`KeyIndex::install`].
    ///
    /// Errors: `Unsupported` beyond 2^32 segments or rows; `Corrupted` naming an input run that
    /// does not verify; `Io`.
    pub fn write_merge(
        &self,
        dir: &Path,
        all: bool,
        through: usize,
        stamp: u64,
        key_of: KeyOf<'_>,
    ) -> Result<RunEntry> {
        let run_keys: Vec<u64> = self.runs.iter().map(|(entry, _)| entry.keys).collect();
        let taken = match all {
            true => self.runs.len(),
            false => plan_merge(&run_keys, self.tail.len() as u64),
        };
        let (older, inputs) = self.runs.split_at(self.runs.len() - taken);
        let inputs: Vec<&KeyRun> = inputs.iter().map(|(_, run)| run).collect();
        let first = older.last().map_or(0, |(entry, _)| entry.through + 1);
        let mut fresh = Vec::with_capacity(self.tail.len());
        let mut confirmer = Confirmer::new(key_of);
        let mut held_by_runs = HashMap::new();
        for (key, (location, held)) in &self.tail {
            let payload = location.payload()?;
            fresh.push((key_hash(key.as_bytes()), payload));
            // The tail's keys are at hand: a merge reads a segment only to confirm a run's
            // candidate whose hash matches (a written segment is never opened to index it).
            confirmer.known.insert(payload, key);
            if let Some(held) = held {
                held_by_runs.insert(payload, *held);
            }
        }
        let confirmer = confirmer;
        let same_key = |a, b| confirmer.key_at(a).is_some_and(|key| confirmer.holds(b, &key));
        // Asked only of a fresh key no input run holds: then "an older run holds it" is "a run
        // holds it", which adding the key already looked up.
        let in_older = |hash, payload| {
            if let Some(&held) = held_by_runs.get(&payload) {
                return held;
            }
            let Some(key) = confirmer.key_at(payload) else { return false };
            older.iter().any(|(_, run)| run.find(hash, |p| confirmer.holds(p, &key)).is_some())
        };
        let spec = RunSpec { first, through: through as u64, stamp };
        // Its name durable: a run record never outlives the directory of its run in a power cut.
        create_dir_within_durably(dir, &dir.join(INDEX_DIR))?;
        let path = run_path(dir, spec.first, spec.through);
        // Streamed front to back (a buffer's worth of heap, whatever the run's size).
        let written = write_run_file(&path, &inputs, &fresh, spec, same_key, in_older, None);
        // A segment that did not read may have misled the merge: its run is not kept (no record
        // vouches for it yet).
        if let Err(e) = confirmer.finish(()) {
            let _ = std::fs::remove_file(&path);
            return Err(e);
        }
        let header = written?;
        Ok(RunEntry {
            first: header.first,
            through: header.through,
            keys: header.keys,
            new_keys: header.new_keys,
            header_xxh3: header.header_checksum,
        })
    }

    /// Takes the run `entry` (written by [`KeyIndex::write_merge`], its record now durable in the
    /// log): it replaces the runs inside its range and the tail. Then deletes the replaced runs'
    /// files (a reader that mapped one keeps its map).
    ///
    /// Errors: as [`open_run`]; the index is then unchanged.
    pub fn install(&mut self, dir: &Path, entry: RunEntry) -> Result<()> {
        let run = open_run(dir, &entry, false)?;
        let replaced: Vec<RunEntry> = self
            .runs
            .iter()
            .map(|(e, _)| *e)
            .filter(|e| e.first >= entry.first && e.through <= entry.through)
            .collect();
        self.runs.retain(|(e, _)| e.first < entry.first || e.through > entry.through);
        self.runs.push((entry, run));
        self.tail_first = entry.through as usize + 1;
        self.tail.clear();
        self.tail_segments = 0;
        self.tail_new = 0;
        for old in
            replaced.iter().filter(|old| (old.first, old.through) != (entry.first, entry.through))
        {
            // Derived data this writer made; a failure leaves a file no record names.
            let _ = std::fs::remove_file(run_path(dir, old.first, old.through));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payloads_round_trip_and_refuse_what_does_not_fit() {
        for (segment, row) in [(0, 0), (7, 3), (u32::MAX as usize, u32::MAX as usize - 1)] {
            let location = Location { segment, row };
            let payload = location.payload().unwrap();
            assert_ne!(payload, 0);
            assert_eq!(Location::of_payload(payload), location);
        }
        assert!(Location { segment: 0, row: u32::MAX as usize }.payload().is_err());
        assert!(Location { segment: 1 << 32, row: 0 }.payload().is_err());
    }

    /// Keys of segments held in memory: segment `s` row `r` is `segments[s][r]`.
    fn key_of(segments: &[Vec<String>]) -> impl Fn(Location) -> Result<Option<String>> + '_ {
        |l| Ok(segments.get(l.segment).and_then(|keys| keys.get(l.row)).cloned())
    }

    #[test]
    fn merges_keep_the_latest_row_and_count_distinct_keys() {
        let dir = tempfile::tempdir().unwrap();
        // 3 segments: keys k0..k99, k100..k199, then k0..k49 again.
        let segments: Vec<Vec<String>> = vec![
            (0..100).map(|i| format!("k{i}")).collect(),
            (100..200).map(|i| format!("k{i}")).collect(),
            (0..50).map(|i| format!("k{i}")).collect(),
        ];
        let key_of = key_of(&segments);
        let mut index = KeyIndex::new();
        index.add_segment(0, segments[0].clone(), &key_of).unwrap();
        index.add_segment(1, segments[1].clone(), &key_of).unwrap();
        let first = index.write_merge(dir.path(), false, 1, 11, &key_of).unwrap();
        index.install(dir.path(), first).unwrap();
        assert_eq!((index.tail_first(), index.len()), (2, 200));
        index.add_segment(2, segments[2].clone(), &key_of).unwrap();
        assert_eq!(index.len(), 200, "overwrites add no key");
        assert_eq!(index.find("k7", &key_of).unwrap(), Some(Location { segment: 2, row: 7 }));
        let all = index.write_merge(dir.path(), true, 2, 22, &key_of).unwrap();
        assert_eq!((all.first, all.through, all.keys, all.new_keys), (0, 2, 200, 200));
        index.install(dir.path(), all).unwrap();
        assert!(!run_path(dir.path(), 0, 1).exists(), "the replaced run is deleted");
        // Reopened from the records: the same answers without the tail.
        let reopened = KeyIndex::open(dir.path(), &[all], true);
        assert_eq!((reopened.tail_first(), reopened.len()), (3, 200));
        let find = |key: &str| reopened.find(key, &key_of).unwrap();
        assert_eq!(find("k7"), Some(Location { segment: 2, row: 7 }));
        assert_eq!(find("k70"), Some(Location { segment: 0, row: 70 }));
        assert_eq!(find("k150"), Some(Location { segment: 1, row: 50 }));
        assert_eq!(find("k999"), None);
        // A run whose candidate does not confirm (the segment says another key) finds nothing.
        assert_eq!(reopened.find("k7", &|_| Ok(Some("other".into()))).unwrap(), None);
        // A segment that does not read is the lookup's error, not a missing key.
        let unreadable = |_| Err(Error::corrupted("segment_000000.h5", "damaged"));
        assert!(matches!(reopened.find("k7", &unreadable), Err(Error::Corrupted { .. })));
    }

    #[test]
    fn a_merge_reads_segments_only_to_confirm_a_matching_run_slot() {
        let dir = tempfile::tempdir().unwrap();
        let segments: Vec<Vec<String>> =
            (0..4).map(|s| (0..50).map(|i| format!("s{s}-{i}")).collect()).collect();
        let reads = std::cell::Cell::new(0usize);
        let counted = |l: Location| {
            reads.set(reads.get() + 1);
            Ok(segments.get(l.segment).and_then(|keys| keys.get(l.row)).cloned())
        };
        let mut index = KeyIndex::new();
        for (s, keys) in segments.iter().enumerate().take(3) {
            index.add_segment(s, keys.clone(), &counted).unwrap();
            let entry = index.write_merge(dir.path(), false, s, 0, &counted).unwrap();
            index.install(dir.path(), entry).unwrap();
        }
        // Distinct keys: no slot's hash matches another's, so no key is read back (the tail's
        // keys are at hand; before, every fresh key was read from its segment).
        assert_eq!(reads.get(), 0);
        // An overwrite: the matching slot of the older run is confirmed by one read.
        index.add_segment(3, vec!["s0-7".to_owned()], &counted).unwrap();
        let before = reads.get();
        let all = index.write_merge(dir.path(), true, 3, 0, &counted).unwrap();
        assert!(reads.get() - before >= 1);
        assert_eq!((all.keys, all.new_keys), (150, 150));
    }

    #[test]
    fn a_run_that_does_not_open_as_recorded_is_not_used_nor_any_newer() {
        let dir = tempfile::tempdir().unwrap();
        let segments: Vec<Vec<String>> =
            (0..3).map(|s| (0..10).map(|i| format!("s{s}-{i}")).collect()).collect();
        let key_of = key_of(&segments);
        let mut index = KeyIndex::new();
        let mut entries = Vec::new();
        for (s, keys) in segments.iter().enumerate() {
            index.add_segment(s, keys.clone(), &key_of).unwrap();
            let entry = index.write_merge(dir.path(), false, s, 0, &key_of).unwrap();
            index.install(dir.path(), entry).unwrap();
            entries = index.runs().copied().collect();
        }
        // plan_merge folded the first two segments' runs, not the third (smaller than 20 keys).
        let ranges: Vec<(u64, u64)> = entries.iter().map(|e| (e.first, e.through)).collect();
        assert_eq!(ranges, [(0, 1), (2, 2)]);
        assert_eq!(KeyIndex::open(dir.path(), &entries, true).tail_first(), 3);
        let tampered = |at: usize| {
            let mut tampered = entries.clone();
            tampered[at].header_xxh3 ^= 1;
            KeyIndex::open(dir.path(), &tampered, true).tail_first()
        };
        assert_eq!(tampered(1), 2, "the newest run alone is dropped");
        assert_eq!(tampered(0), 0, "the oldest is dropped with every newer one");
        std::fs::remove_file(run_path(dir.path(), entries[0].first, entries[0].through)).unwrap();
        assert_eq!(KeyIndex::open(dir.path(), &entries, true).tail_first(), 0);
    }

    /// A reader's large run reads a page per lookup; a small one, and any run a writer maps,
    /// keep the read-around.
    #[cfg(target_os = "linux")]
    #[test]
    fn only_a_readers_large_runs_are_advised_random() {
        use stowage_test_support::process::advised_random;
        let dir = tempfile::tempdir().unwrap();
        let map_of = |name: &str, len: usize| {
            let path = dir.path().join(name);
            std::fs::File::create(&path).unwrap().set_len(len as u64).unwrap();
            map(&path).unwrap()
        };
        let large = map_of("large", RANDOM_ACCESS_MIN_BYTES + 4096);
        let small = map_of("small", RANDOM_ACCESS_MIN_BYTES);
        let written = map_of("written", RANDOM_ACCESS_MIN_BYTES + 4096);
        advise_run(&large, true);
        advise_run(&small, true);
        advise_run(&written, false);
        assert!(advised_random(large.as_ptr() as usize));
        assert!(!advised_random(small.as_ptr() as usize), "read whole by its read-around");
        assert!(!advised_random(written.as_ptr() as usize), "a writer's merges stream through");
    }
}
