//! Making several files durable at once.

use std::fs::File;
use std::path::Path;

use crate::error::{Error, IoResultExt, Result};
use crate::file_safety::fsync_dir;

/// `fdatasync`s every file of `files` and `fsync`s every directory of `dirs`, concurrently when
/// there are several, and returns the first error (naming its path) after all have finished.
///
/// One at a time, each sync waits for its own journal commit; started together, the filesystem
/// commits them in one transaction, so a flush that must make a data file, a checksum file and a
/// new directory entry durable pays about one commit instead of three. Use it for the files that a
/// later commit record (a manifest line, a log record) will point at; sync that record after this
/// returns.
///
/// ```
/// let dir = tempfile::tempdir()?;
/// let (a, b) = (dir.path().join("a.bin"), dir.path().join("b.bin"));
/// let (fa, fb) = (std::fs::File::create(&a)?, std::fs::File::create(&b)?);
/// stowage_core::file_safety::sync_together(&[(&a, &fa), (&b, &fb)], &[dir.path()])?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// # Errors
/// [`Error::Io`] naming the first file or directory whose sync failed.
pub fn sync_together(files: &[(&Path, &File)], dirs: &[&Path]) -> Result<()> {
    let sync_file = |&(path, file): &(&Path, &File)| file.sync_data().at(path);
    if files.len() + dirs.len() <= 1 {
        files.iter().try_for_each(sync_file)?;
        return dirs.iter().try_for_each(fsync_dir);
    }
    std::thread::scope(|scope| {
        let file_syncs: Vec<_> = files.iter().map(|f| scope.spawn(move || sync_file(f))).collect();
        let dir_syncs: Vec<_> = dirs.iter().map(|d| scope.spawn(move || fsync_dir(d))).collect();
        // Join every thread before returning, so no sync is still running after an early error.
        let results: Vec<Result<()>> = file_syncs
            .into_iter()
            .chain(dir_syncs)
            .map(|handle| {
                handle.join().unwrap_or_else(|_| Err(Error::invalid("an fsync thread panicked")))
            })
            .collect();
        results.into_iter().collect()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_directory_is_named_in_the_error() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.bin");
        let file = File::create(&path).unwrap();
        let missing = dir.path().join("gone");
        let err = sync_together(&[(&path, &file)], &[&missing]).unwrap_err();
        assert!(err.to_string().contains("gone"), "{err}");
        sync_together(&[(&path, &file)], &[dir.path()]).unwrap();
        sync_together(&[], &[]).unwrap();
    }
}
