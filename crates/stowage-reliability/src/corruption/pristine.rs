//! The finalized cache every corruption trial starts from: a schema with every field kind the
//! backend declares, samples generated from it, and the list of files a trial may damage.
//!
//! It is built once per backend and never modified: each trial works on a copy made by
//! [`Pristine::link_copy`], in which only the damaged file is a real copy and every other file is
//! a hard link to the pristine one. That keeps a trial fast on a cache of thousands of files,
//! and is safe because the damaged copy is only ever opened read-only (by the backend and by the
//! `stowage` command, which opens read-only too): nothing writes into its files. That is checked,
//! not assumed: [`Pristine::check_untouched`] compares every file's length and modification time
//! with those recorded when the cache was built, after each trial.

use std::path::{Path, PathBuf};
use stowage_conformance::cases::put_generated;
use stowage_conformance::corrupt::data_files;
use stowage_conformance::generate::{key, sample_for};
use stowage_core::{BackendFactory, Sample, Schema};

use super::scale::{Layout, Scale};

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
    samples_of(schema, SAMPLE_COUNT)
}

/// The first `count` samples of `schema`, as `(key, sample)` in put order (see [`samples`]).
pub fn samples_of(schema: &Schema, count: usize) -> Vec<(String, Sample)> {
    (0..count).map(|i| (key(i), sample_for(schema, i as u64))).collect()
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
    /// Every file's modification time when it was described (see [`Pristine::check_untouched`]).
    pub modified: Vec<std::time::SystemTime>,
}

impl Pristine {
    /// Creates the cache at `path` with [`schema_for`] the factory's capabilities, puts
    /// [`samples`] in three flushed batches and finalizes it.
    ///
    /// Errors: a failed create, put or finalize, naming the backend; a cache with no files.
    pub fn build(factory: &dyn BackendFactory, path: &Path) -> Result<Pristine, String> {
        let layout = Layout::of(Scale::Quick, factory.name(), &factory.capabilities());
        Pristine::build_with(factory, path, &layout)
    }

    /// Creates the cache at `path` as `layout` says (its schema, its samples in flushed
    /// batches), finalizes it and checks that its `keys()` are exactly the written keys.
    ///
    /// Errors: a failed create, put, flush, finalize or read-only open, naming the backend; other
    /// keys than those written; a cache with no files.
    pub fn build_with(
        factory: &dyn BackendFactory,
        path: &Path,
        layout: &Layout,
    ) -> Result<Pristine, String> {
        let backend = factory.name();
        let schema = &layout.schema;
        let mut cache =
            factory.create(path, schema).map_err(|e| format!("{backend}: create: {e}"))?;
        let mut written = Vec::with_capacity(layout.samples);
        // Flushed batches: backends that write a file set per flush (hdf5 and arrow segments)
        // then hold several.
        for batch in &layout.batches {
            written.extend(
                put_generated(&mut *cache, schema, batch.clone())
                    .map_err(|e| format!("{backend}: {e}"))?,
            );
            cache.flush().map_err(|e| format!("{backend}: flush: {e}"))?;
        }
        cache.finalize().map_err(|e| format!("{backend}: finalize: {e}"))?;
        drop(cache);
        // The trials compare a damaged copy's keys with the written ones: the undamaged cache
        // must list exactly those, or every trial would be scored against a wrong baseline.
        let reader = factory
            .open(path, stowage_core::OpenMode::ReadOnly)
            .map_err(|e| format!("{backend}: opening the pristine cache read-only: {e}"))?;
        let mut listed = reader.keys().map_err(|e| format!("{backend}: pristine keys(): {e}"))?;
        let mut expected: Vec<String> = written.iter().map(|(k, _)| k.clone()).collect();
        listed.sort();
        expected.sort();
        if listed != expected || reader.len() != expected.len() {
            return Err(format!(
                "{backend}: the pristine cache lists {} keys (len() {}), {} were written",
                listed.len(),
                reader.len(),
                expected.len()
            ));
        }
        drop(reader);
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
        let mut modified = Vec::with_capacity(listed.len());
        for file in listed {
            let meta = std::fs::metadata(&file)
                .map_err(|e| format!("{backend}: {}: {e}", file.display()))?;
            let relative = file.strip_prefix(path).expect("data_files lists files under path");
            files.push((relative.to_path_buf(), meta.len()));
            modified.push(meta.modified().map_err(|e| format!("{}: {e}", file.display()))?);
        }
        if files.is_empty() {
            return Err(format!(
                "{backend}: the finalized cache at {} holds no files",
                path.display()
            ));
        }
        Ok(Pristine { path: path.to_path_buf(), written, files, modified })
    }

    /// Makes `copy` (which must not exist) a copy of the cache in which `damaged` (relative) is
    /// a real copy, every other file of [`Pristine::files`] a hard link to the pristine one, and
    /// the rest (directories, empty files, the writer lock) created or copied.
    ///
    /// Errors: a directory, link or copy that could not be made.
    pub fn link_copy(&self, copy: &Path, damaged: &Path) -> std::io::Result<()> {
        let linked: std::collections::HashSet<&Path> =
            self.files.iter().map(|(f, _)| f.as_path()).filter(|f| *f != damaged).collect();
        link_tree(&self.path, copy, Path::new(""), &linked)
    }

    /// Whether every pristine file still has the length and modification time it was built
    /// with: a reader that wrote through a hard link of [`Pristine::link_copy`] would change them.
    ///
    /// Errors: the first file that changed (the campaign cannot go on from a changed pristine).
    pub fn check_untouched(&self) -> Result<(), String> {
        for ((file, len), modified) in self.files.iter().zip(&self.modified) {
            let path = self.path.join(file);
            let meta = std::fs::metadata(&path).map_err(|e| format!("{}: {e}", path.display()))?;
            if meta.len() != *len || meta.modified().ok() != Some(*modified) {
                return Err(format!(
                    "the pristine file {} changed during a trial (length {len} -> {}): something \
                     wrote through a hard link of a damaged copy, which is opened read-only",
                    path.display(),
                    meta.len()
                ));
            }
        }
        Ok(())
    }
}

/// Recreates the tree `from/relative` at `to/relative`: files in `linked` hard-linked, other
/// files copied (so a trial can damage them), directories created.
fn link_tree(
    from: &Path,
    to: &Path,
    relative: &Path,
    linked: &std::collections::HashSet<&Path>,
) -> std::io::Result<()> {
    std::fs::create_dir_all(to.join(relative))?;
    for entry in std::fs::read_dir(from.join(relative))? {
        let entry = entry?;
        let name = relative.join(entry.file_name());
        if entry.file_type()?.is_dir() {
            link_tree(from, to, &name, linked)?;
        } else if linked.contains(name.as_path()) {
            std::fs::hard_link(entry.path(), to.join(&name))?;
        } else {
            std::fs::copy(entry.path(), to.join(&name))?;
        }
    }
    Ok(())
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
