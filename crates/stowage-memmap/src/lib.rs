#![doc = include_str!("../README.md")]
#![deny(missing_docs)]

mod backend;
pub mod field_file;
pub mod index;
pub mod layout;
pub mod manifest;
mod options;
pub mod preset;
pub mod sidecar;
#[cfg(test)]
mod test_support;
mod validate;

pub use backend::{BACKEND_NAME, MemmapBackend, capabilities};
pub use options::MemmapOptions;
pub use preset::dnanet;
