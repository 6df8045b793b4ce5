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
//! A run is a [`stowage_core::key_runs`] run (version 2: slots in hash order, so a merge streams
//! its inputs and writes the new run front to back through a small buffer, whatever its size):
//!
//! ```text
//! header (80 bytes): magic "STWKRUN1" | version | keys | capacity | first | through | new keys
//!                    (keys no older run holds) | stamp (0) | body xxh3 | header xxh3
//! slots (capacity x 16 bytes): key hash u64 | segment id << 32 | row + 1 (0: empty)
//! ```
//!
//! Runs an earlier stowage wrote in its own format (`STWIDX02`) are not read: lookups go
//! through the sidecars of the segments they covered until the writer's next merge rebuilds
//! the index from the segments' keys, and `validate` leaves them out (readers do not use them).
//!
//! As with the sidecars, a slot holds a hash: every candidate is confirmed against the segment's
//! `key` column, so a damaged or colliding slot can hide a key but never return another key's
//! row.

use std::collections::HashMap;
use std::convert::Infallible;
use std::path::{Path, PathBuf};

use stowage_core::cold_reads::PagePlan;
use stowage_core::key_runs::{KeyRun, RunSpec, key_hash, write_run_file};
use stowage_core::{Error, IoResultExt, Result};

pub use stowage_core::key_runs::plan_merge;

use crate::commit_log::RunEntry;
use crate::error::ArrowCacheError;
use crate::layout::Layout;
use crate::open_segments::{OpenSegments, Opened, default_max_open_segments};
use crate::segment::Segment;

/// The magic of the runs an earlier stowage wrote (not read any more).
const LEGACY_MAGIC: &[u8; 8] = b"STWIDX02";

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
    if through > u64::from(u32::MAX) {
        let segments = Some(layout.segments_dir());
        return Err(ArrowCacheError::SegmentIdBeyond32Bits { id: through, segments }.into());
    }
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
    let same_key = |a: (u64, usize), b: (u64, usize)| segments.same_key(a, b);
    let in_older = |key: &str| {
        older.iter().any(|run| run.find(key, |id, row| segments.key_is(id, row, key)).is_some())
    };
    let planned = plan_run(entries)?;
    let inputs: Vec<&KeyRun> = inputs.iter().map(|run| &run.run).collect();
    let spec = RunSpec { first, through, stamp: 0 };
    let header = write_run_file(
        &layout.index_run(first, through),
        &inputs,
        &planned.fresh,
        spec,
        |a, b| same_key(unpack(a), unpack(b)),
        |_, payload| planned.keys.get(&payload).is_some_and(|key| in_older(key)),
        None,
    )?;
    Ok(RunEntry {
        first: header.first,
        through: header.through,
        keys: header.keys,
        new_keys: header.new_keys,
    })
}

/// A run's fresh entries, (key hash, payload) in write order, and each payload's key.
struct PlannedRun<'a> {
    fresh: Vec<(u64, u64)>,
    keys: HashMap<u64, &'a str, foldhash::fast::RandomState>,
}

/// The fresh entries of (key, segment id, row) `entries`: each key's last, so that a key the
/// fresh segments repeat costs no segment read to tell an overwrite from a collision.
///
/// Errors: `Unsupported` when a segment id or row does not fit 32 bits.
fn plan_run<'a>(
    entries: impl IntoIterator<Item = (&'a str, u64, usize)>,
) -> Result<PlannedRun<'a>> {
    // foldhash: a merge hashes every fresh key, and SipHash showed in its profile.
    let mut winners: HashMap<&str, u64, foldhash::fast::RandomState> = HashMap::default();
    for (key, segment, row) in entries {
        winners.insert(key, pack(segment, row)?);
    }
    let mut planned =
        PlannedRun { fresh: Vec::with_capacity(winners.len()), keys: HashMap::default() };
    for (key, payload) in winners {
        planned.fresh.push((key_hash(key.as_bytes()), payload));
        planned.keys.insert(payload, key);
    }
    Ok(planned)
}

/// The slot payload of row `row` of segment `segment`: the id in the high 32 bits, row + 1 in
/// the low 32 (0 marks an empty slot).
fn pack(segment: u64, row: usize) -> Result<u64> {
    let id = u32::try_from(segment)
        .map_err(|_| ArrowCacheError::SegmentIdBeyond32Bits { id: segment, segments: None })?;
    let row = u32::try_from(row)
        .ok()
        .filter(|&r| r != u32::MAX)
        .ok_or(ArrowCacheError::RowsBeyond32Bits { rows: row as u64 })?;
    Ok(u64::from(id) << 32 | u64::from(row + 1))
}

/// The (segment id, row) of a slot payload (never 0).
fn unpack(payload: u64) -> (u64, usize) {
    (payload >> 32, ((payload & u64::from(u32::MAX)).saturating_sub(1)) as usize)
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

/// The bytes of a run over segments `first..=through` (as [`merge_run`] writes them, for tests):
/// the slots of `inputs` (oldest first) plus `entries` (key, segment id, row, in order, a later
/// entry of a key winning). `same_key(a, b)` tells whether two slots (segment, row) whose
/// hashes match hold the same key; `in_older(key)` whether a run older than `first` holds `key`.
#[cfg(test)]
fn build_run<'a>(
    inputs: &[MergedIndex],
    entries: impl IntoIterator<Item = (&'a str, u64, usize)>,
    first: u64,
    through: u64,
    same_key: impl Fn((u32, u32), (u32, u32)) -> bool,
    in_older: impl Fn(&str) -> bool,
) -> Result<Vec<u8>> {
    let planned = plan_run(entries)?;
    let inputs: Vec<&KeyRun> = inputs.iter().map(|run| &run.run).collect();
    let narrow = |(segment, row): (u64, usize)| (segment as u32, row as u32);
    stowage_core::key_runs::build_run(
        &inputs,
        &planned.fresh,
        RunSpec { first, through, stamp: 0 },
        |a, b| same_key(narrow(unpack(a)), narrow(unpack(b))),
        |_, payload| planned.keys.get(&payload).is_some_and(|key| in_older(key)),
    )
}

/// An open run.
#[derive(Debug)]
pub struct MergedIndex {
    run: KeyRun,
}

impl MergedIndex {
    /// Maps `path` and checks its header.
    ///
    /// Errors: [`Error::Corrupted`] naming the file and what is wrong (a run of the format an
    /// earlier stowage wrote included: [`MergedIndex::is_legacy`]); [`Error::Io`] when it
    /// cannot be opened (`NotFound` included).
    pub fn open(path: &Path) -> Result<MergedIndex> {
        let file = std::fs::File::open(path).at(path)?;
        // SAFETY: run files are written once under a temporary name and renamed into place,
        // never modified; the map is read-only and every slot read is bounds-checked.
        let map = unsafe { memmap2::Mmap::map(&file) }.at(path)?;
        // Lookups touch one slot each: reading around it would only evict other pages.
        let _ = map.advise(memmap2::Advice::Random);
        if map.starts_with(LEGACY_MAGIC) {
            return Err(Error::corrupted(
                path,
                "a key index run in the format of an earlier stowage (STWIDX02): lookups use the \
                 segments' sidecars until the writer's next merge rebuilds the index",
            ));
        }
        Ok(MergedIndex { run: KeyRun::from_bytes(path, map)? })
    }

    /// Whether the file at `path` is a run in the format an earlier stowage wrote (`STWIDX02`),
    /// which readers do not use: `validate` leaves it out.
    pub fn is_legacy(path: &Path) -> bool {
        let mut magic = [0u8; 8];
        std::fs::File::open(path)
            .and_then(|mut file| std::io::Read::read_exact(&mut file, &mut magic))
            .is_ok_and(|()| &magic == LEGACY_MAGIC)
    }

    /// Opens the run `entry` of `layout` and checks that its header says what the entry says.
    ///
    /// Errors: as [`MergedIndex::open`]; [`Error::Corrupted`] when the header disagrees.
    pub fn open_entry(layout: &Layout, entry: &RunEntry) -> Result<MergedIndex> {
        let path = layout.index_run(entry.first, entry.through);
        let run = MergedIndex::open(&path)?;
        if run.entry() != *entry {
            let found = run.entry();
            return Err(Error::corrupted(
                path,
                format!("holds {found:?}, the commit log records {entry:?}"),
            ));
        }
        Ok(run)
    }

    /// What the run holds, as the commit log records it.
    pub fn entry(&self) -> RunEntry {
        RunEntry {
            first: self.first(),
            through: self.through(),
            keys: self.keys(),
            new_keys: self.new_keys(),
        }
    }

    /// Distinct keys in the segments it covers.
    pub fn keys(&self) -> u64 {
        self.run.keys()
    }

    /// Its keys that no older run holds: the cache's distinct keys are the sum over its runs.
    pub fn new_keys(&self) -> u64 {
        self.run.new_keys()
    }

    /// The lowest segment id it covers.
    pub fn first(&self) -> u64 {
        self.run.first()
    }

    /// The highest segment id it covers.
    pub fn through(&self) -> u64 {
        self.run.through()
    }

    /// The file.
    pub fn path(&self) -> &Path {
        self.run.path()
    }

    /// The (segment id, row) of `key`: each candidate whose slot hash matches is offered to
    /// `confirm` (the caller compares that segment's key of that row).
    pub fn find(&self, key: &str, confirm: impl Fn(u64, usize) -> bool) -> Option<(u64, usize)> {
        let Ok(found) =
            self.try_find(key, |segment, row| Ok::<bool, Infallible>(confirm(segment, row)));
        found
    }

    /// As [`MergedIndex::find`], with a `confirm` that can fail (the candidate's segment does
    /// not read): the first error ends the probe and is returned.
    pub fn try_find<E>(
        &self,
        key: &str,
        mut confirm: impl FnMut(u64, usize) -> std::result::Result<bool, E>,
    ) -> std::result::Result<Option<(u64, usize)>, E> {
        let range = self.first()..=self.through();
        let found = self.run.try_find(key_hash(key.as_bytes()), |payload| {
            let (segment, row) = unpack(payload);
            Ok(range.contains(&segment) && confirm(segment, row)?)
        })?;
        Ok(found.map(unpack))
    }

    /// Asks the CPU to load the slot a lookup of `key` reads first (a hint for batched lookups).
    pub fn prefetch(&self, key: &str) {
        self.run.prefetch(key_hash(key.as_bytes()));
    }

    /// Adds the slot a lookup of `key` reads first to `plan` (the pages a cold batch of lookups
    /// asks the kernel for before probing).
    pub fn plan_slot<'a>(&'a self, key: &str, plan: &mut PagePlan<'a>) {
        let (bytes, slot) = self.run.home_slot(key_hash(key.as_bytes()));
        let _ = plan.add(bytes, slot);
    }

    /// The first slot's (segment id, row) whose hash matches `key`'s, unconfirmed: what a
    /// batched lookup prefetches the confirming key of.
    pub fn first_candidate(&self, key: &str) -> Option<(u64, usize)> {
        self.find(key, |_, _| true)
    }

    /// Checks the slots against their checksum and placement (reads the whole table).
    ///
    /// Errors: [`Error::Corrupted`] naming the file.
    pub fn verify(&self) -> Result<()> {
        self.run.verify()
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
        .filter(|run| listed.binary_search(&run.through()).is_ok() && run.verify().is_ok())
        .collect();
    // Newest end first; of two ending together, the wider.
    found.sort_by_key(|run| (std::cmp::Reverse(run.through()), run.first()));
    let mut chosen: Vec<MergedIndex> = Vec::new();
    for run in found {
        if chosen.iter().all(|c| run.through() < c.first()) {
            chosen.push(run);
        }
    }
    chosen.reverse();
    // Only a chain from the first segment, each run starting at the segment after the previous
    // one's last: a run's new-key count assumes older runs cover every segment before it.
    let mut next = listed.first().copied();
    let chain = chosen.iter().take_while(|run| {
        let starts_there = Some(run.first()) == next;
        next = listed.iter().copied().find(|&id| id > run.through());
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
    use stowage_core::key_runs::HEADER_LEN;

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

    /// A run an earlier stowage wrote (`STWIDX02`) is not read, and says so; `is_legacy` tells
    /// it from damage, for `validate`.
    #[test]
    fn runs_of_the_earlier_format_are_not_read_and_are_told_apart() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("run");
        let mut old = b"STWIDX02".to_vec();
        old.resize(64 + 16 * 16, 0);
        std::fs::write(&path, &old).unwrap();
        let error = MergedIndex::open(&path).unwrap_err();
        assert!(error.to_string().contains("earlier stowage (STWIDX02)"), "{error}");
        assert!(MergedIndex::is_legacy(&path));
        std::fs::write(&path, b"garbage!garbage!").unwrap();
        assert!(!MergedIndex::is_legacy(&path));
    }

    #[test]
    fn damaged_tables_are_refused_or_never_misdirect() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("run");
        let keys: Vec<String> = (0..300).map(|i| format!("k{i}")).collect();
        let entries = keys.iter().enumerate().map(|(row, k)| (k.as_str(), 0, row));
        let good = build_run(&[], entries, 0, 0, |_, _| false, |_| false).unwrap();
        for len in [0, 8, HEADER_LEN, good.len() - 1] {
            std::fs::write(&path, &good[..len]).unwrap();
            assert!(matches!(MergedIndex::open(&path).unwrap_err(), Error::Corrupted { .. }));
        }
        for at in (0..HEADER_LEN).chain((HEADER_LEN..good.len()).step_by(3)) {
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
