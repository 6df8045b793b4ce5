//! A checksummed append-only log of byte records, for manifests and journals.

use super::atomic::{fsync_dir, parent_dir};
use super::open_no_follow;
use crate::{Error, IoResultExt, Result};
use std::fmt;
use std::fs::{File, OpenOptions};
use std::io::{self, BufReader, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use xxhash_rust::xxh64::Xxh64;

/// Records are gathered here and handed to the OS in chunks of about this size.
const BUFFER_CAPACITY: usize = 64 * 1024;

/// At most this many bytes are hashed while looking for a valid record after a damaged one; the
/// search only decides how damage is *reported*, so it must never make opening slow.
const RESYNC_HASH_BUDGET: u64 = 64 << 20;

/// An open, writable append-only log of checksummed byte records.
///
/// # Format
///
/// ```text
/// file     = "STWLOG01" record*
/// record   = len: u32 LE | checksum: u64 LE | payload: len bytes
/// checksum = xxh64(seed 0) over the 4 length bytes followed by the payload
/// ```
///
/// The checksum covers the length so that a damaged length is detected instead of sending the
/// reader to a wrong record boundary. There is no end marker: the log ends where the last complete,
/// valid record ends, and whatever follows is a torn or damaged tail (see [`Damage`]).
///
/// One writer at a time: callers hold the cache's [`WriterLock`](super::WriterLock) while a log is
/// open for writing. Readers use [`AppendLog::read_all`], which never changes the file.
///
/// ```
/// use stowage_core::file_safety::AppendLog;
/// let dir = tempfile::tempdir()?;
/// let path = dir.path().join("journal.log");
///
/// let (mut log, _) = AppendLog::open(&path, true)?;
/// log.append(b"first")?;
/// log.append(b"second")?;
/// log.sync()?; // both records now survive kill -9 and power loss
/// drop(log);
///
/// let recovered = AppendLog::read_all(&path)?;
/// assert_eq!(recovered.records, vec![b"first".to_vec(), b"second".to_vec()]);
/// assert!(recovered.is_clean());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct AppendLog {
    file: File,
    path: PathBuf,
    /// Encoded records not yet handed to the OS.
    buf: Vec<u8>,
    /// Records in the log, including buffered ones.
    records: u64,
    /// Byte length of the log, including buffered records.
    end: u64,
    /// Set by a failed write or sync: the file may now end in a partial record (or, after a failed
    /// fsync, in pages the kernel has already given up on), so appending more would be unsafe.
    poisoned: bool,
}

/// What a scan of a log found: its good records and, if any, where and how it is damaged.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Recovered {
    /// Every record before the first damaged one, in append order.
    pub records: Vec<Vec<u8>>,
    /// Bytes of the file that hold the header and the good records: where the next record goes.
    /// 0 for an empty file or one whose header was never completely written.
    pub valid_len: u64,
    /// Bytes after `valid_len`: the torn or damaged tail that [`AppendLog::open`] cuts off.
    pub dropped_tail_bytes: u64,
    /// The first damaged record, if any; `None` when the file ended cleanly.
    pub damage: Option<Damage>,
}

impl Recovered {
    /// Whether the log ended cleanly after its last record (nothing dropped).
    pub fn is_clean(&self) -> bool {
        self.damage.is_none()
    }
}

/// The first damaged record of a log.
///
/// Everything from here to the end of the file is treated as tail and dropped, *including* valid
/// records after a damaged one ([`DamageKind::MidLog`]): a log is only trustworthy as an unbroken
/// chain, and a record after a hole may depend on the lost one. `MidLog` is reported separately so
/// that validation can flag real corruption instead of an ordinary interrupted append.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Damage {
    /// Byte offset of the damaged record in the file.
    pub offset: u64,
    /// Index of the damaged record (the number of good records before it).
    pub record_index: u64,
    /// What the damage looks like.
    pub kind: DamageKind,
    /// What is wrong, with both sides of any mismatch.
    pub detail: String,
}

impl Damage {
    /// Whether valid records follow the damaged one: corruption, not an interrupted append.
    pub fn is_mid_log(&self) -> bool {
        matches!(self.kind, DamageKind::MidLog { .. })
    }
}

impl fmt::Display for Damage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let what = match self.kind {
            DamageKind::TornTail => "torn tail (an append interrupted by a crash)".to_owned(),
            DamageKind::CorruptTail => "corrupt last record".to_owned(),
            DamageKind::MidLog { next_valid_offset } => format!(
                "corruption in the middle of the log (a valid record follows at byte offset {next_valid_offset})"
            ),
        };
        write!(
            f,
            "{what} at record {} (byte offset {}): {}",
            self.record_index, self.offset, self.detail
        )
    }
}

/// How a log is damaged.
///
/// The classification is for reporting only; recovery is the same in every case (everything from
/// the damaged record on is dropped). `MidLog` is detected by searching the bytes after the damaged
/// record for any complete record with a valid checksum; the search is bounded, so a huge damaged
/// region may be reported as `TornTail` or `CorruptTail` instead.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DamageKind {
    /// The last record is incomplete (short header or short payload) and nothing valid follows:
    /// what a crash during an append leaves. Expected, not corruption.
    TornTail,
    /// The last record is complete but fails its checksum or has an absurd length, and nothing
    /// valid follows: what a power loss can leave (unwritten blocks read back as zeros or garbage),
    /// or corruption of the last record.
    CorruptTail,
    /// A damaged record is followed by at least one valid record: corruption in the middle of the
    /// log. The valid records after it are dropped as well.
    MidLog {
        /// Offset of the first valid record found after the damaged one.
        next_valid_offset: u64,
    },
}

impl AppendLog {
    /// The file header: format name and version.
    pub const MAGIC: [u8; 8] = *b"STWLOG01";

    /// Bytes before each payload: the `u32` length and the `u64` checksum.
    pub const RECORD_HEADER_LEN: usize = 12;

    /// The largest payload a record may hold (256 MiB). A larger length in a record header is
    /// treated as damage, so a garbled length cannot make a reader allocate gigabytes.
    pub const MAX_RECORD_LEN: usize = 256 << 20;

    /// Opens the log at `path` for appending, recovering it first.
    ///
    /// Scans every record and stops at the first damaged one (see [`Damage`]). If there is one, the
    /// file is truncated there and the truncation fsynced, so that new records follow the last good
    /// one and a later scan does not stop at the old damage. This drops valid records after a
    /// damaged middle record too; callers that want to inspect such a log before changing it call
    /// [`AppendLog::read_all`] first. The returned [`Recovered`] describes the file as found.
    ///
    /// A missing file is created when `create` is true. An empty file, or one whose header was cut
    /// short by a crash during creation, gets its header (re)written either way.
    ///
    /// # Errors
    /// - [`Error::NotFound`] when the file is missing and `create` is false.
    /// - [`Error::Corrupted`] when the file does not start with the log header;
    ///   [`Error::Incompatible`] when it is a log of another format version. The file is not
    ///   changed in either case.
    /// - [`Error::Io`] naming the file; a symbolic link at `path` is refused, never followed
    ///   ([`is_refused_symlink`](super::is_refused_symlink)), and stays as it was.
    pub fn open(path: impl AsRef<Path>, create: bool) -> Result<(AppendLog, Recovered)> {
        Self::open_inner(path.as_ref(), create, 0, 0)
    }

    /// Opens the existing log at `path` for appending, trusting its first `offset` bytes, which
    /// hold `records_before` records: recovery scans only from `offset` on (the rules of
    /// [`AppendLog::open`] apply there), so a writer that knows the log up to `offset` (from an
    /// index that vouches for it) resumes in time independent of the log's size. The returned
    /// [`Recovered`] describes the records from `offset` on, as [`AppendLog::read_from`] does.
    ///
    /// ```
    /// use stowage_core::file_safety::AppendLog;
    /// let dir = tempfile::tempdir()?;
    /// let path = dir.path().join("journal.log");
    /// let (mut log, _) = AppendLog::open(&path, true)?;
    /// log.append(b"first")?;
    /// let (known, records) = (log.byte_len(), log.len());
    /// log.append(b"second")?;
    /// log.sync()?;
    /// drop(log);
    ///
    /// let (mut log, tail) = AppendLog::open_after(&path, known, records)?;
    /// assert_eq!((tail.records, log.len()), (vec![b"second".to_vec()], 2));
    /// log.append(b"third")?;
    /// log.sync()?;
    /// assert_eq!(AppendLog::read_all(&path)?.records.len(), 3);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    /// As [`AppendLog::open`] with `create` false and [`AppendLog::read_from`].
    pub fn open_after(
        path: impl AsRef<Path>,
        offset: u64,
        records_before: u64,
    ) -> Result<(AppendLog, Recovered)> {
        let path = path.as_ref();
        if offset <= Self::MAGIC.len() as u64 {
            return Self::open_inner(path, false, 0, 0);
        }
        Self::open_inner(path, false, offset, records_before)
    }

    fn open_inner(
        path: &Path,
        create: bool,
        offset: u64,
        records_before: u64,
    ) -> Result<(AppendLog, Recovered)> {
        // No link followed: recovery truncates, and appends follow.
        let mut file = match open_no_follow(
            OpenOptions::new().read(true).write(true).create(create).truncate(false),
            path,
        ) {
            Ok(file) => file,
            Err(err) if err.kind() == io::ErrorKind::NotFound && !create => {
                return Err(Error::NotFound { what: format!("append log {}", path.display()) });
            }
            Err(err) => return Err(Error::io(path, err)),
        };
        let recovered = scan_from(&file, path, offset)?;

        let end = if recovered.valid_len == 0 {
            // New, empty, or a creation cut short: start over with a complete header. The
            // directory fsync makes the file's name durable along with its header.
            file.set_len(0).at(path)?;
            file.seek(SeekFrom::Start(0)).at(path)?;
            file.write_all(&Self::MAGIC).at(path)?;
            file.sync_all().at(path)?;
            fsync_dir(parent_dir(path))?;
            Self::MAGIC.len() as u64
        } else {
            if recovered.dropped_tail_bytes > 0 {
                // The cut must be durable before new records land after it, or a crash could
                // resurrect the old tail in front of them.
                file.set_len(recovered.valid_len).at(path)?;
                file.sync_all().at(path)?;
            }
            recovered.valid_len
        };
        file.seek(SeekFrom::Start(end)).at(path)?;

        let log = AppendLog {
            file,
            path: path.to_path_buf(),
            buf: Vec::with_capacity(BUFFER_CAPACITY),
            records: records_before + recovered.records.len() as u64,
            end,
            poisoned: false,
        };
        Ok((log, recovered))
    }

    /// Creates a new log at `path` whose first record is `first` (a cache's header), so that no
    /// crash leaves a log without it: the log is built under a temporary name beside `path`,
    /// synced, renamed into place, and its directory fsynced. A crash leaves either no log at
    /// `path` or one holding `first`; an earlier crash's temporary file is replaced.
    ///
    /// The caller holds the cache's writer lock and has checked that `path` does not exist (a
    /// log there would be replaced).
    ///
    /// # Errors
    /// [`Error::Io`] naming the file; as [`AppendLog::append`] for a too large record.
    pub fn create_new(path: impl AsRef<Path>, first: &[u8]) -> Result<AppendLog> {
        let path = path.as_ref();
        let name = path.file_name().ok_or_else(|| {
            Error::invalid(format!("an append log needs a file path, got {}", path.display()))
        })?;
        let mut staging_name = std::ffi::OsString::from(".");
        staging_name.push(name);
        staging_name.push(".new");
        let staging = path.with_file_name(staging_name);
        match std::fs::remove_file(&staging) {
            Err(err) if err.kind() != io::ErrorKind::NotFound => {
                return Err(Error::io(staging, err));
            }
            _ => {}
        }
        let (mut log, _) = AppendLog::open(&staging, true)?;
        log.append(first)?;
        log.sync()?;
        std::fs::rename(&staging, path).at(path)?;
        log.path = path.to_path_buf();
        fsync_dir(parent_dir(path))?;
        Ok(log)
    }

    /// Reads every good record of the log at `path` without changing the file.
    ///
    /// For read-only openers and validators. A torn tail is reported in [`Recovered::damage`] but
    /// left in place (a writer may be in the middle of appending it). An empty file, or one with a
    /// partial header, reads as a log without records.
    ///
    /// # Errors
    /// As [`AppendLog::open`] with `create` false.
    pub fn read_all(path: impl AsRef<Path>) -> Result<Recovered> {
        let path = path.as_ref();
        let file = match File::open(path) {
            Ok(file) => file,
            Err(err) if err.kind() == io::ErrorKind::NotFound => {
                return Err(Error::NotFound { what: format!("append log {}", path.display()) });
            }
            Err(err) => return Err(Error::io(path, err)),
        };
        scan(&file, path)
    }

    /// Reads the good records of the log at `path` from the record that starts at byte offset
    /// `offset` on, without changing the file: what a reader that already knows the log up to
    /// `offset` (from an index that covers it) replays.
    ///
    /// The same rules as [`AppendLog::read_all`] apply from `offset` on: the scan stops at the
    /// first damaged record, a torn tail is reported and left in place, and damage followed by a
    /// valid record is [`DamageKind::MidLog`]. In the returned [`Recovered`], `records` are the
    /// records from `offset`, [`Damage::record_index`] counts the good records from `offset`, and
    /// byte offsets (`valid_len`, [`Damage::offset`]) are from the start of the file. An `offset`
    /// of 0 or of the header's length reads every record.
    ///
    /// `offset` must be where a record starts (the end of an earlier one); any other offset reads
    /// as a damaged record there (its length and checksum do not match).
    ///
    /// ```
    /// use stowage_core::file_safety::AppendLog;
    /// let dir = tempfile::tempdir()?;
    /// let path = dir.path().join("journal.log");
    /// let (mut log, _) = AppendLog::open(&path, true)?;
    /// log.append(b"first")?;
    /// let second_at = log.byte_len();
    /// log.append(b"second")?;
    /// log.sync()?;
    ///
    /// let tail = AppendLog::read_from(&path, second_at)?;
    /// assert_eq!(tail.records, vec![b"second".to_vec()]);
    /// assert_eq!(tail.valid_len, log.byte_len());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    /// As [`AppendLog::read_all`]; [`Error::Corrupted`] naming the file when `offset` is beyond
    /// its end (the log is shorter than the caller knew it), and [`Error::InvalidArgument`] for
    /// an offset inside the file header.
    pub fn read_from(path: impl AsRef<Path>, offset: u64) -> Result<Recovered> {
        let path = path.as_ref();
        if offset > 0 && offset < Self::MAGIC.len() as u64 {
            return Err(Error::invalid(format!(
                "byte offset {offset} of append log {} is inside its {}-byte header",
                path.display(),
                Self::MAGIC.len()
            )));
        }
        let file = match File::open(path) {
            Ok(file) => file,
            Err(err) if err.kind() == io::ErrorKind::NotFound => {
                return Err(Error::NotFound { what: format!("append log {}", path.display()) });
            }
            Err(err) => return Err(Error::io(path, err)),
        };
        scan_from(&file, path, offset)
    }

    /// The record that starts at byte offset `offset` of `log`, the bytes of a whole log file (a
    /// read-only map of it, for a reader that locates records by offset): `(payload, checksum,
    /// end)`, the checksum as stored (it identifies the record) and the offset just after it, or
    /// `None` unless a complete record with a valid checksum starts there. Checks only that
    /// record, so it is cheap at any log size.
    ///
    /// ```
    /// use stowage_core::file_safety::AppendLog;
    /// let dir = tempfile::tempdir()?;
    /// let path = dir.path().join("journal.log");
    /// let (mut log, _) = AppendLog::open(&path, true)?;
    /// let at = log.byte_len();
    /// log.append(b"payload")?;
    /// log.sync()?;
    /// let bytes = std::fs::read(&path)?;
    /// let (payload, _checksum, end) = AppendLog::record_at(&bytes, at).unwrap();
    /// assert_eq!((payload, end), (&b"payload"[..], log.byte_len()));
    /// assert!(AppendLog::record_at(&bytes, at + 1).is_none());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn record_at(log: &[u8], offset: u64) -> Option<(&[u8], u64, u64)> {
        let start = usize::try_from(offset).ok().filter(|&s| s >= Self::MAGIC.len())?;
        let header = log.get(start..)?.first_chunk::<{ Self::RECORD_HEADER_LEN }>()?;
        let (len_bytes, len, recorded) = split_header(header);
        if len as usize > Self::MAX_RECORD_LEN {
            return None;
        }
        let payload_start = start + Self::RECORD_HEADER_LEN;
        let payload = log.get(payload_start..payload_start + len as usize)?;
        (checksum(&len_bytes, payload) == recorded)
            .then(|| (payload, recorded, (payload_start + payload.len()) as u64))
    }

    /// Appends one record.
    ///
    /// Buffered: the record is not durable, and may not even be visible to readers, until
    /// [`AppendLog::sync`]. Records left in the buffer when the log is dropped are handed to the OS
    /// (not fsynced), like a `BufWriter`.
    ///
    /// # Errors
    /// - [`Error::InvalidArgument`] when `payload` is longer than [`AppendLog::MAX_RECORD_LEN`];
    ///   nothing is written.
    /// - [`Error::Io`] naming the file and the record's offset. After a failed write the log
    ///   refuses further appends and syncs: reopen it to recover the good records.
    pub fn append(&mut self, payload: &[u8]) -> Result<()> {
        self.check_usable()?;
        if payload.len() > Self::MAX_RECORD_LEN {
            return Err(Error::invalid(format!(
                "record of {} bytes for append log {} exceeds the maximum {}",
                payload.len(),
                self.path.display(),
                Self::MAX_RECORD_LEN
            )));
        }
        let len_bytes = (payload.len() as u32).to_le_bytes();
        let mut header = [0u8; Self::RECORD_HEADER_LEN];
        header[..4].copy_from_slice(&len_bytes);
        header[4..].copy_from_slice(&checksum(&len_bytes, payload).to_le_bytes());

        let record_len = Self::RECORD_HEADER_LEN + payload.len();
        if self.buf.len() + record_len > BUFFER_CAPACITY {
            self.write_buffer()?;
        }
        if record_len > BUFFER_CAPACITY {
            // Large records go straight to the file instead of through a copy in the buffer.
            self.write_raw(&header, self.end)?;
            self.write_raw(payload, self.end)?;
        } else {
            self.buf.extend_from_slice(&header);
            self.buf.extend_from_slice(payload);
        }
        self.records += 1;
        self.end += record_len as u64;
        Ok(())
    }

    /// Makes every record appended so far durable.
    ///
    /// Writes out the buffer and fsyncs the file's data. After it returns, those records survive
    /// `kill -9` and power loss; a crash during it leaves each of them complete or absent, and an
    /// absent one is only ever at the end, cut off by the next [`AppendLog::open`].
    ///
    /// # Errors
    /// [`Error::Io`] naming the file. After a failure the log refuses further appends and syncs:
    /// whether the data reached the disk is unknown (a retried fsync may falsely succeed), so the
    /// caller must reopen the log and work from what it recovers.
    pub fn sync(&mut self) -> Result<()> {
        self.check_usable()?;
        self.write_buffer()?;
        if let Err(err) = self.file.sync_data() {
            self.poisoned = true;
            return Err(self.io_error(self.end, "fsync", err));
        }
        Ok(())
    }

    /// Hands every record appended so far to the OS without fsyncing: they survive `kill -9` of
    /// this process (the kernel holds them) but not a power loss. For writers whose durability is
    /// switched off; [`AppendLog::sync`] is the durable form.
    ///
    /// ```
    /// let dir = tempfile::tempdir()?;
    /// let path = dir.path().join("journal.log");
    /// let (mut log, _) = stowage_core::file_safety::AppendLog::open(&path, true)?;
    /// log.append(b"record")?;
    /// log.flush()?;
    /// assert_eq!(stowage_core::file_safety::AppendLog::read_all(&path)?.records.len(), 1);
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::Io`] naming the file; the log then refuses further appends, as after a failed
    /// append.
    pub fn flush(&mut self) -> Result<()> {
        self.check_usable()?;
        self.write_buffer()
    }

    /// Number of records in the log: those recovered at open plus those appended since.
    pub fn len(&self) -> u64 {
        self.records
    }

    /// Whether the log holds no records.
    pub fn is_empty(&self) -> bool {
        self.records == 0
    }

    /// Byte length of the log, header and buffered records included.
    pub fn byte_len(&self) -> u64 {
        self.end
    }

    /// The log file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn check_usable(&self) -> Result<()> {
        if self.poisoned {
            return Err(Error::io(
                &self.path,
                io::Error::other(
                    "an earlier write or fsync of this log failed; reopen it to recover",
                ),
            ));
        }
        Ok(())
    }

    fn write_buffer(&mut self) -> Result<()> {
        if self.buf.is_empty() {
            return Ok(());
        }
        let start = self.end - self.buf.len() as u64;
        let result = self.file.write_all(&self.buf);
        self.buf.clear();
        result.map_err(|err| {
            self.poisoned = true;
            self.io_error(start, "write", err)
        })
    }

    fn write_raw(&mut self, bytes: &[u8], record_offset: u64) -> Result<()> {
        self.file.write_all(bytes).map_err(|err| {
            self.poisoned = true;
            self.io_error(record_offset, "write", err)
        })
    }

    fn io_error(&self, offset: u64, op: &str, err: io::Error) -> Error {
        let detail = format!("{op} at byte offset {offset}: {err}");
        Error::io(&self.path, io::Error::new(err.kind(), detail))
    }
}

impl Drop for AppendLog {
    fn drop(&mut self) {
        // Like `BufWriter`: complete records go to the OS (not durable, nothing was promised). A
        // poisoned log writes nothing more after its partial record.
        if !self.poisoned && !self.buf.is_empty() {
            let _ = self.file.write_all(&self.buf);
        }
    }
}

fn checksum(len_bytes: &[u8; 4], payload: &[u8]) -> u64 {
    let mut hasher = Xxh64::new(0);
    hasher.update(len_bytes);
    hasher.update(payload);
    hasher.digest()
}

/// Scans the whole log; never writes.
fn scan(file: &File, path: &Path) -> Result<Recovered> {
    scan_from(file, path, 0)
}

/// Scans the log from the record at byte offset `start` (0: from the first record); never
/// writes.
fn scan_from(file: &File, path: &Path, start: u64) -> Result<Recovered> {
    let file_len = file.metadata().at(path)?.len();
    let mut handle = file;
    handle.seek(SeekFrom::Start(0)).at(path)?;
    let magic_len = AppendLog::MAGIC.len();
    let mut magic = [0u8; 8];
    let n = read_up_to(&mut handle.take(file_len), &mut magic).at(path)?;
    if start > magic_len as u64 {
        if magic != AppendLog::MAGIC {
            return Err(bad_magic(path, &magic[..n]));
        }
        if start > file_len {
            return Err(Error::corrupted(
                path,
                format!("no record at byte offset {start}: the log has {file_len} bytes"),
            ));
        }
        handle.seek(SeekFrom::Start(start)).at(path)?;
    }
    let start = start.max(magic_len as u64);
    // Bounded by the length seen now: bytes a concurrent writer appends later are not ours to judge.
    let mut reader =
        BufReader::with_capacity(256 * 1024, handle.take(file_len.saturating_sub(start)));
    if n < magic_len && magic[..n] == AppendLog::MAGIC[..n] {
        // Empty, or a creation cut short while writing the header: a log without records.
        let damage = (n > 0).then(|| Damage {
            offset: 0,
            record_index: 0,
            kind: DamageKind::TornTail,
            detail: format!("file header has {n} of {magic_len} bytes"),
        });
        return Ok(Recovered {
            records: Vec::new(),
            valid_len: 0,
            dropped_tail_bytes: n as u64,
            damage,
        });
    }
    if magic != AppendLog::MAGIC {
        return Err(bad_magic(path, &magic[..n]));
    }

    let mut records = Vec::new();
    let mut offset = start;
    let damage = loop {
        let bad = |kind, detail| Some((kind, detail));
        let mut header = [0u8; AppendLog::RECORD_HEADER_LEN];
        let n = read_up_to(&mut reader, &mut header).at(path)?;
        if n == 0 {
            break None;
        }
        if n < header.len() {
            break bad(
                DamageKind::TornTail,
                format!("record header needs {} bytes, only {n} left", header.len()),
            );
        }
        let (len_bytes, len, recorded) = split_header(&header);
        if len as usize > AppendLog::MAX_RECORD_LEN {
            break bad(
                DamageKind::CorruptTail,
                format!("length {len} exceeds the maximum {}", AppendLog::MAX_RECORD_LEN),
            );
        }
        let left = file_len - offset - header.len() as u64;
        if u64::from(len) > left {
            break bad(
                DamageKind::TornTail,
                format!("payload needs {len} bytes, only {left} left"),
            );
        }
        let mut payload = vec![0u8; len as usize];
        let n = read_up_to(&mut reader, &mut payload).at(path)?;
        if n < payload.len() {
            // The file shrank while we read it.
            break bad(DamageKind::TornTail, format!("payload needs {len} bytes, only {n} left"));
        }
        let actual = checksum(&len_bytes, &payload);
        if actual != recorded {
            break bad(
                DamageKind::CorruptTail,
                format!(
                    "checksum {actual:#018x} of {len} payload bytes != recorded {recorded:#018x}"
                ),
            );
        }
        offset += (header.len() + payload.len()) as u64;
        records.push(payload);
    };

    let damage = match damage {
        None => None,
        Some((kind, detail)) => {
            let kind = match find_valid_record_after(file, offset, file_len).at(path)? {
                Some(next_valid_offset) => DamageKind::MidLog { next_valid_offset },
                None => kind,
            };
            Some(Damage { offset, record_index: records.len() as u64, kind, detail })
        }
    };
    Ok(Recovered { valid_len: offset, dropped_tail_bytes: file_len - offset, records, damage })
}

/// Splits a record header into its length bytes, the length and the recorded checksum.
fn split_header(header: &[u8; AppendLog::RECORD_HEADER_LEN]) -> ([u8; 4], u32, u64) {
    let [l0, l1, l2, l3, checksum @ ..] = *header;
    let len_bytes = [l0, l1, l2, l3];
    (len_bytes, u32::from_le_bytes(len_bytes), u64::from_le_bytes(checksum))
}

fn bad_magic(path: &Path, found: &[u8]) -> Error {
    let expected = AppendLog::MAGIC;
    if found.len() == expected.len() && found[..6] == expected[..6] {
        return Error::Incompatible {
            path: path.to_path_buf(),
            detail: format!(
                "append log format {:?}, this version reads {:?}",
                found.escape_ascii().to_string(),
                expected.escape_ascii().to_string()
            ),
        };
    }
    Error::corrupted(
        path,
        format!(
            "not a stowage append log: header at byte offset 0 is {:?}, expected {:?}",
            found.escape_ascii().to_string(),
            expected.escape_ascii().to_string()
        ),
    )
}

/// Looks for a complete, checksum-valid record starting anywhere after `damaged` (exclusive); its
/// offset means the damage is in the middle of the log rather than at its end.
fn find_valid_record_after(file: &File, damaged: u64, file_len: u64) -> io::Result<Option<u64>> {
    let mut handle = file;
    handle.seek(SeekFrom::Start(damaged))?;
    let mut tail = Vec::new();
    handle.take(file_len - damaged).read_to_end(&mut tail)?;

    let header_len = AppendLog::RECORD_HEADER_LEN;
    let mut budget = RESYNC_HASH_BUDGET;
    for start in 1..tail.len() {
        let Some(header) = tail[start..].first_chunk::<{ AppendLog::RECORD_HEADER_LEN }>() else {
            break;
        };
        let (len_bytes, len, recorded) = split_header(header);
        let len = len as usize;
        let payload_start = start + header_len;
        if len > AppendLog::MAX_RECORD_LEN || len > tail.len() - payload_start {
            continue;
        }
        let Some(rest) = budget.checked_sub(4 + len as u64) else {
            return Ok(None);
        };
        budget = rest;
        if checksum(&len_bytes, &tail[payload_start..payload_start + len]) == recorded {
            return Ok(Some(damaged + start as u64));
        }
    }
    Ok(None)
}

/// Reads until `buf` is full or the reader is exhausted; returns the bytes read.
fn read_up_to(reader: &mut impl Read, buf: &mut [u8]) -> io::Result<usize> {
    let mut filled = 0;
    while filled < buf.len() {
        match reader.read(&mut buf[filled..]) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(err) if err.kind() == io::ErrorKind::Interrupted => {}
            Err(err) => return Err(err),
        }
    }
    Ok(filled)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A log of `n` records of varying lengths; returns its path and each record's start offset.
    fn written(dir: &Path, n: usize) -> (PathBuf, Vec<u64>) {
        let path = dir.join("journal.log");
        let (mut log, _) = AppendLog::open(&path, true).unwrap();
        let mut starts = Vec::new();
        for i in 0..n {
            starts.push(log.byte_len());
            log.append(format!("record {i} {}", "x".repeat(i % 7)).as_bytes()).unwrap();
        }
        log.sync().unwrap();
        (path, starts)
    }

    #[test]
    fn read_from_each_record_boundary_is_the_tail_of_read_all() {
        let dir = tempfile::tempdir().unwrap();
        let (path, starts) = written(dir.path(), 20);
        let all = AppendLog::read_all(&path).unwrap();
        for (i, &start) in starts.iter().enumerate() {
            let tail = AppendLog::read_from(&path, start).unwrap();
            assert_eq!(tail.records, all.records[i..], "from record {i}");
            assert_eq!((tail.valid_len, tail.damage.clone()), (all.valid_len, None));
        }
        assert_eq!(AppendLog::read_from(&path, 0).unwrap(), all);
        assert_eq!(AppendLog::read_from(&path, 8).unwrap(), all);
        let end = AppendLog::read_from(&path, all.valid_len).unwrap();
        assert!(end.records.is_empty() && end.is_clean());
    }

    #[test]
    fn read_from_reports_damage_after_the_offset_as_read_all_does() {
        let dir = tempfile::tempdir().unwrap();
        let (path, starts) = written(dir.path(), 10);
        let good = std::fs::read(&path).unwrap();
        // A torn tail: the last record cut short.
        std::fs::write(&path, &good[..good.len() - 3]).unwrap();
        let tail = AppendLog::read_from(&path, starts[5]).unwrap();
        let damage = tail.damage.unwrap();
        assert_eq!(
            (tail.records.len(), damage.kind, damage.offset),
            (4, DamageKind::TornTail, starts[9])
        );
        assert_eq!(damage.record_index, 4, "counted from the offset");
        // A damaged middle record: MidLog, nothing after it returned.
        let mut bad = good.clone();
        bad[starts[7] as usize + 14] ^= 1;
        std::fs::write(&path, &bad).unwrap();
        let tail = AppendLog::read_from(&path, starts[5]).unwrap();
        assert_eq!(tail.records.len(), 2);
        assert_eq!(tail.damage.unwrap().kind, DamageKind::MidLog { next_valid_offset: starts[8] });
        // Damage before the offset is not this reader's to see.
        assert!(AppendLog::read_from(&path, starts[8]).unwrap().is_clean());
    }

    #[test]
    fn read_from_refuses_offsets_outside_the_log() {
        let dir = tempfile::tempdir().unwrap();
        let (path, starts) = written(dir.path(), 3);
        let len = std::fs::metadata(&path).unwrap().len();
        let err = AppendLog::read_from(&path, len + 1).unwrap_err();
        assert!(
            matches!(err, Error::Corrupted { .. }) && err.to_string().contains("journal.log"),
            "{err}"
        );
        assert!(matches!(AppendLog::read_from(&path, 3), Err(Error::InvalidArgument { .. })));
        // Not a record boundary: a damaged record there, never a misread one.
        let off = AppendLog::read_from(&path, starts[1] + 1).unwrap();
        assert!(off.records.is_empty());
        assert_eq!(off.damage.unwrap().offset, starts[1] + 1);
        // Not a log at all.
        std::fs::write(&path, b"NOTALOG!and more bytes").unwrap();
        assert!(matches!(AppendLog::read_from(&path, 10), Err(Error::Corrupted { .. })));
        assert!(matches!(
            AppendLog::read_from(dir.path().join("missing"), 10),
            Err(Error::NotFound { .. })
        ));
    }

    #[test]
    fn record_at_finds_exactly_the_records() {
        let dir = tempfile::tempdir().unwrap();
        let (path, starts) = written(dir.path(), 12);
        let bytes = std::fs::read(&path).unwrap();
        let all = AppendLog::read_all(&path).unwrap();
        for offset in 0..bytes.len() as u64 + 2 {
            let found = AppendLog::record_at(&bytes, offset);
            match starts.iter().position(|&s| s == offset) {
                Some(i) => {
                    let (payload, _, end) = found.expect("a record starts here");
                    assert_eq!(payload, &all.records[i][..]);
                    assert_eq!(end, starts.get(i + 1).copied().unwrap_or(all.valid_len));
                }
                None => assert!(found.is_none(), "offset {offset}"),
            }
        }
        let cut = &bytes[..bytes.len() - 1];
        assert!(AppendLog::record_at(cut, starts[11]).is_none(), "a torn record");
    }
}

#[cfg(test)]
mod open_after_tests {
    use super::*;

    #[test]
    fn open_after_cuts_a_torn_tail_and_counts_every_record() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("journal.log");
        let (mut log, _) = AppendLog::open(&path, true).unwrap();
        for i in 0..5u8 {
            log.append(&[i; 30]).unwrap();
        }
        let (known, records) = (log.byte_len(), log.len());
        log.append(b"sixth").unwrap();
        log.sync().unwrap();
        drop(log);
        let len = std::fs::metadata(&path).unwrap().len();
        let file = OpenOptions::new().append(true).open(&path).unwrap();
        file.set_len(len + 5).unwrap(); // a torn record header
        let (mut log, tail) = AppendLog::open_after(&path, known, records).unwrap();
        assert_eq!(tail.records, vec![b"sixth".to_vec()]);
        assert_eq!(tail.damage.unwrap().kind, DamageKind::TornTail);
        assert_eq!((log.len(), log.byte_len()), (6, len));
        log.append(b"seventh").unwrap();
        log.sync().unwrap();
        let all = AppendLog::read_all(&path).unwrap();
        assert!(all.is_clean());
        assert_eq!(all.records.len(), 7);
        // Beyond the end: the caller's knowledge is wrong.
        assert!(matches!(AppendLog::open_after(&path, len + 100, 9), Err(Error::Corrupted { .. })));
    }
}
