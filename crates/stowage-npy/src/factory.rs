//! `NpyFactory`: creates and opens NUMPY_10 caches behind `Box<dyn Backend>`.

use crate::{NpyBackend, NpyOptions};
use std::path::Path;
use stowage_core::{BackendFactory, Capabilities, DynBackend, OpenMode, Result, Schema};

/// A [`BackendFactory`] for [`NpyBackend`] with fixed [`NpyOptions`].
///
/// ```
/// use stowage_core::BackendFactory;
/// let factory = stowage_npy::NpyFactory::default();
/// assert_eq!(factory.name(), "npy");
/// assert!(factory.capabilities().checksums);
/// ```
#[derive(Debug, Clone, Default)]
pub struct NpyFactory {
    /// Options for every cache this factory creates or opens.
    pub options: NpyOptions,
}

impl BackendFactory for NpyFactory {
    fn name(&self) -> &'static str {
        crate::BACKEND_NAME
    }

    fn capabilities(&self) -> Capabilities {
        crate::capabilities()
    }

    fn create(&self, dir: &Path, schema: &Schema) -> Result<Box<DynBackend>> {
        Ok(Box::new(NpyBackend::create(dir, schema, self.options.clone())?))
    }

    fn open(&self, dir: &Path, mode: OpenMode) -> Result<Box<DynBackend>> {
        Ok(Box::new(NpyBackend::open(dir, mode, self.options.clone())?))
    }
}
