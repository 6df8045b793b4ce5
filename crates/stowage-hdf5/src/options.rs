//! [`Hdf5Options`]: how a generic HDF5 cache ([`crate::Hdf5Backend`]) is opened.

/// Options of a generic HDF5 cache handle.
///
/// ```
/// use stowage_hdf5::Hdf5Options;
/// let options = Hdf5Options { max_open_segments: 16, ..Hdf5Options::default() };
/// let default = Hdf5Options::default().max_open_segments;
/// assert!((64..=512).contains(&default));
/// assert_eq!(options.max_open_segments, 16);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hdf5Options {
    /// Segment files kept open at once (each holds one file descriptor and one memory map),
    /// least recently used closed first; at least 1. By default a quarter of the process's
    /// descriptor limit (`RLIMIT_NOFILE`, soft), at least 64 and at most 512: 256 under the usual
    /// limit of 1,024, so that a random `get` over a cache of up to that many segments never
    /// reopens one, and the rest of the process keeps three quarters of its descriptors. A
    /// `get` from a closed segment opens it again: libhdf5's open and close and the segment's
    /// index table, about 0.2 ms, against about 2 us for a `get` from an open one (README,
    /// performance notes). Raise it, within the descriptor limit, for random reads over more
    /// segments.
    pub max_open_segments: usize,
}

/// The default [`Hdf5Options::max_open_segments`]: a quarter of the soft descriptor limit,
/// within 64..=512 (64 when the limit cannot be read).
fn default_open_segments() -> usize {
    let mut limit = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit writes only the struct it is given, which lives for the call.
    let read = unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } == 0;
    let soft = if read { usize::try_from(limit.rlim_cur).unwrap_or(usize::MAX) } else { 0 };
    (soft / 4).clamp(64, 512)
}

impl Default for Hdf5Options {
    fn default() -> Hdf5Options {
        Hdf5Options { max_open_segments: default_open_segments() }
    }
}
