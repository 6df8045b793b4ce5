//! The single-writer lock of a cache: an OS file lock on `<cache>/.stowage.lock`.

use super::open_no_follow;
use crate::{Error, IoResultExt, Result};
use std::fs::{File, OpenOptions, TryLockError};
use std::io::{Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

/// Proof that this handle is the only writer of a cache; the lock is released when it is dropped.
///
/// The lock is an exclusive, non-blocking OS lock (`flock` on unix, `LockFileEx` on Windows) on
/// `<cache>/.stowage.lock`. The OS drops it when the holding process dies, however it dies, so a
/// writer killed with `SIGKILL` never blocks the next one and there is no stale-lock cleanup. The
/// file also records the holder's pid for people investigating a [`Error::Locked`]; that pid is a
/// hint only (it may be stale or reused) and nothing relies on it.
///
/// Readers never take this lock and are never blocked by it.
///
/// The lock belongs to the open file, not to the process: a second `acquire` in the *same* process
/// also fails with [`Error::Locked`], so two handles of one program cannot both write.
///
/// A child process forked while the lock is held (a sibling thread spawning a program, a forked
/// DataLoader worker) shares that open file, so closing the file would not release the lock while
/// the child still has it. Dropping the lock therefore unlocks explicitly, which releases it for
/// every copy; a forked child dropping its copy of the handle does not unlock (it never owned the
/// lock), so it cannot take the lock away from its parent.
///
/// ```
/// use stowage_core::{Error, file_safety::WriterLock};
/// let cache = tempfile::tempdir()?;
/// let lock = WriterLock::acquire(cache.path())?;
/// assert!(matches!(WriterLock::acquire(cache.path()), Err(Error::Locked { .. })));
/// drop(lock);
/// let _again = WriterLock::acquire(cache.path())?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct WriterLock {
    // Held only for its lock, which `drop` releases.
    file: File,
    // The process that took the lock: only it releases it.
    owner_pid: u32,
    cache: PathBuf,
    lock_file: PathBuf,
}

impl Drop for WriterLock {
    fn drop(&mut self) {
        if std::process::id() == self.owner_pid {
            // Closing alone would leave the lock held by a forked child's copy of the file.
            let _ = self.file.unlock();
        }
    }
}

impl WriterLock {
    /// Name of the lock file inside the cache directory.
    pub const FILE_NAME: &'static str = ".stowage.lock";

    /// Takes the writer lock of the cache in `cache_dir`, without waiting.
    ///
    /// Creates the lock file if it is missing. The lock file is never removed: deleting it while
    /// another process is about to lock the old file would let two writers in.
    ///
    /// # Errors
    /// - [`Error::Locked`] when another process, or another handle in this process, holds it.
    /// - [`Error::Io`] naming the lock file when it cannot be created or locked (for example when
    ///   `cache_dir` does not exist), or when it is a symbolic link, which is never followed
    ///   ([`is_refused_symlink`](super::is_refused_symlink)).
    pub fn acquire(cache_dir: impl AsRef<Path>) -> Result<WriterLock> {
        let cache = cache_dir.as_ref().to_path_buf();
        let lock_file = cache.join(Self::FILE_NAME);
        // No truncation here: until we own the lock, the file (and the pid in it) is the holder's.
        // No link followed: the pid written below would truncate the file a link points to.
        let file = open_no_follow(
            OpenOptions::new().read(true).write(true).create(true).truncate(false),
            &lock_file,
        )
        .at(&lock_file)?;
        match file.try_lock() {
            Ok(()) => {}
            Err(TryLockError::WouldBlock) => return Err(Error::Locked { cache, lock_file }),
            Err(TryLockError::Error(err)) => return Err(Error::io(&lock_file, err)),
        }
        // Diagnostics only, so a failure to record the pid must not fail the acquisition.
        let _ = write_pid(&file);
        Ok(WriterLock { file, owner_pid: std::process::id(), cache, lock_file })
    }

    /// The pid recorded by the most recent holder of the cache's lock, if the file names one.
    ///
    /// A hint for error messages: the process may have exited (the lock is then free) and its pid
    /// may have been reused. Use [`WriterLock::acquire`] to find out whether the lock is held.
    pub fn holder_pid(cache_dir: impl AsRef<Path>) -> Option<u32> {
        let text = std::fs::read_to_string(cache_dir.as_ref().join(Self::FILE_NAME)).ok()?;
        text.trim().parse().ok()
    }

    /// The cache directory this lock guards.
    pub fn cache_dir(&self) -> &Path {
        &self.cache
    }

    /// The lock file, `<cache>/.stowage.lock`.
    pub fn lock_file(&self) -> &Path {
        &self.lock_file
    }
}

fn write_pid(mut file: &File) -> std::io::Result<()> {
    file.set_len(0)?;
    file.seek(SeekFrom::Start(0))?;
    writeln!(file, "{}", std::process::id())
}
