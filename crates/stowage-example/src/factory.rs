//! `JournalFactory`: creates and opens journal caches behind `Box<dyn Backend>`, which is what
//! the conformance suite (and the `stowage` command) hold.

use std::path::Path;

use stowage_core::{BackendFactory, Capabilities, DynBackend, OpenMode, Result, Schema};

use crate::JournalBackend;

/// A [`BackendFactory`] for [`JournalBackend`].
///
/// ```
/// use stowage_core::BackendFactory;
/// assert_eq!(stowage_example::JournalFactory.name(), "example-journal");
/// ```
#[derive(Debug, Clone, Copy, Default)]
pub struct JournalFactory;

impl BackendFactory for JournalFactory {
    fn name(&self) -> &'static str {
        crate::BACKEND_NAME
    }

    fn capabilities(&self) -> Capabilities {
        crate::capabilities()
    }

    fn create(&self, dir: &Path, schema: &Schema) -> Result<Box<DynBackend>> {
        Ok(Box::new(JournalBackend::create(dir, schema)?))
    }

    fn open(&self, dir: &Path, mode: OpenMode) -> Result<Box<DynBackend>> {
        Ok(Box::new(JournalBackend::open(dir, mode)?))
    }
}
