//! What a case body gets: the factory under test, a fresh directory, how to re-run itself as a
//! child process, the fault injector when the harness has one, and the storage its caches live
//! on.

use crate::faults::FaultInjector;
use crate::storage::{CacheStorage, LOCAL_FILES};
use std::path::{Path, PathBuf};
use stowage_core::{BackendFactory, Capabilities};

/// How the current case can start a copy of itself in a child process (used by the crash and
/// fault cases).
#[derive(Debug, Clone)]
pub struct ChildLauncher {
    /// The test executable.
    pub exe: PathBuf,
    /// The libtest name of this case's `#[test]`, passed with `--exact`.
    pub test_name: String,
}

/// Everything a case needs.
pub struct CaseContext<'a> {
    /// The backend under test.
    pub factory: &'a dyn BackendFactory,
    /// A fresh empty directory owned by this case; caches go in subdirectories of it (on a
    /// storage that is not local files, caches are only named after them, and the directory
    /// holds the suite's own scratch files, such as a writer child's stderr).
    pub dir: &'a Path,
    /// Set when the case runs as a `#[test]` made by [`crate::backend_conformance!`].
    pub child: Option<ChildLauncher>,
    /// Makes file-system calls of a child process fail; without one the cases that need a
    /// failed write report SKIPPED.
    pub faults: Option<&'a dyn FaultInjector>,
    capabilities: Capabilities,
    storage: &'a dyn CacheStorage,
}

impl<'a> CaseContext<'a> {
    /// A context over `factory` and the empty directory `dir`, without a fault injector, with
    /// caches in [`crate::storage::LocalFiles`].
    pub fn new(
        factory: &'a dyn BackendFactory,
        dir: &'a Path,
        child: Option<ChildLauncher>,
    ) -> Self {
        CaseContext {
            factory,
            dir,
            child,
            faults: None,
            capabilities: factory.capabilities(),
            storage: &LOCAL_FILES,
        }
    }

    /// The same context with `faults` as its fault injector.
    pub fn with_faults(mut self, faults: Option<&'a dyn FaultInjector>) -> Self {
        self.faults = faults;
        self
    }

    /// The same context with its caches in `storage`.
    pub fn with_storage(mut self, storage: &'a dyn CacheStorage) -> Self {
        self.storage = storage;
        self
    }

    /// Where the factory's caches live: the cases reach a cache's objects only through it.
    pub fn storage(&self) -> &'a dyn CacheStorage {
        self.storage
    }

    /// The factory's capabilities.
    pub fn caps(&self) -> &Capabilities {
        &self.capabilities
    }

    /// A path for a cache called `name` inside the case's directory (not created; for a
    /// storage that is not [`crate::storage::LocalFiles`], only the name the factory maps).
    pub fn cache_path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    /// The backend's name.
    pub fn backend(&self) -> &'static str {
        self.factory.name()
    }
}
