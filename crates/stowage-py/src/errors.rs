//! Rust errors and panics as Python exceptions.
//!
//! Each category of [`stowage_core::Error`] is a class of `stowage._errors` (Python code, so that
//! a class can derive from both `StowageError` and the built-in exception a caller would catch
//! for the same trouble). The instance carries `path`, `key`, `detail` and, for a schema
//! mismatch, `field`.

use std::panic::{AssertUnwindSafe, catch_unwind};

use pyo3::exceptions::PyKeyError;
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::{PyDict, PyType};
use stowage_core::Error;

/// The module that defines the exception classes.
const ERRORS_MODULE: &str = "stowage._errors";

/// `stowage._errors`, imported once.
static ERRORS: PyOnceLock<Py<PyModule>> = PyOnceLock::new();

/// The exception class `name` of `stowage._errors`.
pub fn class<'py>(py: Python<'py>, name: &str) -> PyResult<Bound<'py, PyType>> {
    let module =
        ERRORS.get_or_try_init(py, || PyModule::import(py, ERRORS_MODULE).map(Bound::unbind))?;
    Ok(module.bind(py).getattr(name)?.cast_into::<PyType>()?)
}

/// A new exception of class `name` with `message` and the keyword attributes `attributes`
/// (`path`, `key`, `detail`, `field`; `None` values are left unset).
pub fn new_error(
    py: Python<'_>,
    name: &str,
    message: &str,
    attributes: &[(&str, Option<String>)],
) -> PyErr {
    let build = || -> PyResult<PyErr> {
        let kwargs = PyDict::new(py);
        for (attribute, value) in attributes {
            if let Some(value) = value {
                kwargs.set_item(attribute, value)?;
            }
        }
        let instance = class(py, name)?.call((message,), Some(&kwargs))?;
        Ok(PyErr::from_value(instance))
    };
    build().unwrap_or_else(|failed| failed)
}

/// `InvalidArgumentError(detail)`: a bad argument from Python, before anything was done.
pub fn invalid(py: Python<'_>, detail: impl Into<String>) -> PyErr {
    let detail = detail.into();
    new_error(
        py,
        "InvalidArgumentError",
        &format!("invalid argument: {detail}"),
        &[("detail", Some(detail.clone()))],
    )
}

/// `SchemaMismatchError` for `field`: a sample or array that does not fit the schema.
pub fn schema_mismatch(py: Python<'_>, field: &str, detail: impl Into<String>) -> PyErr {
    to_py(py, Error::SchemaMismatch { field: field.to_owned(), detail: detail.into() })
}

/// `KeyError(key)`: the cache holds no sample under `key`.
pub fn missing_key(key: &str) -> PyErr {
    PyKeyError::new_err(key.to_owned())
}

/// The Python exception for `error`, with its message (which names the file, key and both sides
/// of a mismatch) and its parts as attributes.
pub fn to_py(py: Python<'_>, error: Error) -> PyErr {
    let message = error.to_string();
    let path_of = |path: &std::path::Path| Some(path.display().to_string());
    let (name, attributes): (&str, Vec<(&str, Option<String>)>) = match &error {
        Error::NotFound { what } => ("CacheNotFoundError", vec![("detail", Some(what.clone()))]),
        Error::AlreadyExists { path } => ("CacheExistsError", vec![("path", path_of(path))]),
        Error::Unsupported { operation, .. } => {
            ("UnsupportedError", vec![("detail", Some(operation.clone()))])
        }
        Error::SchemaMismatch { field, detail } => (
            "SchemaMismatchError",
            vec![("field", Some(field.clone())), ("detail", Some(detail.clone()))],
        ),
        Error::Finalized { path } => ("FinalizedError", vec![("path", path_of(path))]),
        Error::Corrupted { path, key, detail } => (
            "CorruptedError",
            vec![("path", path_of(path)), ("key", key.clone()), ("detail", Some(detail.clone()))],
        ),
        Error::Poisoned { path, cause } => {
            ("PoisonedError", vec![("path", path_of(path)), ("detail", Some(cause.clone()))])
        }
        Error::Incompatible { path, detail } => {
            ("IncompatibleError", vec![("path", path_of(path)), ("detail", Some(detail.clone()))])
        }
        Error::Locked { cache, .. } => ("LockedError", vec![("path", path_of(cache))]),
        Error::InvalidArgument { detail } => {
            ("InvalidArgumentError", vec![("detail", Some(detail.clone()))])
        }
        Error::Io { path, source } => {
            ("StowageIOError", vec![("path", path_of(path)), ("detail", Some(source.to_string()))])
        }
        _ => ("StowageError", Vec::new()),
    };
    new_error(py, name, &message, &attributes)
}

/// Extension of `stowage_core::Result` for the bindings: `.py(py)?`.
pub trait ResultExt<T> {
    /// The error as its Python exception ([`to_py`]).
    fn py(self, py: Python<'_>) -> PyResult<T>;
}

impl<T> ResultExt<T> for stowage_core::Result<T> {
    fn py(self, py: Python<'_>) -> PyResult<T> {
        self.map_err(|error| to_py(py, error))
    }
}

/// Runs `body`, turning a Rust panic into `stowage.InternalError` instead of letting it unwind
/// into the interpreter (PyO3 would raise its `PanicException`, a `BaseException` that an
/// `except Exception` in a training loop does not catch).
pub fn shielded<T>(py: Python<'_>, body: impl FnOnce() -> PyResult<T>) -> PyResult<T> {
    catch_unwind(AssertUnwindSafe(body)).unwrap_or_else(|payload| {
        let what = payload
            .downcast_ref::<&str>()
            .map(|s| (*s).to_owned())
            .or_else(|| payload.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "a panic without a message".to_owned());
        Err(new_error(
            py,
            "InternalError",
            &format!("internal error in stowage (a bug; please report it): {what}"),
            &[("detail", Some(what.clone()))],
        ))
    })
}
