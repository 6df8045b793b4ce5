//! Crash-safe file primitives every backend builds on.
//!
//! Eight concepts, one module each:
//!
//! - **Atomic replace** ([`atomic_write`], [`atomic_write_with`], [`fsync_dir`]): a whole file is
//!   swapped in with write-temp, fsync, rename, fsync-directory, so a reader or a crash sees either
//!   the old bytes or the new bytes, never a mix. For small metadata files (schema, manifest
//!   snapshots, the "finalized" marker).
//! - **Writer lock** ([`WriterLock`]): one writer per cache, enforced by an OS lock on
//!   `<cache>/.stowage.lock` that dies with its process, so a writer killed with `SIGKILL` never
//!   blocks the next one. Readers never take it.
//! - **Checksummed append-only log** ([`AppendLog`]): framed, checksummed records for manifests and
//!   journals. Reopening finds the last good record and cuts off a torn tail, so after
//!   [`AppendLog::sync`] returns, the records so far survive `kill -9` and power loss, and a partial
//!   record is never returned as data.
//! - **Syncing together** ([`sync_together`]): the files a commit record will point at, made
//!   durable in one journal commit instead of one each.
//! - **Staged files** ([`StagedFiles`]): several new files (a data file and its sidecars) written
//!   under temporary names, synced together, renamed into place in order, directories synced once.
//! - **Publishing without replacing** ([`publish_no_replace`], [`create_temp_beside`]): a new
//!   file takes its final name only if no file has it, for caches shared with writers that take
//!   no lock.
//! - **Abandoned temporaries** ([`remove_abandoned_temps`], [`create_locked_temp_beside`]): the
//!   next writer removes the `.<name>.tmp-<pid>-<n>` files a killed writer left, never one a live
//!   writer is building (under the cache's writer lock there is none; elsewhere the builder holds
//!   an OS lock on its temporary).
//! - **Never writing through a link** ([`open_no_follow`], [`refuse_symlink`],
//!   [`refuse_symlinks_within`], [`create_dir_within`], [`is_refused_symlink`]): every file inside
//!   a cache is opened for writing with `O_NOFOLLOW`, every directory inside it is checked, so a
//!   symbolic link planted in a cache is refused with an error naming it, never written through.
//!   Reads may follow links, and the cache directory itself may be one. Every helper above uses it.
//!
//! ```
//! use stowage_core::file_safety::{AppendLog, WriterLock, atomic_write};
//!
//! let cache = tempfile::tempdir()?;
//! let _lock = WriterLock::acquire(cache.path())?;
//! atomic_write(cache.path().join("schema.json"), br#"{"fields":[]}"#)?;
//!
//! let (mut log, recovered) = AppendLog::open(cache.path().join("manifest.log"), true)?;
//! assert!(recovered.records.is_empty());
//! log.append(b"put key-1")?;
//! log.sync()?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod abandoned;
mod append_log;
mod atomic;
mod lock;
mod no_follow;
mod no_replace;
mod staged;
mod sync_together;

pub use abandoned::{
    create_locked_temp_beside, relock_temp, remove_abandoned_temps, temp_target_name,
};
pub use append_log::{AppendLog, Damage, DamageKind, Recovered};
pub use atomic::{atomic_write, atomic_write_with, fsync_dir};
pub(crate) use atomic::{create_temp_read_write, parent_dir};
pub use lock::WriterLock;
pub use no_follow::{
    create_dir_within, create_dir_within_durably, is_refused_symlink, open_no_follow,
    refuse_symlink, refuse_symlinks_within,
};
pub use no_replace::{create_temp_beside, publish_no_replace};
pub use staged::StagedFiles;
pub use sync_together::sync_together;
