//! Every backend the campaigns run over, as a [`BackendFactory`] with settings that make small
//! caches span several files (small segments and collection files, early index merges), so that
//! a crash, a flipped byte or a fault can land in each kind of file.

use stowage_core::BackendFactory;

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
    let subjects: Vec<Box<dyn BackendFactory>> = vec![
        Box::new(npy),
        Box::new(stowage_memmap::MemmapFactory::default()),
        Box::new(arrow),
        Box::new(stowage_hdf5::Hdf5Factory),
        Box::new(stowage_example::JournalFactory),
    ];
    subjects.into_iter().map(|factory| Subject { name: factory.name(), factory }).collect()
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
    let all = all();
    if let Some(unknown) = names.iter().find(|n| !all.iter().any(|s| s.name == n.as_str())) {
        let known: Vec<&str> = all.iter().map(|s| s.name).collect();
        return Err(format!("unknown backend {unknown:?}; the backends are {}", known.join(", ")));
    }
    Ok(all.into_iter().filter(|s| names.is_empty() || names.iter().any(|n| n == s.name)).collect())
}
