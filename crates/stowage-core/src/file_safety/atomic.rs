//! Atomic whole-file replace: readers and crashes see the old bytes or the new bytes, never a mix.

use super::open_no_follow;
use crate::{Error, IoResultExt, Result};
use std::ffi::{OsStr, OsString};
use std::fs::{self, File, OpenOptions};
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// Distinguishes temp files of concurrent writes from one process (threads, or a retry after a
/// stale temp file with our pid).
static TEMP_COUNTER: AtomicU64 = AtomicU64::new(0);

/// Replaces the file at `path` with `bytes`, atomically and durably.
///
/// Writes a temp file `.<name>.tmp-<pid>-<n>` in the same directory (a rename is only atomic
/// within one filesystem), fsyncs it, renames it over `path`, then fsyncs the directory so the
/// rename itself survives a power loss. A reader or a crash at any point sees either the complete
/// old file (or no file) or the complete new one.
///
/// # Errors
/// [`Error::Io`] naming `path` (or its directory for the final directory fsync); the temp file is
/// removed on every error. [`Error::InvalidArgument`] when `path` has no file name.
///
/// A symlink at `path` is replaced by a regular file, not followed. A crash before the rename can
/// leave a `.<name>.tmp-*` file behind; nothing ever reads it, and the cache's next writer
/// removes it ([`remove_abandoned_temps`](super::remove_abandoned_temps)).
///
/// ```
/// let dir = tempfile::tempdir()?;
/// let path = dir.path().join("schema.json");
/// stowage_core::file_safety::atomic_write(&path, b"{}")?;
/// stowage_core::file_safety::atomic_write(&path, b"{\"v\":2}")?;
/// assert_eq!(std::fs::read(&path)?, b"{\"v\":2}");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn atomic_write(path: impl AsRef<Path>, bytes: &[u8]) -> Result<()> {
    atomic_write_with(path, |out| out.write_all(bytes))
}

/// Like [`atomic_write`], but the content is streamed by `write` into a buffered temp file.
///
/// `write` need not flush: the buffer is flushed (and any error reported) before the fsync. When
/// `write` returns an error or panics, the old file stays untouched and the temp file is removed.
///
/// ```
/// use std::io::Write;
/// let dir = tempfile::tempdir()?;
/// let path = dir.path().join("keys.txt");
/// stowage_core::file_safety::atomic_write_with(&path, |out| {
///     for key in ["a", "b"] {
///         writeln!(out, "{key}")?;
///     }
///     Ok(())
/// })?;
/// assert_eq!(std::fs::read_to_string(&path)?, "a\nb\n");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn atomic_write_with<F>(path: impl AsRef<Path>, write: F) -> Result<()>
where
    F: FnOnce(&mut BufWriter<File>) -> io::Result<()>,
{
    let path = path.as_ref();
    let name = path.file_name().ok_or_else(|| {
        Error::invalid(format!("atomic write needs a file path, got {}", path.display()))
    })?;
    let dir = parent_dir(path);
    let (temp, file) = create_temp(dir, name).at(path)?;
    // Removes the temp file on every early return and on a panic in `write`.
    let guard = TempGuard { path: &temp, armed: true };
    write_and_sync(file, write).at(path)?;
    fs::rename(&temp, path).at(path)?;
    guard.disarm();
    fsync_dir(dir)
}

/// Fsyncs a directory, making the creation, rename or removal of its entries durable.
///
/// Without it a power loss after a rename may bring back the old name (or lose a new file's name
/// entirely) even though the file's bytes were fsynced. A no-op on non-unix systems, where
/// directories cannot be opened for syncing; filesystems that cannot sync directories (`EINVAL`)
/// are accepted too.
///
/// ```
/// let dir = tempfile::tempdir()?;
/// stowage_core::file_safety::fsync_dir(dir.path())?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
///
/// # Errors
/// [`Error::Io`] naming `dir`.
pub fn fsync_dir(dir: impl AsRef<Path>) -> Result<()> {
    let dir = dir.as_ref();
    #[cfg(unix)]
    {
        let handle = File::open(dir).at(dir)?;
        match handle.sync_all() {
            // EINVAL: this filesystem cannot sync directories; there is nothing more to do.
            Err(err) if err.kind() != io::ErrorKind::InvalidInput => Err(Error::io(dir, err)),
            _ => Ok(()),
        }
    }
    #[cfg(not(unix))]
    {
        let _ = dir;
        Ok(())
    }
}

/// The directory holding `path`; `.` for a bare file name.
pub(crate) fn parent_dir(path: &Path) -> &Path {
    match path.parent() {
        Some(parent) if !parent.as_os_str().is_empty() => parent,
        _ => Path::new("."),
    }
}

pub(crate) fn create_temp(dir: &Path, name: &OsStr) -> io::Result<(PathBuf, File)> {
    create_temp_opened(dir, name, false)
}

/// [`create_temp`], opened for reading too (a file written and then read back).
pub(crate) fn create_temp_read_write(dir: &Path, name: &OsStr) -> io::Result<(PathBuf, File)> {
    create_temp_opened(dir, name, true)
}

fn create_temp_opened(dir: &Path, name: &OsStr, read: bool) -> io::Result<(PathBuf, File)> {
    let pid = std::process::id();
    let mut attempts = 0;
    loop {
        let n = TEMP_COUNTER.fetch_add(1, Ordering::Relaxed);
        let mut temp_name = OsString::from(".");
        temp_name.push(name);
        temp_name.push(format!(".tmp-{pid}-{n}"));
        let temp = dir.join(temp_name);
        // `create_new`: never write into a file someone else (a dead process that had our pid) left.
        // (`create_new` never follows a link either; `open_no_follow` says so for every writer.)
        match open_no_follow(OpenOptions::new().read(read).write(true).create_new(true), &temp) {
            Ok(file) => return Ok((temp, file)),
            Err(err) if err.kind() == io::ErrorKind::AlreadyExists && attempts < 64 => {
                attempts += 1
            }
            Err(err) => return Err(err),
        }
    }
}

fn write_and_sync<F>(file: File, write: F) -> io::Result<()>
where
    F: FnOnce(&mut BufWriter<File>) -> io::Result<()>,
{
    let mut out = BufWriter::new(file);
    write(&mut out)?;
    let file = out.into_inner().map_err(io::IntoInnerError::into_error)?;
    // The bytes must be on disk before the rename publishes them, or a crash could publish an
    // empty or partial file under the real name.
    file.sync_all()
}

struct TempGuard<'a> {
    path: &'a Path,
    armed: bool,
}

impl TempGuard<'_> {
    fn disarm(mut self) {
        self.armed = false;
    }
}

impl Drop for TempGuard<'_> {
    fn drop(&mut self) {
        if self.armed {
            let _ = fs::remove_file(self.path);
        }
    }
}
