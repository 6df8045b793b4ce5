//! `ArrowBackend`: the [`Backend`] over a torchcachex-layout cache that stowage writes.
//!
//! Writes go to a pending buffer; a flush (by `flush`, or by `put` once `flush_every` samples or
//! `max_segment_bytes` are pending) writes them as one or more segments, each crash-safely
//! ([`crate::segment_writer`]) with its key sidecar and row checksums, then commits each in the
//! commit log ([`crate::commit_log`]). Nothing rewrites what is already cached, so a flush costs
//! its own rows only. Once `merge_after` segments are in no key index run, the writer merges them
//! into a run on a background thread, folding in the newest runs no larger than that
//! ([`crate::merged_index`]).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use stowage_core::file_safety::{AppendLog, WriterLock, atomic_write, fsync_dir};
use stowage_core::{
    Backend, Capabilities, Error, IoResultExt, OpenMode, Result, Sample, Schema, ValidationLevel,
    ValidationReport,
};

use crate::commit_log::{self, CacheHeader, Committed, CompleteMarker, Record};
use crate::encode::{FieldColumns, arrow_schema, columns_for};
use crate::layout::Layout;
use crate::options::ArrowOptions;
use crate::pending::Pending;
use crate::reader::CacheReader;
use crate::sample_cache::SampleCache;
use crate::schema_json::{OutputStructure, SchemaJson};
use crate::segment_writer::SegmentFormat;
use crate::writer::{Compaction, Writer, WriterSetup, remove_marker};

/// What an Arrow segment cache can do: everything the core models. Tensors of every dtype, bytes,
/// JSON, any shape, nullable fields, overwrite (a later row wins, as in torchcachex), appends
/// after finalize (segments are append-only), resume, checksums, zero-copy gets (bool tensors
/// excepted: Arrow packs them in bits) and concurrent readers. bfloat16 and JSON, which
/// torchcachex cannot express, are stored in forms it ignores (see [`crate::encode`]).
pub fn capabilities() -> Capabilities {
    Capabilities {
        max_rank: None,
        max_key_bytes: None,
        max_fields: None,
        ..Capabilities::everything()
    }
}

/// What this handle may do.
#[derive(Debug)]
enum Role {
    /// Opened read-only.
    Reader,
    /// The writer rank, holding the lock.
    Writer(Box<Writer>),
    /// A rank other than the writer rank: puts stay in this handle's memory and no file is ever
    /// written, so ranks never race on the cache's files (torchcachex lets them overwrite the
    /// writer's index and schema).
    OtherRank,
}

/// A torchcachex-layout cache: Arrow IPC segments, `schema.json`, and stowage's commit log, key
/// indexes and row checksums beside them.
///
/// ```
/// use stowage_arrow::{ArrowBackend, ArrowOptions};
/// use stowage_core::{Backend, DType, Sample, Schema, ShapeRule, Tensor};
///
/// let dir = tempfile::tempdir()?;
/// let schema = Schema::new().tensor("tensor", DType::F32, ShapeRule::Any);
/// let mut cache = ArrowBackend::create(dir.path(), &schema, ArrowOptions::default())?;
/// cache.put("a", &Sample::new().with("tensor", Tensor::from_slice(&[2], &[1f32, 2.])?))?;
/// cache.flush()?;
/// assert!(dir.path().join("segments/segment_000000.arrow").exists());
/// let got = cache.get("a")?.unwrap();
/// assert_eq!(got.tensor("tensor").unwrap().to_vec::<f32>()?, [1., 2.]);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct ArrowBackend {
    layout: Layout,
    schema: Schema,
    fields: Vec<FieldColumns>,
    arrow_schema: Arc<arrow_schema::Schema>,
    capabilities: Capabilities,
    options: ArrowOptions,
    reader: CacheReader,
    pending: Pending,
    sample_cache: SampleCache,
    finalized: bool,
    /// This handle finalized the cache: it takes no more puts (reopen in append mode to add).
    sealed: bool,
    role: Role,
}

impl ArrowBackend {
    /// Creates an empty cache in `dir` (created if missing) and returns a writer. On a rank other
    /// than `options.writer_rank` nothing is created: the handle reads what the writer rank has
    /// committed and keeps its own puts in memory.
    ///
    /// Errors: `Unsupported` for a schema outside [`capabilities`]; `AlreadyExists` when `dir`
    /// holds a cache (stowage's or torchcachex's segments); `Locked` when another writer holds
    /// `dir`; `InvalidArgument` for bad options or `RANK`; `Io` naming the path.
    pub fn create(
        dir: impl AsRef<Path>,
        schema: &Schema,
        options: ArrowOptions,
    ) -> Result<ArrowBackend> {
        options.check()?;
        let capabilities = capabilities();
        capabilities.check_schema(schema, crate::BACKEND_NAME)?;
        let (structure, fields) = columns_for(schema);
        let arrow = Arc::new(arrow_schema(structure, &fields));
        let layout = Layout::new(dir.as_ref());
        let rank = options.current_rank()?;
        if rank != options.writer_rank {
            return Self::other_rank(layout, schema.clone(), options);
        }
        let refuse_existing = |layout: &Layout| -> Result<()> {
            if layout.commit_log().exists() {
                return Err(Error::AlreadyExists { path: layout.commit_log() });
            }
            if !layout.list_segments()?.is_empty() {
                return Err(Error::AlreadyExists { path: layout.segments_dir() });
            }
            Ok(())
        };
        refuse_existing(&layout)?;
        std::fs::create_dir_all(layout.root()).at(layout.root())?;
        let lock = WriterLock::acquire(layout.root())?;
        refuse_existing(&layout)?;
        std::fs::create_dir_all(layout.segments_dir()).at(layout.segments_dir())?;
        let described = SchemaJson::describe(structure, &arrow)?;
        atomic_write(layout.schema(), &described.to_json())?;
        // The log is built under a temporary name and renamed: a log in place always has its
        // header, so a crash during create never leaves a half-made cache that opens.
        let header = Record::Cache(CacheHeader {
            format: commit_log::FORMAT_NAME.into(),
            version: commit_log::FORMAT_VERSION,
            schema: schema.clone(),
        });
        let staging = layout.root().join(".stowage.log.new");
        let _ = std::fs::remove_file(&staging);
        let (mut log, _) = AppendLog::open(&staging, true)?;
        log.append(&header.to_bytes())?;
        log.sync()?;
        drop(log);
        std::fs::rename(&staging, layout.commit_log()).at(layout.commit_log())?;
        fsync_dir(layout.root())?;
        let parent = layout.root().parent().filter(|p| !p.as_os_str().is_empty());
        fsync_dir(parent.unwrap_or(Path::new(".")))?;
        let (log, _) = AppendLog::open(layout.commit_log(), false)?;
        let reader = CacheReader::open_segments(layout.root(), [], structure, &[])?
            .with_checksums(options.verify_checksums)
            .requiring_checksums();
        let writer = Writer::new(WriterSetup {
            lock,
            log,
            format: segment_format(&layout, &arrow, &fields, &options),
            background: options.background_flush,
            merge_after: options.merge_after,
            next_id: 0,
            committed: Vec::new(),
            runs: Vec::new(),
            complete_marker: false,
            replaced: Vec::new(),
        });
        Ok(ArrowBackend {
            layout,
            schema: schema.clone(),
            fields,
            arrow_schema: arrow,
            capabilities,
            sample_cache: SampleCache::new(options.sample_cache_bytes),
            options,
            reader,
            pending: Pending::default(),
            finalized: false,
            sealed: false,
            role: Role::Writer(Box::new(writer)),
        })
    }

    /// Opens an existing cache. Read-only takes no lock and sees every committed segment;
    /// append takes the writer lock, deletes what a crash left uncommitted (segments renamed
    /// into place whose commit record never became durable, temporary files) and resumes or
    /// appends. On a rank other than the writer rank, append mode writes nothing (see
    /// [`ArrowBackend::create`]).
    ///
    /// Errors: `NotFound` when `dir` holds no stowage Arrow cache (read torchcachex's own
    /// caches with [`CacheReader`]); `Corrupted` naming the commit log when it is damaged
    /// before its end, or a committed segment the key index needs cannot be read; `Locked`.
    pub fn open(dir: impl AsRef<Path>, mode: OpenMode, options: ArrowOptions) -> Result<Self> {
        options.check()?;
        let layout = Layout::new(dir.as_ref());
        let committed = commit_log::read(&layout.commit_log())?;
        let rank = options.current_rank()?;
        match mode {
            OpenMode::Append if rank == options.writer_rank => {}
            OpenMode::Append => {
                return Self::other_rank(layout, committed.header.schema, options);
            }
            OpenMode::ReadOnly => return Self::assemble(layout, committed, options, Role::Reader),
        }
        let lock = WriterLock::acquire(layout.root())?;
        // Re-read under the lock: another writer may have committed more before it let go.
        let recovered = AppendLog::read_all(layout.commit_log())?;
        let committed = commit_log::interpret(&layout.commit_log(), &recovered)?;
        let (log, _) = AppendLog::open(layout.commit_log(), false)?;
        remove_uncommitted(&layout, committed.next_segment_id())?;
        remove_stale_runs(&layout, &committed.runs)?;
        let marker = CompleteMarker::read(&layout.complete_marker())?;
        let complete_marker = match marker {
            // A crash between the `finalized` record and the marker: finish the finalize.
            None if committed.finalized => {
                let marker = CompleteMarker { log_records: committed.records };
                atomic_write(layout.complete_marker(), &marker.to_bytes())?;
                true
            }
            // A crash between an append after finalize and the marker's removal.
            Some(marker) if !committed.finalized && committed.records > marker.log_records => {
                remove_marker(&layout)?;
                false
            }
            other => other.is_some(),
        };
        let (next_id, ids) = (committed.next_segment_id(), committed.ids());
        let runs = committed.runs.clone();
        let replaced = committed.removed.clone();
        let mut backend = Self::assemble(layout, committed, options, Role::Reader)?;
        let format = segment_format(
            &backend.layout,
            &backend.arrow_schema,
            &backend.fields,
            &backend.options,
        );
        backend.role = Role::Writer(Box::new(Writer::new(WriterSetup {
            lock,
            log,
            format,
            background: backend.options.background_flush,
            merge_after: backend.options.merge_after,
            next_id,
            committed: ids,
            runs,
            complete_marker,
            replaced,
        })));
        Ok(backend)
    }

    fn other_rank(layout: Layout, schema: Schema, options: ArrowOptions) -> Result<ArrowBackend> {
        let committed = match commit_log::read(&layout.commit_log()) {
            Ok(committed) => committed,
            // The writer rank has not created it yet: nothing to read.
            Err(Error::NotFound { .. }) => Committed {
                header: CacheHeader {
                    format: commit_log::FORMAT_NAME.into(),
                    version: commit_log::FORMAT_VERSION,
                    schema,
                },
                segments: Vec::new(),
                finalized: false,
                runs: Vec::new(),
                removed: Vec::new(),
                records: 0,
            },
            Err(e) => return Err(e),
        };
        Self::assemble(layout, committed, options, Role::OtherRank)
    }

    fn assemble(
        layout: Layout,
        committed: Committed,
        options: ArrowOptions,
        role: Role,
    ) -> Result<ArrowBackend> {
        let ids = committed.ids();
        let schema = committed.header.schema;
        let (structure, fields) = columns_for(&schema);
        let arrow = Arc::new(arrow_schema(structure, &fields));
        let reader = CacheReader::open_segments(layout.root(), ids, structure, &committed.runs)?
            .with_checksums(options.verify_checksums)
            .requiring_checksums();
        Ok(ArrowBackend {
            layout,
            schema,
            fields,
            arrow_schema: arrow,
            capabilities: capabilities(),
            sample_cache: SampleCache::new(options.sample_cache_bytes),
            options,
            reader,
            pending: Pending::default(),
            finalized: committed.finalized,
            sealed: false,
            role,
        })
    }

    /// The committed segments' reader.
    pub fn reader(&self) -> &CacheReader {
        &self.reader
    }

    /// How samples are split into columns (fixed by the schema).
    pub fn output_structure(&self) -> OutputStructure {
        columns_for(&self.schema).0
    }

    /// Whether this handle writes files: opened for writing on the writer rank.
    pub fn is_writer(&self) -> bool {
        matches!(self.role, Role::Writer(_))
    }

    /// Samples put but not yet written.
    pub fn pending(&self) -> usize {
        self.pending.len()
    }

    fn writer(&mut self) -> Result<Option<&mut Writer>> {
        match &mut self.role {
            Role::Reader => {
                Err(Error::unsupported(crate::BACKEND_NAME, "writes on a read-only handle"))
            }
            Role::OtherRank => Ok(None),
            Role::Writer(writer) => writer.check().map(|()| Some(&mut **writer)),
        }
    }

    /// Hands the pending samples to the writer (on another rank they stay pending), and takes
    /// in what finished; with `wait`, waits for every write.
    fn write_pending(&mut self, wait: bool) -> Result<()> {
        let Role::Writer(writer) = &mut self.role else { return Ok(()) };
        writer.submit(std::mem::take(&mut self.pending));
        let wait = wait || !self.options.background_flush;
        if writer.collect(wait, &mut self.reader)? > 0 {
            self.finalized = false;
        }
        Ok(())
    }

    /// Merges every committed segment and key index run into one run now, on this thread (the
    /// writer also merges in the background every `merge_after` segments, and `finalize` does
    /// this).
    ///
    /// Errors: `Unsupported` on a read-only handle; an earlier failed write; as
    /// [`crate::merged_index::merge_run`].
    pub fn merge_index(&mut self) -> Result<()> {
        self.writer()?;
        match &mut self.role {
            Role::Writer(writer) => writer.merge_now(&mut self.reader),
            _ => Ok(()),
        }
    }
}

impl ArrowBackend {
    /// The checks of [`Backend::validate`] that span the whole cache, without decoding a row:
    /// the commit log (every committed segment present with its recorded size and rows, with its
    /// key sidecar and row checksums), `stowage.complete`, `schema.json`, and every key index run
    /// against the key columns of the segments it covers.
    ///
    /// The rest of `validate` concerns one segment at a time: [`CacheReader::validate`] of a
    /// reader over that segment alone ([`CacheReader::open_segments`] with its id and no runs).
    /// Together they find every problem `validate` finds, so a caller can check the segments in
    /// parallel. A segment that cannot be read is left to its own check.
    ///
    /// Errors: as [`Backend::validate`].
    pub fn validate_log_and_index(&self) -> Result<ValidationReport> {
        let mut report = ValidationReport::default();
        let mut segment_keys: Vec<(u64, Vec<String>)> = Vec::new();
        for (id, path) in self.reader.segment_paths() {
            if let Ok(segment) = crate::segment::Segment::open(id, path)
                && let Ok(keys) = segment.keys()
            {
                segment_keys.push((id, keys.iter().map(|k| (*k).to_owned()).collect()));
            }
        }
        crate::validate::check_runs(&self.reader, &mut report, &segment_keys);
        let expected_schema_json =
            SchemaJson::describe(self.output_structure(), &self.arrow_schema)?.to_json();
        crate::validate::check_commits(&mut report, &self.layout, &expected_schema_json)?;
        Ok(report)
    }

    /// The samples of `keys`, in order (`None` for a missing key): unwritten ones from memory,
    /// the rest read segment by segment in row order ([`CacheReader::get_batch`]).
    ///
    /// Errors: as [`Backend::get`], for the first key that fails.
    pub fn get_batch(&self, keys: &[&str]) -> Result<Vec<Option<Sample>>> {
        let unwritten: Vec<Option<&Sample>> = keys.iter().map(|k| self.unwritten(k)).collect();
        if unwritten.iter().all(Option::is_none) {
            return self.reader.get_batch(keys);
        }
        let rest: Vec<&str> =
            keys.iter().zip(&unwritten).filter(|(_, u)| u.is_none()).map(|(k, _)| *k).collect();
        let mut read = self.reader.get_batch(&rest)?.into_iter();
        Ok(unwritten
            .into_iter()
            .map(|u| match u {
                Some(sample) => Some(sample.clone()),
                None => read.next().flatten(),
            })
            .collect())
    }

    /// The sample of `key` put but not yet committed: pending, or being written (newest first).
    fn unwritten(&self, key: &str) -> Option<&Sample> {
        let in_flight = || match &self.role {
            Role::Writer(writer) => writer.get(key),
            _ => None,
        };
        self.pending.get(key).or_else(in_flight)
    }

    /// Keys put but not yet committed that no committed segment holds, in order of first put.
    fn unwritten_new_keys(&self) -> Vec<&str> {
        let in_flight = match &self.role {
            Role::Writer(writer) => Some(writer.in_flight_keys()),
            _ => None,
        };
        let mut seen = std::collections::HashSet::new();
        in_flight
            .into_iter()
            .flatten()
            .chain(self.pending.keys())
            .filter(|key| seen.insert(*key) && self.reader.locate(key).is_none())
            .collect()
    }
}

impl ArrowBackend {
    /// Compacts the segments smaller than `small_bytes` (at least two) into new ones holding
    /// only their keys' winning rows, then merges the key index again; deletes the files of
    /// segments an earlier compaction replaced. Pending samples are flushed first. Readers in
    /// other processes are never blocked: replaced segments' files stay until the next compaction.
    ///
    /// Errors: `Unsupported` on a read-only handle; an earlier failed write; `Corrupted` when a
    /// row to keep fails its checksum (nothing is committed then); `Io`.
    pub fn compact(&mut self, small_bytes: u64) -> Result<Compaction> {
        self.flush()?;
        let structure = self.output_structure();
        let Role::Writer(writer) = &mut self.role else { return Ok(Compaction::default()) };
        let report = writer.compact(&mut self.reader, small_bytes)?;
        if !report.removed.is_empty() {
            let ids = writer.committed().to_vec();
            self.reader = CacheReader::open_segments(self.layout.root(), ids, structure, &[])?
                .with_checksums(self.options.verify_checksums)
                .requiring_checksums();
            writer.merge_now(&mut self.reader)?;
        }
        Ok(report)
    }
}

/// How this cache's segments are written.
fn segment_format(
    layout: &Layout,
    arrow: &Arc<arrow_schema::Schema>,
    fields: &[FieldColumns],
    options: &ArrowOptions,
) -> SegmentFormat {
    SegmentFormat {
        layout: layout.clone(),
        arrow_schema: arrow.clone(),
        fields: fields.to_vec(),
        max_segment_bytes: options.max_segment_bytes,
        durable: options.durable,
        compression: options.compression,
    }
}

/// Deletes the key index run files the commit log does not vouch for (`runs`): a merge whose
/// record a crash cut off, or the inputs of a committed merge a crash kept from being deleted.
fn remove_stale_runs(layout: &Layout, runs: &[commit_log::RunEntry]) -> Result<()> {
    let mut removed = false;
    for (first, through, path) in layout.list_index_runs()? {
        if !runs.iter().any(|run| (run.first, run.through) == (first, through)) {
            std::fs::remove_file(&path).at(&path)?;
            removed = true;
        }
    }
    if removed {
        fsync_dir(layout.root())?;
    }
    Ok(())
}

/// Deletes segment files (and their sidecars and temporary files) with ids from `next_id` on,
/// and every temporary file in `segments/`: what a crash left between a rename and its commit.
fn remove_uncommitted(layout: &Layout, next_id: u64) -> Result<()> {
    let dir = layout.segments_dir();
    let entries = match std::fs::read_dir(&dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            std::fs::create_dir_all(&dir).at(&dir)?;
            return Ok(());
        }
        Err(e) => return Err(e).at(&dir),
    };
    let mut removed = false;
    for entry in entries {
        let entry = entry.at(&dir)?;
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        let temporary = name.starts_with(".segment_") && name.contains(".tmp");
        let leftover = crate::layout::segment_file_id(name).is_some_and(|id| id >= next_id);
        if temporary || leftover {
            let path: PathBuf = entry.path();
            std::fs::remove_file(&path).at(&path)?;
            removed = true;
        }
    }
    if removed {
        fsync_dir(&dir)?;
    }
    Ok(())
}

impl Backend for ArrowBackend {
    fn name(&self) -> &'static str {
        crate::BACKEND_NAME
    }

    fn capabilities(&self) -> &Capabilities {
        &self.capabilities
    }

    fn schema(&self) -> &Schema {
        &self.schema
    }

    fn path(&self) -> &Path {
        self.layout.root()
    }

    fn put(&mut self, key: &str, sample: &Sample) -> Result<()> {
        let is_writer = self.writer()?.is_some();
        if self.sealed {
            return Err(Error::Finalized { path: self.layout.root().to_path_buf() });
        }
        self.capabilities.check_key(key, crate::BACKEND_NAME)?;
        self.schema.validate(sample)?;
        self.sample_cache.remove(key);
        self.pending.insert(key, sample);
        if is_writer
            && (self.pending.len() >= self.options.flush_every
                || self.pending.bytes() >= self.options.max_segment_bytes)
        {
            self.write_pending(false)?;
        }
        Ok(())
    }

    fn get(&self, key: &str) -> Result<Option<Sample>> {
        if let Some(sample) = self.unwritten(key) {
            return Ok(Some(sample.clone()));
        }
        if let Some(sample) = self.sample_cache.get(key) {
            return Ok(Some(sample));
        }
        let sample = self.reader.get(key)?;
        if let Some(sample) = &sample {
            self.sample_cache.insert(key, sample);
        }
        Ok(sample)
    }

    fn contains(&self, key: &str) -> Result<bool> {
        Ok(self.unwritten(key).is_some() || self.reader.locate(key).is_some())
    }

    fn len(&self) -> usize {
        self.reader.len() + self.unwritten_new_keys().len()
    }

    fn keys(&self) -> Result<Vec<String>> {
        let mut keys = self.reader.keys()?;
        keys.extend(self.unwritten_new_keys().into_iter().map(str::to_owned));
        Ok(keys)
    }

    fn flush(&mut self) -> Result<()> {
        self.writer()?;
        self.write_pending(true)
    }

    fn finalize(&mut self) -> Result<()> {
        self.flush()?;
        if let Role::Writer(writer) = &mut self.role {
            writer.finalize(&mut self.reader)?;
        }
        self.finalized = true;
        self.sealed = true;
        Ok(())
    }

    fn is_finalized(&self) -> bool {
        self.finalized
    }

    fn validate(&self, level: ValidationLevel) -> Result<ValidationReport> {
        // Both levels decode every row: the checksums are per row, over the decoded sample.
        let _ = level;
        let mut report = self.reader.validate()?;
        let expected_schema_json =
            SchemaJson::describe(self.output_structure(), &self.arrow_schema)?.to_json();
        crate::validate::check_commits(&mut report, &self.layout, &expected_schema_json)?;
        Ok(report)
    }
}
