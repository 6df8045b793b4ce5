//! Giving a complete file its final name without ever replacing a file of that name.
//!
//! `rename(2)` replaces its target. Another writer that shares a cache and knows nothing of
//! stowage's lock (torchcachex takes segment ids from the directory listing) may create a file of
//! the name stowage chose between the choice and the publish; a rename would destroy it. Publishing is
//! instead a hard link from the temporary name to the final one, which fails with `EEXIST` when
//! the final name exists, atomically, then the removal of the temporary name.
//!
//! Why not `renameat2(RENAME_NOREPLACE)`: it needs `libc` and `unsafe` (std does not expose it),
//! it is Linux-only, and several filesystems refuse the flag (`EINVAL`). A hard link is in std,
//! is atomic on every POSIX filesystem, and has the same outcome. Its one cost: a crash between
//! the link and the removal leaves the temporary name beside the segment (one inode, two names);
//! temporary names are stowage's (`.segment_…tmp-…`, never a segment name) and the next writer
//! deletes them. On a filesystem without hard links (FAT, some FUSE filesystems) it falls back to
//! checking for the target and renaming, which only another writer running at that very moment
//! can race.

use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};

/// Names the complete file `temp` as `path` unless `path` exists; `temp` may keep its name too
/// (the caller removes it, ignoring that it may be gone).
///
/// Errors: [`io::ErrorKind::AlreadyExists`] when `path` exists; other I/O errors of the link.
///
/// ```
/// let dir = tempfile::tempdir()?;
/// let (temp, path) = (dir.path().join(".new.tmp"), dir.path().join("segment"));
/// std::fs::write(&temp, b"new")?;
/// std::fs::write(&path, b"another writer's")?;
/// let err = stowage_core::file_safety::publish_no_replace(&temp, &path).unwrap_err();
/// assert_eq!(err.kind(), std::io::ErrorKind::AlreadyExists);
/// assert_eq!(std::fs::read(&path)?, b"another writer's");
/// std::fs::remove_file(&path)?;
/// stowage_core::file_safety::publish_no_replace(&temp, &path)?;
/// assert_eq!(std::fs::read(&path)?, b"new");
/// # Ok::<(), std::io::Error>(())
/// ```
pub fn publish_no_replace(temp: &Path, path: &Path) -> io::Result<()> {
    match std::fs::hard_link(temp, path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Err(e),
        Err(e)
            if matches!(e.kind(), io::ErrorKind::Unsupported | io::ErrorKind::PermissionDenied) =>
        {
            // No hard links here: check, then rename.
            if path.try_exists()? {
                return Err(io::Error::new(
                    io::ErrorKind::AlreadyExists,
                    path.display().to_string(),
                ));
            }
            std::fs::rename(temp, path)
        }
        Err(e) => Err(e),
    }
}

/// Creates a new temporary file beside `path`, named `.<name>.tmp-<pid>-<n>` (the temporary names
/// a backend's next writer deletes), never opening a file that exists.
///
/// Errors: the I/O error of the creation; `InvalidInput` for a path without a file name.
///
/// ```
/// use std::io::Write;
/// let dir = tempfile::tempdir()?;
/// let (temp, mut file) = stowage_core::file_safety::create_temp_beside(&dir.path().join("a"))?;
/// file.write_all(b"new")?;
/// assert!(temp.file_name().unwrap().to_str().unwrap().starts_with(".a.tmp-"));
/// # Ok::<(), std::io::Error>(())
/// ```
pub fn create_temp_beside(path: &Path) -> io::Result<(PathBuf, File)> {
    let name = path.file_name().ok_or_else(|| {
        io::Error::new(io::ErrorKind::InvalidInput, "a temporary file needs a name")
    })?;
    super::atomic::create_temp(super::atomic::parent_dir(path), name)
}
