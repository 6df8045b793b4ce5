//! What a case body gets: the factory under test, a fresh directory, how to re-run itself as a
//! child process, and the fault injector when the harness has one.

use crate::faults::FaultInjector;
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
    /// A fresh empty directory owned by this case; caches go in subdirectories of it.
    pub dir: &'a Path,
    /// Set when the case runs as a `#[test]` made by [`crate::backend_conformance!`].
    pub child: Option<ChildLauncher>,
    /// Makes file-system calls of a child process fail; without one the cases that need a
    /// failed write report SKIPPED.
    pub faults: Option<&'a dyn FaultInjector>,
    capabilities: Capabilities,
}

impl<'a> CaseContext<'a> {
    /// A context over `factory` and the empty directory `dir`, without a fault injector.
    pub fn new(
        factory: &'a dyn BackendFactory,
        dir: &'a Path,
        child: Option<ChildLauncher>,
    ) -> Self {
        CaseContext { factory, dir, child, faults: None, capabilities: factory.capabilities() }
    }

    /// The same context with `faults` as its fault injector.
    pub fn with_faults(mut self, faults: Option<&'a dyn FaultInjector>) -> Self {
        self.faults = faults;
        self
    }

    /// The factory's capabilities.
    pub fn caps(&self) -> &Capabilities {
        &self.capabilities
    }

    /// A path for a cache called `name` inside the case's directory (not created).
    pub fn cache_path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    /// The backend's name.
    pub fn backend(&self) -> &'static str {
        self.factory.name()
    }
}
