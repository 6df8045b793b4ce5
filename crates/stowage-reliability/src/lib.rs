#![doc = include_str!("../README.md")]
#![deny(missing_docs)]

pub mod backends;
pub mod crash;
