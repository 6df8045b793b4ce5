//! `ArrowFactory`: creates and opens Arrow segment caches behind `Box<dyn Backend>`.

use std::path::Path;

use stowage_core::{BackendFactory, Capabilities, DynBackend, OpenMode, Result, Schema};

use crate::{ArrowBackend, ArrowOptions};

/// A [`BackendFactory`] for [`ArrowBackend`] with fixed [`ArrowOptions`].
///
/// ```
/// use stowage_core::BackendFactory;
/// let factory = stowage_arrow::ArrowFactory::default();
/// assert_eq!(factory.name(), "arrow");
/// assert!(factory.capabilities().checksums);
/// ```
#[derive(Debug, Clone, Default)]
pub struct ArrowFactory {
    /// Options for every cache this factory creates or opens.
    pub options: ArrowOptions,
}

impl BackendFactory for ArrowFactory {
    fn name(&self) -> &'static str {
        crate::BACKEND_NAME
    }

    fn capabilities(&self) -> Capabilities {
        crate::capabilities()
    }

    fn create(&self, dir: &Path, schema: &Schema) -> Result<Box<DynBackend>> {
        Ok(Box::new(ArrowBackend::create(dir, schema, self.options.clone())?))
    }

    fn open(&self, dir: &Path, mode: OpenMode) -> Result<Box<DynBackend>> {
        Ok(Box::new(ArrowBackend::open(dir, mode, self.options.clone())?))
    }
}
