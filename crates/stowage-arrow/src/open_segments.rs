//! The segments a reader keeps mapped: all of them while they are few, a bounded,
//! least-recently-used set once they are many.
//!
//! An open segment holds two memory maps (the segment and its row checksums). The kernel allows a
//! process about 65,530 maps (`vm.max_map_count`), so a reader that kept every segment it ever
//! read mapped could not read a cache of 100,000 segments to the end. Up to
//! [`crate::ArrowOptions::max_open_segments`] segments are therefore kept *pinned*: opened once,
//! read with no lock and no reference count, as before this bound existed. A reader with more
//! segments than that switches, once and for good, to a bounded set in which a read takes a lock
//! and shares the segment through an `Arc`, and opening one more closes the least recently used.
//! A segment closed while a read uses it stays mapped until that read ends; a sample read from it
//! shares the map and keeps it alive by itself.
//!
//! The switch happens only through `&mut self` (a reader growing by [`OpenSegments::push`]), so no
//! borrowed pinned segment can outlive it.

use std::ops::Deref;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use lru::LruCache;
use stowage_core::Result;

/// The default of [`crate::ArrowOptions::max_open_segments`]: an eighth of the kernel's limit on
/// memory maps (two per segment, the rest left to the process), at least 64.
pub fn default_max_open_segments() -> usize {
    (stowage_core::process_limits::max_map_count() / 8).max(64)
}

/// A segment (or anything a reader opens per segment) borrowed from a pinned slot or shared
/// with the bounded set.
#[derive(Debug)]
pub enum Opened<'a, T> {
    /// Pinned: lives as long as the reader.
    Pinned(&'a T),
    /// From the bounded set: stays open while this handle lives, even once closed there.
    Shared(Arc<T>),
}

impl<T> Deref for Opened<'_, T> {
    type Target = T;

    fn deref(&self) -> &T {
        match self {
            Opened::Pinned(open) => open,
            Opened::Shared(open) => open,
        }
    }
}

/// The open segments of one reader, by position.
#[derive(Debug)]
pub struct OpenSegments<T> {
    bound: usize,
    mode: Mode<T>,
}

#[derive(Debug)]
enum Mode<T> {
    /// Every position opened at most once and kept.
    Pinned(Vec<OnceLock<T>>),
    /// At most `bound` open; `positions` counts every position.
    Bounded { positions: usize, open: Mutex<LruCache<usize, Arc<T>>> },
}

impl<T> OpenSegments<T> {
    /// `positions` segments, none open yet, at most `bound` (at least 1) kept open once there are
    /// more segments than that.
    pub fn new(positions: usize, bound: usize) -> OpenSegments<T> {
        let bound = bound.max(1);
        let pinned = (0..positions).map(|_| OnceLock::new()).collect();
        let mut segments = OpenSegments { bound, mode: Mode::Pinned(pinned) };
        segments.bound_if_needed();
        segments
    }

    /// Adds a position after the last one.
    pub fn push(&mut self) {
        match &mut self.mode {
            Mode::Pinned(slots) => slots.push(OnceLock::new()),
            Mode::Bounded { positions, .. } => *positions += 1,
        }
        self.bound_if_needed();
    }

    /// Removes the last position (added by a [`OpenSegments::push`] that is taken back).
    pub fn pop(&mut self) {
        match &mut self.mode {
            Mode::Pinned(slots) => {
                slots.pop();
            }
            Mode::Bounded { positions, open } => {
                *positions -= 1;
                lock(open).pop(positions);
            }
        }
    }

    /// The most segments kept open once there are more.
    pub fn bound(&self) -> usize {
        self.bound
    }

    /// Whether reads go through the bounded set (the reader has more segments than the bound).
    #[cfg(test)]
    fn is_bounded(&self) -> bool {
        matches!(self.mode, Mode::Bounded { .. })
    }

    /// Segments open now.
    pub fn open_count(&self) -> usize {
        match &self.mode {
            Mode::Pinned(slots) => slots.iter().filter(|slot| slot.get().is_some()).count(),
            Mode::Bounded { open, .. } => lock(open).len(),
        }
    }

    /// Segment `position`: the open one, or `open()`'s (closing the least recently used one when
    /// the set is full). `open` runs without the lock, so reads of open segments go on meanwhile;
    /// when two threads open the same segment at once, one copy is kept.
    ///
    /// Errors: `open`'s; nothing is kept then.
    pub fn get_or_open(
        &self,
        position: usize,
        open: impl FnOnce() -> Result<T>,
    ) -> Result<Opened<'_, T>> {
        match &self.mode {
            Mode::Pinned(slots) => {
                let slot = &slots[position];
                if let Some(opened) = slot.get() {
                    return Ok(Opened::Pinned(opened));
                }
                let opened = open()?;
                Ok(Opened::Pinned(slot.get_or_init(|| opened)))
            }
            Mode::Bounded { open: set, .. } => {
                if let Some(opened) = lock(set).get(&position) {
                    return Ok(Opened::Shared(Arc::clone(opened)));
                }
                let opened = Arc::new(open()?);
                let mut set = lock(set);
                if let Some(kept) = set.get(&position) {
                    return Ok(Opened::Shared(Arc::clone(kept)));
                }
                set.put(position, Arc::clone(&opened));
                Ok(Opened::Shared(opened))
            }
        }
    }

    /// Segment `position` if it is open now (for a hint that must not open one).
    pub fn get_if_open(&self, position: usize) -> Option<Opened<'_, T>> {
        match &self.mode {
            Mode::Pinned(slots) => slots[position].get().map(Opened::Pinned),
            Mode::Bounded { open, .. } => {
                lock(open).peek(&position).map(|opened| Opened::Shared(Arc::clone(opened)))
            }
        }
    }

    /// Switches to the bounded set once there are more positions than the bound, keeping (up to
    /// the bound) the segments already open.
    fn bound_if_needed(&mut self) {
        let Mode::Pinned(slots) = &mut self.mode else { return };
        if slots.len() <= self.bound {
            return;
        }
        let positions = slots.len();
        let capacity = std::num::NonZeroUsize::new(self.bound).expect("bound is at least 1");
        let mut open = LruCache::new(capacity);
        for (position, slot) in std::mem::take(slots).into_iter().enumerate() {
            if let Some(opened) = slot.into_inner() {
                open.put(position, Arc::new(opened));
            }
        }
        self.mode = Mode::Bounded { positions, open: Mutex::new(open) };
    }
}

fn lock<T>(set: &Mutex<LruCache<usize, Arc<T>>>) -> MutexGuard<'_, LruCache<usize, Arc<T>>> {
    // A panic while the lock was held leaves nothing half-updated that matters: at worst a
    // segment is opened again.
    set.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// Opens "segment" `position` as its own number, counting the opens.
    fn opener(opens: &AtomicUsize, position: usize) -> impl FnOnce() -> Result<usize> + '_ {
        move || {
            opens.fetch_add(1, Ordering::Relaxed);
            Ok(position)
        }
    }

    #[test]
    fn few_segments_stay_open_from_their_first_read() {
        let opens = AtomicUsize::new(0);
        let segments = OpenSegments::new(3, 3);
        for round in 0..2 {
            for position in 0..3 {
                let opened = segments.get_or_open(position, opener(&opens, position)).unwrap();
                assert_eq!(*opened, position);
                assert!(matches!(opened, Opened::Pinned(_)), "round {round}");
            }
        }
        assert_eq!(opens.load(Ordering::Relaxed), 3, "each opened once");
        assert_eq!(segments.open_count(), 3);
        assert!(!segments.is_bounded());
    }

    #[test]
    fn many_segments_keep_the_bound_and_close_the_least_recently_used() {
        let opens = AtomicUsize::new(0);
        let segments = OpenSegments::new(5, 2);
        assert!(segments.is_bounded());
        let read = |position| *segments.get_or_open(position, opener(&opens, position)).unwrap();
        assert_eq!((read(0), read(1), read(0), read(2)), (0, 1, 0, 2));
        // 1 was the least recently used: closed, so reading it opens it again; 0 stayed open.
        assert_eq!(segments.open_count(), 2);
        assert!(segments.get_if_open(1).is_none());
        assert!(segments.get_if_open(0).is_some());
        assert_eq!(opens.load(Ordering::Relaxed), 3);
        read(1);
        assert_eq!(opens.load(Ordering::Relaxed), 4);
        for position in 0..5 {
            read(position);
            assert!(segments.open_count() <= 2);
        }
    }

    #[test]
    fn a_closed_segment_lives_while_a_read_holds_it() {
        let segments = OpenSegments::new(3, 1);
        let held = segments.get_or_open(0, || Ok(vec![7u8; 4])).unwrap();
        segments.get_or_open(1, || Ok(vec![8u8; 4])).unwrap();
        assert!(segments.get_if_open(0).is_none(), "closed in the set");
        assert_eq!(*held, [7u8; 4], "still readable through the handle");
    }

    #[test]
    fn growing_past_the_bound_switches_once_and_keeps_what_is_open() {
        let opens = AtomicUsize::new(0);
        let mut segments = OpenSegments::new(2, 3);
        for position in 0..2 {
            segments.get_or_open(position, opener(&opens, position)).unwrap();
        }
        segments.push();
        assert!(!segments.is_bounded());
        segments.push();
        assert!(segments.is_bounded(), "4 segments, bound 3");
        assert_eq!(segments.open_count(), 2, "the open ones were kept");
        segments.get_or_open(0, opener(&opens, 0)).unwrap();
        assert_eq!(opens.load(Ordering::Relaxed), 2, "no reopen");
        segments.get_or_open(3, opener(&opens, 3)).unwrap();
        segments.pop();
        assert!(segments.get_if_open(3).is_none(), "the popped position is closed");
    }

    #[test]
    fn a_failed_open_keeps_nothing() {
        for bound in [1, 10] {
            let segments = OpenSegments::<u8>::new(2, bound);
            let failed = segments.get_or_open(0, || Err(stowage_core::Error::invalid("no")));
            assert!(failed.is_err());
            assert_eq!(segments.open_count(), 0);
            assert_eq!(*segments.get_or_open(0, || Ok(5)).unwrap(), 5);
        }
    }

    #[test]
    fn the_default_bound_follows_the_kernels_map_limit() {
        assert!(default_max_open_segments() >= 64);
    }
}
