//! `MemmapBackend`: the [`Reader`] and [`Backend`] over a DNANet memmap row cache.

use std::borrow::Cow;
use std::cell::OnceCell;
use std::fs::File;
use std::io::Read;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use stowage_core::cold_reads::{ColdReadAdvice, ColdReadAdvisor, PagePlan};
use stowage_core::file_safety::{WriterLock, atomic_write, fsync_dir, remove_abandoned_temps};
use stowage_core::reader::batch_by_visiting;
use stowage_core::{
    Backend, BatchVisitor, Capabilities, DType, Error, Format, IoResultExt, OpenMode, Reader,
    Result, Sample, Schema, Tensor, ValidationLevel, ValidationReport, Value, WriteState,
};
use stowage_fingerprint::{FingerprintFile, SourceStamp};

use crate::MemmapOptions;
use crate::checksum;
use crate::coverage::{self, Origin, Verdict};
use crate::error::MemmapError;
use crate::field_file::{FieldFile, SizeCheck};
use crate::file_io::ReadFrom;
use crate::finalize_files::{FinalizeBounds, FinalizeStats, write_finalize_files};
use crate::fingerprint_carry::CarriedFingerprint;
use crate::index::{JsonRef, RowEntry, RowIndex};
use crate::key_index::{KeyIndex, KeyIndexState, Lookup};
use crate::layout::{CACHE_VERSION, Layout, Shapes};
use crate::manifest::{Manifest, ManifestRows, TornLine, write_line};
use crate::preset;
use crate::row_format::{FieldSlot, JsonStorage, RowFormat, StowageMeta};
use crate::sidecar::Sidecar;
use crate::tail_index::{Covered, LineLoc};
use crate::writer::{Session, Writer};
use crate::{DNANET_MEMMAP, STOWAGE_MEMMAP};

/// The backend's name in errors and capability reports.
pub const BACKEND_NAME: &str = "memmap";

/// What a memmap row cache can do.
///
/// Fixed-shape tensor fields of every numpy-expressible dtype (not bfloat16), nullable fields (a
/// zero placeholder plus a `has_<field>` flag), JSON fields (deduplicated into sidecars, or
/// plain), resume of an unfinished cache, per-row xxh3-64 checksums (in caches stowage writes;
/// DNANet's own caches have none), zero-copy reads and concurrent readers. Not: bytes fields,
/// variable or ragged shapes (rows are fixed-size), overwriting a key, appending after finalize,
/// keys over 16 MiB.
pub fn capabilities() -> Capabilities {
    let mut caps = Capabilities::none();
    caps.nullable = true;
    caps.json_fields = true;
    caps.resume = true;
    caps.durable_flush = true;
    caps.checksums = true;
    caps.zero_copy_get = true;
    caps.concurrent_readers = true;
    caps.dtypes = DType::ALL.into_iter().filter(|d| *d != DType::BF16).collect();
    // The path table keeps a key's length in 24 bits.
    caps.max_key_bytes = Some(stowage_core::key_table::CompactEntry::MAX_KEY_BYTES);
    caps
}

/// Which files record the cache's rows, as found on disk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Recorded {
    /// Finalize's files: `shapes.json`, `index.parquet` and the sidecars. The cache is finalized
    /// (`_COMPLETE`), or its finalize stopped just before writing `_COMPLETE` and it reads like a
    /// finalized one; [`WriteState::is_finalized`] tells the two apart.
    ByFinalize,
    /// `manifest.jsonl` (or no file yet, in a cache stowage created that has no manifest): the
    /// committed rows of an unfinished write.
    ByManifest {
        /// The dropped torn last line of the manifest.
        torn_tail: Option<TornLine>,
        /// Bytes of the manifest's committed lines.
        committed_len: u64,
        /// The last committed line lost its newline.
        missing_newline: bool,
    },
}

impl Recorded {
    fn empty_manifest() -> Recorded {
        Recorded::ByManifest { torn_tail: None, committed_len: 0, missing_newline: false }
    }
}

/// Why loading the row index failed: the file, key and detail of its [`Error::Corrupted`],
/// returned again by every call that needs the index (an `Error` is not `Clone`).
#[derive(Debug)]
struct IndexFailure {
    path: PathBuf,
    key: Option<String>,
    detail: String,
}

/// The outcome of loading the row index.
type IndexLoad = std::result::Result<RowIndex, IndexFailure>;

/// The rows of an unfinished cache, without every row in memory: the rows the key index runs
/// cover (on disk, `tail_index`) and the entries of the rows since (the tail).
#[derive(Debug)]
pub(crate) struct Tail {
    covered: Covered,
    /// Entries of rows `covered.rows()..`, numbered from 0.
    recent: RowIndex,
    /// Where each recent row's manifest line is (or will be, once committed).
    locs: Vec<LineLoc>,
    /// The manifest as this handle opened it, which its rows are read back through rather than
    /// the path: a writer's finalize removes `manifest.jsonl` while read-only handles opened
    /// before it still list and index their rows, and an open file stays readable. Writers only
    /// append to the manifest and cut it back in place, never replace it.
    manifest: File,
}

impl Tail {
    /// The tail of a writer that has just made the manifest at `manifest`.
    fn new(covered: Covered, manifest: &Path) -> Result<Tail> {
        Ok(Tail {
            covered,
            recent: RowIndex::from_entries(Vec::new(), Path::new(""))?,
            locs: Vec::new(),
            manifest: File::open(manifest).at(manifest)?,
        })
    }
}

/// A DNANet memmap row cache (cache version 5): read-only, or a writer holding the cache's lock.
///
/// Its [`Reader::format`] is [`STOWAGE_MEMMAP`] when the cache has `stowage.json` (stowage wrote
/// or resumed it), else [`DNANET_MEMMAP`].
///
/// ```
/// use stowage_core::{Backend, Reader, Sample, Tensor, Value};
/// use stowage_memmap::{MemmapBackend, MemmapOptions, dnanet};
///
/// let dir = tempfile::tempdir()?;
/// let mut cache = MemmapBackend::create(dir.path(), &dnanet(2, 3), MemmapOptions::default())?;
/// let row = Sample::new()
///     .with("data", Tensor::from_slice(&[2, 3], &[1i16, 2, 3, 4, 5, 6])?)
///     .with("scaler", Tensor::from_slice(&[3], &[0.5f32, 1.0, 2.0])?)
///     .with("panel", Value::Json("[\"p\"]".into()))
///     .with("meta_json", Value::Json("{}".into()));
/// cache.put("/data/a.hid", &row)?;
/// cache.finalize()?;
/// drop(cache);
///
/// let reader = MemmapBackend::open_read_only(dir.path(), MemmapOptions::default())?;
/// let got = reader.get_row(-1)?;
/// assert_eq!(got.get("annotation"), Some(&Value::Null)); // absent nullable field: null
/// assert_eq!(got.tensor("data"), row.tensor("data"));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct MemmapBackend {
    layout: Layout,
    options: MemmapOptions,
    capabilities: Capabilities,
    format: RowFormat,
    recorded: Recorded,
    /// Read-only or writable, finalized, poisoned: the checks every write starts with.
    write: WriteState,
    /// The row index. Filled at open for writers and for unfinished caches (their index is the
    /// manifest, read anyway); for a finalized cache opened read-only, filled from `index.parquet`
    /// on the first call that needs it ([`MemmapBackend::try_index`]), keeping a load failure.
    index: OnceLock<IndexLoad>,
    /// Stowage's key index of a finalized cache opened read-only (`stowage_index/`): when
    /// [`KeyIndexState::Ready`], `get`, `contains`, `get_row` and `keys` read it instead of
    /// loading `index.parquet`.
    key_index: KeyIndexState,
    /// Rows of the cache: `n` of `shapes.json` for a finalized cache (the index must hold as many),
    /// else the committed rows found at open. [`Reader::len`] of a read-only handle.
    rows: usize,
    /// Read-only maps of the tensor fields, sized to the rows found at open.
    files: Vec<FieldFile>,
    /// The map of `stowage_checksums.bin`, when the cache has checksums: its whole rows, up to
    /// the cache's rows (DNANet appends rows without them).
    checksums: Option<FieldFile>,
    /// Rows of an unfinished cache whose manifest line another writer wrote
    /// ([`Manifest::foreign`]); rows this handle puts are stowage's.
    foreign_lines: Vec<Range<usize>>,
    /// Field names shared by every returned sample, in schema order.
    names: Vec<Arc<str>>,
    /// Per JSON field: its sidecar, when deduplicated.
    sidecars: Vec<Option<Sidecar>>,
    writer: Option<Writer>,
    /// An unfinished cache's rows (key index runs plus the tail): when present, reads by key and
    /// `put` go through it, and `index` is loaded only by the calls that need every row.
    tail: Option<Tail>,
    /// Why the key index of an unfinished cache is not used (its manifest was replayed whole).
    tail_unusable: Option<String>,
    /// Tells the kernel which pages `get` and `get_batch` will read when they are not in the page
    /// cache ([`MemmapOptions::cold_read_advice`]).
    advisor: ColdReadAdvisor,
    /// What this handle's finalize held and wrote.
    finalize_stats: Option<FinalizeStats>,
}

impl MemmapBackend {
    /// Creates an empty cache of `schema` in `dir` (created if missing) and returns its writer.
    ///
    /// Writes `stowage.json` (the schema; DNANet ignores it), empty `.bin` files, an empty
    /// `stowage_checksums.bin` and an empty `manifest.jsonl`. Stale `.bin` files of an earlier
    /// cache in `dir` are truncated, never appended to.
    ///
    /// Errors: `Unsupported` for a schema outside [`capabilities`]; `InvalidArgument` when two
    /// fields would share a file or column; `AlreadyExists` when `dir` holds a cache (finalized,
    /// unfinished or DNANet's); `Locked` when another writer holds `dir`; `Io` naming the path.
    pub fn create(
        dir: impl AsRef<Path>,
        schema: &Schema,
        options: MemmapOptions,
    ) -> Result<MemmapBackend> {
        let layout = Layout::new(dir.as_ref());
        let capabilities = capabilities();
        capabilities.check_schema(schema, BACKEND_NAME)?;
        let format = RowFormat::new(schema, true)?;
        if holds_cache(&layout) {
            return Err(Error::AlreadyExists { path: layout.root().to_path_buf() });
        }
        std::fs::create_dir_all(layout.root()).at(layout.root())?;
        let lock = WriterLock::acquire(layout.root())?;
        if holds_cache(&layout) {
            return Err(Error::AlreadyExists { path: layout.root().to_path_buf() });
        }
        // A create killed before stowage.json was in place may have left its temporary.
        remove_abandoned_temporaries(&layout, &format)?;
        // stowage.json first: from here on the directory is a cache, and a crash before the
        // manifest exists leaves one that the next writer restarts from empty files.
        atomic_write(layout.stowage_meta(), &StowageMeta::new(schema).to_json())?;
        let session = Session::create(&layout, &format)?;
        fsync_dir(layout.root())?;
        // The cache directory's own entry, in case create_dir_all just made it.
        let parent = layout.root().parent().filter(|p| !p.as_os_str().is_empty());
        fsync_dir(parent.unwrap_or(Path::new(".")))?;
        let mut backend = Self::assemble(
            layout,
            options,
            format,
            Recorded::empty_manifest(),
            false,
            None,
            0,
            Vec::new(),
        );
        // Key index files a removed cache of this directory left.
        crate::tail_index::remove_all(&backend.layout)?;
        let manifest = backend.layout.manifest();
        backend.tail = Some(Tail::new(Covered::empty(&backend.layout), &manifest)?);
        backend.start_writing(Writer::new(lock, Some(session)));
        Ok(backend)
    }

    /// Opens with `mode`: [`MemmapBackend::open_read_only`] or [`MemmapBackend::open_append`].
    pub fn open(dir: impl AsRef<Path>, mode: OpenMode, options: MemmapOptions) -> Result<Self> {
        match mode {
            OpenMode::ReadOnly => Self::open_read_only(dir, options),
            OpenMode::Append => Self::open_append(dir, options),
        }
    }

    /// Opens the cache in `dir` read-only. No lock is taken; memory maps open on the first row read.
    ///
    /// The schema is `stowage.json`'s when stowage wrote the cache, else DNANet's field set
    /// (`preset::schema_for`) over the fields of `shapes.json`.
    ///
    /// - With `_COMPLETE`: reads `shapes.json` and checks each `.bin` file's size against
    ///   `n * row_bytes` (shorter: `Error::Corrupted` naming the file and both sizes; longer: the
    ///   same unless [`MemmapOptions::allow_trailing_bytes`]), and that `index.parquet` exists.
    ///   The index is not read at open (open time does not grow with the row count). A cache
    ///   stowage finalized has its key index (`stowage_index/`, crate documentation, *Key
    ///   index*): its headers and `index.parquet`'s footer are checked at open, and `get`,
    ///   `contains`, `keys` and [`MemmapBackend::get_row`] read through it. Without a usable
    ///   key index, `index.parquet` is loaded on the first call that needs it (those, `validate`,
    ///   [`MemmapBackend::try_index`]) and kept. It must
    ///   hold `n` rows with distinct paths, `row` equal to the position; a damaged index is
    ///   `Error::Corrupted` naming `index.parquet`, returned by every such call (and listed by
    ///   `validate`). [`Reader::len`] is `n` without loading it.
    /// - Without `_COMPLETE` but with `manifest.jsonl`: serves the manifest's committed rows. For a
    ///   cache DNANet wrote, the shapes come from the manifest and the dtypes are DNANet's (`<i2`,
    ///   `|i1`, `<f4`), as there is no `shapes.json` yet. Bytes beyond the committed rows are a
    ///   torn append and are ignored. [`Reader::is_finalized`] is false. With stowage's key index
    ///   of the unfinished cache (`stowage_index/tail_state`, crate documentation, *Unfinished
    ///   caches*) only the manifest's lines after the rows its runs cover are parsed; without
    ///   one, or when it does not match the manifest, every line. The handle keeps the manifest
    ///   (and the runs) it opened: after a writer finalizes and removes them, it still reads,
    ///   lists and validates the rows it opened with.
    /// - Without both, but with `shapes.json` and `index.parquet`: finalize was interrupted just
    ///   before writing `_COMPLETE`; read like a complete cache (index loaded lazily), reported as
    ///   unfinished.
    /// - Only `stowage.json`: a cache stowage created with no manifest yet; no rows.
    /// - Anything else: `Error::NotFound`. `stowage_checksums.bin` without `stowage.json` is
    ///   `Error::Corrupted` (a stowage cache that lost its schema).
    ///
    /// `stowage_checksums.bin` may hold fewer rows than the cache (or be missing): DNANet adds rows
    /// without checksums. Such rows are read like any other, unverified when no stowage checksum
    /// covers them; `validate` lists them as unchecked, or as damage when stowage committed them
    /// (the crate documentation, *Mixed use with DNANet*, states the rule). A finalized cache's
    /// checksum file running past its rows is refused like a `.bin` file's trailing bytes.
    pub fn open_read_only(dir: impl AsRef<Path>, options: MemmapOptions) -> Result<MemmapBackend> {
        let layout = Layout::new(dir.as_ref());
        if !holds_cache(&layout) {
            return Err(not_a_cache(&layout));
        }
        Self::open_existing(layout, options)
    }

    /// Opens an existing cache for writing: takes the writer lock (`Error::Locked` when another
    /// writer holds it) and recovers an unfinished cache to exactly its committed rows: a torn
    /// last manifest line is cut off, each `.bin` file is cut back to `committed * row_bytes`
    /// (a shorter one is `Error::Corrupted`, never padded). [`Reader::contains`] and
    /// [`Reader::keys`] then list the committed keys, so the caller can skip them. The
    /// temporaries a killed stowage writer left (`.<name>.tmp-<pid>-<n>` of the files stowage
    /// writes atomically: an adopt's `stowage_checksums.bin`, a finalize's sidecars, index,
    /// `shapes.json`, `fingerprint.json`, `_COMPLETE`) are removed; DNANet's files never.
    ///
    /// `_COMPLETE` is never removed: on a finalized cache `put` returns `Error::Finalized`. A cache
    /// whose finalize stopped just before `_COMPLETE` gets it now (its files are complete).
    /// Resuming a DNANet-written manifest with no committed row is `Error::Unsupported` (its
    /// shapes are unknown).
    ///
    /// Rows DNANet added are resumed like stowage's: `stowage_checksums.bin` gets a placeholder
    /// row for each of them that it has no row for (they stay unchecked until adopted), so that the
    /// rows this writer puts are checksummed at their own positions. A cache DNANet started (no
    /// `stowage.json`) first gets `stowage.json`, with the schema its rows have, and a checksum
    /// file with a placeholder per row: DNANet ignores both. A row stowage committed whose checksum
    /// row is gone is `Error::Corrupted`: the writer does not resume over damage.
    ///
    /// Unlike a read-only open, a writer loads (and checks) `index.parquet` of a finalized cache at
    /// open: a damaged index is `Error::Corrupted` here, before `_COMPLETE` could be added.
    ///
    /// The writer holds in memory only the rows after those its key index runs cover (the tail);
    /// its flushes turn the tail into a run every [`MemmapOptions::key_index_tail`] rows.
    pub fn open_append(dir: impl AsRef<Path>, options: MemmapOptions) -> Result<MemmapBackend> {
        let layout = Layout::new(dir.as_ref());
        if !holds_cache(&layout) {
            return Err(not_a_cache(&layout));
        }
        let lock = WriterLock::acquire(layout.root())?;
        let mut backend = Self::open_existing(layout, options)?;
        remove_abandoned_temporaries(&backend.layout, &backend.format)?;
        if matches!(backend.recorded, Recorded::ByFinalize) {
            backend.try_index()?;
        }
        let session = match backend.recorded.clone() {
            Recorded::ByFinalize if backend.write.is_finalized() => None,
            Recorded::ByFinalize => {
                // Finalize stopped just before `_COMPLETE`; its files are complete.
                atomic_write(backend.layout.complete_marker(), b"")?;
                backend.write.set_finalized(true);
                None
            }
            Recorded::ByManifest { .. } if !backend.layout.manifest().exists() => {
                // No manifest: no committed row, and whatever the .bin files hold is stale.
                let session = Session::create(&backend.layout, &backend.format)?;
                crate::tail_index::remove_all(&backend.layout)?;
                backend.index = OnceLock::new();
                let manifest = backend.layout.manifest();
                backend.tail = Some(Tail::new(Covered::empty(&backend.layout), &manifest)?);
                fsync_dir(backend.layout.root())?;
                Some(session)
            }
            Recorded::ByManifest { committed_len, missing_newline, .. } => {
                backend.check_resumable()?;
                if !backend.format.checksums {
                    backend.start_checksums()?;
                }
                if backend.tail_unusable.is_some() {
                    // Stale: the runs are rebuilt from the rows replayed at open.
                    crate::tail_index::remove_all(&backend.layout)?;
                } else {
                    let covered = backend.tail.as_ref().map(|t| &t.covered);
                    crate::tail_index::remove_unused(&backend.layout, covered);
                }
                let session = Session::recover(
                    &backend.layout,
                    &backend.format,
                    backend.rows,
                    (committed_len, missing_newline),
                    &backend.foreign_lines,
                    |row| backend.entry(row).map_or(String::new(), |e| e.path.to_string()),
                )?;
                fsync_dir(backend.layout.root())?;
                Some(session)
            }
        };
        backend.start_writing(Writer::new(lock, session));
        Ok(backend)
    }

    /// Makes this handle the cache's writer (it holds the lock in `writer`).
    fn start_writing(&mut self, writer: Writer) {
        let finalized = self.write.is_finalized();
        self.write = WriteState::writable(BACKEND_NAME, self.layout.root(), finalized);
        self.writer = Some(writer);
    }

    fn check_resumable(&self) -> Result<()> {
        let cache = self.layout.root().to_path_buf();
        if !self.format.checksums && self.rows == 0 {
            return Err(MemmapError::ResumeWithoutShapes { cache }.into());
        }
        if let Some(t) =
            self.format.tensors.iter().find(|t| t.layout.byte_order == stowage_core::ByteOrder::Big)
        {
            return Err(MemmapError::ResumeBigEndian { cache, field: t.layout.name.clone() }.into());
        }
        Ok(())
    }

    /// Makes an unfinished cache DNANet started one whose new rows stowage checksums: writes
    /// `stowage.json` with the schema its rows have. The recovery that follows gives each of
    /// DNANet's rows a placeholder checksum row (unchecked until adopted). A crash in between
    /// leaves `stowage.json` without a checksum file, which reads as DNANet's rows unchecked.
    pub(crate) fn start_checksums(&mut self) -> Result<()> {
        let format = RowFormat::new(&self.format.schema, true)?;
        let written: Vec<_> = format.tensors.iter().map(|t| t.layout.clone()).collect();
        let stored: Vec<_> = self.format.tensors.iter().map(|t| t.layout.clone()).collect();
        if written != stored {
            let cache = self.layout.root().to_path_buf();
            return Err(MemmapError::ForeignFieldLayout { cache, stored, written }.into());
        }
        atomic_write(self.layout.stowage_meta(), &StowageMeta::new(&format.schema).to_json())?;
        // Every row so far is DNANet's, whatever the form of its line: none has a checksum.
        self.foreign_lines = std::iter::once(0..self.rows).filter(|r| !r.is_empty()).collect();
        self.checksums = Some(FieldFile::new(self.layout.checksums(), format.checksum_layout(), 0));
        self.format = format;
        Ok(())
    }

    fn open_existing(layout: Layout, options: MemmapOptions) -> Result<MemmapBackend> {
        let meta = StowageMeta::read(&layout.stowage_meta())?;
        if meta.is_none() && layout.checksums().exists() {
            let (meta, checksums) = (layout.stowage_meta(), layout.checksums());
            return Err(MemmapError::SchemaLost { meta, checksums }.into());
        }
        if !layout.complete_marker().exists() && layout.manifest().exists() {
            match Self::open_unfinished(layout.clone(), options.clone(), meta.clone()) {
                // A finalize removes the manifest just before it writes `_COMPLETE`: a reader
                // that saw the manifest and lost it meanwhile opens what the finalize left.
                Err(Error::Io { source, .. })
                    if source.kind() == std::io::ErrorKind::NotFound
                        && !layout.manifest().exists() => {}
                other => return other,
            }
        }
        let complete = layout.complete_marker().exists();
        let finalize_files = layout.shapes().exists() && layout.index().exists();
        if !(complete || finalize_files) {
            // Only stowage.json: created, crashed before any manifest existed.
            let meta = meta.ok_or_else(|| not_a_cache(&layout))?;
            let format = RowFormat::new(&meta.schema, true)
                .map_err(|e| Error::corrupted(layout.stowage_meta(), e.to_string()))?;
            let index = RowIndex::from_entries(Vec::new(), &layout.manifest())?;
            return Ok(Self::assemble(
                layout,
                options,
                format,
                Recorded::empty_manifest(),
                false,
                Some(index),
                0,
                Vec::new(),
            ));
        }
        let shapes = match meta {
            Some(_) => Shapes::read_allowing_no_field(&layout.shapes()),
            None => Shapes::read(&layout.shapes()),
        };
        let shapes = shapes.map_err(|e| match e {
            Error::NotFound { .. } => {
                Error::corrupted(layout.shapes(), "file is missing from a finalized cache")
            }
            other => other,
        })?;
        let format = match &meta {
            Some(meta) => {
                let format = RowFormat::new(&meta.schema, true)
                    .map_err(|e| Error::corrupted(layout.stowage_meta(), e.to_string()))?;
                let written: Vec<_> = format.tensors.iter().map(|t| t.layout.clone()).collect();
                if written != shapes.fields {
                    let described = shapes.fields.clone();
                    let shapes = layout.shapes();
                    return Err(MemmapError::ShapesDisagree { shapes, described, written }.into());
                }
                format
            }
            None => RowFormat::with_layouts(
                preset::schema_for(&shapes.fields),
                shapes.fields.clone(),
                false,
            )
            .map_err(|e| Error::corrupted(layout.shapes(), e.to_string()))?,
        };
        let (files, _) = field_files(&layout, &format, shapes.rows);
        // The checksum file may stop short of the rows (DNANet finalized rows it did not
        // checksum; validate judges that), but never runs past them.
        let whole_checksums = format
            .checksums
            .then(|| FieldFile::new(layout.checksums(), format.checksum_layout(), shapes.rows));
        for file in files.iter() {
            if let SizeCheck::Trailing(extra) = file.check_size()?
                && !options.allow_trailing_bytes
            {
                return Err(trailing_error(file, extra));
            }
        }
        if let Some(file) = &whole_checksums
            && let Some(extra) = checksum_excess(file)?
            && !options.allow_trailing_bytes
        {
            return Err(trailing_error(file, extra));
        }
        // Only its presence: the index is read on first need (MemmapBackend::try_index).
        if !layout.index().exists() {
            return Err(Error::corrupted(layout.index(), "index file is missing"));
        }
        let key_index = KeyIndex::open(&layout, &format, shapes.rows);
        let mut backend = Self::assemble(
            layout,
            options,
            format,
            Recorded::ByFinalize,
            complete,
            None,
            shapes.rows,
            Vec::new(),
        );
        backend.key_index = key_index;
        Ok(backend)
    }

    fn open_unfinished(
        layout: Layout,
        options: MemmapOptions,
        meta: Option<StowageMeta>,
    ) -> Result<MemmapBackend> {
        let path = layout.manifest();
        // The key index runs of a cache stowage wrote: only the manifest's tail is replayed.
        let (covered, unusable) = match meta.is_some().then(|| Covered::open(&layout)) {
            Some(Ok(Some(covered))) => (Some(covered), None),
            Some(Err(why)) => (None, Some(why)),
            _ => (None, None),
        };
        let manifest_file = File::open(&path).at(&path)?;
        let mut text = Vec::new();
        let start = covered.as_ref().map_or(0, Covered::manifest_bytes);
        ReadFrom::new(&manifest_file, start).read_to_end(&mut text).at(&path)?;
        let format = match meta {
            Some(meta) => RowFormat::new(&meta.schema, true)
                .map_err(|e| Error::corrupted(layout.stowage_meta(), e.to_string()))?,
            None => {
                let [data, annotation, scaler] = Manifest::dnanet_shapes(&text, &path)?;
                for (name, shape) in
                    [("data", &data), ("annotation", &annotation), ("scaler", &scaler)]
                {
                    // Checked here so that dnanet_fields never meets an overflowing shape.
                    stowage_core::shape::byte_count(shape, 8)
                        .map_err(|e| Error::corrupted(&path, format!("{name} shape: {e}")))?;
                }
                let fields = preset::dnanet_fields(&data, &annotation, &scaler);
                RowFormat::with_layouts(preset::schema_for(&fields), fields, false)?
            }
        };
        let (first_row, base_offset) =
            covered.as_ref().map_or((0, 0), |c| (c.rows(), c.manifest_bytes()));
        let manifest = Manifest::parse_from(&text, &path, &format, first_row, base_offset)?;
        let rows = first_row + manifest.rows.len();
        // Bytes beyond the committed rows are a torn append; the checksum file may also stop
        // short of them (rows DNANet committed), which the rows' verdicts judge.
        let (files, _) = field_files(&layout, &format, rows);
        for file in &files {
            file.check_size()?;
        }
        let recent = RowIndex::from_entries(manifest.rows, &path)?;
        let recorded = Recorded::ByManifest {
            torn_tail: manifest.torn_tail,
            committed_len: manifest.committed_len,
            missing_newline: manifest.missing_newline,
        };
        let covered = covered.unwrap_or_else(|| Covered::empty(&layout));
        let mut foreign = covered.foreign().to_vec();
        for range in manifest.foreign {
            match foreign.last_mut() {
                Some(last) if last.end == range.start => last.end = range.end,
                _ => foreign.push(range),
            }
        }
        let tail = Tail { covered, recent, locs: manifest.lines, manifest: manifest_file };
        let mut backend =
            Self::assemble(layout, options, format, recorded, false, None, rows, foreign);
        backend.tail = Some(tail);
        backend.tail_unusable = unusable;
        Ok(backend)
    }

    /// Why the key index of this unfinished cache is not used, when it exists but does not match
    /// the manifest (its rows were replayed whole instead).
    pub(crate) fn tail_unusable(&self) -> Option<&str> {
        self.tail_unusable.as_deref()
    }

    /// The key index runs and line locations of an unfinished cache, when in use.
    pub(crate) fn tail_covered(&self) -> Option<&Covered> {
        self.tail.as_ref().map(|t| &t.covered).filter(|c| c.rows() > 0)
    }

    /// Every row's entry of an unfinished cache read through its tail: the manifest's committed
    /// lines (up to this handle's rows), then the rows this writer has not committed yet.
    fn full_tail_index(&self, tail: &Tail) -> Result<RowIndex> {
        let path = self.layout.manifest();
        let mut text = Vec::new();
        ReadFrom::new(&tail.manifest, 0).read_to_end(&mut text).at(&path)?;
        let mut entries = Manifest::entries(&text, &path, &self.format)?;
        drop(text);
        entries.truncate(self.rows);
        let base = tail.covered.rows();
        if entries.len() < base {
            return Err(Error::corrupted(
                &path,
                format!("holds {} rows, the key index covers {base}", entries.len()),
            ));
        }
        for row in entries.len()..self.rows {
            let entry = tail.recent.row(row - base).ok_or_else(|| {
                Error::corrupted(&path, format!("row {row} is neither committed nor pending"))
            })?;
            entries.push(entry.clone());
        }
        RowIndex::from_entries(entries, &path)
    }

    /// A read-only handle over `rows` rows; `index` is `None` when it is to be read from
    /// `index.parquet` on first need.
    #[allow(clippy::too_many_arguments)] // One call per way of finding a cache on disk.
    fn assemble(
        layout: Layout,
        options: MemmapOptions,
        format: RowFormat,
        recorded: Recorded,
        finalized: bool,
        index: Option<RowIndex>,
        rows: usize,
        foreign_lines: Vec<Range<usize>>,
    ) -> MemmapBackend {
        let (files, checksums) = field_files(&layout, &format, rows);
        let names = format.schema.fields.iter().map(|f| Arc::from(f.name.as_str())).collect();
        let sidecars = format
            .json
            .iter()
            .map(|field| match &field.storage {
                JsonStorage::Deduplicated { sidecar, .. } => {
                    Some(Sidecar::new(layout.file(sidecar)))
                }
                JsonStorage::Plain { .. } => None,
            })
            .collect();
        let advisor = ColdReadAdvisor::new(options.cold_read_advice);
        MemmapBackend {
            capabilities: capabilities(),
            write: WriteState::read_only(BACKEND_NAME, layout.root(), finalized),
            layout,
            options,
            format,
            recorded,
            index: index.map_or_else(OnceLock::new, |index| OnceLock::from(Ok(index))),
            key_index: KeyIndexState::Absent,
            rows,
            files,
            checksums,
            foreign_lines,
            names,
            sidecars,
            writer: None,
            tail: None,
            tail_unusable: None,
            advisor,
            finalize_stats: None,
        }
    }

    /// The cache's directory layout.
    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    /// The options this handle was opened with.
    pub fn options(&self) -> &MemmapOptions {
        &self.options
    }

    /// The row index (paths, presence flags, sidecar keys or texts), loading `index.parquet` of a
    /// finalized cache opened read-only on first need.
    ///
    /// Only for callers that have already seen the index load (crate-private for that reason):
    /// when `index.parquet` cannot be loaded this is an empty index; [`MemmapBackend::try_index`]
    /// (and every `Reader` call that needs the index) returns the error.
    pub(crate) fn index(&self) -> &RowIndex {
        static EMPTY: OnceLock<RowIndex> = OnceLock::new();
        self.try_index().unwrap_or_else(|_| {
            EMPTY.get_or_init(|| {
                RowIndex::from_entries(Vec::new(), Path::new("")).expect("no rows, no duplicate")
            })
        })
    }

    /// The row index, loading `index.parquet` on the first call when this is a finalized cache
    /// opened read-only (writers and unfinished caches load it at open). The loaded index is kept
    /// for the life of the handle; concurrent first calls load it once.
    ///
    /// Errors: [`Error::Corrupted`] naming `index.parquet` when it is missing, unreadable, has a
    /// column of a wrong type, a `row` that is not its position, a path stored twice, or not
    /// `shapes.json`'s `n` rows. A failed load is kept: every later call returns the same error
    /// (the file is not read again).
    pub fn try_index(&self) -> Result<&RowIndex> {
        match self.index.get_or_init(|| self.load_index()) {
            Ok(index) => Ok(index),
            Err(IndexFailure { path, key, detail }) => Err(Error::Corrupted {
                path: path.clone(),
                key: key.clone(),
                detail: detail.clone(),
            }),
        }
    }

    /// Whether the row index is in memory: loaded at open (writers, unfinished caches) or by a
    /// call that needed it (including a load that failed). For tests of lazy opening.
    #[doc(hidden)]
    pub fn index_loaded(&self) -> bool {
        self.index.get().is_some()
    }

    /// Whether stowage's key index (`stowage_index/`) is in use, and if not whether it exists
    /// and why it is not used.
    pub(crate) fn key_index_state(&self) -> &KeyIndexState {
        &self.key_index
    }

    /// Whether reads by key go through stowage's key index (`stowage_index/`) rather than the
    /// row index: a finalized cache stowage finalized, opened read-only, whose key index matches
    /// its `index.parquet`. For tests and benchmarks.
    ///
    /// ```
    /// use stowage_core::{Backend, DType, Reader, Sample, Schema, ShapeRule, Tensor};
    /// use stowage_memmap::{MemmapBackend, MemmapOptions};
    /// let dir = tempfile::tempdir()?;
    /// let schema = Schema::new().tensor("x", DType::U8, ShapeRule::Fixed(vec![1]));
    /// let mut cache = MemmapBackend::create(dir.path(), &schema, MemmapOptions::default())?;
    /// cache.put("a", &Sample::new().with("x", Tensor::from_slice(&[1], &[7u8])?))?;
    /// cache.finalize()?;
    /// let reader = MemmapBackend::open_read_only(dir.path(), MemmapOptions::default())?;
    /// assert!(reader.uses_key_index());
    /// assert!(reader.contains("a")? && !reader.index_loaded(), "index.parquet stays unread");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[doc(hidden)]
    pub fn uses_key_index(&self) -> bool {
        matches!(self.key_index, KeyIndexState::Ready(_))
    }

    /// A row other than `row` that holds `key`, row `row`'s key (for `validate`: a key stored
    /// twice). An unfinished cache's rows are looked up without reading `row`'s own line: the
    /// tail's entries, then the runs' slots of the key's hash (each other candidate confirmed by
    /// its line); a damaged line makes it ask the row index (loading every row).
    pub(crate) fn other_row_with_key(&self, key: &str, row: usize) -> Result<Option<usize>> {
        let Some(tail) = &self.tail else {
            return Ok(self.find_row(key, |_| {})?.filter(|&found| found != row));
        };
        let base = tail.covered.rows();
        if let Some(local) = tail.recent.find(key)
            && base + local != row
        {
            return Ok(Some(base + local));
        }
        match tail.covered.find_other(key, row, &self.format) {
            Lookup::Found(other) => Ok(Some(other)),
            Lookup::Absent => Ok(None),
            Lookup::Unsure => Ok(self.try_index()?.find(key).filter(|&found| found != row)),
        }
    }

    /// The row of `key`, through the key index when it is in use, else the row index;
    /// `candidate` sees each row whose hash matches first.
    fn find_row(&self, key: &str, candidate: impl Fn(usize)) -> Result<Option<usize>> {
        self.find_row_advising(key, candidate, None)
    }

    /// [`MemmapBackend::find_row`]; with `advise` (`Some(verify)`), a candidate found through
    /// the key index has its record and its row's pages (checksum row too when `verify`) advised
    /// together when they are not in the page cache, so a cold get waits for the run's slot and
    /// then for one round of reads.
    fn find_row_advising(
        &self,
        key: &str,
        candidate: impl Fn(usize),
        advise: Option<bool>,
    ) -> Result<Option<usize>> {
        if let KeyIndexState::Ready(keys) = &self.key_index {
            let seen = |row: usize, record: Range<usize>| {
                candidate(row);
                if let Some(verify) = advise
                    && row < self.rows
                    && self.session().is_none()
                    && self.advisor.get_wants_probe()
                {
                    let mut plan = PagePlan::with_capacity(self.files.len() + 2);
                    let _ = plan.add(keys.keys_map(), record);
                    self.plan_row(row, verify, &mut plan);
                    self.advisor.before_get(&mut plan);
                }
            };
            match keys.find_with(key, seen) {
                Lookup::Found(row) => return Ok(Some(row)),
                Lookup::Absent => return Ok(None),
                // A damaged record: index.parquet answers, correct if slower.
                Lookup::Unsure => {}
            }
        }
        if let Some(tail) = &self.tail {
            let base = tail.covered.rows();
            if let Some(local) = tail.recent.find_with(key, |local| candidate(base + local)) {
                return Ok(Some(base + local));
            }
            match tail.covered.find(key, &self.format) {
                Lookup::Found(row) => {
                    candidate(row);
                    return Ok(Some(row));
                }
                Lookup::Absent => return Ok(None),
                // A damaged line location or line: every row is read from the manifest.
                Lookup::Unsure => {}
            }
        }
        Ok(self.try_index()?.find_with(key, candidate))
    }

    /// The entry of `row` (in range): from the key index when it is in use and the row's record
    /// is whole, else from the row index (loading `index.parquet` if need be).
    pub(crate) fn entry(&self, row: usize) -> Result<Cow<'_, RowEntry>> {
        if let KeyIndexState::Ready(keys) = &self.key_index
            && let Some(entry) = keys.entry(row)
        {
            return Ok(Cow::Owned(entry));
        }
        if let Some(tail) = &self.tail {
            let base = tail.covered.rows();
            if row >= base
                && let Some(entry) = tail.recent.row(row - base)
            {
                return Ok(Cow::Borrowed(entry));
            }
            if let Some(entry) = tail.covered.entry(row, &self.format) {
                return Ok(Cow::Owned(entry));
            }
        }
        let entry = self.try_index()?.row(row).ok_or_else(|| {
            Error::invalid(format!("row {row} is beyond the {} rows of the index", self.rows))
        })?;
        Ok(Cow::Borrowed(entry))
    }

    /// The checksum rows stowage's finalize recorded for a finalized cache (see
    /// [`RowIndex::stowage_checksum_rows`]), from the key index when it is in use.
    pub(crate) fn stowage_checksum_rows(&self) -> Option<usize> {
        match &self.key_index {
            _ if matches!(self.recorded, Recorded::ByManifest { .. }) => None,
            KeyIndexState::Ready(keys) if !self.index_loaded() => keys.checksum_rows(),
            _ => self.index().stowage_checksum_rows(),
        }
    }

    fn load_index(&self) -> IndexLoad {
        let path = self.layout.index();
        let index = match (&self.tail, &self.recorded) {
            (Some(tail), Recorded::ByManifest { .. }) => self.full_tail_index(tail),
            _ => RowIndex::read_parquet(&path, &self.format),
        };
        let index = index.and_then(|index| {
            if index.len() == self.rows {
                return Ok(index);
            }
            let (held, n) = (index.len(), self.rows);
            Err(MemmapError::IndexRowCount { index: path.clone(), held, n }.into())
        });
        index.map_err(|e| match e {
            Error::Corrupted { path, key, detail } => IndexFailure { path, key, detail },
            other => {
                IndexFailure { path, key: None, detail: format!("cannot load the index: {other}") }
            }
        })
    }

    /// The index of a writer (loaded when it opened).
    fn writer_index(index: &mut OnceLock<IndexLoad>) -> &mut RowIndex {
        match index.get_mut() {
            Some(Ok(index)) => index,
            _ => unreachable!("a writer loads its index when it opens"),
        }
    }

    /// How the schema maps onto files and columns. (Which kind of cache this is, stowage's or
    /// DNANet's, is [`Reader::format`].)
    pub fn row_format(&self) -> &RowFormat {
        &self.format
    }

    /// The torn last line of an unfinished cache's manifest that was dropped, if any.
    pub fn dropped_manifest_tail(&self) -> Option<&TornLine> {
        match &self.recorded {
            Recorded::ByManifest { torn_tail, .. } => torn_tail.as_ref(),
            Recorded::ByFinalize => None,
        }
    }

    /// Which files record the cache's rows.
    pub(crate) fn recorded(&self) -> &Recorded {
        &self.recorded
    }

    /// The read-only maps of the tensor fields.
    pub(crate) fn files(&self) -> impl Iterator<Item = &FieldFile> {
        self.files.iter()
    }

    /// Whether reads go through a writer's open files instead of the maps.
    pub(crate) fn is_writing(&self) -> bool {
        self.session().is_some()
    }

    /// Every deduplicated JSON field: its position and sidecar.
    pub(crate) fn sidecars(&self) -> impl Iterator<Item = (usize, &Sidecar)> {
        self.sidecars.iter().enumerate().filter_map(|(j, s)| s.as_ref().map(|s| (j, s)))
    }

    fn session(&self) -> Option<&Session> {
        self.writer.as_ref().and_then(|w| w.session.as_ref())
    }

    pub(crate) fn session_mut(&mut self) -> Option<&mut Session> {
        self.writer.as_mut().and_then(|w| w.session.as_mut())
    }

    /// Replaces the map of the checksum file (after adopt wrote a new one).
    pub(crate) fn replace_checksum_map(&mut self, file: FieldFile) {
        self.checksums = Some(file);
    }

    /// Row `i` of the cache; negative `i` counts from the end (`-1` is the last row).
    ///
    /// Errors: [`Error::InvalidArgument`] naming `i` and the row count when out of range;
    /// [`Error::Corrupted`] naming the file when a `.bin` file or a sidecar is damaged.
    pub fn get_row(&self, i: i64) -> Result<Sample> {
        let row = resolve_row(i, self.len()).ok_or_else(|| MemmapError::RowOutOfRange {
            cache: self.layout.root().to_path_buf(),
            row: i,
            rows: self.len(),
            in_memory: false,
        })?;
        self.prefetch_row(row, self.options.verify_checksums);
        self.read_row_of(row, None, self.options.verify_checksums)
    }

    /// Starts loading what a verified read of `row` needs (its bytes in every field and its
    /// checksum row), so the loads overlap each other and the rest of the lookup. Unverified reads
    /// never touch the row's bytes (they share the map), so nothing is requested for them.
    fn prefetch_row(&self, row: usize, verify: bool) {
        if verify {
            self.files.iter().chain(&self.checksums).for_each(|f| f.prefetch_row(row));
        }
    }

    /// Adds the pages a read of `row` touches to `plan`: the row in every tensor field's map, and
    /// its checksum row when `verify` and the cache has checksums. Nothing for a writer, which
    /// reads its files with `pread`.
    fn plan_row<'a>(&'a self, row: usize, verify: bool, plan: &mut PagePlan<'a>) {
        if self.session().is_some() {
            return;
        }
        self.files.iter().for_each(|file| file.plan_row(row, plan));
        if let Some(checksums) = self.checksums.as_ref().filter(|_| verify && self.format.checksums)
        {
            checksums.plan_row(row, plan);
        }
    }

    /// Before a single read of `row`: when the advisor asks, the row's pages in every file are
    /// probed and, when missing, advised together, so a cold row's bytes and its checksum row are
    /// read at the same time instead of one fault after the other.
    fn advise_row(&self, row: usize, verify: bool) {
        if self.session().is_none() && self.advisor.get_wants_probe() {
            let mut plan = PagePlan::with_capacity(self.files.len() + 1);
            self.plan_row(row, verify, &mut plan);
            self.advisor.before_get(&mut plan);
        }
    }

    /// Reads row `row` (in range), checking its stored checksums, its key's included, when
    /// `verify` and the cache has them: for `validate` and the in-memory realization, which serve
    /// or vouch for the row under its key.
    pub(crate) fn read_row(&self, row: usize, verify: bool) -> Result<Sample> {
        let entry = self.entry(row)?;
        self.read_row_of(row, Some(&entry.path), verify)
    }

    /// Reads row `row` (in range) as found by `key` (`None`: by row number).
    ///
    /// A verified read by key checks the key's checksum, computed from the caller's string (equal
    /// to the stored path): the index must not hand out another key's row. A read by number
    /// returns no key, so it checks the row's values only (`validate` checks every key).
    pub(crate) fn read_row_of(
        &self,
        row: usize,
        key: Option<&str>,
        verify: bool,
    ) -> Result<Sample> {
        // The row's entry is one more cache miss: read only when the row needs it (a nullable
        // field's flag, a JSON field's text, the path for an error message).
        let cell: OnceCell<Cow<'_, RowEntry>> = OnceCell::new();
        let entry = || -> Result<&RowEntry> {
            if cell.get().is_none() {
                let _ = cell.set(self.entry(row)?);
            }
            Ok(cell.get().expect("set above"))
        };
        let verify = verify && self.format.checksums;
        let stored = match verify {
            false => None,
            true => {
                let key = match key {
                    Some(key) => key,
                    None => &entry()?.path,
                };
                match self.verdict(row, key)? {
                    Verdict::Verify(stored) => Some(stored),
                    // Another writer's row: served as read, as a DNANet cache's rows are.
                    Verdict::Unchecked => None,
                    Verdict::Missing => return Err(self.missing_checksum(row, &entry()?.path)),
                }
            }
        };
        let stored_sum = |k: usize| stored.as_deref().map(|s| checksum::nth(s, k));
        if let (Some(want), Some(key)) = (stored_sum(0), key)
            && want != checksum::of_key(key)
        {
            let file = self.layout.checksums();
            return Err(self.mismatch(file, row, key, "key".into(), want, checksum::of_key(key)));
        }
        let mut sample = Sample::new();
        for (position, slot) in self.format.slots.iter().enumerate() {
            let value = match *slot {
                FieldSlot::Tensor(t)
                    if self.format.tensors[t].has_column.is_some() && !entry()?.present[t] =>
                {
                    Value::Null
                }
                FieldSlot::Tensor(t) => Value::Tensor(self.read_tensor(t, row)?),
                FieldSlot::Json(j) => json_value(self.sidecars[j].as_ref(), &entry()?.json[j])?,
            };
            if let Some(want) = stored_sum(position + 1) {
                let actual = checksum::of_value(match &value {
                    Value::Tensor(t) => Some(t.bytes()),
                    Value::Json(text) => Some(text.as_bytes()),
                    _ => None,
                });
                if actual != want {
                    let name = &self.format.schema.fields[position].name;
                    let what = format!("field {name:?}");
                    let key = match key {
                        Some(key) => key,
                        None => &entry()?.path,
                    };
                    let file = self.field_path(*slot);
                    return Err(self.mismatch(file, row, key, what, want, actual));
                }
            }
            sample.insert(self.names[position].clone(), value);
        }
        Ok(sample)
    }

    fn read_tensor(&self, t: usize, row: usize) -> Result<Tensor> {
        let Some(session) = self.session() else { return self.files[t].read_row(row) };
        let layout = &self.format.tensors[t].layout;
        let bytes = session.bins[t].read_row(row)?;
        Tensor::new(layout.dtype, layout.shape.clone(), bytes).map_err(|e| {
            Error::corrupted(
                session.bins[t].path(),
                format!("row {row} of field {:?}: {e}", layout.name),
            )
        })
    }

    /// Who committed `row`, as far as the files record it.
    pub(crate) fn origin(&self, row: usize) -> Origin {
        match self.recorded {
            Recorded::ByManifest { .. } if coverage::contains(&self.foreign_lines, row) => {
                Origin::ForeignLine
            }
            Recorded::ByManifest { .. } => Origin::StowageLine,
            Recorded::ByFinalize if self.stowage_checksum_rows().is_some() => Origin::StowageIndex,
            Recorded::ByFinalize => Origin::OtherIndex,
        }
    }

    /// Rows the checksum file holds a row for: all of a writer's (its recovery aligned the file
    /// with the rows), the whole rows on disk at open for a reader.
    pub(crate) fn covered_rows(&self) -> usize {
        match (self.session(), &self.checksums) {
            (Some(_), _) => self.rows,
            (None, Some(file)) => file.rows(),
            (None, None) => 0,
        }
    }

    /// What stowage's checksums say about `row` (of key `key`) of a cache with checksums.
    pub(crate) fn verdict(&self, row: usize, key: &str) -> Result<Verdict<'_>> {
        let stored =
            if row < self.covered_rows() { Some(self.stored_checksums(row)?) } else { None };
        Ok(coverage::judge(self.origin(row), stored, key))
    }

    /// The error of a row stowage committed whose checksum row is gone.
    pub(crate) fn missing_checksum(&self, row: usize, key: &str) -> Error {
        let finalized_rows = (self.origin(row) == Origin::StowageIndex).then_some(self.rows);
        MemmapError::MissingChecksumRow {
            checksums: self.layout.checksums(),
            row,
            key: key.to_owned(),
            finalized_rows,
            covered: self.covered_rows(),
        }
        .into()
    }

    /// The stored checksum row of `row`: borrowed from the map, or read from a writer's file.
    pub(crate) fn stored_checksums(&self, row: usize) -> Result<Cow<'_, [u8]>> {
        Ok(match (self.session(), &self.checksums) {
            (Some(session), _) => {
                let file = session.checksums.as_ref().expect("checksummed format");
                Cow::Owned(file.read_row(row)?)
            }
            (None, Some(file)) => Cow::Borrowed(file.row_bytes(row)?),
            (None, None) => unreachable!("checksummed format has the file"),
        })
    }

    /// The file a field's value comes from, for error messages.
    fn field_path(&self, slot: FieldSlot) -> std::path::PathBuf {
        match slot {
            FieldSlot::Tensor(t) => self.layout.field_file(&self.format.tensors[t].layout.name),
            FieldSlot::Json(j) => match (&self.sidecars[j], &self.recorded) {
                (Some(sidecar), Recorded::ByFinalize) => sidecar.path().to_path_buf(),
                (_, Recorded::ByManifest { .. }) => self.layout.manifest(),
                (None, Recorded::ByFinalize) => self.layout.index(),
            },
        }
    }

    /// The error of a row whose `what` (its key, or a field) in `file` does not hash to its
    /// stored checksum.
    fn mismatch(
        &self,
        file: PathBuf,
        row: usize,
        key: &str,
        what: String,
        stored: u64,
        actual: u64,
    ) -> Error {
        let checksums = self.layout.checksums();
        let key = key.to_owned();
        MemmapError::ChecksumMismatch { file, checksums, row, key, what, stored, actual }.into()
    }

    /// The writer, refusing ([`WriteState::check_write`]) when this handle is read-only or
    /// poisoned.
    pub(crate) fn writer(&mut self, operation: &str) -> Result<&mut Writer> {
        self.write.check_write(operation)?;
        Ok(self.writer.as_mut().expect("a writable handle holds the writer"))
    }

    /// Passes `result` through, poisoning the handle when it is an error: after a failed write
    /// the files may no longer match what the handle holds.
    pub(crate) fn poison<T>(&mut self, result: Result<T>) -> Result<T> {
        self.write.poison_on_error(result)
    }

    /// Finalizes with `config` and `sources` recorded in `fingerprint.json` (DNANet's
    /// `{"cache_version": 5, "hash", "config", "sources"}`). [`Backend::finalize`] records an
    /// empty config (`{}`) and no sources, unless [`MemmapOptions::carry_fingerprint`] is set:
    /// callers that validate fingerprints use this method or [`MemmapBackend::finalize_carrying`].
    ///
    /// Order, each file written atomically: flush; the deduplicated sidecars (keys in first-seen
    /// order); `index.parquet` (recording that `stowage_checksums.bin` holds a row for each of its
    /// rows); `shapes.json`; `fingerprint.json`; remove `manifest.jsonl`; `_COMPLETE` last. A crash
    /// before the manifest is removed leaves a resumable cache; after it, a complete one (the next
    /// writer adds a missing `_COMPLETE`). Finalizing an empty cache is `Error::InvalidArgument`.
    pub fn finalize_with_fingerprint(
        &mut self,
        config: serde_json::Value,
        sources: Vec<SourceStamp>,
    ) -> Result<()> {
        let fingerprint = FingerprintFile::new(CACHE_VERSION as i64, config, sources);
        self.finalize_writing(fingerprint.to_python_json().as_bytes())
    }

    /// Finalizes like [`MemmapBackend::finalize_with_fingerprint`], with `fingerprint.json` a byte
    /// for byte copy of another cache's ([`CarriedFingerprint`]): for a cache converted from it,
    /// so that DNANet's `validate_fingerprint` accepts the copy whenever it accepts the source.
    ///
    /// ```
    /// use stowage_core::{Backend, DType, Sample, Schema, ShapeRule, Tensor};
    /// use stowage_memmap::{CarriedFingerprint, MemmapBackend, MemmapOptions};
    ///
    /// let (source, copy) = (tempfile::tempdir()?, tempfile::tempdir()?);
    /// let schema = Schema::new().tensor("x", DType::U8, ShapeRule::Fixed(vec![2]));
    /// let row = Sample::new().with("x", Tensor::from_slice(&[2], &[1u8, 2])?);
    /// let mut cache = MemmapBackend::create(source.path(), &schema, MemmapOptions::default())?;
    /// cache.put("a", &row)?;
    /// cache.finalize_with_fingerprint(serde_json::json!({"root": "/data"}), Vec::new())?;
    ///
    /// let carried = CarriedFingerprint::read(source.path())?.expect("a finalized cache has one");
    /// let mut converted = MemmapBackend::create(copy.path(), &schema, MemmapOptions::default())?;
    /// converted.put("a", &row)?;
    /// converted.finalize_carrying(&carried)?;
    /// let read = |dir: &std::path::Path| std::fs::read(dir.join("fingerprint.json"));
    /// assert_eq!(read(copy.path())?, read(source.path())?);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn finalize_carrying(&mut self, fingerprint: &CarriedFingerprint) -> Result<()> {
        self.finalize_writing(fingerprint.text())
    }

    /// Finalizes with `fingerprint` as the exact text of `fingerprint.json`.
    fn finalize_writing(&mut self, fingerprint: &[u8]) -> Result<()> {
        self.writer("finalize")?;
        if self.write.is_finalized() {
            return Ok(());
        }
        self.flush()?;
        if self.rows == 0 {
            let cache = self.layout.root().to_path_buf();
            return Err(MemmapError::FinalizeEmpty { cache }.into());
        }
        if let Some(tail) = &mut self.tail {
            // The commit removes every run: no merge may write one after that.
            tail.covered.finish_merge();
        }
        let stats = match self.commit(fingerprint) {
            // The rows themselves are wrong (a key stored twice, a damaged manifest line): found
            // while they stream, before any file a reader uses is published, so the handle
            // stays usable, as when the rows were loaded before the commit.
            Err(e @ Error::Corrupted { .. }) => return Err(e),
            result => self.poison(result)?,
        };
        self.finalize_stats = Some(stats);
        if let Some(Ok(index)) = self.index.get_mut()
            && self.format.checksums
        {
            index.mark_finalized_by_stowage();
        }
        self.recorded = Recorded::ByFinalize;
        self.tail = None;
        // Reads by key go through the key index just written (or index.parquet, loaded on
        // first need): the rows were never all in memory.
        self.key_index = KeyIndex::open(&self.layout, &self.format, self.rows);
        self.write.set_finalized(true);
        Ok(())
    }

    /// What this handle's finalize held and wrote (`None` before it finalized). For tests of
    /// finalize's bounded memory.
    ///
    /// ```
    /// use stowage_core::{Backend, DType, Sample, Schema, ShapeRule, Tensor};
    /// use stowage_memmap::{MemmapBackend, MemmapOptions};
    /// let dir = tempfile::tempdir()?;
    /// let schema = Schema::new().tensor("x", DType::U8, ShapeRule::Fixed(vec![1]));
    /// let mut cache = MemmapBackend::create(dir.path(), &schema, MemmapOptions::default())?;
    /// cache.put("a", &Sample::new().with("x", Tensor::from_slice(&[1], &[7u8])?))?;
    /// cache.finalize()?;
    /// let stats = cache.finalize_stats().expect("finalized by this handle");
    /// assert_eq!((stats.rows, stats.row_groups), (1, 1));
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    #[doc(hidden)]
    pub fn finalize_stats(&self) -> Option<FinalizeStats> {
        self.finalize_stats
    }

    /// Every row's entry in row order, handed to `each` one at a time, without holding them all:
    /// the row index when it is loaded (or, for a finalized cache, loading it), else (an
    /// unfinished cache) the manifest's committed lines up to this handle's rows, read one at a
    /// time, then the rows this writer has not committed yet.
    pub(crate) fn each_row(
        &self,
        each: &mut dyn FnMut(usize, &RowEntry) -> Result<()>,
    ) -> Result<()> {
        let tail = match (&self.tail, &self.recorded, self.index.get()) {
            (Some(tail), Recorded::ByManifest { .. }, None | Some(Err(_))) => tail,
            _ => {
                for (row, entry) in self.try_index()?.rows().iter().enumerate() {
                    each(row, entry)?;
                }
                return Ok(());
            }
        };
        let path = self.layout.manifest();
        let mut row = 0;
        let reader = std::io::BufReader::with_capacity(1 << 20, ReadFrom::new(&tail.manifest, 0));
        let mut lines = ManifestRows::new(reader, &path, &self.format);
        while row < self.rows {
            let Some(entry) = lines.next_entry()? else { break };
            each(row, &entry)?;
            row += 1;
        }
        let base = tail.covered.rows();
        if row < base {
            return Err(Error::corrupted(
                &path,
                format!("holds {row} rows, the key index covers {base}"),
            ));
        }
        for row in row..self.rows {
            let entry = tail.recent.row(row - base).ok_or_else(|| {
                Error::corrupted(&path, format!("row {row} is neither committed nor pending"))
            })?;
            each(row, entry)?;
        }
        Ok(())
    }

    /// After a flush: when the tail holds [`MemmapOptions::key_index_tail`] rows, turns it into a
    /// key index run (`tail_index`), so that the next open replays only the rows after it.
    fn write_tail_run(&mut self) -> Result<()> {
        let bound = self.options.key_index_tail.max(1);
        let Some(manifest_bytes) = self.session().map(|s| s.manifest.committed_len()) else {
            return Ok(());
        };
        let Some(tail) = self.tail.as_mut().filter(|t| t.recent.len() >= bound) else {
            return Ok(());
        };
        let hashes: Vec<u64> = tail
            .recent
            .rows()
            .iter()
            .map(|e| stowage_core::key_runs::key_hash(e.path.as_bytes()))
            .collect();
        tail.covered.write_run(&tail.locs, &hashes, manifest_bytes, &self.foreign_lines)?;
        tail.recent = RowIndex::from_entries(Vec::new(), Path::new(""))?;
        tail.locs = Vec::new();
        Ok(())
    }

    /// Writes finalize's files from the rows streamed once ([`MemmapBackend::each_row`]), then
    /// commits: the manifest removed, `_COMPLETE` written.
    fn commit(&self, fingerprint: &[u8]) -> Result<FinalizeStats> {
        let layout = &self.layout;
        let bounds = FinalizeBounds {
            row_group_rows: self.options.finalize_row_group_rows,
            run_rows: self.options.finalize_run_rows,
        };
        let source = match self.recorded {
            Recorded::ByManifest { .. } => layout.manifest(),
            Recorded::ByFinalize => layout.index(),
        };
        let stats = write_finalize_files(
            layout,
            &self.format,
            self.rows,
            &source,
            |each| self.each_row(each),
            fingerprint,
            bounds,
        )?;
        // The unfinished cache's key index: derived from the manifest, removed before it.
        crate::tail_index::remove_all(layout)?;
        std::fs::remove_file(layout.manifest()).at(layout.manifest())?;
        fsync_dir(layout.root())?;
        atomic_write(layout.complete_marker(), b"")?;
        Ok(stats)
    }
}

/// Deletes the temporaries a killed stowage writer left in the cache directory: the
/// `.<name>.tmp-<pid>-<n>` files of the core's `atomic_write` for every file stowage writes that
/// way (`stowage.json`, `stowage_checksums.bin` (adopt), the sidecars of `format`,
/// `index.parquet`, `shapes.json`, `fingerprint.json`, `_COMPLETE`). The caller holds the writer
/// lock, so no stowage writer is making one. DNANet writes its files in place, never under such
/// a name; no other name is touched.
fn remove_abandoned_temporaries(layout: &Layout, format: &RowFormat) -> Result<()> {
    let mut written: Vec<PathBuf> = vec![
        layout.stowage_meta(),
        layout.checksums(),
        layout.index(),
        layout.shapes(),
        layout.fingerprint(),
        layout.complete_marker(),
    ];
    for field in &format.json {
        if let JsonStorage::Deduplicated { sidecar, .. } = &field.storage {
            written.push(layout.file(sidecar));
        }
    }
    let names: Vec<&str> = written.iter().filter_map(|path| path.file_name()?.to_str()).collect();
    remove_abandoned_temps(layout.root(), |name| names.contains(&name))?;
    let key_index = crate::key_index::dir(layout);
    if key_index.is_dir() {
        remove_abandoned_temps(&key_index, |name| crate::key_index::FILE_NAMES.contains(&name))?;
        // The scratch runs of a finalize that did not finish.
        for entry in std::fs::read_dir(&key_index).at(&key_index)?.flatten() {
            if entry.file_name().to_str().is_some_and(crate::key_index::is_scratch) {
                let _ = std::fs::remove_file(entry.path());
            }
        }
    }
    Ok(())
}

/// Whether `layout` holds a cache of any kind, finalized or not, stowage's or DNANet's.
fn holds_cache(layout: &Layout) -> bool {
    [
        layout.stowage_meta(),
        layout.manifest(),
        layout.complete_marker(),
        layout.shapes(),
        layout.index(),
    ]
    .iter()
    .any(|p| p.exists())
}

fn not_a_cache(layout: &Layout) -> Error {
    MemmapError::NotACache { dir: layout.root().to_path_buf() }.into()
}

/// Row `i` of `n` rows, negative `i` counting from the end (`-1` is the last row); `None` when
/// out of range.
pub(crate) fn resolve_row(i: i64, n: usize) -> Option<usize> {
    let position = if i < 0 { i.checked_add(i64::try_from(n).ok()?) } else { Some(i) };
    position.and_then(|p| usize::try_from(p).ok()).filter(|&p| p < n)
}

/// The read-only field files of `format` holding `rows` rows, and the checksum file holding the
/// whole checksum rows it has, up to `rows` (none when it is missing).
fn field_files(
    layout: &Layout,
    format: &RowFormat,
    rows: usize,
) -> (Vec<FieldFile>, Option<FieldFile>) {
    let files = format
        .tensors
        .iter()
        .map(|t| FieldFile::new(layout.field_file(&t.layout.name), t.layout.clone(), rows))
        .collect();
    let checksums = format.checksums.then(|| {
        let layout_of_rows = format.checksum_layout();
        let on_disk = std::fs::metadata(layout.checksums()).map_or(0, |m| m.len());
        let whole = on_disk / layout_of_rows.row_bytes as u64;
        let covered = usize::try_from(whole).unwrap_or(usize::MAX).min(rows);
        FieldFile::new(layout.checksums(), layout_of_rows, covered)
    });
    (files, checksums)
}

/// Bytes of the checksum file beyond the `rows` rows `file` is sized for (`None`: not longer).
fn checksum_excess(file: &FieldFile) -> Result<Option<u64>> {
    let on_disk = std::fs::metadata(file.path()).map_or(0, |m| m.len());
    Ok(on_disk.checked_sub(file.expected_len()?).filter(|&extra| extra > 0))
}

fn json_value(sidecar: Option<&Sidecar>, reference: &JsonRef) -> Result<Value> {
    Ok(match (reference, sidecar) {
        (JsonRef::Null, _) => Value::Null,
        (JsonRef::Key(key), Some(sidecar)) => Value::Json(sidecar.lookup(*key)?.to_string()),
        (JsonRef::Key(_), None) => unreachable!("keys are only read for deduplicated fields"),
        (JsonRef::Inline(text), _) => Value::Json(text.to_string()),
    })
}

/// The error of a finalized cache's `file` that runs `extra` bytes past its rows.
pub(crate) fn trailing_error(file: &FieldFile, extra: u64) -> Error {
    MemmapError::TrailingBytes {
        file: file.path().to_path_buf(),
        expected: file.expected_len().unwrap_or(0),
        extra,
        rows: file.rows(),
        row_bytes: file.field().row_bytes,
    }
    .into()
}

impl Reader for MemmapBackend {
    fn name(&self) -> &'static str {
        BACKEND_NAME
    }

    /// [`STOWAGE_MEMMAP`] for a cache with `stowage.json` (and so with checksums:
    /// `RowFormat::checksums`), [`DNANET_MEMMAP`] for one DNANet wrote alone.
    fn format(&self) -> &'static Format {
        if self.format.checksums { &STOWAGE_MEMMAP } else { &DNANET_MEMMAP }
    }

    fn capabilities(&self) -> &Capabilities {
        &self.capabilities
    }

    fn schema(&self) -> &Schema {
        &self.format.schema
    }

    fn path(&self) -> &Path {
        self.layout.root()
    }

    fn get(&self, key: &str) -> Result<Option<Sample>> {
        let verify = self.options.verify_checksums;
        let prefetch = |row: usize| self.prefetch_row(row, verify);
        let Some(row) = self.find_row_advising(key, prefetch, Some(verify))? else {
            return Ok(None);
        };
        if !self.uses_key_index() {
            self.advise_row(row, verify);
        }
        self.read_row_of(row, Some(key), verify).map(Some).map_err(|e| e.for_key(key))
    }

    fn get_batch(&self, keys: &[&str]) -> Result<Vec<Option<Sample>>> {
        batch_by_visiting(self, keys)
    }

    /// Finds every key's row first, tells the kernel about the rows' pages when a sample of them
    /// is missing from the page cache ([`MemmapOptions::cold_read_advice`]), then reads and
    /// visits the rows in the keys' order: a cold batch keeps many reads in flight instead of
    /// faulting one page at a time.
    fn get_batch_each(&self, keys: &[&str], visit: &mut BatchVisitor<'_>) -> Result<()> {
        let verify = self.options.verify_checksums;
        let planning = match self.advisor.policy() {
            ColdReadAdvice::Always => true,
            ColdReadAdvice::Adaptive => self.advisor.is_cold(),
            ColdReadAdvice::Never => false,
        };
        if let KeyIndexState::Ready(index) = &self.key_index
            && self.session().is_none()
            && planning
        {
            // The run's slots of every key, then every candidate's record and row: two rounds
            // of reads in flight instead of two faults per key. Only while reads find pages
            // missing (the rows' sample below tells the advisor): a warm batch skips it.
            let mut plan = PagePlan::with_capacity(keys.len());
            for key in keys {
                if let Some((map, range)) = index.home_slot(key) {
                    let _ = plan.add(map, range);
                }
            }
            self.advisor.before_batch(&mut plan);
            let mut plan = PagePlan::with_capacity(keys.len() * (self.files.len() + 2));
            for key in keys {
                index.candidates(key, |row, record| {
                    let _ = plan.add(index.keys_map(), record);
                    self.plan_row(row, verify, &mut plan);
                });
            }
            self.advisor.before_batch(&mut plan);
        }
        let rows: Vec<Option<usize>> =
            keys.iter().map(|key| self.find_row(key, |_| {})).collect::<Result<_>>()?;
        if self.session().is_none() {
            let found: Vec<usize> = rows.iter().flatten().copied().collect();
            self.advisor
                .before_batch_rows(found.len(), |i, plan| self.plan_row(found[i], verify, plan));
        }
        for (at, (key, row)) in keys.iter().zip(rows).enumerate() {
            let sample = match row {
                None => None,
                Some(row) => {
                    self.prefetch_row(row, verify);
                    Some(self.read_row_of(row, Some(key), verify).map_err(|e| e.for_key(key))?)
                }
            };
            if visit(at, sample).is_break() {
                break;
            }
        }
        Ok(())
    }

    fn contains(&self, key: &str) -> Result<bool> {
        Ok(self.find_row(key, |_| {})?.is_some())
    }

    /// The row count, without loading the index: `n` of `shapes.json` for a finalized cache (a
    /// loaded index always holds `n` rows; one that does not fails to load), else the committed
    /// rows.
    fn len(&self) -> usize {
        self.rows
    }

    /// Through stowage's key index when it is in use (a sequential read of `keys.bin`), else the
    /// row index. A damaged record of the key index falls back to the row index.
    fn keys(&self) -> Result<Vec<String>> {
        if let KeyIndexState::Ready(index) = &self.key_index
            && let Ok(keys) = index.keys()
        {
            return Ok(keys);
        }
        // Every row once, without keeping their entries (an unfinished cache's are streamed).
        let mut keys = Vec::with_capacity(self.rows);
        self.each_row(&mut |_, entry| {
            keys.push(entry.path.to_string());
            Ok(())
        })?;
        Ok(keys)
    }

    fn is_finalized(&self) -> bool {
        self.write.is_finalized()
    }

    fn validate(&self, level: ValidationLevel) -> Result<ValidationReport> {
        Ok(crate::validate::validate(self, level))
    }

    /// The structure check once, then every selected row in runs of keys
    /// (`check_plan` module).
    fn check_plan(
        &self,
        selection: &stowage_core::check_plan::Selection,
    ) -> Result<stowage_core::check_plan::CheckPlan<'_>> {
        crate::check_plan::plan(self, selection)
    }

    /// DNANet's own inspection report, then stowage's view of it.
    fn describe(&self) -> Result<stowage_core::describe::Description> {
        Ok(crate::describe::describe(self))
    }
}

impl Backend for MemmapBackend {
    fn put(&mut self, key: &str, sample: &Sample) -> Result<()> {
        self.write.check_put(key, sample, &self.format.schema, &self.capabilities)?;
        if let Some(row) = self.find_row(key, |_| {})? {
            return Err(MemmapError::KeyExists { key: key.to_owned(), row }.into());
        }
        let row = self.rows;
        let MemmapBackend { format, writer, index, write, tail, .. } = self;
        let session = writer
            .as_mut()
            .and_then(|w| w.session.as_mut())
            .expect("a writer of an unfinalized cache has its files open");
        let mut present = vec![true; format.tensors.len()];
        let mut json = vec![JsonRef::Null; format.json.len()];
        // The checksum row, little-endian, built as the values are hashed.
        let mut sums = Vec::with_capacity(8 * format.checksums_per_row());
        sums.extend_from_slice(&checksum::of_key(key).to_le_bytes());
        // Rows go to their files as they are hashed; a failed append poisons the handle below.
        let mut appended = Ok(());
        for (field, slot) in format.schema.fields.iter().zip(&format.slots) {
            let value = sample.get(&field.name).unwrap_or(&Value::Null);
            match (*slot, value) {
                (FieldSlot::Tensor(t), Value::Tensor(tensor)) => {
                    sums.extend_from_slice(&checksum::of_value(Some(tensor.bytes())).to_le_bytes());
                    appended =
                        appended.and_then(|()| session.bins[t].append(tensor.to_shared_bytes()));
                }
                (FieldSlot::Tensor(t), _) => {
                    // Null: a zero placeholder row, flagged absent.
                    present[t] = false;
                    sums.extend_from_slice(&checksum::of_value(None).to_le_bytes());
                    let zeros = session.zero_row(t, format.tensors[t].layout.row_bytes);
                    appended = appended.and_then(|()| session.bins[t].append(zeros));
                }
                (FieldSlot::Json(j), Value::Json(text)) => {
                    sums.extend_from_slice(
                        &checksum::of_value(Some(text.as_bytes())).to_le_bytes(),
                    );
                    let text = match format.json[j].storage {
                        JsonStorage::Deduplicated { .. } => session.intern(j, text),
                        JsonStorage::Plain { .. } => Arc::from(text.as_str()),
                    };
                    json[j] = JsonRef::Inline(text);
                }
                (FieldSlot::Json(_), _) => {
                    sums.extend_from_slice(&checksum::of_value(None).to_le_bytes())
                }
            }
        }
        let entry = RowEntry { path: key.into(), present: present.into(), json: json.into() };
        if let Some(file) = session.checksums.as_mut() {
            appended = appended.and_then(|()| file.append(sums.into()));
        }
        if let Err(e) = appended {
            write.poison(&e);
            return Err(e);
        }
        let loc = session.manifest.push_with(|line| write_line(line, format, row, &entry));
        match (tail.as_mut(), index.get_mut()) {
            (Some(tail), Some(Ok(full))) => {
                full.push(entry.clone())?;
                tail.recent.push(entry)?;
                tail.locs.push(loc);
            }
            (Some(tail), _) => {
                tail.recent.push(entry)?;
                tail.locs.push(loc);
            }
            (None, _) => {
                Self::writer_index(index).push(entry)?;
            }
        }
        self.rows += 1;
        Ok(())
    }

    fn flush(&mut self) -> Result<()> {
        let writer = self.writer("flush")?;
        let Some(session) = writer.session.as_mut() else { return Ok(()) };
        let result = session.flush().and_then(|()| self.write_tail_run());
        self.poison(result)
    }

    fn finalize(&mut self) -> Result<()> {
        match self.options.carry_fingerprint.clone() {
            Some(carried) => self.finalize_carrying(&carried),
            None => self.finalize_with_fingerprint(
                serde_json::Value::Object(Default::default()),
                Vec::new(),
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::unit_fixtures::write_dnanet_cache;
    use stowage_core::{BackendExt, FieldKind, ShapeRule};

    fn open(dir: &Path) -> Result<MemmapBackend> {
        MemmapBackend::open_read_only(dir, MemmapOptions::default())
    }

    #[test]
    fn reads_rows_by_key_and_index() {
        let dir = tempfile::tempdir().unwrap();
        write_dnanet_cache(dir.path());
        let cache = open(dir.path()).unwrap();
        assert!(cache.is_finalized());
        assert_eq!(cache.len(), 3);
        assert_eq!(cache.keys().unwrap(), ["/r/a.hid", "/r/b.hid", "/r/c.hid"]);
        let row = cache.get("/r/c.hid").unwrap().unwrap();
        let data = row.tensor("data").unwrap();
        assert!(data.is_zero_copy());
        assert_eq!(data.to_vec::<i16>().unwrap(), (200..208).collect::<Vec<i16>>());
        assert_eq!(row.tensor("scaler").unwrap().to_vec::<f32>().unwrap()[1], 2.1);
        assert_eq!(row.get("panel"), Some(&Value::Null));
        assert_eq!(row.get("allele"), Some(&Value::Json("[\"a1\"]".into())));
        assert_eq!(cache.get_row(-1).unwrap(), row);
        assert_eq!(cache.get_row(2).unwrap(), row);
        cache.schema().validate(&row).unwrap();
        assert!(cache.get("/nope").unwrap().is_none());
        assert!(!cache.contains("/nope").unwrap() && cache.contains("/r/a.hid").unwrap());
    }

    #[test]
    fn unannotated_rows_read_as_null_not_zeros() {
        let dir = tempfile::tempdir().unwrap();
        write_dnanet_cache(dir.path());
        let cache = open(dir.path()).unwrap();
        let b = cache.get_row(1).unwrap();
        assert_eq!(b.get("annotation"), Some(&Value::Null));
        assert_eq!(b.get("allele"), Some(&Value::Null));
        assert_eq!(b.get("meta_json"), Some(&Value::Json(r#"{"id": "b"}"#.into())));
        cache.schema().validate(&b).unwrap();
    }

    #[test]
    fn out_of_range_rows_name_i_and_n() {
        let dir = tempfile::tempdir().unwrap();
        write_dnanet_cache(dir.path());
        let cache = open(dir.path()).unwrap();
        for i in [3, -4, i64::MIN, i64::MAX] {
            let err = cache.get_row(i).unwrap_err().to_string();
            assert!(err.contains(&format!("row {i} ")) && err.contains("3 rows"), "{err}");
        }
    }

    #[test]
    fn schema_is_dnanet() {
        let dir = tempfile::tempdir().unwrap();
        write_dnanet_cache(dir.path());
        let cache = open(dir.path()).unwrap();
        assert_eq!(cache.schema(), &crate::dnanet(2, 4));
        let ann = cache.schema().get("annotation").unwrap();
        assert!(ann.nullable);
        assert_eq!(
            ann.kind,
            FieldKind::Tensor { dtype: DType::I8, shape: ShapeRule::Fixed(vec![2, 4]) }
        );
    }

    #[test]
    fn writes_are_unsupported() {
        let dir = tempfile::tempdir().unwrap();
        write_dnanet_cache(dir.path());
        let mut cache = open(dir.path()).unwrap();
        let sample = cache.get_row(0).unwrap();
        for result in [cache.put("x", &sample), cache.flush(), cache.finalize()] {
            assert!(matches!(result, Err(Error::Unsupported { backend: BACKEND_NAME, .. })));
        }
        assert!(!cache.is_empty());
    }

    #[test]
    fn a_failed_finalize_poisons_the_handle() {
        let dir = tempfile::tempdir().unwrap();
        let schema = Schema::new().tensor("x", DType::U8, ShapeRule::Fixed(vec![2]));
        let row = Sample::new().with("x", Tensor::from_slice(&[2], &[1u8, 2]).unwrap());
        let mut cache =
            MemmapBackend::create(dir.path(), &schema, MemmapOptions::default()).unwrap();
        cache.put("a", &row).unwrap();
        // A non-empty directory where finalize renames index.parquet into place: the rename
        // fails (also for root, unlike a permission), after the sidecars may have been written.
        std::fs::create_dir_all(dir.path().join("index.parquet").join("in-the-way")).unwrap();
        let failure = cache.finalize().unwrap_err();
        assert!(!matches!(failure, Error::Poisoned { .. }), "{failure}");
        for result in [cache.put("b", &row), cache.flush(), cache.finalize()] {
            let Err(Error::Poisoned { path, cause }) = &result else { panic!("{result:?}") };
            assert_eq!(path, dir.path());
            assert_eq!(cause, &failure.to_string());
        }
        assert!(!cache.is_finalized());
        // What was flushed stays readable, and a new writer resumes from it.
        assert_eq!(cache.get("a").unwrap(), Some(row.clone()));
        std::fs::remove_dir_all(dir.path().join("index.parquet")).unwrap();
        drop(cache);
        let mut resumed = MemmapBackend::open_append(dir.path(), MemmapOptions::default()).unwrap();
        assert_eq!(resumed.keys().unwrap(), ["a"]);
        resumed.put("b", &row).unwrap();
        resumed.finalize().unwrap();
        assert!(resumed.is_finalized());
    }

    #[test]
    fn not_a_cache_is_not_found() {
        let dir = tempfile::tempdir().unwrap();
        assert!(matches!(open(dir.path()).err(), Some(Error::NotFound { .. })));
        assert!(matches!(open(&dir.path().join("x")).err(), Some(Error::NotFound { .. })));
    }

    #[test]
    fn trailing_bytes_are_refused_unless_allowed() {
        let dir = tempfile::tempdir().unwrap();
        write_dnanet_cache(dir.path());
        let mut scaler = std::fs::read(dir.path().join("scaler.bin")).unwrap();
        scaler.extend_from_slice(&[1, 2, 3]);
        std::fs::write(dir.path().join("scaler.bin"), scaler).unwrap();
        let err = open(dir.path()).err().unwrap().to_string();
        assert!(err.contains("scaler.bin") && err.contains("3 trailing bytes"), "{err}");
        let allowed = MemmapOptions { allow_trailing_bytes: true, ..MemmapOptions::default() };
        let cache = MemmapBackend::open_read_only(dir.path(), allowed).unwrap();
        assert_eq!(cache.get_row(-1).unwrap().tensor("scaler").unwrap().shape(), &[4]);
        let report = cache.validate(ValidationLevel::Structure).unwrap();
        assert_eq!(report.problems.len(), 1, "{:?}", report.problems);
        assert!(report.problems[0].detail.contains("trailing"));
    }

    #[test]
    fn validate_reports_missing_sidecar_keys() {
        let dir = tempfile::tempdir().unwrap();
        write_dnanet_cache(dir.path());
        let cache = open(dir.path()).unwrap();
        // Undamaged, but DNANet wrote no checksums: its rows are unchecked, never clean.
        let report = cache.validate(ValidationLevel::Full).unwrap();
        assert!(report.is_undamaged() && !report.is_clean(), "{report:?}");
        assert_eq!(report.unchecked[0].writer, "DNANet");
        std::fs::write(dir.path().join("alleles.json"), r#"{"0": "[]"}"#).unwrap();
        let cache = open(dir.path()).unwrap();
        let report = cache.validate(ValidationLevel::Full).unwrap();
        assert!(report.problems.iter().any(|p| p.key.as_deref() == Some("/r/c.hid")
            && p.path.as_deref() == Some(dir.path().join("alleles.json").as_path())));
        let err = cache.get("/r/c.hid").unwrap_err().to_string();
        assert!(err.contains("alleles.json") && err.contains("\"1\"") && err.contains("/r/c.hid"));
    }

    #[test]
    fn finalize_interrupted_before_complete_is_read_as_unfinished() {
        let dir = tempfile::tempdir().unwrap();
        write_dnanet_cache(dir.path());
        std::fs::remove_file(dir.path().join("_COMPLETE")).unwrap();
        let cache = open(dir.path()).unwrap();
        assert!(!cache.is_finalized());
        assert_eq!(cache.len(), 3);
    }
}
