#![doc = include_str!("../README.md")]
#![deny(missing_docs)]

mod aenet_reader;
mod attributes;
mod carry;
mod check_plan;
mod columns;
mod compat;
mod derivatives;
mod describe;
mod direct;
mod error;
mod factory;
mod ffi;
mod formats;
mod index_tables;
mod layout;
mod manifest;
mod publish;
mod reader;
mod row_checksums;
mod validate_torch_cache;
mod writer;

pub use aenet_reader::{AENET_FEATURES, AenetReader, aenet_derivative_fields};
pub use compat::{CHEBYSHEV_DESCRIPTOR, DescriptorCompat, StorageDtype};
pub use derivatives::{AngularDerivatives, LocalDerivatives, RadialDerivatives};
pub use error::BACKEND;
pub use factory::Hdf5Factory;
pub use formats::{AENET_HDF5, STOWAGE_HDF5, is_hdf5_file};
pub use layout::DERIVATIVE_ARRAYS;
pub use manifest::{DescriptorConfig, DescriptorManifest};
pub use reader::{CacheSignature, CacheVersion, DerivativeLayout, ReadPath, TorchCache};
pub use writer::{CacheSections, TorchCacheWriter};

mod backend;
mod commit_log;
mod key_index;
mod open_file;
mod open_segments;
mod options;
mod segment;
mod validate;

pub use backend::{Hdf5Backend, capabilities};
pub use options::Hdf5Options;

/// Entry points of the fuzz targets and their seed-corpus generator (`fuzz/` at the workspace
/// root, feature `fuzzing`): the direct reader's decoding of global heap collections and stored
/// chunks, the attribute decoding, the chunk-storage queries and the commit log's interpretation,
/// all private: not part of the API.
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub mod fuzzing {
    pub use crate::commit_log::interpret;
    pub use crate::direct::fuzzing::*;
    pub use crate::ffi::storage::{FILTER_DEFLATE, FILTER_SHUFFLE, chunk_location, vlen_storage};
    pub use crate::ffi::{AttributeValue, read_attribute};
}

/// The libhdf5 wrappers and the commit log, for this crate's integration tests (feature
/// `test-support`, which the crate's dev-dependency on itself turns on): they write hand-made
/// attributes and golden logs with them. Not public API.
#[cfg(feature = "test-support")]
#[doc(hidden)]
pub mod test_support {
    /// The libhdf5 wrappers (attributes, chunk storage).
    pub mod ffi {
        pub use crate::ffi::*;
    }
    /// The commit log's records and interpretation.
    pub mod commit_log {
        pub use crate::commit_log::*;
    }
    /// libhdf5's open with resource errors told apart from damage.
    pub mod open_file {
        pub use crate::open_file::open_hdf5;
    }
}
