#![doc = include_str!("../README.md")]
#![deny(missing_docs)]

mod attributes;
mod columns;
pub mod compat;
pub mod derivatives;
mod error;
pub mod ffi;
mod index_tables;
pub mod layout;
mod publish;
pub mod reader;
pub mod writer;

pub use compat::{DescriptorCompat, StorageDtype};
pub use derivatives::{AngularDerivatives, LocalDerivatives, RadialDerivatives};
pub use error::BACKEND;
pub use reader::{CacheSignature, CacheVersion, DerivativeLayout, TorchCache};
pub use writer::{CacheSections, TorchCacheWriter};
