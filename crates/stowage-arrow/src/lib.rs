#![doc = include_str!("../README.md")]
#![deny(missing_docs)]

pub mod decode;
pub mod layout;
pub mod reader;
pub mod schema_json;
pub mod segment;
