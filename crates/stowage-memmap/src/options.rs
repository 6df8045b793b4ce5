//! Options of a memmap row cache reader.

/// How a [`crate::MemmapBackend`] opens a cache.
///
/// ```
/// let opts = stowage_memmap::MemmapOptions::default();
/// assert!(!opts.allow_trailing_bytes);
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct MemmapOptions {
    /// Open a finalized cache whose `.bin` files are longer than `n * row_bytes`.
    ///
    /// DNANet's reader silently ignores such trailing bytes. stowage refuses them by default:
    /// `open_read_only` returns `Error::Corrupted` naming the file, the expected and the actual
    /// size, because a finalized cache with extra bytes was not written the way its metadata says.
    /// With this option set the first `n` rows are served and `validate` still lists the trailing
    /// bytes as a problem. (An unfinished cache's bytes beyond its committed rows are a torn append
    /// and are always ignored.)
    pub allow_trailing_bytes: bool,
}
