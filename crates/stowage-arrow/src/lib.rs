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

mod backend;
mod blob_encoding;
mod check_plan;
mod commit_log;
mod committer;
mod decode;
mod describe;
mod encode;
mod error;
mod factory;
mod framed;
mod key_sidecar;
mod layout;
mod lost_segments;
mod merged_index;
mod open_segments;
mod options;
mod ownership;
mod pending;
mod pickled_index;
mod reader;
mod row_layout;
mod row_sums;
mod sample_cache;
mod schema_json;
mod segment;
mod segment_writer;
mod torchcachex_reader;
mod validate;
mod writer;

pub use backend::{ArrowBackend, capabilities};
pub use blob_encoding::BlobEncoding;
pub use factory::ArrowFactory;
pub use options::{ArrowOptions, Compression};
pub use reader::CacheReader;
pub use schema_json::OutputStructure;
pub use torchcachex_reader::TorchcachexReader;
pub use writer::Compaction;

/// The parsers of bytes read from disk, for the fuzz targets and their seed-corpus generator only
/// (`fuzz/`, feature `fuzzing`): the same hidden mirrors as [`test_support`], under the name the
/// fuzz targets use. The modules are private, and fuzzing them must not make them public API.
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub use test_support as fuzzing;

/// Internals this crate's integration tests, benches and doc examples, stowage-reliability's
/// mixed-writer campaign and the fuzz targets need to build, parse and inspect segments, logs and
/// sidecars by hand (feature `test-support`, which the crate's dev-dependency on itself turns on,
/// or `fuzzing`): not public API. Each mirror re-exports its private module's items.
#[cfg(any(feature = "test-support", feature = "fuzzing"))]
#[doc(hidden)]
pub mod test_support {
    /// `ownership`, as the crate has it.
    pub mod ownership {
        pub use crate::ownership::*;
    }
    /// `pickled_index`, as the crate has it.
    pub mod pickled_index {
        pub use crate::pickled_index::*;
    }
    /// `blob_encoding`, as the crate has it.
    pub mod blob_encoding {
        pub use crate::blob_encoding::*;
    }
    /// `commit_log`, as the crate has it.
    pub mod commit_log {
        pub use crate::commit_log::*;
    }
    /// `decode`, as the crate has it.
    pub mod decode {
        pub use crate::decode::*;
    }
    /// `encode`, as the crate has it.
    pub mod encode {
        pub use crate::encode::*;
    }
    /// `key_sidecar`, as the crate has it.
    pub mod key_sidecar {
        pub use crate::key_sidecar::*;
    }
    /// `layout`, as the crate has it.
    pub mod layout {
        pub use crate::layout::*;
    }
    /// `merged_index`, as the crate has it.
    pub mod merged_index {
        pub use crate::merged_index::*;
    }
    /// `reader`, as the crate has it.
    pub mod reader {
        pub use crate::reader::*;
    }
    /// `row_sums`, as the crate has it.
    pub mod row_sums {
        pub use crate::row_sums::*;
    }
    /// `schema_json`, as the crate has it.
    pub mod schema_json {
        pub use crate::schema_json::*;
    }
    /// `segment`, as the crate has it.
    pub mod segment {
        pub use crate::segment::*;
    }
    /// `segment_writer`, as the crate has it.
    pub mod segment_writer {
        pub use crate::segment_writer::*;
    }
}
