//! The bounded, least-recently-used set of a generic cache's open segments.
//!
//! An open segment holds a read-only map and, unless it is detached (every column read from the
//! map: stowage's own layout), a libhdf5 file (one descriptor). Kept open for every segment, a
//! cache of more segments than the descriptor limit (1,024 by default) could be neither written
//! nor opened, nor one of more segments than the kernel allows maps. So at most
//! [`crate::Hdf5Options::max_open_segments`] hold a libhdf5 file (opens under way included) and
//! at most [`crate::Hdf5Options::max_mapped_segments`] are open in all; a `get` from another one
//! opens it, closing the least recently used (holding a file, when that is the bound reached),
//! and a segment evicted and used again is opened again.
//!
//! Integrity on first use: a segment's metadata regions (or, for an entry without them, the
//! whole file) are checked against the commit log when it is first opened (`Segment::open`), and
//! what was checked and under which [`crate::segment::FileStamp`] is remembered
//! ([`Verified`]): reopened after eviction, a file with the same stamp is not checked again,
//! one whose stamp changed is. Readers share a segment through an `Arc`, so one evicted while a
//! `get` reads it closes when that read ends.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, TryLockError};

use stowage_core::cold_reads::{ColdReadAdvice, ColdReadAdvisor};
use stowage_core::{Result, Schema};

use crate::Hdf5Options;
use crate::backend::segment_path;
use crate::commit_log::SegmentEntry;
use crate::segment::{Segment, Verified};

/// The open segments of one handle, and the stamps their checksums were verified under.
pub(crate) struct OpenSegments {
    dir: PathBuf,
    /// Most segments holding a libhdf5 file (a descriptor), opens under way included.
    files_bound: usize,
    /// Most segments open in all (each holds a map).
    bound: usize,
    state: Mutex<State>,
    /// Signalled when an open ends: a `get` waiting for a free place tries again.
    opened: Condvar,
    /// Set when segments are opened for reads of a row at a time ([`Segment::open`]'s
    /// `random`): the advisor they share.
    random: Option<Arc<ColdReadAdvisor>>,
}

#[derive(Default)]
struct State {
    /// Incremented at every use: the least recently used segment has the smallest `used`.
    clock: u64,
    /// Open segments by their number (position in the commit log), with their last use.
    open: HashMap<usize, (Arc<Segment>, u64)>,
    /// Open segments that hold a libhdf5 file (not detached).
    attached: usize,
    /// Segments being opened now, outside the lock: each holds a place within the bound.
    opening: usize,
    /// By segment number: the stamp under which its checksum last matched, if it did.
    verified: Vec<Option<Verified>>,
}

/// A place within the bound held while a segment is opened outside the lock. `get` gives it back
/// itself, in the critical section that adds the segment; dropped before that (a panic in the
/// open), it gives it back here. Either way the waiters are woken.
struct Opening<'a> {
    segments: &'a OpenSegments,
    given_back: bool,
}

impl Drop for Opening<'_> {
    fn drop(&mut self) {
        if !self.given_back {
            self.segments.state().opening -= 1;
        }
        self.segments.opened.notify_all();
    }
}

impl OpenSegments {
    /// No segment open yet, of the cache in `dir`, within the bounds of `options` (each at
    /// least 1).
    pub fn new(dir: &Path, options: &Hdf5Options) -> OpenSegments {
        OpenSegments {
            dir: dir.to_path_buf(),
            files_bound: options.max_open_segments.max(1),
            bound: options.max_mapped_segments.max(1),
            state: Mutex::default(),
            opened: Condvar::new(),
            random: None,
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        // A panic while the lock was held leaves nothing half-updated that matters: at worst a
        // segment is opened (and hashed) again.
        self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Segments opened from now on are read a row at a time (`random`) or with the kernel's
    /// read-around ([`Segment::open`]).
    pub fn set_random_access(&mut self, random: bool) {
        self.random = random.then(|| Arc::new(ColdReadAdvisor::new(ColdReadAdvice::Adaptive)));
    }

    /// Whether segments are opened for reads of a row at a time.
    pub fn random_access(&self) -> bool {
        self.random.is_some()
    }

    /// Those of the segments `numbers` that are not open now.
    pub fn closed(&self, numbers: &[usize]) -> Vec<usize> {
        let state = self.state();
        numbers.iter().copied().filter(|number| !state.open.contains_key(number)).collect()
    }

    /// Adds the next committed segment (number = segments added so far), its checksum verified
    /// under `stamp` when known (the writer hashed the file it just published).
    pub fn push(&self, verified: Option<Verified>) {
        self.state().verified.push(verified);
    }

    /// Segment `number`, committed as `entry`: the open one, or opened now (checked as
    /// [`Segment::open`] does, its checksum only when its stamp changed), closing the least
    /// recently used when the bound is reached.
    ///
    /// The open itself (a hash, libhdf5's open) runs outside the lock, so `get`s of open
    /// segments from other threads go on meanwhile; it holds a place within the bound, and a
    /// `get` that finds every place taken by opens waits for one to end.
    pub fn get(
        &self,
        number: usize,
        entry: &SegmentEntry,
        schema: &Schema,
    ) -> Result<Arc<Segment>> {
        let mut state = self.state();
        let verified = loop {
            state.clock += 1;
            let now = state.clock;
            if let Some((segment, used)) = state.open.get_mut(&number) {
                *used = now;
                return Ok(Arc::clone(segment));
            }
            // Closed first: never more than the bounds open, even for an instant (the bound on
            // files may be the last descriptors the process has). An open under way holds a
            // file until it detaches.
            while state.attached + state.opening >= self.files_bound && state.close_oldest(true) {}
            while state.open.len() + state.opening >= self.bound && state.close_oldest(false) {}
            if state.attached + state.opening < self.files_bound
                && state.open.len() + state.opening < self.bound
            {
                state.opening += 1;
                break state.verified.get(number).copied().flatten();
            }
            // Every place is taken by opens under way (another thread's may be this segment).
            state = self.opened.wait(state).unwrap_or_else(|poisoned| poisoned.into_inner());
        };
        drop(state);
        let mut place = Opening { segments: self, given_back: false };
        let path = segment_path(&self.dir, entry.id);
        let opened = Segment::open(&path, schema, entry, verified, false, self.random.as_ref());
        let mut state = self.state();
        // The place becomes the open segment's, in this same critical section (or is free).
        state.opening -= 1;
        place.given_back = true;
        let (segment, stamp) = opened?;
        if let Some(slot) = state.verified.get_mut(number) {
            *slot = Some(stamp);
        }
        state.clock += 1;
        let now = state.clock;
        // Another thread may have opened the same segment meanwhile: one copy is kept.
        let segment = match state.open.get_mut(&number) {
            Some((kept, used)) => {
                *used = now;
                Arc::clone(kept)
            }
            None => {
                let segment = Arc::new(segment);
                state.attached += usize::from(!segment.is_detached());
                state.open.insert(number, (Arc::clone(&segment), now));
                segment
            }
        };
        drop(state);
        drop(place); // wakes the waiters
        Ok(segment)
    }

    /// Segment `number` when it is open and read without libhdf5 ([`Segment::is_detached`]),
    /// found without waiting: `None` when it is not, or when another thread holds the lock of
    /// the open segments now (one may close a segment under it, which calls libhdf5).
    pub fn ready(&self, number: usize) -> Option<Arc<Segment>> {
        let mut state = match self.state.try_lock() {
            Ok(state) => state,
            Err(TryLockError::Poisoned(poisoned)) => poisoned.into_inner(),
            Err(TryLockError::WouldBlock) => return None,
        };
        state.clock += 1;
        let now = state.clock;
        let (segment, used) = state.open.get_mut(&number)?;
        if !segment.is_detached() {
            return None;
        }
        *used = now;
        Some(Arc::clone(segment))
    }

    /// Segments open now.
    #[cfg(test)]
    pub fn open_count(&self) -> usize {
        self.state().open.len()
    }
}

impl State {
    /// Closes the least recently used open segment (one holding a libhdf5 file when
    /// `holding_a_file`); `false` when there is none.
    fn close_oldest(&mut self, holding_a_file: bool) -> bool {
        let oldest = self
            .open
            .iter()
            .filter(|(_, (segment, _))| !holding_a_file || !segment.is_detached())
            .min_by_key(|(_, (_, used))| *used)
            .map(|(&number, _)| number);
        let Some(closed) = oldest.and_then(|number| self.open.remove(&number)) else {
            return false;
        };
        self.attached -= usize::from(!closed.0.is_detached());
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Hdf5Backend;
    use crate::commit_log;
    use stowage_core::file_safety::AppendLog;
    use stowage_core::{Backend, DType, Error, Sample, ShapeRule, Tensor};

    /// A cache of `n` segments of one sample each; its schema and committed segments.
    fn cache(dir: &Path, n: u8) -> (Schema, Vec<SegmentEntry>) {
        let schema = Schema::new().tensor("x", DType::U8, ShapeRule::Fixed(vec![1]));
        let mut cache = Hdf5Backend::create(dir, &schema).unwrap();
        for i in 0..n {
            let sample = Sample::new().with("x", Tensor::from_slice(&[1], &[i]).unwrap());
            cache.put(&format!("k{i}"), &sample).unwrap();
            cache.flush().unwrap();
        }
        drop(cache);
        let log = dir.join("stowage.log");
        let recovered = AppendLog::read_all(&log).unwrap();
        (schema, commit_log::interpret(&log, &recovered).unwrap().segments)
    }

    fn bounds(files: usize, maps: usize) -> Hdf5Options {
        Hdf5Options { max_open_segments: files, max_mapped_segments: maps }
    }

    /// Descriptors of this process open on files under `dir`.
    fn descriptors_under(dir: &Path) -> usize {
        let dir = dir.canonicalize().unwrap();
        std::fs::read_dir("/proc/self/fd")
            .unwrap()
            .filter_map(|fd| std::fs::read_link(fd.ok()?.path()).ok())
            .filter(|target| target.starts_with(&dir))
            .count()
    }

    fn opened(segments: &OpenSegments, number: usize, entry: &SegmentEntry, schema: &Schema) {
        let segment = segments.get(number, entry, schema).unwrap();
        assert_eq!(segment.keys().unwrap(), [format!("k{number}")]);
    }

    #[test]
    fn at_most_the_bound_is_open_and_the_least_recently_used_closes_first() {
        let dir = tempfile::tempdir().unwrap();
        let (schema, entries) = cache(dir.path(), 4);
        let segments = OpenSegments::new(dir.path(), &bounds(2, 2));
        for _ in &entries {
            segments.push(None);
        }
        opened(&segments, 0, &entries[0], &schema);
        opened(&segments, 1, &entries[1], &schema);
        opened(&segments, 0, &entries[0], &schema); // 1 is now the least recently used
        opened(&segments, 2, &entries[2], &schema);
        assert_eq!(segments.open_count(), 2);
        let open: Vec<usize> = segments.state().open.keys().copied().collect();
        assert!(open.contains(&0) && open.contains(&2), "{open:?}");
        // Closed and used again: opened again.
        opened(&segments, 1, &entries[1], &schema);
        opened(&segments, 3, &entries[3], &schema);
        assert_eq!(segments.open_count(), 2);
    }

    /// Segments of stowage's layout detach from libhdf5 once open: the bound on files does not
    /// close them, they hold no descriptor, and the bound on maps still holds.
    #[test]
    fn detached_segments_hold_no_descriptor_and_only_the_map_bound_closes_them() {
        let dir = tempfile::tempdir().unwrap();
        let (schema, entries) = cache(dir.path(), 6);
        let segments = OpenSegments::new(dir.path(), &bounds(1, 4));
        for _ in &entries {
            segments.push(None);
        }
        for (number, entry) in entries.iter().enumerate().take(4) {
            opened(&segments, number, entry, &schema);
        }
        assert_eq!((segments.open_count(), segments.state().attached), (4, 0));
        assert!(segments.state().open.values().all(|(segment, _)| segment.is_detached()));
        assert_eq!(descriptors_under(dir.path()), 0, "a detached segment holds no descriptor");
        opened(&segments, 4, &entries[4], &schema);
        opened(&segments, 5, &entries[5], &schema);
        assert_eq!(segments.open_count(), 4);
        let mut open: Vec<usize> = segments.state().open.keys().copied().collect();
        open.sort_unstable();
        assert_eq!(open, [2, 3, 4, 5], "the least recently used closed first");
        // Read again after closing: opened again, same answers.
        opened(&segments, 0, &entries[0], &schema);
    }

    #[test]
    fn threads_share_the_bounded_set() {
        let dir = tempfile::tempdir().unwrap();
        let (schema, entries) = cache(dir.path(), 6);
        let segments = OpenSegments::new(dir.path(), &bounds(2, 2));
        for _ in &entries {
            segments.push(None);
        }
        std::thread::scope(|scope| {
            for thread in 0..4usize {
                let (segments, schema, entries) = (&segments, &schema, &entries);
                scope.spawn(move || {
                    for i in 0..60usize {
                        let number = (i * 7 + thread * 3) % entries.len();
                        opened(segments, number, &entries[number], schema);
                        assert!(segments.open_count() <= 2);
                    }
                });
            }
        });
        let state = segments.state();
        assert_eq!(state.opening, 0);
        assert!(state.open.len() <= 2);
        assert!(state.verified.iter().all(Option::is_some), "every segment was verified");
    }

    #[test]
    fn a_verified_segment_is_hashed_again_only_when_its_file_changed() {
        let dir = tempfile::tempdir().unwrap();
        let (schema, entries) = cache(dir.path(), 2);
        let segments = OpenSegments::new(dir.path(), &bounds(1, 1));
        segments.push(None);
        segments.push(None);
        opened(&segments, 0, &entries[0], &schema);
        opened(&segments, 1, &entries[1], &schema); // closes segment 0
        // A commit log entry that no longer matches the file: not noticed while the file keeps
        // the stamp it was verified under (no second hash)...
        let wrong = SegmentEntry { xxh3: entries[0].xxh3 ^ 1, meta: None, ..entries[0].clone() };
        let segment = segments.get(0, &wrong, &schema).unwrap();
        assert_eq!(segment.key(0).unwrap(), "k0", "a key read alone is checked by its row");
        drop(segment);
        // ...and noticed by a handle that has not verified it.
        let fresh = OpenSegments::new(dir.path(), &bounds(1, 1));
        fresh.push(None);
        match fresh.get(0, &wrong, &schema).map(drop).unwrap_err() {
            Error::Corrupted { detail, .. } => assert!(detail.contains("xxh3"), "{detail}"),
            other => panic!("expected a checksum mismatch, got {other:?}"),
        }
        // The file rewritten in place, same size: its stamp changed, so it is hashed again.
        opened(&segments, 1, &entries[1], &schema); // closes segment 0
        let path = segment_path(dir.path(), entries[0].id);
        let mut bytes = std::fs::read(&path).unwrap();
        let last = bytes.len() - 1;
        bytes[last] ^= 0x01;
        std::thread::sleep(std::time::Duration::from_millis(20)); // a later mtime tick
        std::fs::write(&path, &bytes).unwrap();
        match segments.get(0, &entries[0], &schema).map(drop).unwrap_err() {
            Error::Corrupted { detail, .. } => assert!(detail.contains("xxh3"), "{detail}"),
            other => panic!("expected a checksum mismatch, got {other:?}"),
        }
    }
}
