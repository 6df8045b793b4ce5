//! stowage caches on object storage: S3, Google Cloud Storage, Azure Blob Storage, and the local
//! and in-memory stores, through the [`object_store`] crate.
//!
//! This crate is being built in steps (issue 18). What it has today is the layer every later
//! step stands on:
//! - [`RemoteUrl`]: which store a cache URL names and the prefix the cache lives under;
//! - [`RemoteStore`]: blocking reads and conditional writes of the cache's objects, on one async
//!   runtime per process, made again after a fork ([`runtime`]);
//! - [`manifest::Manifest`] and [`versions`]: versions created once, the newest found in three
//!   requests at any count;
//! - [`commits`] and [`merge`]: each rank commits under its own prefix, and a lock-free,
//!   deterministic merge folds the commits into the next version;
//! - [`node_cache::NodeCache`]: verified copies of remote objects in a local directory with a
//!   byte budget, shared by every process on the machine;
//! - [`faults::FaultyStore`]: a store wrapper that injects the network's faults, for tests.
//!
//! Still to come: the row tables and key index runs a commit carries, row-by-row reads of Arrow
//! and npy caches, and the registry and CLI entries that take a URL wherever they take a
//! path.
//!
//! ```
//! use stowage_remote::RemoteStore;
//! use stowage_core::bytes::Bytes;
//!
//! let store = RemoteStore::open("memory://lib-doc/cache").unwrap();
//! store.put_new("objects/a", Bytes::from_static(b"0123456789")).unwrap();
//! let parts = store.get_ranges("objects/a", &[0..2, 8..10]).unwrap();
//! assert_eq!(parts, [Bytes::from_static(b"01"), Bytes::from_static(b"89")]);
//! assert_eq!(store.list("objects").unwrap()[0].name, "objects/a");
//! ```

pub mod coalesce;
pub mod commits;
pub mod faults;
pub mod manifest;
pub mod merge;
pub mod node_cache;
pub mod remote_url;
pub mod row_record;
pub mod row_table;
pub mod runtime;
pub mod store;
pub mod versions;

pub use remote_url::{RemoteUrl, Scheme};
pub use store::{Created, ObjectInfo, RemoteStore, StoreMaker};
