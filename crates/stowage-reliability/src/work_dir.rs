//! Where a campaign binary keeps its caches: the directory given on its command line, or a
//! temporary one removed when the campaign ends; one fresh subdirectory per backend.

use std::path::{Path, PathBuf};

/// A campaign's working directory.
#[derive(Debug)]
pub struct WorkDir {
    path: PathBuf,
    // Held for its removal on drop; `None` for a directory the user chose (kept, to inspect).
    _temporary: Option<tempfile::TempDir>,
}

impl WorkDir {
    /// `given`, or a new temporary directory.
    ///
    /// Errors: the temporary directory cannot be created.
    pub fn new(given: Option<&Path>) -> Result<WorkDir, String> {
        match given {
            Some(dir) => Ok(WorkDir { path: dir.to_path_buf(), _temporary: None }),
            None => {
                let dir = tempfile::tempdir().map_err(|e| format!("temporary directory: {e}"))?;
                Ok(WorkDir { path: dir.path().to_path_buf(), _temporary: Some(dir) })
            }
        }
    }

    /// `<work>/<name>`, emptied (what an earlier run left there is removed) and created.
    ///
    /// ```
    /// let work = stowage_reliability::work_dir::WorkDir::new(None)?;
    /// let dir = work.fresh("npy")?;
    /// std::fs::write(dir.join("left"), b"")?;
    /// assert!(std::fs::read_dir(work.fresh("npy")?)?.next().is_none());
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn fresh(&self, name: &str) -> Result<PathBuf, String> {
        let dir = self.path.join(name);
        if dir.exists() {
            std::fs::remove_dir_all(&dir)
                .map_err(|e| format!("clearing {}: {e}", dir.display()))?;
        }
        std::fs::create_dir_all(&dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
        Ok(dir)
    }
}
