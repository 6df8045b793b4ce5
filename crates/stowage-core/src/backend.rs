//! The [`Backend`] trait, a cache opened for writing, and its extension trait.

use crate::{Reader, Result, Sample};

/// A cache opened for writing: a [`Reader`] that also stores samples.
///
/// Synchronous and object-safe: use it as `Box<dyn Backend>` ([`DynBackend`]); a
/// `Box<dyn Backend>` converts into a `Box<dyn Reader>` where only reading is needed. Writes go
/// through `&mut self`, reads through `&self`. Convenience methods (`put_batch`, `is_empty`) live
/// in [`BackendExt`].
///
/// The behaviour each method promises is the contract ([`crate::contract`]); the conformance suite
/// checks it clause by clause.
pub trait Backend: Reader {
    /// Stores `sample` under `key`.
    ///
    /// # Behavior
    /// - `put.schema-mismatch-writes-nothing`: A sample that does not match the schema returns
    ///   `Error::SchemaMismatch` and writes nothing.
    /// - `put.empty-key-is-invalid`: The empty key returns `Error::InvalidArgument` (or
    ///   `Error::Unsupported`) and stores nothing.
    /// - `put.existing-key-follows-overwrite`: A key that exists: replaced when
    ///   `Capabilities::overwrite`, else `Error::Unsupported` ("overwrite of an existing key")
    ///   and the old value stays readable.
    /// - `put.after-finalize-is-finalized`: After `finalize`: `Error::Finalized`, unless the
    ///   cache was reopened in append mode and the backend declares `append_after_finalize`.
    /// - `put.read-only-is-unsupported`: On a read-only handle: `Error::Unsupported`, and so do
    ///   `flush` and `finalize`.
    /// - `put.not-durable-is-error`: On a handle that cannot make the put durable (a failed
    ///   flush before, or a role that does not write): an error, never `Ok`.
    /// - `put.visible-at-once`: Visible to `get` on this handle at once; durable only after
    ///   `flush`.
    fn put(&mut self, key: &str, sample: &Sample) -> Result<()>;

    /// Makes every put so far durable.
    ///
    /// # Behavior
    /// - `flush.crash-keeps-flushed`: After it returns `Ok`, a crash (`kill -9`; a power loss too
    ///   with `Capabilities::durable_flush`) loses none of those samples; a crash during it leaves
    ///   each sample either complete or absent, never partial.
    /// - `flush.power-loss-never-torn`: Without `Capabilities::durable_flush`, a power loss may
    ///   lose flushed samples, but the cache still opens, every visible key holds exactly its
    ///   sample, and `validate(Full)` is clean.
    /// - `flush.failure-poisons`: A failed flush is reported, and the handle then refuses
    ///   further writes (`Error::Poisoned`).
    /// - `flush.io-failure-is-error`: A write or sync of the cache's files that fails
    ///   (`ENOSPC`, `EIO`) makes the call it happens in, or at the latest the next `flush` or
    ///   `finalize`, return an error (never a panic, never a silent `Ok`); every sample of a
    ///   `flush` that returned `Ok` before it stays readable and exact, also after a power cut.
    fn flush(&mut self) -> Result<()>;

    /// Flushes, then commits the cache as complete.
    ///
    /// # Behavior
    /// - `finalize.commits`: Commits the cache as complete: `is_finalized` is true from then
    ///   on, also after reopening (a cache only flushed is not finalized), and `put` returns
    ///   `Error::Finalized` (unless reopened in append mode with `append_after_finalize`).
    /// - `finalize.crash-leaves-resumable-or-complete`: A crash during finalize leaves either a
    ///   complete cache (finalized, with every sample put) or a resumable one (every flushed
    ///   sample, and the next writer can finish it).
    fn finalize(&mut self) -> Result<()>;
}

/// A boxed backend of any kind.
pub type DynBackend = dyn Backend;

impl<B: Backend + ?Sized> Backend for Box<B> {
    fn put(&mut self, key: &str, sample: &Sample) -> Result<()> {
        (**self).put(key, sample)
    }
    fn flush(&mut self) -> Result<()> {
        (**self).flush()
    }
    fn finalize(&mut self) -> Result<()> {
        (**self).finalize()
    }
}

/// Convenience methods for every [`Reader`] and [`Backend`], implemented once for all of them.
pub trait BackendExt: Reader {
    /// Whether the cache holds no keys.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Puts every `(key, sample)` in order; stops at the first error (earlier puts stay).
    fn put_batch<'a, I>(&mut self, items: I) -> Result<()>
    where
        Self: Backend,
        I: IntoIterator<Item = (&'a str, &'a Sample)>,
    {
        items.into_iter().try_for_each(|(key, sample)| self.put(key, sample))
    }
}

impl<R: Reader + ?Sized> BackendExt for R {}
