//! The backends a crash trial can run, by the label the parent passes to its child: every
//! backend of [`crate::backends::all`], and a negative control that must fail the power-loss
//! trials (an Arrow cache with `durable: false`, whose flush fsyncs nothing).

use crate::backends;
use std::path::Path;
use stowage_arrow::{ArrowBackend, ArrowFactory, ArrowOptions};
use stowage_core::{Backend, BackendFactory, DynBackend, Result, Schema};

/// A backend under crash trials.
pub struct CrashSubject {
    /// The name in reports and the label the child is started with.
    pub label: &'static str,
    /// Opens the cache after the kill.
    pub factory: Box<dyn BackendFactory>,
    /// For Arrow: the options the child builds an [`ArrowBackend`] with, so that it can compact.
    pub arrow: Option<ArrowOptions>,
}

impl std::fmt::Debug for CrashSubject {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CrashSubject").field("label", &self.label).finish_non_exhaustive()
    }
}

/// The label of the negative control.
pub const NOT_DURABLE_ARROW: &str = "arrow-not-durable";

impl CrashSubject {
    /// The backends named in `names` (all when empty), in report order.
    ///
    /// Errors: an unknown name, listing the known ones.
    pub fn select(names: &[String]) -> std::result::Result<Vec<CrashSubject>, String> {
        Ok(backends::select(names)?.into_iter().map(CrashSubject::from_subject).collect())
    }

    fn from_subject(subject: backends::Subject) -> CrashSubject {
        let arrow = (subject.name == stowage_arrow::BACKEND_NAME).then(backends::arrow_options);
        CrashSubject { label: subject.name, factory: subject.factory, arrow }
    }

    /// The negative control: Arrow without fsyncs. Its flushes survive a kill but not a power
    /// cut, so a power-loss trial that kills it after an acknowledged flush must fail.
    pub fn not_durable_arrow() -> CrashSubject {
        let options = ArrowOptions { durable: false, ..backends::arrow_options() };
        CrashSubject {
            label: NOT_DURABLE_ARROW,
            factory: Box::new(ArrowFactory { options: options.clone() }),
            arrow: Some(options),
        }
    }

    /// The subject a child started with `label` writes to.
    pub fn by_label(label: &str) -> Option<CrashSubject> {
        if label == NOT_DURABLE_ARROW {
            return Some(CrashSubject::not_durable_arrow());
        }
        backends::all().into_iter().find(|s| s.name == label).map(CrashSubject::from_subject)
    }

    /// Whether the workload compacts (Arrow's `compact`).
    pub fn compacts(&self) -> bool {
        self.arrow.is_some()
    }

    /// Creates a cache to write, as the concrete [`ArrowBackend`] for Arrow.
    pub fn create(&self, dir: &Path, schema: &Schema) -> Result<Handle> {
        Ok(match &self.arrow {
            Some(options) => {
                Handle::Arrow(Box::new(ArrowBackend::create(dir, schema, options.clone())?))
            }
            None => Handle::Any(self.factory.create(dir, schema)?),
        })
    }
}

/// A cache being written by a child.
pub enum Handle {
    /// Any backend, through the trait.
    Any(Box<DynBackend>),
    /// Arrow, which also compacts.
    Arrow(Box<ArrowBackend>),
}

impl std::fmt::Debug for Handle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let name = match self {
            Handle::Any(backend) => backend.name(),
            Handle::Arrow(backend) => backend.name(),
        };
        f.debug_tuple("Handle").field(&name).finish()
    }
}

impl Handle {
    /// The cache as a [`Backend`].
    pub fn backend(&mut self) -> &mut dyn Backend {
        match self {
            Handle::Any(backend) => &mut **backend,
            Handle::Arrow(backend) => &mut **backend,
        }
    }

    /// Compacts every segment (Arrow); `Unsupported` for the others.
    pub fn compact(&mut self) -> Result<()> {
        match self {
            Handle::Arrow(backend) => backend.compact(u64::MAX).map(drop),
            Handle::Any(backend) => {
                Err(stowage_core::Error::unsupported(backend.name(), "compaction"))
            }
        }
    }
}
