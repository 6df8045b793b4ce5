//! `ArrowBackend`: the [`Backend`] over a torchcachex-layout cache that stowage writes.
//!
//! On a process whose rank is not the writer rank (torchcachex's multi-rank rule: one rank
//! writes, the others read) a handle reads what the writer rank committed and refuses every
//! write with `Unsupported`: a put it took could never be made durable. With
//! [`ArrowOptions::rank_inboxes`] such a rank writes into an inbox of its own instead, which the
//! writer rank ingests at its flushes (`inbox` module).
//!
//! Writes go to a pending buffer; a flush (by `flush`, or by `put` once `flush_every` samples or
//! `max_segment_bytes` are pending) writes them as one or more segments, each crash-safely
//! ([`crate::segment_writer`]) with its key sidecar and row checksums, then commits each in the
//! commit log ([`crate::commit_log`]). Nothing rewrites what is already cached, so a flush costs
//! its own rows only. Once `merge_after` segments are in no key index run, the writer merges them
//! into a run on a background thread, folding in the newest runs no larger than that
//! ([`crate::merged_index`]).
//!
//! The cache is shared with torchcachex ([`crate::ownership`]): segments it appends are read by
//! every open, reported unchecked by `validate`, and adopted on request ([`ArrowBackend::adopt`]);
//! a writer never reuses an id of the directory and never replaces a file, and it removes
//! torchcachex's `index.pkl` before a new segment becomes visible ([`crate::pickled_index`]).
//! [`ArrowBackend::attach`] starts stowage's log in a cache torchcachex created.

mod adopt;
mod attach;
mod inbox;

use std::path::Path;
use std::sync::Arc;

use stowage_core::file_safety::{
    AppendLog, WriterLock, atomic_write, create_dir_within, fsync_dir, refuse_symlink,
    remove_abandoned_temps,
};
use stowage_core::{
    Backend, Capabilities, DType, Error, Format, IoResultExt, OpenMode, Reader, Result, Sample,
    Schema, Unchecked, ValidationLevel, ValidationReport, Value, WriteState,
};

use crate::blob_encoding::{self, BlobEncoding};
use crate::commit_log::{self, ArrowRecord, CacheHeader, Committed, FinalizedMarker, Record};
use crate::encode::{FieldColumns, arrow_schema, columns_with};
use crate::error::ArrowCacheError;
use crate::layout::Layout;
use crate::lost_segments;
use crate::options::ArrowOptions;
use crate::ownership::{ForeignSegment, SegmentOrigin, Survey};
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
/// torchcachex cannot express, are stored in forms it ignores (see `crate::encode`).
pub fn capabilities() -> Capabilities {
    capabilities_with(&ArrowOptions::default())
}

/// [`capabilities`] of a cache written with `options`: without `durable`, no `durable_flush`.
pub(crate) fn capabilities_with(options: &ArrowOptions) -> Capabilities {
    let mut caps = Capabilities::none();
    caps.durable_flush = options.durable;
    caps.variable_shapes = true;
    caps.ragged = true;
    caps.nullable = true;
    caps.bytes_fields = true;
    caps.json_fields = true;
    caps.overwrite = true;
    caps.append_after_finalize = true;
    caps.resume = true;
    caps.checksums = true;
    caps.zero_copy_get = true;
    caps.concurrent_readers = true;
    caps.dtypes = DType::ALL.to_vec();
    caps
}

/// What this handle may do.
#[derive(Debug)]
enum Role {
    /// Opened read-only.
    Reader,
    /// The writer rank, holding the lock.
    Writer(Box<Writer>),
    /// A rank other than the writer rank: it reads what the writer rank committed and refuses
    /// every write ([`ArrowCacheError::OtherRank`]), so ranks never race on the cache's files
    /// (torchcachex lets them overwrite the writer's index and schema) and no put is ever taken
    /// that nothing would make durable; or, with an inbox, writes there.
    OtherRank {
        /// This process's rank.
        rank: u32,
        /// The rank's inbox, which takes its writes ([`ArrowOptions::rank_inboxes`]); `None`
        /// refuses them.
        inbox: Option<Box<ArrowBackend>>,
    },
}

/// A torchcachex-layout cache: Arrow IPC segments, `schema.json`, and stowage's commit log, key
/// indexes and row checksums beside them.
///
/// ```
/// use stowage_arrow::{ArrowBackend, ArrowOptions};
/// use stowage_core::{Backend, DType, Reader, Sample, Schema, ShapeRule, Tensor};
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
    structure: OutputStructure,
    encoding: BlobEncoding,
    fields: Vec<FieldColumns>,
    arrow_schema: Arc<arrow_schema::Schema>,
    capabilities: Capabilities,
    options: ArrowOptions,
    reader: CacheReader,
    pending: Pending,
    sample_cache: SampleCache,
    /// Read-only, finalized (as far as this handle's puts go) and poisoned. A writer starts
    /// unfinalized even on a finalized cache (it appends: `append_after_finalize`) and is
    /// finalized by its own `finalize`; whether the cache is finalized on disk, the writer
    /// tracks ([`Writer::is_finalized`]).
    state: WriteState,
    role: Role,
    /// The writer rank's record of what it ingested of each inbox, by rank.
    inboxes_ingested: std::collections::HashMap<u32, inbox::Ingested>,
}

impl ArrowBackend {
    /// Creates an empty cache in `dir` (created if missing) and returns a writer. On a rank other
    /// than `options.writer_rank` nothing is created: the handle reads what the writer rank has
    /// committed and refuses every write (`Unsupported`); with [`ArrowOptions::rank_inboxes`]
    /// it creates (or opens) only its inbox, `dir/stowage-ranks/rank-<rank>/`, and writes there. The output structure and blob encoding
    /// come from `options` and are recorded in the commit log.
    ///
    /// Errors: `Unsupported` for a schema outside [`capabilities`]; `InvalidArgument` when
    /// `options.output_structure` does not fit the schema (naming both), for bad options or
    /// `RANK`; `AlreadyExists` when `dir` holds a cache (stowage's or torchcachex's segments);
    /// `Locked` when another writer holds `dir`; `Io` naming the path.
    pub fn create(
        dir: impl AsRef<Path>,
        schema: &Schema,
        options: ArrowOptions,
    ) -> Result<ArrowBackend> {
        options.check()?;
        capabilities().check_schema(schema, crate::BACKEND_NAME)?;
        let (structure, _) = columns_with(schema, options.output_structure, options.blob_encoding)?;
        let header = commit_log::new_header(schema.clone(), structure, options.blob_encoding);
        let layout = Layout::new(dir.as_ref());
        let rank = options.current_rank()?;
        if rank != options.writer_rank {
            return Self::other_rank(layout, header, options, rank);
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
        // Never a link: every segment is written (and every leftover removed) in it.
        create_dir_within(layout.root(), &layout.segments_dir())?;
        let (structure, fields, _) = commit_log::columns(&header)?;
        let arrow = arrow_schema(structure, &fields);
        let described = SchemaJson::describe(structure, &arrow)?;
        atomic_write(layout.schema(), &described.to_json())?;
        write_new_log(&layout, &header)?;
        Self::open_writer(layout, lock, options)
    }

    /// Opens an existing cache. Read-only takes no lock; append takes the writer lock, deletes
    /// what a stowage crash left uncommitted (segments proven its own whose commit record never
    /// became durable, stowage's temporary files in `segments/` and in `dir`, and sidecar files
    /// the log does not vouch for) and resumes or appends. Either way every committed segment is
    /// read, and so is every segment another writer (torchcachex) added
    /// ([`ArrowBackend::foreign_segments`]): the highest segment id holding a key wins. On a rank
    /// other than the writer rank, append mode takes no lock on the cache and refuses every
    /// write, or with [`ArrowOptions::rank_inboxes`] writes into the rank's inbox, under the
    /// inbox's lock (see [`ArrowBackend::create`]).
    ///
    /// Errors: `NotFound` when `dir` holds no stowage Arrow cache (read torchcachex's own
    /// caches with [`CacheReader`], or start stowage's log in one with
    /// [`ArrowBackend::attach`]); `Corrupted` naming the commit log when it is damaged before
    /// its end, or a segment the key index needs cannot be read; `Locked`.
    pub fn open(dir: impl AsRef<Path>, mode: OpenMode, options: ArrowOptions) -> Result<Self> {
        options.check()?;
        let layout = Layout::new(dir.as_ref());
        let mut committed = commit_log::read(&layout.commit_log())?;
        let rank = options.current_rank()?;
        match mode {
            OpenMode::Append if rank == options.writer_rank => {}
            OpenMode::Append => return Self::other_rank(layout, committed.header, options, rank),
            OpenMode::ReadOnly => {
                lost_segments::set_aside(&layout, &mut committed)?;
                let survey = survey_for(&layout, &committed)?;
                return Self::assemble(layout, committed, &survey, options, Role::Reader);
            }
        }
        let lock = WriterLock::acquire(layout.root())?;
        Self::open_writer(layout, lock, options)
    }

    /// The writer over the cache of `layout`, whose lock this process holds.
    fn open_writer(layout: Layout, lock: WriterLock, options: ArrowOptions) -> Result<Self> {
        // A linked `segments/` would take new segments out of the cache, and the removal of
        // leftovers below would delete files elsewhere. Reads follow it; writes never do.
        refuse_symlink(&layout.segments_dir())?;
        // Read under the lock: another writer may have committed more before it let go.
        let recovered = AppendLog::read_all(layout.commit_log())?;
        let mut committed = commit_log::interpret(&layout.commit_log(), &recovered)?;
        let newly_lost = lost_segments::set_aside(&layout, &mut committed)?;
        let (mut log, _) = AppendLog::open(layout.commit_log(), false)?;
        if !newly_lost.is_empty() {
            // Recorded before any other record: a synced record vouches for every segment
            // before it, and these are gone. Then their remains go: the record withdrew them.
            log.append(&Record::Own(ArrowRecord::Lost(newly_lost.clone())).to_bytes())?;
            log.sync()?;
            committed.records += 1;
            for id in newly_lost {
                crate::writer::delete_segment_files(&layout, id)?;
            }
            fsync_dir(layout.segments_dir())?;
        }
        let survey = survey_for(&layout, &committed)?;
        // Above every id of the log and of the directory, leftovers included: no id is reused.
        let next_id = committed.next_segment_id().max(survey.highest_id.map_or(0, |id| id + 1));
        remove_uncommitted(&layout, &survey)?;
        remove_stale_runs(&layout, &committed.own.runs)?;
        remove_abandoned_temporaries(&layout)?;
        let marker = FinalizedMarker::read(&layout.complete_marker())?;
        let complete_marker = match marker {
            // A crash between the `finalized` record and the marker: finish the finalize.
            None if committed.finalized => {
                committed.marker().write(&layout.complete_marker())?;
                true
            }
            // A crash between an append after finalize and the marker's removal.
            Some(marker) if !committed.finalized && committed.records > marker.log_records => {
                remove_marker(&layout)?;
                false
            }
            other => other.is_some(),
        };
        let (ids, adopted) = (committed.ids(), committed.own.adopted.clone());
        let runs = committed.own.runs.clone();
        let replaced = committed.own.removed.clone();
        let finalized = committed.finalized;
        let mut backend = Self::assemble(layout, committed, &survey, options, Role::Reader)?;
        // Puts are taken even when the cache is finalized (append_after_finalize): the writer
        // says whether it still is.
        backend.state = WriteState::writable(crate::BACKEND_NAME, backend.layout.root(), false);
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
            merge_rows: backend.options.merge_rows,
            next_id,
            committed: ids,
            adopted,
            runs,
            finalized,
            complete_marker,
            replaced,
        })));
        Ok(backend)
    }

    /// The handle of rank `rank`, not the writer rank: it reads what the writer rank committed
    /// (nothing when it has not created the cache yet) and writes nothing to the cache; with
    /// [`ArrowOptions::rank_inboxes`] it writes into its inbox, made or opened here.
    fn other_rank(
        layout: Layout,
        header: CacheHeader,
        options: ArrowOptions,
        rank: u32,
    ) -> Result<Self> {
        let committed = match lost_segments::read(&layout) {
            Ok(committed) => committed,
            // The writer rank has not created it yet: nothing to read.
            Err(Error::NotFound { .. }) => Committed::new(header),
            Err(e) => return Err(e),
        };
        let survey = survey_for(&layout, &committed)?;
        let inbox = match options.rank_inboxes {
            true => Some(Box::new(inbox::open_inbox(&layout, &committed.header, &options, rank)?)),
            false => None,
        };
        Self::assemble(layout, committed, &survey, options, Role::OtherRank { rank, inbox })
    }

    fn assemble(
        layout: Layout,
        committed: Committed,
        survey: &Survey,
        options: ArrowOptions,
        role: Role,
    ) -> Result<ArrowBackend> {
        let (structure, fields, encoding) = commit_log::columns(&committed.header)
            .map_err(|e| Error::corrupted(layout.commit_log(), format!("header: {e}")))?;
        let arrow = Arc::new(arrow_schema(structure, &fields));
        let schema = committed.header.schema.clone();
        let reader = cache_reader(&layout, &committed, survey, &schema, &options)?;
        let state = WriteState::read_only(crate::BACKEND_NAME, layout.root(), committed.finalized);
        Ok(ArrowBackend {
            layout,
            schema,
            structure,
            encoding,
            fields,
            arrow_schema: arrow,
            capabilities: capabilities_with(&options),
            sample_cache: SampleCache::new(options.sample_cache_bytes),
            options,
            reader,
            pending: Pending::default(),
            state,
            role,
            inboxes_ingested: std::collections::HashMap::new(),
        })
    }

    /// The reader of the committed segments and of those another writer added.
    pub fn reader(&self) -> &CacheReader {
        &self.reader
    }

    /// How samples are split into columns, as the commit log records it (inferred from the
    /// schema for caches before version 3): what torchcachex returns a sample as. Pass it to
    /// [`ArrowOptions::output_structure`] to write a copy torchcachex reads the same way.
    pub fn output_structure(&self) -> OutputStructure {
        self.structure
    }

    /// How bytes fields are stored, as the commit log records it ([`BlobEncoding::Raw`] for
    /// caches before version 3). A copy takes [`ArrowOptions::blob_encoding`] from it (with
    /// `Raw` as the default `PickledBytes`: the values read back are the same bytes).
    pub fn blob_encoding(&self) -> BlobEncoding {
        self.encoding
    }

    /// The segments another writer (torchcachex) added that are not adopted, ascending ids, as
    /// of this handle's open: read like the others, covered by no checksum
    /// ([`ArrowBackend::adopt`] checksums them).
    pub fn foreign_segments(&self) -> Vec<ForeignSegment> {
        self.reader
            .segment_origins()
            .filter_map(|(id, path, origin)| match origin {
                SegmentOrigin::Foreign { writer } => {
                    Some(ForeignSegment { id, path: path.to_path_buf(), writer })
                }
                _ => None,
            })
            .collect()
    }

    /// Every segment another writer added that is not adopted, as the [`Unchecked`] entry
    /// `validate` lists for it (a segment that does not read counts 0 samples; `validate`
    /// reports it as a problem): for a caller that does not validate every segment (a sampled
    /// check, a summary) but must not call the cache clean.
    ///
    /// ```
    /// use stowage_arrow::{ArrowBackend, ArrowOptions};
    /// use stowage_core::{DType, Schema, ShapeRule};
    /// let dir = tempfile::tempdir()?;
    /// let schema = Schema::new().tensor("tensor", DType::F32, ShapeRule::Any);
    /// let cache = ArrowBackend::create(dir.path(), &schema, ArrowOptions::default())?;
    /// assert!(cache.unchecked().is_empty());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn unchecked(&self) -> Vec<Unchecked> {
        self.foreign_segments()
            .iter()
            .map(|segment| {
                let rows = crate::segment::Segment::open(segment.id, &segment.path)
                    .map_or(0, |opened| opened.rows());
                crate::validate::unchecked_segment(
                    &self.layout,
                    &segment.path,
                    segment.writer,
                    rows,
                )
            })
            .collect()
    }

    /// A reader of segment `id` alone (committed or another writer's), decoding as this cache
    /// does: what [`ArrowBackend::validate_log_and_index`] leaves to a per-segment check
    /// ([`CacheReader::validate`], which lists another writer's segment as unchecked).
    ///
    /// Errors: `NotFound` when this handle reads no segment `id`; as
    /// [`CacheReader::open_cache`].
    pub fn segment_reader(&self, id: u64) -> Result<CacheReader> {
        let origin = self.reader.segment_origins().find(|(i, ..)| *i == id).map(|(.., o)| o);
        let origin = origin.ok_or_else(|| Error::NotFound {
            what: format!("segment {id} in {}", self.layout.root().display()),
        })?;
        let reader = CacheReader::open_cache(
            self.layout.root(),
            &[(id, origin)],
            self.structure,
            self.encoding,
            &[],
        )?;
        Ok(reader.requiring_checksums().with_schema(self.schema.clone()))
    }

    /// Whether this handle writes the cache's files: opened for writing on the writer rank (a rank
    /// writing an inbox, [`ArrowOptions::rank_inboxes`], is not).
    pub fn is_writer(&self) -> bool {
        matches!(self.role, Role::Writer(_))
    }

    /// Samples put but not yet written (into the inbox, on a rank writing one).
    pub fn pending(&self) -> usize {
        match self.inbox() {
            Some(inbox) => inbox.pending(),
            None => self.pending.len(),
        }
    }

    /// The refusal of `operation` on a rank other than the writer rank (one writing an inbox
    /// included: only its `put`, `flush` and `finalize` go there); `None` on any other handle.
    fn other_rank_refusal(&self, operation: &'static str) -> Option<Error> {
        match self.role {
            Role::OtherRank { rank, .. } => Some(
                ArrowCacheError::OtherRank {
                    operation,
                    rank,
                    writer_rank: self.options.writer_rank,
                }
                .into(),
            ),
            Role::Reader | Role::Writer(_) => None,
        }
    }

    /// The check every write starts with: `Unsupported` on another rank or a read-only handle,
    /// `Poisoned` after a failed write. Once it passes, the handle is the writer.
    fn check_write(&self, operation: &'static str) -> Result<()> {
        match self.other_rank_refusal(operation) {
            Some(refusal) => Err(refusal),
            None => self.state.check_write(operation),
        }
    }

    /// Hands the pending samples to the writer and takes in what finished; with `wait`, waits
    /// for every write. A failure poisons the handle. Nothing to do on a handle that does not
    /// write (it never has pending samples: its puts are refused).
    fn write_pending(&mut self, wait: bool) -> Result<()> {
        let Role::Writer(writer) = &mut self.role else { return Ok(()) };
        writer.submit(std::mem::take(&mut self.pending));
        let wait = wait || !self.options.background_flush;
        self.state.poison_on_error(writer.collect(wait, &mut self.reader))?;
        Ok(())
    }

    /// Merges every committed segment and key index run into one run now, on this thread (the
    /// writer also merges in the background every `merge_after` segments, and `finalize` does
    /// this).
    ///
    /// Errors: `Unsupported` on a read-only handle or a rank other than the writer rank;
    /// `Poisoned` after a failed write; as `merge_run` (which poisons the
    /// handle: what reached the disk is unknown).
    pub fn merge_index(&mut self) -> Result<()> {
        self.check_write("merge the key index")?;
        let Role::Writer(writer) = &mut self.role else {
            unreachable!("check_write refuses every handle but the writer")
        };
        self.state.poison_on_error(writer.merge_now(&mut self.reader))
    }
}

impl ArrowBackend {
    /// The checks of [`Reader::validate`] that span the whole cache, without decoding a row:
    /// the commit log (every committed segment present with its recorded size and rows, with its
    /// key sidecar and row checksums), `stowage.complete`, `schema.json`, and every key index run
    /// against the key columns of the segments it covers.
    ///
    /// The rest of `validate` concerns one segment at a time: [`CacheReader::validate`] of
    /// [`ArrowBackend::segment_reader`] for each id of `reader().segment_paths()` (another
    /// writer's segment included: its check lists it as unchecked). Together they find every
    /// problem and unchecked segment `validate` finds, so a caller can check the segments in
    /// parallel. A segment that cannot be read is left to its own check.
    ///
    /// Errors: as [`Reader::validate`].
    pub fn validate_log_and_index(&self) -> Result<ValidationReport> {
        let mut report = ValidationReport::default();
        let mut segment_keys: Vec<(u64, Vec<String>)> = Vec::new();
        let committed = self.reader.segment_origins().filter(|(.., o)| !o.is_foreign());
        for (id, path, _) in committed {
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
    /// Errors: as [`Reader::get`], for the first key that fails.
    pub fn get_batch(&self, keys: &[&str]) -> Result<Vec<Option<Sample>>> {
        if let Some(inbox) = self.inbox() {
            return self.get_batch_with_inbox(inbox, keys);
        }
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
            // A key whose committed candidate does not read counts as unwritten here (the count
            // cannot fail); its `get` reports the segment.
            .filter(|key| seen.insert(*key) && !matches!(self.reader.locate(key), Ok(Some(_))))
            .collect()
    }
}

impl ArrowBackend {
    /// Compacts the segments smaller than `small_bytes` (at least two) into new ones holding
    /// only their keys' winning rows, then merges the key index again; deletes the files of
    /// segments an earlier compaction replaced. Pending samples are flushed first. Readers in
    /// other processes are never blocked: replaced segments' files stay until the next compaction.
    ///
    /// The kept rows stream from the replaced segments into the new ones, so a compaction's
    /// memory does not grow with the cache (at most 16 MiB of payload or 65,536 rows gathered
    /// at once).
    ///
    /// Errors: `Unsupported` on a read-only handle or a rank other than the writer rank;
    /// `Poisoned` after a failed write; `Corrupted` when a row to keep fails its checksum
    /// (nothing is committed then, the segments written for it are removed, and the handle goes
    /// on writing); a failed write, which poisons the handle.
    pub fn compact(&mut self, small_bytes: u64) -> Result<Compaction> {
        self.check_write("compact")?;
        self.flush()?;
        let Role::Writer(writer) = &mut self.role else {
            unreachable!("check_write refuses every handle but the writer")
        };
        self.state.poison_on_error(writer.settle(&mut self.reader))?;
        let plan = writer.plan_compaction(small_bytes)?;
        // The kept rows are read through a reader of its own that keeps few segments open:
        // each replaced segment is read once, and this handle's reader would keep up to
        // `max_open_segments` of them (and their heap) open until it is reloaded below.
        let bounded =
            ArrowOptions { max_open_segments: COMPACTION_OPEN_SEGMENTS, ..self.options.clone() };
        let mut reading = self.current_reader(&bounded)?;
        let Role::Writer(writer) = &mut self.role else {
            unreachable!("check_write refuses every handle but the writer")
        };
        let report = match writer.compact(&mut reading, plan) {
            // A row to keep that does not read: nothing was committed, the new segments are
            // gone, and the handle goes on writing.
            Err(e @ Error::Corrupted { .. }) => return Err(e),
            result => self.state.poison_on_error(result)?,
        };
        if !report.removed.is_empty() {
            self.reload_reader()?;
            if let Role::Writer(writer) = &mut self.role {
                self.state.poison_on_error(writer.merge_now(&mut self.reader))?;
            }
        }
        Ok(report)
    }

    /// Reopens the reader from the commit log as it now stands, keeping the other writers'
    /// segments this handle reads (after a compaction or an adoption changed the segment list;
    /// the writer has no work in flight).
    fn reload_reader(&mut self) -> Result<()> {
        self.reader = self.current_reader(&self.options)?;
        Ok(())
    }

    /// A reader of the commit log as it now stands, with `options`, keeping the other writers'
    /// segments this handle reads.
    fn current_reader(&self, options: &ArrowOptions) -> Result<CacheReader> {
        let committed = lost_segments::read(&self.layout)?;
        let foreign = self.foreign_segments();
        let survey = Survey {
            foreign: foreign.into_iter().filter(|f| !committed.ids().contains(&f.id)).collect(),
            ..Survey::default()
        };
        cache_reader(&self.layout, &committed, &survey, &self.schema, options)
    }
}

/// Segments the reader a compaction reads its kept rows through keeps open.
const COMPACTION_OPEN_SEGMENTS: usize = 64;

/// The reader of the segments `committed` lists and the other writers' segments of `survey`.
fn cache_reader(
    layout: &Layout,
    committed: &Committed,
    survey: &Survey,
    schema: &Schema,
    options: &ArrowOptions,
) -> Result<CacheReader> {
    let (structure, _, encoding) = commit_log::columns(&committed.header)?;
    let mut segments: Vec<(u64, SegmentOrigin)> = committed
        .segments
        .iter()
        .map(|s| match committed.own.adopted.contains(&s.id) {
            true => (s.id, SegmentOrigin::Adopted),
            false => (s.id, SegmentOrigin::Stowage),
        })
        .collect();
    segments
        .extend(survey.foreign.iter().map(|f| (f.id, SegmentOrigin::Foreign { writer: f.writer })));
    segments.sort_unstable_by_key(|(id, _)| *id);
    let reader = CacheReader::open_cache(
        layout.root(),
        &segments,
        structure,
        encoding,
        &committed.own.runs,
    )?;
    Ok(reader
        .with_checksums(options.verify_checksums)
        .with_max_open_segments(options.max_open_segments)
        .with_cold_read_advice(options.cold_read_advice)
        .requiring_checksums()
        .with_schema(schema.clone()))
}

/// What `segments/` of `layout` holds beside what `committed` vouches for.
fn survey_for(layout: &Layout, committed: &Committed) -> Result<Survey> {
    let retired = committed.own.removed.iter().copied();
    let lost = committed.own.lost.iter().map(|s| s.id);
    let vouched: std::collections::HashSet<u64> =
        committed.ids().into_iter().chain(retired).chain(lost).collect();
    crate::ownership::survey(layout, |id| vouched.contains(&id))
}

/// Writes the commit log of a new cache with `header` under a temporary name and renames it
/// into place: a log in place always has its header, so a crash never leaves a half-made cache
/// that opens.
fn write_new_log(layout: &Layout, header: &CacheHeader) -> Result<()> {
    let staging = layout.new_commit_log();
    let _ = std::fs::remove_file(&staging);
    let (mut log, _) = AppendLog::open(&staging, true)?;
    log.append(&Record::Cache(header.clone()).to_bytes())?;
    log.sync()?;
    drop(log);
    std::fs::rename(&staging, layout.commit_log()).at(layout.commit_log())?;
    fsync_dir(layout.root())?;
    let parent = layout.root().parent().filter(|p| !p.as_os_str().is_empty());
    fsync_dir(parent.unwrap_or(Path::new(".")))
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
        session: crate::ownership::new_session(),
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

/// Deletes the temporaries a killed stowage writer left in the cache directory: those of
/// `schema.json`, `stowage.complete` and key index runs (a merge killed before its rename), and
/// a new commit log's staging file (`.stowage.log.new`; the log is in place, so it is a
/// leftover). Under the writer lock no stowage writer is making one; torchcachex's temporaries
/// have other names and are never touched. (`remove_uncommitted` deletes those of `segments/`.)
fn remove_abandoned_temporaries(layout: &Layout) -> Result<()> {
    remove_abandoned_temps(layout.root(), crate::layout::is_written_through_temporary)?;
    let staging = layout.new_commit_log();
    match std::fs::remove_file(&staging) {
        Ok(()) => fsync_dir(layout.root()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(Error::io(staging, e)),
    }
}

/// Deletes what a stowage crash left that the commit log does not vouch for (`survey`): the
/// segments proven stowage's own leftovers with their sidecars, sidecar files of no vouched-for
/// segment, and stowage's temporary files. Never another writer's segment. torchcachex's
/// `index.pkl` goes first when a leftover segment does: torchcachex may have indexed it.
fn remove_uncommitted(layout: &Layout, survey: &Survey) -> Result<()> {
    if !survey.leftovers.is_empty() {
        crate::pickled_index::remove(layout, true)?;
    }
    let leftovers = survey.leftovers.iter().flat_map(|&id| {
        let segment = layout.segment(id);
        [segment.with_extension("keys"), segment.with_extension("sums"), segment]
    });
    let mut removed = false;
    for path in leftovers
        .chain(survey.stray_sidecars.iter().cloned())
        .chain(survey.temporaries.iter().cloned())
    {
        match std::fs::remove_file(&path) {
            Ok(()) => removed = true,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(Error::io(path, e)),
        }
    }
    let dir = layout.segments_dir();
    if !dir.is_dir() {
        create_dir_within(layout.root(), &dir)?;
    }
    if removed {
        fsync_dir(&dir)?;
    }
    Ok(())
}

impl Reader for ArrowBackend {
    fn name(&self) -> &'static str {
        crate::BACKEND_NAME
    }

    fn format(&self) -> &'static Format {
        &crate::FORMATS[0]
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

    fn get(&self, key: &str) -> Result<Option<Sample>> {
        if let Some(inbox) = self.inbox()
            && let Some(sample) = inbox.get(key)?
        {
            return Ok(Some(sample));
        }
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

    /// Segment by segment in row order ([`ArrowBackend::get_batch`]).
    fn get_batch(&self, keys: &[&str]) -> Result<Vec<Option<Sample>>> {
        ArrowBackend::get_batch(self, keys)
    }

    fn contains(&self, key: &str) -> Result<bool> {
        if let Some(inbox) = self.inbox()
            && inbox.contains(key)?
        {
            return Ok(true);
        }
        Ok(self.unwritten(key).is_some() || self.reader.locate(key)?.is_some())
    }

    /// With an inbox ([`ArrowOptions::rank_inboxes`]), the keys of the cache and of the inbox,
    /// a key in both once (a key of the inbox that cannot be listed or located is not counted).
    fn len(&self) -> usize {
        let inbox_only = self.inbox().map_or(0, |inbox| self.inbox_only_keys(inbox).len());
        self.reader.len() + self.unwritten_new_keys().len() + inbox_only
    }

    fn keys(&self) -> Result<Vec<String>> {
        let mut keys = self.reader.keys()?;
        keys.extend(self.unwritten_new_keys().into_iter().map(str::to_owned));
        if let Some(inbox) = self.inbox() {
            let mut only = Vec::new();
            for key in inbox.keys()? {
                if self.reader.locate(&key)?.is_none() {
                    only.push(key);
                }
            }
            keys.extend(only);
        }
        Ok(keys)
    }

    /// Whether the commit log's last word is a `finalized` record, as this handle last saw or
    /// wrote it (a writer's append unfinalizes the cache when its segment is committed).
    fn is_finalized(&self) -> bool {
        match &self.role {
            Role::Writer(writer) => writer.is_finalized(),
            Role::Reader | Role::OtherRank { .. } => self.state.is_finalized(),
        }
    }

    /// Every committed row is decoded and checked against its checksum, every segment another
    /// writer added is decoded and listed in `unchecked` (its rows have no checksums).
    fn validate(&self, level: ValidationLevel) -> Result<ValidationReport> {
        // Both levels decode every row: the checksums are per row, over the decoded sample.
        let _ = level;
        let mut report = self.reader.validate()?;
        let expected_schema_json =
            SchemaJson::describe(self.output_structure(), &self.arrow_schema)?.to_json();
        crate::validate::check_commits(&mut report, &self.layout, &expected_schema_json)?;
        Ok(report)
    }

    /// The commit log and key index checked once, then one unit per segment
    /// (`check_plan` module).
    fn check_plan(
        &self,
        selection: &stowage_core::check_plan::Selection,
    ) -> Result<stowage_core::check_plan::CheckPlan<'_>> {
        crate::check_plan::stowage_plan(self, selection)
    }

    /// The commit log, key index runs, segments and row checksums.
    fn describe(&self) -> Result<stowage_core::describe::Description> {
        crate::describe::describe_stowage(self)
    }
}

impl Backend for ArrowBackend {
    /// On a rank other than the writer rank: `Unsupported`, naming the rank (nothing would ever
    /// make the sample durable).
    /// With [`ArrowOptions::rank_inboxes`], such a rank puts into its inbox.
    fn put(&mut self, key: &str, sample: &Sample) -> Result<()> {
        if let Role::OtherRank { inbox: Some(inbox), .. } = &mut self.role {
            if self.encoding == BlobEncoding::Raw {
                check_legacy_row(&self.schema, key, sample)?;
            }
            self.sample_cache.remove(key);
            return inbox.put(key, sample);
        }
        if let Some(refusal) = self.other_rank_refusal("put") {
            return Err(refusal);
        }
        self.state.check_put(key, sample, &self.schema, &self.capabilities)?;
        match self.encoding {
            BlobEncoding::VerbatimPickles => check_verbatim(key, sample)?,
            BlobEncoding::Raw => check_legacy_row(&self.schema, key, sample)?,
            BlobEncoding::PickledBytes => {}
        }
        self.sample_cache.remove(key);
        self.pending.insert(key, sample);
        if self.pending.len() >= self.options.flush_every
            || self.pending.bytes() >= self.options.max_segment_bytes
        {
            self.write_pending(false)?;
        }
        Ok(())
    }

    /// On a rank other than the writer rank: `Ok` with nothing to do, as no put was taken (it
    /// makes nothing durable, and has nothing to); with [`ArrowOptions::rank_inboxes`], a flush
    /// of its inbox. On the writer rank with `rank_inboxes`, the inboxes are ingested first, so
    /// this flush commits what they hold that the cache does not (see the option).
    fn flush(&mut self) -> Result<()> {
        if let Role::OtherRank { inbox: Some(inbox), .. } = &mut self.role {
            return inbox.flush();
        }
        if matches!(self.role, Role::OtherRank { .. }) && self.pending.is_empty() {
            return Ok(());
        }
        self.check_write("flush")?;
        // An inbox that cannot be read does not keep this rank's own puts from being written;
        // its error is reported after them.
        let ingested = self.ingest_inboxes();
        self.write_pending(true)?;
        ingested
    }

    /// On a rank other than the writer rank: `Unsupported`, naming the rank; with
    /// [`ArrowOptions::rank_inboxes`], a flush of its inbox (only the writer rank finalizes the
    /// cache).
    fn finalize(&mut self) -> Result<()> {
        if let Role::OtherRank { inbox: Some(inbox), .. } = &mut self.role {
            return inbox.flush();
        }
        self.check_write("finalize")?;
        self.flush()?;
        let Role::Writer(writer) = &mut self.role else {
            unreachable!("check_write refuses every handle but the writer")
        };
        self.state.poison_on_error(writer.finalize(&mut self.reader))?;
        self.state.set_finalized(true);
        Ok(())
    }
}

/// Errors unless every bytes value of `sample` is (structurally) a pickle, as a cache of
/// verbatim pickles stores them ([`blob_encoding::check_pickle`]).
fn check_verbatim(key: &str, sample: &Sample) -> Result<()> {
    for (name, value) in sample.fields() {
        if let Value::Bytes(bytes) = value {
            blob_encoding::check_pickle(bytes).map_err(|why| {
                Error::schema(
                    name,
                    format!("key {key:?}: this cache stores verbatim pickles: {why}"),
                )
            })?;
        }
    }
    Ok(())
}

/// Errors unless torchcachex can read `sample` once written into a cache of commit log version
/// 2, whose layout stores bytes raw (torchcachex unpickles every blob) and a null as an Arrow
/// null or `[]` / `[]` (which torchcachex cannot unpickle or reshape): no null value, and bytes
/// that are a pickle.
fn check_legacy_row(schema: &Schema, key: &str, sample: &Sample) -> Result<()> {
    for field in &schema.fields {
        if matches!(field.kind, stowage_core::FieldKind::Json { .. }) {
            continue; // torchcachex skips the column
        }
        let why = match sample.get(&field.name) {
            None | Some(Value::Null) => "a null value, which this layout stores as torchcachex \
                 cannot read"
                .to_owned(),
            Some(Value::Bytes(bytes)) => match blob_encoding::check_pickle(bytes) {
                Ok(()) => continue,
                Err(why) => format!("bytes stored raw, which torchcachex unpickles: {why}"),
            },
            Some(_) => continue,
        };
        return Err(Error::unsupported(
            crate::BACKEND_NAME,
            format!(
                "writing key {key:?} field {:?} into a cache of commit log version 2: {why}; \
                 convert the cache into a new one (version 3 stores every row in a form \
                 torchcachex reads)",
                field.name
            ),
        ));
    }
    Ok(())
}
