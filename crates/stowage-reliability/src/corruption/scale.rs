//! How big a pristine cache is and which options write it: the quick form (48 samples, the small
//! segments and collections of [`crate::backends::all`], so that a few trials reach every kind of
//! file) or the realistic form (each backend's default options, 100,000 small samples, and at
//! least 2,000 files for the segment and collection backends, Arrow and npy), as users run them.

use crate::backends::Subject;
use stowage_core::{Capabilities, Schema};

/// Which form of the campaign.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Scale {
    /// 48 samples, the campaign settings of [`crate::backends::all`].
    #[default]
    Quick,
    /// [`REALISTIC_SAMPLES`] samples at each backend's default options ([`default_subjects`]).
    Realistic,
}

/// Samples in a realistic pristine cache.
pub const REALISTIC_SAMPLES: usize = 100_000;

/// Files the realistic form gives each segment or collection backend at least.
pub const REALISTIC_MIN_FILES: usize = 2_000;

/// Samples between two flushes of a realistic writer on `backend`. Arrow writes one segment
/// (with its sidecars) per flush, so a writer flushing every 50 samples (a small training step,
/// say) makes 2,000 segments of 100,000 samples; the others flush every 2,048 samples
/// (torchcachex's `flush_every`), as a loader does.
pub fn realistic_flush_every(backend: &str) -> usize {
    match backend {
        "arrow" => REALISTIC_SAMPLES / REALISTIC_MIN_FILES,
        _ => 2_048,
    }
}

/// What a pristine cache holds and how it is written.
#[derive(Debug, Clone)]
pub struct Layout {
    /// The schema.
    pub schema: Schema,
    /// How many samples ([`stowage_conformance::generate::key`] `0..samples`).
    pub samples: usize,
    /// The put ranges, each followed by a flush (the last by `finalize`).
    pub batches: Vec<std::ops::Range<usize>>,
}

impl Layout {
    /// The layout of `scale` for `backend` with capabilities `caps`.
    ///
    /// ```
    /// use stowage_reliability::corruption::scale::{Layout, Scale};
    /// let caps = stowage_arrow::capabilities();
    /// let quick = Layout::of(Scale::Quick, "arrow", &caps);
    /// assert_eq!((quick.samples, quick.batches.len()), (48, 3));
    /// let realistic = Layout::of(Scale::Realistic, "arrow", &caps);
    /// assert_eq!((realistic.samples, realistic.batches.len()), (100_000, 2_000));
    /// ```
    pub fn of(scale: Scale, backend: &str, caps: &Capabilities) -> Layout {
        match scale {
            Scale::Quick => Layout {
                schema: super::pristine::schema_for(caps),
                samples: super::pristine::SAMPLE_COUNT,
                batches: vec![0..16, 16..32, 32..super::pristine::SAMPLE_COUNT],
            },
            Scale::Realistic => {
                let every = realistic_flush_every(backend);
                let batches = (0..REALISTIC_SAMPLES)
                    .step_by(every)
                    .map(|start| start..(start + every).min(REALISTIC_SAMPLES))
                    .collect();
                Layout {
                    schema: realistic_schema(backend, caps),
                    samples: REALISTIC_SAMPLES,
                    batches,
                }
            }
        }
    }
}

/// The realistic form's schema: the quick form's field kinds ([`super::pristine::schema_for`])
/// without its kilobyte image (small samples keep 100,000 of them fast to check on every trial),
/// and for npy more small fixed fields ([`crate::backends::with_realistic_fields`]).
///
/// ```
/// use stowage_reliability::corruption::scale::realistic_schema;
/// let npy = realistic_schema("npy", &stowage_npy::capabilities());
/// assert_eq!(npy.fields.len(), 20);
/// let memmap = realistic_schema("memmap", &stowage_memmap::capabilities());
/// let names: Vec<&str> = memmap.fields.iter().map(|f| f.name.as_str()).collect();
/// assert_eq!(names, ["x", "weight", "meta"]);
/// ```
pub fn realistic_schema(backend: &str, caps: &Capabilities) -> Schema {
    let mut schema = super::pristine::schema_for(caps);
    schema.fields.retain(|f| f.name != "image");
    crate::backends::with_realistic_fields(backend, schema)
}

/// Every backend at its default options (what a user who sets nothing gets), in the order of
/// [`crate::backends::all`].
///
/// ```
/// let names: Vec<&str> =
///     stowage_reliability::corruption::scale::default_subjects().iter().map(|s| s.name).collect();
/// assert_eq!(names, ["npy", "memmap", "arrow", "hdf5", "example-journal"]);
/// ```
pub fn default_subjects() -> Vec<Subject> {
    let plain =
        |s: Subject| Subject { name: crate::backends::backend_of(s.name), factory: s.factory };
    crate::backends::defaults().into_iter().map(plain).collect()
}

/// The backends of `scale` whose names are in `names` (all when empty), in report order.
///
/// Errors: a name no backend has.
pub fn select(scale: Scale, names: &[String]) -> Result<Vec<Subject>, String> {
    let chosen = crate::backends::select(names)?;
    Ok(match scale {
        Scale::Quick => chosen,
        Scale::Realistic => default_subjects()
            .into_iter()
            .filter(|s| chosen.iter().any(|c| c.name == s.name))
            .collect(),
    })
}
