//! Running cases: one fresh directory each, panics turned into failures, SKIPPED lines printed.

use crate::{CASES, Case, CaseContext, ChildLauncher, Outcome, Report};
use std::io::Write;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::Path;
use stowage_core::{Backend, BackendFactory, Capabilities, DynBackend, OpenMode, Result, Schema};

/// Runs one case in a fresh temporary directory. A panic inside the backend is a failure, not a
/// crash of the suite.
pub fn run_case(factory: &dyn BackendFactory, case: Case, child: Option<ChildLauncher>) -> Outcome {
    let dir = match tempfile::Builder::new().prefix("stowage-conformance-").tempdir() {
        Ok(dir) => dir,
        Err(e) => return Outcome::Failed(format!("cannot create a temporary directory: {e}")),
    };
    let ctx = CaseContext::new(factory, dir.path(), child);
    match catch_unwind(AssertUnwindSafe(|| (case.run)(&ctx))) {
        Ok(Ok(outcome)) => outcome,
        Ok(Err(message)) => Outcome::Failed(message),
        Err(panic) => Outcome::Failed(format!("panicked: {}", panic_text(&*panic))),
    }
}

fn panic_text(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_else(|| "non-string panic payload".into())
}

/// Runs every case of [`CASES`] and returns the report. The crash case needs a child process and
/// reports SKIPPED here; it runs under [`crate::backend_conformance!`].
pub fn run_all(factory: &dyn BackendFactory) -> Report {
    let results = CASES.iter().map(|case| (case.name, run_case(factory, *case, None))).collect();
    Report { results }
}

/// Runs the cases of [`CASES`] named in `names`, in `CASES` order. An unknown name is a failure.
pub fn run_subset(factory: &dyn BackendFactory, names: &[&str]) -> Report {
    let mut results: Vec<(&'static str, Outcome)> = CASES
        .iter()
        .filter(|case| names.contains(&case.name))
        .map(|case| (case.name, run_case(factory, *case, None)))
        .collect();
    for name in names {
        if !CASES.iter().any(|case| case.name == *name) {
            results.push(("run_subset", Outcome::Failed(format!("no case named {name:?}"))));
        }
    }
    Report { results }
}

/// The body of every `#[test]` that [`crate::backend_conformance!`] generates: runs the case (or,
/// in a crash child process, the child's writer loop), prints SKIPPED past the capture, and panics
/// with the failure text on failure.
pub fn run_case_as_test(factory: &dyn BackendFactory, case: Case, module_path: &str) {
    if let Some(dir) = std::env::var_os(crate::crash::CHILD_DIR_ENV) {
        crate::crash::child_main(factory, Path::new(&dir));
    }
    // libtest names a test by its module path without the crate name.
    let test_name = match module_path.split_once("::") {
        Some((_, rest)) => format!("{rest}::{}", case.name),
        None => case.name.to_string(),
    };
    let child = std::env::current_exe().ok().map(|exe| ChildLauncher { exe, test_name });
    match run_case(factory, case, child) {
        Outcome::Passed => {}
        Outcome::Skipped(why) => {
            // Straight to the process's stderr: libtest captures `eprintln!` of passing tests.
            let line = format!("SKIPPED {} [{}]: {why}\n", case.name, factory.name());
            let _ = std::io::stderr().lock().write_all(line.as_bytes());
        }
        Outcome::Failed(why) => panic!("conformance case {} failed: {why}", case.name),
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
    fn create(&self, dir: &Path, schema: &Schema) -> Result<Box<DynBackend>> {
        let inner = self.0.create(dir, schema)?;
        Ok(Box::new(inner) as Box<DynBackend>)
    }
    fn open(&self, dir: &Path, mode: OpenMode) -> Result<Box<DynBackend>> {
        let inner = self.0.open(dir, mode)?;
        Ok(Box::new(inner) as Box<DynBackend>)
    }
}

// `Backend` must stay object safe: this fails to compile otherwise.
const _: Option<&dyn Backend> = None;
