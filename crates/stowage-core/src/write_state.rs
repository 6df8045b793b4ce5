//! [`WriteState`]: the state every writing handle keeps (read-only, finalized, poisoned) and the
//! checks every `put`, `flush` and `finalize` starts with, written once for all backends.

use crate::{Capabilities, Error, Result, Sample, Schema};
use std::path::{Path, PathBuf};

/// Whether a handle may write, whether its cache is finalized, and whether an earlier failure
/// poisoned it.
///
/// ```
/// use stowage_core::{Capabilities, DType, Error, Sample, Schema, ShapeRule, Tensor, WriteState};
/// let schema = Schema::new().tensor("x", DType::U8, ShapeRule::Fixed(vec![1]));
/// let mut caps = Capabilities::none();
/// caps.dtypes = vec![DType::U8];
/// let sample = Sample::new().with("x", Tensor::from_slice(&[1], &[7u8])?);
///
/// let mut state = WriteState::writable("demo", "/tmp/cache", false);
/// state.check_put("k", &sample, &schema, &caps)?;
/// state.poison(&Error::invalid("disk gone"));
/// assert!(matches!(state.check_put("k", &sample, &schema, &caps), Err(Error::Poisoned { .. })));
///
/// let read_only = WriteState::read_only("demo", "/tmp/cache", true);
/// assert!(matches!(read_only.check_write("put"), Err(Error::Unsupported { backend: "demo", .. })));
/// # Ok::<(), Error>(())
/// ```
#[derive(Debug, Clone)]
pub struct WriteState {
    backend: &'static str,
    cache: PathBuf,
    writable: bool,
    finalized: bool,
    poisoned: Option<String>,
}

impl WriteState {
    /// A handle opened for writing (created, or opened in append mode).
    pub fn writable(backend: &'static str, cache: impl Into<PathBuf>, finalized: bool) -> Self {
        WriteState { backend, cache: cache.into(), writable: true, finalized, poisoned: None }
    }

    /// A handle opened read-only: every write is `Error::Unsupported`.
    pub fn read_only(backend: &'static str, cache: impl Into<PathBuf>, finalized: bool) -> Self {
        WriteState { backend, cache: cache.into(), writable: false, finalized, poisoned: None }
    }

    /// The cache directory.
    pub fn cache(&self) -> &Path {
        &self.cache
    }

    /// Whether the handle may write at all (not read-only).
    pub fn is_writable(&self) -> bool {
        self.writable
    }

    /// Whether the cache was committed as complete.
    pub fn is_finalized(&self) -> bool {
        self.finalized
    }

    /// Records that the cache is now committed as complete (or, reopened for appending, no
    /// longer: `false`).
    pub fn set_finalized(&mut self, finalized: bool) {
        self.finalized = finalized;
    }

    /// The failure that poisoned the handle, if one did.
    pub fn poisoned(&self) -> Option<&str> {
        self.poisoned.as_deref()
    }

    /// Poisons the handle: every later write returns `Error::Poisoned` naming `cause`. The first
    /// cause is kept.
    pub fn poison(&mut self, cause: &Error) {
        if self.poisoned.is_none() {
            self.poisoned = Some(cause.to_string());
        }
    }

    /// Passes `result` through, poisoning the handle when it is an error: for writes after which
    /// the handle's memory may no longer match its files.
    pub fn poison_on_error<T>(&mut self, result: Result<T>) -> Result<T> {
        if let Err(e) = &result {
            self.poison(e);
        }
        result
    }

    /// The check every write (`put`, `flush`, `finalize`) starts with: `Error::Unsupported`
    /// naming `operation` on a read-only handle, `Error::Poisoned` after a failure.
    pub fn check_write(&self, operation: &str) -> Result<()> {
        if !self.writable {
            return Err(Error::unsupported(
                self.backend,
                format!("{operation} on a cache opened read-only"),
            ));
        }
        match &self.poisoned {
            Some(cause) => Err(Error::poisoned(&self.cache, cause)),
            None => Ok(()),
        }
    }

    /// The checks every `put` starts with, in this order: [`WriteState::check_write`], then
    /// `Error::Finalized`, then the key ([`Capabilities::check_key`]) and the sample against the
    /// schema ([`Schema::validate`]). Nothing has been written when it fails.
    pub fn check_put(
        &self,
        key: &str,
        sample: &Sample,
        schema: &Schema,
        capabilities: &Capabilities,
    ) -> Result<()> {
        self.check_write("put")?;
        if self.finalized {
            return Err(Error::Finalized { path: self.cache.clone() });
        }
        capabilities.check_key(key, self.backend)?;
        schema.validate(sample)
    }
}
