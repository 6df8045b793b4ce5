//! The `stowage` Python package's native module, `stowage._stowage` (`stowage/__init__.py`
//! re-exports it): every stowage cache from Python, reads as zero-copy numpy arrays, checked.
//!
//! Built by maturin (`crates/stowage-py/pyproject.toml`) as one abi3 wheel for CPython >= 3.10.
//! The modules: [`cache`] (the `Cache` class), [`arrays`] (numpy arrays over tensors and back),
//! [`dtypes`], [`fork_gate`] (no lock held across `os.fork`), [`keys`] (keys without a copy), [`schema_dict`] (schemas as dicts), [`options`] (`create`'s options),
//! [`report`] (validation reports, capabilities), [`errors`] (exceptions, panics), [`timing`]
//! (the benchmark's Rust-side timings).

pub mod arrays;
pub mod cache;
pub mod dtypes;
pub mod errors;
pub mod fork_gate;
pub mod key_table;
pub mod keys;
pub mod options;
pub mod report;
pub mod schema_dict;
pub mod timing;

use std::path::{Path, PathBuf};

use pyo3::prelude::*;
use pyo3::types::PyDict;
use stowage_core::{DynBackend, Error, OpenMode};

use crate::cache::{Cache, Handle};
use crate::errors::{ResultExt, shielded};

/// Backends whose per-read checks `checks=False` turns off (the others always check).
const SKIPPABLE_CHECKS: [&str; 3] = ["memmap", "arrow", "npy"];

/// Opens the cache at `path` (a directory, a file, or an `s3://`, `gs://`, `az://`, `file://`,
/// `memory://` URL) in any format stowage reads: its own, DNANet's, torchcachex's, hangar's,
/// aenet's. `mode="r"` reads without a lock; `mode="a"` opens the cache's writer (appending,
/// resuming an unfinished cache). `checks=False` skips the per-read checksum checks of the
/// backends that can (memmap, arrow, npy).
///
/// ```python
/// with stowage.open("/data/cache") as cache:
///     sample = cache["key-0"]
/// ```
#[pyfunction]
#[pyo3(signature = (path, mode = "r", *, checks = true))]
fn open(py: Python<'_>, path: PathBuf, mode: &str, checks: bool) -> PyResult<Cache> {
    shielded(py, || {
        let registry = stowage_cli::registry_checking_reads(checks);
        let (handle, mode) = match mode {
            "r" => {
                let reader = py
                    .detach(|| fork_gate::pass(|| registry.open(&path)))
                    .map_err(|e| naming(py, e, &path))?;
                (Handle::reader(reader), "r")
            }
            "a" => {
                let backend = py
                    .detach(|| open_writer(&registry, &path))
                    .map_err(|e| naming(py, e, &path))?;
                (Handle::writer(backend), "a")
            }
            other => {
                return Err(errors::invalid(
                    py,
                    format!("mode {other:?} is not \"r\" (read) or \"a\" (append)"),
                ));
            }
        };
        Ok(make_cache(py, handle, &path, mode, checks))
    })
}

/// The writer of the cache at `path`: its factory's own format opened for appending. A cache
/// only an original tool's layout describes (torchcachex's segments, aenet's file) is
/// `Unsupported`, saying how to write to it instead.
fn open_writer(
    registry: &stowage_core::Registry,
    path: &Path,
) -> stowage_core::Result<Box<DynBackend>> {
    let Some((factory, format)) = registry.recognize(path)? else {
        return Err(registry.not_a_cache(path));
    };
    factory.open(path, OpenMode::Append).map_err(|error| match error {
        Error::NotFound { .. } if path.exists() => Error::unsupported(
            factory.name(),
            format!(
                "mode \"a\" on {}: it is a {} (not a stowage cache the {} backend writes): read \
                 it with mode \"r\", `stowage adopt` it first, or convert it with \
                 stowage.convert(src, dst, to=...) ({error})",
                path.display(),
                format.description,
                factory.name()
            ),
        ),
        other => other,
    })
}

/// The exception of an error opening `path`, whose message and `path` name it when the error
/// itself does not (a refusal about the format, say).
fn naming(py: Python<'_>, error: Error, path: &Path) -> PyErr {
    let shown = path.display().to_string();
    let exception = errors::to_py(py, error);
    let value = exception.value(py);
    let message = value.str().map(|s| s.to_string()).unwrap_or_default();
    if !message.contains(&shown) {
        let _ = value.setattr("message", format!("{shown}: {message}"));
        let _ = value.setattr("args", (format!("{shown}: {message}"),));
    }
    if value.getattr("path").is_ok_and(|p| p.is_none()) {
        let _ = value.setattr("path", shown);
    }
    exception
}

fn make_cache(
    py: Python<'_>,
    handle: Handle,
    path: &std::path::Path,
    mode: &'static str,
    checks: bool,
) -> Cache {
    let mut cache = Cache::new(py, handle, path.display().to_string(), mode, checks);
    if !SKIPPABLE_CHECKS.contains(&cache.backend_name()) {
        cache.set_checks(true);
    }
    cache
}

/// Makes a new cache at `path` with the backend `backend` (`arrow`, `memmap`, `npy`, `hdf5`,
/// `remote`) and `schema` (field -> `(dtype, shape)`, a dict, `"bytes"` or `"json"`); `options`
/// are the backend's (e.g. `compression="zstd"` for arrow) plus `checks`.
///
/// ```python
/// cache = stowage.create("/tmp/c", backend="arrow", schema={"x": ("float32", [512])})
/// ```
#[pyfunction]
#[pyo3(signature = (path, backend = "arrow", schema = None, **options))]
fn create(
    py: Python<'_>,
    path: PathBuf,
    backend: &str,
    schema: Option<Bound<'_, PyAny>>,
    options: Option<Bound<'_, PyDict>>,
) -> PyResult<Cache> {
    shielded(py, || {
        let Some(schema) = schema else {
            return Err(errors::invalid(
                py,
                "create needs a schema, e.g. schema={\"x\": (\"float32\", [512])}",
            ));
        };
        let schema = schema_dict::from_dict(py, &schema)?;
        let options = match options {
            Some(options) => options.copy()?,
            None => PyDict::new(py),
        };
        let checks = match options.get_item("checks")? {
            Some(flag) => {
                options.del_item("checks")?;
                flag.extract::<bool>()
                    .map_err(|_| errors::invalid(py, "checks must be True or False"))?
            }
            None => true,
        };
        let factory = options::factory(py, backend, checks, &options)?;
        let created = py.detach(|| fork_gate::pass(|| factory.create(&path, &schema))).py(py)?;
        Ok(make_cache(py, Handle::writer(created), &path, "w", checks))
    })
}

/// Converts the cache at `src` (any format) into a new cache at `dst` written by the backend
/// `to`, as `stowage convert` does (a re-run resumes; `merge` accepts a target converted from
/// another source). Returns what the command prints.
///
/// ```python
/// print(stowage.convert("/data/torchcachex", "/data/memmap", to="memmap"))
/// ```
#[pyfunction]
#[pyo3(signature = (src, dst, to, *, verify = false, flush_every = 1024, merge = false))]
fn convert(
    py: Python<'_>,
    src: PathBuf,
    dst: PathBuf,
    to: &str,
    verify: bool,
    flush_every: u32,
    merge: bool,
) -> PyResult<String> {
    shielded(py, || {
        let mut args: Vec<std::ffi::OsString> = vec![
            "stowage".into(),
            "convert".into(),
            src.into(),
            dst.into(),
            "--to".into(),
            to.into(),
        ];
        args.extend(["--flush-every".into(), flush_every.to_string().into()]);
        if verify {
            args.push("--verify".into());
        }
        if merge {
            args.push("--merge".into());
        }
        let (mut out, mut notes) = (Vec::new(), Vec::new());
        let status = py.detach(|| {
            stowage_cli::run(&stowage_cli::default_registry(), args, &mut out, &mut notes)
        });
        let out = String::from_utf8_lossy(&out).into_owned();
        let notes = String::from_utf8_lossy(&notes).into_owned();
        match status {
            0 => Ok(out + &notes),
            stowage_cli::EXIT_PROBLEMS => Err(errors::new_error(
                py,
                "CorruptedError",
                &format!("convert found mismatches:\n{out}{notes}"),
                &[],
            )),
            _ => {
                let message = notes
                    .trim()
                    .strip_prefix("stowage: error: ")
                    .unwrap_or(notes.trim())
                    .to_owned();
                Err(errors::new_error(py, "StowageError", &message, &[]))
            }
        }
    })
}

/// The names of the registered backends, in the order they are asked to recognize a path.
#[pyfunction]
fn backends() -> Vec<&'static str> {
    stowage_cli::default_registry().factories().map(|f| f.name()).collect()
}

/// The numpy dtype that arrays of the stowage dtype `name` have (`uint16` with
/// `{"stowage_dtype": "bfloat16"}` metadata for bfloat16): for allocating `get_batch_into`'s
/// arrays.
///
/// ```python
/// out = {"x": np.empty((256, 512), stowage.numpy_dtype("bfloat16"))}
/// ```
#[pyfunction]
fn numpy_dtype<'py>(py: Python<'py>, name: &str) -> PyResult<Bound<'py, numpy::PyArrayDescr>> {
    let dtype = stowage_core::DType::from_name(name).py(py)?;
    dtypes::descriptor(py, dtype)
}

/// Reopens a pickled read handle (`Cache.__reduce__`).
#[pyfunction]
fn _reopen(py: Python<'_>, path: PathBuf, checks: bool) -> PyResult<Cache> {
    open(py, path, "r", checks)
}

/// Raises `InternalError` from a deliberate Rust panic: the tests' proof that a panic never
/// reaches the interpreter.
#[pyfunction]
fn _panic_for_tests(py: Python<'_>) -> PyResult<()> {
    shielded(py, || -> PyResult<()> { panic!("deliberate panic for the tests") })
}

/// The native module; `stowage/__init__.py` re-exports it.
#[pymodule]
fn _stowage(module: &Bound<'_, PyModule>) -> PyResult<()> {
    module.add("__version__", env!("CARGO_PKG_VERSION"))?;
    let dtypes: Vec<&str> = stowage_core::DType::ALL.iter().map(|d| d.name()).collect();
    module.add("DTYPES", pyo3::types::PyTuple::new(module.py(), dtypes)?)?;
    module.add_class::<Cache>()?;
    module.add_class::<key_table::KeyTable>()?;
    module.add_class::<report::ValidationReport>()?;
    module.add_function(wrap_pyfunction!(open, module)?)?;
    module.add_function(wrap_pyfunction!(create, module)?)?;
    module.add_function(wrap_pyfunction!(convert, module)?)?;
    module.add_function(wrap_pyfunction!(backends, module)?)?;
    module.add_function(wrap_pyfunction!(numpy_dtype, module)?)?;
    module.add_function(wrap_pyfunction!(_reopen, module)?)?;
    module.add_function(wrap_pyfunction!(_panic_for_tests, module)?)?;
    module.add_function(wrap_pyfunction!(fork_gate::_before_fork, module)?)?;
    module.add_function(wrap_pyfunction!(fork_gate::_after_fork, module)?)?;
    module.add_function(wrap_pyfunction!(fork_gate::_after_fork_in_child, module)?)?;
    module.add_function(wrap_pyfunction!(timing::_time_rust_gets, module)?)?;
    module.add_function(wrap_pyfunction!(timing::_time_rust_get_batches, module)?)?;
    Ok(())
}
