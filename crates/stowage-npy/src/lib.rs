#![doc = include_str!("../README.md")]
#![deny(missing_docs)]

mod backend;
mod check_plan;
mod cold_hash;
pub mod collection;
mod column_writer;
mod describe;
mod error;
mod factory;
mod foreign_files;
mod formats;
mod hangar_dir;
pub mod index;
mod key_table;
pub mod layout;
mod options;
pub mod ownership;
pub mod record;
mod validate;

pub use backend::{BACKEND_NAME, NpyBackend, capabilities};
pub use collection::{CollectionFile, read_hangar_record};
pub use factory::NpyFactory;
pub use formats::{HANGAR_NUMPY10, STOWAGE_NPY};
pub use options::NpyOptions;
pub use record::Numpy10Record;
