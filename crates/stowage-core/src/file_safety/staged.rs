//! Publishing several new files together: each is written under a temporary name, all are made
//! durable in one batch, then renamed into place in order, and their directories fsynced once.

use std::collections::BTreeSet;
use std::fs::{self, File};
use std::io::{self, BufWriter};
use std::path::{Path, PathBuf};

use crate::file_safety::atomic::{create_temp, parent_dir};
use crate::file_safety::{fsync_dir, sync_together};
use crate::{Error, IoResultExt, Result};

/// Files written under temporary names and published together by [`StagedFiles::publish`].
///
/// [`crate::file_safety::atomic_write`] pays one file sync and one directory sync per file; a
/// writer publishing a data file and its sidecars pays them once for all of them here, because
/// [`sync_together`] lets the filesystem commit the syncs in one transaction. Files are renamed in
/// the order they were staged, so a reader (or a crash) that sees a later file also sees the
/// earlier ones by name: stage sidecars first and the file that makes them matter last.
///
/// With `durable` off nothing is synced (the files are still complete when renamed, so no reader
/// sees a partial file, but a power loss may lose or empty them), which is the durability of the
/// Python tools and what a caller that syncs at a later point wants.
///
/// Dropping it unpublished removes every temporary file.
///
/// ```
/// use std::io::Write;
/// use stowage_core::file_safety::StagedFiles;
/// let dir = tempfile::tempdir()?;
/// let (data, sidecar) = (dir.path().join("part.bin"), dir.path().join("part.idx"));
/// let mut staged = StagedFiles::new(true);
/// staged.stage(&sidecar, |out| out.write_all(b"index"))?;
/// staged.stage(&data, |out| out.write_all(b"payload"))?;
/// assert!(!data.exists(), "nothing is visible before publish");
/// staged.publish()?;
/// assert_eq!(std::fs::read(&data)?, b"payload");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct StagedFiles {
    durable: bool,
    /// (temporary path, final path, the open file), in staging order.
    files: Vec<(PathBuf, PathBuf, File)>,
}

impl StagedFiles {
    /// An empty set; `durable` says whether [`StagedFiles::publish`] syncs.
    pub fn new(durable: bool) -> StagedFiles {
        StagedFiles { durable, files: Vec::new() }
    }

    /// Writes the content `write` streams into a temporary file beside `path` (not yet visible
    /// as `path`).
    ///
    /// Errors: [`Error::InvalidArgument`] when `path` has no file name or is already staged;
    /// [`Error::Io`] naming `path` when the temporary file cannot be created or written (it is
    /// removed).
    pub fn stage<F>(&mut self, path: impl AsRef<Path>, write: F) -> Result<()>
    where
        F: FnOnce(&mut BufWriter<File>) -> io::Result<()>,
    {
        let path = path.as_ref();
        let name = path.file_name().ok_or_else(|| {
            Error::invalid(format!("staging needs a file path, got {}", path.display()))
        })?;
        if self.files.iter().any(|(_, staged, _)| staged == path) {
            return Err(Error::invalid(format!("{} is staged twice", path.display())));
        }
        let (temp, file) = create_temp(parent_dir(path), name).at(path)?;
        // Registered before writing so that a failure (or a panic in `write`) removes it on drop.
        self.files.push((temp, path.to_path_buf(), file));
        let (_, _, file) = self.files.last().expect("pushed just now");
        let mut out = BufWriter::new(file.try_clone().at(path)?);
        write(&mut out).and_then(|()| io::Write::flush(&mut out)).at(path)
    }

    /// Syncs every staged file (when durable), renames each over its final path in staging
    /// order, then fsyncs each directory involved once (when durable).
    ///
    /// Errors: [`Error::Io`] naming the file or directory that failed. Files renamed before the
    /// failure stay in place (each is complete); the others' temporary files are removed.
    pub fn publish(mut self) -> Result<()> {
        if self.durable {
            let files: Vec<(&Path, &File)> =
                self.files.iter().map(|(_, path, file)| (path.as_path(), file)).collect();
            sync_together(&files, &[])?;
        }
        let mut dirs = BTreeSet::new();
        while !self.files.is_empty() {
            let (temp, path, file) = self.files.remove(0);
            drop(file);
            if let Err(e) = fs::rename(&temp, &path) {
                let _ = fs::remove_file(&temp);
                return Err(Error::io(&path, e));
            }
            dirs.insert(parent_dir(&path).to_path_buf());
        }
        if self.durable {
            dirs.iter().try_for_each(fsync_dir)?;
        }
        Ok(())
    }
}

impl Drop for StagedFiles {
    fn drop(&mut self) {
        for (temp, _, _) in &self.files {
            let _ = fs::remove_file(temp);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn temp_files(dir: &Path) -> Vec<String> {
        fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|name| name.contains(".tmp-"))
            .collect()
    }

    #[test]
    fn dropping_unpublished_files_leaves_nothing_behind() {
        let dir = tempfile::tempdir().unwrap();
        let mut staged = StagedFiles::new(true);
        staged.stage(dir.path().join("a"), |out| out.write_all(b"a")).unwrap();
        let err = staged
            .stage(dir.path().join("b"), |_| Err(io::Error::other("encoder failed")))
            .unwrap_err();
        assert!(err.to_string().contains("encoder failed"), "{err}");
        assert_eq!(temp_files(dir.path()).len(), 2, "both staged until dropped");
        drop(staged);
        assert!(fs::read_dir(dir.path()).unwrap().next().is_none(), "nothing left");
    }

    #[test]
    fn publish_renames_every_file_with_or_without_syncing() {
        for durable in [true, false] {
            let dir = tempfile::tempdir().unwrap();
            let sub = dir.path().join("sub");
            fs::create_dir(&sub).unwrap();
            fs::write(dir.path().join("a"), b"old").unwrap();
            let mut staged = StagedFiles::new(durable);
            staged.stage(dir.path().join("a"), |out| out.write_all(b"new")).unwrap();
            staged.stage(sub.join("b"), |out| out.write_all(b"b")).unwrap();
            let twice = staged.stage(sub.join("b"), |out| out.write_all(b"again"));
            assert!(matches!(twice.unwrap_err(), Error::InvalidArgument { .. }));
            staged.publish().unwrap();
            assert_eq!(fs::read(dir.path().join("a")).unwrap(), b"new");
            assert_eq!(fs::read(sub.join("b")).unwrap(), b"b");
            assert!(temp_files(dir.path()).is_empty() && temp_files(&sub).is_empty());
        }
    }

    #[test]
    fn a_failed_rename_names_the_file_and_removes_what_was_not_published() {
        let dir = tempfile::tempdir().unwrap();
        let mut staged = StagedFiles::new(false);
        staged.stage(dir.path().join("first"), |out| out.write_all(b"1")).unwrap();
        let blocked = dir.path().join("blocked");
        staged.stage(&blocked, |out| out.write_all(b"2")).unwrap();
        staged.stage(dir.path().join("third"), |out| out.write_all(b"3")).unwrap();
        // A non-empty directory at the final path makes the rename fail.
        fs::create_dir_all(blocked.join("inside")).unwrap();
        let err = staged.publish().unwrap_err();
        assert!(err.to_string().contains("blocked"), "{err}");
        assert_eq!(fs::read(dir.path().join("first")).unwrap(), b"1", "published before");
        assert!(!dir.path().join("third").exists());
        assert!(temp_files(dir.path()).is_empty(), "{:?}", temp_files(dir.path()));
    }
}
