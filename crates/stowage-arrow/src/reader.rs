//! Reading a torchcachex cache through stowage's key indexes, segments mapped on first use.
//!
//! The segments are the source of truth: `index.pkl` is never read (it may be stale, missing or
//! corrupt, and a segment renamed into place just before a crash is absent from it). A key is
//! found through the merged key index runs ([`crate::merged_index`]) for the segments they
//! cover, and through the sidecar ([`crate::key_sidecar`]) of every segment no run covers (built
//! in memory from the segment's `key` column when the segment has none, as torchcachex's do, and
//! always for another writer's segment in a cache stowage writes, whose sidecar files, if any,
//! are not vouched for): the highest segment id holding the key wins, and within a segment the
//! last row, as torchcachex writes them. Segments another writer added may lie below segments a
//! run covers, so a lookup compares the newest sidecar hit with the runs above it.
//!
//! A run that cannot be opened is ignored with every newer one (their segments are then found
//! through their sidecars, so the newest data still comes first); damage inside a run's slots
//! can hide a key but never return another key's row (every candidate is confirmed against the
//! segment's `key` column), and `validate` is what finds it. A newer segment's sidecar is checked
//! whole and rebuilt in memory when damaged. A missing or damaged `schema.json` does not make the
//! data unreadable: the structure is then inferred from the columns (a `list` then reads as a
//! `tuple`, which has the same columns). Another writer's segment that does not read hides
//! nothing else: lookups skip it and `validate` reports it.
//!
//! Opening maps the runs and reads the keys of the segments they do not cover (to count
//! distinct keys); covered segments are opened on their first read, and at most
//! [`crate::ArrowOptions::max_open_segments`] stay open once there are more
//! ([`crate::open_segments`]).

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use stowage_core::cold_reads::{
    ColdReadAdvice, ColdReadAdvisor, PARALLEL_OPENS, PagePlan, each_on_threads,
};
use stowage_core::{DType, Error, Result, Sample, Schema, Tensor, Value};

use crate::blob_encoding::BlobEncoding;
use crate::commit_log::RunEntry;
use crate::decode::{ColumnGroup, DecodeError, column_groups_for, decode_row};
use crate::error::ArrowCacheError;
use crate::key_sidecar::{self, KeySidecar};
use crate::layout::Layout;
use crate::merged_index::{MergedIndex, discover_runs};
use crate::open_segments::{OpenSegments, Opened, default_max_open_segments};
use crate::ownership::SegmentOrigin;
use crate::row_layout::RowLayout;
use crate::row_sums::{self, RowSums};
use crate::schema_json::{OutputStructure, SchemaJson};
use crate::segment::{MappedSegment, Segment};

/// One segment file (opened on first use, in [`CacheReader::open`]).
#[derive(Debug)]
struct SegmentSlot {
    id: u64,
    path: PathBuf,
    origin: SegmentOrigin,
}

/// An opened segment: its batches, the sample fields its columns hold, and its row checksums
/// (none for segments torchcachex wrote; the reason when the checksum file is damaged, reported
/// by every get from the segment, which can then not be vouched for).
#[derive(Debug)]
struct OpenSegment {
    /// The segment as opened: row by row when it has checksums, else decoded whole.
    first: Segment,
    groups: Vec<ColumnGroup>,
    sums: std::result::Result<Option<RowSums>, (PathBuf, String)>,
    /// The segment decoded whole once [`DECODE_AFTER`] of its rows have been read row by row
    /// (`None`: it did not decode, and stays read row by row).
    whole: OnceLock<Option<Segment>>,
    /// Rows read row by row so far (counted up to [`DECODE_AFTER`]).
    row_reads: std::sync::atomic::AtomicU32,
}

/// Bytes by which a segment may differ in length from the last one opened row by row for that
/// one's layout to guess where a row lies (see [`CacheReader::open_segment`]).
const TEMPLATE_SLACK: usize = 256;

/// Rows read from a segment row by row after which it is decoded whole. A row read row by row
/// builds and checks its own arrays (about 4 us more than a read of a decoded segment), a whole
/// decode costs about 36 us for the scale suite's 2,048-row segments: a segment read this often
/// is worth decoding (ski rental), one read a few times (a cold or random read of a large cache,
/// the reopens of a bounded set) is not, and its file is not read whole.
const DECODE_AFTER: u32 = 8;

impl OpenSegment {
    /// The segment: decoded whole when it has been, else as opened.
    fn segment(&self) -> &Segment {
        match self.whole.get() {
            Some(Some(whole)) => whole,
            _ => &self.first,
        }
    }

    /// The segment to read a row from: [`OpenSegment::segment`], decoded whole now when this
    /// is the [`DECODE_AFTER`]th row read row by row.
    fn segment_for_row(&self) -> &Segment {
        let segment = self.segment();
        if segment.by_rows().is_none() || self.whole.get().is_some() {
            return segment;
        }
        use std::sync::atomic::Ordering::Relaxed;
        if self.row_reads.fetch_add(1, Relaxed) + 1 < DECODE_AFTER {
            return segment;
        }
        let decode = || {
            // A whole decode reads the keys and every offsets buffer; the map reads at random
            // (row by row), so they are asked for in one request rather than fault by fault.
            segment.will_need();
            segment.decode_whole().ok()
        };
        match self.whole.get_or_init(decode) {
            Some(whole) => whole,
            None => segment,
        }
    }
}

/// A read-only view of a torchcachex cache directory (`<cache_dir>/<module_id>`).
#[derive(Debug)]
pub struct CacheReader {
    layout: Layout,
    structure: Option<OutputStructure>,
    /// How bytes fields are stored.
    encoding: BlobEncoding,
    /// The cache's schema, which rows stowage did not write must fit (`None`: not checked).
    schema: Option<Schema>,
    /// Every segment, in id order.
    segments: Vec<SegmentSlot>,
    /// The open segments, by position in `segments`.
    open: OpenSegments<OpenSegment>,
    /// Key index runs in use, oldest first, over consecutive segment ranges from the first.
    runs: Vec<MergedIndex>,
    /// Sidecars of the segments no run covers: (position in `segments`,
    /// sidecar), newest first.
    recent: Vec<(usize, KeySidecar)>,
    /// Distinct keys, counted on first use (a flush must not pay for it).
    len: OnceLock<usize>,
    verify_checksums: bool,
    /// Every segment must have row checksums (stowage wrote them all): a missing file is damage.
    checksums_required: bool,
    /// The runs the caller's commit log vouches for, or `None` to find them in the directory.
    expected_runs: Option<Vec<RunEntry>>,
    /// Tells the kernel which pages a batch will read when they are not in the page cache
    /// ([`crate::ArrowOptions::cold_read_advice`]).
    advisor: ColdReadAdvisor,
    /// The layout of the last segment opened row by row, and its file's length (see
    /// [`CacheReader::open_segment`]).
    template: std::sync::Mutex<Option<(usize, Arc<RowLayout>)>>,
}

impl CacheReader {
    /// Opens the cache in `dir`: every segment listed in `segments/`, each read through its
    /// sidecars where it has them. Bytes read as torchcachex stores them, verbatim pickles
    /// ([`BlobEncoding::VerbatimPickles`]: the pickle itself, `b""` as null).
    ///
    /// Key index runs are taken from the directory (those that verify and chain from the first
    /// segment, see `discover_runs`).
    ///
    /// Errors: [`Error::Corrupted`] naming the segment when a segment no key index run covers is
    /// not a valid Arrow IPC file or has no `key` column; [`Error::Io`] naming the path that
    /// cannot be read.
    pub fn open(dir: impl AsRef<Path>) -> Result<CacheReader> {
        let layout = Layout::new(dir.as_ref());
        let structure =
            SchemaJson::read(&layout.schema()).ok().flatten().map(|s| s.output_structure);
        let segments = layout.list_segments()?;
        let segments = segments.into_iter().map(|(id, path)| (id, path, SegmentOrigin::Stowage));
        let encoding = BlobEncoding::VerbatimPickles;
        CacheReader::assemble(layout, segments.collect(), structure, encoding, None)
    }

    /// Opens the segments `ids` of the cache in `dir` and nothing else (committed segments of a
    /// cache stowage writes, `crate::commit_log`), with a known output structure, using the
    /// key index runs `runs` (the ones the commit log vouches for, oldest first) as far as they
    /// open and agree with their entries. Bytes read raw, as caches before commit log version 3
    /// store them: for any cache stowage writes, [`crate::ArrowBackend::segment_reader`] knows
    /// its encoding and which segments are another writer's.
    ///
    /// Errors: as [`CacheReader::open`]; a listed segment that is missing is [`Error::Io`]
    /// naming it when no run covers it, else an error on its first read.
    pub fn open_segments(
        dir: impl AsRef<Path>,
        ids: impl IntoIterator<Item = u64>,
        structure: OutputStructure,
        runs: &[RunEntry],
    ) -> Result<CacheReader> {
        let segments: Vec<(u64, SegmentOrigin)> =
            ids.into_iter().map(|id| (id, SegmentOrigin::Stowage)).collect();
        CacheReader::open_cache(dir, &segments, structure, BlobEncoding::Raw, runs)
    }

    /// Opens the segments of a cache stowage writes: `segments` (id, who wrote it), ascending
    /// ids, with the cache's output structure and blob encoding and the key index runs `runs`
    /// its commit log vouches for. Another writer's segment (`SegmentOrigin::Foreign`) is read
    /// without checksums and its sidecar files are ignored; the runs never cover it.
    ///
    /// Errors: as [`CacheReader::open_segments`].
    pub fn open_cache(
        dir: impl AsRef<Path>,
        segments: &[(u64, SegmentOrigin)],
        structure: OutputStructure,
        encoding: BlobEncoding,
        runs: &[RunEntry],
    ) -> Result<CacheReader> {
        let layout = Layout::new(dir.as_ref());
        let segments =
            segments.iter().map(|&(id, origin)| (id, layout.segment(id), origin)).collect();
        CacheReader::assemble(layout, segments, Some(structure), encoding, Some(runs.to_vec()))
    }

    /// `expected_runs`: the runs to use (`None`: discover them in the directory).
    fn assemble(
        layout: Layout,
        segments: Vec<(u64, PathBuf, SegmentOrigin)>,
        structure: Option<OutputStructure>,
        encoding: BlobEncoding,
        expected_runs: Option<Vec<RunEntry>>,
    ) -> Result<CacheReader> {
        let segments: Vec<SegmentSlot> = segments
            .into_iter()
            .map(|(id, path, origin)| SegmentSlot { id, path, origin })
            .collect();
        let mut reader = CacheReader {
            layout,
            structure,
            encoding,
            schema: None,
            open: OpenSegments::new(segments.len(), default_max_open_segments()),
            segments,
            runs: Vec::new(),
            recent: Vec::new(),
            len: OnceLock::new(),
            verify_checksums: true,
            checksums_required: false,
            expected_runs,
            advisor: ColdReadAdvisor::new(ColdReadAdvice::default()),
            template: std::sync::Mutex::new(None),
        };
        reader.load_runs();
        for position in 0..reader.segments.len() {
            if reader.covered_by_runs(position) {
                continue;
            }
            match reader.index_segment(position) {
                // Another writer's segment that does not read (torchcachex skips such segments
                // too) hides none of the rest: its keys are unknown, `validate` reports it.
                Err(_) if reader.segments[position].origin.is_foreign() => {}
                other => other?,
            }
        }
        Ok(reader)
    }

    /// Whether the runs answer for segment `position` (never another writer's).
    fn covered_by_runs(&self, position: usize) -> bool {
        let slot = &self.segments[position];
        !slot.origin.is_foreign() && self.runs_through().is_some_and(|t| slot.id <= t)
    }

    /// Maps the runs: the expected ones up to the first that does not open as recorded or whose
    /// last segment is not listed (a newer run must never be probed before an older segment's
    /// sidecar), or those found in the directory.
    fn load_runs(&mut self) {
        let ids: Vec<u64> = self.segments.iter().map(|s| s.id).collect();
        self.runs = match &self.expected_runs {
            Some(entries) => entries
                .iter()
                .map_while(|entry| {
                    MergedIndex::open_entry(&self.layout, entry)
                        .ok()
                        .filter(|run| ids.binary_search(&run.through()).is_ok())
                })
                .collect(),
            None => discover_runs(&self.layout, &ids),
        };
        self.len = OnceLock::new();
    }

    /// Makes segment `position` (newer than every indexed one) findable: its sidecar, or one
    /// built in memory when it has none or a damaged one (or is another writer's), goes first in
    /// the lookup order. Costs the segment's own rows only, however many keys the cache holds;
    /// the segment is opened for it and closed again (a read opens it when it needs it).
    fn index_segment(&mut self, position: usize) -> Result<()> {
        let foreign = self.segments[position].origin.is_foreign();
        // Checked as a read would check it, but not kept open: a writer indexes every segment it
        // commits, and each open segment keeps its parsed metadata on the heap (about 12 KiB),
        // which grew a writer's heap with its segment count (60 MiB at 10 M keys).
        let open = self.open_segment(position, false, None)?;
        let segment = open.segment();
        let keys = segment.keys()?;
        let sidecar_path = key_sidecar::sidecar_path(segment.path());
        let sidecar = (!foreign)
            .then(|| KeySidecar::open(&sidecar_path).ok())
            .flatten()
            .filter(|s| s.rows() == keys.len() && s.verify().is_ok())
            .map_or_else(|| KeySidecar::in_memory(segment.path(), &keys), Ok)?;
        self.recent.insert(0, (position, sidecar));
        self.len = OnceLock::new();
        Ok(())
    }

    /// Adds segment `id`, just committed by stowage after every segment this reader has, to the
    /// lookup.
    ///
    /// Errors: as [`CacheReader::open`] for that segment; the reader is unchanged.
    pub fn push_segment(&mut self, id: u64) -> Result<()> {
        if let Some(newest) = self.segments.last().map(|s| s.id).filter(|&newest| newest >= id) {
            return Err(ArrowCacheError::SegmentOutOfOrder { id, newest }.into());
        }
        let path = self.layout.segment(id);
        let origin = SegmentOrigin::Stowage;
        self.segments.push(SegmentSlot { id, path, origin });
        self.open.push();
        let position = self.segments.len() - 1;
        self.index_segment(position).inspect_err(|_| {
            self.segments.pop();
            self.open.pop();
        })
    }

    /// Takes the key index runs `runs` (oldest first), written since this reader opened (by
    /// `crate::merged_index`) and vouched for by the commit log: the sidecars they cover leave
    /// the lookup.
    ///
    /// Errors: as [`CacheReader::open`] for a segment whose sidecar must be indexed again.
    pub fn reload_runs(&mut self, runs: &[RunEntry]) -> Result<()> {
        self.expected_runs = Some(runs.to_vec());
        self.load_runs();
        let rest: Vec<usize> = self
            .recent
            .iter()
            .map(|(p, _)| *p)
            .filter(|&p| !self.covered_by_runs(p))
            .rev()
            .collect();
        self.recent.clear();
        for position in rest {
            self.index_segment(position)?;
        }
        Ok(())
    }

    /// The runs the commit log vouches for (`None`: found in the directory).
    pub(crate) fn expected_runs(&self) -> Option<&[RunEntry]> {
        self.expected_runs.as_deref()
    }

    /// The runs in use, oldest first.
    pub fn runs(&self) -> impl Iterator<Item = &MergedIndex> {
        self.runs.iter()
    }

    /// Committed segments no run covers yet (whose keys are found through their sidecars; a
    /// merge would cover them). Another writer's segments are not counted: no run covers them.
    pub fn unmerged_segments(&self) -> usize {
        self.recent.iter().filter(|(p, _)| !self.segments[*p].origin.is_foreign()).count()
    }

    /// Rows of the committed segments no run covers (what the next merge gathers).
    pub fn unmerged_rows(&self) -> u64 {
        let committed = self.recent.iter().filter(|(p, _)| !self.segments[*p].origin.is_foreign());
        committed.map(|(_, sidecar)| sidecar.rows() as u64).sum()
    }

    /// The highest segment id a run covers, if there is one.
    pub fn runs_through(&self) -> Option<u64> {
        self.runs.last().map(MergedIndex::through)
    }

    /// Whether `get` checks each row against its segment's row checksums (on by default;
    /// segments torchcachex wrote have none and are read unchecked).
    pub fn with_checksums(mut self, verify: bool) -> CacheReader {
        self.verify_checksums = verify;
        self
    }

    /// Keeps at most `bound` segments open once the cache has more
    /// ([`crate::ArrowOptions::max_open_segments`]). A bound other than the current one closes
    /// the segments opened so far.
    pub fn with_max_open_segments(mut self, bound: usize) -> CacheReader {
        if bound != self.open.bound() {
            self.open = OpenSegments::new(self.segments.len(), bound);
        }
        self
    }

    /// Whether `get` and `get_batch` tell the kernel ahead of time which pages they will read
    /// ([`crate::ArrowOptions::cold_read_advice`]; adaptive by default).
    pub fn with_cold_read_advice(mut self, advice: ColdReadAdvice) -> CacheReader {
        self.advisor = ColdReadAdvisor::new(advice);
        self
    }

    /// Segments open now (mapped, with their row checksums).
    pub fn open_segment_count(&self) -> usize {
        self.open.open_count()
    }

    /// Treats a segment without a row checksum file as damaged (for caches stowage wrote, where
    /// every segment has one) instead of as a torchcachex segment read unchecked.
    pub fn requiring_checksums(mut self) -> CacheReader {
        self.checksums_required = true;
        self
    }

    /// Every segment this reader reads: (id, path), in id order.
    pub fn segment_paths(&self) -> impl Iterator<Item = (u64, &Path)> {
        self.segments.iter().map(|s| (s.id, s.path.as_path()))
    }

    /// Every segment this reader reads with who wrote it: (id, path, origin), in id order.
    pub fn segment_origins(&self) -> impl Iterator<Item = (u64, &Path, SegmentOrigin)> {
        self.segments.iter().map(|s| (s.id, s.path.as_path(), s.origin))
    }

    /// How bytes fields are read: the cache's [`BlobEncoding`] (verbatim pickles for a cache
    /// torchcachex wrote, opened with [`CacheReader::open`]).
    pub fn blob_encoding(&self) -> BlobEncoding {
        self.encoding
    }

    /// Checks every row stowage did not write (an adopted or another writer's segment) against
    /// `schema`, the cache's: a row that does not fit is an error naming the key, field and both
    /// sides, never a sample outside the schema. A bfloat16 field that another writer stored as
    /// plain `uint16` (torchcachex writes `schema.json`'s types, which cannot name bfloat16)
    /// reads as bfloat16 bits.
    pub fn with_schema(mut self, schema: Schema) -> CacheReader {
        self.schema = Some(schema);
        self
    }

    /// The cache directory's layout.
    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    /// How samples are split into columns: `schema.json`'s, else inferred from the first segment.
    pub fn output_structure(&self) -> Result<OutputStructure> {
        match (self.structure, self.segments.is_empty()) {
            (Some(structure), _) => Ok(structure),
            (None, true) => Ok(OutputStructure::Tensor),
            (None, false) => Ok(infer_structure(self.segment(0)?.segment())),
        }
    }

    /// Number of distinct keys: the runs' keys new to each, plus the distinct keys of the newer
    /// segments no run holds (counted on the first call, then remembered).
    pub fn len(&self) -> usize {
        *self.len.get_or_init(|| {
            let mut new_keys: HashSet<String> = HashSet::new();
            for (position, _) in &self.recent {
                // Opened and read when indexed, so its keys read.
                let Ok(segment) = self.segment(*position) else { continue };
                let keys = segment.segment().keys().unwrap_or_default();
                new_keys.extend(keys.into_iter().map(str::to_owned));
            }
            // A key whose runs' candidate does not read counts as new here (`len` cannot fail);
            // its `get` reports the unreadable segment.
            let in_runs = |key: &&String| {
                self.runs.iter().any(|run| {
                    matches!(run.try_find(key, |id, row| self.key_is(id, row, key)), Ok(Some(_)))
                })
            };
            let new = new_keys.iter().filter(|k| !in_runs(k)).count();
            self.runs.iter().map(|run| run.new_keys() as usize).sum::<usize>() + new
        })
    }

    /// Whether the cache holds no key.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Every key, each once, in segment and row order of its first row (the order of first
    /// put). Another writer's segment that does not read is skipped (as by lookups).
    pub fn keys(&self) -> Result<Vec<String>> {
        let mut keys = Vec::new();
        let mut seen: HashSet<String> = HashSet::new();
        for position in 0..self.segments.len() {
            let foreign = self.segments[position].origin.is_foreign();
            let open = match self.segment(position) {
                Err(_) if foreign => continue,
                other => other?,
            };
            let segment_keys = match open.segment().keys() {
                Err(_) if foreign => continue,
                other => other?,
            };
            for key in segment_keys {
                if !seen.contains(key) {
                    seen.insert(key.to_owned());
                    keys.push(key.to_owned());
                }
            }
        }
        Ok(keys)
    }

    /// The segment id and row holding the winning value of `key`: the highest segment id
    /// holding it, its last row there.
    ///
    /// Errors: [`Error::Corrupted`] (or the I/O error) of a segment that does not read while a
    /// candidate row in it is confirmed, naming `key`: a covered key is never reported absent
    /// because its segment is damaged.
    pub fn locate(&self, key: &str) -> Result<Option<(u64, usize)>> {
        self.locate_confirmed(key, |id, row| self.key_is(id, row, key))
    }

    /// As [`CacheReader::locate`], each candidate (segment id, row) confirmed by `confirm`.
    fn locate_confirmed(
        &self,
        key: &str,
        mut confirm: impl FnMut(u64, usize) -> Result<bool>,
    ) -> Result<Option<(u64, usize)>> {
        let mut best = None;
        for (position, sidecar) in &self.recent {
            let id = self.segments[*position].id;
            if let Some(row) = sidecar.try_find(key, |row| confirm(id, row))? {
                best = Some((id, row));
                break;
            }
        }
        // The sidecars are probed newest first, and without another writer's segments every one
        // is newer than every run: the loop then ends at once. Runs are disjoint and ordered, so
        // the first one holding the key holds its newest row among them.
        for run in self.runs.iter().rev() {
            if best.is_some_and(|(id, _)| id > run.through()) {
                break;
            }
            if let Some(found) = run.try_find(key, &mut confirm)? {
                if best.is_none_or(|(id, _)| found.0 > id) {
                    best = Some(found);
                }
                break;
            }
        }
        Ok(best)
    }

    /// The sample stored under `key`, `Ok(None)` when absent. Tensors share the segment's map.
    ///
    /// Errors: [`Error::Corrupted`] naming the segment, the key and the column when the row
    /// cannot be a sample (a shape that does not match its values, a null inside a tensor), or
    /// when the segment holding it is damaged.
    pub fn get(&self, key: &str) -> Result<Option<Sample>> {
        // A candidate is confirmed by reading its row (see `read_if_key`), and the row read
        // for the winning candidate is the answer: one visit of the segment, not two.
        let mut read: Option<((u64, usize), Sample)> = None;
        let found = self.locate_confirmed(key, |id, row| {
            let sample = self.read_if_key(key, id, row)?;
            let confirmed = sample.is_some();
            if let Some(sample) = sample {
                read = Some(((id, row), sample));
            }
            Ok(confirmed)
        })?;
        match (found, read) {
            (Some(at), Some((read_at, sample))) if at == read_at => Ok(Some(sample)),
            (Some((id, row)), _) => self.read_row(key, id, row).map(Some),
            (None, _) => Ok(None),
        }
    }

    /// The sample of row `row` of segment `id` if that row holds `key`, `Ok(None)` if it holds
    /// another key (or the segment is not listed, or has no such row). A row of stowage's with
    /// checksums verified is read and checked against its checksum computed with `key` (which
    /// it covers); only when they differ is the stored key read, to tell another key's row from
    /// damage to this key's (the error). Other rows compare the stored key first.
    ///
    /// Errors: as [`CacheReader::read_row`] for a row holding `key`; the segment does not read.
    fn read_if_key(&self, key: &str, id: u64, row: usize) -> Result<Option<Sample>> {
        let Some(position) = self.position(id) else { return Ok(None) };
        let open = self.segment_for_row(position, row).map_err(|e| e.for_key(key))?;
        let checked = self.verify_checksums
            && self.segments[position].origin.is_stowage()
            && matches!(open.sums, Ok(Some(_)));
        // The open segment is passed on: in a bounded set, looking it up again would take the
        // set's lock a second time.
        if !checked || row >= open.segment().rows() {
            return match open.segment().key(row) == Some(key) {
                true => self.read_open_row(key, position, &open, row).map(Some),
                false => Ok(None),
            };
        }
        match self.read_open_row(key, position, &open, row) {
            Ok(sample) => Ok(Some(sample)),
            Err(e) if open.segment().key(row) == Some(key) => Err(e),
            Err(_) => Ok(None),
        }
    }

    /// The samples of `keys`, in order (`None` for a missing key), read segment by segment in
    /// row order so that each segment's pages are visited together.
    ///
    /// Lookups and reads are software-pipelined: what the lookup of a key a few places ahead will
    /// read (its slot in each key index run, then the key that confirms it) and what the read of a
    /// row a few places ahead will decode (its offsets, then its values and checksum) is requested
    /// from memory while the current one is worked on, so the cache misses of a random batch
    /// overlap instead of following one another.
    ///
    /// Errors: as [`CacheReader::get`], for the first key that fails.
    pub fn get_batch(&self, keys: &[&str]) -> Result<Vec<Option<Sample>>> {
        self.advise_lookups(keys);
        let mut located: Vec<(u64, usize, usize)> = Vec::with_capacity(keys.len());
        let lookup = [LookupStage::Slot, LookupStage::KeyOffsets, LookupStage::KeyBytes];
        let prefetch_lookup = |stage: usize, key: &&str| self.prefetch_lookup(key, lookup[stage]);
        pipelined(keys, lookup.len(), prefetch_lookup, |at, key| {
            if let Some((id, row)) = self.locate(key)? {
                located.push((id, row, at));
            }
            Ok(())
        })?;
        located.sort_unstable();
        self.advise_reads(&located);
        let mut samples = vec![None; keys.len()];
        // Stage 0 brings the row's offsets, stage 1 its values and checksum.
        let prefetch_read = |stage: usize, &(id, row, _): &(u64, usize, usize)| {
            self.prefetch_read(id, row, stage == 1)
        };
        pipelined(&located, 2, prefetch_read, |_, &(id, row, at)| {
            samples[at] = Some(self.read_row(keys[at], id, row)?);
            Ok(())
        })?;
        Ok(samples)
    }

    /// Before the lookups of a batch: when a sample of their pages is missing from the page cache
    /// ([`ColdReadAdvisor`]), asks the kernel for them in the order they become known (each
    /// step's pages are all requested before any is read, so a cold batch keeps many reads in
    /// flight): every run's first slot for each key; then what opening the candidates' segments
    /// that are not open reads (their ends and row checksums), those segments opened (when no
    /// more than the bound, so that none closes another); then the key offsets of each key's
    /// first candidate in the newest run holding one, then that key's bytes.
    fn advise_lookups(&self, keys: &[&str]) {
        if self.runs.is_empty() || self.advisor.policy() == ColdReadAdvice::Never {
            return;
        }
        let outcome = self.advisor.before_batch_rows(keys.len(), |i, plan| {
            self.runs.iter().for_each(|run| run.plan_slot(keys[i], plan));
        });
        if outcome.runs_advised == 0 {
            return;
        }
        let first: Vec<(usize, usize)> = keys
            .iter()
            .filter_map(|key| self.runs.iter().rev().find_map(|run| run.first_candidate(key)))
            .filter_map(|(id, row)| Some((self.position(id)?, row)))
            .collect();
        // Segments not open yet: the parts their opening reads, asked for together, then
        // opened (each open waits only for its own reads, already under way).
        let mut closed: Vec<(usize, Option<usize>)> = first
            .iter()
            .filter(|&&(p, _)| self.open.get_if_open(p).is_none())
            .map(|&(position, row)| (position, Some(row)))
            .collect();
        closed.sort_unstable();
        closed.dedup_by_key(|(position, _)| *position);
        if closed.len() <= self.open.bound() {
            self.open_together(&closed);
        }
        let candidates: Vec<(Opened<'_, OpenSegment>, usize)> = first
            .iter()
            .filter_map(|&(position, row)| Some((self.open.get_if_open(position)?, row)))
            .collect();
        for bytes in [false, true] {
            let mut plan = PagePlan::with_capacity(candidates.len());
            for (open, row) in &candidates {
                open.segment().plan_key(*row, bytes, &mut plan);
            }
            plan.advise();
        }
    }

    /// Before the reads of a batch (`located`: segment id, row, place in the batch): when a
    /// sample of their pages is missing, asks the kernel for every row's list offsets and
    /// checksum, then for its values and dims.
    fn advise_reads(&self, located: &[(u64, usize, usize)]) {
        if located.is_empty() || self.advisor.policy() == ColdReadAdvice::Never {
            return;
        }
        let opened: Vec<(Opened<'_, OpenSegment>, usize)> = located
            .iter()
            .filter_map(|&(id, row, _)| {
                Some((self.position(id).and_then(|p| self.open.get_if_open(p))?, row))
            })
            .collect();
        let outcome = self.advisor.before_batch_rows(opened.len(), |i, plan| {
            let (open, row) = &opened[i];
            open.segment().plan_row(*row, false, plan);
            let Some((batch, at)) = open.segment().locate(*row) else { return };
            crate::decode::plan_offsets(batch, at, &open.groups, plan);
            if let Ok(Some(sums)) = &open.sums {
                sums.plan(*row, plan);
            }
        });
        if outcome.runs_advised == 0 {
            // The offsets and checksums are in memory, which says little of the values: the
            // decoder read every offset when the segment opened, and the values of a segment
            // larger than the kernel's read-around may be on disk. They are probed on their own.
            self.advisor.before_batch_rows(opened.len(), |i, plan| {
                let (open, row) = &opened[i];
                open.segment().plan_row(*row, true, plan);
                if let Some((batch, at)) = open.segment().locate(*row) {
                    crate::decode::plan_values(batch, at, &open.groups, plan);
                }
            });
            return;
        }
        let mut plan = PagePlan::with_capacity(opened.len());
        for (open, row) in &opened {
            open.segment().plan_row(*row, true, &mut plan);
            if let Some((batch, at)) = open.segment().locate(*row) {
                crate::decode::plan_values(batch, at, &open.groups, &mut plan);
            }
        }
        plan.advise();
    }

    /// Prefetches one stage of the lookup of `key` in the key index runs (see
    /// [`CacheReader::get_batch`]): its slot in every run, then the key of the newest run's
    /// candidate; the sidecars of recent segments are not prefetched.
    fn prefetch_lookup(&self, key: &str, stage: LookupStage) {
        if stage == LookupStage::Slot {
            return self.runs.iter().rev().for_each(|run| run.prefetch(key));
        }
        let Some((id, row)) = self.runs.iter().rev().find_map(|run| run.first_candidate(key))
        else {
            return;
        };
        let Some(open) = self.position(id).and_then(|p| self.open.get_if_open(p)) else { return };
        open.segment().prefetch_key(row, stage == LookupStage::KeyBytes);
    }

    /// Prefetches the offsets (or, with `values`, the values and checksum) of row `row` of
    /// segment `id` (see [`CacheReader::get_batch`]).
    fn prefetch_read(&self, id: u64, row: usize, values: bool) {
        let Some(open) = self.position(id).and_then(|p| self.open.get_if_open(p)) else { return };
        if values && let Ok(Some(sums)) = &open.sums {
            sums.prefetch(row);
        }
        if open.segment().by_rows().is_some() {
            return open.segment().prefetch_row(row, values);
        }
        let Some((batch, at)) = open.segment().locate(row) else { return };
        if values {
            crate::decode::prefetch_values(batch, at, &open.groups);
        } else {
            crate::decode::prefetch_offsets(batch, at, &open.groups);
        }
    }

    /// Row `row` of segment `id`, which holds `key`, checked against its row checksum (and,
    /// for a row stowage did not write, against the schema given to [`CacheReader::with_schema`]).
    pub(crate) fn read_row(&self, key: &str, id: u64, row: usize) -> Result<Sample> {
        let position = self.position(id).expect("located in a listed segment");
        let open = self.segment(position).map_err(|e| e.for_key(key))?;
        self.read_open_row(key, position, &open, row)
    }

    /// [`CacheReader::read_row`] of segment `position`, open as `open`.
    fn read_open_row(
        &self,
        key: &str,
        position: usize,
        open: &OpenSegment,
        row: usize,
    ) -> Result<Sample> {
        let origin = self.segments[position].origin;
        let (segment, groups, sums) = (open.segment_for_row(), &open.groups, &open.sums);
        if segment.by_rows().is_some() && self.advisor.get_wants_probe() {
            // A cold row read row by row: its offsets, where its values lie when its batch's rows
            // are of one size, and its checksum, asked for together (one round, not three).
            let mut plan = PagePlan::new();
            segment.plan_row(row, false, &mut plan);
            if let Ok(Some(sums)) = sums {
                sums.plan(row, &mut plan);
            }
            // Not `before_get`: its test for a sequential scan would take the row's pages, just
            // after the checksum file's header it probed at the open, for one.
            let runs = plan.run_count();
            if self.advisor.policy() != ColdReadAdvice::Never && plan.missing_in_sample(runs) > 0 {
                plan.advise();
            }
        }
        let (batch, at) = segment
            .row(row)
            .map_err(|why| {
                Error::corrupted(segment.path(), format!("row {row}: {why}")).for_key(key)
            })?
            .expect("located rows exist");
        // Stowage stores only pickles of bytes: in a row it wrote and checksummed, another
        // pickle is damage (the checksum, over the decoded row, cannot be computed to say so).
        let checksummed =
            self.verify_checksums && origin.is_stowage() && matches!(sums, Ok(Some(_)));
        let sample = decode_row(&batch, at, groups).map_err(|e| match e {
            DecodeError::Damaged(why) => {
                Error::corrupted(segment.path(), format!("row {row}: {why}")).for_key(key)
            }
            DecodeError::Unsupported(why) if checksummed => Error::corrupted(
                segment.path(),
                format!("row {row}: {why}, in a row stowage wrote (it stores pickles of bytes)"),
            )
            .for_key(key),
            DecodeError::Unsupported(why) => Error::unsupported(
                crate::BACKEND_NAME,
                format!(
                    "reading key {key:?} (row {row}) of {}: {why}; torchcachex, or \
                     CacheReader::open, returns the stored pickle",
                    segment.path().display()
                ),
            ),
        })?;
        let sample = match (&self.schema, origin.is_stowage()) {
            (Some(schema), false) => {
                conform(sample, schema).map_err(|why| Error::Incompatible {
                    path: segment.path().to_path_buf(),
                    detail: format!("key {key:?} (row {row}), written by another writer: {why}"),
                })?
            }
            _ => sample,
        };
        let sums = match sums {
            Ok(sums) => sums.as_ref().filter(|_| self.verify_checksums),
            Err((path, why)) if self.verify_checksums => {
                return Err(Error::corrupted(path, format!("row {row}: {why}")).for_key(key));
            }
            Err(_) => None,
        };
        if let Some(sums) = sums {
            let (stored, actual) = (sums.get(row), row_sums::of_sample(key, &sample));
            if stored != Some(actual) {
                let detail = format!(
                    "row {row}: checksum {actual:016x}, {} records {}",
                    sums.path().display(),
                    stored.map_or("none".into(), |s| format!("{s:016x}"))
                );
                return Err(Error::corrupted(segment.path(), detail).for_key(key));
            }
        }
        Ok(sample)
    }

    /// Whether row `row` of segment `id` holds `key`; false when the segment is not listed or
    /// has no such row (a damaged slot: the lookup goes on).
    ///
    /// Errors: the segment does not read (named with `key`).
    fn key_is(&self, id: u64, row: usize, key: &str) -> Result<bool> {
        let Some(position) = self.position(id) else { return Ok(false) };
        let open = self.segment(position).map_err(|e| e.for_key(key))?;
        Ok(open.segment().key(row) == Some(key))
    }

    fn position(&self, id: u64) -> Option<usize> {
        self.segments.binary_search_by_key(&id, |s| s.id).ok()
    }

    /// Segment `position`, its column groups and row checksums: open, or opened now.
    fn segment(&self, position: usize) -> Result<Opened<'_, OpenSegment>> {
        self.open.get_or_open(position, || self.open_segment(position, false, None))
    }

    /// [`CacheReader::segment`] for a read of row `row`: a cold open asks for the row's pages
    /// with the segment's ends and checksums, where the last segment opened row by row of the
    /// same size has them (see [`CacheReader::open_segment`]).
    fn segment_for_row(&self, position: usize, row: usize) -> Result<Opened<'_, OpenSegment>> {
        self.open.get_or_open(position, || self.open_segment(position, false, Some(row)))
    }

    /// Segments `positions` (not open, at most the bound of the open set), opened before a
    /// cold batch reads them: on up to [`stowage_core::cold_reads::OPEN_THREADS`] threads when there are at least
    /// [`PARALLEL_OPENS`], so that their cold reads (directory entries, inodes, each file's
    /// read-around and its checksums) are in flight together rather than one file after
    /// another. A segment that does not open is left closed: the read that needs it opens it
    /// again and reports why. Each position comes with the row the batch reads first there, if
    /// known: its pages are asked for with the segment's (see [`CacheReader::open_segment`]).
    fn open_together(&self, positions: &[(usize, Option<usize>)]) {
        if positions.len() < PARALLEL_OPENS {
            for &(p, _) in positions {
                Segment::will_open(&self.segments[p].path);
                Segment::will_open(&row_sums::sums_path(&self.segments[p].path));
            }
            positions.iter().for_each(|&(p, _)| drop(self.segment(p)));
            return;
        }
        each_on_threads(positions, |&(position, row)| {
            drop(self.open.get_or_open(position, || self.open_segment(position, true, row)));
        });
    }

    /// Opens segment `position` with its column groups and row checksums. A checksum file of
    /// at most [`row_sums::READ_WHOLE`] bytes is asked for whole before its header is read when
    /// `cold` (a cold batch's opens), or when the advisor's probe of it finds it missing (a
    /// single read's open: probed at every open while reads are cold, at one in
    /// [`stowage_core::cold_reads::GET_PROBE_EVERY`] while warm, so that the reopens of a
    /// bounded set of open segments pay no system call for it).
    ///
    /// With `row` (a single read's open), the pages of that row are asked for in the same
    /// request, where the last segment opened row by row (`template`) has them when this one is
    /// as long: a writer's segments of as many rows of one size are laid out alike, so a cold get
    /// waits for one round of reads (ends, checksums and row together) instead of three (ends
    /// and checksums, then the row's offsets, then its values). A hint only: the row is read
    /// through its own metadata and checked as any other.
    fn open_segment(&self, position: usize, cold: bool, row: Option<usize>) -> Result<OpenSegment> {
        let slot = &self.segments[position];
        let mapped = MappedSegment::open(slot.id, &slot.path)?;
        let sums_path = row_sums::sums_path(&slot.path);
        // The segment's ends (footer, batch metadata) are asked for in the same request as the
        // checksums: one round for both files.
        let advise = |map: &[u8]| {
            if map.len() > row_sums::READ_WHOLE {
                return;
            }
            let mut plan = PagePlan::new();
            plan.add_whole(map);
            mapped.plan_open(&mut plan);
            let template = self.template.lock().map(|t| t.clone()).ok().flatten();
            // Segments of one writer differ by a few bytes (the id in their metadata): the
            // guess is widened by the difference.
            if let (Some(row), Some((len, template))) = (row, template)
                && len.abs_diff(mapped.file_len()) <= TEMPLATE_SLACK
            {
                let slack = len.abs_diff(mapped.file_len());
                template.row_file_ranges(row, |range| {
                    let end = range.end.saturating_add(slack).min(mapped.file_len());
                    let _ = plan.add(mapped.bytes(), range.start.saturating_sub(slack)..end);
                });
            }
            if cold && self.advisor.policy() != ColdReadAdvice::Never {
                plan.advise();
            } else if self.advisor.get_wants_probe() {
                self.advisor.before_get(&mut plan);
            }
        };
        // Another writer's segment has no checksums; a sidecar file beside it is not vouched for.
        let opened = (!slot.origin.is_foreign()).then(|| RowSums::open_advised(&sums_path, advise));
        // A segment with row checksums is read row by row: opening it parses its footer and
        // metadata only, and each row read is checked for structure, then against its checksum,
        // which covers all a read returns (`MappedSegment::by_rows`). Without checksums (another
        // writer's, torchcachex's) it is decoded and checked whole.
        let len = mapped.file_len();
        let segment = match opened {
            Some(Ok(_)) => mapped.by_rows()?,
            _ => mapped.decode()?,
        };
        if let (Some(layout), Ok(mut template)) = (segment.by_rows(), self.template.lock()) {
            *template = Some((len, layout.clone()));
        }
        let groups =
            self.groups_of(&segment).map_err(|why| Error::corrupted(segment.path(), why))?;
        let sums = match opened {
            None => Ok(None),
            Some(Ok(sums)) if sums.rows() == segment.rows() => Ok(Some(sums)),
            Some(Ok(sums)) => Err((
                sums_path,
                format!("{} checksums for the {} rows of its segment", sums.rows(), segment.rows()),
            )),
            Some(Err(Error::Io { source, .. }))
                if source.kind() == std::io::ErrorKind::NotFound && !self.checksums_required =>
            {
                Ok(None)
            }
            Some(Err(e)) => Err((sums_path, e.to_string())),
        };
        Ok(OpenSegment {
            first: segment,
            groups,
            sums,
            whole: OnceLock::new(),
            row_reads: 0.into(),
        })
    }
}

impl CacheReader {
    /// The sample fields `segment`'s columns hold, under this cache's structure and encoding.
    pub(crate) fn groups_of(
        &self,
        segment: &Segment,
    ) -> std::result::Result<Vec<ColumnGroup>, String> {
        let structure = self.structure.unwrap_or_else(|| infer_structure(segment));
        column_groups_for(segment.schema(), structure, self.encoding)
    }

    /// The schema rows stowage did not write are checked against, if any.
    pub(crate) fn schema(&self) -> Option<&Schema> {
        self.schema.as_ref()
    }
}

/// `sample`, a row stowage did not write, as a sample of `schema`: bfloat16 fields stored as
/// plain `uint16` reinterpreted, then checked.
///
/// Errors: text naming the field and both sides when it does not fit.
pub(crate) fn conform(mut sample: Sample, schema: &Schema) -> std::result::Result<Sample, String> {
    for field in &schema.fields {
        let stowage_core::FieldKind::Tensor { dtype: DType::BF16, .. } = field.kind else {
            continue;
        };
        if let Some(Value::Tensor(tensor)) = sample.get(&field.name)
            && tensor.dtype() == DType::U16
        {
            let bits = tensor.to_shared_bytes();
            let tensor = Tensor::shared(DType::BF16, tensor.shape().to_vec(), bits)
                .map_err(|e| e.to_string())?;
            sample.insert(field.name.as_str(), tensor);
        }
    }
    schema.validate(&sample).map_err(|e| match e {
        Error::SchemaMismatch { field, detail } => format!(
            "field {field:?}: {detail} (the cache's schema; torchcachex stores a missing value \
             as [] or b\"\", which reads as null)"
        ),
        other => other.to_string(),
    })?;
    Ok(sample)
}

/// A stage of the prefetched lookup of a key in the key index runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum LookupStage {
    /// The slot the probe starts at.
    Slot,
    /// The offsets of the key its first candidate names.
    KeyOffsets,
    /// That key's bytes.
    KeyBytes,
}

/// Items between two prefetch stages of a pipelined loop: far enough for a load from memory to
/// land, near enough for what it brings to stay in the L1 cache.
const PREFETCH_DISTANCE: usize = 4;

/// Calls `work(position, item)` on each item in order, having called `prefetch(k, item)` for
/// every stage `k` of `stages` on the item `(stages - k) * PREFETCH_DISTANCE` places ahead: stage
/// 0 runs furthest ahead, and by the time an item is worked on every stage has run on it.
fn pipelined<T>(
    items: &[T],
    stages: usize,
    prefetch: impl Fn(usize, &T),
    mut work: impl FnMut(usize, &T) -> Result<()>,
) -> Result<()> {
    let lead = stages * PREFETCH_DISTANCE;
    for step in 0..items.len() + lead {
        for stage in 0..stages {
            if let Some(item) =
                step.checked_sub(stage * PREFETCH_DISTANCE).and_then(|i| items.get(i))
            {
                prefetch(stage, item);
            }
        }
        if let Some(position) = step.checked_sub(lead) {
            work(position, &items[position])?;
        }
    }
    Ok(())
}

/// The structure a segment's columns imply when `schema.json` cannot tell.
fn infer_structure(segment: &Segment) -> OutputStructure {
    let has = |name: &str| segment.schema().fields().iter().any(|f| f.name() == name);
    let item = segment.schema().fields().iter().any(|f| f.name().starts_with("item0_"));
    match (has("data"), has("blob"), item) {
        (true, _, _) => OutputStructure::Tensor,
        (_, true, _) => OutputStructure::Blob,
        (_, _, true) => OutputStructure::Tuple,
        _ => OutputStructure::Dict,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `read_if_key`, with checksums verified or not: the row of the key asked for is read,
    /// another key's row is `None` (the lookup goes on), and so is a row or segment that does
    /// not exist (a damaged slot's candidate).
    #[test]
    fn read_if_key_confirms_the_row_of_the_key_asked_for_only() {
        use stowage_core::{Backend, DType, ShapeRule, Tensor};
        let dir = tempfile::tempdir().unwrap();
        let schema = stowage_core::Schema::new().tensor("x", DType::U32, ShapeRule::Fixed(vec![1]));
        let sample = |v: u32| Sample::new().with("x", Tensor::from_slice(&[1], &[v]).unwrap());
        let options = crate::ArrowOptions { rank: Some(0), ..Default::default() };
        let mut cache = crate::ArrowBackend::create(dir.path(), &schema, options).unwrap();
        cache.put("a", &sample(1)).unwrap();
        cache.put("b", &sample(2)).unwrap();
        cache.finalize().unwrap();
        drop(cache);
        for verify in [true, false] {
            let reader = CacheReader::open(dir.path()).unwrap().with_checksums(verify);
            let (id, row_a) = reader.locate("a").unwrap().unwrap();
            let (_, row_b) = reader.locate("b").unwrap().unwrap();
            assert_eq!(reader.read_if_key("a", id, row_a).unwrap(), Some(sample(1)), "{verify}");
            assert_eq!(reader.read_if_key("b", id, row_b).unwrap(), Some(sample(2)), "{verify}");
            assert_eq!(reader.read_if_key("b", id, row_a).unwrap(), None, "{verify}");
            assert_eq!(reader.read_if_key("a", id, 7).unwrap(), None, "no such row");
            assert_eq!(reader.read_if_key("a", id + 100, 0).unwrap(), None, "no such segment");
            assert_eq!(reader.get("a").unwrap(), Some(sample(1)));
        }
    }

    /// A finished cache of `segments` segments of 10 keys each (`k<i>`, `x` = [i]), one key
    /// index run over all of them.
    fn cache_of_segments(dir: &Path, segments: usize) -> Vec<Sample> {
        use stowage_core::{Backend, DType, ShapeRule, Tensor};
        let schema = stowage_core::Schema::new().tensor("x", DType::U32, ShapeRule::Fixed(vec![1]));
        let options = crate::ArrowOptions { rank: Some(0), flush_every: 10, ..Default::default() };
        let mut cache = crate::ArrowBackend::create(dir, &schema, options).unwrap();
        let samples: Vec<Sample> = (0..segments as u32 * 10)
            .map(|v| Sample::new().with("x", Tensor::from_slice(&[1], &[v]).unwrap()))
            .collect();
        for (i, sample) in samples.iter().enumerate() {
            cache.put(&format!("k{i}"), sample).unwrap();
        }
        cache.finalize().unwrap();
        samples
    }

    /// A cold batch opens the segments its keys' candidates lie in before reading them (on
    /// threads, [`CacheReader::open_together`]), all of them when they read; one that does not
    /// is left closed, and the batch that needs it reports it, never another row.
    #[test]
    fn a_cold_batch_opens_its_segments_together_and_a_damaged_one_is_its_reads_error() {
        let dir = tempfile::tempdir().unwrap();
        let samples = cache_of_segments(dir.path(), 12);
        let keys: Vec<String> = (0..samples.len()).map(|i| format!("k{i}")).collect();
        let keys: Vec<&str> = keys.iter().map(String::as_str).collect();
        let open = |advice| CacheReader::open(dir.path()).unwrap().with_cold_read_advice(advice);
        let reader = open(ColdReadAdvice::Always);
        assert_eq!((reader.runs.len(), reader.open_segment_count()), (1, 0));
        reader.advise_lookups(&keys);
        assert_eq!(reader.open_segment_count(), 12, "every segment of the batch opened first");
        let read = reader.get_batch(&keys).unwrap();
        assert_eq!(read, samples.iter().cloned().map(Some).collect::<Vec<_>>());
        // Never: the batch opens them as its reads come to them.
        let reader = open(ColdReadAdvice::Never);
        reader.advise_lookups(&keys);
        assert_eq!(reader.open_segment_count(), 0);
        assert_eq!(reader.get_batch(&keys).unwrap().len(), keys.len());

        let damaged = reader.segments[5].path.clone();
        let bytes = std::fs::read(&damaged).unwrap();
        std::fs::write(&damaged, &bytes[..bytes.len() / 2]).unwrap();
        for advice in [ColdReadAdvice::Always, ColdReadAdvice::Adaptive, ColdReadAdvice::Never] {
            let reader = open(advice);
            reader.open_together(&(0..12).map(|p| (p, None)).collect::<Vec<_>>());
            assert_eq!(reader.open_segment_count(), 11, "{advice:?}");
            let err = reader.get_batch(&keys).unwrap_err();
            assert!(matches!(err, Error::Corrupted { ref path, .. } if *path == damaged), "{err}");
            let rest: Vec<&str> = keys
                .iter()
                .copied()
                .filter(|k| !(50..60).contains(&k[1..].parse::<usize>().unwrap()))
                .collect();
            let read = reader.get_batch(&rest).unwrap();
            assert_eq!(read.len(), rest.len());
            for (key, got) in rest.iter().zip(read) {
                assert_eq!(got.as_ref(), Some(&samples[key[1..].parse::<usize>().unwrap()]));
            }
        }
    }

    /// A segment's row checksums, asked for whole when it opens cold (`row_sums::READ_WHOLE`),
    /// still decide: a damaged checksum is the get's error, whatever the advice, and a row whose
    /// checksum holds reads.
    #[test]
    fn checksums_read_whole_still_decide_every_get() {
        let dir = tempfile::tempdir().unwrap();
        let samples = cache_of_segments(dir.path(), 3);
        let open = |advice| CacheReader::open(dir.path()).unwrap().with_cold_read_advice(advice);
        for advice in [ColdReadAdvice::Always, ColdReadAdvice::Never] {
            let reader = open(advice);
            assert_eq!(reader.get("k12").unwrap().as_ref(), Some(&samples[12]), "{advice:?}");
            assert_eq!(reader.open_segment_count(), 1);
            assert!(matches!(reader.segment(1).unwrap().sums, Ok(Some(_))), "checksums opened");
        }
        // Row 2 of segment 1 (key k12) checksummed as another value.
        let sums = row_sums::sums_path(&open(ColdReadAdvice::Never).segments[1].path);
        let mut bytes = std::fs::read(&sums).unwrap();
        let at = bytes.len() - 8 * 8;
        bytes[at] ^= 1;
        std::fs::write(&sums, &bytes).unwrap();
        for advice in [ColdReadAdvice::Always, ColdReadAdvice::Never] {
            let reader = open(advice);
            let err = reader.get("k12").unwrap_err();
            assert!(matches!(err, Error::Corrupted { .. }), "{advice:?}: {err}");
            assert_eq!(reader.get("k11").unwrap().as_ref(), Some(&samples[11]), "{advice:?}");
        }
        std::fs::remove_file(&sums).unwrap();
        for advice in [ColdReadAdvice::Always, ColdReadAdvice::Never] {
            let err = open(advice).requiring_checksums().get("k12").unwrap_err();
            assert!(matches!(err, Error::Corrupted { .. }), "{advice:?}: {err}");
        }
    }

    /// Every dtype, shape, null, bytes and JSON field written by stowage reads back through
    /// segments opened row by row (they have row checksums), and each row of every segment is
    /// the same sample as the segment's whole decode gives, with the same key.
    #[test]
    fn rows_read_row_by_row_equal_the_whole_decode_for_every_kind_of_field() {
        use stowage_core::{Backend, OpenMode, Reader, ShapeRule};
        let dir = tempfile::tempdir().unwrap();
        let mut schema = Schema::new();
        for (i, dtype) in DType::ALL.into_iter().enumerate() {
            schema = schema.nullable_tensor(&format!("t{i:02}"), dtype, ShapeRule::Any);
        }
        let schema = schema.bytes("b").json("j", false);
        let sample = |r: usize| {
            let mut sample = Sample::new();
            for (i, dtype) in DType::ALL.into_iter().enumerate() {
                if (r + i).is_multiple_of(5) {
                    sample.insert(format!("t{i:02}").as_str(), Value::Null);
                    continue;
                }
                let shape = match r % 4 {
                    0 => vec![],
                    1 => vec![0],
                    2 => vec![r % 7 + 1],
                    _ => vec![2, r % 3 + 1],
                };
                let bytes: Vec<u8> = (0..shape.iter().product::<usize>() * dtype.item_size())
                    .map(|k| match dtype {
                        DType::Bool => ((k + r) % 2) as u8,
                        _ => (k * 31 + r * 7 + i) as u8,
                    })
                    .collect();
                let tensor = Tensor::new(dtype, shape, bytes).unwrap();
                sample.insert(format!("t{i:02}").as_str(), tensor);
            }
            sample
                .with("b", Value::Bytes(vec![r as u8; r].into()))
                .with("j", Value::Json(format!("{{\"r\":{r}}}")))
        };
        let options = crate::ArrowOptions { rank: Some(0), flush_every: 16, ..Default::default() };
        let mut cache = crate::ArrowBackend::create(dir.path(), &schema, options).unwrap();
        let samples: Vec<Sample> = (0..40).map(sample).collect();
        for (r, sample) in samples.iter().enumerate() {
            cache.put(&format!("k{r}"), sample).unwrap();
        }
        cache.finalize().unwrap();
        drop(cache);
        let options = crate::ArrowOptions { rank: Some(0), ..Default::default() };
        let cache = crate::ArrowBackend::open(dir.path(), OpenMode::ReadOnly, options).unwrap();
        for (r, sample) in samples.iter().enumerate() {
            assert_eq!(cache.get(&format!("k{r}")).unwrap().as_ref(), Some(sample), "k{r}");
        }
        let reader = CacheReader::open(dir.path()).unwrap();
        assert_eq!(reader.segments.len(), 3);
        let mut rows = 0;
        for position in 0..reader.segments.len() {
            let open = reader.segment(position).unwrap();
            assert!(open.first.by_rows().is_some(), "segment {position} opened row by row");
            let whole = open.first.decode_whole().unwrap();
            assert!(whole.by_rows().is_none());
            assert_eq!(open.first.rows(), whole.rows());
            assert_eq!(open.first.keys().unwrap(), whole.keys().unwrap());
            for row in 0..whole.rows() {
                let (batch, at) = open.first.row(row).unwrap().unwrap();
                let (whole_batch, whole_at) = whole.locate(row).unwrap();
                let read = decode_row(&batch, at, &open.groups).unwrap();
                assert_eq!(read, decode_row(whole_batch, whole_at, &open.groups).unwrap());
                assert_eq!(open.first.key(row), whole.key(row));
                rows += 1;
            }
            assert!(open.first.row(whole.rows()).unwrap().is_none(), "no row past the end");
        }
        assert_eq!(rows, samples.len());
    }

    /// The finished cache in `dir`, opened read-only (its reader knows how it stores bytes).
    fn open_backend(dir: &Path) -> Result<crate::ArrowBackend> {
        let options = crate::ArrowOptions { rank: Some(0), ..Default::default() };
        crate::ArrowBackend::open(dir, stowage_core::OpenMode::ReadOnly, options)
    }

    /// A cache of three rows in one segment (`x`: f32 tensors, `b`: bytes) and the samples.
    fn tiny_cache(dir: &Path) -> Vec<(String, Sample)> {
        use stowage_core::{Backend, ShapeRule};
        let schema = Schema::new().nullable_tensor("x", DType::F32, ShapeRule::Any).bytes("b");
        let options = crate::ArrowOptions { rank: Some(0), ..Default::default() };
        let mut cache = crate::ArrowBackend::create(dir, &schema, options).unwrap();
        let samples: Vec<(String, Sample)> = [
            ("a", Value::Tensor(Tensor::from_slice(&[2], &[1234.5f32, -7.25]).unwrap())),
            ("bb", Value::Null),
            ("ccc", Value::Tensor(Tensor::from_slice(&[1, 3], &[9.0f32, 8.0, 7.0]).unwrap())),
        ]
        .into_iter()
        .map(|(key, x)| {
            let b = Value::Bytes(key.as_bytes().repeat(3).into());
            (key.to_owned(), Sample::new().with("x", x).with("b", b))
        })
        .collect();
        for (key, sample) in &samples {
            cache.put(key, sample).unwrap();
        }
        cache.finalize().unwrap();
        samples
    }

    /// What every key of `samples` reads as from a reader of `dir` opened now: each must be its
    /// sample, absent (a damaged key hides its row) or `Corrupted`, never another value or a
    /// panic. Returns how many reads were `Corrupted` (the reader's open failing counts once).
    fn reads_are_right_or_corrupted(dir: &Path, samples: &[(String, Sample)], what: &str) -> usize {
        let backend = match open_backend(dir) {
            Ok(backend) => backend,
            Err(e) => {
                assert!(matches!(e, Error::Corrupted { .. }), "{what}: open: {e}");
                return 1;
            }
        };
        let reader = backend.reader();
        let mut corrupted = 0;
        for (key, sample) in samples {
            match reader.get(key) {
                Ok(Some(read)) => assert_eq!(&read, sample, "{what}: {key}"),
                Ok(None) => {}
                Err(e) => {
                    assert!(matches!(e, Error::Corrupted { .. }), "{what}: {key}: {e}");
                    corrupted += 1;
                }
            }
        }
        corrupted
    }

    /// Every single-bit flip of every byte of a small segment (footer, batch metadata, offsets,
    /// values) and of its row checksum file, read row by row: each read is the right sample,
    /// absent or `Corrupted`, never a panic or wrong data; a flipped value or stored checksum
    /// is `Corrupted` naming the segment and the key.
    #[test]
    fn every_flipped_byte_of_a_segment_read_row_by_row_is_corruption_or_the_right_row() {
        let dir = tempfile::tempdir().unwrap();
        let samples = tiny_cache(dir.path());
        let backend = open_backend(dir.path()).unwrap();
        let reader = backend.reader();
        assert_eq!(reader.get("a").unwrap().as_ref(), Some(&samples[0].1));
        assert!(reader.segment(0).unwrap().first.by_rows().is_some(), "read row by row");
        let segment = reader.segments[0].path.clone();
        let sums = row_sums::sums_path(&segment);
        drop(backend);
        assert_eq!(reads_are_right_or_corrupted(dir.path(), &samples, "intact"), 0);
        for path in [&segment, &sums] {
            let good = std::fs::read(path).unwrap();
            let mut corrupted = 0;
            for at in 0..good.len() {
                for bit in [0x01u8, 0x80] {
                    let mut bad = good.clone();
                    bad[at] ^= bit;
                    std::fs::write(path, &bad).unwrap();
                    let what = format!("{} byte {at} ^ {bit:#x}", path.display());
                    corrupted += reads_are_right_or_corrupted(dir.path(), &samples, &what);
                }
            }
            std::fs::write(path, &good).unwrap();
            assert!(corrupted > good.len() / 4, "{}: {corrupted} corrupted reads", path.display());
        }
        // The first value of key "a" (1234.5f32), flipped: that key's read is damage, named.
        let good = std::fs::read(&segment).unwrap();
        let value = 1234.5f32.to_le_bytes();
        let at = good.windows(4).position(|w| w == value).expect("the value is stored");
        let mut bad = good.clone();
        bad[at + 2] ^= 0x10;
        std::fs::write(&segment, &bad).unwrap();
        let backend = open_backend(dir.path()).unwrap();
        let reader = backend.reader();
        let err = reader.get("a").unwrap_err();
        assert!(
            matches!(&err, Error::Corrupted { path, key: Some(key), .. }
                if *path == segment && key == "a"),
            "{err}"
        );
        assert_eq!(reader.get("ccc").unwrap().as_ref(), Some(&samples[2].1), "another row reads");
    }

    /// A small segment cut at every length: reads are right, absent or `Corrupted`, never a
    /// panic.
    #[test]
    fn a_segment_cut_at_every_length_reads_right_or_corrupted() {
        let dir = tempfile::tempdir().unwrap();
        let samples = tiny_cache(dir.path());
        let segment = CacheReader::open(dir.path()).unwrap().segments[0].path.clone();
        let good = std::fs::read(&segment).unwrap();
        for len in 0..good.len() {
            std::fs::write(&segment, &good[..len]).unwrap();
            let corrupted =
                reads_are_right_or_corrupted(dir.path(), &samples, &format!("cut at {len}"));
            assert!(corrupted > 0, "cut at {len} of {}: nothing reported", good.len());
        }
    }

    /// Every item gets every stage, in stage order, before its work, and is worked on in order;
    /// a failed work stops the loop with its error.
    #[test]
    fn pipelined_runs_every_stage_on_every_item_before_its_work() {
        for len in [0, 1, 3, PREFETCH_DISTANCE, 2 * PREFETCH_DISTANCE + 1, 40] {
            let items: Vec<usize> = (0..len).collect();
            let events = std::cell::RefCell::new(Vec::new());
            let prefetch = |stage: usize, item: &usize| events.borrow_mut().push((*item, stage));
            pipelined(&items, 3, prefetch, |position, item| {
                assert_eq!(position, *item);
                events.borrow_mut().push((*item, 99));
                Ok(())
            })
            .unwrap();
            let events = events.into_inner();
            for item in 0..len {
                let of_item: Vec<usize> =
                    events.iter().filter(|(i, _)| *i == item).map(|(_, s)| *s).collect();
                assert_eq!(of_item, [0, 1, 2, 99], "item {item} of {len}");
            }
            let works: Vec<usize> =
                events.iter().filter(|(_, s)| *s == 99).map(|(i, _)| *i).collect();
            assert_eq!(works, items);
        }
        let failed = pipelined(
            &[1, 2, 3],
            1,
            |_, _| {},
            |_, item| match item {
                2 => Err(Error::invalid("stop")),
                _ => Ok(()),
            },
        );
        assert!(failed.unwrap_err().to_string().contains("stop"));
    }
}
