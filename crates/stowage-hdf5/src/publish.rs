//! Building a file under a temporary name beside its target and publishing it atomically.
//!
//! libhdf5 writes by path, so the core's `atomic_write` (which streams into a file it opens)
//! cannot be used as is; this is the same protocol for a file another library writes: build it
//! under `.<name>.tmp-<pid>-<n>` in the target's directory, close it, fsync it, rename it over the
//! target, fsync the directory (the core's [`fsync_dir`]). A reader or a crash sees the old file or
//! the new one, never a mix. The temporary file is removed when the build is abandoned.
//!
//! A killed build leaves its temporary (for a dataset file, a whole copy of it), and an aenet
//! dataset file has no writer lock that would tell the next writer no build is under way. So the
//! builder holds a lock on its temporary, on a descriptor of its own, for as long as it exists
//! ([`create_locked_temp_beside`]); the next writer removes the temporaries whose lock it can take
//! ([`remove_abandoned_builds`]). libhdf5 opens the temporary by path with its own file locking
//! off, so it neither takes nor drops that lock. When `HDF5_USE_FILE_LOCKING` tells libhdf5 to
//! lock every file anyway, its exclusive lock would be refused by the builder's: the builder lets
//! go of its own while libhdf5 has the file open (libhdf5's lock tells cleaners the build lives
//! meanwhile) and takes it back before publishing.
//!
//! A long build can start its writeback early ([`Writeback`]): the disk then writes while the
//! build computes, and the fsync at publish finds little left.

use std::ffi::OsStr;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use stowage_core::file_safety::{
    create_locked_temp_beside, fsync_dir, refuse_symlink, relock_temp, remove_abandoned_temps,
};
use stowage_core::{Error, IoResultExt, Result};

use crate::error::Hdf5Error;

/// A temporary file beside `target`, created empty and locked as long as it exists; removed on
/// drop unless published.
#[derive(Debug)]
pub(crate) struct TempBeside {
    path: PathBuf,
    target: PathBuf,
    /// Holds the lock that tells [`remove_abandoned_builds`] this build is alive; closed right
    /// after the rename or the removal.
    lock: Option<File>,
    published: bool,
}

impl TempBeside {
    /// A new, empty, locked temporary file in the directory of `target`, never one that existed.
    pub fn new(target: &Path) -> Result<TempBeside> {
        if target.file_name().is_none() {
            return Err(Error::invalid(format!(
                "{} has no file name to build beside",
                target.display()
            )));
        }
        let (path, lock) = create_locked_temp_beside(target).at(target)?;
        Ok(TempBeside { path, target: target.to_path_buf(), lock: Some(lock), published: false })
    }

    /// The temporary path to build at.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Call right before libhdf5 opens (creates) the temporary: refuses a symbolic link in its
    /// place, and lets go of the build's lock when libhdf5 will lock the file itself, which this
    /// lock would refuse.
    ///
    /// libhdf5 creates by path (`H5Fcreate` with truncation), following a link; the temporary was
    /// created by this process with `O_EXCL` and `O_NOFOLLOW` moments before, so only a link
    /// swapped in between this check and libhdf5's open (by a process that can write the
    /// directory anyway) could still redirect it.
    ///
    /// Errors: [`Error::Io`] naming the temporary when it is a symbolic link.
    pub fn before_libhdf5_opens(&mut self) -> Result<()> {
        refuse_symlink(&self.path)?;
        if libhdf5_locks_every_file() {
            self.lock = None;
        }
        Ok(())
    }

    /// Call once libhdf5 closed the temporary: takes the build's lock back if it was let go.
    /// Losing the lock never loses data (a cleaner that removes the file makes the rename fail,
    /// and nothing is published); holding it keeps other writers from removing a finished copy.
    ///
    /// Errors: when another writer of the target took the build for a killed one's and removed
    /// it meanwhile (nothing is published then), or the lock could not be taken; naming the file.
    pub fn after_libhdf5_closed(&mut self) -> Result<()> {
        if self.lock.is_some() {
            return Ok(());
        }
        match relock_temp(&self.path).at(&self.path)? {
            Some(lock) => self.lock = Some(lock),
            // Someone else holds it: a cleaner about to remove it (the rename then fails), or a
            // child process that inherited libhdf5's descriptor and its exclusive lock (libhdf5
            // does not open files close-on-exec), which keeps cleaners out as well.
            None if self.path.exists() => {}
            None => {
                return Err(Hdf5Error::BuildRemoved { temporary: self.path.clone() }.into());
            }
        }
        Ok(())
    }

    /// Fsyncs the (closed) temporary file, renames it over the target and fsyncs the directory;
    /// without `durable`, only renames.
    pub fn publish(mut self, durable: bool) -> Result<()> {
        if durable {
            File::open(&self.path).and_then(|f| f.sync_all()).at(&self.path)?;
        }
        std::fs::rename(&self.path, &self.target).at(&self.target)?;
        self.published = true;
        // The file is the target now: its readers and writers must not meet the build's lock.
        drop(self.lock.take());
        if durable {
            let dir = match self.target.parent() {
                Some(dir) if !dir.as_os_str().is_empty() => dir,
                _ => Path::new("."),
            };
            fsync_dir(dir)?;
        }
        Ok(())
    }
}

impl Drop for TempBeside {
    fn drop(&mut self) {
        if !self.published {
            // Removed while still locked: a cleaner never meets a name whose lock is free. (If it
            // was let go, the name is still this process's alone: it holds its pid.)
            let _ = std::fs::remove_file(&self.path);
        }
        drop(self.lock.take());
    }
}

/// Whether libhdf5 locks every file it opens whatever the file access property list says:
/// `HDF5_USE_FILE_LOCKING` set to `TRUE`, `1` or `BEST_EFFORT` overrides it (libhdf5 1.10.7 and
/// later; `FALSE` or `0` turn locking off, other values leave it to the property list).
fn libhdf5_locks_every_file() -> bool {
    matches!(std::env::var("HDF5_USE_FILE_LOCKING").as_deref(), Ok("TRUE" | "1" | "BEST_EFFORT"))
}

/// Removes the temporaries of builds of `target` that no live process is building (each one's
/// lock is free: its builder was killed); returns them. Never another file: only names
/// `.<target name>.tmp-<pid>-<n>`, as [`TempBeside`] names them.
///
/// Errors: [`Error::Io`] naming the directory or the file that could not be removed.
pub(crate) fn remove_abandoned_builds(target: &Path) -> Result<Vec<PathBuf>> {
    let Some(name) = target.file_name().and_then(OsStr::to_str) else {
        // Temporaries of a name that is not UTF-8 are not recognized: left, never misjudged.
        return Ok(Vec::new());
    };
    let dir = match target.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    };
    remove_abandoned_temps(dir, |built| built == name)
}

/// How often a [`Writeback`] asks the kernel to write a file's dirty pages.
const WRITEBACK_INTERVAL: Duration = Duration::from_millis(10);

/// Writes a file that is being built to disk in the background (`fdatasync` every
/// [`WRITEBACK_INTERVAL`] on a descriptor of its own), so that the fsync at publish only waits
/// for the tail. It changes no guarantee: publish still fsyncs; a failure seen here is reported
/// by [`Writeback::finish`] (the kernel reports a writeback error to one descriptor only).
#[derive(Debug)]
pub(crate) struct Writeback {
    stop: Arc<AtomicBool>,
    failure: Arc<Mutex<Option<std::io::Error>>>,
    thread: Option<JoinHandle<()>>,
    path: PathBuf,
}

impl Writeback {
    /// Starts writing back the (existing) file at `path`.
    pub fn start(path: &Path) -> Result<Writeback> {
        let file = File::open(path).at(path)?;
        let stop = Arc::new(AtomicBool::new(false));
        let failure = Arc::new(Mutex::new(None));
        let (stop_flag, failed) = (Arc::clone(&stop), Arc::clone(&failure));
        let thread = std::thread::Builder::new()
            .name("stowage-hdf5-writeback".into())
            .spawn(move || {
                while !stop_flag.load(Ordering::Relaxed) {
                    if let Err(e) = file.sync_data() {
                        *failed.lock().expect("never poisoned") = Some(e);
                        return;
                    }
                    std::thread::park_timeout(WRITEBACK_INTERVAL);
                }
            })
            .at(path)?;
        Ok(Writeback { stop, failure, thread: Some(thread), path: path.to_path_buf() })
    }

    /// Stops the background writes; the first failure they met, if any.
    pub fn finish(mut self) -> Result<()> {
        self.stop_thread();
        match self.failure.lock().expect("never poisoned").take() {
            Some(e) => Err(e).at(&self.path),
            None => Ok(()),
        }
    }

    fn stop_thread(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            thread.thread().unpark();
            let _ = thread.join();
        }
    }
}

impl Drop for Writeback {
    fn drop(&mut self) {
        self.stop_thread();
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use super::*;

    #[test]
    fn writeback_runs_beside_a_build_and_stops() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("file.h5");
        let temp = TempBeside::new(&target).unwrap();
        let mut file = File::create(temp.path()).unwrap();
        let writeback = Writeback::start(temp.path()).unwrap();
        for _ in 0..8 {
            file.write_all(&[7u8; 1 << 16]).unwrap();
            std::thread::sleep(WRITEBACK_INTERVAL / 4);
        }
        drop(file);
        writeback.finish().unwrap();
        temp.publish(true).unwrap();
        assert_eq!(std::fs::metadata(&target).unwrap().len(), 8 << 16);
        // Dropped unfinished (an abandoned build): the thread is stopped too.
        let other = TempBeside::new(&dir.path().join("other.h5")).unwrap();
        File::create(other.path()).unwrap();
        drop(Writeback::start(other.path()).unwrap());
        assert!(Writeback::start(&dir.path().join("missing")).is_err());
    }

    #[test]
    fn a_link_swapped_in_for_the_temporary_is_refused_before_libhdf5_creates_it() {
        let (dir, elsewhere) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let outside = elsewhere.path().join("outside.h5");
        std::fs::write(&outside, b"outside").unwrap();
        let mut temp = TempBeside::new(&dir.path().join("segment.h5")).unwrap();
        std::fs::remove_file(temp.path()).unwrap();
        std::os::unix::fs::symlink(&outside, temp.path()).unwrap();
        let err = temp.before_libhdf5_opens().unwrap_err();
        assert!(stowage_core::file_safety::is_refused_symlink(&err), "{err}");
        assert!(err.to_string().contains(temp.path().to_str().unwrap()), "{err}");
        drop(temp);
        assert_eq!(std::fs::read(&outside).unwrap(), b"outside");
    }
}
