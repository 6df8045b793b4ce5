//! stowage caches on object storage: S3, Google Cloud Storage, Azure Blob Storage, and the local
//! and in-memory stores, through the [`object_store`] crate.
//!
//! [`RemoteCache`] is the cache handle and [`RemoteFactory`] its factory (backend `remote`): see
//! the [`cache`] module for writing as one rank among many and for reading.
//!
//! # Layout 1 of a cache on a store
//!
//! ```text
//! <prefix>/stowage.json                     format, layout and schema, created once
//! <prefix>/versions/<20 digits>.json        a version's manifest, created once
//! <prefix>/latest                           advisory pointer to the newest version
//! <prefix>/commits/<rank>/<20 digits>.json  a rank's commits, created once
//! <prefix>/ranks/<rank>/<xxh3-128>.rows     a part's row records, immutable
//! <prefix>/ranks/<rank>/<xxh3-128>.table    its row table (key hash -> place, checksum)
//! <prefix>/ranks/<rank>/<xxh3-128>.keys     its keys in put order
//! ```
//!
//! Data objects hold row records in this crate's own layout ([`row_record`]), whatever backend
//! the samples came from, so that every cache on a store reads row by row: a cold get is one
//! range read of the key's record, checked against the xxh3-64 its part's row table
//! ([`row_table`]) keeps. Row tables are fetched whole into the node cache and searched there.
//! Converting a cache to a store, and back, goes through samples.
//!
//! # What is here
//! - [`RemoteUrl`]: which store a cache URL names and the prefix the cache lives under;
//! - [`RemoteStore`]: blocking reads and conditional writes of the cache's objects, on one async
//!   runtime per process, made again after a fork ([`runtime`]);
//! - [`manifest::Manifest`] and [`versions`]: versions created once, the newest found in three
//!   requests at any count;
//! - [`commits`] and [`merge`]: each rank commits under its own prefix, and a lock-free,
//!   deterministic merge folds the commits into the next version;
//! - [`row_record`] and [`row_table`]: the formats of the read path;
//! - [`node_cache::NodeCache`]: verified copies of remote objects in a local directory with a
//!   byte budget, shared by every process on the machine;
//! - [`faults::FaultyStore`]: a store wrapper that injects the network's faults, for tests.
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

pub mod cache;
pub mod check;
pub mod coalesce;
pub mod commits;
pub mod factory;
pub mod faults;
pub mod identity;
pub mod key_count;
pub mod manifest;
pub mod merge;
pub mod node_cache;
pub mod part;
pub mod remote_url;
pub mod row_record;
pub mod row_table;
pub mod runtime;
pub mod store;
pub mod versions;
pub mod view;

pub use cache::{RemoteCache, RemoteOptions};
pub use factory::RemoteFactory;
pub use remote_url::{RemoteUrl, Scheme};
pub use store::{Created, ObjectInfo, RemoteStore, StoreMaker};
