//! [`Hdf5Factory`]: creates and opens the crate's own caches ([`Hdf5Backend`]), and recognizes,
//! reads and validates aenet's torch caches ([`AenetReader`]) as well.

use std::path::Path;

use stowage_core::{
    BackendFactory, Capabilities, DynBackend, DynReader, Error, Format, OpenMode, Reader, Result,
    Schema, ValidationLevel, ValidationReport,
};

use crate::aenet_reader::AenetReader;
use crate::backend::{Hdf5Backend, capabilities};
use crate::error::BACKEND;
use crate::formats::{self, FORMATS};

/// Creates and opens [`Hdf5Backend`] caches ([`crate::STOWAGE_HDF5`]) and reads aenet's torch
/// caches ([`crate::AENET_HDF5`]).
///
/// A cache is a directory; an aenet torch cache is the dataset file that holds it.
///
/// ```
/// use stowage_core::BackendFactory;
/// let factory = stowage_hdf5::Hdf5Factory;
/// assert_eq!(factory.name(), "hdf5");
/// assert_eq!(factory.formats(), &[stowage_hdf5::STOWAGE_HDF5, stowage_hdf5::AENET_HDF5]);
/// ```
#[derive(Debug, Clone, Copy, Default)]
pub struct Hdf5Factory;

impl BackendFactory for Hdf5Factory {
    fn name(&self) -> &'static str {
        BACKEND
    }

    fn capabilities(&self) -> Capabilities {
        capabilities()
    }

    fn formats(&self) -> &'static [Format] {
        FORMATS
    }

    fn recognize(&self, path: &Path) -> Result<Option<&'static Format>> {
        formats::recognize(path)
    }

    fn create(&self, dir: &Path, schema: &Schema) -> Result<Box<DynBackend>> {
        Ok(Box::new(Hdf5Backend::create(dir, schema)?))
    }

    fn open(&self, dir: &Path, mode: OpenMode) -> Result<Box<DynBackend>> {
        Ok(Box::new(Hdf5Backend::open(dir, mode)?))
    }

    /// A regular file is read as an aenet dataset file ([`AenetReader`]); anything else as the
    /// crate's own cache, read-only. Deciding by the kind of path, not by
    /// [`BackendFactory::recognize`], spares a second trial open of an aenet file after the one
    /// recognizing made.
    fn open_reader(&self, path: &Path) -> Result<Box<DynReader>> {
        if path.is_file() {
            return Ok(Box::new(AenetReader::open(path)?));
        }
        Ok(Box::new(Hdf5Backend::open(path, OpenMode::ReadOnly)?))
    }

    /// Everything an HDF5 cache's report says comes from opening it: the open's error is the
    /// whole answer.
    fn describe_unopened(
        &self,
        _path: &Path,
        _format: &'static Format,
        error: Error,
    ) -> Result<stowage_core::describe::Description> {
        Err(error)
    }

    /// Validates even what does not open. A stowage HDF5 cache with a damaged segment does not
    /// open (no key can be looked up), so it is checked from disk piece by piece
    /// ([`Hdf5Backend::validate_dir`]): each damaged segment is listed with how many samples it
    /// held, the intact ones are checked. An aenet file whose torch cache does not open is one
    /// problem naming the file.
    ///
    /// Errors: the open's error when nothing is damaged (a permission error, say), or the path
    /// holds no cache (`Error::NotFound`).
    fn validate_path(&self, path: &Path, level: ValidationLevel) -> Result<ValidationReport> {
        if path.is_file() {
            return match AenetReader::open(path) {
                Ok(reader) => reader.validate(level),
                // Not there, or refused by the operating system (no descriptor left, no
                // permission, a writer's lock): nothing to report about the file's bytes.
                Err(e @ (Error::NotFound { .. } | Error::Io { .. })) => Err(e),
                Err(e) => {
                    let mut report = ValidationReport { files_checked: 1, ..Default::default() };
                    report.problem(Some(path), None, format!("the torch cache does not open: {e}"));
                    Ok(report)
                }
            };
        }
        match Hdf5Backend::open(path, OpenMode::ReadOnly) {
            Ok(cache) => cache.validate(level),
            Err(e @ Error::NotFound { .. }) => Err(e),
            Err(open_error) => {
                let report = Hdf5Backend::validate_dir(path, level)?;
                if report.is_undamaged() { Err(open_error) } else { Ok(report) }
            }
        }
    }

    /// A cache that does not open is reported with the damage a check from disk sees
    /// ([`BackendFactory::validate_path`]); the open's error when it sees none.
    fn check_plan_unopened(
        &self,
        path: &Path,
        error: Error,
        selection: &stowage_core::check_plan::Selection,
    ) -> std::result::Result<
        stowage_core::check_plan::CheckPlan<'static>,
        stowage_core::check_plan::Unplanned,
    > {
        crate::check_plan::unopened(self, path, error, selection)
    }
}
