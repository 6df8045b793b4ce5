//! The backends a crash trial can run, by the label the parent passes to its child: every
//! backend of [`crate::backends::all`], and a negative control that must fail the power-loss
//! trials (an Arrow cache with `durable: false`, whose flush fsyncs nothing).

use crate::backends;
use crate::crash::workload::Workload;
use std::path::Path;
use stowage_arrow::{ArrowBackend, ArrowFactory, ArrowOptions};
use stowage_core::{Backend, BackendFactory, DynBackend, Reader, Result, Schema};

/// A backend under crash trials.
pub struct CrashSubject {
    /// The name in reports and the label the child is started with.
    pub label: &'static str,
    /// Opens the cache after the kill.
    pub factory: Box<dyn BackendFactory>,
    /// For Arrow: the options the child builds an [`ArrowBackend`] with, so that it can compact.
    pub arrow: Option<ArrowOptions>,
    /// At default options with a realistic workload ([`Workload::realistic`]): a subject of
    /// [`backends::defaults`].
    pub realistic: bool,
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

    /// The backends named in `names` (all when empty) at their default options, each with a
    /// realistic workload, labelled `<backend>@defaults`.
    ///
    /// Errors: an unknown name.
    pub fn select_realistic(names: &[String]) -> std::result::Result<Vec<CrashSubject>, String> {
        Ok(backends::select_defaults(names)?.into_iter().map(CrashSubject::from_subject).collect())
    }

    fn from_subject(subject: backends::Subject) -> CrashSubject {
        let realistic = subject.name != backends::backend_of(subject.name);
        let arrow =
            (backends::backend_of(subject.name) == stowage_arrow::BACKEND_NAME).then(|| {
                if realistic { ArrowOptions::default() } else { backends::arrow_options() }
            });
        CrashSubject { label: subject.name, factory: subject.factory, arrow, realistic }
    }

    /// The workload of a trial of seed `seed`: [`Workload::generate`], or for a realistic
    /// subject [`Workload::realistic`] with flushes about every 100 puts on Arrow (each flush
    /// makes a segment and its two sidecars: some 3,000 files), every 50 on npy (whose realistic
    /// samples have 20 fields, [`backends::with_realistic_fields`], in collection files of
    /// 1,000: some 2,000 files) and every 2,000 elsewhere.
    pub fn workload(&self, seed: u64) -> Workload {
        let caps = self.factory.capabilities();
        if !self.realistic {
            return Workload::generate(&caps, seed, self.compacts());
        }
        let flush_every = backends::realistic_flush_every(self.label);
        let mut workload = Workload::realistic(&caps, seed, self.compacts(), flush_every);
        workload.schema = backends::with_realistic_fields(self.label, workload.schema);
        workload
    }

    /// The negative control: Arrow without fsyncs. Its flushes survive a kill but not a power
    /// cut, so a power-loss trial that kills it after an acknowledged flush must fail.
    pub fn not_durable_arrow() -> CrashSubject {
        let options = ArrowOptions { durable: false, ..backends::arrow_options() };
        CrashSubject {
            label: NOT_DURABLE_ARROW,
            factory: Box::new(ArrowFactory { options: options.clone() }),
            arrow: Some(options),
            realistic: false,
        }
    }

    /// The subject a child started with `label` writes to.
    pub fn by_label(label: &str) -> Option<CrashSubject> {
        if label == NOT_DURABLE_ARROW {
            return Some(CrashSubject::not_durable_arrow());
        }
        backends::all()
            .into_iter()
            .chain(backends::defaults())
            .find(|s| s.name == label)
            .map(CrashSubject::from_subject)
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
