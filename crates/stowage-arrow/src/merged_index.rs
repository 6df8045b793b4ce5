//! Merged key index runs: `stowage_index_<first>_<through>.bin`, the winning (segment, row) of
//! every key of segments `first..=through`, as one memory-mapped hash table.
//!
//! Per-segment sidecars ([`crate::key_sidecar`]) make a flush cost only its own rows, but a
//! lookup through them probes every segment. A run answers for a whole range of segments with
//! one probe. Runs are built off the write path and kept the way a log-structured merge tree
//! keeps its runs: every `merge_after` segments the writer turns the newest segments into a run,
//! folding in the newest runs that are not larger than what it has gathered so far
//! ([`plan_merge`]). Run sizes then shrink geometrically from the oldest to the newest, so a
//! cache of `n` keys has about `log2(n / keys per merge)` runs and each key is copied that many
//! times over its life: background merging costs O(log n) per key, not a rewrite of the whole
//! index every few flushes. Finalize (and compaction) merges everything into one run, so a
//! finished cache answers every lookup with one probe.
//!
//! torchcachex never sees these files; they can always be rebuilt from the segments, a damaged
//! one is ignored by readers (the segments are the truth) and reported by `validate`.
//!
//! ```text
//! header (crate::framed): magic "STWIDX02" | keys | capacity (a power of two) | first | through
//!                         | new keys (keys no older run holds)
//! slots (capacity x 16 bytes): key hash u64 | segment id u32 | row + 1 u32 (0: empty)
//! ```
//!
//! As with the sidecars, a slot holds a hash: every candidate is confirmed against the segment's
//! `key` column, so a damaged or colliding slot can hide a key but never return another key's
//! row.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use stowage_core::Result;
use stowage_core::cold_reads::PagePlan;
use stowage_core::file_safety::atomic_write;
use xxhash_rust::xxh3::xxh3_64_with_seed;

use crate::commit_log::RunEntry;
use crate::error::ArrowCacheError;
use crate::framed::{self, Framed, HEADER};
use crate::layout::Layout;
use crate::open_segments::{OpenSegments, Opened, default_max_open_segments};
use crate::segment::Segment;

const MAGIC: &[u8; 8] = b"STWIDX02";
const SLOT: usize = 16;
const SEED: u64 = 0x5354_5749_4458_3031;

/// The keys of a cache's segments, each segment opened only when needed: a merge reads the keys
/// of the segments it adds, and one key of an older segment only when two slots' hashes match.
/// At most the default of [`crate::ArrowOptions::max_open_segments`] stay open at once.
#[derive(Debug)]
pub struct SegmentKeys {
    listed: Vec<(u64, PathBuf)>,
    opened: OpenSegments<Segment>,
}

impl SegmentKeys {
    /// Over `listed`: (segment id, path), ascending ids.
    pub fn new(listed: Vec<(u64, PathBuf)>) -> SegmentKeys {
        let opened = OpenSegments::new(listed.len(), default_max_open_segments());
        SegmentKeys { listed, opened }
    }

    /// Over the segments `ids` of `layout` (ascending).
    pub fn of_ids(layout: &Layout, ids: &[u64]) -> SegmentKeys {
        SegmentKeys::new(ids.iter().map(|&id| (id, layout.segment(id))).collect())
    }

    /// Segment `id`, open (its keys are read with [`Segment::keys`]).
    ///
    /// Errors: the segment is not listed or cannot be read.
    pub fn segment(&self, id: u64) -> Result<Opened<'_, Segment>> {
        let position = self
            .listed
            .binary_search_by_key(&id, |(i, _)| *i)
            .map_err(|_| ArrowCacheError::SegmentNotCommitted { id })?;
        self.opened.get_or_open(position, || Segment::open(id, &self.listed[position].1))
    }

    /// Whether row `row` of segment `id` holds `key`; false when it cannot be read.
    pub fn key_is(&self, id: u64, row: usize, key: &str) -> bool {
        self.segment(id).is_ok_and(|segment| segment.key(row) == Some(key))
    }

    /// Whether rows `a` and `b`, each (segment id, row), hold the same key; false when either
    /// cannot be read.
    fn same_key(&self, a: (u64, usize), b: (u64, usize)) -> bool {
        let Ok(first) = self.segment(a.0) else { return false };
        first.key(a.1).is_some_and(|key| self.key_is(b.0, b.1, key))
    }
}

/// Builds the run over the segments from the first of `inputs` (or of `fresh`) through the last
/// of `fresh` (or of `inputs`): every slot of `inputs` (runs over consecutive segment ranges,
/// oldest first) plus every key of the `fresh` segments (ascending ids, after the inputs), a
/// later row of a key winning. `older` are the runs before it, consulted only to count the keys
/// the new run holds that no older run does. Writes it atomically to its
/// [`Layout::index_run`] path and returns its entry.
///
/// Costs one pass over the inputs' slots plus the fresh segments' keys: the segments the inputs
/// cover are never re-read (one key of one is read when two slots' hashes match, to tell an
/// overwrite from a collision).
///
/// Errors: [`Error::Unsupported`](stowage_core::Error::Unsupported) when a segment id or row does not fit 32 bits;
/// [`Error::Backend`](stowage_core::Error::Backend) when there is nothing to merge; [`Error::Corrupted`](stowage_core::Error::Corrupted) naming a segment that
/// cannot be read; [`Error::Io`](stowage_core::Error::Io).
pub fn merge_run(
    layout: &Layout,
    segments: &SegmentKeys,
    inputs: &[MergedIndex],
    fresh: &[u64],
    older: &[MergedIndex],
) -> Result<RunEntry> {
    let first = inputs.first().map(MergedIndex::first).or(fresh.first().copied());
    let through = fresh.last().copied().or(inputs.last().map(MergedIndex::through));
    let (Some(first), Some(through)) = (first, through) else {
        return Err(ArrowCacheError::EmptyMerge.into());
    };
    // The fresh segments stay open while their keys are gathered (a merge takes at most
    // `merge_after` of them, or a rebuild's few).
    let fresh_segments: Vec<(u64, Opened<'_, Segment>)> =
        fresh.iter().map(|&id| Ok((id, segments.segment(id)?))).collect::<Result<_>>()?;
    let mut fresh_keys = Vec::new();
    for (id, segment) in &fresh_segments {
        fresh_keys.push((*id, segment.keys()?));
    }
    let entries = fresh_keys
        .iter()
        .flat_map(|(id, keys)| keys.iter().enumerate().map(move |(row, key)| (*key, *id, row)));
    let same_key = |(s, r): (u32, u32), (t, q): (u32, u32)| {
        segments.same_key((u64::from(s), r as usize), (u64::from(t), q as usize))
    };
    let in_older = |key: &str| {
        older.iter().any(|run| run.find(key, |id, row| segments.key_is(id, row, key)).is_some())
    };
    if through > u64::from(u32::MAX) {
        let segments = Some(layout.segments_dir());
        return Err(ArrowCacheError::SegmentIdBeyond32Bits { id: through, segments }.into());
    }
    // One buffer, the header written over its first bytes: a run of 10 M keys is 256 MB of
    // heap while it is built (a shared writable map of the file would not be: the power-loss
    // model cannot follow writes through one, so runs are written with write(2)).
    let planned = plan_run(inputs, entries)?;
    let mut bytes = vec![0u8; planned.len()];
    let run = fill_run(&mut bytes, inputs, planned, first, through, same_key, in_older);
    atomic_write(layout.index_run(first, through), &bytes)?;
    Ok(run)
}

/// Rebuilds one run over every segment of `layout` up to `through` (listed from `segments/`),
/// from their keys alone, and writes it; returns its entry. For caches without a commit log
/// (tools, tests); a cache stowage writes merges through its writer.
///
/// Errors: as [`merge_run`].
#[cfg(any(test, feature = "fuzzing", feature = "test-support"))]
pub fn merge_segments(layout: &Layout, through: u64) -> Result<RunEntry> {
    let listed: Vec<(u64, PathBuf)> =
        layout.list_segments()?.into_iter().filter(|(id, _)| *id <= through).collect();
    let ids: Vec<u64> = listed.iter().map(|(id, _)| *id).collect();
    merge_run(layout, &SegmentKeys::new(listed), &[], &ids, &[])
}

/// Which of `runs` (oldest first) the next merge folds in with `fresh_rows` new rows: the newest
/// runs, as long as each is no larger than everything gathered so far (fresh rows and the runs
/// already taken), so that runs halve in size from the oldest to the newest. Returns how many of
/// the newest runs to take.
///
/// ```
/// use stowage_arrow::test_support::merged_index::plan_merge;
/// // 65,536 new rows: the equal-sized newest run is taken, then the one of 131,072 too;
/// // the oldest (1M keys) stays.
/// assert_eq!(plan_merge(&[1_000_000, 131_072, 65_536], 65_536), 2);
/// assert_eq!(plan_merge(&[1_000_000, 262_144], 65_536), 0);
/// ```
pub fn plan_merge(run_keys: &[u64], fresh_rows: u64) -> usize {
    let mut gathered = fresh_rows;
    let mut taken = 0;
    for &keys in run_keys.iter().rev() {
        if keys > gathered {
            break;
        }
        gathered += keys;
        taken += 1;
    }
    taken
}

/// The bytes of a run over segments `first..=through`: the slots of `inputs` (oldest first, a
/// later one's slot replacing an earlier one's for the same key) plus `entries` (key, segment
/// id, row, in segment and row order, a later entry of a key winning). `same_key(a, b)` tells
/// whether two slots (segment, row) whose hashes match hold the same key; `in_older(key)`
/// whether a run older than `first` holds `key`.
#[cfg(test)]
fn build_run<'a>(
    inputs: &[MergedIndex],
    entries: impl IntoIterator<Item = (&'a str, u64, usize)>,
    first: u64,
    through: u64,
    same_key: impl Fn((u32, u32), (u32, u32)) -> bool,
    in_older: impl Fn(&str) -> bool,
) -> Result<Vec<u8>> {
    let planned = plan_run(inputs, entries)?;
    let mut out = vec![0u8; planned.len()];
    fill_run(&mut out, inputs, planned, first, through, same_key, in_older);
    Ok(out)
}

/// What a run will hold before it is built: each fresh key's winning (segment, row), and the
/// table's capacity.
struct PlannedRun<'a> {
    // foldhash: a merge hashes every fresh key, and SipHash showed in its profile.
    winners: HashMap<&'a str, (u32, u32), foldhash::fast::RandomState>,
    capacity: usize,
}

impl PlannedRun<'_> {
    /// Bytes of the run file.
    fn len(&self) -> usize {
        HEADER + self.capacity * SLOT
    }
}

/// Plans a run of `inputs` plus `entries` (as [`merge_run`] takes them).
///
/// Errors: `Unsupported` when a segment id or row does not fit 32 bits.
fn plan_run<'a>(
    inputs: &[MergedIndex],
    entries: impl IntoIterator<Item = (&'a str, u64, usize)>,
) -> Result<PlannedRun<'a>> {
    let mut winners: HashMap<&str, (u32, u32), foldhash::fast::RandomState> = HashMap::default();
    for (key, segment, row) in entries {
        let segment = u32::try_from(segment)
            .map_err(|_| ArrowCacheError::SegmentIdBeyond32Bits { id: segment, segments: None })?;
        let row = u32::try_from(row)
            .ok()
            .filter(|&r| r != u32::MAX)
            .ok_or(ArrowCacheError::RowsBeyond32Bits { rows: row as u64 })?;
        winners.insert(key, (segment, row));
    }
    let input_keys: u64 = inputs.iter().map(|run| run.keys).sum();
    let capacity = ((input_keys as usize + winners.len()) * 8 / 7 + 1).next_power_of_two().max(16);
    Ok(PlannedRun { winners, capacity })
}

/// Builds the run `planned` into `out` (zeroed, [`PlannedRun::len`] bytes: the whole file) and
/// returns its entry. `same_key` and `in_older` as [`merge_run`] uses them.
fn fill_run(
    out: &mut [u8],
    inputs: &[MergedIndex],
    planned: PlannedRun<'_>,
    first: u64,
    through: u64,
    same_key: impl Fn((u32, u32), (u32, u32)) -> bool,
    in_older: impl Fn(&str) -> bool,
) -> RunEntry {
    let PlannedRun { winners, capacity } = planned;
    let mut table = Table { body: &mut out[HEADER..], mask: capacity - 1 };
    let mut keys = 0u64;
    let mut new_keys: u64 = inputs.iter().map(|run| run.new_keys).sum();
    for (position, run) in inputs.iter().enumerate() {
        for (hash, segment, row) in run.slots() {
            // The oldest input holds each key once: none of its slots can replace another.
            let i = match position {
                0 => table.probe(hash, |_| false),
                _ => table.probe(hash, |slot| same_key(slot, (segment, row))),
            };
            // Each input counted as new only the keys no run before it holds: the counts add.
            keys += u64::from(table.is_empty(i));
            table.set(i, hash, segment, row);
        }
    }
    for (key, (segment, row)) in &winners {
        let hash = xxh3_64_with_seed(key.as_bytes(), SEED);
        let i = table.probe(hash, |slot| same_key(slot, (*segment, *row)));
        if table.is_empty(i) {
            keys += 1;
            new_keys += u64::from(!in_older(key));
        }
        table.set(i, hash, *segment, *row);
    }
    framed::write_header(MAGIC, &[keys, capacity as u64, first, through, new_keys], out);
    RunEntry { keys, first, through, new_keys }
}

/// Slots being filled.
struct Table<'a> {
    body: &'a mut [u8],
    mask: usize,
}

impl Table<'_> {
    fn is_empty(&self, i: usize) -> bool {
        self.body[i * SLOT + 12..i * SLOT + 16] == [0; 4]
    }

    /// The slot for `hash`: the first empty one along its probe sequence, or an occupied one
    /// with the same hash that `is_it` accepts (given its segment and row).
    fn probe(&self, hash: u64, is_it: impl Fn((u32, u32)) -> bool) -> usize {
        let mut i = hash as usize & self.mask;
        while !self.is_empty(i) {
            let at = i * SLOT;
            let slot_hash = u64::from_le_bytes(self.body[at..at + 8].try_into().expect("8"));
            let segment = u32::from_le_bytes(self.body[at + 8..at + 12].try_into().expect("4"));
            let row = u32::from_le_bytes(self.body[at + 12..at + 16].try_into().expect("4")) - 1;
            if slot_hash == hash && is_it((segment, row)) {
                return i;
            }
            i = (i + 1) & self.mask;
        }
        i
    }

    fn set(&mut self, i: usize, hash: u64, segment: u32, row: u32) {
        let at = i * SLOT;
        self.body[at..at + 8].copy_from_slice(&hash.to_le_bytes());
        self.body[at + 8..at + 12].copy_from_slice(&segment.to_le_bytes());
        self.body[at + 12..at + 16].copy_from_slice(&(row + 1).to_le_bytes());
    }
}

/// An open run.
#[derive(Debug)]
pub struct MergedIndex {
    file: Framed,
    keys: u64,
    capacity: usize,
    first: u64,
    through: u64,
    new_keys: u64,
}

impl MergedIndex {
    /// Maps `path` and checks its header.
    ///
    /// Errors: [`Error::Corrupted`](stowage_core::Error::Corrupted) naming the file and what is wrong; [`Error::Io`](stowage_core::Error::Io) when it
    /// cannot be opened (`NotFound` included).
    pub fn open(path: &Path) -> Result<MergedIndex> {
        let file = Framed::open(path, MAGIC, "merged index")?;
        let (keys, capacity, first, through, new_keys) =
            (file.field(0), file.field(1), file.field(2), file.field(3), file.field(4));
        let fits =
            usize::try_from(capacity).ok().filter(|c| c.is_power_of_two() && keys <= *c as u64);
        let Some(capacity) = fits.filter(|c| c.checked_mul(SLOT) == Some(file.body().len())) else {
            return Err(file.corrupted(format!(
                "{} bytes for {keys} keys in {capacity} slots of {SLOT} bytes plus a {HEADER}-byte \
                 header",
                HEADER + file.body().len()
            )));
        };
        if first > through || new_keys > keys {
            return Err(file.corrupted(format!(
                "segments {first} to {through}, {new_keys} of its {keys} keys new"
            )));
        }
        Ok(MergedIndex { file, keys, capacity, first, through, new_keys })
    }

    /// Opens the run `entry` of `layout` and checks that its header says what the entry says.
    ///
    /// Errors: as [`MergedIndex::open`]; [`Error::Corrupted`](stowage_core::Error::Corrupted) when the header disagrees.
    pub fn open_entry(layout: &Layout, entry: &RunEntry) -> Result<MergedIndex> {
        let run = MergedIndex::open(&layout.index_run(entry.first, entry.through))?;
        if run.entry() != *entry {
            return Err(run
                .file
                .corrupted(format!("holds {:?}, the commit log records {entry:?}", run.entry())));
        }
        Ok(run)
    }

    /// What the run holds, as the commit log records it.
    pub fn entry(&self) -> RunEntry {
        RunEntry {
            first: self.first,
            through: self.through,
            keys: self.keys,
            new_keys: self.new_keys,
        }
    }

    /// Distinct keys in the segments it covers.
    pub fn keys(&self) -> u64 {
        self.keys
    }

    /// Its keys that no older run holds: the cache's distinct keys are the sum over its runs.
    pub fn new_keys(&self) -> u64 {
        self.new_keys
    }

    /// The lowest segment id it covers.
    pub fn first(&self) -> u64 {
        self.first
    }

    /// The highest segment id it covers.
    pub fn through(&self) -> u64 {
        self.through
    }

    /// The file.
    pub fn path(&self) -> &Path {
        self.file.path()
    }

    /// The (segment id, row) of `key`: each candidate whose slot hash matches is offered to
    /// `confirm` (the caller compares that segment's key of that row).
    pub fn find(&self, key: &str, confirm: impl Fn(u64, usize) -> bool) -> Option<(u64, usize)> {
        let hash = xxh3_64_with_seed(key.as_bytes(), SEED);
        let mask = self.capacity - 1;
        let mut i = hash as usize & mask;
        let body = self.file.body();
        for _ in 0..self.capacity {
            let at = i * SLOT;
            let slot_hash = u64::from_le_bytes(body[at..at + 8].try_into().expect("8 bytes"));
            let segment = u32::from_le_bytes(body[at + 8..at + 12].try_into().expect("4"));
            let row = u32::from_le_bytes(body[at + 12..at + 16].try_into().expect("4"));
            if row == 0 {
                return None;
            }
            let candidate = (u64::from(segment), row as usize - 1);
            let inside = (self.first..=self.through).contains(&candidate.0);
            if slot_hash == hash && inside && confirm(candidate.0, candidate.1) {
                return Some(candidate);
            }
            i = (i + 1) & mask;
        }
        None
    }

    /// Asks the CPU to load the slot a lookup of `key` reads first (a hint for batched lookups).
    pub fn prefetch(&self, key: &str) {
        let hash = xxh3_64_with_seed(key.as_bytes(), SEED);
        let at = (hash as usize & (self.capacity - 1)) * SLOT;
        if let Some(slot) = self.file.body().get(at..at + SLOT) {
            stowage_core::prefetch::prefetch(slot);
        }
    }

    /// Adds the slot a lookup of `key` reads first to `plan` (the pages a cold batch of lookups
    /// asks the kernel for before probing).
    pub fn plan_slot<'a>(&'a self, key: &str, plan: &mut PagePlan<'a>) {
        let hash = xxh3_64_with_seed(key.as_bytes(), SEED);
        let at = (hash as usize & (self.capacity - 1)) * SLOT;
        let _ = plan.add(self.file.body(), at..at + SLOT);
    }

    /// The first slot's (segment id, row) whose hash matches `key`'s, unconfirmed: what a
    /// batched lookup prefetches the confirming key of.
    pub fn first_candidate(&self, key: &str) -> Option<(u64, usize)> {
        self.find(key, |_, _| true)
    }

    /// Every occupied slot: (key hash, segment id, row).
    fn slots(&self) -> impl Iterator<Item = (u64, u32, u32)> + '_ {
        self.file.body().chunks_exact(SLOT).filter_map(|slot| {
            let row = u32::from_le_bytes(slot[12..16].try_into().expect("4"));
            let hash = u64::from_le_bytes(slot[..8].try_into().expect("8"));
            let segment = u32::from_le_bytes(slot[8..12].try_into().expect("4"));
            (row != 0).then(|| (hash, segment, row - 1))
        })
    }

    /// Checks the slots against their checksum (reads the whole table).
    ///
    /// Errors: [`Error::Corrupted`](stowage_core::Error::Corrupted) naming the file.
    pub fn verify(&self) -> Result<()> {
        self.file.verify()
    }
}

/// The runs a reader without a commit log can trust among the run files in `layout`: those that
/// open and verify, cover only segments in `listed` (ascending ids) and end at a listed one,
/// chosen newest first and never overlapping (so a merged run shadows the inputs a crash left
/// beside it). Returned oldest first.
pub fn discover_runs(layout: &Layout, listed: &[u64]) -> Vec<MergedIndex> {
    let mut found: Vec<MergedIndex> = layout
        .list_index_runs()
        .unwrap_or_default()
        .into_iter()
        .filter_map(|(_, _, path)| MergedIndex::open(&path).ok())
        .filter(|run| listed.binary_search(&run.through).is_ok() && run.verify().is_ok())
        .collect();
    // Newest end first; of two ending together, the wider.
    found.sort_by_key(|run| (std::cmp::Reverse(run.through), run.first));
    let mut chosen: Vec<MergedIndex> = Vec::new();
    for run in found {
        if chosen.iter().all(|c| run.through < c.first) {
            chosen.push(run);
        }
    }
    chosen.reverse();
    // Only a chain from the first segment, each run starting at the segment after the previous
    // one's last: a run's new-key count assumes older runs cover every segment before it.
    let mut next = listed.first().copied();
    let chain = chosen.iter().take_while(|run| {
        let starts_there = Some(run.first) == next;
        next = listed.iter().copied().find(|&id| id > run.through);
        starts_there
    });
    let keep = chain.count();
    chosen.truncate(keep);
    chosen
}

#[cfg(test)]
mod tests {
    use super::*;
    use stowage_core::Error;

    /// (key, segment, row) entries of `segments` (each a list of keys), in order.
    fn entries(segments: &[Vec<String>]) -> Vec<(&str, u64, usize)> {
        segments
            .iter()
            .enumerate()
            .flat_map(|(segment, keys)| {
                keys.iter().enumerate().map(move |(row, key)| (key.as_str(), segment as u64, row))
            })
            .collect()
    }

    /// Writes the run of `bytes` at `path` and opens it.
    fn open_run(path: &Path, bytes: Vec<u8>) -> MergedIndex {
        std::fs::write(path, bytes).unwrap();
        MergedIndex::open(path).unwrap()
    }

    #[test]
    fn later_entries_win_and_candidates_are_confirmed() {
        let dir = tempfile::tempdir().unwrap();
        // Three segments of 100 keys; segment 2 repeats keys 0..50 of segment 0.
        let keys: Vec<Vec<String>> = vec![
            (0..100).map(|i| format!("k{i}")).collect(),
            (100..200).map(|i| format!("k{i}")).collect(),
            (0..50).map(|i| format!("k{i}")).collect(),
        ];
        let bytes = build_run(&[], entries(&keys), 0, 2, |_, _| false, |_| false).unwrap();
        let index = open_run(&dir.path().join("run"), bytes);
        index.verify().unwrap();
        assert_eq!(index.entry(), RunEntry { first: 0, through: 2, keys: 200, new_keys: 200 });
        let find = |key: &str| {
            index
                .find(key, |segment, row| keys[segment as usize].get(row).is_some_and(|k| k == key))
        };
        assert_eq!(find("k7"), Some((2, 7)));
        assert_eq!(find("k70"), Some((0, 70)));
        assert_eq!(find("k150"), Some((1, 50)));
        assert_eq!(find("k999"), None);
        assert_eq!(index.find("k7", |_, _| false), None, "an unconfirmed candidate is not found");
    }

    /// Merging runs: a newer run's slot replaces an older run's for the same key, colliding
    /// hashes of different keys stay apart, and the new-key counts add up.
    #[test]
    fn merging_runs_keeps_the_newest_slot_and_counts_new_keys() {
        let dir = tempfile::tempdir().unwrap();
        // Segments 0 and 1 (run A), 2 (run B), 3 (fresh): k5 is in all of them, k1000 only in
        // segment 3, k2000 in segment 2 and in an older run (before segment 0).
        let keys: Vec<Vec<String>> = vec![
            (0..500).map(|i| format!("k{i}")).collect(),
            (500..1000).map(|i| format!("k{i}")).collect(),
            vec!["k5".into(), "k2000".into()],
            vec!["k5".into(), "k1000".into()],
        ];
        let key_of = |(s, r): (u32, u32)| keys.get(s as usize).and_then(|k| k.get(r as usize));
        let same = |a: (u32, u32), b: (u32, u32)| key_of(a).is_some_and(|k| key_of(b) == Some(k));
        let a = open_run(
            &dir.path().join("a"),
            build_run(&[], entries(&keys[..2]), 0, 1, |_, _| false, |_| false).unwrap(),
        );
        let b_entries = [("k5", 2, 0), ("k2000", 2, 1)];
        // Before segment 2: run A (k5) and a run before segment 0 (k2000).
        let before_b = |key: &str| key == "k2000" || key == "k5";
        let b = build_run(&[], b_entries, 2, 2, same, before_b).unwrap();
        let b = open_run(&dir.path().join("b"), b);
        assert_eq!((b.keys(), b.new_keys()), (2, 0), "both are in older runs");
        let before_a = |key: &str| key == "k2000";
        let merged = build_run(&[a, b], [("k5", 3, 0), ("k1000", 3, 1)], 0, 3, same, before_a);
        let merged = open_run(&dir.path().join("m"), merged.unwrap());
        // k0..k999, k1000 and k2000; new to the cache: the same minus k2000.
        assert_eq!(merged.entry(), RunEntry { first: 0, through: 3, keys: 1002, new_keys: 1001 });
        let find = |key: &str| {
            merged.find(key, |s, r| key_of((s as u32, r as u32)).is_some_and(|k| k == key))
        };
        assert_eq!(find("k5"), Some((3, 0)));
        assert_eq!(find("k2000"), Some((2, 1)));
        assert_eq!(find("k1000"), Some((3, 1)));
        assert_eq!(find("k777"), Some((1, 277)));
        // The same slots with `same` never true (every match a collision) keep both apart.
        let c = open_run(
            &dir.path().join("c"),
            build_run(&[], entries(&keys[..1]), 0, 0, |_, _| false, |_| false).unwrap(),
        );
        let apart = build_run(&[c], [("k5", 1, 0)], 0, 1, |_, _| false, |_| false).unwrap();
        assert_eq!(open_run(&dir.path().join("d"), apart).keys(), 501);
    }

    /// Without a commit log, the runs used are the verified ones that chain from the first
    /// segment: a wider run shadows the inputs a crash left beside it, a gap ends the chain,
    /// and a damaged run is skipped.
    #[test]
    fn discovered_runs_chain_from_the_first_segment() {
        let dir = tempfile::tempdir().unwrap();
        let layout = Layout::new(dir.path());
        let write = |first: u64, through: u64| {
            let key = format!("k{first}-{through}");
            let bytes = build_run(
                &[],
                [(key.as_str(), through, 0)],
                first,
                through,
                |_, _| false,
                |_| false,
            )
            .unwrap();
            std::fs::write(layout.index_run(first, through), bytes).unwrap();
        };
        let ranges = |runs: Vec<MergedIndex>| -> Vec<(u64, u64)> {
            runs.iter().map(|r| (r.first(), r.through())).collect()
        };
        for (first, through) in [(0, 1), (0, 2), (3, 4), (5, 5)] {
            write(first, through);
        }
        let listed = [0, 1, 2, 3, 4, 5];
        assert_eq!(ranges(discover_runs(&layout, &listed)), [(0, 2), (3, 4), (5, 5)]);
        // Segment 4 gone (listed without it): the run ending there is not trusted, and the
        // chain stops before the gap.
        assert_eq!(ranges(discover_runs(&layout, &[0, 1, 2, 3, 5])), [(0, 2)]);
        let mut bytes = std::fs::read(layout.index_run(3, 4)).unwrap();
        *bytes.last_mut().unwrap() ^= 1;
        std::fs::write(layout.index_run(3, 4), bytes).unwrap();
        assert_eq!(ranges(discover_runs(&layout, &listed)), [(0, 2)], "damaged: skipped");
    }

    #[test]
    fn merges_take_the_newest_runs_no_larger_than_what_they_gathered() {
        assert_eq!(plan_merge(&[], 10), 0);
        assert_eq!(plan_merge(&[10], 10), 1);
        assert_eq!(plan_merge(&[11], 10), 0);
        assert_eq!(plan_merge(&[40, 20, 10], 10), 3);
        assert_eq!(plan_merge(&[100, 20, 10], 10), 2);
        // Merging 64 batches of 10 one after another leaves runs whose sizes are the binary
        // digits of 640: at most log2(64) + 1 runs, each key copied at most 7 times.
        let mut runs: Vec<u64> = Vec::new();
        for _ in 0..64 {
            let taken = plan_merge(&runs, 10);
            let merged = 10 + runs.drain(runs.len() - taken..).sum::<u64>();
            runs.push(merged);
            assert!(runs.windows(2).all(|w| w[0] > w[1]), "{runs:?}");
            assert!(runs.len() <= 7, "{runs:?}");
        }
        assert_eq!(runs, [640]);
    }

    #[test]
    fn damaged_tables_are_refused_or_never_misdirect() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("run");
        let keys: Vec<String> = (0..300).map(|i| format!("k{i}")).collect();
        let entries = keys.iter().enumerate().map(|(row, k)| (k.as_str(), 0, row));
        let good = build_run(&[], entries, 0, 0, |_, _| false, |_| false).unwrap();
        for len in [0, 8, HEADER, good.len() - 1] {
            std::fs::write(&path, &good[..len]).unwrap();
            assert!(matches!(MergedIndex::open(&path).unwrap_err(), Error::Corrupted { .. }));
        }
        for at in (0..56).chain((HEADER..good.len()).step_by(3)) {
            let mut bad = good.clone();
            bad[at] ^= 0x20;
            std::fs::write(&path, &bad).unwrap();
            let Ok(index) = MergedIndex::open(&path) else { continue };
            assert!(index.verify().is_err(), "byte {at}");
            for (row, key) in keys.iter().enumerate() {
                if let Some(found) = index.find(key, |s, r| s == 0 && keys.get(r) == Some(key)) {
                    assert_eq!(found, (0, row), "{key}");
                }
            }
        }
    }
}
