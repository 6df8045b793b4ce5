//! The read-only [`Reader`] trait: what every cache offers, whoever wrote it.

use crate::check_plan::{self, CheckPlan, Selection};
use crate::describe::Description;
use crate::{Capabilities, Format, Result, Sample, Schema, ValidationLevel, ValidationReport};
use std::ops::ControlFlow;
use std::path::Path;

/// A cache of samples addressed by string keys, opened for reading.
///
/// Every backend implements it (through [`crate::Backend`], its writer trait), and so does every
/// reader of a cache an original tool wrote (torchcachex's segments, aenet's `/torch_cache`), so
/// that a tool such as the `stowage` command reads any cache the same way
/// ([`crate::Registry::open`]).
///
/// Synchronous and object-safe: use it as `Box<dyn Reader>` ([`DynReader`]). A reader that
/// declares [`Capabilities::concurrent_readers`] may be shared between threads.
///
/// The behaviour each method promises is the contract ([`crate::contract`]); the conformance suite
/// checks it clause by clause.
#[allow(clippy::len_without_is_empty)] // `is_empty` is in `BackendExt`.
pub trait Reader: Send + Sync {
    /// The backend's short name, as used in errors (`"npy"`).
    ///
    /// # Behavior
    /// - `errors.unsupported-names-backend`: Is the same string as the factory's `name` and as
    ///   the `backend` of every `Error::Unsupported` the backend returns.
    fn name(&self) -> &'static str;

    /// The format of this cache: the backend's own, or the original tool's it reads.
    fn format(&self) -> &'static Format;

    /// The features this cache supports.
    ///
    /// # Behavior
    /// - `capabilities.declared-works`: Every declared capability works.
    /// - `capabilities.undeclared-unsupported`: Every undeclared capability returns
    ///   `Error::Unsupported`.
    /// - `capabilities.match-factory`: A cache created by a factory, or opened by it read-only or
    ///   for appending, declares exactly the factory's capabilities.
    /// - `capabilities.max-rank`: `max_rank` is enforced: with `Some(n)`, a tensor field of rank
    ///   n works and `create` refuses rank n + 1 with `Error::Unsupported`, creating nothing;
    ///   with `None`, rank 8 works.
    fn capabilities(&self) -> &Capabilities;

    /// The schema the cache was created with.
    ///
    /// # Behavior
    /// - `schema.survives-reopen`: After reopening, equals the schema given at creation.
    fn schema(&self) -> &Schema;

    /// Where the cache lives.
    fn path(&self) -> &Path;

    /// Reads the sample stored under `key`.
    ///
    /// # Behavior
    /// - `get.missing-is-none`: A missing key returns `Ok(None)`.
    /// - `get.returns-what-was-put`: Returns exactly the sample that was put: each field's
    ///   dtype, shape and bytes.
    /// - `get.corruption-is-an-error`: Corrupted bytes are an error (`Error::Corrupted` naming
    ///   the file and key), never returned as data.
    fn get(&self, key: &str) -> Result<Option<Sample>>;

    /// [`Reader::get`] when it can answer without waiting: from what the handle already holds
    /// open (memory maps, files it read through without a library's global lock), taking no
    /// lock another thread may hold for long. `None` says it cannot now (a file to open first,
    /// a library call that takes a process-wide lock); the caller then calls `get`, for
    /// instance after letting an interpreter lock go, which a `get` that may wait needs.
    ///
    /// The default answers `None`: backends whose `get` may wait and that can tell when it
    /// will not override it.
    ///
    /// # Behavior
    /// - `get-if-ready.agrees-with-get`: `Some` holds exactly what `get` returns for the key;
    ///   `None` changes nothing.
    ///
    /// ```
    /// use stowage_core::{Reader, Result, Sample};
    /// // A caller holding a lock others need while it waits, reading one key.
    /// fn read(reader: &dyn Reader, key: &str) -> Result<Option<Sample>> {
    ///     match reader.get_if_ready(key) {
    ///         Some(found) => found,
    ///         None => reader.get(key), // (after letting the lock go)
    ///     }
    /// }
    /// ```
    fn get_if_ready(&self, key: &str) -> Option<Result<Option<Sample>>> {
        let _ = key;
        None
    }

    /// Reads every key in order; `None` for a missing one. Backends override it to read in
    /// storage order.
    ///
    /// # Behavior
    /// - `get-batch.agrees-with-get`: Agrees with `get` key by key.
    fn get_batch(&self, keys: &[&str]) -> Result<Vec<Option<Sample>>> {
        keys.iter().map(|key| self.get(key)).collect()
    }

    /// Reads every key in order, as [`Reader::get_batch`] does, and hands each result to `visit`
    /// (the key's position in `keys`, and the sample or `None`) as soon as it is read. A caller
    /// that copies the samples out (the Python package's `get_batch_into`) copies each one while
    /// its bytes are still in the CPU cache, and never holds the whole batch.
    ///
    /// `visit` returns [`ControlFlow::Break`] to stop: no later key is visited. A read error
    /// stops the batch and is returned; the keys visited before it stay visited.
    ///
    /// The default visits what `get_batch` returns. A backend whose `get_batch` reads key by key
    /// overrides it to visit each sample right after reading it.
    ///
    /// ```
    /// # use stowage_core::{Reader, Result};
    /// # use std::ops::ControlFlow;
    /// // The position of the first key of `keys` that is not stored, reading no key after it.
    /// fn first_missing(reader: &dyn Reader, keys: &[&str]) -> Result<Option<usize>> {
    ///     let mut missing = None;
    ///     reader.get_batch_each(keys, &mut |at, sample| {
    ///         if sample.is_some() {
    ///             return ControlFlow::Continue(());
    ///         }
    ///         missing = Some(at);
    ///         ControlFlow::Break(())
    ///     })?;
    ///     Ok(missing)
    /// }
    /// ```
    ///
    /// # Behavior
    /// - `get-batch-each.agrees-with-get-batch`: Visits each key once, in order, with what
    ///   `get_batch` returns for it, until `visit` breaks.
    fn get_batch_each(&self, keys: &[&str], visit: &mut BatchVisitor<'_>) -> Result<()> {
        for (at, sample) in self.get_batch(keys)?.into_iter().enumerate() {
            if visit(at, sample).is_break() {
                break;
            }
        }
        Ok(())
    }

    /// Whether `key` is stored.
    ///
    /// # Behavior
    /// - `contains.agrees-with-get`: Agrees with `get(key).is_some()` without reading sample
    ///   bytes.
    fn contains(&self, key: &str) -> Result<bool>;

    /// Number of distinct keys stored (a replaced key counts once).
    ///
    /// # Behavior
    /// - `len.counts-distinct-keys`: Equals `keys().len()`.
    fn len(&self) -> usize;

    /// Every stored key, in insertion order of first put.
    ///
    /// # Behavior
    /// - `keys.first-put-order`: Each key once, in the order of its first put.
    fn keys(&self) -> Result<Vec<String>>;

    /// Whether the cache was committed as complete.
    fn is_finalized(&self) -> bool;

    /// Checks the cache and lists every problem.
    ///
    /// # Behavior
    /// - `validate.never-writes`: Never changes any file.
    /// - `validate.clean-cache-is-clean`: A clean cache gives an empty problem list.
    /// - `validate.reports-what-get-detects`: Every corruption `get` would detect is listed with
    ///   its file and key.
    fn validate(&self, level: ValidationLevel) -> Result<ValidationReport>;

    /// How to check this cache from end to end, for a tool that runs the sample checks on many
    /// threads (`stowage verify`): the whole-cache checks already made, and independent units of
    /// sample checks covering the `selection`'s keys.
    ///
    /// The default ([`check_plan::by_keys`]) is the reader's full validation, or with a sample,
    /// the structure check and each selected key read through [`Reader::get`]. A backend whose
    /// samples split into independent files overrides it with one unit per file.
    fn check_plan(&self, selection: &Selection) -> Result<CheckPlan<'_>> {
        check_plan::by_keys(self, selection)
    }

    /// What the format says about this cache, for a report (`stowage inspect`): the name and
    /// version it records, its state in words, the role of each file, what its checksums cover,
    /// dedup, memory, the structure check, and the original tool's own report if it has one.
    ///
    /// The default ([`Description::of_reader`]) says what this trait alone tells: the finalized
    /// state, the capabilities, memory projected from a sample read and the structure check. A
    /// backend that knows more overrides it.
    fn describe(&self) -> Result<Description> {
        Description::of_reader(self)
    }
}

/// [`Reader::get_batch`] through [`Reader::get_batch_each`], for a backend that implements the
/// visiting form and has nothing else to do in the collecting one.
///
/// ```
/// # use stowage_core::{Reader, Result, Sample, reader::batch_by_visiting};
/// fn batch(reader: &dyn Reader) -> Result<Vec<Option<Sample>>> {
///     batch_by_visiting(reader, &["a", "b"])
/// }
/// ```
pub fn batch_by_visiting<R: Reader + ?Sized>(
    reader: &R,
    keys: &[&str],
) -> Result<Vec<Option<Sample>>> {
    let mut found = Vec::with_capacity(keys.len());
    reader.get_batch_each(keys, &mut |_, sample| {
        found.push(sample);
        ControlFlow::Continue(())
    })?;
    Ok(found)
}

/// A boxed reader of any kind.
pub type DynReader = dyn Reader;

/// What [`Reader::get_batch_each`] hands each key's result to: the key's position in the batch
/// and its sample (`None` when missing); [`ControlFlow::Break`] stops the batch.
pub type BatchVisitor<'a> = dyn FnMut(usize, Option<Sample>) -> ControlFlow<()> + 'a;

impl<R: Reader + ?Sized> Reader for Box<R> {
    fn name(&self) -> &'static str {
        (**self).name()
    }
    fn format(&self) -> &'static Format {
        (**self).format()
    }
    fn capabilities(&self) -> &Capabilities {
        (**self).capabilities()
    }
    fn schema(&self) -> &Schema {
        (**self).schema()
    }
    fn path(&self) -> &Path {
        (**self).path()
    }
    fn get(&self, key: &str) -> Result<Option<Sample>> {
        (**self).get(key)
    }
    fn get_if_ready(&self, key: &str) -> Option<Result<Option<Sample>>> {
        (**self).get_if_ready(key)
    }
    fn get_batch(&self, keys: &[&str]) -> Result<Vec<Option<Sample>>> {
        (**self).get_batch(keys)
    }
    fn get_batch_each(&self, keys: &[&str], visit: &mut BatchVisitor<'_>) -> Result<()> {
        (**self).get_batch_each(keys, visit)
    }
    fn contains(&self, key: &str) -> Result<bool> {
        (**self).contains(key)
    }
    fn len(&self) -> usize {
        (**self).len()
    }
    fn keys(&self) -> Result<Vec<String>> {
        (**self).keys()
    }
    fn is_finalized(&self) -> bool {
        (**self).is_finalized()
    }
    fn validate(&self, level: ValidationLevel) -> Result<ValidationReport> {
        (**self).validate(level)
    }
    fn check_plan(&self, selection: &Selection) -> Result<CheckPlan<'_>> {
        (**self).check_plan(selection)
    }
    fn describe(&self) -> Result<Description> {
        (**self).describe()
    }
}
