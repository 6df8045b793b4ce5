//! Which rows stowage's checksums vouch for, in a cache that DNANet and stowage both wrote.
//!
//! `stowage_checksums.bin` holds one row per cache row, in row order. DNANet ignores it, so when
//! DNANet appends rows to a cache stowage started, the file stops short of the cache's rows. Those
//! rows are not damage: they are *unchecked* ([`stowage_core::Unchecked`]), read like any other
//! and adopted on an explicit step ([`crate::MemmapBackend::adopt`]). What tells them apart from
//! damage is who committed each row, as far as the files record it ([`Origin`]):
//!
//! - stowage's writer commits a row (its manifest line) only after the row's checksum is durable,
//!   and writes the line in its own exact form ([`crate::manifest::Manifest::foreign`] lists the
//!   lines in another form);
//! - stowage's finalize records in `index.parquet` that every row had a checksum row
//!   ([`crate::index::CHECKSUM_ROWS_KEY`]); an index DNANet's finalize wrote records nothing.
//!
//! So a row without a checksum row is damage when stowage committed it (its line is stowage's, or
//! stowage finalized the cache), and unchecked when another writer did (a foreign line, or a row
//! of an index DNANet finalized). A checksum row is trusted for a foreign line only when it names
//! the row's key: an adopted row. Any other is the leftover of a stowage flush that crashed before
//! its manifest lines, over which DNANet then committed its own row. A placeholder row
//! ([`checksum::PLACEHOLDER`]) always means unchecked: stowage's writer writes one for each row
//! another writer committed, when it resumes the cache.

use std::borrow::Cow;
use std::fs::OpenOptions;
use std::ops::Range;
use std::path::Path;

use stowage_core::file_safety::open_no_follow;
use stowage_core::{Error, IoResultExt, Reader, Result, Unchecked};

use crate::backend::Recorded;
use crate::error::MemmapError;
use crate::file_io::{read_exact_at, write_all_at};
use crate::{MemmapBackend, checksum, preset};

/// Who committed a row, as far as the cache's files record it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Origin {
    /// A manifest line in exactly the form stowage's writer writes: stowage committed the row,
    /// after its checksum row was durable.
    StowageLine,
    /// A manifest line in another form: another writer (DNANet) committed the row.
    ForeignLine,
    /// A row of an `index.parquet` stowage's finalize wrote, which had a checksum row (or a
    /// placeholder) for each of its rows.
    StowageIndex,
    /// A row of an `index.parquet` another writer's finalize wrote: who committed it is not
    /// recorded.
    OtherIndex,
}

impl Origin {
    /// Whether stowage committed every row of this origin with a checksum row.
    fn promises_checksum(self) -> bool {
        matches!(self, Origin::StowageLine | Origin::StowageIndex)
    }
}

/// What stowage's checksums say about one row.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Verdict<'a> {
    /// Check the row against this stored checksum row.
    Verify(Cow<'a, [u8]>),
    /// No checksum vouches for the row: another writer committed it.
    Unchecked,
    /// stowage committed the row, but the checksum file holds no row for it: damage.
    Missing,
}

/// Judges one row: `stored` is its checksum row when the file holds one, `key` its key.
pub(crate) fn judge<'a>(origin: Origin, stored: Option<Cow<'a, [u8]>>, key: &str) -> Verdict<'a> {
    match stored {
        Some(row) if checksum::is_placeholder(&row) => Verdict::Unchecked,
        Some(row)
            if origin == Origin::ForeignLine && checksum::nth(&row, 0) != checksum::of_key(key) =>
        {
            Verdict::Unchecked
        }
        Some(row) => Verdict::Verify(row),
        None if origin.promises_checksum() => Verdict::Missing,
        None => Verdict::Unchecked,
    }
}

/// Whether `row` lies in one of the sorted, disjoint `ranges`.
pub(crate) fn contains(ranges: &[Range<usize>], row: usize) -> bool {
    let after = ranges.partition_point(|r| r.end <= row);
    ranges.get(after).is_some_and(|r| r.start <= row)
}

/// Adds `row` to the sorted, disjoint `ranges` (rows arrive in increasing order).
pub(crate) fn push_row(ranges: &mut Vec<Range<usize>>, row: usize) {
    match ranges.last_mut() {
        Some(run) if run.end == row => run.end += 1,
        _ => ranges.push(row..row + 1),
    }
}

/// `rows` as text: `"4-5"`, `"0-2, 6-8"`, the first few runs and how many more.
pub(crate) fn describe_runs(rows: &[Range<usize>]) -> String {
    const SHOWN: usize = 4;
    let mut parts: Vec<String> = rows
        .iter()
        .take(SHOWN)
        .map(|r| match r.len() {
            1 => r.start.to_string(),
            _ => format!("{}-{}", r.start, r.end - 1),
        })
        .collect();
    if rows.len() > SHOWN {
        parts.push(format!("and {} more runs", rows.len() - SHOWN));
    }
    parts.join(", ")
}

/// Brings `stowage_checksums.bin` of an unfinished cache in line with its `rows` committed rows
/// before stowage's writer appends to it, so that the file's rows stay the cache's rows:
///
/// - a row of a foreign line whose checksum row is not a placeholder and does not name the row's
///   key (`key_of`) is the leftover of a crashed stowage flush: it becomes a placeholder;
/// - bytes beyond the last whole row that is kept (a torn or uncommitted tail) are cut off;
/// - every row another writer committed beyond the file's end gets a placeholder.
///
/// A missing file is created (the directory entry is the caller's to fsync). Every step leaves a
/// state the next open reads the same way, so a crash in between is repaired by the next writer.
///
/// Errors: [`Error::Corrupted`] naming the file, the row and its key when a row stowage committed
/// (not `foreign`) has no checksum row: the writer does not resume over damage.
pub(crate) fn recover_checksum_file(
    path: &Path,
    row_bytes: usize,
    rows: usize,
    foreign: &[Range<usize>],
    key_of: impl Fn(usize) -> String,
) -> Result<()> {
    // Never truncated here: the rows kept are decided below. Never through a link.
    let file = open_no_follow(
        OpenOptions::new().read(true).write(true).create(true).truncate(false),
        path,
    )
    .at(path)?;
    let len = file.metadata().at(path)?.len();
    let width = row_bytes as u64;
    let kept = usize::try_from(len / width).unwrap_or(usize::MAX).min(rows);
    if let Some(row) = (kept..rows).find(|&row| !contains(foreign, row)) {
        let (checksums, key) = (path.to_path_buf(), key_of(row));
        return Err(MemmapError::ResumeOverDamage { checksums, row, key, covered: kept }.into());
    }
    let placeholder = checksum::placeholder_row(row_bytes);
    let mut changed = false;
    let mut stored = vec![0u8; row_bytes];
    for row in foreign.iter().flat_map(|r| r.start..r.end.min(kept)) {
        let offset = row as u64 * width;
        read_exact_at(&file, &mut stored, offset).at(path)?;
        let names_key = checksum::nth(&stored, 0) == checksum::of_key(&key_of(row));
        if !checksum::is_placeholder(&stored) && !names_key {
            write_all_at(&file, &placeholder, offset).at(path)?;
            changed = true;
        }
    }
    let end = kept as u64 * width;
    if len != end {
        file.set_len(end).at(path)?;
        changed = true;
    }
    if kept < rows {
        let fill = placeholder.repeat(rows - kept);
        write_all_at(&file, &fill, end).at(path)?;
        changed = true;
    }
    if changed {
        file.sync_all().at(path)?;
    }
    Ok(())
}

impl MemmapBackend {
    /// What is wrong with `stowage_checksums.bin` of a finalized cache as a whole, given who
    /// finalized it: a file stowage's finalize recorded must hold exactly a row per cache row; one
    /// beside an index another writer finalized may stop short of the rows (they are unchecked),
    /// but not run past them or end in a partial row. Nothing for an unfinished cache (a tail
    /// beyond its rows is a torn append), nor for a writer's (its recovery aligned the file).
    pub(crate) fn checksum_file_problems(&self) -> Vec<Error> {
        if self.is_writing() || matches!(self.recorded(), Recorded::ByManifest { .. }) {
            return Vec::new();
        }
        let path = self.layout().checksums();
        let width = self.row_format().checksum_layout().row_bytes as u64;
        let rows = self.len() as u64;
        let expected = rows.saturating_mul(width);
        let on_disk = std::fs::metadata(&path).ok().map(|m| m.len());
        let size = match on_disk {
            Some(len) => format!("file is {len} bytes"),
            None => "file is missing".to_owned(),
        };
        let len = on_disk.unwrap_or(0);
        let detail = match self.stowage_checksum_rows() {
            Some(_) if len != expected => format!(
                "{size}, expected {expected} ({rows} rows of {width} bytes): stowage finalized \
                 this cache with a checksum row for each of its rows"
            ),
            Some(_) => return Vec::new(),
            None if len > expected || !len.is_multiple_of(width) => {
                let what = if len > expected {
                    format!("longer than the {rows} rows of the cache ({expected} bytes)")
                } else {
                    format!("ends in a partial row of {} bytes", len % width)
                };
                format!(
                    "{size}, {what}: damage, or checksums of rows a stowage write never \
                     committed before another writer resumed and finalized the cache; in that \
                     case remove this file and adopt the cache again (every row is then \
                     checksummed as it is now)"
                )
            }
            None => return Vec::new(),
        };
        vec![Error::corrupted(path, detail)]
    }

    /// The report of the unchecked `rows`: the file that commits them (`manifest.jsonl` or
    /// `index.parquet`), who wrote them, how many, which they are and how to adopt them.
    pub(crate) fn unchecked_report(&self, rows: &[Range<usize>]) -> Unchecked {
        let layout = self.layout();
        let path = match self.recorded() {
            Recorded::ByManifest { .. } => layout.manifest(),
            Recorded::ByFinalize => layout.index(),
        };
        let names: Vec<&str> =
            self.row_format().tensors.iter().map(|t| t.layout.name.as_str()).collect();
        let writer = if names == ["data", preset::ANNOTATION_FIELD, "scaler"] {
            "DNANet"
        } else {
            "another writer"
        };
        let files: Vec<String> = names.iter().map(|name| format!("{name}.bin")).collect();
        Unchecked {
            path,
            writer: writer.to_owned(),
            samples: rows.iter().map(|r| r.len() as u64).sum(),
            next_step: format!(
                "rows {} (in {} and the index): run `stowage adopt {}` \
                 (MemmapBackend::adopt) to checksum them as they are now",
                describe_runs(rows),
                files.join(", "),
                layout.root().display()
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn real(key: &str) -> Vec<u8> {
        [checksum::of_key(key), checksum::of_value(None)]
            .iter()
            .flat_map(|c| c.to_le_bytes())
            .collect()
    }

    #[test]
    fn rows_are_judged_by_who_committed_them() {
        use Origin::*;
        let placeholder: Cow<'_, [u8]> = Cow::Owned(checksum::placeholder_row(16));
        let mine = || -> Cow<'_, [u8]> { Cow::Owned(real("k")) };
        let stale = || -> Cow<'_, [u8]> { Cow::Owned(real("another key")) };
        assert_eq!(judge(StowageLine, Some(mine()), "k"), Verdict::Verify(mine()));
        assert_eq!(judge(StowageLine, Some(stale()), "k"), Verdict::Verify(stale()), "damage");
        assert_eq!(judge(StowageLine, None, "k"), Verdict::Missing);
        assert_eq!(judge(StowageIndex, None, "k"), Verdict::Missing);
        assert_eq!(judge(StowageIndex, Some(placeholder.clone()), "k"), Verdict::Unchecked);
        assert_eq!(judge(ForeignLine, Some(mine()), "k"), Verdict::Verify(mine()), "adopted");
        assert_eq!(judge(ForeignLine, Some(stale()), "k"), Verdict::Unchecked, "leftover");
        assert_eq!(judge(ForeignLine, None, "k"), Verdict::Unchecked);
        assert_eq!(judge(OtherIndex, None, "k"), Verdict::Unchecked);
        assert_eq!(judge(OtherIndex, Some(stale()), "k"), Verdict::Verify(stale()));
    }

    #[test]
    fn row_ranges() {
        let mut ranges = Vec::new();
        for row in [1, 2, 3, 7, 9, 10] {
            push_row(&mut ranges, row);
        }
        assert_eq!(ranges, [1..4, 7..8, 9..11]);
        let inside: Vec<usize> = (0..12).filter(|&r| contains(&ranges, r)).collect();
        assert_eq!(inside, [1, 2, 3, 7, 9, 10]);
        assert_eq!(describe_runs(&ranges), "1-3, 7, 9-10");
        let many: Vec<Range<usize>> = (0..6).map(|i| 2 * i..2 * i + 1).collect();
        assert_eq!(describe_runs(&many), "0, 2, 4, 6, and 2 more runs");
    }

    #[test]
    fn recovery_aligns_the_file_with_the_rows() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("stowage_checksums.bin");
        let keys = ["a", "b", "c", "d", "e"];
        // Rows 0-1 stowage's, row 2 DNANet's over a leftover of a crashed flush, rows 3-4
        // DNANet's beyond the file, and a torn partial row.
        let mut bytes = [real("a"), real("b"), real("torn key")].concat();
        bytes.extend_from_slice(&[7; 5]);
        std::fs::write(&path, &bytes).unwrap();
        recover_checksum_file(&path, 16, 5, std::slice::from_ref(&(2..5)), |r| keys[r].to_string())
            .unwrap();
        let after = std::fs::read(&path).unwrap();
        assert_eq!(after.len(), 5 * 16);
        assert_eq!(&after[..32], &[real("a"), real("b")].concat()[..]);
        for row in 2..5 {
            assert!(checksum::is_placeholder(&after[row * 16..(row + 1) * 16]), "row {row}");
        }
        // A row stowage committed without its checksum row is damage: nothing changes.
        std::fs::write(&path, real("a")).unwrap();
        let err = recover_checksum_file(&path, 16, 3, std::slice::from_ref(&(2..3)), |r| {
            keys[r].to_string()
        })
        .unwrap_err();
        let Error::Corrupted { key, detail, .. } = &err else { panic!("{err}") };
        assert_eq!(key.as_deref(), Some("b"));
        assert!(detail.starts_with("row 1 was committed by stowage's writer"), "{err}");
        assert_eq!(std::fs::read(&path).unwrap(), real("a"));
        // A missing file is created with a placeholder for each foreign row.
        std::fs::remove_file(&path).unwrap();
        recover_checksum_file(&path, 16, 2, std::slice::from_ref(&(0..2)), |r| keys[r].to_string())
            .unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), checksum::placeholder_row(16).repeat(2));
    }
}
