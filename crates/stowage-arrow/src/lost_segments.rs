//! Segments a power cut took from a cache written without fsync (`ArrowOptions::durable` off).
//!
//! Such a writer fsyncs neither a segment's files nor its commit record, so a power cut may keep
//! the record (the OS wrote the log's page back) and lose the files, or keep them only in part.
//! The record says so ([`SegmentEntry::unsynced`]), and a segment so committed whose files are not
//! whole is lost, like a sample put after the last flush: it is set aside
//! ([`ArrowCommits::lost`](crate::commit_log::ArrowCommits::lost)), never read and never damage.
//! Its samples are gone; the cache opens with the rest. The next writer records the loss (a
//! synced `lost` record, before any other record vouches for the segments before it) and deletes
//! what is left of the files.
//!
//! Only the segments after the last record of Arrow's own kinds can be lost: the writer syncs
//! every segment file before such a record ([`crate::committer`]), and a synced record makes the
//! records before it durable. A segment committed with fsync whose files are missing is damage,
//! as always.

use std::io::ErrorKind;

use stowage_core::{Error, Result};

use crate::commit_log::{Committed, SegmentEntry};
use crate::key_sidecar::{self, KeySidecar};
use crate::layout::Layout;
use crate::row_sums::{self, RowSums};
use crate::segment::Segment;

/// Reads the commit log of `layout` ([`crate::commit_log::read`]) and sets the lost segments
/// aside ([`set_aside`]).
///
/// Errors: as both.
pub fn read(layout: &Layout) -> Result<Committed> {
    let mut committed = crate::commit_log::read(&layout.commit_log())?;
    set_aside(layout, &mut committed)?;
    Ok(committed)
}

/// Moves the committed segments of `committed` that a power cut lost to `committed.own.lost`;
/// returns their ids (for a writer to record: [`crate::commit_log::ArrowRecord::Lost`]).
///
/// Errors: [`Error::Io`] naming a file that exists but cannot be read for a reason other than
/// its absence (a permission, a failing disk): that is no proof of a loss.
pub fn set_aside(layout: &Layout, committed: &mut Committed) -> Result<Vec<u64>> {
    let mut newly_lost = Vec::new();
    let synced_through = committed.own.synced_through;
    let mut kept = Vec::with_capacity(committed.segments.len());
    for entry in std::mem::take(&mut committed.segments) {
        let at_risk = entry.unsynced && synced_through.is_none_or(|through| entry.id > through);
        if at_risk && !is_whole(layout, &entry)? {
            newly_lost.push(entry.id);
            committed.own.lost.push(entry);
        } else {
            kept.push(entry);
        }
    }
    committed.segments = kept;
    Ok(newly_lost)
}

/// Whether the segment of `entry` and both its sidecars are in place as written: the segment of
/// the recorded size decodes, and the sidecars open with one entry per row.
fn is_whole(layout: &Layout, entry: &SegmentEntry) -> Result<bool> {
    let path = layout.segment(entry.id);
    let rows = entry.rows as usize;
    let whole = match std::fs::metadata(&path) {
        Ok(metadata) if metadata.len() != entry.bytes => false,
        Ok(_) => {
            let sums = row_sums::sums_path(&path);
            let keys = key_sidecar::sidecar_path(&path);
            survived(Segment::open(entry.id, &path).map(|_| true))?
                && survived(RowSums::open(&sums).map(|s| s.rows() == rows))?
                && survived(
                    KeySidecar::open(&keys).map(|s| s.rows() == rows && s.verify().is_ok()),
                )?
        }
        Err(e) if e.kind() == ErrorKind::NotFound => false,
        Err(e) => return Err(Error::io(&path, e)),
    };
    Ok(whole)
}

/// What a file that may be lost read as: `false` when it is missing or does not decode (a
/// power cut left it empty or torn), the check's verdict when it opened, and other errors as
/// they are.
fn survived(opened: Result<bool>) -> Result<bool> {
    match opened {
        Ok(verdict) => Ok(verdict),
        Err(Error::Corrupted { .. }) => Ok(false),
        Err(Error::Io { source, .. }) if source.kind() == ErrorKind::NotFound => Ok(false),
        Err(e) => Err(e),
    }
}
