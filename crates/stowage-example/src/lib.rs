#![doc = include_str!("../README.md")]
//! ## Code layout
//!
//! Three modules, one concept each: [`record`] what a journal record holds and its bytes,
//! [`backend`] the `Backend` over the journal, [`factory`] the `BackendFactory` the conformance
//! suite runs against.
#![deny(missing_docs)]

pub mod backend;
pub mod factory;
pub mod record;

pub use backend::{BACKEND_NAME, JournalBackend, capabilities};
pub use factory::JournalFactory;
