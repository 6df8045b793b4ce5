//! Giving a complete file its final name without ever replacing a file of that name.
//!
//! `rename(2)` replaces its target. torchcachex takes segment ids from the directory listing and
//! knows nothing of stowage's lock, so between stowage choosing an id and publishing the segment,
//! torchcachex may have written a segment of that id; a rename would destroy it. Publishing is
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

use std::ffi::OsString;
use std::fs::{File, OpenOptions};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

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
/// let err = stowage_arrow::no_replace::publish(&temp, &path).unwrap_err();
/// assert_eq!(err.kind(), std::io::ErrorKind::AlreadyExists);
/// assert_eq!(std::fs::read(&path)?, b"another writer's");
/// std::fs::remove_file(&path)?;
/// stowage_arrow::no_replace::publish(&temp, &path)?;
/// assert_eq!(std::fs::read(&path)?, b"new");
/// # Ok::<(), std::io::Error>(())
/// ```
pub fn publish(temp: &Path, path: &Path) -> io::Result<()> {
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

static TEMP_COUNTER: AtomicU64 = AtomicU64::new(0);

/// Creates a new temporary file beside `path`, named `.<name>.tmp-<pid>-<n>` (the temporary names
/// the next writer deletes), never opening a file that exists.
///
/// Errors: the I/O error of the creation.
pub fn create_temp(path: &Path) -> io::Result<(PathBuf, File)> {
    let dir = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let name = path.file_name().ok_or_else(|| {
        io::Error::new(io::ErrorKind::InvalidInput, "a temporary file needs a name")
    })?;
    let pid = std::process::id();
    let mut attempts = 0;
    loop {
        let n = TEMP_COUNTER.fetch_add(1, Ordering::Relaxed);
        let mut temp_name = OsString::from(".");
        temp_name.push(name);
        temp_name.push(format!(".tmp-{pid}-{n}"));
        let temp = dir.join(temp_name);
        match OpenOptions::new().write(true).create_new(true).open(&temp) {
            Ok(file) => return Ok((temp, file)),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists && attempts < 64 => attempts += 1,
            Err(e) => return Err(e),
        }
    }
}
