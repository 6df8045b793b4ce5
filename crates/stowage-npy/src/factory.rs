//! `NpyFactory`: creates, opens and recognizes NUMPY_10 caches behind `Box<dyn Backend>`.

use crate::error::NpyError;
use crate::formats::{self, HANGAR_NUMPY10};
use crate::{NpyBackend, NpyOptions};
use std::path::Path;
use stowage_core::{
    BackendFactory, Capabilities, DynBackend, DynReader, Format, OpenMode, Result, Schema,
};

/// A [`BackendFactory`] for [`NpyBackend`] with fixed [`NpyOptions`].
///
/// It recognizes stowage's own NUMPY_10 caches ([`crate::STOWAGE_NPY`]) and hangar's bare
/// NUMPY_10 data directories ([`crate::HANGAR_NUMPY10`]). A hangar directory holds no keys (its
/// records are in hangar's LMDB database), so [`BackendFactory::open_reader`] refuses it with
/// `Error::Unsupported`; its samples are read one record at a time with
/// [`crate::read_hangar_record`].
///
/// ```
/// use stowage_core::BackendFactory;
/// let factory = stowage_npy::NpyFactory::default();
/// assert_eq!(factory.name(), "npy");
/// assert!(factory.capabilities().checksums);
/// assert_eq!(factory.formats()[0], stowage_npy::STOWAGE_NPY);
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

    fn formats(&self) -> &'static [Format] {
        &formats::FORMATS
    }

    fn recognize(&self, path: &Path) -> Result<Option<&'static Format>> {
        formats::recognize(path)
    }

    fn create(&self, dir: &Path, schema: &Schema) -> Result<Box<DynBackend>> {
        Ok(Box::new(NpyBackend::create(dir, schema, self.options.clone())?))
    }

    fn open(&self, dir: &Path, mode: OpenMode) -> Result<Box<DynBackend>> {
        Ok(Box::new(NpyBackend::open(dir, mode, self.options.clone())?))
    }

    fn open_reader(&self, path: &Path) -> Result<Box<DynReader>> {
        if formats::recognize(path)? == Some(&HANGAR_NUMPY10) {
            return Err(NpyError::BareHangarDirectory.into());
        }
        Ok(Box::new(NpyBackend::open_read_only(path, self.options.clone())?))
    }

    /// A bare hangar data directory (which has no reader) is checked file by file; stowage's own
    /// cache that does not open has no record log to check by: its error is returned.
    fn check_plan_unopened(
        &self,
        path: &Path,
        error: stowage_core::Error,
        _selection: &stowage_core::check_plan::Selection,
    ) -> std::result::Result<
        stowage_core::check_plan::CheckPlan<'static>,
        stowage_core::check_plan::Unplanned,
    > {
        match formats::recognize(path) {
            Ok(Some(format)) if *format == HANGAR_NUMPY10 => {
                Ok(crate::check_plan::hangar_plan(path)?)
            }
            _ => Err(error.into()),
        }
    }

    /// A bare hangar data directory is described from its collection files (it has no reader);
    /// a stowage cache that does not open, from its `stowage.json`.
    fn describe_unopened(
        &self,
        path: &Path,
        format: &'static Format,
        error: stowage_core::Error,
    ) -> Result<stowage_core::describe::Description> {
        if format.id == HANGAR_NUMPY10.id {
            crate::describe::describe_hangar(path)
        } else {
            crate::describe::describe_unopened(path, error)
        }
    }
}
