//! The shared conformance suite, run against the generic HDF5 backend.

stowage_conformance::backend_conformance!(stowage_hdf5::Hdf5Factory);
