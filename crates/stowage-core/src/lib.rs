#![doc = include_str!("../README.md")]
#![deny(missing_docs)]

pub mod backend;
pub mod background_merge;
pub mod capabilities;
pub mod check_plan;
pub mod cold_reads;
pub mod contract;
pub mod describe;
pub mod dtype;
pub mod error;
pub mod factory;
pub mod file_safety;
pub mod foreign;
pub mod key_runs;
pub mod key_table;
pub mod location;
pub mod npy_header;
pub mod open_set;
pub mod prefetch;
pub mod process_limits;
pub mod quote;
pub mod reader;
pub mod recognize;
pub mod registry;
pub mod sample;
pub mod schema;
pub mod segment_log;
pub mod shape;
pub mod skip;
pub mod tensor;
pub mod validation;
pub mod write_behind;
pub mod write_state;

pub use backend::{Backend, BackendExt, DynBackend};
pub use capabilities::Capabilities;
pub use dtype::{ByteOrder, DType};
pub use error::{Error, IoResultExt, Result};
pub use factory::{BackendFactory, Format, OpenMode};
pub use foreign::{Adoption, Unchecked};
pub use reader::{BatchVisitor, DynReader, Reader};
pub use registry::Registry;
pub use sample::{Sample, Value};
pub use schema::{FieldKind, FieldSpec, Schema, ShapeRule};
pub use tensor::{Element, Tensor};
pub use validation::{Problem, ValidationLevel, ValidationReport};
pub use write_state::WriteState;

/// Re-exported so that backends and callers use the same versions as the core.
pub use bytes;
pub use half;
