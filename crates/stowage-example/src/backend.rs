//! `JournalBackend`: the cache over one append-only journal file, and its writer half, the
//! [`Backend`] trait (its reader half, [`stowage_core::Reader`], is in `reader.rs`).

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use stowage_core::file_safety::{AppendLog, WriterLock, atomic_write, fsync_dir};
use stowage_core::{
    Backend, Capabilities, DType, Error, OpenMode, Result, Sample, Schema, WriteState,
};

use crate::error::JournalError;
use crate::record::{self, Record};

/// The backend's name, in every `Error::Unsupported` it returns.
pub const BACKEND_NAME: &str = "example-journal";
/// The journal, in the cache directory: also what [`crate::JournalFactory`] recognizes it by.
pub(crate) const JOURNAL_FILE: &str = "journal.log";
/// Written by `finalize` with the journal's record count.
const COMPLETE: &str = "journal.complete";

/// What the journal backend can do: every dtype, shape and field kind, overwrites, resuming,
/// checksums and concurrent readers; not appending to a finalized cache, nor zero-copy reads
/// (samples are copies held in memory). Capabilities are opt-in: what is not switched on here
/// is refused, including anything the core adds later.
///
/// ```
/// assert!(!stowage_example::capabilities().zero_copy_get);
/// assert!(stowage_example::capabilities().resume);
/// ```
pub fn capabilities() -> Capabilities {
    let mut caps = Capabilities::none();
    caps.dtypes = DType::ALL.to_vec();
    caps.variable_shapes = true;
    caps.ragged = true;
    caps.nullable = true;
    caps.bytes_fields = true;
    caps.json_fields = true;
    caps.overwrite = true;
    caps.resume = true;
    caps.durable_flush = true;
    caps.checksums = true;
    caps.concurrent_readers = true;
    caps
}

/// `journal.complete`: the journal's record count when the cache was finalized, so a journal cut
/// short (which would drop the `finalized` record and read as an unfinished cache) is damage.
#[derive(Debug, Serialize, Deserialize)]
struct CompleteMarker {
    records: u64,
}

/// A cache in one append-only journal: every sample in memory, every write appended.
///
/// ```
/// use stowage_core::{Backend, DType, Reader, Schema, ShapeRule, Tensor, Sample};
/// let dir = tempfile::tempdir().unwrap();
/// let schema = Schema::new().tensor("x", DType::I32, ShapeRule::Any);
/// let mut cache = stowage_example::JournalBackend::create(dir.path(), &schema)?;
/// cache.put("k", &Sample::new().with("x", Tensor::scalar(5i32)))?;
/// cache.flush()?; // durable from here on
/// assert_eq!(cache.keys()?, ["k"]);
/// # Ok::<(), stowage_core::Error>(())
/// ```
#[derive(Debug)]
pub struct JournalBackend {
    pub(crate) dir: PathBuf,
    pub(crate) schema: Schema,
    pub(crate) capabilities: Capabilities,
    /// Every key once, in order of first put, with its latest sample.
    pub(crate) samples: Vec<(String, Sample)>,
    /// Position of each key in `samples`.
    pub(crate) index: HashMap<String, usize>,
    /// Read-only or writable, finalized, poisoned: the core's one copy of the put preamble.
    pub(crate) state: WriteState,
    /// `None` on a read-only handle.
    writer: Option<Writer>,
}

/// The writing half: the journal open for appending, the lock that makes it the only writer,
/// and the records put since the last flush.
#[derive(Debug)]
struct Writer {
    log: AppendLog,
    _lock: WriterLock,
    pending: Vec<Record>,
}

impl JournalBackend {
    /// Creates an empty cache of `schema` in `dir` (absent or empty), holding its writer lock.
    ///
    /// Errors: `Unsupported` for a schema outside [`capabilities`]; `AlreadyExists` when `dir`
    /// holds a cache; `Locked` when another writer holds its lock; `Io`.
    pub fn create(dir: impl AsRef<Path>, schema: &Schema) -> Result<JournalBackend> {
        let dir = dir.as_ref();
        let capabilities = capabilities();
        capabilities.check_schema(schema, BACKEND_NAME)?;
        let journal = dir.join(JOURNAL_FILE);
        if journal.exists() {
            return Err(JournalError::AlreadyExists { journal }.into());
        }
        std::fs::create_dir_all(dir).map_err(|e| Error::io(dir, e))?;
        let lock = WriterLock::acquire(dir)?;
        // In place only with its header: a crash during create leaves no cache, not a journal
        // that neither opens (no header) nor can be created over (it exists).
        let log = AppendLog::create_new(&journal, &record::header(schema).encode())?;
        // The cache directory's own name, which create_dir_all may just have made: without it a
        // power cut loses the whole cache, flushed samples included.
        let parent = dir.parent().filter(|p| !p.as_os_str().is_empty());
        fsync_dir(parent.unwrap_or(Path::new(".")))?;
        Ok(JournalBackend {
            dir: dir.to_path_buf(),
            schema: schema.clone(),
            capabilities,
            samples: Vec::new(),
            index: HashMap::new(),
            state: WriteState::writable(BACKEND_NAME, dir, false),
            writer: Some(Writer { log, _lock: lock, pending: Vec::new() }),
        })
    }

    /// Opens the cache in `dir`: read-only (no lock), or for writing (takes the lock and resumes
    /// an unfinished cache).
    ///
    /// Errors: `NotFound` when there is no journal; `Corrupted` naming the journal (and the key,
    /// when the damaged record names one) when a record is damaged before its end or does not
    /// decode, or the journal is shorter or longer than `journal.complete` says; `Incompatible`
    /// for another format version; `Locked`; `Io`.
    pub fn open(dir: impl AsRef<Path>, mode: OpenMode) -> Result<JournalBackend> {
        let dir = dir.as_ref();
        if !dir.join(JOURNAL_FILE).exists() {
            // Before taking the lock, which would create its file in a directory that may not
            // exist or hold no cache.
            return Err(JournalError::NotACache { dir: dir.to_path_buf() }.into());
        }
        let lock = match mode {
            OpenMode::ReadOnly => None,
            OpenMode::Append => Some(WriterLock::acquire(dir)?),
        };
        // Read under the lock, so a writer that let go just now has nothing more in flight.
        let mut cache = JournalBackend::load(dir)?;
        if let Some(lock) = lock {
            // Opening for appending cuts a torn tail (a crash mid-flush) before new records land.
            let (log, _) = AppendLog::open(dir.join(JOURNAL_FILE), false)?;
            let finalized = cache.state.is_finalized();
            if finalized && read_marker(dir)?.is_none() {
                // Finalize stopped between its record and the marker: finish it.
                write_marker(dir, log.len())?;
            }
            cache.state = WriteState::writable(BACKEND_NAME, dir, finalized);
            cache.writer = Some(Writer { log, _lock: lock, pending: Vec::new() });
        }
        Ok(cache)
    }

    /// Reads the journal into memory, as a read-only handle.
    pub(crate) fn load(dir: &Path) -> Result<JournalBackend> {
        let journal = dir.join(JOURNAL_FILE);
        // The marker before the journal: a writer finalizing meanwhile appends its record and
        // then writes the marker, so a marker read first describes a journal read after it,
        // while a journal read first may be older than a marker read after it.
        let marker = read_marker(dir)?;
        let recovered = AppendLog::read_all(&journal)?;
        if let Some(damage) = recovered.damage.as_ref().filter(|d| d.is_mid_log()) {
            let damage = damage.to_string();
            return Err(JournalError::Damaged { journal, damage }.into());
        }
        let decode = |(index, bytes): (usize, &Vec<u8>)| {
            Record::decode(bytes).map_err(|e| JournalError::BadRecord {
                journal: journal.clone(),
                index,
                key: e.key,
                detail: e.detail,
            })
        };
        let mut records = recovered.records.iter().enumerate().map(decode);
        let schema = match records.next().transpose()? {
            Some(Record::Header(header)) => {
                record::check_header(&header, &journal)?;
                header.schema
            }
            _ => return Err(JournalError::NoHeader { journal }.into()),
        };
        let mut cache = JournalBackend {
            dir: dir.to_path_buf(),
            schema,
            capabilities: capabilities(),
            samples: Vec::new(),
            index: HashMap::new(),
            state: WriteState::read_only(BACKEND_NAME, dir, false),
            writer: None,
        };
        for (index, record) in records.enumerate() {
            match record? {
                Record::Put(key, sample) => cache.apply(key, sample),
                Record::Finalized => cache.state.set_finalized(true),
                Record::Header(_) => {
                    return Err(JournalError::SecondHeader { journal, index: index + 1 }.into());
                }
            }
        }
        let found = recovered.records.len() as u64;
        if let Some(finalized) = marker
            && finalized != found
        {
            return Err(JournalError::RecordCount { journal, found, finalized }.into());
        }
        Ok(cache)
    }

    /// Makes `sample` the value of `key` in memory.
    fn apply(&mut self, key: String, sample: Sample) {
        match self.index.get(&key) {
            Some(&at) => self.samples[at].1 = sample,
            None => {
                self.index.insert(key.clone(), self.samples.len());
                self.samples.push((key, sample));
            }
        }
    }

    /// The writer of a handle that passed `WriteState::check_write`.
    fn writer(&mut self) -> &mut Writer {
        self.writer.as_mut().expect("a handle that may write has a writer")
    }

    /// Appends the pending records and makes them durable; a failure poisons the handle.
    fn commit_pending(&mut self) -> Result<()> {
        let writer = self.writer();
        let records = std::mem::take(&mut writer.pending);
        let result = records
            .iter()
            .try_for_each(|record| writer.log.append(&record.encode()))
            .and_then(|()| writer.log.sync());
        self.state.poison_on_error(result)
    }
}

/// Writes `journal.complete` in `dir` for a finalized journal of `records` records.
fn write_marker(dir: &Path, records: u64) -> Result<()> {
    let bytes = serde_json::to_vec(&CompleteMarker { records }).expect("a marker serializes");
    atomic_write(dir.join(COMPLETE), &bytes)
}

/// `journal.complete` in `dir`, when there is one.
pub(crate) fn read_marker(dir: &Path) -> Result<Option<u64>> {
    let marker = dir.join(COMPLETE);
    match std::fs::read(&marker) {
        Ok(bytes) => serde_json::from_slice::<CompleteMarker>(&bytes)
            .map(|m| Some(m.records))
            .map_err(|source| JournalError::BadMarker { marker, source }.into()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(Error::io(marker, e)),
    }
}

/// The path of `journal.complete` in `dir`, for reports.
pub(crate) fn marker_path(dir: &Path) -> PathBuf {
    dir.join(COMPLETE)
}

impl Backend for JournalBackend {
    fn put(&mut self, key: &str, sample: &Sample) -> Result<()> {
        // Read-only, poisoned, finalized, key, schema: the core's checks, in the core's order.
        self.state.check_put(key, sample, &self.schema, &self.capabilities)?;
        self.writer().pending.push(Record::Put(key.to_owned(), sample.clone()));
        self.apply(key.to_owned(), sample.clone());
        Ok(())
    }

    fn flush(&mut self) -> Result<()> {
        self.state.check_write("flush")?;
        self.commit_pending()
    }

    fn finalize(&mut self) -> Result<()> {
        self.state.check_write("finalize")?;
        if self.state.is_finalized() {
            return Ok(());
        }
        self.commit_pending()?;
        // Its own commit: the finalize record never reaches the disk before the samples do.
        self.writer().pending.push(Record::Finalized);
        self.commit_pending()?;
        // The finalize record is in: a put now would land after it, so a marker that cannot be
        // written poisons the handle too (the next writer writes it).
        let records = self.writer().log.len();
        let written = write_marker(&self.dir, records);
        self.state.poison_on_error(written)?;
        self.state.set_finalized(true);
        Ok(())
    }
}
