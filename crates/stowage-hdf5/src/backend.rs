//! The generic `Backend`: any stowage schema in segment files of the `/torch_cache` container
//! style ([`crate::segment`]), committed through a checksummed log ([`crate::commit_log`]).
//!
//! ```text
//! <dir>/stowage.log                  commit log: header with the schema, segments, finalize
//! <dir>/stowage.complete             record count at the last finalize
//! <dir>/segments/segment_<id>.h5     one HDF5 file per flush
//! <dir>/index/run_<first>_<through>.bin  key index runs over segment positions first..=through
//! <dir>/.stowage.lock                the writer lock
//! ```
//!
//! `put` buffers; `flush` writes the buffer as a new segment (temporary name, fsync, rename,
//! directory fsync), then appends and fsyncs its log record: the commit point. A flush costs its
//! own rows only. A later segment's row for a key replaces an earlier one (overwrite).
//!
//! The key index (key -> segment and row) is on disk: key index runs over most segments, plus the
//! keys of the few newest segments read at open ([`crate::key_index`]). Segment files are opened
//! through [`OpenSegments`]: at most [`Hdf5Options::max_open_segments`] at once, each checked
//! against the commit log on its first use by the handle (its metadata, `MetaRegions`; its rows
//! by their checksums as they are read).

use std::cell::Cell;
use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use stowage_core::cold_reads::{self, ColdReadAdvice, ColdReadAdvisor, PagePlan};
use stowage_core::file_safety::{
    AppendLog, WriterLock, create_dir_within, fsync_dir, refuse_symlink, remove_abandoned_temps,
};
use stowage_core::reader::batch_by_visiting;
use stowage_core::{
    Backend, BatchVisitor, Capabilities, DType, Error, Format, IoResultExt, OpenMode, Reader,
    Result, Sample, Schema, ValidationLevel, ValidationReport, WriteState,
};

use crate::Hdf5Options;
use crate::commit_log::{self, Committed, FinalizedMarker, Hdf5Record, Record, SegmentEntry};
use crate::error::BACKEND;
use crate::formats::STOWAGE_HDF5;
use crate::key_index::{KeyIndex, Location};
use crate::open_segments::OpenSegments;
use crate::publish::TempBeside;
use crate::segment::{self, Segment};

pub(crate) const LOG_NAME: &str = "stowage.log";
pub(crate) use stowage_core::segment_log::FINALIZED_MARKER_NAME;
const SEGMENTS: &str = "segments";

/// What the generic HDF5 backend supports: every dtype, shape rule and field kind, overwrite,
/// resume and append after finalize, per-row checksums; no zero-copy (values are copied out of
/// libhdf5). Readers may share a handle across threads; their libhdf5 calls are serialized by
/// hdf5-metno's global lock (Debian's libhdf5 is not thread-safe).
///
/// ```
/// assert!(stowage_hdf5::capabilities().checksums);
/// assert!(!stowage_hdf5::capabilities().zero_copy_get);
/// ```
pub fn capabilities() -> Capabilities {
    let mut capabilities = Capabilities::none();
    capabilities.variable_shapes = true;
    capabilities.ragged = true;
    capabilities.nullable = true;
    capabilities.bytes_fields = true;
    capabilities.json_fields = true;
    capabilities.overwrite = true;
    capabilities.append_after_finalize = true;
    capabilities.resume = true;
    capabilities.durable_flush = true;
    capabilities.checksums = true;
    capabilities.concurrent_readers = true;
    capabilities.dtypes = DType::ALL.to_vec();
    capabilities
}

pub(crate) fn segment_path(dir: &Path, id: u64) -> PathBuf {
    dir.join(SEGMENTS).join(format!("segment_{id:06}.h5"))
}

/// How a read reaches the segments it needs.
#[derive(Clone, Copy)]
enum Reach<'a> {
    /// Opens a segment that is not open (libhdf5's calls; may wait for other threads' opens).
    Open,
    /// Takes only segments open and read without libhdf5, found without waiting; sets the flag
    /// when one is not.
    IfReady(&'a Cell<bool>),
}

/// Whether `name` is a segment file's name, `segment_<digits>.h5`.
fn is_segment_name(name: &str) -> bool {
    let digits = name.strip_prefix("segment_").and_then(|rest| rest.strip_suffix(".h5"));
    digits.is_some_and(|d| !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit()))
}

/// What a writing handle holds: the commit log it appends to, under the writer lock.
struct LogWriter {
    log: AppendLog,
    _lock: WriterLock,
}

/// A generic stowage cache stored as HDF5 segments.
///
/// ```
/// use stowage_core::{Backend, DType, OpenMode, Reader, Sample, Schema, ShapeRule, Tensor};
/// use stowage_hdf5::Hdf5Backend;
/// let dir = tempfile::tempdir().map_err(|e| stowage_core::Error::io("tempdir", e))?;
/// let schema = Schema::new().tensor("x", DType::F64, ShapeRule::RaggedLeading(vec![2]));
/// let mut cache = Hdf5Backend::create(dir.path(), &schema)?;
/// cache.put("a", &Sample::new().with("x", Tensor::from_slice(&[1, 2], &[1.0f64, 2.0])?))?;
/// cache.finalize()?;
/// drop(cache);
/// let reader = Hdf5Backend::open(dir.path(), OpenMode::ReadOnly)?;
/// assert_eq!(reader.get("a")?.unwrap().tensor("x").unwrap().shape(), &[1, 2]);
/// # Ok::<(), stowage_core::Error>(())
/// ```
pub struct Hdf5Backend {
    dir: PathBuf,
    schema: Schema,
    capabilities: Capabilities,
    committed: Committed,
    /// The segments open now: a bounded, least-recently-used set ([`Hdf5Options`]).
    segments: OpenSegments,
    /// Where each committed key's latest sample is.
    index: KeyIndex,
    pending: Vec<(String, Sample)>,
    pending_index: HashMap<String, usize>,
    /// Pending keys no committed segment holds.
    pending_new: usize,
    /// Whether a batch's pages are advised before it reads them ([`Hdf5Backend::get_batch`]).
    advisor: ColdReadAdvisor,
    /// The log and lock of a writing handle; `None` when read-only.
    log_writer: Option<LogWriter>,
    /// Read-only, poisoned, or refusing puts after its own finalize.
    state: WriteState,
}

impl Hdf5Backend {
    /// Creates an empty cache in `dir` (absent or empty).
    ///
    /// Errors: `Error::Unsupported` for a schema outside [`capabilities`];
    /// `Error::AlreadyExists` when `dir` holds a cache; `Error::Locked` when a writer holds it.
    pub fn create(dir: impl AsRef<Path>, schema: &Schema) -> Result<Hdf5Backend> {
        Self::create_with(dir, schema, &Hdf5Options::default())
    }

    /// [`Hdf5Backend::create`] with `options`.
    pub fn create_with(
        dir: impl AsRef<Path>,
        schema: &Schema,
        options: &Hdf5Options,
    ) -> Result<Hdf5Backend> {
        let dir = dir.as_ref();
        let capabilities = capabilities();
        capabilities.check_schema(schema, BACKEND)?;
        std::fs::create_dir_all(dir).at(dir)?;
        // The cache directory may be a link (the user named it); `segments/` inside it never.
        create_dir_within(dir, &dir.join(SEGMENTS))?;
        let lock = WriterLock::acquire(dir)?;
        let log_path = dir.join(LOG_NAME);
        if log_path.exists() {
            return Err(Error::AlreadyExists { path: dir.to_path_buf() });
        }
        let header = commit_log::new_header(schema.clone());
        // In place only with its header: a crash during create leaves no cache, not a log that
        // neither opens (no header) nor can be created over (it exists).
        let log = AppendLog::create_new(&log_path, &Record::Cache(header.clone()).to_bytes())?;
        // The cache directory's own name, which create_dir_all may just have made: without it a
        // power cut loses the whole cache, flushed samples included.
        let parent = dir.parent().filter(|p| !p.as_os_str().is_empty());
        fsync_dir(parent.unwrap_or(Path::new(".")))?;
        Ok(Hdf5Backend {
            dir: dir.to_path_buf(),
            schema: schema.clone(),
            capabilities,
            committed: Committed::new(header),
            segments: OpenSegments::new(dir, options),
            index: KeyIndex::new(),
            pending: Vec::new(),
            pending_index: HashMap::new(),
            pending_new: 0,
            advisor: ColdReadAdvisor::new(ColdReadAdvice::Adaptive),
            log_writer: Some(LogWriter { log, _lock: lock }),
            state: WriteState::writable(BACKEND, dir, false),
        })
    }

    /// Opens the cache in `dir`. In append mode, under the writer lock, it first removes the
    /// temporary files a killed writer left (of segments and of `stowage.complete`).
    ///
    /// The key index runs the log vouches for are mapped, and the keys of the segments they do
    /// not cover (at most a few dozen) are read, each such segment opened through the bounded set
    /// of open segments, so its whole-file checksum is checked here too (its first use). Every
    /// other segment is checked on its first use.
    ///
    /// Errors: `Error::NotFound` when `dir` holds no cache; `Error::Locked` in append mode when a
    /// writer holds it; `Error::Corrupted` for a damaged log, a resized or damaged segment, or a
    /// segment libhdf5 refuses; `Error::Io` when the operating system refuses a segment (missing,
    /// no permission, no descriptor left, libhdf5's file lock held by another process).
    pub fn open(dir: impl AsRef<Path>, mode: OpenMode) -> Result<Hdf5Backend> {
        Self::open_with(dir, mode, &Hdf5Options::default())
    }

    /// [`Hdf5Backend::open`] with `options`.
    pub fn open_with(
        dir: impl AsRef<Path>,
        mode: OpenMode,
        options: &Hdf5Options,
    ) -> Result<Hdf5Backend> {
        let dir = dir.as_ref();
        let log_path = dir.join(LOG_NAME);
        if !log_path.is_file() {
            return Err(Error::NotFound {
                what: format!("stowage HDF5 cache (no {})", log_path.display()),
            });
        }
        let (committed, log_writer) = match mode {
            OpenMode::ReadOnly => {
                let recovered = AppendLog::read_all(&log_path)?;
                (commit_log::interpret(&log_path, &recovered)?, None)
            }
            OpenMode::Append => {
                let lock = WriterLock::acquire(dir)?;
                // Under the lock no other writer is building one: every temporary is a crash's.
                // Never in a linked `segments/`: the removals and every new segment would land
                // outside the cache. Reads follow it.
                let segments = dir.join(SEGMENTS);
                refuse_symlink(&segments)?;
                remove_abandoned_temps(&segments, is_segment_name)?;
                remove_abandoned_temps(dir, |name| name == FINALIZED_MARKER_NAME)?;
                // A key index run a killed merge was writing.
                let index = dir.join(crate::key_index::INDEX_DIR);
                refuse_symlink(&index)?;
                remove_abandoned_temps(&index, |name| {
                    name.starts_with("run_") && name.ends_with(".bin")
                })?;
                let (log, recovered) = AppendLog::open(&log_path, false)?;
                let committed = commit_log::interpret(&log_path, &recovered)?;
                (committed, Some(LogWriter { log, _lock: lock }))
            }
        };
        let marker = FinalizedMarker::read(&dir.join(FINALIZED_MARKER_NAME))?;
        if log_writer.is_some() && committed.finalized && marker.is_none() {
            // A crash between the `finalized` record and the marker: finish the finalize.
            committed.marker().write(&dir.join(FINALIZED_MARKER_NAME))?;
        }
        let schema = committed.header.schema.clone();
        // A handle reopened for appending takes puts on a finalized cache
        // (`append_after_finalize`); a read-only one refuses every write anyway.
        let state = match log_writer {
            Some(_) => WriteState::writable(BACKEND, dir, false),
            None => WriteState::read_only(BACKEND, dir, committed.finalized),
        };
        let mut backend = Hdf5Backend {
            dir: dir.to_path_buf(),
            schema,
            capabilities: capabilities(),
            committed: committed.clone(),
            segments: OpenSegments::new(dir, options),
            // A reader's lookups are random: large runs are read a page per lookup. A writer's
            // merges stream through its runs, with the read-around.
            index: KeyIndex::open(dir, &committed.own.runs, mode == OpenMode::ReadOnly),
            pending: Vec::new(),
            pending_index: HashMap::new(),
            pending_new: 0,
            advisor: ColdReadAdvisor::new(ColdReadAdvice::Adaptive),
            log_writer,
            state,
        };
        for _ in &committed.segments {
            backend.segments.push(None);
        }
        // A reader of a cache larger than a few read-arounds reads its segments a row at a
        // time; a smaller one is soon all in the page cache through the read-around.
        let bytes: u64 = committed.segments.iter().map(|entry| entry.bytes).sum();
        let large = bytes > crate::key_index::RANDOM_ACCESS_MIN_BYTES as u64;
        backend.segments.set_random_access(mode == OpenMode::ReadOnly && large);
        let tail_first = backend.index.tail_first();
        let mut tail = Vec::new();
        for (number, entry) in committed.segments.iter().enumerate().skip(tail_first) {
            tail.push(backend.segments.get(number, entry, &backend.schema)?.keys()?);
        }
        // The log's count after the last segment spares looking every tail key up in the runs.
        let counted = match committed.own.keys {
            Some((through, keys)) if through as usize + 1 == committed.segments.len() => {
                backend.index.tail_new_of(keys)
            }
            _ => None,
        };
        match counted {
            Some(tail_new) => backend.index.add_counted_tail(tail_first, tail, tail_new),
            None => {
                for (offset, keys) in tail.into_iter().enumerate() {
                    backend.index_segment(tail_first + offset, keys)?;
                }
            }
        }
        Ok(backend)
    }

    /// Checks the cache in `dir` as [`Reader::validate`] does, without opening it: a `get` from a
    /// damaged segment (or `open`, when the segment's keys are read there) is an error, this lists
    /// every damaged segment (with how many samples it held) and checks the intact ones, each
    /// problem naming its file and, where known, its key.
    ///
    /// Errors: those of reading the directory, and `Error::Io` when the operating system
    /// refuses a segment (no descriptor or memory left, no permission, libhdf5's file lock held
    /// by another process): a resource error is not damage. A damaged log or marker, and a
    /// committed segment that is missing, damaged or resized, are problems.
    ///
    /// ```
    /// use stowage_core::{Backend, DType, OpenMode, Reader, Sample, Schema, ShapeRule, Tensor};
    /// use stowage_core::ValidationLevel;
    /// use stowage_hdf5::Hdf5Backend;
    ///
    /// let dir = tempfile::tempdir()?;
    /// let schema = Schema::new().tensor("x", DType::F64, ShapeRule::RaggedLeading(vec![2]));
    /// let mut cache = Hdf5Backend::create(dir.path(), &schema)?;
    /// cache.put("a", &Sample::new().with("x", Tensor::from_slice(&[1, 2], &[1.0f64, 2.0])?))?;
    /// cache.finalize()?;
    /// drop(cache);
    /// let segment = dir.path().join("segments/segment_000000.h5");
    /// let mut bytes = std::fs::read(&segment)?;
    /// let middle = bytes.len() / 2;
    /// bytes[middle] ^= 0x40;
    /// std::fs::write(&segment, bytes)?;
    ///
    /// let reader = Hdf5Backend::open(dir.path(), OpenMode::ReadOnly)?;
    /// assert!(reader.get("a").is_err());
    /// let report = Hdf5Backend::validate_dir(dir.path(), ValidationLevel::Full)?;
    /// assert_eq!(report.problems.len(), 1);
    /// assert!(report.problems[0].detail.contains("1 samples are unreadable"));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn validate_dir(dir: impl AsRef<Path>, level: ValidationLevel) -> Result<ValidationReport> {
        crate::validate::validate(dir.as_ref(), level)
    }

    /// The key stored at `location`; `None` when no committed segment has that row (a damaged
    /// key index slot's).
    ///
    /// Errors: as [`OpenSegments::get`], for a segment that does not open or read.
    fn key_at(&self, location: Location) -> Result<Option<String>> {
        match self.segment_with_row(location, Reach::Open)? {
            Some(segment) => segment.key(location.row).map(Some),
            None => Ok(None),
        }
    }

    /// The segment holding `location`'s row, open; `Ok(None)` when no committed segment has
    /// that row (a damaged slot's payload), or when `reach` takes only ready segments and this
    /// one is not (which it then records).
    fn segment_with_row(&self, location: Location, reach: Reach) -> Result<Option<Arc<Segment>>> {
        let Some(entry) = self.committed.segments.get(location.segment) else { return Ok(None) };
        if location.row as u64 >= entry.rows {
            return Ok(None);
        }
        self.reach_segment(location.segment, entry, reach)
    }

    /// Segment `number`, committed as `entry`, as `reach` takes it: opened when needed, or
    /// `Ok(None)` (recorded) when only a ready one will do and it is not.
    fn reach_segment(
        &self,
        number: usize,
        entry: &SegmentEntry,
        reach: Reach,
    ) -> Result<Option<Arc<Segment>>> {
        match reach {
            Reach::Open => self.segments.get(number, entry, &self.schema).map(Some),
            Reach::IfReady(not_ready) => {
                let ready = self.segments.ready(number);
                if ready.is_none() {
                    not_ready.set(true);
                }
                Ok(ready)
            }
        }
    }

    /// `get` of `key`, reaching the segments it reads as `reach` says: `None` when one is not
    /// ready (only with [`Reach::IfReady`]; what was read meanwhile is dropped).
    fn read_key(&self, key: &str, reach: Reach) -> Option<Result<Option<Sample>>> {
        if let Some(&at) = self.pending_index.get(key) {
            return Some(Ok(Some(self.pending[at].1.clone())));
        }
        let not_ready = |reach: Reach| matches!(reach, Reach::IfReady(flag) if flag.get());
        // A run's candidate is confirmed by reading its row (checked against its checksum,
        // which covers the key), not its key first: one segment visit per get.
        let mut read = None;
        let location = self.index.find_confirmed(key, |location| {
            let Some(segment) = self.segment_with_row(location, reach)? else { return Ok(false) };
            read = segment.read_if_key(&self.schema, location.row, key)?;
            Ok(read.is_some())
        });
        if not_ready(reach) {
            return None;
        }
        let found = match (location.map_err(|e| e.for_key(key)), read) {
            (Err(e), _) => Err(e),
            (Ok(Some(_)), Some(sample)) => Ok(Some(sample)),
            (Ok(Some(location)), None) => {
                let entry = &self.committed.segments[location.segment];
                match self.reach_segment(location.segment, entry, reach) {
                    Ok(Some(segment)) => segment.read(&self.schema, location.row, key).map(Some),
                    Ok(None) => return None,
                    Err(e) => Err(e.for_key(key)),
                }
            }
            (Ok(None), _) => Ok(None),
        };
        Some(found)
    }

    /// Adds the keys (by row) of segment `number`, the next committed one, to the key index.
    ///
    /// Errors: as [`KeyIndex::add_segment`].
    fn index_segment(&mut self, number: usize, keys: Vec<String>) -> Result<()> {
        // Taken out while it grows: confirming a run's candidate reads segments, not the index.
        let mut index = std::mem::take(&mut self.index);
        let added = index.add_segment(number, keys, &|location| self.key_at(location));
        self.index = index;
        added
    }

    /// Starts the reads a batch of `keys` will make, so that they wait together instead of one
    /// after another; hints only, nothing is returned and nothing fails (the gets that follow
    /// report every error): the key index run slots of every key are advised
    /// ([`ColdReadAdvisor::before_batch`]: when a sample of them is not in the page cache),
    /// every segment a candidate lies in that is not open is opened (on up to 32 threads when
    /// there are several: each first use reads and checks the segment's metadata,
    /// [`Segment::open`]), then, for segments read a row at a time, the pages each candidate row
    /// starts with are advised the same way
    /// ([`ColdReadAdvisor::before_batch_rows`]: sampled first).
    fn prepare_batch(&self, keys: &[&str]) {
        let mut plan = PagePlan::with_capacity(keys.len());
        self.index.plan_slots(keys, &mut plan);
        self.advisor.before_batch(&mut plan);
        drop(plan);
        let mut candidates: Vec<Location> = Vec::with_capacity(keys.len());
        for key in keys.iter().filter(|key| !self.pending_index.contains_key(**key)) {
            self.index.candidates(key, |location| candidates.push(location));
        }
        let entries = &self.committed.segments;
        candidates.retain(|location| {
            entries.get(location.segment).is_some_and(|entry| (location.row as u64) < entry.rows)
        });
        let mut numbers: Vec<usize> = candidates.iter().map(|location| location.segment).collect();
        numbers.sort_unstable();
        numbers.dedup();
        let closed = self.segments.closed(&numbers);
        let open = |&number: &usize| {
            // An error here is the get's to report.
            let _ = self.segments.get(number, &entries[number], &self.schema);
        };
        if closed.len() >= cold_reads::PARALLEL_OPENS {
            cold_reads::each_on_threads(&closed, open);
        } else {
            closed.iter().for_each(open);
        }
        if !self.segments.random_access() {
            return; // Segments read whole by their read-around: no row is advised.
        }
        let opened: Vec<(Arc<Segment>, usize)> = candidates
            .iter()
            .filter_map(|location| {
                let entry = &entries[location.segment];
                let segment = self.segments.get(location.segment, entry, &self.schema).ok()?;
                Some((segment, location.row))
            })
            .collect();
        self.advisor.before_batch_rows(opened.len(), |i, plan| {
            let (segment, row) = &opened[i];
            segment.plan_row(*row, plan);
        });
    }

    /// The location of `key`'s latest committed sample.
    ///
    /// Errors: a segment that does not read while a candidate is confirmed, naming `key`.
    fn locate(&self, key: &str) -> Result<Option<Location>> {
        let found = self.index.find(key, &|location| self.key_at(location));
        found.map_err(|e| e.for_key(key))
    }

    /// Writes a key index run over the tail (and the runs [`KeyIndex::write_merge`] folds in, or
    /// all of them when `all`), records it in the log, and uses it.
    fn merge_index(&mut self, all: bool) -> Result<()> {
        let Some(last) = self.committed.segments.last() else { return Ok(()) };
        let (through, stamp) = (self.committed.segments.len() - 1, last.xxh3);
        let entry = {
            let key_of = |location: Location| self.key_at(location);
            self.index.write_merge(&self.dir, all, through, stamp, &key_of)?
        };
        let log = self.log();
        log.append(&Record::Own(Hdf5Record::Run(entry)).to_bytes())?;
        log.sync()?;
        self.committed.records += 1;
        let runs = &mut self.committed.own.runs;
        runs.retain(|run| run.first < entry.first || run.through > entry.through);
        runs.push(entry);
        self.index.install(&self.dir, entry)
    }

    /// The commit log of a writing handle: call after [`WriteState::check_write`], which refuses
    /// a read-only handle (the only kind without one).
    fn log(&mut self) -> &mut AppendLog {
        &mut self.log_writer.as_mut().expect("check_write refused a read-only handle").log
    }

    fn write_pending(&mut self) -> Result<()> {
        let id = self.committed.next_segment_id();
        let path = segment_path(&self.dir, id);
        // Checked at every segment, not only at open: a link made meanwhile must not take the
        // segment out of the cache either.
        refuse_symlink(&self.dir.join(SEGMENTS))?;
        let mut temp = TempBeside::new(&path)?;
        let rows: Vec<(&str, &Sample)> =
            self.pending.iter().map(|(k, s)| (k.as_str(), s)).collect();
        temp.before_libhdf5_opens()?;
        segment::write(temp.path(), &self.schema, &rows)?;
        temp.after_libhdf5_closed()?;
        temp.publish(true)?;
        let (entry, verified) = segment::commit_entry(&path, &self.schema, id, rows.len() as u64)?;
        let log = self.log();
        log.append(&Record::Segment(entry.clone()).to_bytes())?;
        log.sync()?;
        self.committed.segments.push(entry);
        self.committed.records += 1;
        self.committed.finalized = false;
        // Not opened: its keys are the pending ones, and its checksum was just computed from the
        // published file. Its first `get` opens it, through the bounded set.
        let number = self.committed.segments.len() - 1;
        self.segments.push(Some(verified));
        let keys: Vec<String> =
            std::mem::take(&mut self.pending).into_iter().map(|(key, _)| key).collect();
        self.index_segment(number, keys)?;
        self.pending.clear();
        self.pending_index.clear();
        self.pending_new = 0;
        // Derived, so not synced on its own: the next synced record makes it durable, and an
        // open that finds no count for the last segment counts the keys itself.
        let count = Hdf5Record::Keys { through: number as u64, keys: self.index.len() as u64 };
        self.log().append(&Record::Own(count).to_bytes())?;
        self.committed.records += 1;
        self.committed.own.keys = Some((number as u64, self.index.len() as u64));
        if self.index.wants_merge(false) {
            self.merge_index(false)?;
        }
        Ok(())
    }
}

impl Reader for Hdf5Backend {
    fn name(&self) -> &'static str {
        BACKEND
    }

    fn format(&self) -> &'static Format {
        &STOWAGE_HDF5
    }

    fn capabilities(&self) -> &Capabilities {
        &self.capabilities
    }

    fn schema(&self) -> &Schema {
        &self.schema
    }

    fn path(&self) -> &Path {
        &self.dir
    }

    fn get(&self, key: &str) -> Result<Option<Sample>> {
        self.read_key(key, Reach::Open).expect("Reach::Open opens every segment it needs")
    }

    /// `get` when every segment it reads is open and read without libhdf5 (detached: its
    /// columns read from its map alone) and the open segments' lock is free: then it never calls
    /// libhdf5, whose process-wide lock another thread may hold, nor waits for another
    /// thread's open. Else `None`.
    fn get_if_ready(&self, key: &str) -> Option<Result<Option<Sample>>> {
        let not_ready = Cell::new(false);
        self.read_key(key, Reach::IfReady(&not_ready))
    }

    /// Each key as [`Reader::get`] reads it, after the batch's reads are started together:
    /// every key's key index slots advised, the segments its candidates lie in opened (on up
    /// to 32 threads), and, for a cache read a row at a time (its segments total more than
    /// 64 MiB), every candidate row's pages advised. Errors are the gets'.
    fn get_batch(&self, keys: &[&str]) -> Result<Vec<Option<Sample>>> {
        batch_by_visiting(self, keys)
    }

    /// The batch's reads started as [`Reader::get_batch`] says, then each key read and visited
    /// in turn.
    fn get_batch_each(&self, keys: &[&str], visit: &mut BatchVisitor<'_>) -> Result<()> {
        if keys.len() > 1 {
            self.prepare_batch(keys);
        }
        for (at, key) in keys.iter().enumerate() {
            if visit(at, self.get(key)?).is_break() {
                break;
            }
        }
        Ok(())
    }

    fn contains(&self, key: &str) -> Result<bool> {
        Ok(self.pending_index.contains_key(key) || self.locate(key)?.is_some())
    }

    fn len(&self) -> usize {
        self.index.len() + self.pending_new
    }

    /// Reads every segment's keys in commit order (each segment opened in turn through the
    /// bounded set), then the pending keys no segment holds.
    fn keys(&self) -> Result<Vec<String>> {
        let mut keys = Vec::with_capacity(self.len());
        let mut seen: HashSet<String> = HashSet::with_capacity(self.len());
        for (number, entry) in self.committed.segments.iter().enumerate() {
            for key in self.segments.get(number, entry, &self.schema)?.keys()? {
                if !seen.contains(&key) {
                    seen.insert(key.clone());
                    keys.push(key);
                }
            }
        }
        let pending = self.pending.iter().map(|(key, _)| key);
        keys.extend(pending.filter(|key| !seen.contains(*key)).cloned());
        Ok(keys)
    }

    fn is_finalized(&self) -> bool {
        // The log's state, not the handle's: a handle reopened for appending on a finalized cache
        // reports it finalized until it writes.
        self.committed.finalized && self.pending.is_empty()
    }

    fn validate(&self, level: ValidationLevel) -> Result<ValidationReport> {
        crate::validate::validate(&self.dir, level)
    }

    /// The structure check once, then every selected key read in runs of keys: libhdf5
    /// serializes reads, so no split by file would help (`check_plan` module).
    fn check_plan(
        &self,
        selection: &stowage_core::check_plan::Selection,
    ) -> Result<stowage_core::check_plan::CheckPlan<'_>> {
        crate::check_plan::stowage_plan(self, selection)
    }

    /// The commit log, segments and row checksums.
    fn describe(&self) -> Result<stowage_core::describe::Description> {
        crate::describe::describe_stowage(self)
    }
}

impl Backend for Hdf5Backend {
    fn put(&mut self, key: &str, sample: &Sample) -> Result<()> {
        self.state.check_put(key, sample, &self.schema, &self.capabilities)?;
        match self.pending_index.get(key) {
            Some(&at) => self.pending[at].1 = sample.clone(),
            None => {
                if self.locate(key)?.is_none() {
                    self.pending_new += 1;
                }
                self.pending_index.insert(key.to_owned(), self.pending.len());
                self.pending.push((key.to_owned(), sample.clone()));
            }
        }
        Ok(())
    }

    fn flush(&mut self) -> Result<()> {
        self.state.check_write("flush")?;
        if self.pending.is_empty() {
            return Ok(());
        }
        let result = self.write_pending();
        self.state.poison_on_error(result)
    }

    fn finalize(&mut self) -> Result<()> {
        self.state.check_write("finalize")?;
        self.flush()?;
        let result = (|| {
            if self.index.wants_merge(true) {
                self.merge_index(true)?;
            }
            let log = self.log();
            log.append(&Record::Finalized.to_bytes())?;
            log.sync()?;
            self.committed.records += 1;
            self.committed.finalized = true;
            self.committed.marker().write(&self.dir.join(FINALIZED_MARKER_NAME))
        })();
        self.state.poison_on_error(result)?;
        // This handle refuses puts from now on; reopening in append mode takes them again.
        self.state.set_finalized(true);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use stowage_core::{ShapeRule, Tensor};

    use super::*;

    fn sample(i: u32) -> Sample {
        Sample::new().with("x", Tensor::from_slice(&[2], &[0x6B1D_0000 + i, i]).unwrap())
    }

    /// A finished cache of 6 segments of 8 keys (`k<i>`, segment `i / 8`), opened read-only
    /// with its segments read a row at a time (what a cache larger than 64 MiB gets).
    fn row_at_a_time(dir: &Path) -> Hdf5Backend {
        let schema = Schema::new().tensor("x", DType::U32, ShapeRule::Fixed(vec![2]));
        let mut cache = Hdf5Backend::create(dir, &schema).unwrap();
        for i in 0..48 {
            cache.put(&format!("k{i}"), &sample(i)).unwrap();
            if i % 8 == 7 {
                cache.flush().unwrap();
            }
        }
        cache.finalize().unwrap();
        drop(cache);
        let mut reader = Hdf5Backend::open(dir, OpenMode::ReadOnly).unwrap();
        assert!(!reader.segments.random_access(), "a small cache is read whole");
        reader.segments.set_random_access(true);
        reader
    }

    /// Row-at-a-time segments read every sample as written through `get`, `get_batch` (segments
    /// opened ahead on threads, rows advised) and `contains`, with every segment's metadata
    /// only checked at first use, and its rows by their checksums.
    #[test]
    fn segments_read_a_row_at_a_time_read_every_sample_as_written() {
        let dir = tempfile::tempdir().unwrap();
        let reader = row_at_a_time(dir.path());
        let keys: Vec<String> = (0..48).rev().map(|i| format!("k{i}")).collect();
        let keys: Vec<&str> = keys.iter().map(String::as_str).collect();
        let batch = reader.get_batch(&keys).unwrap();
        for (key, got) in keys.iter().zip(batch) {
            assert_eq!(got, Some(sample(key[1..].parse().unwrap())), "{key}");
        }
        assert_eq!(
            reader.get_batch(&["k3", "missing", "k3"]).unwrap(),
            vec![Some(sample(3)), None, Some(sample(3))]
        );
        for i in 0..48 {
            assert_eq!(reader.get(&format!("k{i}")).unwrap(), Some(sample(i)));
            assert!(reader.contains(&format!("k{i}")).unwrap());
        }
        assert_eq!(reader.keys().unwrap().len(), 48);
    }

    /// A flipped byte of a row's value in a row-at-a-time segment: that row's `get`, and a batch
    /// holding it, are `Error::Corrupted` naming the segment; the segment's other rows read.
    #[test]
    fn a_damaged_row_of_a_row_at_a_time_segment_is_an_error_naming_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let reader = row_at_a_time(dir.path());
        drop(reader);
        let path = segment_path(dir.path(), 3);
        let mut bytes = std::fs::read(&path).unwrap();
        let needle = (0x6B1D_0000u32 + 26).to_le_bytes();
        let at = bytes.windows(4).position(|w| w == needle).unwrap();
        bytes[at] ^= 0x02;
        std::fs::write(&path, bytes).unwrap();
        let mut reader = Hdf5Backend::open(dir.path(), OpenMode::ReadOnly).unwrap();
        reader.segments.set_random_access(true);
        let corrupted = |result: Result<_>| match result {
            Err(Error::Corrupted { path: named, .. }) => assert_eq!(named, path),
            other => panic!("expected Error::Corrupted naming {}, got {other:?}", path.display()),
        };
        corrupted(reader.get("k26").map(drop));
        corrupted(reader.get_batch(&["k1", "k26", "k40"]).map(drop));
        corrupted(reader.contains("k26").map(drop));
        for i in (24..32).filter(|&i| i != 26) {
            assert_eq!(reader.get(&format!("k{i}")).unwrap(), Some(sample(i)));
        }
    }
}
