#![doc = include_str!("../README.md")]
#![deny(missing_docs)]

pub mod backend;
pub mod canonical_json;
pub mod capabilities;
pub mod dtype;
pub mod error;
pub mod file_safety;
pub mod fingerprint;
pub mod foreign;
pub mod prefetch;
pub mod sample;
pub mod schema;
pub mod shape;
pub mod tensor;
pub mod write_behind;

pub use backend::{
    Backend, BackendExt, BackendFactory, DynBackend, OpenMode, Problem, ValidationLevel,
    ValidationReport,
};
pub use capabilities::Capabilities;
pub use dtype::{ByteOrder, DType};
pub use error::{Error, IoResultExt, Result};
pub use foreign::{Adoption, Unchecked};
pub use sample::{Sample, Value};
pub use schema::{FieldKind, FieldSpec, Schema, ShapeRule};
pub use tensor::{Element, Tensor};

/// Re-exported so that backends and callers use the same versions as the core.
pub use bytes;
pub use half;
