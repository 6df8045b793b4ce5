//! The conformance suite on caches that are not local files at the paths it hands out, as a
//! backend on an object store sees it: [`Mapped`] wraps the correct toy (`tests/toy`) and keeps
//! the cache the suite calls `<case dir>/a/b` in `<case dir>/.mapped/a%b`; [`MappedFiles`] is
//! the [`CacheStorage`] that reaches those files by the suite's names, using every default of
//! the trait. [`Mapped`] refuses a path that exists as a local file, so a case that touched the
//! cache's files directly instead of through the storage fails.
//!
//! Every case must pass or be skipped for the storage's documented reason: the power-loss and
//! I/O-error cases (not local files), and, on a storage declared unshared, the crash and
//! failed-flush cases. The tests below prove those skips, that the corruption cases really go
//! through the storage, and the `concurrent_writers` branch of `second_writer_is_refused` on a
//! small in-memory backend with several writers (correct, and with two defects it must catch).

mod toy;

use std::collections::HashMap;
use std::ffi::OsString;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard, OnceLock, PoisonError};
use stowage_conformance::storage::CacheStorage;
use stowage_conformance::{CASES, Case, ChildLauncher, FaultInjector, Outcome, child, run_case_on};
use stowage_core::{
    Backend, BackendFactory, Capabilities, DType, DynBackend, Error, Format, OpenMode, Reader,
    Result, Sample, Schema, ValidationLevel, ValidationReport,
};
use toy::{ToyFactory, ToyInjector};

/// How every case directory's name starts (the suite's `tempfile` prefix).
const CASE_DIR_PREFIX: &str = "stowage-conformance-";
/// The directory inside a case directory that holds the mapped caches.
const STORE_DIR: &str = ".mapped";
/// What stands for `/` in a mapped cache's name.
const SEPARATOR: &str = "%";

/// Where the cache the suite calls `path` really lives: `<case dir>/.mapped/<rest, with / as %>`.
fn mapped(path: &Path) -> io::Result<PathBuf> {
    let case_dir = path
        .ancestors()
        .find(|a| a.file_name().is_some_and(|n| n.to_string_lossy().starts_with(CASE_DIR_PREFIX)))
        .ok_or_else(|| {
            io::Error::other(format!(
                "{} is not inside a conformance case directory",
                path.display()
            ))
        })?;
    let parts: Vec<String> = path
        .strip_prefix(case_dir)
        .expect("an ancestor")
        .iter()
        .map(|part| part.to_string_lossy().into_owned())
        .collect();
    if parts.is_empty() {
        return Err(io::Error::other(format!("{} is the case directory itself", path.display())));
    }
    Ok(case_dir.join(STORE_DIR).join(parts.join(SEPARATOR)))
}

/// A factory whose caches live at [`mapped`] paths; `path` must not exist locally.
struct Mapped<F>(F);

impl<F> Mapped<F> {
    fn map(&self, path: &Path) -> Result<PathBuf> {
        if path.symlink_metadata().is_ok() {
            return Err(Error::invalid(format!(
                "{} exists as a local file, but this factory's caches are not local files: the \
                 suite wrote it without going through its CacheStorage",
                path.display()
            )));
        }
        mapped(path).map_err(|e| Error::io(path, e))
    }
}

impl<F: BackendFactory> BackendFactory for Mapped<F> {
    fn name(&self) -> &'static str {
        self.0.name()
    }
    fn capabilities(&self) -> Capabilities {
        self.0.capabilities()
    }
    fn formats(&self) -> &'static [Format] {
        self.0.formats()
    }
    fn recognize(&self, path: &Path) -> Result<Option<&'static Format>> {
        self.0.recognize(&self.map(path)?)
    }
    fn create(&self, dir: &Path, schema: &Schema) -> Result<Box<DynBackend>> {
        self.0.create(&self.map(dir)?, schema)
    }
    fn open(&self, dir: &Path, mode: OpenMode) -> Result<Box<DynBackend>> {
        self.0.open(&self.map(dir)?, mode)
    }
}

/// The mapped toy.
fn mapped_toy() -> Mapped<ToyFactory> {
    Mapped(ToyFactory::correct())
}

/// The files of [`Mapped`] caches, by the suite's names; only the required methods and
/// `exists` are written, the rest are the trait's defaults.
struct MappedFiles {
    /// What `shared_between_processes` answers (the files are shared either way).
    shared: bool,
}

impl MappedFiles {
    fn object(cache: &Path, name: &str) -> io::Result<PathBuf> {
        Ok(mapped(cache)?.join(name))
    }
}

impl CacheStorage for MappedFiles {
    fn name(&self) -> &str {
        if self.shared { "mapped files" } else { "mapped files (declared unshared)" }
    }
    fn is_local_files(&self) -> bool {
        false
    }
    fn shared_between_processes(&self) -> bool {
        self.shared
    }
    fn list(&self, cache: &Path) -> io::Result<Vec<String>> {
        let root = mapped(cache)?;
        let mut names = Vec::new();
        let mut pending = vec![root.clone()];
        while let Some(dir) = pending.pop() {
            let entries = match std::fs::read_dir(&dir) {
                Err(e) if e.kind() == io::ErrorKind::NotFound && dir == root => continue,
                entries => entries?,
            };
            for entry in entries {
                let path = entry?.path();
                if path.is_dir() {
                    pending.push(path);
                } else {
                    let relative = path.strip_prefix(&root).expect("below the root");
                    names.push(relative.to_string_lossy().replace('\\', "/"));
                }
            }
        }
        names.sort();
        Ok(names)
    }
    fn read(&self, cache: &Path, name: &str) -> io::Result<Vec<u8>> {
        std::fs::read(MappedFiles::object(cache, name)?)
    }
    fn write(&self, cache: &Path, name: &str, bytes: &[u8]) -> io::Result<()> {
        let object = MappedFiles::object(cache, name)?;
        std::fs::create_dir_all(object.parent().expect("inside the cache"))?;
        std::fs::write(object, bytes)
    }
    fn remove(&self, cache: &Path, name: &str) -> io::Result<()> {
        std::fs::remove_file(MappedFiles::object(cache, name)?)
    }
    /// A cache at `path`, or one whose name continues it (`a/b` for `a`).
    fn exists(&self, path: &Path) -> io::Result<bool> {
        let at = mapped(path)?;
        let store = at.parent().expect("inside the store");
        let name = at.file_name().expect("a name").to_string_lossy().into_owned();
        let entries = match std::fs::read_dir(store) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(false),
            entries => entries?,
        };
        for entry in entries {
            let other = entry?.file_name().to_string_lossy().into_owned();
            if other == name || other.starts_with(&format!("{name}{SEPARATOR}")) {
                return Ok(true);
            }
        }
        Ok(false)
    }
}

/// The toy's injector, armed for the mapped directory of the cache the suite names.
struct MappedInjector;

impl FaultInjector for MappedInjector {
    fn name(&self) -> &str {
        "the toy's sync points, on mapped caches"
    }
    fn fail_syncs(&self, dir: &Path, after: u64, stop: &Path) -> Vec<(OsString, OsString)> {
        let dir = mapped(dir).unwrap_or_else(|e| panic!("mapping {}: {e}", dir.display()));
        ToyInjector.fail_syncs(&dir, after, stop)
    }
}

/// The whole suite on mapped files shared between processes (the crash and failed-flush cases
/// run their writer children on the same mapped caches). `storage` comes before `faults` here,
/// to check that the macro takes them in either order.
mod mapped_files {
    stowage_conformance::backend_conformance!(
        super::mapped_toy(),
        storage = super::MappedFiles { shared: true },
        faults = super::MappedInjector,
    );
}

fn case(name: &str) -> Case {
    *CASES.iter().find(|case| case.name == name).unwrap_or_else(|| panic!("no case named {name}"))
}

/// Runs case `name` with a child launcher on `storage`; in the child (this binary re-run with
/// `--exact test_name`), becomes the writer.
fn run_with_child(storage: &dyn CacheStorage, name: &str, test_name: &str) -> Outcome {
    let factory = mapped_toy();
    if let Some(dir) = std::env::var_os(child::CHILD_DIR_ENV) {
        child::child_main(&factory, Path::new(&dir));
    }
    let exe = std::env::current_exe().expect("the test executable");
    let launcher = ChildLauncher { exe, test_name: test_name.into() };
    run_case_on(&factory, storage, case(name), Some(launcher), Some(&MappedInjector))
}

/// Checks that `outcome` is a skip whose reason names the storage and says `why`.
fn assert_skipped(outcome: Outcome, name: &str, storage: &dyn CacheStorage, why: &str) {
    match outcome {
        Outcome::Skipped(reason) => {
            assert!(reason.contains(why), "{name} skipped for another reason: {reason}");
            assert!(
                reason.contains(storage.name()),
                "{name}: the reason names no storage: {reason}"
            );
            assert!(
                !reason.starts_with("needs "),
                "{name}: a storage is no prerequisite: {reason}"
            );
        }
        other => panic!("{name} on {}: expected SKIPPED ({why}), got {other:?}", storage.name()),
    }
}

#[test]
fn child_process_cases_are_skipped_on_an_unshared_storage() {
    let unshared = MappedFiles { shared: false };
    for name in [
        "crash_loses_no_flushed_sample",
        "crash_during_finalize_leaves_resumable_or_complete",
        "failed_flush_poisons_the_handle",
    ] {
        let outcome = run_with_child(
            &unshared,
            name,
            "child_process_cases_are_skipped_on_an_unshared_storage",
        );
        assert_skipped(outcome, name, &unshared, "not shared between processes");
    }
}

#[test]
fn interposer_cases_are_skipped_when_caches_are_not_local_files() {
    let shared = MappedFiles { shared: true };
    for name in [
        "power_loss_keeps_every_flushed_sample",
        "power_loss_during_finalize_leaves_resumable_or_complete",
        "io_errors_are_reported_and_lose_no_flushed_sample",
    ] {
        let outcome = run_with_child(
            &shared,
            name,
            "interposer_cases_are_skipped_when_caches_are_not_local_files",
        );
        assert_skipped(outcome, name, &shared, "not local files");
    }
}

/// [`MappedFiles`] whose `remove` does nothing: a case that deletes through the storage then
/// corrupts nothing.
struct IgnoresRemovals(MappedFiles);

impl CacheStorage for IgnoresRemovals {
    fn name(&self) -> &str {
        "mapped files that ignore removals"
    }
    fn is_local_files(&self) -> bool {
        false
    }
    fn shared_between_processes(&self) -> bool {
        false
    }
    fn list(&self, cache: &Path) -> io::Result<Vec<String>> {
        self.0.list(cache)
    }
    fn read(&self, cache: &Path, name: &str) -> io::Result<Vec<u8>> {
        self.0.read(cache, name)
    }
    fn write(&self, cache: &Path, name: &str, bytes: &[u8]) -> io::Result<()> {
        self.0.write(cache, name, bytes)
    }
    fn remove(&self, _cache: &Path, _name: &str) -> io::Result<()> {
        Ok(())
    }
}

#[test]
fn the_deleted_file_case_deletes_through_the_storage() {
    let factory = mapped_toy();
    let name = "deleted_file_is_detected";
    let honest = run_case_on(&factory, &MappedFiles { shared: false }, case(name), None, None);
    assert_eq!(honest, Outcome::Passed, "{name} on mapped files");
    match run_case_on(
        &factory,
        &IgnoresRemovals(MappedFiles { shared: false }),
        case(name),
        None,
        None,
    ) {
        Outcome::Failed(failure) => {
            assert_eq!(failure.clause, Some("validate.reports-what-get-detects"), "{failure}");
            assert!(failure.to_string().contains("not reported"), "{failure}");
        }
        other => panic!("{name} deleted nothing yet did not fail: {other:?}"),
    }
}

#[test]
fn a_case_that_writes_local_files_is_caught_by_the_mapped_factory() {
    let dir = tempfile::Builder::new().prefix(CASE_DIR_PREFIX).tempdir().unwrap();
    let path = dir.path().join("c");
    std::fs::create_dir(&path).unwrap();
    let refused = mapped_toy().open(&path, OpenMode::ReadOnly).map(|_| ()).unwrap_err();
    assert!(refused.to_string().contains("without going through its CacheStorage"), "{refused}");
}

// ---- concurrent writers -------------------------------------------------------------------

/// What a [`MemFactory`] gets wrong.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum MemDefect {
    /// Each flush stores the handle's own puts as the whole cache: the other writer's are lost.
    LastFlushWins,
    /// Declares `concurrent_writers` but refuses a second writer with `Error::Locked`.
    LocksAnyway,
}

const MEM: &str = "mem";
const MEM_FORMAT: Format =
    Format { id: "mem", description: "in-memory test cache", signature: "(in memory)" };

/// One in-memory cache: its schema and what its writers flushed, in order.
#[derive(Clone)]
struct MemCache {
    schema: Schema,
    flushed: Vec<(String, Sample)>,
}

/// Every in-memory cache of this process, by path.
fn caches() -> MutexGuard<'static, HashMap<PathBuf, MemCache>> {
    static CACHES: OnceLock<Mutex<HashMap<PathBuf, MemCache>>> = OnceLock::new();
    CACHES.get_or_init(Default::default).lock().unwrap_or_else(PoisonError::into_inner)
}

/// An in-memory backend whose writers take no lock (each keeps its puts until it flushes).
struct MemFactory(Option<MemDefect>);

impl MemFactory {
    fn handle(&self, path: &Path, schema: Schema, read_only: bool) -> Box<DynBackend> {
        Box::new(Mem {
            path: path.to_owned(),
            schema,
            caps: self.capabilities(),
            read_only,
            defect: self.0,
            pending: Vec::new(),
            mine: Vec::new(),
        })
    }
}

impl BackendFactory for MemFactory {
    fn name(&self) -> &'static str {
        MEM
    }
    fn capabilities(&self) -> Capabilities {
        let mut caps = Capabilities::none();
        caps.dtypes = DType::ALL.to_vec();
        caps.concurrent_readers = true;
        caps.concurrent_writers = true;
        caps
    }
    fn formats(&self) -> &'static [Format] {
        std::slice::from_ref(&MEM_FORMAT)
    }
    fn recognize(&self, path: &Path) -> Result<Option<&'static Format>> {
        Ok(caches().contains_key(path).then_some(&MEM_FORMAT))
    }
    fn create(&self, dir: &Path, schema: &Schema) -> Result<Box<DynBackend>> {
        self.capabilities().check_schema(schema, MEM)?;
        let mut all = caches();
        if all.contains_key(dir) {
            return Err(Error::AlreadyExists { path: dir.to_owned() });
        }
        all.insert(dir.to_owned(), MemCache { schema: schema.clone(), flushed: Vec::new() });
        Ok(self.handle(dir, schema.clone(), false))
    }
    fn open(&self, dir: &Path, mode: OpenMode) -> Result<Box<DynBackend>> {
        let Some(cache) = caches().get(dir).cloned() else {
            return Err(Error::NotFound { what: format!("mem cache {}", dir.display()) });
        };
        let read_only = mode == OpenMode::ReadOnly;
        if !read_only && self.0 == Some(MemDefect::LocksAnyway) {
            return Err(Error::Locked { cache: dir.to_owned(), lock_file: dir.join("lock") });
        }
        Ok(self.handle(dir, cache.schema, read_only))
    }
}

/// One handle on an in-memory cache.
struct Mem {
    path: PathBuf,
    schema: Schema,
    caps: Capabilities,
    read_only: bool,
    defect: Option<MemDefect>,
    /// Put, not flushed yet.
    pending: Vec<(String, Sample)>,
    /// Everything this handle flushed.
    mine: Vec<(String, Sample)>,
}

impl Mem {
    /// What the handle sees: the flushed samples of every writer, then its own pending ones.
    fn visible(&self) -> Vec<(String, Sample)> {
        let mut all = caches().get(&self.path).map(|c| c.flushed.clone()).unwrap_or_default();
        all.extend(self.pending.iter().cloned());
        all
    }
}

impl Reader for Mem {
    fn name(&self) -> &'static str {
        MEM
    }
    fn format(&self) -> &'static Format {
        &MEM_FORMAT
    }
    fn capabilities(&self) -> &Capabilities {
        &self.caps
    }
    fn schema(&self) -> &Schema {
        &self.schema
    }
    fn path(&self) -> &Path {
        &self.path
    }
    fn get(&self, key: &str) -> Result<Option<Sample>> {
        Ok(self.visible().into_iter().find(|(k, _)| k == key).map(|(_, s)| s))
    }
    fn contains(&self, key: &str) -> Result<bool> {
        Ok(self.get(key)?.is_some())
    }
    fn len(&self) -> usize {
        self.visible().len()
    }
    fn keys(&self) -> Result<Vec<String>> {
        Ok(self.visible().into_iter().map(|(k, _)| k).collect())
    }
    fn is_finalized(&self) -> bool {
        false
    }
    fn validate(&self, _level: ValidationLevel) -> Result<ValidationReport> {
        Ok(ValidationReport::default())
    }
}

impl Backend for Mem {
    fn put(&mut self, key: &str, sample: &Sample) -> Result<()> {
        if self.read_only {
            return Err(Error::unsupported(MEM, "put on a read-only handle"));
        }
        self.caps.check_key(key, MEM)?;
        if self.get(key)?.is_some() {
            return Err(Error::unsupported(MEM, "overwrite of an existing key"));
        }
        self.pending.push((key.to_owned(), sample.clone()));
        Ok(())
    }
    fn flush(&mut self) -> Result<()> {
        if self.read_only {
            return Err(Error::unsupported(MEM, "flush on a read-only handle"));
        }
        let pending = std::mem::take(&mut self.pending);
        self.mine.extend(pending.iter().cloned());
        let mut all = caches();
        let cache = all.get_mut(&self.path).expect("created before any handle");
        match self.defect {
            Some(MemDefect::LastFlushWins) => cache.flushed = self.mine.clone(),
            _ => cache.flushed.extend(pending),
        }
        Ok(())
    }
    fn finalize(&mut self) -> Result<()> {
        Err(Error::unsupported(MEM, "finalize"))
    }
}

#[test]
fn several_writers_keep_every_flushed_put() {
    let name = "second_writer_is_refused";
    let correct =
        run_case_on(&MemFactory(None), &stowage_conformance::LocalFiles, case(name), None, None);
    assert_eq!(correct, Outcome::Passed, "{name} on the correct in-memory backend");
    for (defect, reason) in [
        (
            MemDefect::LastFlushWins,
            "after both flushed: get \"sample-000010\": expected the sample that was put, got None",
        ),
        (MemDefect::LocksAnyway, "append-open while another writer holds the cache"),
    ] {
        let outcome = run_case_on(
            &MemFactory(Some(defect)),
            &stowage_conformance::LocalFiles,
            case(name),
            None,
            None,
        );
        match outcome {
            Outcome::Failed(failure) => {
                eprintln!("{name} caught {defect:?}: {failure}");
                assert_eq!(
                    failure.clause,
                    Some("open.concurrent-writers-keep-every-put"),
                    "{defect:?}: {failure}"
                );
                assert!(failure.to_string().contains(reason), "{defect:?}: {failure}");
            }
            other => panic!("{name} did not catch {defect:?}: {other:?}"),
        }
    }
}
