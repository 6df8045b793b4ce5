//! [`Hdf5Options`]: how a generic HDF5 cache ([`crate::Hdf5Backend`]) is opened.

/// Options of a generic HDF5 cache handle.
///
/// ```
/// use stowage_hdf5::Hdf5Options;
/// let options = Hdf5Options { max_open_segments: 16, ..Hdf5Options::default() };
/// let default = Hdf5Options::default();
/// assert!((64..=512).contains(&default.max_open_segments));
/// assert!(default.max_mapped_segments >= 64);
/// assert_eq!(options.max_open_segments, 16);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hdf5Options {
    /// Segment files kept open in libhdf5 at once (each holds one file descriptor and one
    /// memory map), least recently used closed first; at least 1. A segment of stowage's own
    /// layout holds neither once opened (its columns are read from its map alone: it is
    /// *detached*), so this bounds only segments of other layouts and the opens under way. By
    /// default a quarter of the process's descriptor limit (`RLIMIT_NOFILE`, soft), at least 64
    /// and at most 512: 256 under the usual limit of 1,024, so that the rest of the process
    /// keeps three quarters of its descriptors.
    pub max_open_segments: usize,
    /// Segments kept open at once in all (each holds one memory map, and what its reads decoded:
    /// 16 bytes per row of each column read, 8 per row for its checksums), least recently used
    /// closed first; at least 1. A `get` from a closed segment opens it again: libhdf5's open
    /// and close and the segment's index table, about 1 ms, against about 2 us for a `get` from
    /// an open one (README, performance notes). By default an eighth of the kernel's limit on
    /// memory maps (`vm.max_map_count`: 8,191 for the usual 65,530), at least 64.
    pub max_mapped_segments: usize,
}

/// The default [`Hdf5Options::max_open_segments`]: a quarter of the soft descriptor limit,
/// within 64..=512 (64 when the limit cannot be read).
fn default_open_segments() -> usize {
    let soft = stowage_core::process_limits::open_file_limit().unwrap_or(0);
    (soft / 4).clamp(64, 512)
}

impl Default for Hdf5Options {
    fn default() -> Hdf5Options {
        Hdf5Options {
            max_open_segments: default_open_segments(),
            max_mapped_segments: (stowage_core::process_limits::max_map_count() / 8).max(64),
        }
    }
}
