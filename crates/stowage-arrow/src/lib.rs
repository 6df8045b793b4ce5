#![doc = include_str!("../README.md")]
#![deny(missing_docs)]

/// The backend's name in errors.
pub const BACKEND_NAME: &str = "arrow";

pub mod backend;
pub mod blob_encoding;
pub mod commit_log;
mod committer;
pub mod decode;
pub mod encode;
mod factory;
mod framed;
pub mod key_sidecar;
pub mod layout;
pub mod merged_index;
pub mod options;
pub mod ownership;
mod pending;
pub mod pickled_index;
pub mod reader;
pub mod row_sums;
mod sample_cache;
pub mod schema_json;
pub mod segment;
pub mod segment_writer;
mod validate;
mod writer;

pub use backend::{ArrowBackend, capabilities};
pub use blob_encoding::BlobEncoding;
pub use factory::ArrowFactory;
pub use options::{ArrowOptions, Compression};
pub use writer::Compaction;
