//! Temporaries a killed writer left behind: telling them from those a live writer is building,
//! and removing them.
//!
//! Every temporary stowage writes is named `.<name>.tmp-<pid>-<n>` beside the file `<name>` it
//! becomes. A writer killed before its rename leaves it, and nothing reads it again; the next
//! writer of the same files removes it with [`remove_abandoned_temps`]. Two cases:
//!
//! - Under a cache's [`WriterLock`](super::WriterLock) no other stowage writer is running, so every
//!   such temporary in the cache is abandoned (the temporaries of
//!   [`atomic_write`](super::atomic_write) and [`StagedFiles`](super::StagedFiles) carry no lock
//!   of their own).
//! - Without one (a file written in place of another tool's, which takes no stowage lock), the
//!   builder holds an OS lock on its temporary for as long as it lives
//!   ([`create_locked_temp_beside`]); the cleaner removes only temporaries whose lock it can take.
//!   The OS releases the lock when its holder dies, however it dies, so a lock nobody holds means
//!   a dead builder.
//!
//! The protocol, which makes a cleaner and a builder safe against each other at every step:
//! a name is removed only by a process holding the lock of the file it names, after checking
//! under that lock that the name still names that file. A builder creates its file (never
//! replacing one), locks it and checks that the name still names it (a cleaner may have removed
//! it in between; then it starts over under a new name): from then on no cleaner can remove it,
//! and the builder keeps the lock until its rename or its own removal of the name.

use std::fs::{self, File, Metadata, TryLockError};
use std::io;
use std::path::{Path, PathBuf};

use super::atomic::{create_temp, parent_dir};
use super::fsync_dir;
use crate::{Error, IoResultExt, Result};

/// The name of the file a temporary name stands for: `<name>` of `.<name>.tmp-<pid>-<n>`, or
/// `None` for any other name (`<pid>` and `<n>` decimal digits, `<name>` not empty).
///
/// ```
/// use stowage_core::file_safety::temp_target_name;
/// assert_eq!(temp_target_name(".schema.json.tmp-812-3"), Some("schema.json"));
/// assert_eq!(temp_target_name("schema.json.tmp-812-3"), None);
/// assert_eq!(temp_target_name(".segment_000002.arrow.tmp"), None);
/// assert_eq!(temp_target_name(".x.tmp-812-3a"), None);
/// ```
pub fn temp_target_name(temp_name: &str) -> Option<&str> {
    let (target, counters) = temp_name.strip_prefix('.')?.rsplit_once(".tmp-")?;
    let (pid, n) = counters.split_once('-')?;
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    (!target.is_empty() && digits(pid) && digits(n)).then_some(target)
}

/// Creates a new temporary file beside `path`, named `.<name>.tmp-<pid>-<n>` as
/// [`create_temp_beside`](super::create_temp_beside) names it, and takes a lock on it that tells
/// [`remove_abandoned_temps`] its builder is alive: the lock lasts as long as the returned file
/// stays open. Keep it open until the temporary is renamed or removed, and close it right after.
///
/// The lock is a shared `flock` (`LockFileEx` on Windows) on this descriptor. It belongs to the
/// descriptor, so another library opening and closing the same path (libhdf5 writing the
/// temporary by path) neither takes nor drops it; it is shared so that, in the instant between
/// the rename and the close, it refuses no reader of the published file that takes a shared lock
/// (libhdf5 does). It refuses writers that take an exclusive lock on that path, so a library that
/// writes the temporary must not lock it itself, or the builder lets go of the lock meanwhile
/// ([`relock_temp`]).
///
/// Errors: the I/O error of the creation or the lock (after removing the file);
/// `InvalidInput` for a path without a file name.
///
/// ```
/// use stowage_core::file_safety::{create_locked_temp_beside, remove_abandoned_temps};
/// let dir = tempfile::tempdir()?;
/// let (temp, file) = create_locked_temp_beside(&dir.path().join("data.h5"))?;
/// // Its builder is alive: a cleaner leaves it.
/// assert!(remove_abandoned_temps(dir.path(), |name| name == "data.h5")?.is_empty());
/// drop(file);
/// // Nobody holds its lock any more: it is removed.
/// assert_eq!(remove_abandoned_temps(dir.path(), |name| name == "data.h5")?, [temp.clone()]);
/// assert!(!temp.exists());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn create_locked_temp_beside(path: &Path) -> io::Result<(PathBuf, File)> {
    let name = path.file_name().ok_or_else(|| {
        io::Error::new(io::ErrorKind::InvalidInput, "a temporary file needs a name")
    })?;
    let dir = parent_dir(path);
    for _ in 0..64 {
        let (temp, file) = create_temp(dir, name)?;
        match lock_if_still_named(&temp, file) {
            Ok(Some(file)) => return Ok((temp, file)),
            Ok(None) => {}
            Err(err) => {
                // Only this process creates names with its pid: this one is ours to remove.
                let _ = fs::remove_file(&temp);
                return Err(err);
            }
        }
        // A cleaner found it between the creation and the lock, and removes it (or has): start
        // over under a new name.
    }
    Err(io::Error::other(format!(
        "no temporary file for {} could be created and locked in 64 attempts",
        path.display()
    )))
}

/// Takes the lock of [`create_locked_temp_beside`] again on its temporary `temp`, after the
/// builder let go of it while a library that locks the file itself (exclusively, which refuses
/// this lock) had it open; that library's lock told cleaners meanwhile that the build lives.
/// `None` when the build was taken for an abandoned one in between: `temp` is gone, or a cleaner
/// holds its lock and removes it. Keep the returned file open as the first one.
///
/// Errors: the I/O errors of opening, locking or examining `temp`.
///
/// ```
/// use stowage_core::file_safety::{create_locked_temp_beside, relock_temp, remove_abandoned_temps};
/// let dir = tempfile::tempdir()?;
/// let (temp, file) = create_locked_temp_beside(&dir.path().join("data.h5"))?;
/// drop(file); // another library has the file open, and locked, meanwhile
/// let file = relock_temp(&temp)?.expect("nobody removed it");
/// assert!(remove_abandoned_temps(dir.path(), |name| name == "data.h5")?.is_empty());
/// drop(file);
/// remove_abandoned_temps(dir.path(), |name| name == "data.h5")?;
/// assert!(relock_temp(&temp)?.is_none(), "removed: the build must not be published");
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn relock_temp(temp: &Path) -> io::Result<Option<File>> {
    match File::open(temp) {
        Ok(file) => lock_if_still_named(temp, file),
        Err(err) if err.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(err) => Err(err),
    }
}

/// Takes the builder's lock on `file`, opened from `temp`, and checks that `temp` still names
/// it; `None` when a cleaner got there first (it holds the lock, or removed the name).
fn lock_if_still_named(temp: &Path, file: File) -> io::Result<Option<File>> {
    match file.try_lock_shared() {
        Ok(()) => {}
        Err(TryLockError::WouldBlock) => return Ok(None),
        Err(TryLockError::Error(err)) => return Err(err),
    }
    match fs::symlink_metadata(temp) {
        Ok(named) if same_file(&named, &file.metadata()?) => Ok(Some(file)),
        Ok(_) => Ok(None),
        Err(err) if err.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(err) => Err(err),
    }
}

/// Removes the temporaries in `dir` that no live writer is building: every regular file named
/// `.<name>.tmp-<pid>-<n>` whose `<name>` `is_target` accepts and whose lock this process can
/// take. A temporary made by [`create_locked_temp_beside`] whose builder is alive (in any
/// process, this one included) is left; so is one this process may not open (another user's).
/// Returns the paths removed; `dir` is fsynced when there are any. A missing `dir` holds none.
///
/// Temporaries made without a lock ([`atomic_write`](super::atomic_write),
/// [`StagedFiles`](super::StagedFiles), [`create_temp_beside`](super::create_temp_beside)) are
/// always taken for abandoned: call it for those only while holding the writer lock of the
/// directory's cache, so that no writer is making one. Accept only names the caller's own
/// writer writes, so that no other program's file is ever removed.
///
/// Errors: [`Error::Io`] naming `dir` when it cannot be listed, or the file that could not be
/// examined or removed.
///
/// ```
/// use stowage_core::file_safety::remove_abandoned_temps;
/// let dir = tempfile::tempdir()?;
/// // As a writer killed inside `atomic_write("schema.json", …)` leaves it.
/// std::fs::write(dir.path().join(".schema.json.tmp-4242-0"), b"partial")?;
/// std::fs::write(dir.path().join(".notes.txt.tmp-4242-1"), b"another program's")?;
/// let removed = remove_abandoned_temps(dir.path(), |name| name == "schema.json")?;
/// assert_eq!(removed, [dir.path().join(".schema.json.tmp-4242-0")]);
/// assert!(dir.path().join(".notes.txt.tmp-4242-1").exists());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn remove_abandoned_temps(
    dir: impl AsRef<Path>,
    is_target: impl Fn(&str) -> bool,
) -> Result<Vec<PathBuf>> {
    let dir = dir.as_ref();
    let entries = match fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(err) if err.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(err) => return Err(Error::io(dir, err)),
    };
    let mut removed = Vec::new();
    for entry in entries {
        let entry = entry.at(dir)?;
        let name = entry.file_name();
        if !name.to_str().and_then(temp_target_name).is_some_and(&is_target) {
            continue;
        }
        let path = entry.path();
        // A directory, symlink or device of that name is nothing stowage made.
        if !entry.file_type().at(&path)?.is_file() {
            continue;
        }
        if remove_if_abandoned(&path)? {
            removed.push(path);
        }
    }
    if !removed.is_empty() {
        fsync_dir(dir)?;
    }
    Ok(removed)
}

/// Removes `path` if its lock can be taken and it is still the file locked; whether it did.
fn remove_if_abandoned(path: &Path) -> Result<bool> {
    match File::open(path) {
        Ok(file) => remove_if_unlocked(path, file),
        // Gone (another cleaner, its builder's rename), or not ours to judge.
        Err(err)
            if matches!(err.kind(), io::ErrorKind::NotFound | io::ErrorKind::PermissionDenied) =>
        {
            Ok(false)
        }
        Err(err) => Err(Error::io(path, err)),
    }
}

/// Removes `path`, which `file` was opened from, if `file`'s lock can be taken and `path` still
/// names it; whether it did.
fn remove_if_unlocked(path: &Path, file: File) -> Result<bool> {
    match file.try_lock() {
        Ok(()) => {}
        Err(TryLockError::WouldBlock) => return Ok(false),
        Err(TryLockError::Error(err)) => return Err(Error::io(path, err)),
    }
    // The name may have moved on since it was opened: removed by another cleaner, then taken by
    // a new builder (the pid of a dead one reused). Only the file locked may be removed.
    let named = match fs::symlink_metadata(path) {
        Ok(named) => named,
        Err(err) if err.kind() == io::ErrorKind::NotFound => return Ok(false),
        Err(err) => return Err(Error::io(path, err)),
    };
    if !same_file(&named, &file.metadata().at(path)?) {
        return Ok(false);
    }
    match fs::remove_file(path) {
        Ok(()) => Ok(true),
        Err(err) if err.kind() == io::ErrorKind::NotFound => Ok(false),
        Err(err) => Err(Error::io(path, err)),
    }
    // `file` closes here, releasing the lock only once the name is gone.
}

#[cfg(unix)]
fn same_file(a: &Metadata, b: &Metadata) -> bool {
    use std::os::unix::fs::MetadataExt;
    (a.dev(), a.ino()) == (b.dev(), b.ino())
}

#[cfg(not(unix))]
fn same_file(a: &Metadata, b: &Metadata) -> bool {
    // No stable file identity in std here; Windows does not let a name open elsewhere be
    // removed and re-created the way the check above guards against.
    a.is_file() && b.is_file()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        names
    }

    #[test]
    fn temp_names_are_parsed_strictly() {
        assert_eq!(temp_target_name(".a.tmp-1-2"), Some("a"));
        assert_eq!(temp_target_name(".a.tmp-1-2.tmp-3-4"), Some("a.tmp-1-2"));
        for other in [
            ".tmp-1-2",
            "..tmp-1-2",
            ".a.tmp-1",
            ".a.tmp--2",
            ".a.tmp-1-",
            ".a.tmp-1-2-3",
            ".a.tmp-+1-2",
            "a.tmp-1-2",
            ".segment_000001.arrow.tmp",
            "segment_000001.arrow.tmp",
            "index.pkl.tmp",
        ] {
            assert_eq!(temp_target_name(other), None, "{other}");
        }
    }

    #[test]
    fn only_unlocked_temporaries_of_accepted_names_are_removed() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("data.h5");
        let (live, _held) = create_locked_temp_beside(&target).unwrap();
        let (dead, file) = create_locked_temp_beside(&target).unwrap();
        drop(file);
        // A killed `atomic_write` of the same name, and files of other names and kinds.
        fs::write(dir.path().join(".data.h5.tmp-99999999-0"), b"").unwrap();
        fs::write(dir.path().join(".other.h5.tmp-99999999-0"), b"").unwrap();
        fs::write(dir.path().join("data.h5.tmp-1-1"), b"").unwrap();
        fs::create_dir(dir.path().join(".data.h5.tmp-1-2")).unwrap();
        #[cfg(unix)]
        std::os::unix::fs::symlink(&live, dir.path().join(".data.h5.tmp-1-3")).unwrap();

        let mut removed = remove_abandoned_temps(dir.path(), |name| name == "data.h5").unwrap();
        removed.sort();
        let mut expected = vec![dead.clone(), dir.path().join(".data.h5.tmp-99999999-0")];
        expected.sort();
        assert_eq!(removed, expected);
        let left = names(dir.path());
        let live_name = live.file_name().unwrap().to_str().unwrap().to_owned();
        assert!(left.contains(&live_name), "the live builder's temporary stays: {left:?}");
        for kept in [".other.h5.tmp-99999999-0", "data.h5.tmp-1-1", ".data.h5.tmp-1-2"] {
            assert!(left.iter().any(|n| n == kept), "{kept} stays: {left:?}");
        }
        assert!(remove_abandoned_temps(dir.path().join("missing"), |_| true).unwrap().is_empty());
    }

    #[test]
    fn a_builder_that_a_cleaner_got_ahead_of_starts_over() {
        let dir = tempfile::tempdir().unwrap();
        let temp = dir.path().join(".data.h5.tmp-7-1");
        // A cleaner holds the lock of the new file: it is the cleaner's now.
        let file = File::create_new(&temp).unwrap();
        let cleaner = File::open(&temp).unwrap();
        cleaner.try_lock().unwrap();
        assert!(lock_if_still_named(&temp, file).unwrap().is_none());
        assert!(remove_if_unlocked(&temp, cleaner).unwrap(), "the cleaner removes it");
        // A cleaner removed it before the builder locked it.
        let file = File::create_new(&temp).unwrap();
        fs::remove_file(&temp).unwrap();
        assert!(lock_if_still_named(&temp, file).unwrap().is_none());
        // Nobody in the way: locked, and a cleaner leaves it.
        let file = File::create_new(&temp).unwrap();
        let held = lock_if_still_named(&temp, file).unwrap().expect("locked");
        assert!(!remove_if_unlocked(&temp, File::open(&temp).unwrap()).unwrap());
        assert!(temp.exists());
        drop(held);
        assert!(remove_if_unlocked(&temp, File::open(&temp).unwrap()).unwrap());
    }

    #[test]
    fn a_name_taken_by_a_new_file_is_not_removed_with_the_old_files_lock() {
        let dir = tempfile::tempdir().unwrap();
        let temp = dir.path().join(".data.h5.tmp-7-7");
        fs::write(&temp, b"old").unwrap();
        // A cleaner opened the old file; meanwhile another cleaner removed it and a new builder
        // (the dead one's pid reused) took the name.
        let old = File::open(&temp).unwrap();
        fs::remove_file(&temp).unwrap();
        let (new, _held) = {
            let file = File::create_new(&temp).unwrap();
            (temp.clone(), lock_if_still_named(&temp, file).unwrap().expect("locked"))
        };
        assert!(!remove_if_unlocked(&temp, old).unwrap());
        assert_eq!(fs::read(&new).unwrap(), b"", "the new builder's file stays");
    }
}
