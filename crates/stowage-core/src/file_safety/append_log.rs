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
        let path = path.as_ref();
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
        let recovered = scan(&file, path)?;

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
            records: recovered.records.len() as u64,
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
    let file_len = file.metadata().at(path)?.len();
    let mut handle = file;
    handle.seek(SeekFrom::Start(0)).at(path)?;
    // Bounded by the length seen now: bytes a concurrent writer appends later are not ours to judge.
    let mut reader = BufReader::with_capacity(256 * 1024, handle.take(file_len));

    let magic_len = AppendLog::MAGIC.len();
    let mut magic = [0u8; 8];
    let n = read_up_to(&mut reader, &mut magic).at(path)?;
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
    let mut offset = magic_len as u64;
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
