#![doc = include_str!("../README.md")]
#![deny(missing_docs)]

/// The backend's name in errors.
pub const BACKEND_NAME: &str = "arrow";

pub mod decode;
pub mod encode;
mod framed;
pub mod key_sidecar;
pub mod layout;
pub mod merged_index;
pub mod reader;
pub mod row_sums;
pub mod schema_json;
pub mod segment;
pub mod segment_writer;
mod validate;
