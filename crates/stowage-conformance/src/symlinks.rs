//! Checks that a backend never writes through a symbolic link inside a cache, and still reads
//! through one.
//!
//! Each backend's `tests/symlinks.rs` names the files its write paths touch (the lock, its data
//! files, logs, sidecars, markers, its subdirectories) and calls [`check_link_in_cache`] for each:
//! the file is replaced by a link to a copy outside the cache, the cache is opened for writing,
//! written, flushed and finalized, and the copy outside must stay byte for byte as it was. A
//! write path that refuses the link must say so with an error naming it
//! ([`stowage_core::file_safety::is_refused_symlink`]). [`check_reads_follow_links`] checks the
//! other direction: a cache whose files (or whose directory) are links still reads, and a cache
//! directory that is a link is written normally.
//!
//! Like the cases, these are plain functions returning `Err(message)` instead of panicking.
//!
//! ```no_run
//! # fn demo(factory: &dyn stowage_core::BackendFactory) {
//! use stowage_conformance::symlinks::{Before, LinkOutcome, check_link_in_cache};
//! let outcome = check_link_in_cache(factory, ".stowage.lock", Before::Flushed).unwrap();
//! assert_eq!(outcome, LinkOutcome::Refused);
//! # }
//! ```

use std::collections::BTreeMap;
use std::fs;
use std::path::{Path, PathBuf};

use stowage_core::file_safety::is_refused_symlink;
use stowage_core::{BackendFactory, DynBackend, Error, OpenMode, Sample, Schema};

use crate::corrupt::copy_tree;
use crate::generate::{basic_schema, compare, key, sample_for};

/// Samples every cache of these checks holds before a link is planted.
pub const SAMPLES: usize = 3;

/// The content of the outside file a link planted before a cache is created points to.
pub const OUTSIDE_CONTENT: &[u8] = b"a file outside the cache: stowage must never write it\n";

/// How far the cache was written before the link is planted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Before {
    /// [`SAMPLES`] samples put and flushed, not finalized: opening it for writing resumes it.
    Flushed,
    /// [`SAMPLES`] samples put and finalized. Opening it for writing appends when the backend
    /// declares `append_after_finalize`, else only opens it (and rolls an interrupted finalize
    /// forward).
    Finalized,
}

/// What the write path did with the planted link (the outside copy is unchanged in every case).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LinkOutcome {
    /// A step failed with an error that names the link as one stowage does not write through.
    Refused,
    /// Every step succeeded and the link was replaced by a file of the cache (a rename over it,
    /// which replaces the link itself).
    Replaced,
    /// Every step succeeded and the link is still there: the write path did not write it.
    Untouched,
}

/// Writes a cache of [`SAMPLES`] samples of the basic schema into `dir`, as far as `before` says.
///
/// Errors: a message naming the step that failed.
pub fn write_cache(factory: &dyn BackendFactory, dir: &Path, before: Before) -> Result<(), String> {
    let schema = schema(factory);
    let mut cache = step("create", factory.create(dir, &schema))?;
    for i in 0..SAMPLES {
        step("put", cache.put(&key(i), &sample_for(&schema, i as u64)))?;
    }
    step("flush", cache.flush())?;
    if before == Before::Finalized {
        step("finalize", cache.finalize())?;
    }
    Ok(())
}

/// Plants at `<cache>/<relative>` a symbolic link to a copy, outside the cache, of what is there
/// (a file or a whole directory; when nothing is, a dangling link to a path outside, which must
/// not be created), then opens
/// the cache for writing, puts a new sample, flushes and finalizes (each step as far as the
/// backend's capabilities allow; the first failure ends the sequence).
///
/// Passes when the outside copy is byte for byte unchanged afterwards (or still missing) and either a step failed
/// with an error that [`is_refused_symlink`] recognizes and that names the link, or every step
/// succeeded. Returns which of [`LinkOutcome`] happened: a backend's test asserts the one it
/// expects for each file.
///
/// Errors: a message saying what was written outside, which error did not name the link, or
/// which step failed otherwise.
pub fn check_link_in_cache(
    factory: &dyn BackendFactory,
    relative: &str,
    before: Before,
) -> Result<LinkOutcome, String> {
    check_link_in_cache_at(factory, before, |_| Ok(relative.to_owned()))
}

/// As [`check_link_in_cache`], for a file whose name the cache chose (a data file with a random
/// id): `pick` gets the cache directory once it is written and returns the path to replace,
/// relative to it.
///
/// Errors: as [`check_link_in_cache`]; `pick`'s own.
pub fn check_link_in_cache_at(
    factory: &dyn BackendFactory,
    before: Before,
    pick: impl FnOnce(&Path) -> Result<String, String>,
) -> Result<LinkOutcome, String> {
    let root = tempfile::tempdir().map_err(|e| format!("tempdir: {e}"))?;
    let cache = root.path().join("cache");
    write_cache(factory, &cache, before)?;
    let relative = pick(&cache)?;
    let (link, outside) = plant_link(root.path(), &cache, &relative)?;
    let snapshot = snapshot_of(&outside)?;

    let result = write_more(factory, &cache, before);
    let after = snapshot_of(&outside)?;
    if after != snapshot {
        return Err(format!(
            "writing the cache through the link {} changed {} outside the cache{}",
            link.display(),
            outside.display(),
            match &result {
                Err(e) => format!(" (the write then failed: {e})"),
                Ok(()) => String::new(),
            }
        ));
    }
    outcome(&link, result)
}

/// Plants at `<dir>/<relative>` a link to a new outside file holding [`OUTSIDE_CONTENT`] before
/// any cache exists in the (otherwise empty) directory `dir`, then creates a cache there, puts,
/// flushes and finalizes: a create that meets the link must refuse it (or replace it) as
/// [`check_link_in_cache`] says; a create that refuses the directory as holding a cache
/// (`AlreadyExists`) passes too, as [`LinkOutcome::Untouched`], as long as nothing outside was
/// written.
///
/// Errors: as [`check_link_in_cache`].
pub fn check_link_before_create(
    factory: &dyn BackendFactory,
    relative: &str,
) -> Result<LinkOutcome, String> {
    link_before_create(factory, relative, false)
}

/// Checks that a `.stowage.lock` linked to an outside file is refused before create, after a
/// flush and after finalize, the outside file untouched each time: the case every backend
/// taking [`stowage_core::file_safety::WriterLock`] shares.
///
/// Errors: the first outcome that is not [`LinkOutcome::Refused`], or an error of the checks.
pub fn check_linked_lock_is_refused(factory: &dyn BackendFactory) -> Result<(), String> {
    const LOCK: &str = stowage_core::file_safety::WriterLock::FILE_NAME;
    for before in [Before::Flushed, Before::Finalized] {
        match check_link_in_cache(factory, LOCK, before)? {
            LinkOutcome::Refused => {}
            other => return Err(format!("{LOCK} linked {before:?}: {other:?}, not refused")),
        }
    }
    match check_link_before_create(factory, LOCK)? {
        LinkOutcome::Refused => Ok(()),
        other => Err(format!("{LOCK} linked before create: {other:?}, not refused")),
    }
}

/// As [`check_link_before_create`], with the link pointing to an empty directory outside the
/// cache (for a subdirectory the backend writes into), which must stay empty.
///
/// Errors: as [`check_link_in_cache`].
pub fn check_linked_directory_before_create(
    factory: &dyn BackendFactory,
    relative: &str,
) -> Result<LinkOutcome, String> {
    link_before_create(factory, relative, true)
}

fn link_before_create(
    factory: &dyn BackendFactory,
    relative: &str,
    directory: bool,
) -> Result<LinkOutcome, String> {
    let root = tempfile::tempdir().map_err(|e| format!("tempdir: {e}"))?;
    let cache = root.path().join("cache");
    fs::create_dir(&cache).map_err(|e| format!("mkdir: {e}"))?;
    let outside = root.path().join("outside");
    if directory {
        fs::create_dir(&outside).map_err(|e| format!("mkdir: {e}"))?;
    } else {
        fs::write(&outside, OUTSIDE_CONTENT).map_err(|e| format!("writing: {e}"))?;
    }
    let before = snapshot_of(&outside)?;
    let link = cache.join(relative);
    symlink(&outside, &link)?;
    let result = (|| {
        let schema = schema(factory);
        let mut handle = factory.create(&cache, &schema)?;
        handle.put(&key(0), &sample_for(&schema, 0))?;
        handle.flush()?;
        handle.finalize()
    })();
    if snapshot_of(&outside)? != before {
        return Err(format!(
            "creating a cache beside the link {} changed {} outside it",
            link.display(),
            outside.display()
        ));
    }
    match result {
        Err(Error::AlreadyExists { .. }) => Ok(LinkOutcome::Untouched),
        other => outcome(&link, other),
    }
}

/// Reads go through links, and a cache directory that is a link is an ordinary cache:
/// - a cache written through a linked directory (the link named at create) reads back through
///   the link and through the real directory;
/// - a cache all of whose files (the lock aside) are replaced by links to copies outside it
///   reads back every sample, read-only.
///
/// Errors: a message naming the step and the sample that failed.
pub fn check_reads_follow_links(factory: &dyn BackendFactory) -> Result<(), String> {
    let root = tempfile::tempdir().map_err(|e| format!("tempdir: {e}"))?;
    let real = root.path().join("real");
    fs::create_dir(&real).map_err(|e| format!("mkdir: {e}"))?;
    let linked = root.path().join("linked");
    symlink(&real, &linked)?;
    write_cache(factory, &linked, Before::Finalized)?;
    read_all(factory, &linked, "through the linked cache directory")?;
    read_all(factory, &real, "through the real directory a link created it in")?;

    let cache = root.path().join("cache");
    write_cache(factory, &cache, Before::Finalized)?;
    let outside = root.path().join("outside");
    let files = crate::corrupt::data_files(&cache).map_err(|e| format!("listing: {e}"))?;
    for (n, file) in files.iter().enumerate() {
        let copy = outside.join(n.to_string());
        fs::create_dir_all(&copy).map_err(|e| format!("mkdir: {e}"))?;
        let copy = copy.join(file.file_name().expect("files have names"));
        fs::rename(file, &copy).map_err(|e| format!("moving {}: {e}", file.display()))?;
        symlink(&copy, file)?;
    }
    read_all(factory, &cache, "with every file a link to a copy outside the cache")
}

fn schema(factory: &dyn BackendFactory) -> Schema {
    basic_schema(&factory.capabilities())
}

fn step<T>(what: &str, result: stowage_core::Result<T>) -> Result<T, String> {
    result.map_err(|e| format!("{what}: {e}"))
}

/// Opens `cache` for writing and writes one more sample, as far as the capabilities allow.
fn write_more(
    factory: &dyn BackendFactory,
    cache: &Path,
    before: Before,
) -> Result<(), stowage_core::Error> {
    let schema = schema(factory);
    let mut handle: Box<DynBackend> = factory.open(cache, OpenMode::Append)?;
    if before == Before::Finalized && !factory.capabilities().append_after_finalize {
        return Ok(());
    }
    handle.put(&key(SAMPLES), &sample_for(&schema, SAMPLES as u64))?;
    handle.flush()?;
    handle.finalize()
}

/// Moves what is at `<cache>/<relative>` to `<root>/outside/...` and links to it (a dangling link
/// when nothing is there).
fn plant_link(root: &Path, cache: &Path, relative: &str) -> Result<(PathBuf, PathBuf), String> {
    let link = cache.join(relative);
    let outside_dir = root.join("outside");
    fs::create_dir_all(&outside_dir).map_err(|e| format!("mkdir: {e}"))?;
    let outside = outside_dir.join(link.file_name().ok_or("a relative path with a file name")?);
    match fs::symlink_metadata(&link) {
        Ok(meta) if meta.is_dir() => {
            copy_tree(&link, &outside).map_err(|e| format!("copying {relative}: {e}"))?;
            fs::remove_dir_all(&link).map_err(|e| format!("removing {relative}: {e}"))?;
        }
        Ok(_) => {
            fs::copy(&link, &outside).map_err(|e| format!("copying {relative}: {e}"))?;
            fs::remove_file(&link).map_err(|e| format!("removing {relative}: {e}"))?;
        }
        // Nothing there: the link dangles, and a write through it would create the file.
        Err(_) => {}
    }
    if let Some(parent) = link.parent() {
        fs::create_dir_all(parent).map_err(|e| format!("mkdir: {e}"))?;
    }
    symlink(&outside, &link)?;
    Ok((link, outside))
}

fn symlink(target: &Path, link: &Path) -> Result<(), String> {
    #[cfg(unix)]
    {
        std::os::unix::fs::symlink(target, link)
            .map_err(|e| format!("linking {} to {}: {e}", link.display(), target.display()))
    }
    #[cfg(not(unix))]
    {
        let _ = (target, link);
        Err("symbolic link checks run on unix only".into())
    }
}

type Snapshot = BTreeMap<PathBuf, Vec<u8>>;

/// Every file under `path` (or `path` itself) with its bytes; directories as empty entries;
/// nothing when `path` is missing.
fn snapshot_of(path: &Path) -> Result<Snapshot, String> {
    let mut out = Snapshot::new();
    match collect(path, &mut out) {
        Ok(()) => Ok(out),
        // A dangling link's target: it must stay missing.
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && out.is_empty() => Ok(out),
        Err(e) => Err(format!("reading {}: {e}", path.display())),
    }
}

fn collect(path: &Path, out: &mut Snapshot) -> std::io::Result<()> {
    let meta = fs::symlink_metadata(path)?;
    if meta.is_dir() {
        out.insert(path.join(""), Vec::new());
        for entry in fs::read_dir(path)? {
            collect(&entry?.path(), out)?;
        }
    } else {
        out.insert(path.to_path_buf(), fs::read(path)?);
    }
    Ok(())
}

/// Judges the result of writing around `link`: refused with an error naming it, or succeeded.
fn outcome(link: &Path, result: Result<(), Error>) -> Result<LinkOutcome, String> {
    let err = match result {
        Ok(()) => {
            return match fs::symlink_metadata(link) {
                Ok(meta) if meta.file_type().is_symlink() => Ok(LinkOutcome::Untouched),
                _ => Ok(LinkOutcome::Replaced),
            };
        }
        Err(err) => err,
    };
    let text = err.to_string();
    if !is_refused_symlink(&err) {
        return Err(format!(
            "writing around the link {} failed with an error that is not a refused link: {text}",
            link.display()
        ));
    }
    if !text.contains(&link.display().to_string()) {
        return Err(format!("the refusal does not name the link {}: {text}", link.display()));
    }
    Ok(LinkOutcome::Refused)
}

/// Opens `cache` read-only and compares every sample of [`write_cache`].
fn read_all(factory: &dyn BackendFactory, cache: &Path, how: &str) -> Result<(), String> {
    let schema = schema(factory);
    let reader = step(&format!("open read-only {how}"), factory.open(cache, OpenMode::ReadOnly))?;
    for i in 0..SAMPLES {
        let got: Option<Sample> = step(&format!("get {how}"), reader.get(&key(i)))?;
        compare(&key(i), &sample_for(&schema, i as u64), got.as_ref())
            .map_err(|e| format!("{how}: {e}"))?;
    }
    Ok(())
}
