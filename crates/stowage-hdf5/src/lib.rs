#![doc = include_str!("../README.md")]
#![deny(missing_docs)]

mod aenet_reader;
mod attributes;
mod carry;
mod check_plan;
mod columns;
pub mod compat;
pub mod derivatives;
mod describe;
mod direct;
mod error;
mod factory;
pub mod ffi;
mod formats;
mod index_tables;
pub mod layout;
pub mod manifest;
mod publish;
pub mod reader;
mod row_checksums;
mod validate_torch_cache;
pub mod writer;

pub use aenet_reader::{AENET_FEATURES, AenetReader, aenet_derivative_fields};
pub use compat::{DescriptorCompat, StorageDtype};
pub use derivatives::{AngularDerivatives, LocalDerivatives, RadialDerivatives};
pub use error::BACKEND;
pub use factory::Hdf5Factory;
pub use formats::{AENET_HDF5, STOWAGE_HDF5, is_hdf5_file};
pub use manifest::{DescriptorConfig, DescriptorManifest};
pub use reader::{CacheSignature, CacheVersion, DerivativeLayout, ReadPath, TorchCache};
pub use writer::{CacheSections, TorchCacheWriter};

pub mod backend;
pub mod commit_log;
pub mod segment;
mod validate;

pub use backend::{Hdf5Backend, capabilities};

/// Entry points of the fuzz targets (`fuzz/` at the workspace root) into the direct reader's
/// decoding of global heap collections and stored chunks, which is private: not part of the API.
#[doc(hidden)]
pub use direct::fuzzing;
