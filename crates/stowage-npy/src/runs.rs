//! The on-disk key index of a stowage NUMPY_10 cache: key index runs
//! ([`stowage_core::key_runs`]) over `records.log`, named by `index/current`.
//!
//! ```text
//! <cache>/index/current                 JSON, replaced atomically: the runs in use (name and
//!                                       header checksum), the log offset L they cover, the
//!                                       records before L, the record that ends at L (offset and
//!                                       checksum), every collection file uid a record before L
//!                                       points into
//! <cache>/index/run_<first>_<L>.bin     a run over the records starting at log byte offsets
//!                                       first..L: key hash -> offset of the key's latest record,
//!                                       with a hint of its first field's row ([`crate::locator`])
//! ```
//!
//! A reader maps the runs, checks their headers against `current`, checks that the record ending
//! at L is the one `current` names (so a log replaced or cut back under the runs is noticed), and
//! replays only the records after L into the in-memory tail ([`crate::index::KeyIndex`]). A run's
//! candidate is confirmed by reading the record at its offset in a read-only map of the log and
//! comparing the key: a damaged run can hide a key, never return another key's record. When
//! `current` is missing or does not match, the whole log is replayed instead (correct, slower),
//! and `validate` says why.
//!
//! A writer turns the tail into a run of its own at a flush once it holds [`TAIL_BOUND`] entries
//! (work that grows with the tail, never with the cache), then merges runs off the flush: on a
//! background thread, the newest runs that are no larger than what they gather ([`stowage_core::key_runs::plan_merge`])
//! are merged into one run (a streaming merge in hash order, written through a small buffer:
//! [`build_run_to`]), which later flushes install: `current` names it in place of its inputs.
//! Until then the inputs keep answering lookups. One merge runs at a time; a flush waits for it
//! only when [`MAX_RUNS`] runs have piled up. Finalize cancels it (its inputs are merged anyway)
//! and merges every run into one. A run is durable (written under a temporary name, fsynced, renamed, directory fsynced)
//! before `current` names it; the runs it replaced are removed after.

use std::borrow::Cow;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use memmap2::Mmap;
use serde::{Deserialize, Serialize};
use smallvec::SmallVec;
use stowage_core::background_merge::{BackgroundMerge, runs_to_merge};
use stowage_core::file_safety::{AppendLog, atomic_write, create_dir_within_durably};
use stowage_core::key_runs::{KeyRun, RunSpec, key_hash, write_run_file};
use stowage_core::{Error, IoResultExt, Result};

use crate::layout::Layout;
use crate::locator::{Locator, RowHint};
use crate::record::ParsedRecord;

/// Tail entries (records since the last run) after which a flush writes a run: about 3 MB of
/// log offsets and, in the tail's [`crate::index::KeyIndex`], about 25 MB for one-field keys.
pub(crate) const TAIL_BOUND: usize = 65_536;

/// Runs after which a flush that writes a run waits for the background merge (if one runs)
/// before going on: bounds the runs a lookup probes.
pub(crate) const MAX_RUNS: usize = 16;

/// The `version` of `index/current` a writer writes: 2, whose run payloads may carry a row hint
/// ([`crate::locator`]); earlier stowage-npy readers refuse it and replay the log.
const CURRENT_VERSION: u32 = 2;

/// The versions of `index/current` a reader uses: 1 (plain offsets) is still read, and the next
/// writer names its runs in a version 2 `current`.
const READ_VERSIONS: std::ops::RangeInclusive<u32> = 1..=CURRENT_VERSION;

/// The contents of `index/current`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Current {
    /// One of [`READ_VERSIONS`]; a writer writes [`CURRENT_VERSION`].
    pub version: u32,
    /// L: the log byte offset the runs cover up to (the records after it are the tail).
    pub log_end: u64,
    /// Records of the log before L.
    pub log_records: u64,
    /// The record that ends at L; `None` when L is the log's header.
    pub last_record: Option<LastRecord>,
    /// The runs, oldest first.
    pub runs: Vec<RunName>,
    /// Every collection file uid a record before L points into.
    pub uids: Vec<String>,
}

/// The record of the log that ends at L.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct LastRecord {
    /// Its byte offset.
    pub offset: u64,
    /// Its checksum as the log stores it.
    pub checksum: u64,
}

/// One run named by `index/current`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct RunName {
    /// File name in `index/`.
    pub name: String,
    /// Its header checksum: the file under that name must be this run.
    pub header_checksum: u64,
}

/// The runs a handle uses, with the map of the log their payloads point into.
#[derive(Debug)]
pub(crate) struct Runs {
    /// `records.log`, mapped read-only, covering at least `current.log_end`.
    log: Mmap,
    log_path: PathBuf,
    /// Oldest first.
    runs: Vec<Arc<KeyRun>>,
    /// The maps of the runs opened with the handle (a reader's runs: a writer installs runs of
    /// its own beside them), kept so that [`Runs::set_random_access`] can advise them.
    run_maps: Vec<Arc<Mmap>>,
    current: Current,
    /// Whether the record that ends at L is the finalize record.
    finalized: bool,
    /// The merge running in the background, a writer's.
    merge: Option<BackgroundMerge>,
}

/// Merges `inputs` (consecutive runs over the log at `log_path`) into one run in `dir`, written
/// through a small buffer and made durable; returns it, mapped.
fn merge_runs(
    log_path: &Path,
    dir: &Path,
    inputs: &[Arc<KeyRun>],
    cancel: &AtomicBool,
) -> Result<KeyRun> {
    // Every record the inputs point to is durable and never changes: a map of today's log
    // covers them.
    let log = map(log_path)?;
    let key_of = |payload: u64| {
        AppendLog::record_at(&log, Locator::offset_of(payload))
            .and_then(|(entry, _, _)| entry_key(entry))
    };
    let same_key = |a: u64, b: u64| key_of(a).is_some_and(|k| key_of(b) == Some(k));
    let (first, last) = (&inputs[0], &inputs[inputs.len() - 1]);
    let spec = RunSpec { first: first.first(), through: last.through(), stamp: last.stamp() };
    let path = dir.join(format!("run_{}_{}.bin", spec.first, spec.through));
    let inputs: Vec<&KeyRun> = inputs.iter().map(|run| &**run).collect();
    // No fresh entries, so `in_older` is never asked.
    write_run_file(&path, &inputs, &[], spec, same_key, |_, _| false, Some(cancel))?;
    KeyRun::from_bytes(&path, map_populated(&path)?)
}

impl Runs {
    /// Opens the runs `index/current` names, checking each header and the record ending at L.
    /// `Ok(None)` when there is no `index/` (a cache written before the index, or whose writer
    /// never wrote a run); `Err(why)` when it cannot be used (`current` missing from `index/`
    /// included).
    ///
    /// With `random`, the log and the runs are mapped for random access
    /// ([`Runs::set_random_access`]) from the start, so that the check of the record ending at
    /// L reads one page of a cold log, not the kernel's read-around.
    pub(crate) fn open(layout: &Layout, random: bool) -> std::result::Result<Option<Runs>, String> {
        // A writer may replace `current` and remove the runs it replaced between our read of
        // `current` and the open of its runs: one more try reads the new `current`.
        Runs::open_once(layout, random).or_else(|_| Runs::open_once(layout, random))
    }

    fn open_once(layout: &Layout, random: bool) -> std::result::Result<Option<Runs>, String> {
        let path = current_path(layout);
        let text = match std::fs::read(&path) {
            Ok(text) => text,
            // A cache written before the index, or whose writer never wrote one.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && !index_dir(layout).exists() => {
                return Ok(None);
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(format!("{} is missing (index/ exists)", path.display()));
            }
            Err(e) => return Err(format!("{}: {e}", path.display())),
        };
        let current: Current = serde_json::from_slice(&text)
            .map_err(|e| format!("{}: does not parse: {e}", path.display()))?;
        if !READ_VERSIONS.contains(&current.version) {
            return Err(format!("{}: version {}", path.display(), current.version));
        }
        let log = map(&layout.records_log()).map_err(|e| e.to_string())?;
        advise_access(&log, random);
        let finalized = check_last_record(&log, &current)
            .map_err(|why| format!("{}: {why}", layout.records_log().display()))?;
        let mut runs = Vec::with_capacity(current.runs.len());
        let mut run_maps = Vec::with_capacity(current.runs.len());
        for named in &current.runs {
            if !named.name.starts_with("run_") || named.name.contains(['/', '\\']) {
                return Err(format!("{}: names {:?}, not a run", path.display(), named.name));
            }
            let path = index_dir(layout).join(&named.name);
            let run_map = Arc::new(map(&path).map_err(|e| e.to_string())?);
            advise_access(&run_map, random);
            let run =
                KeyRun::from_bytes(&path, SharedMap(run_map.clone())).map_err(|e| e.to_string())?;
            if run.header().header_checksum != named.header_checksum
                || run.through() > current.log_end
            {
                return Err(format!(
                    "{}: not the run index/current names (header checksum {:#018x}, recorded \
                     {:#018x})",
                    path.display(),
                    run.header().header_checksum,
                    named.header_checksum
                ));
            }
            runs.push(Arc::new(run));
            run_maps.push(run_map);
        }
        Ok(Some(Runs {
            log,
            log_path: layout.records_log(),
            runs,
            run_maps,
            current,
            finalized,
            merge: None,
        }))
    }

    /// No runs yet, over the log at `layout` (a writer that has not written any).
    pub(crate) fn empty(layout: &Layout) -> Result<Runs> {
        Ok(Runs {
            log: map(&layout.records_log())?,
            log_path: layout.records_log(),
            runs: Vec::new(),
            run_maps: Vec::new(),
            current: Current {
                version: CURRENT_VERSION,
                log_end: AppendLog::MAGIC.len() as u64,
                log_records: 0,
                last_record: None,
                runs: Vec::new(),
                uids: Vec::new(),
            },
            finalized: false,
            merge: None,
        })
    }

    /// Tells the kernel how the log and the runs opened with the handle are read: at random
    /// (`true`: `MADV_RANDOM` on those larger than [`RANDOM_ACCESS_MIN_BYTES`], a page fault
    /// reads its page alone) or with its default read-around
    /// (`false`: a fault reads up to `read_ahead_kb` around its page, 8 MiB on the scale suite's
    /// disk, which costs a random lookup 2,000 pages for the one it needs, and serves a
    /// sequential pass such as `validate`'s in large requests). A hint only: a failure is
    /// ignored, and what is read never changes.
    pub(crate) fn set_random_access(&self, random: bool) {
        for map in std::iter::once(&self.log).chain(self.run_maps.iter().map(|m| &**m)) {
            advise_access(map, random);
        }
    }

    /// What `index/current` says.
    pub(crate) fn current(&self) -> &Current {
        &self.current
    }

    /// Whether the last record the runs cover is the finalize record.
    pub(crate) fn finalized(&self) -> bool {
        self.finalized
    }

    /// Keys of the cache the runs hold.
    pub(crate) fn keys(&self) -> u64 {
        self.runs.iter().map(|run| run.new_keys()).sum()
    }

    /// The runs, oldest first.
    pub(crate) fn runs(&self) -> &[Arc<KeyRun>] {
        &self.runs
    }

    /// The log entry (offset, payload) of the latest record of `key` the runs know, newest run
    /// first.
    pub(crate) fn find(&self, key: &str) -> Option<(u64, &[u8])> {
        self.find_hinted(key, |_| {})
    }

    /// [`Runs::find`], calling `on_hint` with a candidate's row hint before its record is read,
    /// so that the row's load can start beside the record's.
    pub(crate) fn find_hinted(
        &self,
        key: &str,
        mut on_hint: impl FnMut(RowHint),
    ) -> Option<(u64, &[u8])> {
        let hash = key_hash(key.as_bytes());
        for run in self.runs.iter().rev() {
            if let Some(found) = self.find_in(run, hash, key, &mut on_hint) {
                return Some(found);
            }
        }
        None
    }

    /// Whether a run holds each of `keys`: looked up in hash order (a run's slots are in hash
    /// order, so the lookups walk each run front to back: neighbouring keys share pages), in
    /// batches whose slots are prefetched in every run first, so that their cache misses overlap
    /// instead of costing one per key and run.
    pub(crate) fn held(&self, keys: &[&str]) -> Vec<bool> {
        const BATCH: usize = 32;
        let mut order: Vec<(u64, u32)> =
            keys.iter().enumerate().map(|(i, key)| (key_hash(key.as_bytes()), i as u32)).collect();
        order.sort_unstable();
        let mut held = vec![false; keys.len()];
        for batch in order.chunks(BATCH) {
            for run in &self.runs {
                for &(hash, _) in batch {
                    run.prefetch(hash);
                }
            }
            for &(hash, i) in batch {
                let key = keys[i as usize];
                held[i as usize] = self
                    .runs
                    .iter()
                    .rev()
                    .any(|run| self.find_in(run, hash, key, |_| {}).is_some());
            }
        }
        held
    }

    fn find_in(
        &self,
        run: &KeyRun,
        hash: u64,
        key: &str,
        mut on_hint: impl FnMut(RowHint),
    ) -> Option<(u64, &[u8])> {
        let mut entry = None;
        run.find(hash, |payload| {
            let Locator { offset, hint } = Locator::decode(payload);
            if !(run.first()..run.through()).contains(&offset) {
                return false;
            }
            if let Some(hint) = hint {
                // The record's first line is requested before the row's many: the row's loads
                // then cannot hold up the record's, which the lookup waits for first.
                if let Some(at) = usize::try_from(offset).ok().filter(|&at| at < self.log.len()) {
                    stowage_core::prefetch::prefetch_line(self.log[at..].as_ptr());
                }
                on_hint(hint);
            }
            match self.entry_at(offset) {
                Some(payload) if entry_key(payload).as_deref() == Some(key) => {
                    entry = Some((offset, payload));
                    true
                }
                _ => false,
            }
        })?;
        entry
    }

    /// The mapped bytes of `records.log`.
    pub(crate) fn log_bytes(&self) -> &[u8] {
        &self.log
    }

    /// The bytes a read of the log record at `offset` starts with (its frame and the first
    /// bytes of its payload), for planning page reads; `None` past the map.
    pub(crate) fn record_range(&self, offset: u64) -> Option<std::ops::Range<usize>> {
        let start = usize::try_from(offset).ok().filter(|&s| s < self.log.len())?;
        Some(start..(start + 256).min(self.log.len()))
    }

    /// The payload of the log record at `offset`, if a valid one starts there.
    pub(crate) fn entry_at(&self, offset: u64) -> Option<&[u8]> {
        AppendLog::record_at(&self.log, offset).map(|(payload, _, _)| payload)
    }

    /// Writes a run of `fresh` ((key hash, [`Locator`] payload) of the records after L, in log order;
    /// beside each, whether a run held its key when it was put, when known), then
    /// `index/current` naming it over the log up to `log_end` (`log_records` records, the last
    /// one at byte offset `last_offset`), listing `uids`. The log up to `log_end` must be durable.
    ///
    /// Without `all` the run holds `fresh` alone (work that grows with the tail), a finished
    /// background merge is installed first, and a new one is started when [`stowage_core::key_runs::plan_merge`] finds
    /// runs to fold together. With `all` (finalize) the background merge is cancelled and every
    /// run is merged with `fresh` into one. Runs replaced are removed.
    pub(crate) fn write(
        &mut self,
        layout: &Layout,
        (fresh, in_runs): (&[(u64, u64)], &[Option<bool>]),
        (log_end, log_records, last_offset): (u64, u64, u64),
        uids: &[String],
        all: bool,
    ) -> Result<()> {
        // Made (and its name made durable) before the run and `current` written into it.
        create_dir_within_durably(layout.root(), &index_dir(layout))?;
        // A finished merge is installed; a running one is waited for when runs piled up, and
        // cancelled at finalize (which merges its inputs with everything else).
        if all
            && !self.merge.as_ref().is_some_and(BackgroundMerge::is_finished)
            && let Some(merge) = self.merge.take()
        {
            merge.cancel();
        }
        let mut replaced = self.install(layout, all || self.runs.len() >= MAX_RUNS)?;
        // Every record up to log_end is durable: map it so that the build can read their keys.
        self.log = map(&layout.records_log())?;
        let Some((_, checksum, _)) = AppendLog::record_at(&self.log, last_offset) else {
            return Err(Error::corrupted(
                &self.log_path,
                format!("no valid record at byte offset {last_offset}, the last one written"),
            ));
        };
        let last = LastRecord { offset: last_offset, checksum };
        let finalized = check_last_record(
            &self.log,
            &Current { log_end, last_record: Some(last), ..self.current.clone() },
        )
        .map_err(|why| Error::corrupted(&self.log_path, why))?;
        let taken = if all { self.runs.len() } else { 0 };
        let kept = self.runs.len() - taken;
        if !fresh.is_empty() || taken > 1 {
            let inputs: Vec<&KeyRun> = self.runs[kept..].iter().map(|run| &**run).collect();
            let older = &self.runs[..kept];
            let first = inputs.first().map_or(self.current.log_end, |run| run.first());
            let spec = RunSpec { first, through: log_end, stamp: last.checksum };
            let key_of =
                |payload: u64| self.entry_at(Locator::offset_of(payload)).and_then(entry_key);
            let same_key = |a: u64, b: u64| key_of(a).is_some_and(|k| key_of(b) == Some(k));
            // Asked only of a key's first fresh entry (no input and no earlier entry holds it),
            // whose put knew whether a run held it; the runs are the same, and the inputs do not
            // hold it, so a run held it exactly when an older one does. Otherwise: probe.
            let in_older = |hash: u64, payload: u64| {
                // In log order: by offset (a hint sets a payload's high bits).
                let offset = Locator::offset_of(payload);
                let known =
                    fresh.binary_search_by_key(&offset, |entry| Locator::offset_of(entry.1)).ok();
                if let Some(in_runs) = known.and_then(|i| in_runs.get(i).copied().flatten()) {
                    return in_runs;
                }
                key_of(payload).is_some_and(|key| {
                    older.iter().any(|run| self.find_in(run, hash, &key, |_| {}).is_some())
                })
            };
            let name = format!("run_{first}_{log_end}.bin");
            let path = index_dir(layout).join(&name);
            // Streamed into the file (a buffer's worth of heap, whatever the run's size).
            write_run_file(&path, &inputs, fresh, spec, same_key, in_older, None)?;
            // Its pages are in the page cache (just written): map them all now, so that the
            // writer's duplicate checks do not take a page fault per probe.
            let run = KeyRun::from_bytes(&path, map_populated(&path)?)?;
            replaced.extend(self.runs.drain(kept..).map(|run| run.path().to_path_buf()));
            self.runs.push(Arc::new(run));
        }
        self.write_current(layout, (log_end, log_records, last), uids)?;
        self.finalized = finalized;
        for path in replaced {
            // Readers that mapped it keep their map; a leftover is removed by the next writer.
            let _ = std::fs::remove_file(path);
        }
        if !all && self.merge.is_none() {
            self.start_merge(layout);
        }
        Ok(())
    }

    /// Writes `index/current` naming the runs over the log up to `log_end`.
    fn write_current(
        &mut self,
        layout: &Layout,
        (log_end, log_records, last): (u64, u64, LastRecord),
        uids: &[String],
    ) -> Result<()> {
        let current = Current {
            version: CURRENT_VERSION,
            log_end,
            log_records,
            last_record: Some(last),
            runs: self
                .runs
                .iter()
                .map(|run| RunName {
                    name: run.path().file_name().expect("named").to_string_lossy().into_owned(),
                    header_checksum: run.header().header_checksum,
                })
                .collect(),
            uids: uids.to_vec(),
        };
        let text = serde_json::to_vec(&current).expect("serializes");
        atomic_write(current_path(layout), &text)?;
        self.current = current;
        Ok(())
    }

    /// Starts merging the newest runs in the background when the newest run is at least as
    /// large as the runs before it that [`stowage_core::key_runs::plan_merge`] would fold into it.
    fn start_merge(&mut self, layout: &Layout) {
        let Some(inputs) = runs_to_merge(&self.runs) else { return };
        let (log_path, dir) = (layout.records_log(), index_dir(layout));
        self.merge =
            Some(BackgroundMerge::start("stowage-npy-merge", inputs, move |runs, stop| {
                merge_runs(&log_path, &dir, runs, stop)
            }));
    }

    /// Waits for the background merge, if one runs, and names its run in `index/current` in
    /// place of its inputs (`current`'s log coverage unchanged); returns the inputs' paths, for
    /// removal once the caller is done. With `wait` false, only a finished merge is installed.
    fn install(&mut self, layout: &Layout, wait: bool) -> Result<Vec<PathBuf>> {
        if !wait && !self.merge.as_ref().is_some_and(BackgroundMerge::is_finished) {
            return Ok(Vec::new());
        }
        let Some(merge) = self.merge.take() else { return Ok(Vec::new()) };
        let replaced = merge.install_into(&mut self.runs)?;
        let current = self.current.clone();
        if let Some(last) = current.last_record {
            let covered = (current.log_end, current.log_records, last);
            self.write_current(layout, covered, &current.uids)?;
        }
        Ok(replaced)
    }
}

/// `index/`.
pub(crate) fn index_dir(layout: &Layout) -> PathBuf {
    layout.root().join("index")
}

/// `index/current`.
pub(crate) fn current_path(layout: &Layout) -> PathBuf {
    index_dir(layout).join("current")
}

/// Removes every file of `index/` that `index/current` does not name (runs a crashed writer left,
/// runs a merge replaced, temporaries). Called under the writer lock.
pub(crate) fn remove_unnamed(layout: &Layout, current: Option<&Current>) -> Result<()> {
    let dir = index_dir(layout);
    let entries = match std::fs::read_dir(&dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(Error::io(dir, e)),
    };
    for entry in entries {
        let entry = entry.at(&dir)?;
        let name = entry.file_name();
        let name = name.to_string_lossy();
        let named =
            name == "current" || current.is_some_and(|c| c.runs.iter().any(|run| run.name == name));
        if !named && entry.file_type().at(entry.path())?.is_file() {
            let _ = std::fs::remove_file(entry.path());
        }
    }
    if current.is_none() {
        // Fails, harmlessly, unless index/ is empty now: no index is no `index/`.
        let _ = std::fs::remove_dir(&dir);
    }
    Ok(())
}

/// Removes `index/current` (its runs are left for [`remove_unnamed`]) and `index/` when that
/// leaves it empty: the cache then has no index, and the next open replays the log.
pub(crate) fn forget(layout: &Layout) -> Result<()> {
    let removed = std::fs::remove_file(current_path(layout));
    // Fails, harmlessly, while index/ holds other files.
    let _ = std::fs::remove_dir(index_dir(layout));
    match removed {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            Err(Error::io(current_path(layout), e))
        }
        _ => Ok(()),
    }
}

/// Maps the file at `path` read-only.
fn map(path: &Path) -> Result<Mmap> {
    let file = std::fs::File::open(path).at(path)?;
    // SAFETY: records.log is append-only (a writer appends after the mapped length, recovery cuts
    // only a tail beyond what an index covers, under the writer lock), and runs are written
    // whole under a temporary name and renamed into place, never modified afterwards. Every
    // read through the map checks a checksum first.
    unsafe { Mmap::map(&file) }.at(path)
}

/// Maps the file at `path` read-only with every page mapped up front (`MAP_POPULATE`).
fn map_populated(path: &Path) -> Result<Mmap> {
    let file = std::fs::File::open(path).at(path)?;
    // SAFETY: as in `map`: a run is never modified after it is renamed into place.
    unsafe { memmap2::MmapOptions::new().populate().map(&file) }.at(path)
}

/// Runs and logs up to this size keep the kernel's read-around even for random reads: a few
/// faults read the whole file, after which every lookup finds its pages cached. Measured with
/// the scale suite (`--drop-caches`, 2,000 random cold gets): at 100,000 keys (a 4 MiB run, a
/// 7 MiB log) `MADV_RANDOM` cost a fault per page and ran at 10-18 k gets/s against 7-103 k/s
/// without it; at 10 M keys (a 256 MiB run, a 600 MB log) it ran 2-3x faster than the 8 MiB
/// read-around of each fault. Eight read-around windows of this disk.
pub(crate) const RANDOM_ACCESS_MIN_BYTES: usize = 64 << 20;

/// `MADV_RANDOM` (`random`, when the map is larger than [`RANDOM_ACCESS_MIN_BYTES`]) or
/// `MADV_NORMAL` on `map` ([`Runs::set_random_access`]).
fn advise_access(map: &Mmap, random: bool) {
    let random = random && map.len() > RANDOM_ACCESS_MIN_BYTES;
    #[cfg(unix)]
    if !map.is_empty() {
        let advice = if random { memmap2::Advice::Random } else { memmap2::Advice::Normal };
        // A hint: a refusal leaves the map as it was, and reads stay correct.
        let _ = map.advise(advice);
    }
    #[cfg(not(unix))]
    let _ = (map, random);
}

/// A map shared by a [`KeyRun`] and the [`Runs`] that advise it.
struct SharedMap(Arc<Mmap>);

impl AsRef<[u8]> for SharedMap {
    fn as_ref(&self) -> &[u8] {
        &self.0
    }
}

/// Checks that the record `current` names ends exactly at L; whether it is the finalize record.
fn check_last_record(log: &[u8], current: &Current) -> std::result::Result<bool, String> {
    let magic = AppendLog::MAGIC.len() as u64;
    let Some(last) = current.last_record else {
        return if current.log_end == magic && log.get(..8) == Some(&AppendLog::MAGIC[..]) {
            Ok(false)
        } else {
            Err(format!("no record named to end at byte offset {}", current.log_end))
        };
    };
    match AppendLog::record_at(log, last.offset) {
        Some((payload, checksum, end)) if checksum == last.checksum && end == current.log_end => {
            Ok(payload.first() == Some(&b'{'))
        }
        _ => Err(format!(
            "the record at byte offset {} is not the one index/current names (checksum {:#018x}, \
             ending at {}): the log changed under the index",
            last.offset, last.checksum, current.log_end
        )),
    }
}

/// The key of a log entry (`["<key>", ...]`): without a copy when the key holds no escape.
pub(crate) fn entry_key(payload: &[u8]) -> Option<Cow<'_, str>> {
    let rest = payload.strip_prefix(b"[\"")?;
    let end = rest.iter().position(|&b| b == b'"' || b == b'\\')?;
    if rest[end] == b'"' {
        return std::str::from_utf8(&rest[..end]).ok().map(Cow::Borrowed);
    }
    let mut stream = serde_json::Deserializer::from_slice(&payload[1..]).into_iter::<String>();
    stream.next()?.ok().map(Cow::Owned)
}

/// The records of a log entry (`["<key>","<record>",...]`), parsed, `fields` of them: the fast
/// path of a lookup (no JSON tree, no key copy, no allocation for up to [`INLINE_FIELDS`]
/// fields); `None` when the entry is not in the form stowage writes it or a record is not
/// canonical (the caller then decodes it as JSON, whose errors say what is wrong).
pub(crate) fn entry_records(payload: &[u8], fields: usize) -> Option<EntryRecords<'_>> {
    let rest = payload.strip_prefix(b"[\"")?;
    let end = rest.iter().position(|&b| b == b'"' || b == b'\\')?;
    if rest[end] != b'"' {
        return None;
    }
    let mut rest = rest.get(end + 1..)?;
    let mut records = EntryRecords::with_capacity(fields);
    for _ in 0..fields {
        rest = rest.strip_prefix(b",\"")?;
        let end = rest.iter().position(|&b| b == b'"' || b == b'\\')?;
        if rest[end] != b'"' {
            return None;
        }
        records.push(ParsedRecord::parse_fixed(&rest[..end])?);
        rest = &rest[end + 1..];
    }
    (rest == b"]").then_some(records)
}

/// Fields whose records [`entry_records`] parses without allocating.
pub(crate) const INLINE_FIELDS: usize = 2;

/// The parsed records of one log entry.
pub(crate) type EntryRecords<'a> = SmallVec<[ParsedRecord<'a>; INLINE_FIELDS]>;

#[cfg(test)]
mod tests {
    use super::*;

    /// Whether `/proc/self/smaps` shows the map starting at `address` advised `MADV_RANDOM`.
    #[test]
    #[cfg(target_os = "linux")]
    fn only_a_large_run_or_log_is_mapped_for_random_reads() {
        use stowage_test_support::process::advised_random;
        let dir = tempfile::tempdir().unwrap();
        let map_of = |name: &str, len: usize| {
            let path = dir.path().join(name);
            // Sparse: nothing is written or read.
            std::fs::File::create(&path).unwrap().set_len(len as u64).unwrap();
            map(&path).unwrap()
        };
        let large = map_of("large", RANDOM_ACCESS_MIN_BYTES + 4096);
        let small = map_of("small", RANDOM_ACCESS_MIN_BYTES);
        advise_access(&large, true);
        advise_access(&small, true);
        assert!(advised_random(large.as_ptr() as usize));
        assert!(!advised_random(small.as_ptr() as usize), "read whole by its read-around");
        advise_access(&large, false);
        assert!(!advised_random(large.as_ptr() as usize), "handed back to the read-around");
    }

    #[test]
    fn entry_keys_are_read_with_and_without_escapes() {
        assert_eq!(entry_key(br#"["k1","10:a"]"#).as_deref(), Some("k1"));
        assert_eq!(entry_key(br#"["a\"b\\c","10:a"]"#).as_deref(), Some("a\"b\\c"));
        assert_eq!(entry_key(br#"["caf\u00e9","x"]"#).as_deref(), Some("café"));
        assert_eq!(entry_key(br#"{"finalized": {"keys": 1}}"#), None);
        assert_eq!(entry_key(b"[\"unterminated"), None);
        assert_eq!(entry_key(b""), None);
    }

    #[test]
    fn entry_records_parse_what_the_writer_writes_and_refuse_the_rest() {
        let a = "10:abcdefgh:0123456789abcdef:0:2 3";
        let b = "10:zzzzzzzz:0123456789abcdef:1:";
        let entry = format!(r#"["k",{a:?},{b:?}]"#);
        let got = entry_records(entry.as_bytes(), 2).unwrap();
        let got = (got[0].as_ref().to_string(), got[1].as_ref().to_string());
        assert_eq!(got, (a.to_owned(), b.to_owned()));
        assert!(entry_records(entry.as_bytes(), 1).is_none(), "one record too many");
        assert!(entry_records(entry.as_bytes(), 3).is_none(), "one record too few");
        let escaped = format!(r#"["k\"",{a:?}]"#);
        assert!(entry_records(escaped.as_bytes(), 1).is_none(), "escapes take the JSON path");
        assert!(entry_records(format!(r#"["k",{a:?}] "#).as_bytes(), 1).is_none());
        assert!(entry_records(br#"["k","10:bad"]"#, 1).is_none());
    }
}
