#![doc = include_str!("../README.md")]
#![deny(missing_docs)]

pub mod backends;
pub mod checks;
pub mod cli;
pub mod concurrency;
pub mod convert;
pub mod corruption;
pub mod crash;
pub mod faults;
pub mod mixed;
pub mod remote;
pub mod stowage_bin;
pub mod tables;
pub mod work_dir;
