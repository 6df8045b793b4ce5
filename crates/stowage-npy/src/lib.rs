#![doc = include_str!("../README.md")]
#![deny(missing_docs)]

mod backend;
mod check_plan;
mod cold_hash;
mod collection;
mod column_writer;
mod describe;
mod error;
mod factory;
mod foreign_files;
mod formats;
mod hangar_dir;
mod index;
mod key_table;
mod layout;
mod locator;
mod options;
mod ownership;
mod record;
mod runs;
mod validate;

pub use backend::{BACKEND_NAME, NpyBackend, capabilities};
pub use collection::read_hangar_record;
pub use factory::NpyFactory;
pub use formats::{HANGAR_NUMPY10, STOWAGE_NPY};
pub use options::NpyOptions;
pub use record::Numpy10Record;

/// The parsers of bytes read from disk, for the fuzz targets only (`fuzz/`, feature `fuzzing`):
/// they are private, and fuzzing them must not make them public API.
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub mod fuzzing {
    pub use crate::collection::CollectionFile;
    pub use crate::index::{FieldShape, KeyIndex};
}

/// Internals the crate's own integration tests and stowage-reliability's mixed-writer campaign
/// need to lay hangar's files out by hand, and the doc examples of private items use (feature
/// `test-support`, which the crate's dev-dependency on itself turns on): not public API.
#[cfg(feature = "test-support")]
#[doc(hidden)]
pub mod test_support {
    pub use crate::collection::CollectionFile;
    pub use crate::layout::{CommitMarker, Layout};
    pub use crate::ownership::read_claims;
    pub use crate::record::{ParsedRecord, RecordRef, is_valid_uid, new_uid, xxh64, xxh64_hex};
}
