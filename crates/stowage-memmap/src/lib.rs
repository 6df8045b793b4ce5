#![doc = include_str!("../README.md")]
#![deny(missing_docs)]

mod adopt;
mod backend;
mod bin_appender;
mod check_plan;
mod checksum;
mod coverage;
mod describe;
mod error;
mod factory;
mod field_file;
mod file_io;
mod finalize_files;
mod fingerprint_carry;
mod fingerprint_check;
mod formats;
mod index;
mod inspect;
mod key_index;
mod layout;
mod manifest;
mod materialize;
mod options;
mod preset;
mod ram_guard;
mod row_format;
mod sidecar;
mod tail_index;
#[cfg(test)]
mod unit_fixtures;
mod validate;
mod writer;

pub use backend::{BACKEND_NAME, MemmapBackend, capabilities};
pub use factory::MemmapFactory;
pub use fingerprint_carry::CarriedFingerprint;
pub use formats::{DNANET_MEMMAP, STOWAGE_MEMMAP};
pub use materialize::MaterializedMemmap;
pub use options::MemmapOptions;
pub use preset::dnanet;
pub use ram_guard::{BudgetSource, MemoryBudget};

/// The parsers of bytes read from disk, for the fuzz targets only (`fuzz/`, feature `fuzzing`):
/// they are private, and fuzzing them must not make them public API.
#[cfg(feature = "fuzzing")]
#[doc(hidden)]
pub mod fuzzing {
    pub use crate::layout::Shapes;
    pub use crate::manifest::Manifest;
    pub use crate::preset::schema_for;
    pub use crate::row_format::{RowFormat, StowageMeta};
    pub use crate::sidecar::Sidecar;
}

/// Internals the crate's own integration tests, the doc examples of private items and
/// stowage-reliability's mixed-writer campaign need (feature `test-support`, which the crate's
/// dev-dependency on itself turns on): not public API.
#[cfg(feature = "test-support")]
#[doc(hidden)]
pub mod test_support {
    pub use crate::checksum::{is_placeholder, of_key, placeholder_row};
    pub use crate::field_file::FieldFile;
    pub use crate::inspect::InspectReport;
    pub use crate::layout::{FieldLayout, Layout, Shapes};
    pub use crate::manifest::Manifest;
    pub use crate::preset::dnanet_fields;
    pub use crate::ram_guard::{check_realization, parse_cgroup_limit, parse_meminfo_total};
    pub use crate::row_format::RowFormat;
    pub use crate::sidecar::Sidecar;
}
