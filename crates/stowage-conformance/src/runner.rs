//! Running cases: one fresh directory each, panics turned into failures, SKIPPED lines printed.
//! The `_on` variants take the [`CacheStorage`] the factory's caches live on; the others use
//! [`crate::storage::LocalFiles`].

use crate::storage::{CacheStorage, LOCAL_FILES};
use crate::{CASES, Case, CaseContext, ChildLauncher, Failure, FaultInjector, Outcome, Report};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::Path;
use stowage_core::{
    Backend, BackendFactory, Capabilities, DynBackend, DynReader, Format, OpenMode, Result, Schema,
    ValidationLevel, ValidationReport,
};

/// Runs one case in a fresh temporary directory, without a fault injector. A panic inside the
/// backend is a failure, not a crash of the suite.
pub fn run_case(factory: &dyn BackendFactory, case: Case, child: Option<ChildLauncher>) -> Outcome {
    run_case_with(factory, case, child, None)
}

/// Runs one case in a fresh temporary directory, with `faults` for the cases that need a failed
/// write. A panic inside the backend is a failure, not a crash of the suite. A failure is
/// stamped with the case's name, and with its clause when the case checks only one.
pub fn run_case_with(
    factory: &dyn BackendFactory,
    case: Case,
    child: Option<ChildLauncher>,
    faults: Option<&dyn FaultInjector>,
) -> Outcome {
    run_case_on(factory, &LOCAL_FILES, case, child, faults)
}

/// [`run_case_with`] for a factory whose caches live on `storage`.
pub fn run_case_on(
    factory: &dyn BackendFactory,
    storage: &dyn CacheStorage,
    case: Case,
    child: Option<ChildLauncher>,
    faults: Option<&dyn FaultInjector>,
) -> Outcome {
    let dir = match tempfile::Builder::new().prefix("stowage-conformance-").tempdir() {
        Ok(dir) => dir,
        Err(e) => {
            let failure = Failure::new("creating a temporary directory", "success", e);
            return Outcome::Failed(Failure { case: case.name, ..failure });
        }
    };
    let ctx =
        CaseContext::new(factory, dir.path(), child).with_faults(faults).with_storage(storage);
    // No child process is spawned while the case body has files open (see child::CaseGate).
    let gate = crate::child::CaseGate::enter();
    let result = match catch_unwind(AssertUnwindSafe(|| (case.run)(&ctx))) {
        Ok(result) => result,
        Err(panic) => Err(Failure::panicked(panic_text(&*panic))),
    };
    drop(gate);
    match result {
        Ok(outcome) => outcome,
        Err(mut failure) => {
            failure.case = case.name;
            if let [only] = case.clauses {
                failure.clause.get_or_insert(only);
            }
            Outcome::Failed(failure)
        }
    }
}

/// The message of a caught panic.
pub(crate) fn panic_text(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_else(|| "non-string panic payload".into())
}

/// Runs every case of [`CASES`] and returns the report. The cases that need a child process
/// (crash, failed flush) report SKIPPED here; they run under [`crate::backend_conformance!`].
pub fn run_all(factory: &dyn BackendFactory) -> Report {
    run_all_on(factory, &LOCAL_FILES)
}

/// [`run_all`] for a factory whose caches live on `storage`.
pub fn run_all_on(factory: &dyn BackendFactory, storage: &dyn CacheStorage) -> Report {
    let results = CASES
        .iter()
        .map(|case| (case.name, run_case_on(factory, storage, *case, None, None)))
        .collect();
    Report { results }
}

/// Runs the cases of [`CASES`] named in `names`, in `CASES` order. An unknown name is a failure.
pub fn run_subset(factory: &dyn BackendFactory, names: &[&str]) -> Report {
    run_subset_on(factory, &LOCAL_FILES, names)
}

/// [`run_subset`] for a factory whose caches live on `storage`.
pub fn run_subset_on(
    factory: &dyn BackendFactory,
    storage: &dyn CacheStorage,
    names: &[&str],
) -> Report {
    let mut results: Vec<(&'static str, Outcome)> = CASES
        .iter()
        .filter(|case| names.contains(&case.name))
        .map(|case| (case.name, run_case_on(factory, storage, *case, None, None)))
        .collect();
    for name in names {
        if !CASES.iter().any(|case| case.name == *name) {
            let failure = Failure::new("run_subset", "the name of a case", format!("{name:?}"));
            results
                .push(("run_subset", Outcome::Failed(Failure { case: "run_subset", ..failure })));
        }
    }
    Report { results }
}

/// The body of every `#[test]` that [`crate::backend_conformance!`] generates without
/// `faults = ...`: [`run_case_as_test_with`] with the built-in [`crate::injector::Faultinject`].
pub fn run_case_as_test(factory: &dyn BackendFactory, case: Case, module_path: &str) {
    run_case_as_test_with(factory, Some(&crate::injector::Faultinject), case, module_path);
}

/// The body of every `#[test]` that [`crate::backend_conformance!`] generates: runs the case (or,
/// in a child process, the child's writer), prints SKIPPED past the capture, and panics with the
/// failure on failure.
pub fn run_case_as_test_with(
    factory: &dyn BackendFactory,
    faults: Option<&dyn FaultInjector>,
    case: Case,
    module_path: &str,
) {
    run_case_as_test_on(factory, &LOCAL_FILES, faults, case, module_path);
}

/// [`run_case_as_test_with`] for a factory whose caches live on `storage`: the body of every
/// `#[test]` that [`crate::backend_conformance!`] generates with `storage = ...`.
pub fn run_case_as_test_on(
    factory: &dyn BackendFactory,
    storage: &dyn CacheStorage,
    faults: Option<&dyn FaultInjector>,
    case: Case,
    module_path: &str,
) {
    if let Some(dir) = std::env::var_os(crate::child::CHILD_DIR_ENV) {
        crate::child::child_main(factory, Path::new(&dir));
    }
    // libtest names a test by its module path without the crate name.
    let test_name = match module_path.split_once("::") {
        Some((_, rest)) => format!("{rest}::{}", case.name),
        None => case.name.to_string(),
    };
    let child = std::env::current_exe().ok().map(|exe| ChildLauncher { exe, test_name });
    match run_case_on(factory, storage, case, child, faults) {
        Outcome::Passed => {}
        Outcome::Skipped(why) => {
            // Past libtest's capture, and counted by `cargo xtask test`: a missing prerequisite
            // (a reason that starts with "needs") or a case the capabilities rule out.
            let kind = if why.starts_with("needs ") { "prerequisite" } else { "not-applicable" };
            let reason = match storage.is_local_files() {
                true => format!("{} [{}]: {why}", case.name, factory.name()),
                false => format!("{} [{} on {}]: {why}", case.name, factory.name(), storage.name()),
            };
            stowage_core::skip::report_skip(kind, &reason);
        }
        Outcome::Failed(failure) => panic!("conformance case {} failed: {failure}", case.name),
    }
}

/// Wraps a factory so that every backend it returns is boxed once more (`Box<Box<dyn Backend>>`),
/// exercising the forwarding implementation of [`Backend`] for `Box<B>`.
pub struct BoxedFactory<'a, F: ?Sized>(pub &'a F);

impl<F: BackendFactory + ?Sized> BackendFactory for BoxedFactory<'_, F> {
    fn name(&self) -> &'static str {
        self.0.name()
    }
    fn capabilities(&self) -> Capabilities {
        self.0.capabilities()
    }
    fn formats(&self) -> &'static [Format] {
        self.0.formats()
    }
    fn url_schemes(&self) -> &'static [&'static str] {
        self.0.url_schemes()
    }
    fn recognize(&self, path: &Path) -> Result<Option<&'static Format>> {
        self.0.recognize(path)
    }
    fn create(&self, dir: &Path, schema: &Schema) -> Result<Box<DynBackend>> {
        let inner = self.0.create(dir, schema)?;
        Ok(Box::new(inner) as Box<DynBackend>)
    }
    fn open(&self, dir: &Path, mode: OpenMode) -> Result<Box<DynBackend>> {
        let inner = self.0.open(dir, mode)?;
        Ok(Box::new(inner) as Box<DynBackend>)
    }
    fn open_reader(&self, path: &Path) -> Result<Box<DynReader>> {
        let inner = self.0.open_reader(path)?;
        Ok(Box::new(inner) as Box<DynReader>)
    }
    fn validate_path(&self, path: &Path, level: ValidationLevel) -> Result<ValidationReport> {
        self.0.validate_path(path, level)
    }
    fn describe_unopened(
        &self,
        path: &Path,
        format: &'static Format,
        error: stowage_core::Error,
    ) -> Result<stowage_core::describe::Description> {
        self.0.describe_unopened(path, format, error)
    }
    fn check_plan_unopened(
        &self,
        path: &Path,
        error: stowage_core::Error,
        selection: &stowage_core::check_plan::Selection,
    ) -> std::result::Result<
        stowage_core::check_plan::CheckPlan<'static>,
        stowage_core::check_plan::Unplanned,
    > {
        self.0.check_plan_unopened(path, error, selection)
    }
}

// `Backend` and `Reader` must stay object safe: this fails to compile otherwise.
const _: Option<&dyn Backend> = None;
const _: Option<&dyn stowage_core::Reader> = None;
