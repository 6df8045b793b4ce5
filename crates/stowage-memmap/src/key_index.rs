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
//! Both are written by finalize after `index.parquet`, atomically (`run.bin` first: `keys.bin`
//! vouches for it), before the manifest is removed and `_COMPLETE` written. Opening checks the
//! headers only, and that `index.parquet` is still the file the index was built from (its length
//! and the checksum of its footer, a read of a few kilobytes): any mismatch (DNANet rewrote the
//! index, a file is missing or damaged) leaves the index unused, and the cache is read through
//! `index.parquet` as before; `validate` says why.

use std::borrow::Cow;
use std::io::{Read, Seek, SeekFrom, Write};
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use memmap2::Mmap;
use stowage_core::file_safety::{atomic_write, atomic_write_with, fsync_dir};
use stowage_core::key_runs::{KeyRun, RunSpec, build_run, key_hash};
use stowage_core::{Error, IoResultExt, Result};
use xxhash_rust::xxh3::xxh3_64;

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

/// Per JSON field, the sidecar keys finalize gave every row (`None` for a plain field, whose
/// texts stay inline).
pub(crate) type KeyColumns = [Option<Vec<Option<i32>>>];

/// The reference of JSON field `j` of `row` as `index.parquet` holds it.
fn json_ref<'a>(entry: &'a RowEntry, keys: &KeyColumns, row: usize, j: usize) -> Cow<'a, JsonRef> {
    match &keys[j] {
        Some(column) => Cow::Owned(column[row].map_or(JsonRef::Null, JsonRef::Key)),
        None => Cow::Borrowed(&entry.json[j]),
    }
}

/// The body of a record (what follows its checksum, before its padding).
fn encode(row: usize, entry: &RowEntry, keys: &KeyColumns, out: &mut Vec<u8>) {
    out.clear();
    out.extend_from_slice(&[0; 4]); // the body's length, below
    out.extend_from_slice(&(entry.path.len() as u32).to_le_bytes());
    out.extend_from_slice(&(row as u64).to_le_bytes());
    out.extend_from_slice(entry.path.as_bytes());
    out.extend(entry.present.iter().map(|&p| u8::from(p)));
    for j in 0..entry.json.len() {
        match &*json_ref(entry, keys, row, j) {
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

fn encoded_len(row: usize, entry: &RowEntry, keys: &KeyColumns) -> u64 {
    let json: usize = (0..entry.json.len())
        .map(|j| match &*json_ref(entry, keys, row, j) {
            JsonRef::Null => 1,
            JsonRef::Key(_) => 5,
            JsonRef::Inline(text) => 5 + text.len(),
        })
        .sum();
    let body = 16 + entry.path.len() + entry.present.len() + json;
    padded(8 + body as u64)
}

/// `len` rounded up to 8 bytes: records start 8-byte aligned, so that a run payload holds their
/// start in 32 bits up to 32 GiB of records.
fn padded(len: u64) -> u64 {
    len.div_ceil(8) * 8
}

/// Builds the run of `fresh` and writes it to `path` atomically; returns its header checksum.
///
/// Built in memory (16 bytes a slot, at most 3/4 full), not into a shared writable map of the
/// file: the reliability suite's power-loss model follows `write` calls, not stores to a map.
fn write_run(
    path: &Path,
    fresh: &[(u64, u64)],
    spec: RunSpec,
    same: impl FnMut(u64, u64) -> bool,
) -> Result<u64> {
    let bytes = build_run(&[], fresh, spec, same, |_, _| false)?;
    atomic_write(path, &bytes)?;
    Ok(KeyRun::from_bytes(path, bytes)?.header().header_checksum)
}

/// Writes `stowage_index/` for the finalized `rows` (with `keys`, the sidecar keys finalize gave
/// them), after `index.parquet` is in place: `run.bin`, then `keys.bin`, each atomically. Paths
/// are distinct (the writer's index refused duplicates).
pub(crate) fn write(
    layout: &Layout,
    format: &RowFormat,
    rows: &[RowEntry],
    keys: &KeyColumns,
    checksum_rows: Option<usize>,
) -> Result<()> {
    let dir = dir(layout);
    std::fs::create_dir_all(&dir).at(&dir)?;
    fsync_dir(layout.root())?;
    let stamp = parquet_stamp(&layout.index())?;
    let mut fresh: Vec<(u64, u64)> = Vec::with_capacity(rows.len());
    let mut end = 0u64;
    for (row, entry) in rows.iter().enumerate() {
        fresh.push((key_hash(entry.path.as_bytes()), pack(row, end)));
        end += encoded_len(row, entry, keys);
    }
    if end / 8 > u64::from(u32::MAX) || rows.len() as u64 >= u64::from(u32::MAX) {
        // Beyond what a payload addresses: no key index (reads load index.parquet).
        for path in [keys_path(layout), run_path(layout)] {
            match std::fs::remove_file(&path) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                    return Err(Error::io(path, e));
                }
                _ => {}
            }
        }
        return fsync_dir(&dir);
    }
    let last = rows.len().saturating_sub(1) as u64;
    let spec = RunSpec { first: 0, through: last, stamp: stamp.1 };
    let same = |a: u64, b: u64| rows[unpack(a).0].path == rows[unpack(b).0].path;
    let run_checksum = write_run(&run_path(layout), &fresh, spec, same)?;
    drop(fresh);
    let mut header = Vec::with_capacity(HEADER_LEN);
    header.extend_from_slice(&MAGIC);
    for value in [
        VERSION,
        rows.len() as u64,
        format.tensors.len() as u64,
        format.json.len() as u64,
        checksum_rows.map_or(u64::MAX, |n| n as u64),
        stamp.0,
        stamp.1,
        run_checksum,
    ] {
        header.extend_from_slice(&value.to_le_bytes());
    }
    let checksum = xxh3_64(&header);
    header.extend_from_slice(&checksum.to_le_bytes());
    atomic_write_with(keys_path(layout), |out| {
        out.write_all(&header)?;
        let mut offset = 0u64;
        out.write_all(&offset.to_le_bytes())?;
        for (row, entry) in rows.iter().enumerate() {
            offset += encoded_len(row, entry, keys);
            out.write_all(&offset.to_le_bytes())?;
        }
        let mut record = Vec::new();
        for (row, entry) in rows.iter().enumerate() {
            encode(row, entry, keys, &mut record);
            out.write_all(&xxh3_64(&record).to_le_bytes())?;
            out.write_all(&record)?;
            let padding = padded(8 + record.len() as u64) - 8 - record.len() as u64;
            out.write_all(&[0u8; 8][..padding as usize])?;
        }
        Ok(())
    })
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
        let keys: Vec<Option<Vec<Option<i32>>>> = vec![Some(vec![Some(4)]), Some(vec![None]), None];
        let mut body = Vec::new();
        encode(0, &entry(), &keys, &mut body);
        assert_eq!(encoded_len(0, &entry(), &keys), padded(8 + body.len() as u64));
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
