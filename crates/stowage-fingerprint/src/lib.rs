//! The original tools' key schemes, reproduced byte for byte: cache keys, source fingerprints and
//! chained fingerprints, and the Python-exact JSON encoder they hash ([`canonical_json`]).
//!
//! A toolkit for backends and tools that share caches with DNANet, aenet and torchcachex, not
//! part of the backend contract (which is `stowage-core`).
//!
//! | what | function | form |
//! |---|---|---|
//! | cache key (names the cache directory) | [`cache_key`] | first 16 hex of SHA-256 of the config's DNANet JSON |
//! | fingerprint (config + source stamps) | [`fingerprint_hash`] | full SHA-256 hex, stored in `fingerprint.json` ([`FingerprintFile`]) |
//! | staleness check | [`validate_fingerprint`] | [`FingerprintStatus`]: fresh, stale, missing or unreadable |
//! | why a fingerprint differs | [`explain`] | [`Explanation`]: config fields and sources that changed |
//! | chained fingerprint (derived dataset states) | [`chain_fingerprint`] | 16 hex of xxh64 |
//!
//! ```
//! use stowage_fingerprint::{cache_key, fingerprint_hash, SourceStamp};
//! let config = serde_json::json!({"cache_version": 5, "root": "/data"});
//! assert_eq!(cache_key(&config).len(), 16);
//! let stamps = [SourceStamp::ContentHash { path: "a.hid".into(), content_hash: None }];
//! assert_eq!(fingerprint_hash(&config, &stamps).len(), 64);
//! ```

#![deny(missing_docs)]

mod cache_key;
pub mod canonical_json;
mod chain;
mod explain;
mod fingerprint_file;
mod fingerprint_hash;
mod source_stamp;
mod validation;

pub use cache_key::cache_key;
pub use chain::chain_fingerprint;
pub use explain::{ConfigChange, Explanation, SourceChange, explain};
pub use fingerprint_file::{FINGERPRINT_FILE_NAME, FingerprintFile};
pub use fingerprint_hash::{fingerprint_digest_input, fingerprint_hash};
pub use source_stamp::SourceStamp;
pub use validation::{FingerprintStatus, validate_fingerprint};
