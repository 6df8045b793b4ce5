//! `ArrowFactory`: creates, opens and recognizes Arrow segment caches, stowage's and
//! torchcachex's.

use std::path::Path;

use stowage_core::recognize::{self, Marker};
use stowage_core::{
    BackendFactory, Capabilities, DynBackend, DynReader, Format, OpenMode, Result, Schema,
};

use crate::layout::Layout;
use crate::{ArrowBackend, ArrowOptions, TorchcachexReader};

/// A [`BackendFactory`] for [`ArrowBackend`] with fixed [`ArrowOptions`]; it also recognizes and
/// reads the caches torchcachex wrote on its own ([`TorchcachexReader`]).
///
/// ```
/// use stowage_core::BackendFactory;
/// let factory = stowage_arrow::ArrowFactory::default();
/// assert_eq!(factory.name(), "arrow");
/// assert!(factory.capabilities().checksums);
/// assert_eq!(factory.formats(), [stowage_arrow::STOWAGE_ARROW, stowage_arrow::TORCHCACHEX]);
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
        crate::backend::capabilities_with(&self.options)
    }

    fn formats(&self) -> &'static [Format] {
        &crate::FORMATS
    }

    /// A `stowage.log` naming `stowage-arrow` is stowage's; a directory without stowage's
    /// markers holding torchcachex's files (a segment, `schema.json` or `index.pkl`) is
    /// torchcachex's. A directory another stowage backend marked is never probed for
    /// torchcachex's files.
    fn recognize(&self, path: &Path) -> Result<Option<&'static Format>> {
        Ok(match recognize::marker(path)? {
            Marker::StowageLog(format) if format == crate::commit_log::FORMAT_NAME => {
                Some(&crate::FORMATS[0])
            }
            Marker::StowageJson(_) | Marker::StowageLog(_) => None,
            Marker::None if path.is_dir() && has_torchcachex_files(path) => {
                Some(&crate::FORMATS[1])
            }
            Marker::None => None,
        })
    }

    fn create(&self, dir: &Path, schema: &Schema) -> Result<Box<DynBackend>> {
        Ok(Box::new(ArrowBackend::create(dir, schema, self.options.clone())?))
    }

    fn open(&self, dir: &Path, mode: OpenMode) -> Result<Box<DynBackend>> {
        Ok(Box::new(ArrowBackend::open(dir, mode, self.options.clone())?))
    }

    /// stowage's caches as a read-only [`ArrowBackend`], torchcachex's as a
    /// [`TorchcachexReader`].
    fn open_reader(&self, path: &Path) -> Result<Box<DynReader>> {
        match self.recognize(path)? {
            Some(format) if format.id == crate::TORCHCACHEX.id => {
                Ok(Box::new(TorchcachexReader::open(path)?))
            }
            _ => Ok(self.open(path, OpenMode::ReadOnly)?),
        }
    }

    /// Everything an Arrow cache's report says comes from opening it: the open's error is the
    /// whole answer.
    fn describe_unopened(
        &self,
        _path: &Path,
        _format: &'static Format,
        error: stowage_core::Error,
    ) -> Result<stowage_core::describe::Description> {
        Err(error)
    }

    /// A torchcachex cache that does not open is checked segment by segment (each damaged one
    /// named); stowage's own cache that does not open has no log to check by: its error is
    /// returned.
    fn check_plan_unopened(
        &self,
        path: &Path,
        error: stowage_core::Error,
        selection: &stowage_core::check_plan::Selection,
    ) -> std::result::Result<
        stowage_core::check_plan::CheckPlan<'static>,
        stowage_core::check_plan::Unplanned,
    > {
        match self.recognize(path) {
            Ok(Some(format)) if format.id == crate::TORCHCACHEX.id => {
                crate::check_plan::torchcachex_unopened(path, error, selection)
            }
            _ => Err(error.into()),
        }
    }
}

/// torchcachex's files in `dir`: a segment, `schema.json` or `index.pkl`.
fn has_torchcachex_files(dir: &Path) -> bool {
    let layout = Layout::new(dir);
    layout.schema().is_file()
        || layout.pickled_index().is_file()
        || layout.list_segments().is_ok_and(|segments| !segments.is_empty())
}
