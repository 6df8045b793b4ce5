//! `NpyBackend`: the [`Reader`] and [`Backend`] over a NUMPY_10 cache directory.

use crate::collection::CollectionFile;
use crate::column_writer::ColumnWriter;
use crate::error::{NpyError, in_field};
use crate::index::{
    FieldShape, KeyIndex, Slot, decode_entry, decode_finalize, encode_entry_into, encode_finalize,
};
use crate::layout::{CacheMetadata, CommitMarker, Layout};
use crate::locator::{Locator, RowHint};
use crate::ownership::OwnedFiles;
use crate::record::{Numpy10Record, ParsedRecord, RecordRef};
use crate::runs::{self, Runs};
use crate::{NpyOptions, validate};
use lru::LruCache;
use std::path::Path;
use std::sync::Mutex;
use stowage_core::cold_reads::{
    ColdReadAdvice, ColdReadAdvisor, PARALLEL_OPENS, PagePlan, each_on_threads,
};
use stowage_core::file_safety::{
    AppendLog, WriterLock, atomic_write, create_dir_within_durably, fsync_dir, open_no_follow,
};
use stowage_core::key_runs::key_hash;
use stowage_core::npy_header::storage_descr;
use stowage_core::open_set::{OpenSet, Opened};
use stowage_core::reader::batch_by_visiting;
use stowage_core::write_behind::BackgroundWriter;
use stowage_core::{
    Backend, BatchVisitor, Capabilities, DType, Error, FieldKind, Format, IoResultExt, OpenMode,
    Reader, Result, Sample, Schema, ShapeRule, Tensor, ValidationLevel, ValidationReport, Value,
    WriteState,
};

/// The backend's name in errors and capability reports.
pub const BACKEND_NAME: &str = "npy";

/// What a NUMPY_10 cache can do.
///
/// Fixed and variable (max) shape tensor fields of any dtype (bfloat16 is stored as `<u2` with the
/// real dtype in `stowage.json`), rank <= 31 as hangar allows; no ragged, nullable, bytes or JSON
/// fields, which the format has no place for.
pub fn capabilities() -> Capabilities {
    let mut caps = Capabilities::none();
    caps.variable_shapes = true;
    caps.overwrite = true;
    caps.resume = true;
    caps.durable_flush = true;
    caps.checksums = true;
    caps.zero_copy_get = true;
    caps.concurrent_readers = true;
    caps.dtypes = DType::ALL.to_vec();
    caps.max_rank = Some(31);
    caps
}

/// The writing half of a handle: the lock, the logs and one column writer per field. Whether it
/// may write (finalized, poisoned) is the handle's [`WriteState`].
struct Writer {
    log: AppendLog,
    /// The collection files stowage created: the only ones whose markers it changes.
    owned: OwnedFiles,
    columns: Vec<ColumnWriter>,
    /// Log entries of puts since the last flush, concatenated; appended to the log only after
    /// their data is durable.
    pending: Vec<u8>,
    /// End offset in `pending` of each entry.
    pending_ends: Vec<usize>,
    /// The key hash ([`stowage_core::key_runs::key_hash`]) of each pending entry.
    pending_hashes: Vec<u64>,
    /// The tail ordinal ([`KeyIndex::keys`] order) of each pending entry's key.
    pending_ordinals: Vec<u32>,
    /// The row hint of each pending entry ([`crate::locator`]).
    pending_hints: Vec<Option<RowHint>>,
    /// (key hash, [`Locator`] payload) of every log record after the runs' end: what the next
    /// run holds.
    tail_entries: Vec<(u64, u64)>,
    /// For each tail entry, its key's tail ordinal: the next run's build asks whether a run
    /// holds it of [`NpyBackend::tail_in_runs`], resolved for the whole tail in one batch.
    tail_ordinals: Vec<u32>,
    /// Byte offset of the log's last record, if it has one.
    last_offset: Option<u64>,
    /// Declared last, so dropped last: released only after the column writers' background
    /// writes have stopped, so that the next writer never runs beside them.
    _lock: WriterLock,
}

impl Writer {
    fn new(
        lock: WriterLock,
        log: AppendLog,
        owned: OwnedFiles,
        columns: Vec<ColumnWriter>,
    ) -> Writer {
        Writer {
            _lock: lock,
            log,
            owned,
            columns,
            pending: Vec::new(),
            pending_ends: Vec::new(),
            pending_hashes: Vec::new(),
            pending_ordinals: Vec::new(),
            pending_hints: Vec::new(),
            tail_entries: Vec::new(),
            tail_ordinals: Vec::new(),
            last_offset: None,
        }
    }
}

/// A NUMPY_10 cache: `.npy` collection files addressed by `10:uid:xxh64:idx:shape` records, with a
/// crash-safe key -> record log.
///
/// ```
/// use stowage_core::{Backend, DType, Reader, Sample, Schema, ShapeRule, Tensor};
/// use stowage_npy::{NpyBackend, NpyOptions};
///
/// let dir = tempfile::tempdir()?;
/// let schema = Schema::new().tensor("x", DType::F32, ShapeRule::Fixed(vec![3]));
/// let mut cache = NpyBackend::create(dir.path(), &schema, NpyOptions::default())?;
/// cache.put("a", &Sample::new().with("x", Tensor::from_slice(&[3], &[1f32, 2., 3.])?))?;
/// cache.finalize()?;
/// drop(cache);
///
/// let reader = NpyBackend::open_read_only(dir.path(), NpyOptions::default())?;
/// let got = reader.get("a")?.unwrap();
/// assert_eq!(got.tensor("x").unwrap().to_vec::<f32>()?, [1., 2., 3.]);
/// assert!(reader.record("a", "x").unwrap().to_string().starts_with("10:"));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct NpyBackend {
    layout: Layout,
    meta: CacheMetadata,
    options: NpyOptions,
    capabilities: Capabilities,
    /// The key index's in-memory tail: the records after the runs' end (every record when no
    /// runs are used). Its collection file ids are kept for the handle's life.
    index: KeyIndex,
    /// The on-disk key index runs; `None` for a reader of a cache without a usable index (the
    /// tail then holds every key). A writer always has them.
    runs: Option<Runs>,
    /// For the tail's keys by ordinal (a prefix of them: resolved on first need, by `len` or the
    /// next run's build), whether a run holds the key, and how many of them none does. A put
    /// never probes the runs (a miss per run at 10 M keys): the tail's keys are looked up in
    /// batches, their slots prefetched ([`Runs::held`]).
    tail_in_runs: Mutex<(Vec<bool>, u64)>,
    /// Why `index/current` was not used, when it exists but does not match (for `validate`).
    index_note: Option<String>,
    /// Tail entries after which a flush writes a run.
    index_tail_entries: usize,
    /// Read-only or writable, finalized, poisoned by a failed write: the checks every write
    /// starts with.
    state: WriteState,
    /// The lock, logs and column writers; present exactly when `state` is writable.
    writer: Option<Writer>,
    /// Each field's dtype, for the hot path.
    field_dtypes: Vec<DType>,
    /// Each field's name, shared by every sample `get` returns.
    field_names: Vec<std::sync::Arc<str>>,
    /// Collection files by the index's file id, opened on first use and shared by reader
    /// threads; at most [`NpyOptions::max_open_files`] mapped once there are more.
    files: OpenSet<CollectionFile>,
    /// Collection files no record of this cache points into (another writer's, read through
    /// [`NpyBackend::read_record`]), by uid, opened on first use; the most recently used
    /// [`NpyOptions::max_open_files`] stay mapped.
    foreign_files: Mutex<LruCache<String, CollectionFile>>,
    /// Whether `get_batch` advises the kernel of the pages it will read.
    advisor: ColdReadAdvisor,
}

impl NpyBackend {
    /// Creates an empty cache in `dir` (created if missing) and returns a writer.
    ///
    /// Errors: `Unsupported` for a schema outside [`capabilities`]; `AlreadyExists` when `dir`
    /// holds a cache; `Locked` when another writer holds `dir`; `Io` naming the path.
    pub fn create(
        dir: impl AsRef<Path>,
        schema: &Schema,
        options: NpyOptions,
    ) -> Result<NpyBackend> {
        let layout = Layout::new(dir.as_ref());
        let capabilities = capabilities();
        capabilities.check_schema(schema, BACKEND_NAME)?;
        if options.collection_size == 0 {
            return Err(Error::invalid("NpyOptions::collection_size must be at least 1"));
        }
        if layout.metadata().exists() {
            return Err(Error::AlreadyExists { path: layout.metadata() });
        }
        std::fs::create_dir_all(layout.root()).at(layout.root())?;
        let lock = WriterLock::acquire(layout.root())?;
        if layout.metadata().exists() {
            return Err(Error::AlreadyExists { path: layout.metadata() });
        }
        make_layout_dirs(&layout)?;
        remove_killed_writers_temps(&layout)?;
        // Logs left by a create that crashed before stowage.json was written belong to no cache
        // (no put can precede stowage.json, so they claim no file).
        for stale in [layout.records_log(), layout.owned_files_log()] {
            match std::fs::remove_file(&stale) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                    return Err(Error::io(stale, e));
                }
                _ => {}
            }
        }
        let (mut log, _) = AppendLog::open(layout.records_log(), true)?;
        log.sync()?;
        runs::forget(&layout)?;
        runs::remove_unnamed(&layout, None)?;
        let owned = OwnedFiles::open(&layout, &[])?;
        let meta = CacheMetadata::new(schema.clone(), options.collection_size);
        let text = serde_json::to_vec_pretty(&meta).expect("metadata serializes");
        // Written last: its presence is what makes the directory a cache.
        atomic_write(layout.metadata(), &text)?;
        // The cache directory's own entry, in case create_dir_all just made it.
        let parent = layout.root().parent().filter(|p| !p.as_os_str().is_empty());
        fsync_dir(parent.unwrap_or(Path::new(".")))?;
        let columns = column_writers(&meta)?;
        let state = WriteState::writable(BACKEND_NAME, layout.root(), false);
        let max_open_files = options.max_open_files;
        Ok(NpyBackend {
            field_dtypes: field_dtypes(&meta),
            field_names: meta.schema.fields.iter().map(|f| f.name.as_str().into()).collect(),
            index: KeyIndex::new(field_shapes(&meta)),
            runs: Some(Runs::empty(&layout)?),
            tail_in_runs: Mutex::default(),
            advisor: ColdReadAdvisor::new(options.cold_read_advice),
            index_note: None,
            index_tail_entries: runs::TAIL_BOUND,
            layout,
            meta,
            options,
            capabilities,
            state,
            writer: Some(Writer::new(lock, log, owned, columns)),
            files: OpenSet::new(0, max_open_files),
            foreign_files: Mutex::new(foreign_files(max_open_files)),
        })
    }

    /// Opens an existing cache read-only: no lock is taken and a writer is never blocked. An
    /// unfinished cache shows the samples of every completed flush.
    ///
    /// Costs the same at every size: the key index runs `index/current` names are mapped and
    /// only the log records after them are replayed (see the crate's README). Without a usable
    /// index the whole log is replayed, and `validate` says why.
    ///
    /// Errors: `NotFound` when `dir` holds no cache; `Corrupted` when the record log is damaged
    /// in the part replayed (before its end), or a finalized cache's log does not hold what
    /// `_COMPLETE` says.
    pub fn open_read_only(dir: impl AsRef<Path>, options: NpyOptions) -> Result<NpyBackend> {
        let layout = Layout::new(dir.as_ref());
        let meta = CacheMetadata::read(&layout.metadata())?;
        // _COMPLETE before the log: a writer finalizing meanwhile appends its record and then
        // writes _COMPLETE, so a marker read first never describes more than the log read after
        // it, while a log read first may be older than a marker read after it.
        let marker = CommitMarker::read(&layout.complete_marker())?;
        // A reader's lookups land on random pages of the runs and the log: each cold one reads
        // its page alone, not the kernel's read-around (unless the advice is off).
        let random = options.cold_read_advice != ColdReadAdvice::Never;
        let (runs, index_note) = match Runs::open(&layout, random) {
            Ok(runs) => (runs, None),
            Err(why) => (None, Some(why)),
        };
        let start = runs.as_ref().map_or(0, |r| r.current().log_end);
        let recovered = AppendLog::read_from(layout.records_log(), start)?;
        let loaded = Loaded {
            records: recovered.records,
            marker,
            damage: recovered.damage,
            runs,
            index_note,
        };
        Self::assemble(layout, meta, options, loaded, None)
    }

    /// Opens an existing cache for writing: takes the writer lock, cuts off a torn log tail left
    /// by a crash and resumes an unfinished cache. On a finalized cache `put` returns
    /// `Error::Finalized`.
    ///
    /// Costs the same at every size, as [`NpyBackend::open_read_only`]; when the index was not
    /// usable, the whole log is replayed and the index written again.
    pub fn open_append(dir: impl AsRef<Path>, options: NpyOptions) -> Result<NpyBackend> {
        let layout = Layout::new(dir.as_ref());
        let meta = CacheMetadata::read(&layout.metadata())?;
        let lock = WriterLock::acquire(layout.root())?;
        remove_killed_writers_temps(&layout)?;
        // Empty marker directories may be missing (a copy that dropped empty folders, e.g. git).
        make_layout_dirs(&layout)?;
        // A writer's merges stream through its runs: the kernel's read-around serves them.
        let (runs, index_note) = match Runs::open(&layout, false) {
            Ok(runs) => (runs, None),
            Err(why) => (None, Some(why)),
        };
        let (start, records_before) =
            runs.as_ref().map_or((0, 0), |r| (r.current().log_end, r.current().log_records));
        // Inspect before AppendLog::open truncates: mid-log damage must not be silently cut away.
        let scanned = AppendLog::read_from(layout.records_log(), start)?;
        if let Some(damage) = scanned.damage.as_ref().filter(|d| d.is_mid_log()) {
            return Err(Error::corrupted(layout.records_log(), damage.to_string()));
        }
        let (log, recovered) = AppendLog::open_after(layout.records_log(), start, records_before)?;
        runs::remove_unnamed(&layout, runs.as_ref().map(Runs::current))?;
        let runs = match runs {
            Some(runs) => runs,
            None => Runs::empty(&layout)?,
        };
        let marker = CommitMarker::read(&layout.complete_marker())?;
        let loaded = Loaded {
            records: recovered.records,
            marker,
            damage: None,
            runs: Some(runs),
            index_note,
        };
        let mut backend = Self::assemble(layout, meta, options, loaded, Some((lock, log)))?;
        // The whole log was replayed (no usable index): write it now, so the next open is fast
        // and a damaged or missing index is repaired.
        let replayed_all = backend
            .runs
            .as_ref()
            .is_some_and(|r| r.current().log_end == AppendLog::MAGIC.len() as u64);
        let entries = backend.writer.as_ref().map_or(0, |w| w.tail_entries.len());
        if replayed_all && (backend.index_note.is_some() || entries >= backend.index_tail_entries) {
            let wrote = backend.writer.as_ref().is_some_and(|w| w.last_offset.is_some());
            if wrote {
                backend.write_run(backend.is_finalized())?;
            } else {
                // An empty log: nothing to index, only the unusable index to drop.
                runs::forget(&backend.layout)?;
            }
            backend.index_note = None;
        }
        Ok(backend)
    }

    /// Builds a handle from the records after the runs (every record without runs); `writing`
    /// (the lock and the open log) makes it a writer.
    fn assemble(
        layout: Layout,
        meta: CacheMetadata,
        options: NpyOptions,
        loaded: Loaded,
        writing: Option<(WriterLock, AppendLog)>,
    ) -> Result<NpyBackend> {
        let Loaded { records, marker, damage, runs, index_note } = loaded;
        if let Some(damage) = damage.filter(|d| d.is_mid_log()) {
            return Err(Error::corrupted(layout.records_log(), damage.to_string()));
        }
        let mut index = KeyIndex::new(field_shapes(&meta));
        let (start, records_before) = match &runs {
            Some(runs) => {
                for uid in &runs.current().uids {
                    index.intern_uid(uid)?;
                }
                (runs.current().log_end, runs.current().log_records)
            }
            None => (AppendLog::MAGIC.len() as u64, 0),
        };
        let replayed = replay(
            &mut index,
            runs.as_ref(),
            &records,
            (start, records_before),
            meta.collection_size,
            &layout.records_log(),
        )?;
        let finalized = replayed.finalized;
        let log_records = records_before + records.len() as u64;
        // _COMPLETE must describe exactly the log it was written after (it is written last).
        if let Some(commit) = marker
            && (!finalized || commit.log_records != log_records)
        {
            return Err(NpyError::CommitMismatch {
                path: layout.records_log(),
                marked: commit.log_records,
                found: log_records,
                finalize_record: finalized,
            }
            .into());
        }
        let index_files = index.file_uids().len();
        let state = if writing.is_some() {
            WriteState::writable(BACKEND_NAME, layout.root(), finalized)
        } else {
            WriteState::read_only(BACKEND_NAME, layout.root(), finalized)
        };
        let writer = match writing {
            Some((lock, log)) => {
                let owned = OwnedFiles::open(&layout, index.file_uids())?;
                let mut writer = Writer::new(lock, log, owned, column_writers(&meta)?);
                writer.tail_ordinals = replayed.ordinals;
                writer.tail_entries = replayed.entries;
                writer.last_offset = replayed
                    .last_offset
                    .or(runs.as_ref().and_then(|r| r.current().last_record).map(|l| l.offset));
                Some(writer)
            }
            None => None,
        };
        let advisor = ColdReadAdvisor::new(options.cold_read_advice);
        let max_open_files = options.max_open_files;
        let backend = NpyBackend {
            field_dtypes: field_dtypes(&meta),
            field_names: meta.schema.fields.iter().map(|f| f.name.as_str().into()).collect(),
            layout,
            meta,
            options,
            capabilities: capabilities(),
            state,
            index,
            runs,
            tail_in_runs: Mutex::default(),
            advisor,
            index_note,
            index_tail_entries: runs::TAIL_BOUND,
            writer,
            files: OpenSet::new(index_files, max_open_files),
            foreign_files: Mutex::new(foreign_files(max_open_files)),
        };
        if backend.state.is_finalized()
            && backend.state.is_writable()
            && !backend.layout.complete_marker().exists()
        {
            // A crash between the finalize record and _COMPLETE: roll the finalize forward.
            backend.write_markers()?;
        }
        Ok(backend)
    }

    /// The record string of `field` for `key`, exactly as hangar's record database would store it.
    pub fn record(&self, key: &str, field: &str) -> Option<Numpy10Record> {
        let position = self.meta.schema.fields.iter().position(|f| f.name == field)?;
        if let Some(slots) = self.index.get(key) {
            return Some(self.index.record(position, &slots[position]));
        }
        let (_, payload) = self.runs.as_ref()?.find(key)?;
        let (_, mut records) = decode_entry(payload, self.meta.schema.fields.len()).ok()?;
        Some(records.swap_remove(position))
    }

    /// Sets how many log entries this writer keeps in the key index's in-memory tail before a
    /// flush writes them into an on-disk run in `index/` (65,536 by default, a few tens of MB;
    /// at least 1). Finalize always writes one run of every key. A smaller bound writes runs
    /// more often, a larger one keeps more in RAM.
    ///
    /// ```
    /// # use stowage_core::{Backend, DType, Reader, Sample, Schema, ShapeRule, Tensor};
    /// # use stowage_npy::{NpyBackend, NpyOptions};
    /// # let dir = tempfile::tempdir()?;
    /// # let schema = Schema::new().tensor("x", DType::U8, ShapeRule::Fixed(vec![1]));
    /// let mut cache = NpyBackend::create(dir.path(), &schema, NpyOptions::default())?;
    /// cache.set_index_tail_entries(2);
    /// for key in ["a", "b", "c"] {
    ///     cache.put(key, &Sample::new().with("x", Tensor::from_slice(&[1], &[7u8])?))?;
    /// }
    /// cache.flush()?; // 3 entries >= 2: written to index/
    /// assert!(dir.path().join("index").join("current").exists());
    /// assert_eq!(cache.len(), 3);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn set_index_tail_entries(&mut self, entries: usize) {
        self.index_tail_entries = entries.max(1);
    }

    /// The cache's directory layout.
    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    /// The options this handle was opened with.
    pub fn options(&self) -> &NpyOptions {
        &self.options
    }

    /// Every `(key, records)`, in first-put order, one record per field.
    ///
    /// Reads the whole record log (the key index on disk holds no key order): O(keys) time and
    /// memory.
    ///
    /// ```
    /// # use stowage_core::{Backend, DType, Sample, Schema, ShapeRule, Tensor};
    /// # use stowage_npy::{NpyBackend, NpyOptions};
    /// # let dir = tempfile::tempdir()?;
    /// # let schema = Schema::new().tensor("x", DType::U8, ShapeRule::Fixed(vec![1]));
    /// let mut cache = NpyBackend::create(dir.path(), &schema, NpyOptions::default())?;
    /// cache.put("a", &Sample::new().with("x", Tensor::from_slice(&[1], &[7u8])?))?;
    /// let records = cache.records()?;
    /// assert_eq!(records[0].0, "a");
    /// assert!(records[0].1[0].to_string().starts_with("10:"));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// Errors: [`Error::Corrupted`] when the log does not read back; [`Error::Io`].
    pub fn records(&self) -> Result<Vec<(String, Vec<Numpy10Record>)>> {
        let full = self.full_index()?;
        let index = full.as_ref().unwrap_or(&self.index);
        Ok(index
            .iter()
            .map(|(key, slots)| {
                let records =
                    slots.iter().enumerate().map(|(f, slot)| index.record(f, slot)).collect();
                (key.to_owned(), records)
            })
            .collect())
    }

    /// Every key's records from the log plus the tail's unflushed puts, in first-put order;
    /// `None` when the tail already holds every key (no runs).
    pub(crate) fn full_index(&self) -> Result<Option<KeyIndex>> {
        if self.runs.as_ref().is_none_or(|r| r.runs().is_empty()) {
            return Ok(None);
        }
        let log = self.read_indexed_log()?;
        let entries: Vec<Vec<u8>> =
            log.records.into_iter().filter(|r| r.first() != Some(&b'{')).collect();
        let mut full =
            KeyIndex::from_log(&entries, field_shapes(&self.meta), &self.layout.records_log())?;
        for (key, slots) in self.index.iter() {
            let records: Vec<Numpy10Record> =
                slots.iter().enumerate().map(|(f, slot)| self.index.record(f, slot)).collect();
            let refs: Vec<RecordRef<'_>> = records.iter().map(Numpy10Record::as_ref).collect();
            full.insert(key, &refs)?;
        }
        Ok(Some(full))
    }

    /// Every good record of the log, for a pass over every key (the runs hold no key order).
    ///
    /// Errors: [`Error::Corrupted`] when the log is damaged where the runs cover it (the open did
    /// not read it) or in its middle: a pass would miss keys the runs answer for.
    fn read_indexed_log(&self) -> Result<stowage_core::file_safety::Recovered> {
        let log = AppendLog::read_all(self.layout.records_log())?;
        let covered = self.runs.as_ref().map_or(0, |r| r.current().log_end);
        if let Some(damage) = &log.damage
            && (damage.offset < covered || damage.is_mid_log())
        {
            return Err(Error::corrupted(self.layout.records_log(), damage.to_string()));
        }
        Ok(log)
    }

    /// The log offset of the record the index answers `key` with: `Some(None)` for a key of the
    /// tail, `None` for an unknown key.
    pub(crate) fn located(&self, key: &str) -> Option<Option<u64>> {
        if self.index.find(key).is_some() {
            return Some(None);
        }
        self.runs.as_ref()?.find(key).map(|(offset, _)| Some(offset))
    }

    /// How the key index is held, for `describe`: runs, tail, and why `index/current` was not
    /// used.
    pub(crate) fn key_index_summary(&self) -> String {
        let tail = self.index.len();
        match (&self.runs, &self.index_note) {
            (_, Some(why)) => {
                format!("rebuilt from records.log at open ({tail} keys in memory): {why}")
            }
            (Some(runs), None) if !runs.runs().is_empty() => format!(
                "{} on-disk run(s) over records.log up to byte {}, {tail} keys in the in-memory \
                 tail",
                runs.runs().len(),
                runs.current().log_end
            ),
            _ => format!("in memory ({tail} keys replayed from records.log at open)"),
        }
    }

    /// The runs in use and why `index/current` was not used, for `validate`.
    pub(crate) fn key_runs(&self) -> (Option<&Runs>, Option<&str>) {
        (self.runs.as_ref(), self.index_note.as_deref())
    }

    /// Reads the sample of `field` that `record` addresses, the way hangar reads a record handed over
    /// by its record database: no key lookup, the sample's xxh64 checked against the record's when
    /// `verify`.
    ///
    /// The record may point into any collection file of the cache's `data/10`: stowage's, or one
    /// another writer (hangar) added, which no stowage record covers. Such a file is read whether
    /// hangar marks it staged, committed or not at all (an older stowage's finalize removed
    /// hangar's staging markers): the record's checksum vouches for the bytes. Its header must hold
    /// the field's dtype and slot shape; its slot count may differ from this cache's.
    ///
    /// Errors: [`Error::NotFound`] for an unknown field or a missing collection file;
    /// [`Error::InvalidArgument`] for a uid that is not 8 characters of `[a-z0-9]`, a slot or
    /// shape outside the file, or a shape other than a fixed field's; [`Error::Incompatible`] for
    /// a file of another dtype or slot shape; [`Error::Corrupted`] for a checksum mismatch (naming
    /// the file, the record and both digests).
    ///
    /// ```
    /// # use stowage_core::{Backend, DType, Sample, Schema, ShapeRule, Tensor};
    /// # use stowage_npy::{NpyBackend, NpyOptions};
    /// # let dir = tempfile::tempdir()?;
    /// # let schema = Schema::new().tensor("x", DType::U8, ShapeRule::Fixed(vec![2]));
    /// # let mut cache = NpyBackend::create(dir.path(), &schema, NpyOptions::default())?;
    /// # cache.put("a", &Sample::new().with("x", Tensor::from_slice(&[2], &[1u8, 2])?))?;
    /// let record = cache.record("a", "x").unwrap();
    /// assert_eq!(cache.read_record("x", &record, true)?.bytes(), &[1, 2]);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn read_record(&self, field: &str, record: &Numpy10Record, verify: bool) -> Result<Tensor> {
        let position =
            self.meta.schema.fields.iter().position(|f| f.name == field).ok_or_else(|| {
                Error::NotFound {
                    what: format!(
                        "field {field:?} in the schema of {}",
                        self.layout.root().display()
                    ),
                }
            })?;
        self.read_record_in(position, record.as_ref(), verify)
    }

    /// [`NpyBackend::read_record`] of the field at `position`.
    pub(crate) fn read_record_in(
        &self,
        position: usize,
        record: RecordRef<'_>,
        verify: bool,
    ) -> Result<Tensor> {
        if let FieldShape::Fixed(dims) = &self.index.field_shapes()[position]
            && dims.as_slice() != record.shape
        {
            return Err(Error::invalid(format!(
                "record {record}: shape differs from the field's fixed shape {}",
                stowage_core::shape::display(dims)
            )));
        }
        let Some(file) = self.index.file_id(record.uid) else {
            let tensor = self
                .foreign_collection(record.uid, position)?
                .read_record(&record.to_record(), verify)?;
            return self.with_field_dtype(position, tensor);
        };
        let index = u32::try_from(record.collection_index)
            .map_err(|_| Error::invalid(format!("record {record}: slot index out of range")))?;
        let slot = Slot::new(record.checksum, file, index);
        self.read_slot_with_shape(position, &slot, record.shape, verify)
    }

    /// A collection file no record of this cache points into, opened on first use, its header
    /// checked against field `field` (dtype and slot shape; another writer's slot count may
    /// differ).
    fn foreign_collection(&self, uid: &str, field: usize) -> Result<CollectionFile> {
        if !crate::record::is_valid_uid(uid) {
            return Err(Error::invalid(format!(
                "uid {} is not 8 characters of [a-z0-9]",
                stowage_core::quote::quote(uid, 40)
            )));
        }
        let mut files =
            self.foreign_files.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(open) = files.get(uid) {
            return Ok(open.clone());
        }
        drop(files); // not held while the file is mapped and its header read
        let path = self.layout.data_file(uid);
        let opened = CollectionFile::open(&path)?;
        let (dtype, slot_shape) = slot_of(&self.meta.schema, field);
        let header = opened.header();
        if !same_storage(&header.descr, dtype) || opened.slot_shape() != slot_shape.as_slice() {
            return Err(NpyError::ForeignHeaderMismatch {
                path,
                descr: header.descr.clone(),
                shape: header.shape.clone(),
                field: self.meta.schema.fields[field].name.clone(),
                dtype,
                slots: slot_shape,
            }
            .into());
        }
        let mut files =
            self.foreign_files.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        files.put(uid.to_owned(), opened.clone());
        Ok(opened)
    }

    pub(crate) fn index(&self) -> &KeyIndex {
        &self.index
    }

    /// The collection file with id `file`, opened (and its header checked against field `field`)
    /// on first use and shared afterwards (while it stays among the
    /// [`NpyOptions::max_open_files`] most recently used).
    pub(crate) fn collection(&self, file: u32, field: usize) -> Result<Opened<'_, CollectionFile>> {
        self.files.get_or_open(file as usize, || self.open_collection(file, field))
    }

    /// Maps collection file `file` and checks its header against field `field`.
    fn open_collection(&self, file: u32, field: usize) -> Result<CollectionFile> {
        let path = self.layout.data_file(self.index.file_uid(file));
        let opened = CollectionFile::open_with(&path, self.reads_at_random())?;
        let (dtype, slot_shape) = slot_of(&self.meta.schema, field);
        let header = opened.header();
        if !same_storage(&header.descr, dtype)
            || opened.slot_shape() != slot_shape.as_slice()
            || opened.rows() != self.meta.collection_size
        {
            return Err(NpyError::HeaderMismatch {
                path,
                descr: header.descr.clone(),
                shape: header.shape.clone(),
                field: self.meta.schema.fields[field].name.clone(),
                dtype,
                slots: slot_shape,
                rows: self.meta.collection_size,
            }
            .into());
        }
        Ok(opened)
    }

    /// Reads field `field` of a sample from its slot, verifying its checksum when `verify`.
    pub(crate) fn read_slot(&self, field: usize, slot: &Slot, verify: bool) -> Result<Tensor> {
        self.read_slot_with_shape(field, slot, self.index.shape(field, slot), verify)
    }

    fn read_slot_with_shape(
        &self,
        field: usize,
        slot: &Slot,
        shape: &[usize],
        verify: bool,
    ) -> Result<Tensor> {
        let uid = self.index.file_uid(slot.file);
        if let Some(writer) = &self.writer {
            // A slot put through this handle may still be in the column's write batch.
            writer.columns[field].write_out_slot(&self.layout, uid, u64::from(slot.index))?;
        }
        let what = RecordText { uid, slot, shape };
        let file = self.collection(slot.file, field)?;
        let tensor =
            file.read(u64::from(slot.index), shape, verify.then_some(slot.checksum), &what)?;
        self.with_field_dtype(field, tensor)
    }

    /// `tensor` read from a file of field `field`, with the field's dtype.
    fn with_field_dtype(&self, field: usize, tensor: Tensor) -> Result<Tensor> {
        if self.field_dtypes[field] == DType::BF16 {
            // Stored as <u2 (numpy has no bfloat16); same bytes, real dtype from stowage.json.
            let bytes = tensor.to_shared_bytes();
            return if tensor.is_zero_copy() {
                Tensor::shared(DType::BF16, tensor.shape().to_vec(), bytes)
            } else {
                Tensor::new(DType::BF16, tensor.shape().to_vec(), bytes)
            };
        }
        Ok(tensor)
    }

    /// Whether this handle maps the key index runs and the log for random access
    /// ([`Runs::set_random_access`]): a reader whose cold-read advice is on.
    pub(crate) fn reads_at_random(&self) -> bool {
        self.writer.is_none() && self.options.cold_read_advice != ColdReadAdvice::Never
    }

    pub(crate) fn metadata(&self) -> &CacheMetadata {
        &self.meta
    }
}

/// Whether a `.npy` descr stores `dtype` as stowage does: little-endian or native order. A
/// big-endian descr is refused, because a flipped `<` would otherwise pass the checksum (which
/// covers the stored bytes) and hand out byte-swapped values.
pub(crate) fn same_storage(descr: &str, dtype: DType) -> bool {
    descr.trim_start_matches(['<', '|', '=']) == storage_descr(dtype).trim_start_matches(['<', '|'])
}

/// The dtype and slot shape of field `field` (a tensor field: the capabilities allow nothing else).
fn slot_of(schema: &Schema, field: usize) -> (DType, Vec<usize>) {
    match &schema.fields[field].kind {
        FieldKind::Tensor { dtype, shape: ShapeRule::Fixed(dims) | ShapeRule::Max(dims) } => {
            (*dtype, dims.clone())
        }
        other => unreachable!("check_schema admits only fixed or max tensor fields, got {other:?}"),
    }
}

fn field_shapes(meta: &CacheMetadata) -> Vec<FieldShape> {
    meta.schema
        .fields
        .iter()
        .map(|f| match &f.kind {
            FieldKind::Tensor { shape: ShapeRule::Fixed(dims), .. } => {
                FieldShape::Fixed(dims.clone())
            }
            FieldKind::Tensor { shape: ShapeRule::Max(dims), .. } => {
                FieldShape::Varying(dims.len())
            }
            other => {
                unreachable!("check_schema admits only fixed or max tensor fields, got {other:?}")
            }
        })
        .collect()
}

/// Formats a slot as its hangar record string, only when an error message needs it.
struct RecordText<'a> {
    uid: &'a str,
    slot: &'a Slot,
    shape: &'a [usize],
}

impl std::fmt::Display for RecordText<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let dims: Vec<String> = self.shape.iter().map(usize::to_string).collect();
        write!(
            f,
            "record 10:{}:{:016x}:{}:{}",
            self.uid,
            self.slot.checksum,
            self.slot.index,
            dims.join(" ")
        )
    }
}

fn field_dtypes(meta: &CacheMetadata) -> Vec<DType> {
    (0..meta.schema.fields.len()).map(|i| slot_of(&meta.schema, i).0).collect()
}

fn column_writers(meta: &CacheMetadata) -> Result<Vec<ColumnWriter>> {
    let worker = std::sync::Arc::new(BackgroundWriter::start(BACKEND_NAME)?);
    (0..meta.schema.fields.len())
        .map(|i| {
            let (dtype, slot) = slot_of(&meta.schema, i);
            ColumnWriter::new(dtype, slot, meta.collection_size, std::sync::Arc::clone(&worker))
        })
        .collect()
}

impl Reader for NpyBackend {
    fn name(&self) -> &'static str {
        BACKEND_NAME
    }

    fn format(&self) -> &'static Format {
        &crate::STOWAGE_NPY
    }

    fn capabilities(&self) -> &Capabilities {
        &self.capabilities
    }

    fn schema(&self) -> &Schema {
        &self.meta.schema
    }

    fn path(&self) -> &Path {
        self.layout.root()
    }

    /// A reader tells the kernel which pages of the collection files the get will read when
    /// they may be missing ([`NpyOptions::cold_read_advice`]; the runs' slots too when there are
    /// several), and maps the runs and the log for random access: a cold get reads each page it
    /// needs, one after another, never the kernel's read-around of a large file.
    fn get(&self, key: &str) -> Result<Option<Sample>> {
        if self.writer.is_none() && self.advisor.get_wants_probe() {
            self.advise_get(key);
        }
        self.get_unadvised(key)
    }

    /// The batch's pages are told to the kernel before they are read, while reads find pages
    /// missing ([`NpyOptions::cold_read_advice`]): the runs' slots of every key the tail does
    /// not hold, then every candidate's log record, then the collection files the batch needs
    /// and this handle has not opened yet are opened (and their headers read) by up to 32
    /// threads at once, then every row, each round's reads in flight together
    /// instead of four dependent reads one after another per key.
    /// A writer's batch is not advised (its rows may still be in its write batches).
    fn get_batch(&self, keys: &[&str]) -> Result<Vec<Option<Sample>>> {
        batch_by_visiting(self, keys)
    }

    /// The batch advised as [`Reader::get_batch`] says, then each key read and visited in turn.
    fn get_batch_each(&self, keys: &[&str], visit: &mut BatchVisitor<'_>) -> Result<()> {
        if self.writer.is_none() && self.advisor.policy() != ColdReadAdvice::Never {
            let cold = self.advise_lookups(keys);
            self.open_files_of(keys, cold);
            self.advisor.before_batch_rows(keys.len(), |i, plan| self.plan_rows(keys[i], plan));
        }
        for (at, key) in keys.iter().enumerate() {
            if visit(at, self.get_unadvised(key)?).is_break() {
                break;
            }
        }
        Ok(())
    }

    fn contains(&self, key: &str) -> Result<bool> {
        Ok(self.located(key).is_some())
    }

    fn len(&self) -> usize {
        let tail_new = self.resolve_tail_in_runs().1;
        (self.runs.as_ref().map_or(0, Runs::keys) + tail_new) as usize
    }

    /// With runs, one pass over the log (the runs hold no key order): the keys and about 12
    /// bytes per key of dedup table, never the records.
    fn keys(&self) -> Result<Vec<String>> {
        if self.runs.as_ref().is_none_or(|r| r.runs().is_empty()) {
            return Ok(self.index.keys().map(str::to_owned).collect());
        }
        let log = self.read_indexed_log()?;
        let mut keys = FirstPut::default();
        for (i, payload) in log.records.iter().enumerate() {
            if payload.first() == Some(&b'{') {
                continue;
            }
            let key = runs::entry_key(payload).ok_or_else(|| {
                Error::corrupted(self.layout.records_log(), format!("record {i}: no key"))
            })?;
            keys.add(&key);
        }
        // Puts not flushed yet.
        for key in self.index.keys() {
            keys.add(key);
        }
        Ok(keys.keys)
    }

    fn is_finalized(&self) -> bool {
        self.state.is_finalized()
    }

    /// One unit per collection file, reading each selected record in it (`check_plan` module).
    fn check_plan(
        &self,
        selection: &stowage_core::check_plan::Selection,
    ) -> Result<stowage_core::check_plan::CheckPlan<'_>> {
        crate::check_plan::plan(self, selection)
    }

    fn validate(&self, level: ValidationLevel) -> Result<ValidationReport> {
        validate::validate(self, level)
    }

    /// The metadata, the record-derived dedup and memory, and the field each collection file
    /// holds.
    fn describe(&self) -> Result<stowage_core::describe::Description> {
        crate::describe::describe(self)
    }
}

impl Backend for NpyBackend {
    fn put(&mut self, key: &str, sample: &Sample) -> Result<()> {
        self.state.check_put(key, sample, &self.meta.schema, &self.capabilities)?;
        let NpyBackend { layout, meta, state, writer, index, files, .. } = self;
        let writer = writer.as_mut().expect("a writable handle has a writer");
        let mut written = Vec::with_capacity(meta.schema.fields.len());
        for (column, field) in writer.columns.iter_mut().zip(&meta.schema.fields) {
            let Some(Value::Tensor(tensor)) = sample.get(&field.name) else {
                unreachable!("validated: every field is a non-null tensor");
            };
            // A failed column write leaves what reached the file unknown.
            let (checksum, slot) =
                state.poison_on_error(column.write(layout, &mut writer.owned, tensor))?;
            written.push((checksum, slot, tensor.shape()));
        }
        let records: Vec<RecordRef<'_>> = written
            .iter()
            .zip(&writer.columns)
            .map(|(&(checksum, collection_index, shape), column)| RecordRef {
                uid: column.current_uid(),
                checksum,
                collection_index,
                shape,
            })
            .collect();
        // Whether a run holds the key is asked later, for the whole tail at once.
        index.insert(key, &records)?;
        let found = index.find(key).expect("just inserted");
        let ordinal = u32::try_from(KeyIndex::ordinal(&found)).expect("the tail counts u32 keys");
        encode_entry_into(&mut writer.pending, key, &records);
        writer.pending_ends.push(writer.pending.len());
        writer.pending_hashes.push(stowage_core::key_runs::key_hash(key.as_bytes()));
        writer.pending_ordinals.push(ordinal);
        writer.pending_hints.push(row_hint(index, &found, meta.collection_size));
        files.grow_to(index.file_uids().len());
        Ok(())
    }

    fn flush(&mut self) -> Result<()> {
        self.state.check_write("flush")?;
        let NpyBackend { layout, state, writer, .. } = self;
        let writer = writer.as_mut().expect("a writable handle has a writer");
        let mut sync = || -> Result<()> {
            for column in &mut writer.columns {
                column.sync(layout)?;
            }
            let mut start = 0;
            let pending = writer
                .pending_hashes
                .iter()
                .zip(&writer.pending_ordinals)
                .zip(&writer.pending_hints);
            for (&end, ((&hash, &ordinal), &hint)) in writer.pending_ends.iter().zip(pending) {
                let offset = writer.log.byte_len();
                writer.log.append(&writer.pending[start..end])?;
                writer.tail_entries.push((hash, Locator::encode(offset, hint)));
                writer.tail_ordinals.push(ordinal);
                writer.last_offset = Some(offset);
                start = end;
            }
            writer.pending.clear();
            writer.pending_ends.clear();
            writer.pending_hashes.clear();
            writer.pending_ordinals.clear();
            writer.pending_hints.clear();
            writer.log.sync()
        };
        let result = sync();
        state.poison_on_error(result)?;
        let full = self.writer.as_ref().map_or(0, |w| w.tail_entries.len());
        if full >= self.index_tail_entries {
            let result = self.write_run(false);
            self.state.poison_on_error(result)?;
        }
        Ok(())
    }

    fn finalize(&mut self) -> Result<()> {
        self.state.check_write("finalize")?;
        if self.state.is_finalized() {
            return Ok(());
        }
        self.flush()?;
        let result = self.commit();
        self.state.poison_on_error(result)?;
        self.state.set_finalized(true);
        Ok(())
    }
}

impl NpyBackend {
    /// The commit: the finalize record in the log (the commit point), then the markers.
    fn commit(&mut self) -> Result<()> {
        let keys = self.len() as u64;
        let writer = self.writer.as_mut().expect("finalize goes through a writer");
        let offset = writer.log.byte_len();
        writer.log.append(&encode_finalize(keys))?;
        writer.log.sync()?;
        writer.last_offset = Some(offset);
        // One run over the whole log, the finalize record included: a reader replays nothing.
        self.write_run(true)?;
        self.write_markers()
    }

    /// Turns the tail into a run (merged with every run when `all`, else as
    /// [`stowage_core::key_runs::plan_merge`] picks) and names it in `index/current`. Called with
    /// no pending entries: every tail record is durable in the log.
    fn write_run(&mut self, all: bool) -> Result<()> {
        if self.writer.as_ref().is_none_or(|w| w.last_offset.is_none()) {
            return Ok(());
        }
        let in_runs: Vec<Option<bool>> = {
            let resolved = self.resolve_tail_in_runs();
            let writer = self.writer.as_ref().expect("runs are written by a writer");
            writer.tail_ordinals.iter().map(|&o| resolved.0.get(o as usize).copied()).collect()
        };
        let writer = self.writer.as_mut().expect("runs are written by a writer");
        let runs = self.runs.as_mut().expect("a writer has runs");
        let last = writer.last_offset.expect("checked");
        let covered = (writer.log.byte_len(), writer.log.len(), last);
        let fresh = (&writer.tail_entries[..], &in_runs[..]);
        runs.write(&self.layout, fresh, covered, self.index.file_uids(), all)?;
        writer.tail_entries.clear();
        writer.tail_ordinals.clear();
        self.index.clear_keys();
        *self.tail_in_runs.get_mut().unwrap_or_else(|e| e.into_inner()) = Default::default();
        Ok(())
    }

    /// Whether a run holds each of the tail's keys, by ordinal, and how many no run holds:
    /// the keys not resolved yet are looked up in batches ([`Runs::held`]).
    fn resolve_tail_in_runs(&self) -> std::sync::MutexGuard<'_, (Vec<bool>, u64)> {
        let mut resolved = self.tail_in_runs.lock().unwrap_or_else(|e| e.into_inner());
        let done = resolved.0.len();
        if done < self.index.len() {
            let keys: Vec<&str> = self.index.keys().skip(done).collect();
            let held = match &self.runs {
                Some(runs) => runs.held(&keys),
                None => vec![false; keys.len()],
            };
            resolved.1 += held.iter().filter(|&&held| !held).count() as u64;
            resolved.0.extend(held);
        }
        resolved
    }

    /// The sample of `key` from the runs (after the tail missed).
    /// [`Reader::get`] without advice.
    fn get_unadvised(&self, key: &str) -> Result<Option<Sample>> {
        let verify = self.options.verify_checksums;
        let Some(found) = self.index.find(key) else { return self.get_from_runs(key) };
        let mut sample = Sample::new();
        for (i, field) in self.meta.schema.fields.iter().enumerate() {
            let slot = self.index.slot(&found, i);
            let tensor = self
                .read_slot(i, &slot, verify)
                .map_err(|e| in_field(e, &field.name).for_key(key))?;
            sample.insert(self.field_names[i].clone(), Value::Tensor(tensor));
        }
        Ok(Some(sample))
    }

    /// Before a single get that probes ([`ColdReadAdvisor::get_wants_probe`]): the home slot of
    /// `key` in every run at once when there are several (a lookup reads them newest first,
    /// each a dependent read when cold), then the rows of every field together
    /// ([`ColdReadAdvisor::before_get`]).
    fn advise_get(&self, key: &str) {
        if let Some(runs) = self.runs.as_ref().filter(|r| r.runs().len() > 1)
            && self.index.find(key).is_none()
        {
            let hash = key_hash(key.as_bytes());
            let mut slots = PagePlan::with_capacity(runs.runs().len());
            for run in runs.runs() {
                let (bytes, slot) = run.home_slot(hash);
                let _ = slots.add(bytes, slot);
            }
            self.advisor.before_get(&mut slots);
        }
        let mut rows = PagePlan::with_capacity(self.meta.schema.fields.len());
        self.plan_rows(key, &mut rows);
        self.advisor.before_get(&mut rows);
    }

    /// Before a batch: advises the runs' home slots of `keys` the tail does not hold, then the
    /// log records their slots name (unconfirmed: a slot is read either way), when a `mincore`
    /// sample of the slots finds pages missing (or always, with [`ColdReadAdvice::Always`]).
    /// Whether the slots were advised; false for a cache whose keys are all in memory.
    fn advise_lookups(&self, keys: &[&str]) -> bool {
        let Some(runs) = self.runs.as_ref().filter(|r| !r.runs().is_empty()) else { return false };
        let hashes: Vec<u64> = keys
            .iter()
            .filter(|key| self.index.find(key).is_none())
            .map(|key| key_hash(key.as_bytes()))
            .collect();
        let slots = self.advisor.before_batch_rows(hashes.len(), |i, plan| {
            for run in runs.runs() {
                let (bytes, slot) = run.home_slot(hashes[i]);
                let _ = plan.add(bytes, slot);
            }
        });
        if slots.runs_advised == 0 {
            return false;
        }
        let mut records = PagePlan::with_capacity(hashes.len());
        for &hash in &hashes {
            for run in runs.runs() {
                run.find(hash, |payload| {
                    if let Some(range) = runs.record_range(Locator::offset_of(payload)) {
                        let _ = records.add(runs.log_bytes(), range);
                    }
                    false
                });
            }
        }
        self.advisor.before_batch(&mut records);
        true
    }

    /// Opens the collection files the rows of `keys` are in that this handle has not opened
    /// yet, each on one of up to [`stowage_core::cold_reads::OPEN_THREADS`] threads, when there are at least
    /// [`PARALLEL_OPENS`] of them and the batch was found `cold` (or its keys are all in memory,
    /// where finding their files costs no read): a cold open reads the directory entry, the
    /// inode and the header, three dependent reads, which one thread would wait for file after
    /// file. Errors are left to the reads, which open the file again.
    fn open_files_of(&self, keys: &[&str], cold: bool) {
        let all_in_memory = self.runs.as_ref().is_none_or(|r| r.runs().is_empty());
        if !(cold || all_in_memory) || self.files.open_count() == self.files.len() {
            return;
        }
        let mut wanted: Vec<(u32, usize)> = keys
            .iter()
            .flat_map(|key| self.rows_of(key))
            .filter(|&(_, file, _)| self.files.get_if_open(file as usize).is_none())
            .map(|(field, file, _)| (file, field))
            .collect();
        wanted.sort_unstable();
        wanted.dedup();
        if wanted.len() < PARALLEL_OPENS {
            return;
        }
        each_on_threads(&wanted, |&(file, field)| {
            let _ = self.collection(file, field);
        });
    }

    /// (field, collection file id, slot index) of every field of `key`'s latest record; empty
    /// for a key not found or a record that does not parse (its read says why).
    fn rows_of(&self, key: &str) -> Vec<(usize, u32, u64)> {
        match self.index.find(key) {
            Some(found) => (0..self.meta.schema.fields.len())
                .map(|i| {
                    let slot = self.index.slot(&found, i);
                    (i, slot.file, u64::from(slot.index))
                })
                .collect(),
            None => {
                let Some(runs) = &self.runs else { return Vec::new() };
                let Some((_, payload)) = runs.find(key) else { return Vec::new() };
                let fields = self.meta.schema.fields.len();
                let Some(records) = runs::entry_records(payload, fields) else {
                    return Vec::new();
                };
                records
                    .iter()
                    .enumerate()
                    .filter_map(|(i, record)| {
                        let record = record.as_ref();
                        let file = self.index.file_id(record.uid)?;
                        Some((i, file, record.collection_index))
                    })
                    .collect()
            }
        }
    }

    /// Adds the rows `key`'s latest record points to (every field's slot) to `plan`; nothing
    /// for a key not found or a record that does not parse (its read says why).
    fn plan_rows(&self, key: &str, plan: &mut PagePlan<'_>) {
        for (field, file, index) in self.rows_of(key) {
            let Ok(file) = self.collection(file, field) else { continue };
            if let Some((map, range)) = file.slot_range(index) {
                // Kept by the plan: the bounded set may close the file before the advice.
                let _ = plan.add_shared(map, range);
            }
        }
    }

    fn get_from_runs(&self, key: &str) -> Result<Option<Sample>> {
        let Some(runs) = &self.runs else { return Ok(None) };
        let prefetch = |hint| self.prefetch_hinted_row(hint);
        let Some((offset, payload)) = runs.find_hinted(key, prefetch) else { return Ok(None) };
        let fields = self.meta.schema.fields.len();
        if let Some(records) = runs::entry_records(payload, fields) {
            return self.sample_of_records(key, records.iter().map(ParsedRecord::as_ref)).map(Some);
        }
        let (_, records) = decode_entry(payload, fields).map_err(|e| {
            Error::corrupted(
                self.layout.records_log(),
                format!("record at byte offset {offset}: {e}"),
            )
        })?;
        self.sample_of_records(key, records.iter().map(Numpy10Record::as_ref)).map(Some)
    }

    /// Starts loading the first [`HINTED_PREFETCH_BYTES`] of the row `hint` names, when its file
    /// is open: the load then runs beside the read of the log record, which decides what is read.
    fn prefetch_hinted_row(&self, hint: RowHint) {
        let (file, row) = hint.file_and_row(self.meta.collection_size);
        if file >= self.files.len() {
            return;
        }
        if let Some(opened) = self.files.get_if_open(file)
            && let Some((map, range)) = opened.slot_range(row as u64)
        {
            let len = range.len().min(HINTED_PREFETCH_BYTES);
            stowage_core::prefetch::prefetch(&map[range.start..range.start + len]);
        }
    }

    /// The sample of `key` whose fields `records` locate, in schema order.
    fn sample_of_records<'r>(
        &self,
        key: &str,
        records: impl Iterator<Item = RecordRef<'r>>,
    ) -> Result<Sample> {
        let verify = self.options.verify_checksums;
        let mut sample = Sample::new();
        for (i, (field, record)) in self.meta.schema.fields.iter().zip(records).enumerate() {
            let tensor = self
                .read_record_in(i, record, verify)
                .map_err(|e| in_field(e, &field.name).for_key(key))?;
            sample.insert(self.field_names[i].clone(), Value::Tensor(tensor));
        }
        Ok(sample)
    }

    /// hangar's commit of stowage's own files, then `_COMPLETE`, written atomically and last:
    /// a `store_data` marker for every file a record points into, and the staging marker of every
    /// file stowage created cleared (files of a crashed session that no record points into are
    /// left unmarked, as hangar leaves files it never committed). Markers of files another writer
    /// added are neither created nor removed: hangar's staged data stays staged for hangar.
    /// Idempotent, so an interrupted finalize is rolled forward by the next writer.
    fn write_markers(&self) -> Result<()> {
        let layout = &self.layout;
        let writer = self.writer.as_ref().expect("markers are written by a writer");
        for uid in self.index.file_uids() {
            let marker = layout.store_marker(uid);
            // Not truncating: an existing marker (a rolled-forward finalize) stays as it is. Not
            // following a link: creating through a dangling one would make a file elsewhere.
            open_no_follow(
                std::fs::OpenOptions::new().write(true).create(true).truncate(false),
                &marker,
            )
            .at(&marker)?;
        }
        fsync_dir(layout.store_dir())?;
        for uid in writer.owned.uids() {
            let marker = layout.stage_marker(uid);
            match std::fs::remove_file(&marker) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                    return Err(Error::io(marker, e));
                }
                _ => {}
            }
        }
        fsync_dir(layout.stage_dir())?;
        let marker = CommitMarker {
            log_records: writer.log.len(),
            keys: self.len() as u64,
            owned_files_records: Some(writer.owned.records()),
        };
        atomic_write(layout.complete_marker(), &serde_json::to_vec(&marker).expect("serializes"))
    }

    /// Opens with `mode`.
    pub fn open(dir: impl AsRef<Path>, mode: OpenMode, options: NpyOptions) -> Result<NpyBackend> {
        match mode {
            OpenMode::ReadOnly => Self::open_read_only(dir, options),
            OpenMode::Append => Self::open_append(dir, options),
        }
    }
}

/// Removes the temporaries of `stowage.json` and `_COMPLETE` that a writer killed inside
/// `atomic_write` left (create, finalize). Called under the writer lock, so none is a live
/// writer's.
fn remove_killed_writers_temps(layout: &Layout) -> Result<()> {
    let ours = |name: &str| matches!(name, "stowage.json" | "_COMPLETE");
    stowage_core::file_safety::remove_abandoned_temps(layout.root(), ours)?;
    Ok(())
}

/// Makes `data/10`, `stage_data/10` and `store_data/10` where missing and makes each name
/// durable ([`create_dir_within_durably`]): flushes fsync a directory's entries, not its own name
/// in its parent, and a power cut would otherwise take every collection file with it.
///
/// Refuses any of them (or `data/`, `stage_data/`, `store_data/`) that is a symbolic link: every
/// file of a writer is created in them, and none may land outside the cache.
fn make_layout_dirs(layout: &Layout) -> Result<()> {
    for dir in [layout.data_dir(), layout.stage_dir(), layout.store_dir()] {
        create_dir_within_durably(layout.root(), &dir)?;
    }
    Ok(())
}

/// What an open read from the log and the index.
struct Loaded {
    /// The records after the runs' end (every record without runs).
    records: Vec<Vec<u8>>,
    marker: Option<CommitMarker>,
    /// Damage of the log after the runs' end.
    damage: Option<stowage_core::file_safety::Damage>,
    runs: Option<Runs>,
    index_note: Option<String>,
}

/// What [`replay`] found.
struct Replayed {
    finalized: bool,
    /// Keys of the tail no run holds.
    /// Distinct keys replayed.
    keys: usize,
    /// (key hash, [`Locator`] payload) of each entry.
    entries: Vec<(u64, u64)>,
    /// The tail ordinal of each entry's key.
    ordinals: Vec<u32>,
    /// Byte offset of the last record replayed.
    last_offset: Option<u64>,
}

/// How much of a hinted row a lookup requests before it reads the log record: 16 cache lines.
/// More would wait for the core's line fill buffers and hold up the record's load (a whole 2 KiB
/// row gained half as much in `python_bench`-shaped gets); the hash's own prefetch
/// ([`crate::cold_hash`]) asks for the rest.
const HINTED_PREFETCH_BYTES: usize = 1024;

/// The row hint of `found`'s latest entry: where its first field is.
fn row_hint(
    index: &KeyIndex,
    found: &crate::index::Found,
    collection_size: usize,
) -> Option<RowHint> {
    let slot = index.slot(found, 0);
    RowHint::of(slot.file, slot.index, collection_size)
}

/// Replays `records`, the log's records from byte offset `start` on (`before` records precede
/// them), into the tail `index`: each entry sets its key, a later one superseding an earlier one;
/// the finalize record must be last and count every key.
fn replay(
    index: &mut KeyIndex,
    runs: Option<&Runs>,
    records: &[Vec<u8>],
    (start, before): (u64, u64),
    collection_size: usize,
    log_path: &Path,
) -> Result<Replayed> {
    let run_keys = runs.map_or(0, Runs::keys);
    let mut replayed = Replayed {
        finalized: runs.is_some_and(Runs::finalized),
        keys: 0,
        entries: Vec::with_capacity(records.len()),
        ordinals: Vec::with_capacity(records.len()),
        last_offset: None,
    };
    let mut offset = start;
    for (i, payload) in records.iter().enumerate() {
        let corrupted = |detail: String| {
            Error::corrupted(log_path, format!("record {}: {detail}", before + i as u64))
        };
        if replayed.finalized {
            return Err(corrupted("an entry follows the finalize record".into()));
        }
        if payload.first() == Some(&b'{') {
            let keys = decode_finalize(payload).map_err(corrupted)?;
            // Rare (a crash between the finalize record and the index naming it): probe.
            let tail_new = match runs {
                Some(runs) => index.keys().filter(|key| runs.find(key).is_none()).count(),
                None => index.len(),
            } as u64;
            if keys != run_keys + tail_new {
                return Err(corrupted(format!(
                    "the finalize record counts {keys} keys, the log holds {}",
                    run_keys + tail_new
                )));
            }
            replayed.finalized = true;
        } else {
            let (key, entry) =
                decode_entry(payload, index.field_shapes().len()).map_err(corrupted)?;
            let refs: Vec<RecordRef<'_>> = entry.iter().map(Numpy10Record::as_ref).collect();
            index.insert(&key, &refs).map_err(|e| corrupted(e.to_string()))?;
            let found = index.find(&key).expect("just inserted");
            let hint = row_hint(index, &found, collection_size);
            let hash = stowage_core::key_runs::key_hash(key.as_bytes());
            replayed.entries.push((hash, Locator::encode(offset, hint)));
            let ordinal = u32::try_from(KeyIndex::ordinal(&found))
                .map_err(|_| corrupted("more than 2^32 keys after the index".into()))?;
            replayed.ordinals.push(ordinal);
        }
        replayed.last_offset = Some(offset);
        offset += (AppendLog::RECORD_HEADER_LEN + payload.len()) as u64;
    }
    replayed.keys = index.len();
    Ok(replayed)
}

/// Keys in first-put order, each once: a table of (key hash, first position), confirmed against
/// the kept key on a hash match.
#[derive(Default)]
struct FirstPut {
    keys: Vec<String>,
    first: foldhash::HashMap<u64, u32>,
    /// Positions of keys whose hash an earlier, different key has (rare).
    more: foldhash::HashMap<u64, Vec<u32>>,
}

impl FirstPut {
    fn add(&mut self, key: &str) {
        let hash = stowage_core::key_runs::key_hash(key.as_bytes());
        let at = self.keys.len() as u32;
        match self.first.get(&hash) {
            None => {
                self.first.insert(hash, at);
            }
            Some(&i) if self.keys[i as usize] == key => return,
            Some(_) => {
                let more = self.more.entry(hash).or_default();
                if more.iter().any(|&i| self.keys[i as usize] == key) {
                    return;
                }
                more.push(at);
            }
        }
        self.keys.push(key.to_owned());
    }
}

/// The bounded set of foreign collection files a handle keeps mapped
/// ([`NpyOptions::max_open_files`]).
fn foreign_files(max_open_files: usize) -> LruCache<String, CollectionFile> {
    LruCache::new(std::num::NonZeroUsize::new(max_open_files.max(1)).expect("at least 1"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use stowage_core::{DType, ShapeRule, Tensor};

    fn schema() -> Schema {
        Schema::new().tensor("x", DType::U32, ShapeRule::Fixed(vec![2])).tensor(
            "y",
            DType::U8,
            ShapeRule::Max(vec![3]),
        )
    }

    fn sample(value: u32) -> Sample {
        Sample::new()
            .with("x", Tensor::from_slice(&[2], &[value, value + 1]).unwrap())
            .with("y", Tensor::from_slice(&[1], &[value as u8]).unwrap())
    }

    /// A finished cache of 400 keys in files of 16 slots: 25 files per field.
    fn cache() -> (tempfile::TempDir, Vec<String>) {
        let dir = tempfile::tempdir().unwrap();
        let options = NpyOptions { collection_size: 16, ..NpyOptions::default() };
        let mut cache = NpyBackend::create(dir.path(), &schema(), options).unwrap();
        let keys: Vec<String> = (0..400u32).map(|i| format!("k{i}")).collect();
        for (i, key) in keys.iter().enumerate() {
            cache.put(key, &sample(i as u32)).unwrap();
        }
        cache.finalize().unwrap();
        (dir, keys)
    }

    fn reader(dir: &Path, advice: ColdReadAdvice) -> NpyBackend {
        let options = NpyOptions { cold_read_advice: advice, ..NpyOptions::default() };
        NpyBackend::open_read_only(dir, options).unwrap()
    }

    fn opened(cache: &NpyBackend) -> usize {
        cache.files.open_count()
    }

    #[test]
    fn a_cold_batch_opens_its_files_before_reading_and_a_warm_one_leaves_them_to_the_reads() {
        let (dir, keys) = cache();
        let keys: Vec<&str> = keys.iter().map(String::as_str).collect();
        let batch = &keys[..100]; // files 0..7 of each field
        let cache = reader(dir.path(), ColdReadAdvice::Always);
        assert!(cache.runs.as_ref().is_some_and(|r| !r.runs().is_empty()), "read from a run");
        assert_eq!(opened(&cache), 0);
        // Not cold: the runs would have to be read to find the files.
        cache.open_files_of(batch, false);
        assert_eq!(opened(&cache), 0);
        assert!(cache.advise_lookups(batch), "Always advises the lookups");
        cache.open_files_of(batch, true);
        assert_eq!(opened(&cache), 2 * 7, "every file of the batch, of both fields");
        let (first, last) = (cache.rows_of("k0"), cache.rows_of("k399"));
        assert_eq!(first.iter().map(|r| (r.0, r.2)).collect::<Vec<_>>(), [(0, 0), (1, 0)]);
        assert!(first.iter().chain(&last).all(|r| r.1 < 50));
        assert!(cache.rows_of("missing").is_empty());
        assert_eq!(cache.get_batch(batch).unwrap()[99], Some(sample(99)));
    }

    #[test]
    fn a_get_advises_the_pages_of_every_field_of_its_row() {
        let (dir, _) = cache();
        let cache = reader(dir.path(), ColdReadAdvice::Always);
        let mut plan = PagePlan::new();
        cache.plan_rows("k37", &mut plan);
        let page = stowage_core::cold_reads::page_size();
        let expected: Vec<std::ops::Range<usize>> = cache
            .rows_of("k37")
            .into_iter()
            .map(|(field, file, index)| {
                let file = cache.collection(file, field).unwrap();
                let (map, range) = file.slot_range(index).unwrap();
                let start = (map.as_ptr() as usize + range.start) & !(page - 1);
                let end = (map.as_ptr() as usize + range.end).div_ceil(page) * page;
                start..end
            })
            .collect();
        assert_eq!(expected.len(), 2, "one slot in each field's file");
        // Pages, not runs: two maps' pages that touch merge into one run.
        let pages = |runs: &[std::ops::Range<usize>]| {
            let mut pages: Vec<usize> = runs.iter().flat_map(|r| r.clone().step_by(page)).collect();
            pages.sort_unstable();
            pages.dedup();
            pages
        };
        assert_eq!(pages(&plan.runs()), pages(&expected));
        assert_eq!(cache.get("k37").unwrap(), Some(sample(37)));
    }

    #[test]
    fn a_reader_keeps_at_most_max_open_files_mapped_and_reads_every_key() {
        let (dir, keys) = cache();
        for advice in [ColdReadAdvice::Always, ColdReadAdvice::Never] {
            let options =
                NpyOptions { cold_read_advice: advice, max_open_files: 3, ..NpyOptions::default() };
            let cache = NpyBackend::open_read_only(dir.path(), options).unwrap();
            assert!(cache.files.len() > 3 * 10, "{} files", cache.files.len());
            for (i, key) in keys.iter().enumerate() {
                assert_eq!(cache.get(key).unwrap(), Some(sample(i as u32)), "{key}");
                assert!(opened(&cache) <= 3, "{} open after {key}", opened(&cache));
            }
            let batch: Vec<&str> = keys.iter().rev().map(String::as_str).collect();
            let got = cache.get_batch(&batch).unwrap();
            assert!(
                got.iter()
                    .zip(batch)
                    .all(|(got, key)| { *got == Some(sample(key[1..].parse().unwrap())) })
            );
            assert!(opened(&cache) <= 3);
        }
    }

    #[test]
    fn a_plan_keeps_the_maps_of_files_the_bounded_set_closed() {
        let (dir, keys) = cache();
        let options = NpyOptions { max_open_files: 1, ..NpyOptions::default() };
        let cache = NpyBackend::open_read_only(dir.path(), options).unwrap();
        let mut plan = PagePlan::new();
        // Two fields: each row's second file closes its first; the last key's files are
        // past every earlier one's.
        for key in [&keys[0], &keys[399]] {
            cache.plan_rows(key, &mut plan);
        }
        assert_eq!(opened(&cache), 1);
        // Every planned page is still mapped: madvise refuses a run with an unmapped page.
        let runs = plan.run_count();
        assert!(runs >= 1);
        assert_eq!(plan.advise(), runs, "every run of both keys' four files was advised");
    }

    #[test]
    fn a_large_collection_file_is_opened_reading_its_header_alone_and_reads_the_same() {
        let dir = tempfile::tempdir().unwrap();
        let schema = Schema::new().tensor("x", DType::U32, ShapeRule::Fixed(vec![1024]));
        let options = NpyOptions { collection_size: 80, ..NpyOptions::default() };
        let mut cache = NpyBackend::create(dir.path(), &schema, options).unwrap();
        let row = |i: u32| -> Vec<u32> { (0..1024).map(|j| i * 7 + j).collect() };
        for i in 0..100u32 {
            let tensor = Tensor::from_slice(&[1024], &row(i)).unwrap();
            cache.put(&format!("k{i}"), &Sample::new().with("x", tensor)).unwrap();
        }
        cache.finalize().unwrap();
        drop(cache);
        for advice in [ColdReadAdvice::Adaptive, ColdReadAdvice::Never] {
            let cache = reader(dir.path(), advice);
            let file = cache.collection(0, 0).unwrap();
            assert!(
                file.slot_range(0).unwrap().0.len() > crate::collection::READ_WHOLE,
                "a large file"
            );
            for i in [0u32, 79, 80, 99] {
                let got = cache.get(&format!("k{i}")).unwrap().unwrap();
                assert_eq!(got.tensor("x").unwrap().to_vec::<u32>().unwrap(), row(i));
            }
        }
    }

    #[test]
    fn never_advises_nothing_and_opens_files_only_as_it_reads() {
        let (dir, keys) = cache();
        let keys: Vec<&str> = keys.iter().map(String::as_str).collect();
        let cache = reader(dir.path(), ColdReadAdvice::Never);
        assert!(!cache.reads_at_random());
        assert!(!cache.advise_lookups(&keys), "Never advises no lookup");
        let got = cache.get_batch(&keys[..20]).unwrap();
        assert_eq!(got[19], Some(sample(19)));
        assert_eq!(opened(&cache), 2 * 2, "the files of keys 0..20 only, by the reads");
        assert!(reader(dir.path(), ColdReadAdvice::Adaptive).reads_at_random());
    }
}
