#![doc = include_str!("../README.md")]
#![deny(missing_docs)]

use stowage_core::Format;

/// The backend's name in errors.
pub const BACKEND_NAME: &str = "arrow";

/// The format of the caches stowage writes: torchcachex's layout with stowage's commit log
/// (`stowage.log`) beside it.
pub const STOWAGE_ARROW: Format = Format {
    id: "stowage-arrow",
    description: "stowage Arrow segment cache",
    signature: "stowage.log with format \"stowage-arrow\"",
};

/// The format of the caches torchcachex writes on its own (no `stowage.log`), which this crate
/// reads ([`TorchcachexReader`]).
pub const TORCHCACHEX: Format = Format {
    id: "torchcachex",
    description: "torchcachex Arrow segment cache",
    signature: "segments/segment_*.arrow, schema.json or index.pkl",
};

/// Every format this crate recognizes, its own first ([`stowage_core::BackendFactory::formats`]).
static FORMATS: [Format; 2] = [STOWAGE_ARROW, TORCHCACHEX];

pub mod backend;
pub mod blob_encoding;
mod check_plan;
pub mod commit_log;
mod committer;
pub mod decode;
mod describe;
pub mod encode;
mod error;
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
mod torchcachex_reader;
mod validate;
mod writer;

pub use backend::{ArrowBackend, capabilities};
pub use blob_encoding::BlobEncoding;
pub use factory::ArrowFactory;
pub use options::{ArrowOptions, Compression};
pub use torchcachex_reader::TorchcachexReader;
pub use writer::Compaction;
