//! The files a reader keeps open or mapped, by position: all of them while they are few, a
//! bounded, least-recently-used set once they are many.
//!
//! The kernel allows a process about 65,530 memory maps (`vm.max_map_count`) and, by default,
//! 1,024 descriptors, so a reader that kept every segment or collection file it ever read mapped
//! could not read a cache of 100,000 files to the end. Up to a bound, files are therefore kept
//! *pinned*: opened once, read with no lock and no reference count. A reader with more files than
//! that switches, once and for good, to a bounded set in which a read takes a lock and shares the
//! file through an `Arc`, and opening one more closes the least recently used. A file closed while
//! a read uses it stays open until that read ends; a sample read from a map shares the map and
//! keeps it alive by itself.
//!
//! The switch happens only through `&mut self` (a reader growing by [`OpenSet::push`]), so no
//! borrowed pinned file can outlive it.
//!
//! ```
//! use stowage_core::open_set::OpenSet;
//! // Three files, at most two kept open once there are more than two.
//! let files = OpenSet::<String>::new(3, 2);
//! for position in [0, 1, 2, 0] {
//!     let opened = files.get_or_open(position, || Ok(format!("file {position}")))?;
//!     assert_eq!(*opened, format!("file {position}"));
//!     assert!(files.open_count() <= 2);
//! }
//! # Ok::<(), stowage_core::Error>(())
//! ```

use std::ops::Deref;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use crate::Result;
use lru::LruCache;

/// A default bound for a reader whose open files hold `maps_each` memory maps each: a quarter
/// of the kernel's limit on maps (`vm.max_map_count`) spread over them, the rest left to the
/// process, at least 64.
///
/// ```
/// assert!(stowage_core::open_set::default_bound(2) >= 64);
/// ```
pub fn default_bound(maps_each: usize) -> usize {
    (crate::process_limits::max_map_count() / 4 / maps_each.max(1)).max(64)
}

/// An open file (or anything a reader opens per file) borrowed from a pinned slot or shared
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

/// The open files of one reader, by position.
#[derive(Debug)]
pub struct OpenSet<T> {
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

impl<T> OpenSet<T> {
    /// `positions` files, none open yet, at most `bound` (at least 1) kept open once there are
    /// more files than that.
    pub fn new(positions: usize, bound: usize) -> OpenSet<T> {
        let bound = bound.max(1);
        let pinned = (0..positions).map(|_| OnceLock::new()).collect();
        let mut files = OpenSet { bound, mode: Mode::Pinned(pinned) };
        files.bound_if_needed();
        files
    }

    /// Adds a position after the last one.
    pub fn push(&mut self) {
        match &mut self.mode {
            Mode::Pinned(slots) => slots.push(OnceLock::new()),
            Mode::Bounded { positions, .. } => *positions += 1,
        }
        self.bound_if_needed();
    }

    /// Removes the last position (added by a [`OpenSet::push`] that is taken back).
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

    /// How many positions there are (open or not).
    pub fn len(&self) -> usize {
        match &self.mode {
            Mode::Pinned(slots) => slots.len(),
            Mode::Bounded { positions, .. } => *positions,
        }
    }

    /// Whether there is no position.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Adds positions after the last one until there are `positions` (none when there are
    /// already as many or more).
    pub fn grow_to(&mut self, positions: usize) {
        while self.len() < positions {
            self.push();
        }
    }

    /// The most files kept open once there are more.
    pub fn bound(&self) -> usize {
        self.bound
    }

    /// Whether reads go through the bounded set (the reader has more files than the bound).
    #[cfg(test)]
    fn is_bounded(&self) -> bool {
        matches!(self.mode, Mode::Bounded { .. })
    }

    /// Files open now.
    pub fn open_count(&self) -> usize {
        match &self.mode {
            Mode::Pinned(slots) => slots.iter().filter(|slot| slot.get().is_some()).count(),
            Mode::Bounded { open, .. } => lock(open).len(),
        }
    }

    /// File `position`: the open one, or `open()`'s (closing the least recently used one when
    /// the set is full). `open` runs without the lock, so reads of open files go on meanwhile;
    /// when two threads open the same file at once, one copy is kept.
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

    /// File `position` if it is open now (for a hint that must not open one).
    pub fn get_if_open(&self, position: usize) -> Option<Opened<'_, T>> {
        match &self.mode {
            Mode::Pinned(slots) => slots[position].get().map(Opened::Pinned),
            Mode::Bounded { open, .. } => {
                lock(open).peek(&position).map(|opened| Opened::Shared(Arc::clone(opened)))
            }
        }
    }

    /// Switches to the bounded set once there are more positions than the bound, keeping (up to
    /// the bound) the files already open.
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
    // file is opened again.
    set.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// Opens "file" `position` as its own number, counting the opens.
    fn opener(opens: &AtomicUsize, position: usize) -> impl FnOnce() -> Result<usize> + '_ {
        move || {
            opens.fetch_add(1, Ordering::Relaxed);
            Ok(position)
        }
    }

    #[test]
    fn few_files_stay_open_from_their_first_read() {
        let opens = AtomicUsize::new(0);
        let files = OpenSet::new(3, 3);
        for round in 0..2 {
            for position in 0..3 {
                let opened = files.get_or_open(position, opener(&opens, position)).unwrap();
                assert_eq!(*opened, position);
                assert!(matches!(opened, Opened::Pinned(_)), "round {round}");
            }
        }
        assert_eq!(opens.load(Ordering::Relaxed), 3, "each opened once");
        assert_eq!(files.open_count(), 3);
        assert!(!files.is_bounded());
    }

    #[test]
    fn many_files_keep_the_bound_and_close_the_least_recently_used() {
        let opens = AtomicUsize::new(0);
        let files = OpenSet::new(5, 2);
        assert!(files.is_bounded());
        let read = |position| *files.get_or_open(position, opener(&opens, position)).unwrap();
        assert_eq!((read(0), read(1), read(0), read(2)), (0, 1, 0, 2));
        // 1 was the least recently used: closed, so reading it opens it again; 0 stayed open.
        assert_eq!(files.open_count(), 2);
        assert!(files.get_if_open(1).is_none());
        assert!(files.get_if_open(0).is_some());
        assert_eq!(opens.load(Ordering::Relaxed), 3);
        read(1);
        assert_eq!(opens.load(Ordering::Relaxed), 4);
        for position in 0..5 {
            read(position);
            assert!(files.open_count() <= 2);
        }
    }

    #[test]
    fn a_closed_file_lives_while_a_read_holds_it() {
        let files = OpenSet::new(3, 1);
        let held = files.get_or_open(0, || Ok(vec![7u8; 4])).unwrap();
        files.get_or_open(1, || Ok(vec![8u8; 4])).unwrap();
        assert!(files.get_if_open(0).is_none(), "closed in the set");
        assert_eq!(*held, [7u8; 4], "still readable through the handle");
    }

    #[test]
    fn growing_past_the_bound_switches_once_and_keeps_what_is_open() {
        let opens = AtomicUsize::new(0);
        let mut files = OpenSet::new(2, 3);
        for position in 0..2 {
            files.get_or_open(position, opener(&opens, position)).unwrap();
        }
        files.push();
        assert!(!files.is_bounded());
        files.grow_to(4);
        files.grow_to(2);
        assert_eq!(files.len(), 4, "grow_to never shrinks");
        assert!(files.is_bounded(), "4 files, bound 3");
        assert_eq!(files.open_count(), 2, "the open ones were kept");
        files.get_or_open(0, opener(&opens, 0)).unwrap();
        assert_eq!(opens.load(Ordering::Relaxed), 2, "no reopen");
        files.get_or_open(3, opener(&opens, 3)).unwrap();
        files.pop();
        assert!(files.get_if_open(3).is_none(), "the popped position is closed");
    }

    #[test]
    fn a_failed_open_keeps_nothing() {
        for bound in [1, 10] {
            let files = OpenSet::<u8>::new(2, bound);
            let failed = files.get_or_open(0, || Err(crate::Error::invalid("no")));
            assert!(failed.is_err());
            assert_eq!(files.open_count(), 0);
            assert_eq!(*files.get_or_open(0, || Ok(5)).unwrap(), 5);
        }
    }

    #[test]
    fn the_default_bound_follows_the_kernels_map_limit() {
        assert!(default_bound(2) >= 64);
        assert!(default_bound(1) >= default_bound(2));
    }
}
