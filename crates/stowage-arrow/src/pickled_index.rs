//! torchcachex's `index.pkl`, the one file of another writer stowage removes.
//!
//! torchcachex trusts `index.pkl` whenever it exists (it rebuilds its index from the segments only
//! when the file is missing or does not unpickle) and writes it back when its backend object is
//! destroyed, also after a run that only read. A segment stowage adds after that is invisible to
//! torchcachex until `index.pkl` goes. So a stowage writer removes it before it makes a new segment
//! visible (and before it deletes a leftover segment torchcachex may have indexed), and
//! torchcachex rebuilds it from the segments on its next start, as it does for a cache whose index
//! was lost. Read-only opens, `validate` and adoption leave it alone: they change no segment.

use stowage_core::file_safety::fsync_dir;
use stowage_core::{Error, Result};

use crate::layout::Layout;

/// Removes `index.pkl` of `layout` when it exists, then (when `durable`) fsyncs the cache
/// directory, so that the removal is on disk before what follows. Returns whether it existed.
///
/// Errors: [`Error::Io`] naming the file or directory.
///
/// ```
/// let dir = tempfile::tempdir()?;
/// let layout = stowage_arrow::test_support::layout::Layout::new(dir.path());
/// std::fs::write(layout.pickled_index(), b"\x80\x05}\x94.")?;
/// assert!(stowage_arrow::test_support::pickled_index::remove(&layout, true)?);
/// assert!(!layout.pickled_index().exists());
/// assert!(!stowage_arrow::test_support::pickled_index::remove(&layout, true)?);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn remove(layout: &Layout, durable: bool) -> Result<bool> {
    let path = layout.pickled_index();
    match std::fs::remove_file(&path) {
        Ok(()) => {
            if durable {
                fsync_dir(layout.root())?;
            }
            Ok(true)
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(Error::io(path, e)),
    }
}
