//! Building a file under a temporary name beside its target and publishing it atomically.
//!
//! libhdf5 writes by path, so the core's `atomic_write` (which streams into a file it opens)
//! cannot be used as is; this is the same protocol for a file another library writes: build it
//! under `.<name>.tmp-<pid>-<n>` in the target's directory, close it, fsync it, rename it over the
//! target, fsync the directory (the core's [`fsync_dir`]). A reader or a crash sees the old file or
//! the new one, never a mix. The temporary file is removed when the build is abandoned.
//!
//! A long build can start its writeback early ([`Writeback`]): the disk then writes while the
//! build computes, and the fsync at publish finds little left.

use std::ffi::OsString;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use stowage_core::file_safety::fsync_dir;
use stowage_core::{Error, IoResultExt, Result};

static COUNTER: AtomicU64 = AtomicU64::new(0);

/// A temporary path beside `target`; removed on drop unless published.
#[derive(Debug)]
pub(crate) struct TempBeside {
    path: PathBuf,
    target: PathBuf,
    published: bool,
}

impl TempBeside {
    /// A fresh temporary name in the directory of `target` (nothing is created yet).
    pub fn new(target: &Path) -> Result<TempBeside> {
        let name = target.file_name().ok_or_else(|| {
            Error::invalid(format!("{} has no file name to build beside", target.display()))
        })?;
        let mut temp = OsString::from(".");
        temp.push(name);
        temp.push(format!(
            ".tmp-{}-{}",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::Relaxed)
        ));
        let path = target.with_file_name(temp);
        // A dead process with our pid may have left one: it is nobody's file.
        let _ = std::fs::remove_file(&path);
        Ok(TempBeside { path, target: target.to_path_buf(), published: false })
    }

    /// The temporary path to build at.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Fsyncs the (closed) temporary file, renames it over the target and fsyncs the directory;
    /// without `durable`, only renames.
    pub fn publish(mut self, durable: bool) -> Result<()> {
        if durable {
            File::open(&self.path).and_then(|f| f.sync_all()).at(&self.path)?;
        }
        std::fs::rename(&self.path, &self.target).at(&self.target)?;
        self.published = true;
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
            let _ = std::fs::remove_file(&self.path);
        }
    }
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
}
