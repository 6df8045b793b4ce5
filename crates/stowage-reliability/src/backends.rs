//! Every backend the campaigns run over, as a [`BackendFactory`] with settings that make small
//! caches span several files (small segments and collection files, early index merges), so that
//! a crash, a flipped byte or a fault can land in each kind of file ([`all`]); and the same
//! backends at their default options ([`defaults`]), what users run, for the realistic runs.

use stowage_core::{BackendFactory, DType, Schema, ShapeRule};

/// One backend under test.
pub struct Subject {
    /// The backend's name (as [`BackendFactory::name`]).
    pub name: &'static str,
    /// Creates and opens its caches.
    pub factory: Box<dyn BackendFactory>,
}

impl std::fmt::Debug for Subject {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Subject").field("name", &self.name).finish_non_exhaustive()
    }
}

/// Every backend, in report order.
///
/// ```
/// let names: Vec<&str> = stowage_reliability::backends::all().iter().map(|s| s.name).collect();
/// assert_eq!(names, ["npy", "memmap", "arrow", "hdf5", "example-journal"]);
/// ```
pub fn all() -> Vec<Subject> {
    let npy = stowage_npy::NpyFactory {
        options: stowage_npy::NpyOptions { collection_size: 8, ..Default::default() },
    };
    let arrow = stowage_arrow::ArrowFactory { options: arrow_options() };
    // A key index run every few rows, and a finalize that merges several scratch runs and
    // writes several row groups, so that campaigns cut those writes too.
    let memmap = stowage_memmap::MemmapFactory {
        options: stowage_memmap::MemmapOptions {
            key_index_tail: 5,
            finalize_run_rows: 50,
            finalize_row_group_rows: 64,
            ..Default::default()
        },
    };
    let subjects: Vec<Box<dyn BackendFactory>> = vec![
        Box::new(npy),
        Box::new(memmap),
        Box::new(arrow),
        Box::new(stowage_hdf5::Hdf5Factory),
        Box::new(stowage_example::JournalFactory),
    ];
    subjects.into_iter().map(|factory| Subject { name: factory.name(), factory }).collect()
}

/// Every backend at its default options, in report order, each named `<backend>@defaults` (so
/// that its results are recorded apart from [`all`]'s).
///
/// ```
/// let names: Vec<&str> =
///     stowage_reliability::backends::defaults().iter().map(|s| s.name).collect();
/// assert_eq!(names[0], "npy@defaults");
/// ```
pub fn defaults() -> Vec<Subject> {
    let subjects: Vec<(&'static str, Box<dyn BackendFactory>)> = vec![
        ("npy@defaults", Box::new(stowage_npy::NpyFactory::default())),
        ("memmap@defaults", Box::new(stowage_memmap::MemmapFactory::default())),
        ("arrow@defaults", Box::new(stowage_arrow::ArrowFactory::default())),
        ("hdf5@defaults", Box::new(stowage_hdf5::Hdf5Factory)),
        ("example-journal@defaults", Box::new(stowage_example::JournalFactory)),
    ];
    subjects.into_iter().map(|(name, factory)| Subject { name, factory }).collect()
}

/// Fixed fields a realistic npy cache has beyond a campaign's common ones: npy writes one
/// collection file per field per 1,000 samples (its default `collection_size`), so 100,000
/// samples of 20 fields make 2,000 collection files, the realistic forms' minimum. A sample of
/// 20 small arrays is an ordinary hangar repository (one arrayset per field).
pub const NPY_REALISTIC_EXTRA_FIELDS: usize = 18;

/// `schema` as a realistic form writes it to `backend` (a name of [`all`] or [`defaults`]):
/// for npy, [`NPY_REALISTIC_EXTRA_FIELDS`] more small fixed fields; unchanged elsewhere.
///
/// ```
/// use stowage_core::{DType, Schema, ShapeRule};
/// use stowage_reliability::backends::with_realistic_fields;
/// let schema = Schema::new().tensor("x", DType::F32, ShapeRule::Fixed(vec![2]));
/// assert_eq!(with_realistic_fields("npy@defaults", schema.clone()).fields.len(), 19);
/// assert_eq!(with_realistic_fields("arrow", schema).fields.len(), 1);
/// ```
pub fn with_realistic_fields(backend: &str, mut schema: Schema) -> Schema {
    if backend_of(backend) == "npy" {
        for i in 0..NPY_REALISTIC_EXTRA_FIELDS {
            schema = schema.tensor(&format!("c{i:02}"), DType::U8, ShapeRule::Fixed(vec![4]));
        }
    }
    schema
}

/// Puts per flush of the crash and faults campaigns' realistic writers on `backend` (a name of
/// [`all`] or [`defaults`]): Arrow makes a segment and two sidecars per flush (some 3,000 files
/// of 100,000 samples); npy fills collection files of 1,000 samples whatever the flushes; the
/// others grow the same files, however often they flush.
///
/// ```
/// assert_eq!(stowage_reliability::backends::realistic_flush_every("arrow@defaults"), 100);
/// ```
pub fn realistic_flush_every(backend: &str) -> usize {
    match backend_of(backend) {
        "arrow" => 100,
        "npy" => 50,
        _ => 2_000,
    }
}

/// The name of the backend a subject of [`all`] or [`defaults`] runs (`npy@defaults` -> `npy`).
pub fn backend_of(name: &str) -> &str {
    name.split('@').next().unwrap_or(name)
}

/// The options of the Arrow backend in [`all`] (small segments, early index merges), for a
/// campaign that builds an [`stowage_arrow::ArrowBackend`] itself (to compact it).
pub fn arrow_options() -> stowage_arrow::ArrowOptions {
    stowage_arrow::ArrowOptions { flush_every: 16, merge_after: 2, ..Default::default() }
}

/// The backends whose names are in `names` (all when `names` is empty), in report order.
///
/// Errors: a name no backend has, listing the names there are.
pub fn select(names: &[String]) -> Result<Vec<Subject>, String> {
    select_from(all(), names)
}

/// As [`select`], among [`defaults`] (a name is the backend's: `npy`, not `npy@defaults`).
///
/// Errors: a name no backend has.
pub fn select_defaults(names: &[String]) -> Result<Vec<Subject>, String> {
    select(names)?;
    let names: Vec<String> = names.iter().map(|n| format!("{n}@defaults")).collect();
    select_from(defaults(), &names)
}

fn select_from(all: Vec<Subject>, names: &[String]) -> Result<Vec<Subject>, String> {
    if let Some(unknown) = names.iter().find(|n| !all.iter().any(|s| s.name == n.as_str())) {
        let known: Vec<&str> = all.iter().map(|s| s.name).collect();
        return Err(format!("unknown backend {unknown:?}; the backends are {}", known.join(", ")));
    }
    Ok(all.into_iter().filter(|s| names.is_empty() || names.iter().any(|n| n == s.name)).collect())
}
