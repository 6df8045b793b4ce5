//! `toy`: a small but correct reference backend that proves the conformance suite, with switchable
//! [`Defect`]s that each break one promise of the contract (and must be caught).
//!
//! # Files of a toy cache
//!
//! ```text
//! schema.json          the schema; written atomically and LAST by create: "a cache exists here"
//! keys.log             the key manifest, an AppendLog: one record b'k'+key per stored key (in order
//!                      of first put, appended only by flush), then one record b'F' after finalize
//! samples/<name>.smp   one sample per file, <name> = hex of the key bytes (see `file_name`):
//!                      "TOYSMP01" key nfields:u32 field* xxh64(everything before):u64, where
//!                      field = name kind:u8 body; tensor body = dtype-name rank:u32 dims:u64* data;
//!                      bytes/json body = data; null has no body; strings and data are len:u64 bytes
//! _COMPLETE            "<number of keys>\n", written atomically by finalize: the commit point
//! .stowage.lock        the WriterLock, held by create and open(Append); readers take no lock
//! ```
//!
//! `schema.json` with `keys.log` is how `recognize` knows a toy cache, after the shared stowage
//! markers (`stowage.json`, `stowage.log`), which decide first.
//!
//! # Why it is crash safe
//!
//! `put` only keeps the sample in memory. `flush` writes each pending sample to `<name>.smp.tmp`,
//! fsyncs it, renames it over `<name>.smp` (so an overwrite is atomic), fsyncs `samples/`, and only
//! THEN appends and syncs the manifest records of new keys: whatever the moment of a crash, every
//! recorded key has a complete sample file, and the manifest can only end in a torn record, which
//! readers ignore and the next writer cuts off. Unrecorded `.smp` and `.tmp` files are ignored.
//!
//! `finalize` flushes, writes `_COMPLETE`, then appends `F`. `_COMPLETE` without `F` is a finalize
//! cut short (accepted; the next writer appends `F`); `F` without `_COMPLETE` only happens when the
//! marker was deleted, and validate reports it. The count in `_COMPLETE` catches a lost manifest record.
//!
//! A failed flush or finalize poisons the handle (`WriteState`): every later write returns
//! `Error::Poisoned`.
//!
//! # Capabilities
//!
//! Everything except `append_after_finalize` (put after finalize is `Error::Finalized`) and
//! `zero_copy_get` (`get` decodes a copy of the file); no `max_rank` unless built with
//! [`ToyFactory::with_rank_limit`]. Keys longer than 100 bytes get a file name made of a hex
//! prefix and a 128-bit hash, because a file name holds at most 255 bytes; the key is stored in
//! the file too and `get` checks it, so a hash collision is an error, never wrong data.
//!
//! # Failing syncs
//!
//! Every sync of a flush or finalize first asks [`sync_point`], which fails like an `fsync`
//! returning `EIO` when [`ToyInjector`]'s variables arm it: a stand-in for the suite's built-in
//! `LD_PRELOAD` interposer, which the toy's own tests also run (its fsyncs are libc's), so that
//! the failed-flush case is proven with an injector of a harness's own as well.
//!
//! `create` also syncs the directory holding the cache, so that the cache's own name survives a
//! power cut (the power-loss cases rebuild the tree from what was synced).

// Each test crate uses a different part of the toy (the correct factory or one defect).
#![allow(dead_code)]

use std::collections::{HashMap, HashSet};
use std::ffi::OsString;
use std::fmt::Write as _;
use std::fs::{self, File};
use std::io::{self, Write as _};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, OnceLock, PoisonError};
use stowage_conformance::FaultInjector;
use stowage_core::bytes::Bytes;
use stowage_core::file_safety::{
    AppendLog, Damage, DamageKind, WriterLock, atomic_write, fsync_dir,
};
use stowage_core::recognize::{Marker, marker};
use stowage_core::{
    Backend, BackendFactory, BatchVisitor, Capabilities, DType, DynBackend, Error, FieldKind,
    Format, IoResultExt, OpenMode, Reader, Result, Sample, Schema, Tensor, ValidationLevel,
    ValidationReport, Value, WriteState,
};
use xxhash_rust::{xxh3::xxh3_128, xxh64::xxh64};

const NAME: &str = "toy";
/// The name a `Defect::WrongBackendName` toy puts in its errors.
const STALE_NAME: &str = "toy-v0";
/// The toy's one format.
pub const TOY: Format = Format {
    id: "toy",
    description: "toy conformance cache",
    signature: "schema.json and keys.log",
};
const SCHEMA_FILE: &str = "schema.json";
const MANIFEST_FILE: &str = "keys.log";
const COMPLETE_FILE: &str = "_COMPLETE";
const SAMPLES_DIR: &str = "samples";
const MAGIC: &[u8; 8] = b"TOYSMP01";
const KEY_RECORD: u8 = b'k';
const FINALIZE_RECORD: u8 = b'F';
const TAG_NULL: u8 = 0;
const TAG_TENSOR: u8 = 1;
const TAG_BYTES: u8 = 2;
const TAG_JSON: u8 = 3;
/// Longest hex file name used as is (a key of 100 bytes); see `file_name`.
const MAX_HEX_NAME: usize = 200;
/// The read cache is simply emptied when it reaches this many samples.
const READ_CACHE_ENTRIES: usize = 4096;
/// The declared `max_rank` of `Defect::UnenforcedRankLimit`.
const UNENFORCED_RANK_LIMIT: usize = 3;
/// The rank above which `Defect::HiddenRankLimit` refuses a schema.
const HIDDEN_RANK_LIMIT: usize = 4;

/// A deliberate bug; each must make one conformance case fail.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Defect {
    /// Flush writes sample files in place and rewrites the whole manifest in place (truncate,
    /// then one write and fsync per record): a crash inside flush loses flushed samples.
    InPlaceWrites,
    /// `put` does not invalidate the read cache, so `get` keeps returning an overwritten value.
    StaleReads,
    /// Writers never take the writer lock.
    IgnoresLock,
    /// `get` does not verify the checksum (validate still does).
    NoChecksumCheck,
    /// Declares `nullable: false` but creates caches with nullable fields anyway.
    UndeclaredCapability,
    /// Its `Error::Unsupported`s name `"toy-v0"`, not the factory's `"toy"` (a rename that
    /// missed the error path).
    WrongBackendName,
    /// An overwrite moves the key to the end of `keys()` (a re-append instead of a replace).
    OverwriteMovesKey,
    /// `validate` rewrites `_COMPLETE` with the same bytes ("refreshing" the commit point).
    ValidateTouches,
    /// A read-only handle declares `overwrite: false` (it cannot write, so it says it cannot
    /// overwrite): its capabilities differ from the factory's.
    ReadOnlyCapabilities,
    /// Declares `max_rank: Some(3)` but creates caches of any rank.
    UnenforcedRankLimit,
    /// Declares no `max_rank` but refuses schemas of rank above 4.
    HiddenRankLimit,
    /// `finalize` writes `_COMPLETE` before flushing the pending samples: a crash in between
    /// leaves a "complete" cache that lacks them.
    MarkerBeforeData,
    /// A failed flush does not poison the handle: it goes on taking writes.
    IgnoresFailedFlush,
    /// `flush` never fsyncs (it hands the sample files and the manifest to the OS and returns
    /// `Ok`): a kill loses nothing, a power cut loses acknowledged samples.
    FlushWithoutSync,
    /// Declares no `durable_flush` and fsyncs no sample file, but syncs the manifest: after a
    /// power cut the manifest names keys whose files are gone, and the cache no longer reads.
    UnsyncedFilesSyncedManifest,
    /// A failed fsync of a sample file is ignored: the flush goes on and returns `Ok` (the error
    /// a retried fsync would no longer report is lost).
    IgnoresFailedSync,
    /// `finalize` writes `_COMPLETE` in place and never syncs it nor its directory: after a
    /// power cut a finalize that returned `Ok` may have left no commit point.
    CommitPointNotSynced,
    /// `recognize` wants `_COMPLETE`: a flushed, unfinished cache is not recognized.
    RecognizesOnlyFinalized,
    /// `recognize` probes its own files before looking at the stowage markers.
    IgnoresStowageMarker,
    /// `get_batch` leaves out the keys that are missing instead of returning `None` for them.
    BatchSkipsMissing,
    /// `get_batch_each` goes on visiting after `visit` breaks.
    EachIgnoresBreak,
    /// `get_if_ready` calls a key missing when only the writer's unflushed puts hold it.
    ReadyForgetsPending,
}

/// Creates and opens toy caches, correct or with one [`Defect`].
#[derive(Debug, Clone, Copy, Default)]
pub struct ToyFactory {
    /// The bug to inject, if any.
    pub defect: Option<Defect>,
    /// A `max_rank` the toy declares and enforces.
    pub rank_limit: Option<usize>,
}

impl ToyFactory {
    /// The correct toy backend.
    pub fn correct() -> ToyFactory {
        ToyFactory { defect: None, rank_limit: None }
    }

    /// A toy backend with `defect`.
    pub fn with_defect(defect: Defect) -> ToyFactory {
        ToyFactory { defect: Some(defect), rank_limit: None }
    }

    /// The correct toy backend with a declared and enforced `max_rank` of `limit`.
    pub fn with_rank_limit(limit: usize) -> ToyFactory {
        ToyFactory { defect: None, rank_limit: Some(limit) }
    }

    fn has(&self, defect: Defect) -> bool {
        self.defect == Some(defect)
    }

    fn lock(&self, dir: &Path) -> Result<Option<WriterLock>> {
        if self.has(Defect::IgnoresLock) { Ok(None) } else { WriterLock::acquire(dir).map(Some) }
    }

    /// The backend name its errors carry.
    fn errors_name(&self) -> &'static str {
        if self.has(Defect::WrongBackendName) { STALE_NAME } else { NAME }
    }

    /// What the toy really does, before any defect changes what it declares.
    fn real_capabilities(&self) -> Capabilities {
        let mut caps = Capabilities::none();
        caps.variable_shapes = true;
        caps.ragged = true;
        caps.nullable = true;
        caps.bytes_fields = true;
        caps.json_fields = true;
        caps.overwrite = true;
        caps.resume = true;
        caps.durable_flush = !self.has(Defect::UnsyncedFilesSyncedManifest);
        caps.checksums = true;
        caps.concurrent_readers = true;
        caps.dtypes = DType::ALL.to_vec();
        caps.max_rank = self.rank_limit;
        caps
    }
}

impl BackendFactory for ToyFactory {
    fn name(&self) -> &'static str {
        NAME
    }

    fn capabilities(&self) -> Capabilities {
        let mut caps = self.real_capabilities();
        match self.defect {
            Some(Defect::UndeclaredCapability) => caps.nullable = false,
            Some(Defect::UnenforcedRankLimit) => caps.max_rank = Some(UNENFORCED_RANK_LIMIT),
            _ => {}
        }
        caps
    }

    fn formats(&self) -> &'static [Format] {
        std::slice::from_ref(&TOY)
    }

    fn recognize(&self, path: &Path) -> Result<Option<&'static Format>> {
        if !self.has(Defect::IgnoresStowageMarker) {
            match marker(path)? {
                Marker::StowageJson(format) | Marker::StowageLog(format) => {
                    return Ok((format == TOY.id).then_some(&TOY));
                }
                Marker::None => {}
            }
        }
        let mut files = vec![SCHEMA_FILE, MANIFEST_FILE];
        if self.has(Defect::RecognizesOnlyFinalized) {
            files.push(COMPLETE_FILE);
        }
        Ok(files.iter().all(|file| path.join(file).is_file()).then_some(&TOY))
    }

    fn create(&self, dir: &Path, schema: &Schema) -> Result<Box<DynBackend>> {
        // A correct backend refuses what it does not declare; these defects check what it can do.
        let enforced = match self.defect {
            Some(Defect::UndeclaredCapability | Defect::UnenforcedRankLimit) => {
                self.real_capabilities()
            }
            _ => self.capabilities(),
        };
        enforced.check_schema(schema, self.errors_name())?;
        if self.has(Defect::HiddenRankLimit) {
            for field in &schema.fields {
                if let FieldKind::Tensor { shape, .. } = &field.kind
                    && shape.rank().is_some_and(|rank| rank > HIDDEN_RANK_LIMIT)
                {
                    let what = format!("field {:?}: rank above {HIDDEN_RANK_LIMIT}", field.name);
                    return Err(Error::unsupported(self.errors_name(), what));
                }
            }
        }
        let schema_path = dir.join(SCHEMA_FILE);
        let exists = || Err(Error::AlreadyExists { path: dir.to_path_buf() });
        if schema_path.exists() {
            return exists();
        }
        fs::create_dir_all(dir).at(dir)?;
        // The cache's own name must survive a power cut too: sync the directory holding it.
        fsync_dir(dir.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new(".")))?;
        let lock = self.lock(dir)?;
        if schema_path.exists() {
            return exists(); // created by a writer that released the lock meanwhile
        }
        // Leftovers of a create that crashed before writing schema.json.
        for leftover in [MANIFEST_FILE, COMPLETE_FILE] {
            match fs::remove_file(dir.join(leftover)) {
                Err(e) if e.kind() != io::ErrorKind::NotFound => {
                    return Err(Error::io(dir.join(leftover), e));
                }
                _ => {}
            }
        }
        fs::create_dir_all(dir.join(SAMPLES_DIR)).at(dir.join(SAMPLES_DIR))?;
        AppendLog::open(dir.join(MANIFEST_FILE), true)?; // an empty manifest: just its header
        let text = serde_json::to_vec_pretty(schema).map_err(|e| Error::invalid(e.to_string()))?;
        atomic_write(&schema_path, &text)?; // also fsyncs the directory, making samples/ durable
        Ok(Box::new(self.open_locked(dir, OpenMode::Append, lock)?))
    }

    fn open(&self, dir: &Path, mode: OpenMode) -> Result<Box<DynBackend>> {
        let schema_path = dir.join(SCHEMA_FILE);
        if !schema_path.is_file() {
            let what = format!("toy cache in {} (no {SCHEMA_FILE})", dir.display());
            return Err(Error::NotFound { what });
        }
        let lock = if mode == OpenMode::Append { self.lock(dir)? } else { None };
        Ok(Box::new(self.open_locked(dir, mode, lock)?))
    }
}

impl ToyFactory {
    /// Opens the cache in `dir`, which exists; `lock` is held when `mode` is `Append`.
    fn open_locked(&self, dir: &Path, mode: OpenMode, lock: Option<WriterLock>) -> Result<Toy> {
        let schema_path = dir.join(SCHEMA_FILE);
        let text = fs::read(&schema_path).at(&schema_path)?;
        let schema: Schema = serde_json::from_slice(&text)
            .map_err(|e| Error::corrupted(&schema_path, format!("schema does not parse: {e}")))?;
        let manifest = Manifest::read(dir)?;
        let finalized = dir.join(COMPLETE_FILE).exists();
        let (log, state) = match mode {
            OpenMode::ReadOnly => (None, WriteState::read_only(self.errors_name(), dir, finalized)),
            OpenMode::Append => {
                let path = dir.join(MANIFEST_FILE);
                // A torn tail is what a crash leaves and is cut off; anything else is corruption
                // that AppendLog::open would "repair" by dropping records, so refuse to write.
                if let Some(damage) =
                    manifest.damage.as_ref().filter(|d| d.kind != DamageKind::TornTail)
                {
                    return Err(Error::corrupted(
                        &path,
                        format!("{damage}; not opening it for writing"),
                    ));
                }
                let (mut log, _) = AppendLog::open(&path, false)?;
                if finalized && !manifest.finalize_record {
                    log.append(&[FINALIZE_RECORD])?; // finish a finalize that was cut short
                    log.sync()?;
                }
                (Some(log), WriteState::writable(self.errors_name(), dir, finalized))
            }
        };
        let mut caps = self.capabilities();
        if mode == OpenMode::ReadOnly && self.has(Defect::ReadOnlyCapabilities) {
            caps.overwrite = false;
        }
        Ok(Toy {
            dir: dir.to_path_buf(),
            schema,
            caps,
            defect: self.defect,
            log,
            _lock: lock,
            known: manifest.keys.iter().cloned().collect(),
            recorded: manifest.keys.len(),
            keys: manifest.keys,
            pending: HashMap::new(),
            read_cache: Mutex::new(HashMap::new()),
            state,
        })
    }
}

/// Arms the toy's [`sync_point`]s in a child process: the variables say below which directory,
/// after how many successful syncs, and until which stop file appears, syncs fail.
#[derive(Debug, Clone, Copy, Default)]
pub struct ToyInjector;

const FAULT_DIR_ENV: &str = "TOY_FAIL_SYNCS_DIR";
const FAULT_AFTER_ENV: &str = "TOY_FAIL_SYNCS_AFTER";
const FAULT_STOP_ENV: &str = "TOY_FAIL_SYNCS_STOP";

impl FaultInjector for ToyInjector {
    fn name(&self) -> &str {
        "the toy's sync points"
    }

    fn fail_syncs(&self, dir: &Path, after: u64, stop: &Path) -> Vec<(OsString, OsString)> {
        vec![
            (FAULT_DIR_ENV.into(), dir.into()),
            (FAULT_AFTER_ENV.into(), after.to_string().into()),
            (FAULT_STOP_ENV.into(), stop.into()),
        ]
    }
}

/// Syncs of armed files so far in this process.
static SYNCS: AtomicU64 = AtomicU64::new(0);

/// Called before every sync of a flush or finalize: fails like an `fsync` returning `EIO` when
/// [`ToyInjector`]'s variables say so for `path` (sticky until the stop file exists).
fn sync_point(path: &Path) -> Result<()> {
    static ARMED: OnceLock<Option<(PathBuf, u64, PathBuf)>> = OnceLock::new();
    let armed = ARMED.get_or_init(|| {
        let dir = std::env::var_os(FAULT_DIR_ENV)?;
        let after = std::env::var(FAULT_AFTER_ENV).ok()?.parse().ok()?;
        let stop = std::env::var_os(FAULT_STOP_ENV)?;
        Some((dir.into(), after, stop.into()))
    });
    let Some((dir, after, stop)) = armed else { return Ok(()) };
    if !path.starts_with(dir) {
        return Ok(());
    }
    let n = SYNCS.fetch_add(1, Ordering::SeqCst);
    if n < *after || stop.exists() {
        return Ok(());
    }
    Err(Error::io(path, io::Error::from_raw_os_error(5)))
}

/// The key manifest as read from `keys.log`.
#[derive(Debug, Default)]
struct Manifest {
    /// Recorded keys in record order, each once.
    keys: Vec<String>,
    /// Whether the `F` record is present.
    finalize_record: bool,
    /// Where the log is damaged (records after it are not in `keys`).
    damage: Option<Damage>,
}

impl Manifest {
    fn read(dir: &Path) -> Result<Manifest> {
        let path = dir.join(MANIFEST_FILE);
        let recovered = AppendLog::read_all(&path).map_err(|e| match e {
            Error::NotFound { .. } => Error::corrupted(&path, "the key manifest is missing"),
            e => e,
        })?;
        let mut manifest = Manifest { damage: recovered.damage, ..Manifest::default() };
        let mut seen = HashSet::new();
        for (i, record) in recovered.records.iter().enumerate() {
            if record[..] == [FINALIZE_RECORD] {
                manifest.finalize_record = true;
                continue;
            }
            let key = record.strip_prefix(&[KEY_RECORD]).and_then(|k| std::str::from_utf8(k).ok());
            let key = key.ok_or_else(|| {
                let found = record.escape_ascii().to_string();
                Error::corrupted(&path, format!("record {i} is not a key record: {found:?}"))
            })?;
            if seen.insert(key) {
                manifest.keys.push(key.to_owned());
            }
        }
        Ok(manifest)
    }
}

fn key_record(key: &str) -> Vec<u8> {
    [&[KEY_RECORD], key.as_bytes()].concat()
}

/// `Some(count)` when `_COMPLETE` exists, its detail when it does not read as `"<count>\n"`.
fn read_complete(dir: &Path) -> Result<Option<std::result::Result<usize, String>>> {
    let path = dir.join(COMPLETE_FILE);
    let bytes = match fs::read(&path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(Error::io(&path, e)),
    };
    let count = std::str::from_utf8(&bytes).ok().and_then(|t| t.strip_suffix('\n')?.parse().ok());
    let text = bytes.escape_ascii().to_string();
    Ok(Some(count.ok_or_else(|| format!("{text:?} does not read as \"<key count>\\n\""))))
}

/// The file name of `key`: the hex of its bytes, or for keys over 100 bytes a hex prefix plus a
/// 128-bit hash of the whole key (file names hold at most 255 bytes).
fn file_name(key: &str) -> String {
    let mut hex = String::with_capacity(2 * key.len());
    for byte in key.bytes() {
        let _ = write!(hex, "{byte:02x}");
    }
    if hex.len() > MAX_HEX_NAME {
        hex.truncate(MAX_HEX_NAME - 40);
        let _ = write!(hex, "-{:032x}", xxh3_128(key.as_bytes()));
    }
    hex + ".smp"
}

/// An open toy cache: a writer (holding the lock and the manifest log) or a read-only handle.
pub struct Toy {
    dir: PathBuf,
    schema: Schema,
    caps: Capabilities,
    defect: Option<Defect>,
    /// The open manifest on a writer; `None` on a read-only handle.
    log: Option<AppendLog>,
    _lock: Option<WriterLock>,
    /// Every key in order of first put; the first `recorded` of them are in the manifest.
    keys: Vec<String>,
    known: HashSet<String>,
    recorded: usize,
    /// Samples put since the last flush (new keys and overwrites); `get` serves them at once.
    pending: HashMap<String, Sample>,
    /// Samples `get` read from disk. `put` must invalidate it (`Defect::StaleReads` forgets to).
    read_cache: Mutex<HashMap<String, Sample>>,
    /// Read-only or writable, finalized, poisoned by a failed flush or finalize.
    state: WriteState,
}

impl Toy {
    fn sample_path(&self, key: &str) -> PathBuf {
        self.dir.join(SAMPLES_DIR).join(file_name(key))
    }

    fn cache(&self) -> MutexGuard<'_, HashMap<String, Sample>> {
        self.read_cache.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Runs a write step; on failure the handle refuses every later write (unless
    /// `Defect::IgnoresFailedFlush`).
    fn write_step(&mut self, step: fn(&mut Toy) -> Result<()>) -> Result<()> {
        let result = step(self);
        if self.defect == Some(Defect::IgnoresFailedFlush) {
            return result;
        }
        self.state.poison_on_error(result)
    }

    /// Reads and decodes the sample file of `key`. The outer error is I/O; the inner one says
    /// what is wrong with the file's contents (missing, checksum, stored key).
    fn load(&self, key: &str, verify: bool) -> Result<std::result::Result<Sample, String>> {
        let path = self.sample_path(key);
        let bytes = match fs::read(&path) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                return Ok(Err(format!("key {key:?}: sample file missing")));
            }
            Err(e) => return Err(Error::io(&path, e)),
        };
        Ok(match decode(&bytes, verify) {
            Ok((stored, sample)) if stored == key => Ok(sample),
            Ok((stored, _)) => Err(format!("key {key:?}: the file holds key {stored:?}")),
            Err(detail) => Err(format!("key {key:?}: {detail}")),
        })
    }

    /// Temp file, fsync, rename for every pending sample; fsync the directory; then the manifest.
    fn flush_safely(&mut self) -> Result<()> {
        if self.pending.is_empty() {
            return Ok(()); // every new key has a pending sample, so nothing to record either
        }
        for (key, sample) in &self.pending {
            let path = self.sample_path(key);
            let temp = path.with_extension("smp.tmp");
            let mut file = File::create(&temp).at(&temp)?;
            file.write_all(&encode(key, sample)).at(&temp)?;
            sync_point(&temp)?;
            match self.defect {
                Some(Defect::FlushWithoutSync | Defect::UnsyncedFilesSyncedManifest) => {}
                Some(Defect::IgnoresFailedSync) => drop(file.sync_all()),
                _ => file.sync_all().at(&temp)?,
            }
            fs::rename(&temp, &path).at(&path)?;
        }
        let samples = self.dir.join(SAMPLES_DIR);
        let unsynced = self.defect == Some(Defect::FlushWithoutSync);
        sync_point(&samples)?;
        if !unsynced && self.defect != Some(Defect::UnsyncedFilesSyncedManifest) {
            fsync_dir(samples)?;
        }
        // Only now record the new keys: every recorded key has a complete, durable file.
        let log = self.log.as_mut().expect("checked writable");
        for key in &self.keys[self.recorded..] {
            log.append(&key_record(key))?;
        }
        sync_point(log.path())?;
        if unsynced {
            log.flush()?
        } else {
            log.sync()?
        }
        self.recorded = self.keys.len();
        self.pending.clear();
        Ok(())
    }

    /// `Defect::InPlaceWrites`: truncates the manifest and rewrites every record, one write and
    /// fsync each (a long window), then writes sample files in place. A kill in here leaves a
    /// manifest missing flushed keys, or naming keys whose files are absent or partial.
    fn flush_in_place(&mut self) -> Result<()> {
        let path = self.dir.join(MANIFEST_FILE);
        File::create(&path).at(&path)?; // truncates: every recorded key is gone until rewritten
        let (mut log, _) = AppendLog::open(&path, true)?;
        for key in &self.keys {
            log.append(&key_record(key))?;
            sync_point(&path)?;
            log.sync()?;
        }
        self.log = Some(log);
        for (key, sample) in &self.pending {
            let path = self.sample_path(key);
            fs::write(&path, encode(key, sample)).at(&path)?;
        }
        self.recorded = self.keys.len();
        self.pending.clear();
        Ok(())
    }

    /// Writes the commit point `_COMPLETE` (`Defect::CommitPointNotSynced`: in place, unsynced).
    fn write_complete(&self) -> Result<()> {
        let path = self.dir.join(COMPLETE_FILE);
        sync_point(&path)?;
        let text = format!("{}\n", self.keys.len());
        if self.defect == Some(Defect::CommitPointNotSynced) {
            return fs::write(&path, text).at(&path);
        }
        atomic_write(path, text.as_bytes())
    }

    /// Flush, then the commit point `_COMPLETE`, then the `F` record
    /// (`Defect::MarkerBeforeData`: the commit point first).
    fn finalize_now(&mut self) -> Result<()> {
        if self.defect == Some(Defect::MarkerBeforeData) {
            self.write_complete()?;
            self.flush_now()?;
        } else {
            self.flush_now()?;
            self.write_complete()?;
        }
        let log = self.log.as_mut().expect("checked writable");
        log.append(&[FINALIZE_RECORD])?;
        sync_point(log.path())?;
        log.sync()?;
        self.state.set_finalized(true);
        Ok(())
    }

    fn flush_now(&mut self) -> Result<()> {
        if self.defect == Some(Defect::InPlaceWrites) {
            self.flush_in_place()
        } else {
            self.flush_safely()
        }
    }
}

impl Reader for Toy {
    fn name(&self) -> &'static str {
        NAME
    }

    fn format(&self) -> &'static Format {
        &TOY
    }

    fn capabilities(&self) -> &Capabilities {
        &self.caps
    }

    fn schema(&self) -> &Schema {
        &self.schema
    }

    fn path(&self) -> &Path {
        &self.dir
    }

    fn get(&self, key: &str) -> Result<Option<Sample>> {
        if let Some(sample) = self.cache().get(key) {
            return Ok(Some(sample.clone()));
        }
        let sample = match self.pending.get(key) {
            Some(sample) => sample.clone(),
            None if self.known.contains(key) => {
                let verify = self.defect != Some(Defect::NoChecksumCheck);
                self.load(key, verify)?.map_err(|detail| {
                    Error::corrupted(self.sample_path(key), detail).for_key(key)
                })?
            }
            None => return Ok(None),
        };
        let mut cache = self.cache();
        if cache.len() >= READ_CACHE_ENTRIES {
            cache.clear();
        }
        cache.insert(key.to_owned(), sample.clone());
        Ok(Some(sample))
    }

    /// What the toy holds in memory answers at once (its read cache, the pending puts, and
    /// that a key it never stored is missing); a stored key not in memory needs a file read.
    fn get_if_ready(&self, key: &str) -> Option<Result<Option<Sample>>> {
        if self.defect == Some(Defect::ReadyForgetsPending) && self.pending.contains_key(key) {
            return Some(Ok(None));
        }
        if let Some(sample) = self.cache().get(key) {
            return Some(Ok(Some(sample.clone())));
        }
        match self.pending.get(key) {
            Some(sample) => Some(Ok(Some(sample.clone()))),
            None if !self.known.contains(key) => Some(Ok(None)),
            None => None,
        }
    }

    fn get_batch(&self, keys: &[&str]) -> Result<Vec<Option<Sample>>> {
        let all = keys.iter().map(|key| self.get(key));
        if self.defect == Some(Defect::BatchSkipsMissing) {
            return all.filter_map(|got| got.transpose()).map(|got| got.map(Some)).collect();
        }
        all.collect()
    }

    fn get_batch_each(&self, keys: &[&str], visit: &mut BatchVisitor<'_>) -> Result<()> {
        for (at, key) in keys.iter().enumerate() {
            let stop = visit(at, self.get(key)?).is_break();
            if stop && self.defect != Some(Defect::EachIgnoresBreak) {
                break;
            }
        }
        Ok(())
    }

    fn contains(&self, key: &str) -> Result<bool> {
        Ok(self.known.contains(key))
    }

    fn len(&self) -> usize {
        self.keys.len()
    }

    fn keys(&self) -> Result<Vec<String>> {
        Ok(self.keys.clone())
    }

    fn is_finalized(&self) -> bool {
        self.state.is_finalized()
    }

    /// Checks the files as they are on disk now (pending samples are not on disk yet).
    fn validate(&self, level: ValidationLevel) -> Result<ValidationReport> {
        let mut report = ValidationReport::default();
        let manifest_path = self.dir.join(MANIFEST_FILE);
        report.files_checked += 1;
        let manifest = match Manifest::read(&self.dir) {
            Ok(manifest) => manifest,
            Err(e) => {
                report.problem(Some(&manifest_path), None, e.to_string());
                return Ok(report);
            }
        };
        let complete = read_complete(&self.dir)?;
        let complete_path = self.dir.join(COMPLETE_FILE);
        if let Some(damage) = &manifest.damage {
            // A torn tail on an unfinished cache is what a crash during flush leaves: not a problem.
            if complete.is_some() || damage.kind != DamageKind::TornTail {
                report.problem(Some(&manifest_path), None, damage.to_string());
            }
        }
        match complete {
            None if manifest.finalize_record => {
                report.problem(
                    Some(&complete_path),
                    None,
                    "missing, but the manifest records a finalize",
                );
            }
            None => {}
            Some(Err(detail)) => report.problem(Some(&complete_path), None, detail),
            Some(Ok(count)) if count != manifest.keys.len() => {
                let detail =
                    format!("records {count} keys, the manifest lists {}", manifest.keys.len());
                report.problem(Some(&complete_path), None, detail);
            }
            Some(Ok(count)) if self.defect == Some(Defect::ValidateTouches) => {
                atomic_write(&complete_path, format!("{count}\n").as_bytes())?;
            }
            Some(Ok(_)) => {}
        }
        for key in &manifest.keys {
            let path = self.sample_path(key);
            report.files_checked += 1;
            let verdict = match level {
                ValidationLevel::Structure if path.is_file() => Ok(()),
                ValidationLevel::Structure => Err(format!("key {key:?}: sample file missing")),
                ValidationLevel::Full => {
                    report.samples_checked += 1;
                    self.load(key, true)?.map(drop)
                }
            };
            if let Err(detail) = verdict {
                report.problem(Some(&path), Some(key), detail);
            }
        }
        Ok(report)
    }
}

impl Backend for Toy {
    fn put(&mut self, key: &str, sample: &Sample) -> Result<()> {
        self.state.check_put(key, sample, &self.schema, &self.caps)?;
        if self.known.insert(key.to_owned()) {
            self.keys.push(key.to_owned());
        } else if self.defect == Some(Defect::OverwriteMovesKey) {
            let at = self.keys.iter().position(|k| k == key).expect("a known key is listed");
            let moved = self.keys.remove(at);
            self.keys.push(moved);
            if at < self.recorded {
                self.recorded -= 1; // recorded again at the end (the manifest keeps the first)
            }
        }
        self.pending.insert(key.to_owned(), sample.clone());
        if self.defect != Some(Defect::StaleReads) {
            self.cache().remove(key);
        }
        Ok(())
    }

    fn flush(&mut self) -> Result<()> {
        self.state.check_write("flush")?;
        self.write_step(Toy::flush_now)
    }

    fn finalize(&mut self) -> Result<()> {
        self.state.check_write("finalize")?;
        if self.state.is_finalized() {
            return Ok(());
        }
        self.write_step(Toy::finalize_now)
    }
}

fn put_bytes(out: &mut Vec<u8>, bytes: &[u8]) {
    out.extend_from_slice(&(bytes.len() as u64).to_le_bytes());
    out.extend_from_slice(bytes);
}

/// The sample file of `key`: see the module docs for the layout.
fn encode(key: &str, sample: &Sample) -> Vec<u8> {
    let mut out = MAGIC.to_vec();
    put_bytes(&mut out, key.as_bytes());
    out.extend_from_slice(&(sample.len() as u32).to_le_bytes());
    for (name, value) in sample.fields() {
        put_bytes(&mut out, name.as_bytes());
        match value {
            Value::Null => out.push(TAG_NULL),
            Value::Tensor(t) => {
                out.push(TAG_TENSOR);
                put_bytes(&mut out, t.dtype().name().as_bytes());
                out.extend_from_slice(&(t.shape().len() as u32).to_le_bytes());
                for &dim in t.shape() {
                    out.extend_from_slice(&(dim as u64).to_le_bytes());
                }
                put_bytes(&mut out, t.bytes());
            }
            Value::Bytes(bytes) => {
                out.push(TAG_BYTES);
                put_bytes(&mut out, bytes);
            }
            Value::Json(text) => {
                out.push(TAG_JSON);
                put_bytes(&mut out, text.as_bytes());
            }
        }
    }
    let checksum = xxh64(&out, 0);
    out.extend_from_slice(&checksum.to_le_bytes());
    out
}

/// Reads a sample file, verifying its checksum when `verify`. Never trusts a length: every read is
/// bounds-checked against the bytes left, so garbage gives an error, not a huge allocation.
fn decode(file: &[u8], verify: bool) -> std::result::Result<(String, Sample), String> {
    let Some((body, recorded)) = file.split_last_chunk::<8>() else {
        return Err(format!("{} bytes is too short for a sample file", file.len()));
    };
    let (recorded, actual) = (u64::from_le_bytes(*recorded), xxh64(body, 0));
    if verify && actual != recorded {
        let n = body.len();
        return Err(format!("checksum {actual:#018x} of {n} bytes != recorded {recorded:#018x}"));
    }
    let mut input = Input(body);
    if input.take(MAGIC.len(), "file header")? != MAGIC {
        return Err(format!("the file does not start with {:?}", MAGIC.escape_ascii().to_string()));
    }
    let key = input.text("key")?.to_owned();
    let mut sample = Sample::new();
    for _ in 0..input.u32("field count")? {
        let name = input.text("field name")?;
        let value = match input.take(1, "kind tag")?[0] {
            TAG_NULL => Value::Null,
            TAG_TENSOR => {
                let dtype = DType::from_name(input.text("dtype")?).map_err(|e| e.to_string())?;
                let rank = input.u32("rank")?;
                let shape = (0..rank).map(|_| Ok(input.u64("dimension")? as usize));
                let shape = shape.collect::<std::result::Result<Vec<usize>, String>>()?;
                let data = input.bytes("tensor data")?.to_vec();
                Value::Tensor(Tensor::new(dtype, shape, data).map_err(|e| e.to_string())?)
            }
            TAG_BYTES => Value::Bytes(Bytes::copy_from_slice(input.bytes("bytes field")?)),
            TAG_JSON => Value::Json(input.text("JSON text")?.to_owned()),
            tag => return Err(format!("field {name:?}: unknown kind tag {tag}")),
        };
        sample.insert(name, value);
    }
    if !input.0.is_empty() {
        return Err(format!("{} unexpected bytes after the last field", input.0.len()));
    }
    Ok((key, sample))
}

/// The not yet decoded rest of a sample file.
struct Input<'a>(&'a [u8]);

impl<'a> Input<'a> {
    fn take(&mut self, n: usize, what: &str) -> std::result::Result<&'a [u8], String> {
        if n > self.0.len() {
            return Err(format!("{what} needs {n} bytes, only {} left", self.0.len()));
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Ok(head)
    }

    fn u32(&mut self, what: &str) -> std::result::Result<u32, String> {
        Ok(u32::from_le_bytes(self.take(4, what)?.try_into().expect("4 bytes")))
    }

    fn u64(&mut self, what: &str) -> std::result::Result<u64, String> {
        Ok(u64::from_le_bytes(self.take(8, what)?.try_into().expect("8 bytes")))
    }

    fn bytes(&mut self, what: &str) -> std::result::Result<&'a [u8], String> {
        let len = usize::try_from(self.u64(what)?).map_err(|e| format!("{what}: {e}"))?;
        self.take(len, what)
    }

    fn text(&mut self, what: &str) -> std::result::Result<&'a str, String> {
        std::str::from_utf8(self.bytes(what)?).map_err(|e| format!("{what} is not UTF-8: {e}"))
    }
}
