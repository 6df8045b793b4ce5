//! The `Backend` trait every storage format implements, its extension trait and its factory.

use crate::{Capabilities, Result, Sample, Schema, Unchecked};
use std::path::{Path, PathBuf};

/// How thoroughly [`Backend::validate`] checks a cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ValidationLevel {
    /// Files present, sizes and headers consistent, metadata parses. Does not read sample bytes.
    Structure,
    /// Everything in `Structure`, plus every stored checksum recomputed over its bytes.
    Full,
}

/// One problem [`Backend::validate`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// The file the problem is in, when it is in one.
    pub path: Option<PathBuf>,
    /// The sample key affected, when one is.
    pub key: Option<String>,
    /// What is wrong, with both sides of any mismatch.
    pub detail: String,
}

impl std::fmt::Display for Problem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if let Some(path) = &self.path {
            write!(f, "{}: ", path.display())?;
        }
        if let Some(key) = &self.key {
            write!(f, "key {key:?}: ")?;
        }
        f.write_str(&self.detail)
    }
}

/// What [`Backend::validate`] checked, every problem it found, and the data it could not check.
///
/// ```
/// let report = stowage_core::ValidationReport::default();
/// assert!(report.is_clean());
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ValidationReport {
    /// Samples whose bytes or records were checked.
    pub samples_checked: u64,
    /// Files examined.
    pub files_checked: u64,
    /// Every problem found; empty when the cache is undamaged.
    pub problems: Vec<Problem>,
    /// Data another writer added that stowage's checksums do not cover ([`crate::foreign`]).
    pub unchecked: Vec<Unchecked>,
}

impl ValidationReport {
    /// Whether every byte was checked and no problem was found. A cache holding data another
    /// writer added ([`ValidationReport::unchecked`]) is never clean.
    pub fn is_clean(&self) -> bool {
        self.problems.is_empty() && self.unchecked.is_empty()
    }

    /// Whether no problem was found in what was checked (there may be data left unchecked).
    pub fn is_undamaged(&self) -> bool {
        self.problems.is_empty()
    }

    /// Records a problem.
    pub fn problem(&mut self, path: Option<&Path>, key: Option<&str>, detail: impl Into<String>) {
        self.problems.push(Problem {
            path: path.map(Path::to_path_buf),
            key: key.map(str::to_owned),
            detail: detail.into(),
        });
    }
}

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

/// A cache of samples addressed by string keys.
///
/// Synchronous and object-safe: use it as `Box<dyn Backend>` ([`DynBackend`]). Writes go through
/// `&mut self`; reads through `&self`, and a backend that declares
/// [`Capabilities::concurrent_readers`] may be shared between threads for reading.
/// Convenience methods (batches, `is_empty`) live in [`BackendExt`].
#[allow(clippy::len_without_is_empty)] // `is_empty` is in `BackendExt`: the trait has no default bodies.
pub trait Backend: Send + Sync {
    /// The backend's short name, as used in errors (`"npy"`).
    ///
    /// # Behavior
    /// - Is the same string as in every `Error::Unsupported` the backend returns.
    fn name(&self) -> &'static str;

    /// The features this backend supports.
    ///
    /// # Behavior
    /// - Every declared capability works; every undeclared one returns `Error::Unsupported`.
    fn capabilities(&self) -> &Capabilities;

    /// The schema the cache was created with.
    ///
    /// # Behavior
    /// - After reopening, equals the schema given at creation.
    fn schema(&self) -> &Schema;

    /// Where the cache lives.
    fn path(&self) -> &Path;

    /// Stores `sample` under `key`.
    ///
    /// # Behavior
    /// - A sample that does not match the schema returns `Error::SchemaMismatch` and writes nothing.
    /// - A key that exists: replaced when `Capabilities::overwrite`, else `Error::Unsupported`
    ///   ("overwrite of an existing key") and the old value stays readable.
    /// - After `finalize`: `Error::Finalized`, unless the cache was reopened in append mode and the
    ///   backend declares `append_after_finalize`.
    /// - On a read-only handle: `Error::Unsupported`.
    /// - Visible to `get` on this handle at once; durable only after `flush`.
    fn put(&mut self, key: &str, sample: &Sample) -> Result<()>;

    /// Reads the sample stored under `key`.
    ///
    /// # Behavior
    /// - A missing key returns `Ok(None)`.
    /// - Returns exactly the bytes that were put (dtype, shape, bytes), or an error: corrupted bytes are
    ///   `Error::Corrupted` naming the file and key, never returned as data.
    fn get(&self, key: &str) -> Result<Option<Sample>>;

    /// Whether `key` is stored.
    ///
    /// # Behavior
    /// - Agrees with `get(key).is_some()` without reading sample bytes.
    fn contains(&self, key: &str) -> Result<bool>;

    /// Number of distinct keys stored (a replaced key counts once).
    ///
    /// # Behavior
    /// - Equals `keys().len()`.
    fn len(&self) -> usize;

    /// Every stored key, in insertion order of first put.
    ///
    /// # Behavior
    /// - Each key once.
    fn keys(&self) -> Result<Vec<String>>;

    /// Makes every put so far durable.
    ///
    /// # Behavior
    /// - After it returns, a crash (`kill -9`, power loss) loses none of those samples; a crash during
    ///   it leaves each sample either complete or absent, never partial.
    /// - A failed flush is reported, and the handle then refuses further writes.
    fn flush(&mut self) -> Result<()>;

    /// Flushes, then commits the cache as complete.
    ///
    /// # Behavior
    /// - Afterwards `put` returns `Error::Finalized` (unless reopened in append mode with
    ///   `append_after_finalize`).
    /// - A crash during finalize leaves either a resumable cache or a complete one.
    fn finalize(&mut self) -> Result<()>;

    /// Whether the cache was committed as complete.
    fn is_finalized(&self) -> bool;

    /// Checks the cache and lists every problem.
    ///
    /// # Behavior
    /// - Never changes any file.
    /// - A clean cache gives an empty problem list; every corruption `get` would detect is listed with
    ///   its file and key.
    fn validate(&self, level: ValidationLevel) -> Result<ValidationReport>;
}

/// A boxed backend of any kind.
pub type DynBackend = dyn Backend;

impl<B: Backend + ?Sized> Backend for Box<B> {
    fn name(&self) -> &'static str {
        (**self).name()
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
    fn put(&mut self, key: &str, sample: &Sample) -> Result<()> {
        (**self).put(key, sample)
    }
    fn get(&self, key: &str) -> Result<Option<Sample>> {
        (**self).get(key)
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
    fn flush(&mut self) -> Result<()> {
        (**self).flush()
    }
    fn finalize(&mut self) -> Result<()> {
        (**self).finalize()
    }
    fn is_finalized(&self) -> bool {
        (**self).is_finalized()
    }
    fn validate(&self, level: ValidationLevel) -> Result<ValidationReport> {
        (**self).validate(level)
    }
}

/// Convenience methods for every [`Backend`], implemented once for all of them.
pub trait BackendExt: Backend {
    /// Whether the cache holds no keys.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Puts every `(key, sample)` in order; stops at the first error (earlier puts stay).
    fn put_batch<'a, I>(&mut self, items: I) -> Result<()>
    where
        I: IntoIterator<Item = (&'a str, &'a Sample)>,
    {
        items.into_iter().try_for_each(|(key, sample)| self.put(key, sample))
    }

    /// Gets every key in order; `None` for a missing one.
    fn get_batch(&self, keys: &[&str]) -> Result<Vec<Option<Sample>>> {
        keys.iter().map(|key| self.get(key)).collect()
    }
}

impl<B: Backend + ?Sized> BackendExt for B {}

/// Creates and opens caches of one backend kind; what the conformance suite and the CLI hold.
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
    /// The backend's name, the same as [`Backend::name`].
    fn name(&self) -> &'static str;

    /// The capabilities every cache of this factory has.
    fn capabilities(&self) -> Capabilities;

    /// Creates a new, empty cache in `dir` (which may exist but must be empty or absent).
    ///
    /// # Behavior
    /// - A schema outside the capabilities returns `Error::Unsupported` and creates nothing.
    /// - A directory that already holds a cache returns `Error::AlreadyExists`.
    /// - Takes the writer lock: `Error::Locked` when another writer holds it.
    fn create(&self, dir: &Path, schema: &Schema) -> Result<Box<DynBackend>>;

    /// Opens an existing cache.
    ///
    /// # Behavior
    /// - A missing cache returns `Error::NotFound`.
    /// - See [`OpenMode`] for locking and writes.
    fn open(&self, dir: &Path, mode: OpenMode) -> Result<Box<DynBackend>>;
}
