#![doc = include_str!("../README.md")]
#![deny(missing_docs)]

mod adopt;
mod backend;
mod bin_appender;
mod check_plan;
pub mod checksum;
mod coverage;
mod describe;
mod error;
mod factory;
pub mod field_file;
mod file_io;
mod finalize_files;
mod fingerprint_carry;
mod fingerprint_check;
mod formats;
pub mod index;
pub mod inspect;
pub mod layout;
pub mod manifest;
mod materialize;
mod options;
pub mod preset;
pub mod ram_guard;
pub mod row_format;
pub mod sidecar;
#[cfg(test)]
mod test_support;
mod validate;
mod writer;

pub use backend::{BACKEND_NAME, MemmapBackend, capabilities};
pub use factory::MemmapFactory;
pub use fingerprint_carry::CarriedFingerprint;
pub use formats::{DNANET_MEMMAP, STOWAGE_MEMMAP};
pub use materialize::MaterializedMemmap;
pub use options::MemmapOptions;
pub use preset::dnanet;
