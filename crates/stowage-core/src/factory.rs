//! [`BackendFactory`]: creates, opens and recognizes the caches of one backend.

use crate::check_plan::{CheckPlan, Selection, Unplanned, damage_report};
use crate::describe::Description;
use crate::{
    Capabilities, DynBackend, DynReader, Result, Schema, ValidationLevel, ValidationReport,
};
use std::path::Path;

/// How to open an existing cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpenMode {
    /// Read only: takes no lock, never blocks and is never blocked by a writer; `put`, `flush` and
    /// `finalize` return `Error::Unsupported`.
    ReadOnly,
    /// Read and write: takes the cache's single-writer lock (`Error::Locked` when another writer holds
    /// it), resumes an unfinished cache, or appends to a finalized one when the backend can.
    Append,
}

/// A kind of cache on disk: a backend's own format, or an original tool's that the backend reads.
///
/// ```
/// use stowage_core::Format;
/// const TORCHCACHEX: Format = Format {
///     id: "torchcachex",
///     description: "torchcachex Arrow segment cache",
///     signature: "segments/segment_*.arrow, schema.json or index.pkl",
/// };
/// assert_eq!(TORCHCACHEX.id, "torchcachex");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Format {
    /// A short stable name, as in `--json` output: `stowage-npy`, `torchcachex`.
    pub id: &'static str,
    /// What it is called in sentences: `stowage NUMPY_10 cache`.
    pub description: &'static str,
    /// What recognizing it looks for, for the "not a cache" error: `data/10/*.npy`.
    pub signature: &'static str,
}

/// Creates, opens and recognizes the caches of one backend kind; what the conformance suite, the
/// [`crate::Registry`] and the `stowage` command hold.
///
/// ```no_run
/// # fn demo(factory: &dyn stowage_core::BackendFactory) -> stowage_core::Result<()> {
/// use stowage_core::{DType, OpenMode, Schema, ShapeRule};
/// let schema = Schema::new().tensor("x", DType::F32, ShapeRule::Fixed(vec![4]));
/// let mut cache = factory.create(std::path::Path::new("/tmp/c"), &schema)?;
/// cache.finalize()?;
/// let reader = factory.open(std::path::Path::new("/tmp/c"), OpenMode::ReadOnly)?;
/// # Ok(()) }
/// ```
pub trait BackendFactory: Send + Sync {
    /// The backend's name, the same as [`crate::Reader::name`].
    fn name(&self) -> &'static str;

    /// The capabilities every cache this factory creates has.
    fn capabilities(&self) -> Capabilities;

    /// Every format this factory recognizes: its own first, then the original tools' it reads.
    fn formats(&self) -> &'static [Format];

    /// The URL schemes whose caches this factory opens, lowercase, without `://` (`["s3",
    /// "gs"]`); the default serves none.
    ///
    /// A [`crate::Registry`] asks a factory about a URL (`s3://bucket/cache`, given as a `&Path`)
    /// only when its scheme is listed here, so a factory that reads local files never sees one
    /// (it would take `s3://bucket/cache` for the relative directory `s3:`); the `stowage`
    /// command refuses to create a cache at a URL with a factory that does not serve its scheme
    /// ([`crate::location::check_served`]).
    fn url_schemes(&self) -> &'static [&'static str] {
        &[]
    }

    /// Which of [`BackendFactory::formats`] the cache at `path` is, if any.
    ///
    /// # Behavior
    /// - `recognize.own-caches`: Recognizes every cache this factory creates, flushed or
    ///   finalized, as its own format (the first of `formats`); `Ok(None)` for a path that holds
    ///   none of its caches (an empty directory, a directory of unrelated files): the path is
    ///   left for the next factory.
    /// - `recognize.marker-decides`: A directory with a stowage marker (`stowage.json`, or
    ///   `stowage.log` without one) is judged by the format the marker names alone: `Ok(None)`
    ///   when it names another format, whatever else the directory holds.
    /// - `recognize.unreadable-marker-is-error`: `Err` when the path claims to be one of this
    ///   factory's caches but its marker cannot be read or does not say which format it is (a
    ///   `stowage.json` that does not parse): it is never guessed around.
    /// - `recognize.never-writes`: Reads at most a few small files; never writes.
    fn recognize(&self, path: &Path) -> Result<Option<&'static Format>>;

    /// Creates a new, empty cache in `dir` (which may exist but must be empty or absent).
    ///
    /// # Behavior
    /// - `create.unsupported-schema-creates-nothing`: A schema outside the capabilities returns
    ///   `Error::Unsupported` and creates nothing.
    /// - `create.existing-is-already-exists`: A directory that already holds a cache returns
    ///   `Error::AlreadyExists`.
    /// - `create.takes-the-lock`: Takes the writer lock: `Error::Locked` when another writer
    ///   holds it (unless the backend declares `Capabilities::concurrent_writers`).
    fn create(&self, dir: &Path, schema: &Schema) -> Result<Box<DynBackend>>;

    /// Opens an existing cache of this backend's own format.
    ///
    /// See [`OpenMode`] for locking and writes.
    ///
    /// # Behavior
    /// - `open.missing-is-not-found`: A missing cache returns `Error::NotFound`.
    /// - `open.read-only-takes-no-lock`: `OpenMode::ReadOnly` takes no lock: it opens and reads
    ///   what was flushed while a writer holds the cache.
    /// - `open.read-only-outlives-finalize`: A read-only handle opened while a writer holds the
    ///   cache keeps reading what was flushed before it opened (`get`, `contains`, `keys`,
    ///   `validate`) after that writer flushes more and finalizes.
    /// - `open.append-takes-the-lock`: `OpenMode::Append` takes the writer lock: `Error::Locked`
    ///   while another writer holds it, free again once that writer is dropped (unless the
    ///   backend declares `Capabilities::concurrent_writers`).
    /// - `open.concurrent-writers-keep-every-put`: With `Capabilities::concurrent_writers`,
    ///   `create` and `OpenMode::Append` take no lock: several handles write one cache at once,
    ///   and a handle opened once they flushed reads every key each of them flushed, with its
    ///   exact sample.
    /// - `open.ignores-stray-files`: Files the backend did not write, in any of the cache's
    ///   directories, are ignored: the cache reads and validates as without them.
    fn open(&self, dir: &Path, mode: OpenMode) -> Result<Box<DynBackend>>;

    /// Opens any cache [`BackendFactory::recognize`] recognizes, read-only: the backend's own, or
    /// an original tool's.
    ///
    /// The default opens the backend's own format with [`OpenMode::ReadOnly`].
    fn open_reader(&self, path: &Path) -> Result<Box<DynReader>> {
        Ok(self.open(path, OpenMode::ReadOnly)?)
    }

    /// Checks the cache at `path`, even one too damaged to open, and lists every problem.
    ///
    /// The default opens it with [`BackendFactory::open_reader`] and validates; a backend whose
    /// caches can be checked piece by piece when they do not open overrides it.
    fn validate_path(&self, path: &Path, level: ValidationLevel) -> Result<ValidationReport> {
        self.open_reader(path)?.validate(level)
    }

    /// What can be said for a report (`stowage inspect`) of the cache at `path`, of `format` (one
    /// of [`BackendFactory::formats`]), when [`BackendFactory::open_reader`] failed with `error`:
    /// the counterpart of [`crate::Reader::describe`] for a cache that does not open, or one with
    /// no reader (a bare hangar data directory).
    ///
    /// The default ([`Description::unopened`]) names the format and the backend, reports the
    /// damage [`BackendFactory::validate_path`] finds, and keeps `error` as the description's
    /// failure, which a tool reports after the description. A backend whose metadata is worth
    /// reporting without a reader overrides it; one with nothing to say returns `error`.
    fn describe_unopened(
        &self,
        path: &Path,
        format: &'static Format,
        error: crate::Error,
    ) -> Result<Description> {
        let structure = self.validate_path(path, ValidationLevel::Structure).ok();
        Ok(Description::unopened(self.name(), format, structure, error))
    }

    /// How to check the cache at `path` when [`BackendFactory::open_reader`] failed with
    /// `error`: the counterpart of [`crate::Reader::check_plan`] for a cache too damaged to open,
    /// or one with no reader (a bare hangar data directory).
    ///
    /// The default needs the keys for a sample, so it refuses one
    /// ([`Unplanned::NoSample`]); without one it is [`BackendFactory::validate_path`] at full
    /// level, an `Error::Corrupted` from it being one problem in the file it names
    /// ([`damage_report`]). A backend whose open errors are never damage to report returns
    /// `error` ([`Unplanned::Error`]).
    fn check_plan_unopened(
        &self,
        path: &Path,
        error: crate::Error,
        selection: &Selection,
    ) -> Result<CheckPlan<'static>, Unplanned> {
        if selection.is_sample() {
            return Err(Unplanned::NoSample { error, scope: "the whole cache" });
        }
        let structure = match self.validate_path(path, ValidationLevel::Full) {
            Ok(structure) => structure,
            Err(e) => damage_report(e)?,
        };
        Ok(CheckPlan::validated(structure))
    }
}
