//! The shared conformance suite against the generic HDF5 backend with one segment open at a
//! time (`Hdf5Options::max_open_segments` and `max_mapped_segments` = 1): every case that reads more than one segment
//! closes and reopens segments, so reopening (without a second hash) and the first-use checks
//! are held to the whole contract.

use std::path::Path;

use stowage_core::{
    BackendFactory, Capabilities, DynBackend, Format, OpenMode, Result, Schema, ValidationLevel,
    ValidationReport,
};
use stowage_hdf5::{Hdf5Backend, Hdf5Factory, Hdf5Options};

/// [`Hdf5Factory`] whose handles keep one segment open.
struct OneOpenSegment;

fn options() -> Hdf5Options {
    Hdf5Options { max_open_segments: 1, max_mapped_segments: 1 }
}

impl BackendFactory for OneOpenSegment {
    fn name(&self) -> &'static str {
        Hdf5Factory.name()
    }

    fn capabilities(&self) -> Capabilities {
        Hdf5Factory.capabilities()
    }

    fn formats(&self) -> &'static [Format] {
        Hdf5Factory.formats()
    }

    fn recognize(&self, path: &Path) -> Result<Option<&'static Format>> {
        Hdf5Factory.recognize(path)
    }

    fn create(&self, dir: &Path, schema: &Schema) -> Result<Box<DynBackend>> {
        Ok(Box::new(Hdf5Backend::create_with(dir, schema, &options())?))
    }

    fn open(&self, dir: &Path, mode: OpenMode) -> Result<Box<DynBackend>> {
        Ok(Box::new(Hdf5Backend::open_with(dir, mode, &options())?))
    }

    fn validate_path(&self, path: &Path, level: ValidationLevel) -> Result<ValidationReport> {
        Hdf5Factory.validate_path(path, level)
    }
}

stowage_conformance::backend_conformance!(OneOpenSegment);
