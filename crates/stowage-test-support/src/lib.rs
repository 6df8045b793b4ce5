#![doc = include_str!("../README.md")]
#![deny(missing_docs)]

pub mod fork;
pub mod moto;
pub mod process;
pub mod python;
pub mod reference;
pub mod workload;
