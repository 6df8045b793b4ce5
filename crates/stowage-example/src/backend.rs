//! `JournalBackend`: the [`Backend`] over one append-only journal file.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use stowage_core::file_safety::{AppendLog, WriterLock, atomic_write, fsync_dir};
use stowage_core::{
    Backend, Capabilities, Error, OpenMode, Result, Sample, Schema, ValidationLevel,
    ValidationReport,
};

use crate::record::{self, Record};

/// The backend's name, in every `Error::Unsupported` it returns.
pub const BACKEND_NAME: &str = "example-journal";
/// The journal, in the cache directory.
const JOURNAL: &str = "journal.log";
/// Written by `finalize` with the journal's record count.
const COMPLETE: &str = "journal.complete";

/// What the journal backend can do: everything the core models except appending to a finalized
/// cache and zero-copy reads (samples are copies held in memory).
///
/// ```
/// assert!(!stowage_example::capabilities().zero_copy_get);
/// ```
pub fn capabilities() -> Capabilities {
    Capabilities {
        append_after_finalize: false,
        zero_copy_get: false,
        max_rank: None,
        max_key_bytes: None,
        max_fields: None,
        ..Capabilities::everything()
    }
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
/// use stowage_core::{Backend, DType, Schema, ShapeRule, Tensor, Sample};
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
    dir: PathBuf,
    schema: Schema,
    capabilities: Capabilities,
    /// Every key once, in order of first put, with its latest sample.
    samples: Vec<(String, Sample)>,
    /// Position of each key in `samples`.
    index: HashMap<String, usize>,
    finalized: bool,
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
    /// Why writes are refused after a failed flush (what reached the disk is unknown).
    failed: Option<String>,
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
        let journal = dir.join(JOURNAL);
        if journal.exists() {
            return Err(Error::AlreadyExists { path: journal });
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
        let writer = Writer { log, _lock: lock, pending: Vec::new(), failed: None };
        Ok(JournalBackend {
            dir: dir.to_path_buf(),
            schema: schema.clone(),
            capabilities,
            samples: Vec::new(),
            index: HashMap::new(),
            finalized: false,
            writer: Some(writer),
        })
    }

    /// Opens the cache in `dir`: read-only (no lock), or for writing (takes the lock and resumes
    /// an unfinished cache).
    ///
    /// Errors: `NotFound` when there is no journal; `Corrupted` naming the journal when a record
    /// is damaged before its end or does not decode, or the journal is shorter or longer than
    /// `journal.complete` says; `Incompatible` for another format version; `Locked`; `Io`.
    pub fn open(dir: impl AsRef<Path>, mode: OpenMode) -> Result<JournalBackend> {
        let dir = dir.as_ref();
        if !dir.join(JOURNAL).exists() {
            // Before taking the lock, which would create its file in a directory that may not
            // exist or hold no cache.
            return Err(Error::NotFound { what: format!("journal cache in {}", dir.display()) });
        }
        let lock = match mode {
            OpenMode::ReadOnly => None,
            OpenMode::Append => Some(WriterLock::acquire(dir)?),
        };
        // Read under the lock, so a writer that let go just now has nothing more in flight.
        let mut cache = JournalBackend::load(dir)?;
        if let Some(lock) = lock {
            // Opening for appending cuts a torn tail (a crash mid-flush) before new records land.
            let (log, _) = AppendLog::open(dir.join(JOURNAL), false)?;
            if cache.finalized && read_marker(dir)?.is_none() {
                // Finalize stopped between its record and the marker: finish it.
                write_marker(dir, log.len())?;
            }
            cache.writer = Some(Writer { log, _lock: lock, pending: Vec::new(), failed: None });
        }
        Ok(cache)
    }

    /// Reads the journal into memory.
    fn load(dir: &Path) -> Result<JournalBackend> {
        let path = dir.join(JOURNAL);
        // The marker before the journal: a writer finalizing meanwhile appends its record and
        // then writes the marker, so a marker read first describes a journal read after it,
        // while a journal read first may be older than a marker read after it.
        let marker = read_marker(dir)?;
        let recovered = AppendLog::read_all(&path)?;
        if let Some(damage) = recovered.damage.as_ref().filter(|d| d.is_mid_log()) {
            return Err(Error::corrupted(&path, damage.to_string()));
        }
        let decode = |(i, bytes): (usize, &Vec<u8>)| {
            Record::decode(bytes)
                .map_err(|why| Error::corrupted(&path, format!("record {i}: {why}")))
        };
        let mut records = recovered.records.iter().enumerate().map(decode);
        let schema = match records.next().transpose()? {
            Some(Record::Header(header)) => {
                record::check_header(&header, &path)?;
                header.schema
            }
            _ => return Err(Error::corrupted(&path, "does not start with a header record")),
        };
        let mut cache = JournalBackend {
            dir: dir.to_path_buf(),
            schema,
            capabilities: capabilities(),
            samples: Vec::new(),
            index: HashMap::new(),
            finalized: false,
            writer: None,
        };
        for record in records {
            match record? {
                Record::Put(key, sample) => cache.apply(key, sample),
                Record::Finalized => cache.finalized = true,
                Record::Header(_) => return Err(Error::corrupted(&path, "a second header")),
            }
        }
        if let Some(marker) = marker
            && marker.records != recovered.records.len() as u64
        {
            return Err(Error::corrupted(
                &path,
                format!(
                    "holds {} records, {COMPLETE} says {} were there when the cache was finalized",
                    recovered.records.len(),
                    marker.records
                ),
            ));
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

    /// The writer, when this handle may write now.
    fn writer(&mut self, operation: &str) -> Result<&mut Writer> {
        let Some(writer) = self.writer.as_mut() else {
            return Err(Error::unsupported(
                BACKEND_NAME,
                format!("{operation} on a read-only handle"),
            ));
        };
        if let Some(why) = &writer.failed {
            return Err(Error::invalid(format!(
                "an earlier write to {} failed ({why}); reopen the cache to go on",
                self.dir.join(JOURNAL).display()
            )));
        }
        Ok(writer)
    }
}

/// Writes `journal.complete` in `dir` for a finalized journal of `records` records.
fn write_marker(dir: &Path, records: u64) -> Result<()> {
    let bytes = serde_json::to_vec(&CompleteMarker { records }).expect("a marker serializes");
    atomic_write(dir.join(COMPLETE), &bytes)
}

/// `journal.complete` in `dir`, when there is one.
fn read_marker(dir: &Path) -> Result<Option<CompleteMarker>> {
    let path = dir.join(COMPLETE);
    match std::fs::read(&path) {
        Ok(bytes) => serde_json::from_slice(&bytes)
            .map(Some)
            .map_err(|e| Error::corrupted(&path, format!("not a completion marker: {e}"))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(Error::io(path, e)),
    }
}

impl Writer {
    /// Appends `records` and makes them durable; a failure refuses every later write.
    fn commit(&mut self, records: &[Record]) -> Result<()> {
        let result = records
            .iter()
            .try_for_each(|record| self.log.append(&record.encode()))
            .and_then(|()| self.log.sync());
        if let Err(e) = &result {
            self.failed = Some(e.to_string());
        }
        result
    }
}

impl Backend for JournalBackend {
    fn name(&self) -> &'static str {
        BACKEND_NAME
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

    fn put(&mut self, key: &str, sample: &Sample) -> Result<()> {
        self.writer("put")?;
        if self.finalized {
            return Err(Error::Finalized { path: self.dir.clone() });
        }
        self.capabilities.check_key(key, BACKEND_NAME)?;
        self.schema.validate(sample)?;
        let record = Record::Put(key.to_owned(), sample.clone());
        self.writer("put")?.pending.push(record);
        self.apply(key.to_owned(), sample.clone());
        Ok(())
    }

    fn get(&self, key: &str) -> Result<Option<Sample>> {
        Ok(self.index.get(key).map(|&at| self.samples[at].1.clone()))
    }

    fn contains(&self, key: &str) -> Result<bool> {
        Ok(self.index.contains_key(key))
    }

    fn len(&self) -> usize {
        self.samples.len()
    }

    fn keys(&self) -> Result<Vec<String>> {
        Ok(self.samples.iter().map(|(key, _)| key.clone()).collect())
    }

    fn flush(&mut self) -> Result<()> {
        let writer = self.writer("flush")?;
        let pending = std::mem::take(&mut writer.pending);
        writer.commit(&pending)
    }

    fn finalize(&mut self) -> Result<()> {
        self.writer("finalize")?;
        if self.finalized {
            return Ok(());
        }
        self.flush()?;
        let dir = self.dir.clone();
        let writer = self.writer("finalize")?;
        writer.commit(&[Record::Finalized])?;
        // The finalize record is in: a put now would land after it, so a marker that cannot be
        // written refuses later writes too (the next writer writes it).
        if let Err(e) = write_marker(&dir, writer.log.len()) {
            writer.failed = Some(e.to_string());
            return Err(e);
        }
        self.finalized = true;
        Ok(())
    }

    fn is_finalized(&self) -> bool {
        self.finalized
    }

    fn validate(&self, level: ValidationLevel) -> Result<ValidationReport> {
        // Every record is checksummed by the journal: reading it back is the full check.
        let _ = level;
        let mut report = ValidationReport { files_checked: 1, ..ValidationReport::default() };
        match JournalBackend::load(&self.dir) {
            Ok(cache) => {
                report.samples_checked = cache.samples.len() as u64;
                if cache.finalized && read_marker(&self.dir)?.is_none() {
                    let detail = "missing, though the journal says the cache was finalized";
                    report.problem(Some(&self.dir.join(COMPLETE)), None, detail);
                }
            }
            Err(Error::Corrupted { path, detail }) => report.problem(Some(&path), None, detail),
            Err(e) => return Err(e),
        }
        Ok(report)
    }
}
