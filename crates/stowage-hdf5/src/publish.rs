//! Building a file under a temporary name beside its target and publishing it atomically.
//!
//! libhdf5 writes by path, so the core's `atomic_write` (which streams into a file it opens)
//! cannot be used as is; this is the same protocol for a file another library writes: build it
//! under `.<name>.tmp-<pid>-<n>` in the target's directory, close it, fsync it, rename it over the
//! target, fsync the directory (the core's [`fsync_dir`]). A reader or a crash sees the old file or
//! the new one, never a mix. The temporary file is removed when the build is abandoned.

use std::ffi::OsString;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

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
