#![doc = include_str!("../README.md")]
//! ## Code layout
//!
//! Five private modules, one concept each: `record` what a journal record holds and its bytes,
//! `error` the backend's own error type and how it maps into the core's categories, `backend`
//! the cache and its writer half (`Backend`), `reader` its reader half (`Reader`), and
//! `factory` the `BackendFactory` the conformance suite and a `Registry` hold. The public
//! surface is [`JournalBackend`], [`JournalFactory`], [`JOURNAL`] and [`capabilities`].
#![deny(missing_docs)]

mod backend;
mod error;
mod factory;
mod reader;
mod record;

pub use backend::{BACKEND_NAME, JournalBackend, capabilities};
pub use factory::{JOURNAL, JournalFactory};

/// The journal's record decoder, for the fuzz targets only (`fuzz/`, feature `fuzzing`): the
/// parser of bytes read from disk is private, and fuzzing it must not make it public API.
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub mod fuzzing {
    pub use crate::record::Record;
}
