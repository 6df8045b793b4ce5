//! `MemmapFactory`: creates and opens memmap row caches behind `Box<dyn Backend>`.

use std::path::Path;

use stowage_core::{BackendFactory, Capabilities, DynBackend, OpenMode, Result, Schema};

use crate::{MemmapBackend, MemmapOptions};

/// A [`BackendFactory`] for [`MemmapBackend`] with fixed [`MemmapOptions`].
///
/// ```
/// use stowage_core::BackendFactory;
/// let factory = stowage_memmap::MemmapFactory::default();
/// assert_eq!(factory.name(), "memmap");
/// assert!(factory.capabilities().resume);
/// ```
#[derive(Debug, Clone, Default)]
pub struct MemmapFactory {
    /// Options for every cache this factory creates or opens.
    pub options: MemmapOptions,
}

impl BackendFactory for MemmapFactory {
    fn name(&self) -> &'static str {
        crate::BACKEND_NAME
    }

    fn capabilities(&self) -> Capabilities {
        crate::capabilities()
    }

    fn create(&self, dir: &Path, schema: &Schema) -> Result<Box<DynBackend>> {
        Ok(Box::new(MemmapBackend::create(dir, schema, self.options.clone())?))
    }

    fn open(&self, dir: &Path, mode: OpenMode) -> Result<Box<DynBackend>> {
        Ok(Box::new(MemmapBackend::open(dir, mode, self.options.clone())?))
    }
}
