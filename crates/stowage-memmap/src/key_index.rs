//! The key index of a cache stowage finalized: `stowage_index/`, two files DNANet ignores, so
//! that `get`, `contains`, `get_row` and `keys` of a finalized cache never load `index.parquet`.
//!
//! - `stowage_index/run.bin`: one key index run (`stowage_core::key_runs`) over every row:
//!   `key_hash(path) ->` the row and where its record starts, so a lookup reads one slot and one
//!   record.
//! - `stowage_index/keys.bin`: every row's entry (its path, presence flags and JSON references,
//!   exactly what `index.parquet` holds for it), each record checksummed, behind a table of
//!   offsets: a hash match of the run is confirmed against the record's path and row number, so
//!   a damaged slot, offset or record can hide a key, never return another key's row.
//!
//! ```text
//! keys.bin, little-endian:
//!   header (80 bytes): magic "STWMKEYS" | version (1) | rows | tensor fields | JSON fields
//!     | checksum rows (u64::MAX: none) | index.parquet length | xxh3 of index.parquet's footer
//!     | header xxh3 of run.bin | xxh3 of the 72 bytes before it
//!   offsets: rows + 1 u64, each record's start relative to the records
//!   records, each 8-byte aligned: xxh3 of the body u64 | body: body length u32 | path length
//!     u32 | row u64 | path | one byte per tensor field (1: present) | per JSON field a tag byte
//!     (0 null, 1 sidecar key + i32, 2 text + u32 length + bytes) | zero padding to 8 bytes
//! run.bin payloads: (row + 1) << 32 | the record's start / 8
//! ```
//!
//! Both are written by finalize as its rows stream by (bounded memory, [`KeysBuilder`]), each
//! through a temporary file made durable and renamed into place: `run.bin` first (stamped with
//! the footer of the `index.parquet` about to be published), then `index.parquet`, then `keys.bin`
//! (which vouches for both), before the manifest is removed and `_COMPLETE` written. Opening checks the
//! headers only, and that `index.parquet` is still the file the index was built from (its length
//! and the checksum of its footer, a read of a few kilobytes): any mismatch (DNANet rewrote the
//! index, a file is missing or damaged) leaves the index unused, and the cache is read through
//! `index.parquet` as before; `validate` says why.

use std::fs::File;
use std::io::{BufWriter, Read, Seek, SeekFrom, Write};
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use memmap2::Mmap;
use stowage_core::file_safety::{fsync_dir, open_no_follow};
use stowage_core::key_runs::{KeyRun, RunSpec, build_run_to, key_hash, write_run_file};
use stowage_core::{Error, IoResultExt, Result};
use xxhash_rust::xxh3::xxh3_64;

use crate::file_io::{Staged, read_exact_at, write_all_at};
use crate::index::{JsonRef, RowEntry};
use crate::layout::Layout;
use crate::row_format::RowFormat;

const MAGIC: [u8; 8] = *b"STWMKEYS";
const VERSION: u64 = 1;
const HEADER_LEN: usize = 80;
/// The most footer bytes an index.parquet stamp reads (a larger footer leaves the index unused).
const MAX_FOOTER: u64 = 64 << 20;

/// `stowage_index/`.
pub(crate) fn dir(layout: &Layout) -> PathBuf {
    layout.root().join("stowage_index")
}

/// `stowage_index/keys.bin`.
pub(crate) fn keys_path(layout: &Layout) -> PathBuf {
    dir(layout).join("keys.bin")
}

/// `stowage_index/run.bin`.
pub(crate) fn run_path(layout: &Layout) -> PathBuf {
    dir(layout).join("run.bin")
}

/// The names stowage writes atomically in `stowage_index/` (for removing abandoned temporaries).
pub(crate) const FILE_NAMES: [&str; 2] = ["keys.bin", "run.bin"];

/// What `index.parquet` is, as far as the key index records it: its length and the xxh3 of its
/// footer (metadata and trailer), which names its row groups, sizes and key-value metadata.
pub(crate) fn parquet_stamp(path: &Path) -> Result<(u64, u64)> {
    let mut file = std::fs::File::open(path).at(path)?;
    let len = file.metadata().at(path)?.len();
    let not_parquet = || Error::corrupted(path, "not a parquet file (no footer)");
    if len < 12 {
        return Err(not_parquet());
    }
    let mut trailer = [0u8; 8];
    file.seek(SeekFrom::Start(len - 8)).at(path)?;
    file.read_exact(&mut trailer).at(path)?;
    if &trailer[4..] != b"PAR1" {
        return Err(not_parquet());
    }
    let footer = u64::from(u32::from_le_bytes(trailer[..4].try_into().expect("4 bytes"))) + 8;
    if footer > len || footer > MAX_FOOTER {
        return Err(not_parquet());
    }
    let mut bytes = vec![0u8; footer as usize];
    file.seek(SeekFrom::Start(len - footer)).at(path)?;
    file.read_exact(&mut bytes).at(path)?;
    Ok((len, xxh3_64(&bytes)))
}

/// Why the key index is not used, or the index.
#[derive(Debug)]
pub(crate) enum KeyIndexState {
    /// No `stowage_index/` (a cache DNANet finalized, one stowage finalized before the key index
    /// existed, an unfinished cache, a writer: these read `index.parquet` or the manifest).
    Absent,
    /// Present but not used, and why: the cache is read through `index.parquet`.
    Unusable(String),
    /// In use.
    Ready(KeyIndex),
}

/// The answer of [`KeyIndex::find_with`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Lookup {
    /// The key's row.
    Found(usize),
    /// No slot of the run holds the key (a damaged slot may hide it: `validate` reports that).
    Absent,
    /// A slot whose hash matches points at a damaged record: the answer is unknown.
    Unsure,
}

/// The mapped key index of a finalized cache.
#[derive(Debug)]
pub(crate) struct KeyIndex {
    keys: Mmap,
    run: KeyRun,
    rows: usize,
    tensors: usize,
    json: usize,
    checksum_rows: Option<usize>,
    path: PathBuf,
}

fn u64_at(bytes: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_le_bytes(bytes.get(at..at.checked_add(8)?)?.try_into().ok()?))
}

fn u32_at(bytes: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_le_bytes(bytes.get(at..at.checked_add(4)?)?.try_into().ok()?))
}

/// Maps `path` read-only for random access: a lookup reads a slot and a record, so the kernel's
/// read-around of a faulting page (up to 128 KiB) is turned off (`MADV_RANDOM`).
fn map(path: &Path) -> Result<Mmap> {
    let file = std::fs::File::open(path).at(path)?;
    // SAFETY: the key index files are written whole under a temporary name and renamed into
    // place, never modified afterwards; every record read through the map is checksummed and
    // every offset bounds-checked.
    let map = unsafe { Mmap::map(&file) }.at(path)?;
    // Advice only: a kernel that refuses it reads around as before.
    let _ = map.advise(memmap2::Advice::Random);
    Ok(map)
}

impl KeyIndex {
    /// Opens the key index of a finalized cache of `rows` rows in `format`: the state says
    /// whether it is used and, if not, why. Reads the two headers and `index.parquet`'s footer.
    pub(crate) fn open(layout: &Layout, format: &RowFormat, rows: usize) -> KeyIndexState {
        let keys_path = keys_path(layout);
        if !keys_path.exists() && !run_path(layout).exists() {
            return KeyIndexState::Absent;
        }
        match Self::try_open(layout, format, rows) {
            Ok(index) => KeyIndexState::Ready(index),
            Err(reason) => KeyIndexState::Unusable(reason),
        }
    }

    fn try_open(
        layout: &Layout,
        format: &RowFormat,
        rows: usize,
    ) -> std::result::Result<KeyIndex, String> {
        let path = keys_path(layout);
        let keys = map(&path).map_err(|e| e.to_string())?;
        let bad = |what: &str| format!("{}: {what}", path.display());
        let header = keys.get(..HEADER_LEN).ok_or_else(|| bad("shorter than its header"))?;
        if header[..8] != MAGIC {
            return Err(bad("not a stowage key file (magic)"));
        }
        let field = |i: usize| u64_at(header, 8 * i).expect("in the header");
        if field(9) != xxh3_64(&header[..72]) {
            return Err(bad("header checksum mismatch"));
        }
        if field(1) != VERSION {
            return Err(bad(&format!("version {} (this build reads {VERSION})", field(1))));
        }
        if field(2) != rows as u64 {
            return Err(bad(&format!(
                "covers {} rows, the cache has {rows} (rows were added after stowage's finalize)",
                field(2)
            )));
        }
        if (field(3), field(4)) != (format.tensors.len() as u64, format.json.len() as u64) {
            return Err(bad("its fields are not the cache's"));
        }
        let records = (rows + 1)
            .checked_mul(8)
            .and_then(|n| n.checked_add(HEADER_LEN))
            .filter(|&end| end <= keys.len())
            .ok_or_else(|| bad("shorter than its offsets"))?;
        // The last offset is where the records end: the file's length, exactly.
        let end = u64_at(&keys, records - 8).and_then(|e| usize::try_from(e).ok());
        if end.and_then(|e| e.checked_add(records)) != Some(keys.len()) {
            return Err(bad(&format!(
                "is {} bytes, its offsets say {} (truncated or extended)",
                keys.len(),
                end.map_or("more".to_owned(), |e| (records + e).to_string())
            )));
        }
        let stamp = parquet_stamp(&layout.index()).map_err(|e| e.to_string())?;
        if stamp != (field(6), field(7)) {
            return Err(format!(
                "{} is not the file the key index was built from (rewritten by another writer?)",
                layout.index().display()
            ));
        }
        let run_path = run_path(layout);
        let run_map = map(&run_path).map_err(|e| e.to_string())?;
        let run = KeyRun::from_bytes(&run_path, run_map).map_err(|e| e.to_string())?;
        if run.header().header_checksum != field(8) {
            return Err(format!("{}: not the run keys.bin vouches for", run_path.display()));
        }
        let checksum_rows = (field(5) != u64::MAX).then_some(field(5) as usize);
        Ok(KeyIndex {
            keys,
            run,
            rows,
            tensors: format.tensors.len(),
            json: format.json.len(),
            checksum_rows,
            path,
        })
    }

    /// The checksum rows stowage's finalize recorded (as `index.parquet`'s metadata does).
    pub(crate) fn checksum_rows(&self) -> Option<usize> {
        self.checksum_rows
    }

    /// `keys.bin`.
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// The checked body of the record at byte `start` of the records, which must be `row`'s, or
    /// `None` when it is not (damage).
    fn record_at(&self, start: u64, row: usize) -> Option<&[u8]> {
        let records = HEADER_LEN + (self.rows + 1) * 8;
        let at = records.checked_add(usize::try_from(start).ok()?)?;
        let sum = u64_at(&self.keys, at)?;
        let len = u32_at(&self.keys, at.checked_add(8)?)? as usize;
        let body = self.keys.get(at + 8..(at + 8).checked_add(len)?)?;
        (sum == xxh3_64(body) && u64_at(body, 8) == Some(row as u64)).then_some(body)
    }

    /// The checked body of `row`'s record, found through the offsets.
    fn record(&self, row: usize) -> Option<&[u8]> {
        if row >= self.rows {
            return None;
        }
        self.record_at(u64_at(&self.keys, HEADER_LEN + row * 8)?, row)
    }

    /// The bytes of `keys.bin` (for planning the pages of records).
    pub(crate) fn keys_map(&self) -> &[u8] {
        &self.keys
    }

    /// The bytes of the run's home slot of `key` (where its lookup starts reading), for
    /// planning a batch's pages; `None` for a run of another version.
    pub(crate) fn home_slot(&self, key: &str) -> Option<(&[u8], Range<usize>)> {
        Some(self.run.home_slot(key_hash(key.as_bytes())))
    }

    /// Every (row, record range in [`KeyIndex::keys_map`]) the run's slots whose hash matches
    /// `key`'s name, unconfirmed: for planning the pages a batch's lookups will read.
    pub(crate) fn candidates(&self, key: &str, mut each: impl FnMut(usize, Range<usize>)) {
        self.run.find(key_hash(key.as_bytes()), |payload| {
            let (row, start) = unpack(payload);
            each(row, self.record_range(start));
            false
        });
    }

    /// The bytes a record starting at `start` (relative to the records) begins with: its
    /// checksum and length, and the path's first bytes (clamped to the map).
    fn record_range(&self, start: u64) -> Range<usize> {
        let records = HEADER_LEN + (self.rows + 1) * 8;
        let at = usize::try_from(start).map_or(usize::MAX, |s| records.saturating_add(s));
        let at = at.min(self.keys.len());
        at..(at + 32).min(self.keys.len())
    }

    /// The row stored under `key`: every hash match is confirmed against its record's path and
    /// row number. `candidate` sees each matching row, with its record's range in
    /// [`KeyIndex::keys_map`], before the comparison (to start loading its bytes).
    /// [`Lookup::Unsure`] when a matching slot's record is damaged: the caller asks
    /// `index.parquet` instead.
    pub(crate) fn find_with(&self, key: &str, candidate: impl Fn(usize, Range<usize>)) -> Lookup {
        let mut damaged = false;
        let mut row = 0;
        let found = self.run.find(key_hash(key.as_bytes()), |payload| {
            let (slot_row, start) = unpack(payload);
            if slot_row >= self.rows {
                damaged = true;
                return false;
            }
            candidate(slot_row, self.record_range(start));
            match self.record_at(start, slot_row).and_then(path_of) {
                Some(path) if path == key.as_bytes() => {
                    row = slot_row;
                    true
                }
                Some(_) => false,
                None => {
                    damaged = true;
                    false
                }
            }
        });
        match found {
            Some(_) => Lookup::Found(row),
            None if damaged => Lookup::Unsure,
            None => Lookup::Absent,
        }
    }

    /// The entry of `row`, when its record is whole.
    pub(crate) fn entry(&self, row: usize) -> Option<RowEntry> {
        decode(self.record(row)?, self.tensors, self.json)
    }

    /// Every path in row order; `Err(row)` names the first row whose record is damaged.
    pub(crate) fn keys(&self) -> std::result::Result<Vec<String>, usize> {
        (0..self.rows)
            .map(|row| {
                let path = self.record(row).and_then(path_of).ok_or(row)?;
                String::from_utf8(path.to_vec()).map_err(|_| row)
            })
            .collect()
    }

    /// Checks the index against `rows` (the entries of `index.parquet`): every record whole and
    /// equal to its row's entry, every path found at its row through the run, the run's slots
    /// against their checksum. Each difference is a message.
    pub(crate) fn check(&self, rows: &[RowEntry]) -> Vec<String> {
        let mut problems = Vec::new();
        if let Err(e) = self.run.verify() {
            problems.push(e.to_string());
        }
        if self.run.keys() != rows.len() as u64 {
            problems.push(format!(
                "{}: holds {} keys, the cache {} rows",
                self.run.path().display(),
                self.run.keys(),
                rows.len()
            ));
        }
        let mut wrong = 0usize;
        for (row, entry) in rows.iter().enumerate() {
            let ok = self.entry(row).as_ref() == Some(entry)
                && self.find_with(&entry.path, |_, _| {}) == Lookup::Found(row);
            if !ok {
                if wrong < 10 {
                    problems.push(format!(
                        "{}: row {row} (key {:?}) is damaged or not found at its row; the key \
                         index may hide it (get returns nothing for it); remove stowage_index/ \
                         to read the cache through index.parquet",
                        self.path.display(),
                        entry.path
                    ));
                }
                wrong += 1;
            }
        }
        if wrong > 10 {
            problems.push(format!(
                "{}: {} more rows damaged or not found",
                self.path.display(),
                wrong - 10
            ));
        }
        problems
    }
}

/// A run payload: the row (plus one) in the high 32 bits, the record's start in 8-byte units.
fn pack(row: usize, start: u64) -> u64 {
    ((row as u64 + 1) << 32) | (start / 8)
}

/// The row and record start of a run payload.
fn unpack(payload: u64) -> (usize, u64) {
    (((payload >> 32) as usize).wrapping_sub(1), (payload & 0xffff_ffff) * 8)
}

/// The path of a record body.
fn path_of(body: &[u8]) -> Option<&[u8]> {
    let len = u32_at(body, 4)? as usize;
    body.get(16..16usize.checked_add(len)?)
}

fn decode(body: &[u8], tensors: usize, json: usize) -> Option<RowEntry> {
    let path = std::str::from_utf8(path_of(body)?).ok()?;
    let mut at = 16 + path.len();
    let present: Box<[bool]> =
        body.get(at..at + tensors)?.iter().map(|&b| b == 1).collect::<Vec<_>>().into();
    at += tensors;
    let mut refs = Vec::with_capacity(json);
    for _ in 0..json {
        let tag = *body.get(at)?;
        at += 1;
        refs.push(match tag {
            0 => JsonRef::Null,
            1 => {
                let key = i32::from_le_bytes(body.get(at..at + 4)?.try_into().ok()?);
                at += 4;
                JsonRef::Key(key)
            }
            2 => {
                let n = u32_at(body, at)? as usize;
                at += 4;
                let text = std::str::from_utf8(body.get(at..at + n)?).ok()?;
                at += n;
                JsonRef::Inline(Arc::from(text))
            }
            _ => return None,
        });
    }
    (at == body.len()).then(|| RowEntry { path: path.into(), present, json: refs.into() })
}

/// The body of a record (what follows its checksum, before its padding): `row`'s path and
/// presence flags from `entry`, its JSON references `refs` as `index.parquet` holds them (a
/// deduplicated field's sidecar key, a plain field's text).
fn encode(row: usize, entry: &RowEntry, refs: &[JsonRef], out: &mut Vec<u8>) {
    out.clear();
    out.extend_from_slice(&[0; 4]); // the body's length, below
    out.extend_from_slice(&(entry.path.len() as u32).to_le_bytes());
    out.extend_from_slice(&(row as u64).to_le_bytes());
    out.extend_from_slice(entry.path.as_bytes());
    out.extend(entry.present.iter().map(|&p| u8::from(p)));
    for reference in refs {
        match reference {
            JsonRef::Null => out.push(0),
            JsonRef::Key(key) => {
                out.push(1);
                out.extend_from_slice(&key.to_le_bytes());
            }
            JsonRef::Inline(text) => {
                out.push(2);
                out.extend_from_slice(&(text.len() as u32).to_le_bytes());
                out.extend_from_slice(text.as_bytes());
            }
        }
    }
    let len = out.len() as u32;
    out[..4].copy_from_slice(&len.to_le_bytes());
}

/// `len` rounded up to 8 bytes: records start 8-byte aligned, so that a run payload holds their
/// start in 32 bits up to 32 GiB of records.
fn padded(len: u64) -> u64 {
    len.div_ceil(8) * 8
}

/// Key index entries a finalize gathers before it writes them out as a run: 11 MB of (hash,
/// payload) entries and as much for the build's sorted copy, a run of 2^20 slots at most 3/4
/// full (16 MiB on disk).
pub(crate) const RUN_ROWS: usize = 700_000;

/// Runs of one size a finalize merges into one of the next size: a cache of `n` rows has its
/// entries copied about `log16(n / RUN_ROWS)` times before the last merge, which reads at most
/// 15 runs of each size.
const FANOUT: usize = 16;

/// Bytes of offsets a finalize gathers before it writes them into place.
const OFFSETS_BUFFER: usize = 64 << 10;

/// Distinguishes the scratch runs of one process.
static SCRATCH: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Whether `name` is a scratch run a finalize writes in `stowage_index/` (removed when it is
/// done; one a crash left is removed by the cache's next writer).
pub(crate) fn is_scratch(name: &str) -> bool {
    name.starts_with(".finalize-") && name.ends_with(".run")
}

/// A run of part of the rows, in a scratch file of `stowage_index/` (never fsynced: nothing
/// reads it after the finalize that wrote it); removed when dropped.
struct ScratchRun {
    path: PathBuf,
    run: KeyRun,
    /// 0 for a run of fresh entries; `l + 1` for a merge of runs of level `l`.
    level: u32,
}

impl Drop for ScratchRun {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

/// What the runs' builds met when they compared the paths of two entries whose hashes match.
#[derive(Default)]
struct Compared {
    /// The first two rows found holding the same path, and the path.
    duplicate: Option<(usize, usize, String)>,
    /// A record that could not be read back.
    failure: Option<std::io::Error>,
}

impl Compared {
    /// Whether the entries at payloads `a` and `b` (of the records written into `keys`, whose
    /// records start at byte `records_at`) hold the same path: a duplicate key, recorded.
    fn same_path(&mut self, keys: &File, records_at: u64, a: u64, b: u64) -> bool {
        match (path_at(keys, records_at, a), path_at(keys, records_at, b)) {
            (Ok((row_a, path_a)), Ok((row_b, path_b))) if path_a == path_b => {
                let rows = (row_a.min(row_b), row_a.max(row_b));
                let path = String::from_utf8_lossy(&path_a).into_owned();
                self.duplicate.get_or_insert((rows.0, rows.1, path));
                true
            }
            (Ok(_), Ok(_)) => false,
            (Err(e), _) | (_, Err(e)) => {
                self.failure.get_or_insert(e);
                false
            }
        }
    }

    /// The error of what was met, if anything: a duplicate path is [`Error::Corrupted`] naming
    /// `source` (the rows' file), the path and both rows, as the row index says it.
    fn check(&mut self, source: &Path, keys: &Path) -> Result<()> {
        if let Some((first, second, path)) = self.duplicate.take() {
            return Err(Error::corrupted(
                source,
                format!("path {path:?} is stored in rows {first} and {second}"),
            ));
        }
        match self.failure.take() {
            Some(e) => Err(Error::io(keys, e)),
            None => Ok(()),
        }
    }
}

/// The row and path of the record a payload names, read back from the keys file being written.
fn path_at(keys: &File, records_at: u64, payload: u64) -> std::io::Result<(usize, Vec<u8>)> {
    let (row, start) = unpack(payload);
    let at = records_at + start;
    let mut head = [0u8; 24];
    read_exact_at(keys, &mut head, at)?;
    let len = u32_at(&head, 12).expect("in the head") as usize;
    let mut path = vec![0u8; len];
    read_exact_at(keys, &mut path, at + 24)?;
    if u64_at(&head, 16) != Some(row as u64) {
        return Err(std::io::Error::other(format!("the record of row {row} names another row")));
    }
    Ok((row, path))
}

/// Builds a scratch run of `inputs` and `fresh` in `dir`.
fn scratch_run(
    dir: &Path,
    inputs: &[&KeyRun],
    fresh: &[(u64, u64)],
    level: u32,
    same_key: impl FnMut(u64, u64) -> bool,
) -> Result<ScratchRun> {
    let n = SCRATCH.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let path = dir.join(format!(".finalize-{}-{n}.run", std::process::id()));
    let mut file =
        open_no_follow(std::fs::OpenOptions::new().read(true).write(true).create_new(true), &path)
            .at(&path)?;
    // From here on the file is removed however the build ends.
    let removal = ScratchPath(&path);
    let spec = RunSpec { first: n, through: n, stamp: 0 };
    build_run_to(&mut file, &path, inputs, fresh, spec, same_key, |_, _| false)?;
    // SAFETY: a scratch run is written whole above and never modified afterwards; only this
    // finalize knows its name.
    let map = unsafe { Mmap::map(&file) }.at(&path)?;
    let run = KeyRun::from_bytes(&path, map)?;
    std::mem::forget(removal);
    Ok(ScratchRun { path, run, level })
}

/// Removes a scratch file whose build failed.
struct ScratchPath<'a>(&'a Path);

impl Drop for ScratchPath<'_> {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(self.0);
    }
}

/// The key index of a finalize, built as its rows stream by (`push`, in row order), in bounded
/// memory: each record is written into a temporary `keys.bin` as it comes (its offset gathered
/// in a small buffer and written into place in the offsets table, which the known row count
/// sizes), the key index entries (hash, payload) a chunk of [`RUN_ROWS`] at a time into scratch
/// runs, merged [`FANOUT`] at a time; [`KeysBuilder::finish`] merges the rest into `run.bin`.
/// Every build compares the paths of entries whose hashes match, read back from the temporary:
/// two rows holding one path are the error a row index gives (`finish` returns it).
pub(crate) struct KeysBuilder {
    dir: PathBuf,
    /// The file the rows come from, named in a duplicate's error.
    source: PathBuf,
    staged: Staged,
    out: BufWriter<File>,
    /// The temporary, opened again for reading back records.
    reader: File,
    rows: usize,
    pushed: usize,
    /// Where the records start in the file.
    records_at: u64,
    /// Bytes of records written.
    end: u64,
    offsets: Vec<u8>,
    /// Where `offsets`' first byte goes.
    offsets_at: u64,
    record: Vec<u8>,
    fresh: Vec<(u64, u64)>,
    run_rows: usize,
    runs: Vec<ScratchRun>,
    compared: Compared,
    /// Whether every payload so far fits 64 bits (rows below 2^32, records below 32 GiB).
    addressable: bool,
    /// The most entries held at once, and scratch runs written (for tests).
    pub(crate) most_entries: usize,
    pub(crate) scratch_runs: usize,
}

/// What [`KeysBuilder::finish`] leaves to publish: `keys.bin`, whole but for its header.
pub(crate) struct SealedKeys {
    staged: Staged,
    file: File,
    header: Vec<u8>,
}

impl SealedKeys {
    /// Writes the header and publishes `keys.bin` (after `index.parquet`).
    pub(crate) fn publish(self) -> Result<()> {
        write_all_at(&self.file, &self.header, 0).at(self.staged.temp())?;
        self.staged.publish(self.file)
    }
}

impl KeysBuilder {
    /// A builder for the `rows` rows of a finalize in `layout`, read from `source`; entries
    /// gathered `run_rows` at a time.
    pub(crate) fn create(
        layout: &Layout,
        source: &Path,
        rows: usize,
        run_rows: usize,
    ) -> Result<KeysBuilder> {
        let dir = dir(layout);
        std::fs::create_dir_all(&dir).at(&dir)?;
        fsync_dir(layout.root())?;
        let path = keys_path(layout);
        let (staged, file) = Staged::create(&path)?;
        let reader = File::open(staged.temp()).at(staged.temp())?;
        let records_at = HEADER_LEN as u64 + (rows as u64 + 1) * 8;
        let mut out = BufWriter::with_capacity(1 << 20, file);
        out.seek(SeekFrom::Start(records_at)).at(staged.temp())?;
        let run_rows = run_rows.max(1);
        Ok(KeysBuilder {
            dir,
            source: source.to_path_buf(),
            staged,
            out,
            reader,
            rows,
            pushed: 0,
            records_at,
            end: 0,
            offsets: 0u64.to_le_bytes().to_vec(),
            offsets_at: HEADER_LEN as u64,
            record: Vec::new(),
            fresh: Vec::with_capacity(run_rows.min(rows)),
            run_rows,
            runs: Vec::new(),
            compared: Compared::default(),
            addressable: (rows as u64) < u64::from(u32::MAX),
            most_entries: 0,
            scratch_runs: 0,
        })
    }

    /// Adds row `row` (the next one), its JSON references `refs` as `index.parquet` holds them.
    pub(crate) fn push(&mut self, row: usize, entry: &RowEntry, refs: &[JsonRef]) -> Result<()> {
        if row != self.pushed || row >= self.rows {
            return Err(Error::invalid(format!(
                "finalize: row {row} comes after {} of {} rows",
                self.pushed, self.rows
            )));
        }
        self.pushed += 1;
        if !self.addressable {
            return Ok(());
        }
        encode(row, entry, refs, &mut self.record);
        let start = self.end;
        let len = padded(8 + self.record.len() as u64);
        if (start + len) / 8 > u64::from(u32::MAX) {
            // Beyond what a payload addresses: no key index (reads load index.parquet), and no
            // duplicate check through it.
            self.addressable = false;
            self.runs.clear();
            self.fresh = Vec::new();
            return Ok(());
        }
        let temp = self.staged.temp();
        self.out.write_all(&xxh3_64(&self.record).to_le_bytes()).at(temp)?;
        self.out.write_all(&self.record).at(temp)?;
        let padding = (len - 8 - self.record.len() as u64) as usize;
        self.out.write_all(&[0u8; 8][..padding]).at(temp)?;
        self.end += len;
        self.offsets.extend_from_slice(&self.end.to_le_bytes());
        if self.offsets.len() >= OFFSETS_BUFFER {
            self.write_offsets()?;
        }
        self.fresh.push((key_hash(entry.path.as_bytes()), pack(row, start)));
        self.most_entries = self.most_entries.max(self.fresh.len());
        if self.fresh.len() >= self.run_rows {
            self.spill()?;
        }
        Ok(())
    }

    fn write_offsets(&mut self) -> Result<()> {
        write_all_at(self.out.get_ref(), &self.offsets, self.offsets_at).at(self.staged.temp())?;
        self.offsets_at += self.offsets.len() as u64;
        self.offsets.clear();
        Ok(())
    }

    /// Writes the gathered entries out as a scratch run, and merges [`FANOUT`] runs of a size
    /// into one of the next.
    fn spill(&mut self) -> Result<()> {
        self.out.flush().at(self.staged.temp())?;
        let KeysBuilder { reader, records_at, compared, .. } = self;
        let same = |a: u64, b: u64| compared.same_path(reader, *records_at, a, b);
        let run = scratch_run(&self.dir, &[], &self.fresh, 0, same)?;
        self.compared.check(&self.source, self.staged.temp())?;
        self.fresh.clear();
        self.scratch_runs += 1;
        self.runs.push(run);
        loop {
            let level = self.runs.last().map_or(0, |r| r.level);
            let same_level = self.runs.iter().rev().take_while(|r| r.level == level).count();
            if same_level < FANOUT {
                return Ok(());
            }
            let taken = self.runs.split_off(self.runs.len() - same_level);
            let inputs: Vec<&KeyRun> = taken.iter().map(|r| &r.run).collect();
            let KeysBuilder { reader, records_at, compared, .. } = self;
            let same = |a: u64, b: u64| compared.same_path(reader, *records_at, a, b);
            let merged = scratch_run(&self.dir, &inputs, &[], level + 1, same)?;
            self.compared.check(&self.source, self.staged.temp())?;
            drop(inputs);
            drop(taken);
            self.scratch_runs += 1;
            self.runs.push(merged);
        }
    }

    /// After the last row: merges every run and the entries left into `run.bin` (atomically,
    /// stamped with `stamp`, what [`parquet_stamp`] says of the `index.parquet` about to be
    /// published), checking for duplicate paths on the way, and returns `keys.bin` to publish
    /// after `index.parquet`. With `publish` false (a cache without checksums has no key index)
    /// the merge goes to a scratch run, for the duplicate check only, and nothing is returned.
    /// Without a key index (beyond what payloads address) the files of an earlier one are
    /// removed.
    pub(crate) fn finish(
        mut self,
        layout: &Layout,
        format: &RowFormat,
        stamp: (u64, u64),
        checksum_rows: Option<usize>,
        publish: bool,
    ) -> Result<Option<SealedKeys>> {
        if self.pushed != self.rows {
            return Err(Error::corrupted(
                &self.source,
                format!("holds {} rows, the cache {}", self.pushed, self.rows),
            ));
        }
        if !self.addressable {
            if publish {
                for path in [keys_path(layout), run_path(layout)] {
                    match std::fs::remove_file(&path) {
                        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                            return Err(Error::io(path, e));
                        }
                        _ => {}
                    }
                }
                fsync_dir(&self.dir)?;
            }
            return Ok(None);
        }
        self.out.flush().at(self.staged.temp())?;
        self.write_offsets()?;
        let spec =
            RunSpec { first: 0, through: self.rows.saturating_sub(1) as u64, stamp: stamp.1 };
        let KeysBuilder { reader, records_at, compared, runs, fresh, dir, .. } = &mut self;
        let inputs: Vec<&KeyRun> = runs.iter().map(|r| &r.run).collect();
        let same = |a: u64, b: u64| compared.same_path(reader, *records_at, a, b);
        let run_path = run_path(layout);
        let header = if publish {
            Some(write_run_file(&run_path, &inputs, fresh, spec, same, |_, _| false, None)?)
        } else {
            drop(scratch_run(dir, &inputs, fresh, 0, same)?);
            None
        };
        drop(inputs);
        // The scratch runs, merged.
        self.runs.clear();
        if let Err(e) = self.compared.check(&self.source, self.staged.temp()) {
            if publish {
                // A table that lost one of the two rows: not left for anyone to read.
                let _ = std::fs::remove_file(&run_path);
            }
            return Err(e);
        }
        let Some(run) = header else { return Ok(None) };
        let mut header = Vec::with_capacity(HEADER_LEN);
        header.extend_from_slice(&MAGIC);
        for value in [
            VERSION,
            self.rows as u64,
            format.tensors.len() as u64,
            format.json.len() as u64,
            checksum_rows.map_or(u64::MAX, |n| n as u64),
            stamp.0,
            stamp.1,
            run.header_checksum,
        ] {
            header.extend_from_slice(&value.to_le_bytes());
        }
        let checksum = xxh3_64(&header);
        header.extend_from_slice(&checksum.to_le_bytes());
        let KeysBuilder { staged, out, .. } = self;
        let file = out.into_inner().map_err(|e| e.into_error()).at(staged.temp())?;
        Ok(Some(SealedKeys { staged, file, header }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry() -> RowEntry {
        RowEntry {
            path: "/r/caf\u{e9}.hid".into(),
            present: vec![true, false, true].into(),
            json: vec![JsonRef::Inline("[1]".into()), JsonRef::Null, JsonRef::Inline("{}".into())]
                .into(),
        }
    }

    #[test]
    fn records_round_trip_with_sidecar_keys_as_finalized() {
        // JSON field 0 deduplicated (sidecar key 4), 1 deduplicated and null, 2 plain.
        let refs = [JsonRef::Key(4), JsonRef::Null, JsonRef::Inline("{}".into())];
        let mut body = Vec::new();
        encode(0, &entry(), &refs, &mut body);
        assert_eq!(padded(8 + body.len() as u64) % 8, 0);
        let decoded = decode(&body, 3, 3).unwrap();
        assert_eq!(&*decoded.path, "/r/caf\u{e9}.hid");
        assert_eq!(&*decoded.present, [true, false, true]);
        assert_eq!(&*decoded.json, [JsonRef::Key(4), JsonRef::Null, JsonRef::Inline("{}".into())]);
        assert_eq!(path_of(&body), Some("/r/caf\u{e9}.hid".as_bytes()));
        // Cut anywhere, or with a field count that is not the file's, a body never decodes.
        for len in 0..body.len() {
            assert!(decode(&body[..len], 3, 3).is_none(), "{len}");
        }
        assert!(decode(&body, 2, 3).is_none() && decode(&body, 3, 2).is_none());
    }

    #[test]
    fn payloads_carry_the_row_and_the_record_start() {
        for (row, start) in
            [(0, 0), (7, 8 * 1000), (u32::MAX as usize - 2, 8 * u64::from(u32::MAX))]
        {
            let payload = pack(row, start);
            assert_ne!(payload, 0, "0 marks an empty slot");
            assert_eq!(unpack(payload), (row, start));
        }
        assert_eq!(padded(0), 0);
        assert_eq!(padded(9), 16);
        assert_eq!(padded(16), 16);
    }
}
