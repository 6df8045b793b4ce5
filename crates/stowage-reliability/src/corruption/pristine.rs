//! The finalized cache every corruption trial starts from: a schema with every field kind the
//! backend declares, samples generated from it, and the list of files a trial may damage.

use std::path::{Path, PathBuf};
use stowage_conformance::cases::put_generated;
use stowage_conformance::corrupt::data_files;
use stowage_conformance::generate::{key, sample_for};
use stowage_core::{BackendFactory, Sample, Schema};

/// The schema of a pristine cache: the crash campaign's, one field of each kind the backend
/// declares (fixed, variable, ragged, nullable, bytes, JSON), so that every reader and decoder of
/// the backend holds data a flip can land in.
pub use crate::crash::workload::schema_for;

/// Samples in a pristine cache: with the settings of [`crate::backends::all`] this spreads each
/// backend over several data files (npy collections of 8, arrow segments of 16, ...).
pub const SAMPLE_COUNT: usize = 48;

/// The samples a pristine cache of `schema` holds, as `(key, sample)` in put order. The same
/// schema always gives the same samples, so a worker process can rebuild them instead of
/// receiving them.
pub fn samples(schema: &Schema) -> Vec<(String, Sample)> {
    (0..SAMPLE_COUNT).map(|i| (key(i), sample_for(schema, i as u64))).collect()
}

/// A finalized cache and what a trial needs to know about it.
#[derive(Debug)]
pub struct Pristine {
    /// The cache directory (never modified after building; trials work on copies).
    pub path: PathBuf,
    /// What was written, in put order.
    pub written: Vec<(String, Sample)>,
    /// Every file a trial may damage, relative to `path`, with its length, sorted by path.
    pub files: Vec<(PathBuf, u64)>,
}

impl Pristine {
    /// Creates the cache at `path` with [`schema_for`] the factory's capabilities, puts
    /// [`samples`] in three flushed batches and finalizes it.
    ///
    /// Errors: a failed create, put or finalize, naming the backend; a cache with no files.
    pub fn build(factory: &dyn BackendFactory, path: &Path) -> Result<Pristine, String> {
        let backend = factory.name();
        let schema = schema_for(&factory.capabilities());
        let mut cache =
            factory.create(path, &schema).map_err(|e| format!("{backend}: create: {e}"))?;
        let mut written = Vec::with_capacity(SAMPLE_COUNT);
        // Three flushed batches: backends that write a file set per flush (hdf5 segments) then
        // hold several.
        for batch in [0..16, 16..32, 32..SAMPLE_COUNT] {
            written.extend(
                put_generated(&mut *cache, &schema, batch)
                    .map_err(|e| format!("{backend}: {e}"))?,
            );
            cache.flush().map_err(|e| format!("{backend}: flush: {e}"))?;
        }
        cache.finalize().map_err(|e| format!("{backend}: finalize: {e}"))?;
        drop(cache);
        Pristine::existing(factory, path, written)
    }

    /// Describes a pristine cache another process built at `path` from [`samples`].
    ///
    /// Errors: an unreadable directory, or one with no files.
    pub fn existing(
        factory: &dyn BackendFactory,
        path: &Path,
        written: Vec<(String, Sample)>,
    ) -> Result<Pristine, String> {
        let backend = factory.name();
        let listed = data_files(path)
            .map_err(|e| format!("{backend}: listing the files of {}: {e}", path.display()))?;
        let mut files = Vec::with_capacity(listed.len());
        for file in listed {
            let len = std::fs::metadata(&file)
                .map_err(|e| format!("{backend}: {}: {e}", file.display()))?
                .len();
            let relative = file.strip_prefix(path).expect("data_files lists files under path");
            files.push((relative.to_path_buf(), len));
        }
        if files.is_empty() {
            return Err(format!(
                "{backend}: the finalized cache at {} holds no files",
                path.display()
            ));
        }
        Ok(Pristine { path: path.to_path_buf(), written, files })
    }
}

/// The kind of each of `files` (relative paths), for grouping results: numbers in file names
/// become `#` (`segments/segment_#.arrow`), and a directory of many differently named files of one
/// extension below the cache's top level (npy collections with random ids) becomes `dir/*.ext`.
/// Files at the top level keep their names (memmap's `image.bin`, `label.bin`).
///
/// ```
/// use std::path::PathBuf;
/// use stowage_reliability::corruption::pristine::file_kinds;
/// let files: Vec<PathBuf> =
///     ["segments/segment_000012.h5", "data/10/ab3k.npy", "data/10/x9zz.npy", "data/10/q0q0.npy", "a.bin", "b.bin", "c.bin"]
///         .iter().map(PathBuf::from).collect();
/// let kinds = file_kinds(&files);
/// assert_eq!(kinds[..4], ["segments/segment_#.h5", "data/#/*.npy", "data/#/*.npy", "data/#/*.npy"]);
/// assert_eq!(kinds[4..], ["a.bin", "b.bin", "c.bin"]);
/// ```
pub fn file_kinds(files: &[PathBuf]) -> Vec<String> {
    let named: Vec<String> = files.iter().map(|f| without_numbers(f)).collect();
    let group = |path: &Path| {
        let dir = path.parent().map(without_numbers).unwrap_or_default();
        let extension = path.extension().map(|e| e.to_string_lossy().into_owned());
        (dir, extension)
    };
    files
        .iter()
        .zip(&named)
        .map(|(file, name)| {
            let siblings: std::collections::BTreeSet<&String> = files
                .iter()
                .zip(&named)
                .filter(|(other, _)| group(other) == group(file))
                .map(|(_, other_name)| other_name)
                .collect();
            match group(file) {
                (dir, Some(extension)) if siblings.len() > 2 && !dir.is_empty() => {
                    format!("{dir}/*.{extension}")
                }
                _ => name.clone(),
            }
        })
        .collect()
}

/// `path` with every run of ASCII digits replaced by `#`, except in its extension (`.h5`).
fn without_numbers(path: &Path) -> String {
    let mut out = String::new();
    for c in path.with_extension("").to_string_lossy().chars() {
        if !c.is_ascii_digit() {
            out.push(c);
        } else if !out.ends_with('#') {
            out.push('#');
        }
    }
    if let Some(extension) = path.extension() {
        out.push('.');
        out.push_str(&extension.to_string_lossy());
    }
    out
}
