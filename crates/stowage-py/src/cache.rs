//! `stowage.Cache`: an open cache, for reading and (when opened so) writing.

use std::ops::ControlFlow;
use std::sync::{Arc, PoisonError, RwLock, TryLockError};

use pyo3::prelude::*;
use pyo3::pybacked::PyBackedStr;
use pyo3::types::{PyBytes, PyDict, PyList, PyString, PyTuple, PyType};
use stowage_core::{
    DynBackend, DynReader, FieldKind, Reader, Sample, Schema, ValidationLevel, Value,
};

use crate::arrays::{self, Destination};
use crate::errors::{self, ResultExt, shielded};
use crate::fork_gate;
use crate::key_table::{self, KeyTable};
use crate::keys::{self, KeyBuffer};
use crate::report::ValidationReport;
use crate::schema_dict;

/// What a `Cache` holds while it is open. Every call on it, and its drop (which closes the
/// backend's files under the backend's locks), passes the [`fork_gate`].
pub struct Handle {
    /// `None` only while `drop` runs.
    access: Option<Access>,
}

enum Access {
    /// Opened with mode `"r"`: no lock, never blocks a writer.
    Read(Box<DynReader>),
    /// Opened with mode `"a"` or made by `create` (`"w"`): the cache's writer. Reads share the
    /// lock; writes take it alone.
    Write(RwLock<Box<DynBackend>>),
}

impl Handle {
    /// A read-only handle (mode `"r"`).
    pub fn reader(reader: Box<DynReader>) -> Handle {
        Handle { access: Some(Access::Read(reader)) }
    }

    /// A writable handle (mode `"a"` or `"w"`).
    pub fn writer(backend: Box<DynBackend>) -> Handle {
        Handle { access: Some(Access::Write(RwLock::new(backend))) }
    }

    fn access(&self) -> &Access {
        self.access.as_ref().expect("a handle has its access until it is dropped")
    }

    /// Runs `f` on the reader.
    pub fn read<R>(&self, f: impl FnOnce(&dyn Reader) -> R) -> R {
        fork_gate::pass(|| match self.access() {
            Access::Read(reader) => f(reader.as_ref()),
            Access::Write(backend) => {
                let backend = backend.read().unwrap_or_else(PoisonError::into_inner);
                f(backend.as_ref())
            }
        })
    }

    /// [`Reader::get_if_ready`] of `key`, called with the GIL held: `None` also when a writer
    /// handle's lock is taken (a `flush` may hold it while it waits on the backend).
    pub fn get_if_ready(&self, key: &str) -> Option<stowage_core::Result<Option<Sample>>> {
        fork_gate::pass(|| match self.access() {
            Access::Read(reader) => reader.get_if_ready(key),
            Access::Write(backend) => match backend.try_read() {
                Ok(backend) => backend.get_if_ready(key),
                Err(TryLockError::Poisoned(poisoned)) => poisoned.into_inner().get_if_ready(key),
                Err(TryLockError::WouldBlock) => None,
            },
        })
    }

    /// Runs `f` on the writer; `None` for a read-only handle.
    fn write<R>(&self, f: impl FnOnce(&mut DynBackend) -> R) -> Option<R> {
        fork_gate::pass(|| match self.access() {
            Access::Read(_) => None,
            Access::Write(backend) => {
                let mut backend = backend.write().unwrap_or_else(PoisonError::into_inner);
                Some(f(backend.as_mut()))
            }
        })
    }
}

impl Drop for Handle {
    fn drop(&mut self) {
        // The last reference may go in any thread (a `get` that outlived `close`, the garbage
        // collector): wherever it is, the backend's close must not run across a fork.
        let access = self.access.take();
        fork_gate::pass(move || drop(access));
    }
}

/// An open cache. Use it as a context manager; `close` releases it (arrays returned by `get`
/// stay valid after it).
///
/// ```python
/// import numpy as np, stowage
/// with stowage.create("/tmp/c", backend="arrow", schema={"x": ("float32", [3])}) as cache:
///     cache.put("a", {"x": np.arange(3, dtype=np.float32)})
/// with stowage.open("/tmp/c") as cache:
///     print(cache.get("a")["x"])  # [0. 1. 2.], read-only, checked
/// ```
#[pyclass(frozen, module = "stowage", name = "Cache")]
pub struct Cache {
    handle: RwLock<Option<Arc<Handle>>>,
    path: String,
    backend: &'static str,
    format: &'static str,
    mode: &'static str,
    checks: bool,
    schema: Schema,
    /// The schema's field names as interned Python strings (the keys of every dict `get` makes).
    names: Vec<Py<PyString>>,
    /// Whether the backend hands out mapped bytes: its gets are then memory reads, which run
    /// faster holding the GIL than paying to release it. Other backends' gets release it.
    zero_copy: bool,
    capabilities: stowage_core::Capabilities,
}

impl Cache {
    /// A `Cache` over `handle`, opened from `path` with `mode`.
    pub fn new(
        py: Python<'_>,
        handle: Handle,
        path: String,
        mode: &'static str,
        checks: bool,
    ) -> Cache {
        let (backend, format, schema, capabilities) = handle.read(|r| {
            (r.name(), r.format().description, r.schema().clone(), r.capabilities().clone())
        });
        let names = schema.fields.iter().map(|f| PyString::intern(py, &f.name).unbind()).collect();
        Cache {
            handle: RwLock::new(Some(Arc::new(handle))),
            path,
            backend,
            format,
            mode,
            checks,
            zero_copy: capabilities.zero_copy_get,
            schema,
            names,
            capabilities,
        }
    }

    /// The backend's name.
    pub fn backend_name(&self) -> &'static str {
        self.backend
    }

    /// Records whether reads are checked (a backend that always checks reports `true`).
    pub fn set_checks(&mut self, checks: bool) {
        self.checks = checks;
    }

    /// The open handle, or `InvalidArgumentError` when the cache was closed.
    pub fn handle(&self, py: Python<'_>) -> PyResult<Arc<Handle>> {
        let handle = self.handle.read().unwrap_or_else(PoisonError::into_inner);
        handle.clone().ok_or_else(|| self.closed_error(py))
    }

    fn closed_error(&self, py: Python<'_>) -> PyErr {
        errors::invalid(py, format!("cache {} is closed", self.path))
    }

    /// Runs `f` on the writer, or raises `UnsupportedError` for a read-only handle.
    fn write<R: Send>(
        &self,
        py: Python<'_>,
        operation: &str,
        f: impl FnOnce(&mut DynBackend) -> stowage_core::Result<R> + Send,
    ) -> PyResult<R> {
        let handle = self.handle(py)?;
        match py.detach(|| handle.write(f)) {
            Some(result) => result.py(py),
            None => Err(errors::to_py(
                py,
                stowage_core::Error::unsupported(
                    self.backend,
                    format!("{operation} on a cache opened read-only (open it with mode=\"a\")"),
                ),
            )),
        }
    }

    /// The interned name of field `name` (a new string for a name outside the schema).
    fn name<'py>(&self, py: Python<'py>, name: &str) -> Bound<'py, PyString> {
        match self.schema.fields.iter().position(|f| f.name == name) {
            Some(i) => self.names[i].bind(py).clone(),
            None => PyString::new(py, name),
        }
    }

    /// A sample as the dict `get` returns.
    fn sample_dict<'py>(&self, py: Python<'py>, sample: Sample) -> PyResult<Bound<'py, PyDict>> {
        let dict = PyDict::new(py);
        for (name, value) in sample.fields() {
            dict.set_item(self.name(py, name), value_object(py, value)?)?;
        }
        Ok(dict)
    }

    /// The samples of `keys`, read without the GIL; `KeyError` for the first missing key.
    fn samples(&self, py: Python<'_>, keys: &[&str]) -> PyResult<Vec<Sample>> {
        let handle = self.handle(py)?;
        let found = py.detach(|| handle.read(|r| r.get_batch(keys))).py(py)?;
        let mut samples = Vec::with_capacity(found.len());
        for (key, sample) in keys.iter().zip(found) {
            samples.push(sample.ok_or_else(|| errors::missing_key(key))?);
        }
        Ok(samples)
    }
}

/// One field's value as Python sees it: a read-only array, `bytes`, `str` or `None`.
fn value_object<'py>(py: Python<'py>, value: &Value) -> PyResult<Bound<'py, PyAny>> {
    Ok(match value {
        Value::Tensor(tensor) => arrays::read_only(py, tensor)?,
        Value::Bytes(bytes) => PyBytes::new(py, bytes).into_any(),
        Value::Json(text) => PyString::new(py, text).into_any(),
        Value::Null => py.None().into_bound(py),
    })
}

#[pymethods]
impl Cache {
    /// The sample under `key` as a dict of field -> value: a read-only numpy array per tensor
    /// field (sharing the memory map where the backend is zero-copy; valid after `close`),
    /// `bytes`, `str` (JSON text) or `None`. bfloat16 comes back as `uint16` whose
    /// `dtype.metadata` is `{"stowage_dtype": "bfloat16"}`. Every read is checksum-checked unless
    /// the cache was opened with `checks=False`.
    ///
    /// Raises `KeyError` when the cache holds no such key, `CorruptedError` when the stored
    /// bytes do not match their checksum.
    ///
    /// ```python
    /// x = cache.get("sample-0")["x"]   # numpy array, x.flags.writeable is False
    /// ```
    fn get<'py>(&self, py: Python<'py>, key: Bound<'py, PyAny>) -> PyResult<Bound<'py, PyDict>> {
        shielded(py, || {
            let key = keys::borrow(&key)?;
            // A reference of its own, not the lock around it: the read may wait at the fork
            // gate without the GIL, and a `close` from another thread meanwhile would then
            // wait for the lock while holding the GIL this thread needs back.
            let handle = self.handle(py)?;
            // A zero-copy get (mapped bytes) never waits, and one that answers `get_if_ready`
            // does not either: both keep the GIL, which letting go and taking back costs more
            // than them. Any other get may wait on a lock, and lets the GIL go first.
            let found = if self.zero_copy {
                handle.read(|r| r.get(key))
            } else {
                match handle.get_if_ready(key) {
                    Some(found) => found,
                    None => py.detach(|| handle.read(|r| r.get(key))),
                }
            };
            match found.py(py)? {
                Some(sample) => self.sample_dict(py, sample),
                None => Err(errors::missing_key(key)),
            }
        })
    }

    /// `cache[key]` is `cache.get(key)`.
    fn __getitem__<'py>(
        &self,
        py: Python<'py>,
        key: Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyDict>> {
        self.get(py, key)
    }

    /// The samples of `keys`, field by field: one new stacked array of shape `(len(keys),
    /// *shape)` per tensor field whose samples all have one shape, else the list of the values.
    /// `KeyError` names the first missing key.
    ///
    /// ```python
    /// batch = cache.get_batch(["a", "b"])   # {"x": array of shape (2, 512)}
    /// ```
    fn get_batch<'py>(
        &self,
        py: Python<'py>,
        keys: Bound<'py, PyAny>,
    ) -> PyResult<Bound<'py, PyDict>> {
        shielded(py, || {
            let keys = KeyBuffer::of_sequence(&keys)?;
            let samples = self.samples(py, &keys.all())?;
            let batch = PyDict::new(py);
            for (index, field) in self.schema.fields.iter().enumerate() {
                let values: Vec<&Value> =
                    samples.iter().map(|s| s.get(&field.name).unwrap_or(&Value::Null)).collect();
                let name = self.names[index].bind(py);
                match stackable(&values) {
                    Some((dtype, shape)) => {
                        let mut dims = vec![values.len()];
                        dims.extend_from_slice(shape);
                        let array = arrays::empty(py, dtype, &dims)?;
                        let destination = Destination::of(&array)
                            .expect("a new array is writable and C-contiguous");
                        let mut at = 0;
                        for value in &values {
                            let bytes =
                                value.as_tensor().expect("stackable values are tensors").bytes();
                            // SAFETY: the array is alive (held above) and holds `len(keys)` rows
                            // of this byte size, so every copy is in bounds.
                            unsafe { destination.write(at, bytes) };
                            at += bytes.len();
                        }
                        batch.set_item(name, array)?;
                    }
                    None => {
                        let list = PyList::empty(py);
                        for value in values {
                            list.append(value_object(py, value)?)?;
                        }
                        batch.set_item(name, list)?;
                    }
                }
            }
            Ok(batch)
        })
    }

    /// Reads the samples of `keys` into caller-owned arrays: `out` maps a tensor field's name to
    /// a writable C-contiguous array of shape `(len(keys), *shape)` and the field's dtype
    /// (`uint16` for bfloat16). Fields not in `out` are not copied. The copy runs without the
    /// GIL. Every argument is checked before anything is written; then each sample is copied as
    /// soon as it is read, while its bytes are in the CPU cache. A missing key (`KeyError`), a
    /// row of another shape or a damaged row (`CorruptedError`) stops the batch: the rows of the
    /// keys before it are written, the rest are left as they were.
    ///
    /// ```python
    /// out = {"x": np.empty((256, 512), np.float32)}
    /// cache.get_batch_into(keys, out)
    /// ```
    fn get_batch_into<'py>(
        &self,
        py: Python<'py>,
        keys: Bound<'py, PyAny>,
        out: Bound<'py, PyDict>,
    ) -> PyResult<()> {
        shielded(py, || {
            let keys = KeyBuffer::of_sequence(&keys)?;
            let targets = self.targets(py, &out, keys.len())?;
            self.copy_into(py, &keys.all(), &targets)
        })
    }

    /// `get_batch_into` of the keys at `indices` of `table`: what `stowage.torch.CacheDataset`
    /// calls, so that a batch's keys are found without a Python object per key. `IndexError`
    /// names an index out of range.
    fn _get_rows_into<'py>(
        &self,
        py: Python<'py>,
        table: &KeyTable,
        indices: Bound<'py, PyAny>,
        out: Bound<'py, PyDict>,
    ) -> PyResult<()> {
        shielded(py, || {
            let indices = key_table::indices_of(&indices)?;
            let targets = self.targets(py, &out, indices.len())?;
            let keys = indices.iter().map(|&i| table.key(i)).collect::<PyResult<Vec<&str>>>()?;
            self.copy_into(py, &keys, &targets)
        })
    }

    /// Adds the sample `sample` (field -> numpy array of exactly the schema's dtype, `bytes`,
    /// JSON `str` or object, or `None` for a nullable field) under `key`. Nothing is cast:
    /// a wrong dtype or shape is `SchemaMismatchError` naming the field and both sides. A key
    /// already in the cache is `UnsupportedError` (no overwrite).
    ///
    /// ```python
    /// cache.put("a", {"x": np.zeros(512, np.float32)})
    /// ```
    fn put(&self, py: Python<'_>, key: PyBackedStr, sample: Bound<'_, PyAny>) -> PyResult<()> {
        shielded(py, || {
            let sample = self.sample_from(py, &sample)?;
            let key: &str = &key;
            self.write(py, "put", |backend| backend.put(key, &sample))
        })
    }

    /// `put` for many samples: a mapping key -> sample, or an iterable of `(key, sample)`.
    fn put_batch(&self, py: Python<'_>, items: Bound<'_, PyAny>) -> PyResult<()> {
        shielded(py, || {
            let pairs = match items.cast::<PyDict>() {
                Ok(dict) => dict.items().into_any(),
                Err(_) => items.clone(),
            };
            for pair in pairs.try_iter()? {
                let pair = pair?;
                let (key, sample): (PyBackedStr, Bound<'_, PyAny>) =
                    pair.extract().map_err(|_| {
                        errors::invalid(
                            py,
                            format!("put_batch takes (key, sample) pairs, got {pair}"),
                        )
                    })?;
                self.put(py, key, sample)?;
            }
            Ok(())
        })
    }

    /// Makes every sample put so far durable: when it returns, a crash loses none of them.
    fn flush(&self, py: Python<'_>) -> PyResult<()> {
        shielded(py, || self.write(py, "flush", |backend| backend.flush()))
    }

    /// Flushes and marks the cache complete.
    fn finalize(&self, py: Python<'_>) -> PyResult<()> {
        shielded(py, || self.write(py, "finalize", |backend| backend.finalize()))
    }

    /// Checks the cache: `"structure"` (files, sizes, headers) or `"full"` (every checksum too).
    ///
    /// ```python
    /// report = cache.validate()
    /// assert report.clean, report.problems
    /// ```
    #[pyo3(signature = (level = "full"))]
    fn validate(&self, py: Python<'_>, level: &str) -> PyResult<ValidationReport> {
        shielded(py, || {
            let level = match level {
                "full" => ValidationLevel::Full,
                "structure" => ValidationLevel::Structure,
                other => {
                    return Err(errors::invalid(
                        py,
                        format!("level {other:?} is not \"full\" or \"structure\""),
                    ));
                }
            };
            let handle = self.handle(py)?;
            let report = py.detach(|| handle.read(|r| r.validate(level))).py(py)?;
            Ok(ValidationReport::from(report))
        })
    }

    /// Every key in the cache.
    fn keys(&self, py: Python<'_>) -> PyResult<Vec<String>> {
        shielded(py, || {
            let handle = self.handle(py)?;
            py.detach(|| handle.read(|r| r.keys())).py(py)
        })
    }

    fn __len__(&self, py: Python<'_>) -> PyResult<usize> {
        Ok(self.handle(py)?.read(|r| r.len()))
    }

    fn __contains__(&self, py: Python<'_>, key: Bound<'_, PyAny>) -> PyResult<bool> {
        let Ok(key) = keys::borrow(&key) else { return Ok(false) };
        let handle = self.handle(py)?;
        py.detach(|| handle.read(|r| r.contains(key))).py(py)
    }

    /// Releases the cache (idempotent). A writer's samples not flushed are not made durable.
    /// Arrays returned by `get` stay valid.
    fn close(&self, py: Python<'_>) {
        let taken = self.handle.write().unwrap_or_else(PoisonError::into_inner).take();
        py.detach(move || drop(taken));
    }

    fn __enter__(slf: Bound<'_, Self>) -> PyResult<Bound<'_, Self>> {
        slf.get().handle(slf.py())?;
        Ok(slf)
    }

    /// Flushes a writable cache when the block ended without an exception, then closes it.
    #[pyo3(signature = (exc_type, _exc, _traceback))]
    fn __exit__(
        &self,
        py: Python<'_>,
        exc_type: Option<Bound<'_, PyType>>,
        _exc: Option<Bound<'_, PyAny>>,
        _traceback: Option<Bound<'_, PyAny>>,
    ) -> PyResult<()> {
        let flushed = match (&exc_type, self.mode) {
            (None, "a" | "w") if !self.closed() => self.flush(py),
            _ => Ok(()),
        };
        self.close(py);
        flushed
    }

    /// A read handle pickles as the path it reopens (spawned workers); a writer does not pickle.
    fn __reduce__<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyTuple>> {
        if self.mode != "r" {
            return Err(errors::new_error(
                py,
                "UnsupportedError",
                &format!(
                    "a cache opened for writing ({}) cannot be pickled; pickle a read handle or its path",
                    self.path
                ),
                &[("path", Some(self.path.clone()))],
            ));
        }
        let reopen = PyModule::import(py, "stowage._stowage")?.getattr("_reopen")?;
        PyTuple::new(py, [reopen, (self.path.as_str(), self.checks).into_pyobject(py)?.into_any()])
    }

    fn __repr__(&self) -> String {
        let state =
            if self.closed() { "closed".to_owned() } else { format!("mode={:?}", self.mode) };
        format!("<stowage.Cache {} {:?} {state}>", self.backend, self.path)
    }

    /// The cache's path or URL, as it was opened.
    #[getter]
    fn path(&self) -> &str {
        &self.path
    }

    /// The backend's name (`memmap`, `arrow`, `npy`, `hdf5`, `remote`).
    #[getter]
    fn backend(&self) -> &str {
        self.backend
    }

    /// The format recognized (stowage's own or an original tool's).
    #[getter]
    fn format(&self) -> &str {
        self.format
    }

    /// `"r"`, `"a"` or `"w"`.
    #[getter]
    fn mode(&self) -> &str {
        self.mode
    }

    /// Whether every read is checksum-checked.
    #[getter]
    fn checks(&self) -> bool {
        self.checks
    }

    /// The schema, in the dict form `create` takes.
    #[getter]
    fn schema<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        schema_dict::to_dict(py, &self.schema)
    }

    /// The backend's capabilities, by name.
    #[getter]
    fn capabilities<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        crate::report::capabilities_dict(py, &self.capabilities)
    }

    /// Whether the cache was finalized.
    #[getter]
    fn finalized(&self, py: Python<'_>) -> PyResult<bool> {
        Ok(self.handle(py)?.read(|r| r.is_finalized()))
    }

    /// Whether `close` was called.
    #[getter]
    fn closed(&self) -> bool {
        self.handle.read().unwrap_or_else(PoisonError::into_inner).is_none()
    }
}

/// A checked destination of `get_batch_into`: a field, the shape of each of its rows, the
/// array's bytes.
struct Target {
    field: String,
    row_shape: Vec<usize>,
    destination: Destination,
}

impl Cache {
    /// Checks `array` as the destination of field `name` for `rows` samples.
    /// The checked destinations of `out` (field name -> array) for `rows` keys.
    fn targets(
        &self,
        py: Python<'_>,
        out: &Bound<'_, PyDict>,
        rows: usize,
    ) -> PyResult<Vec<Target>> {
        let mut targets = Vec::with_capacity(out.len());
        for (name, array) in out.iter() {
            let name: String = name.extract().map_err(|_| {
                errors::invalid(py, format!("out keys must be field names (str), got {name}"))
            })?;
            targets.push(self.target(py, &name, &array, rows)?);
        }
        Ok(targets)
    }

    /// Copies the samples of `keys` into `targets` without the GIL.
    fn copy_into(&self, py: Python<'_>, keys: &[&str], targets: &[Target]) -> PyResult<()> {
        let handle = self.handle(py)?;
        match py.detach(|| copy_batch(handle.as_ref(), keys, targets)) {
            Ok(()) => Ok(()),
            Err(BatchFailure::Stowage(error)) => Err(errors::to_py(py, error)),
            Err(BatchFailure::Missing(key)) => Err(errors::missing_key(&key)),
            Err(BatchFailure::Shape(detail)) => Err(errors::invalid(py, detail)),
        }
    }

    fn target(
        &self,
        py: Python<'_>,
        name: &str,
        array: &Bound<'_, PyAny>,
        rows: usize,
    ) -> PyResult<Target> {
        let bad = |detail: String| errors::invalid(py, format!("out[{name:?}]: {detail}"));
        let spec = self.schema.get(name).ok_or_else(|| {
            let fields: Vec<&str> = self.schema.fields.iter().map(|f| f.name.as_str()).collect();
            bad(format!("no such field (the fields are {})", fields.join(", ")))
        })?;
        let FieldKind::Tensor { dtype, .. } = spec.kind else {
            return Err(bad("a bytes or json field cannot be read into an array".into()));
        };
        let array = array
            .cast::<numpy::PyUntypedArray>()
            .map_err(|_| bad(format!("expected a numpy array, got {}", array.get_type())))?;
        use numpy::PyUntypedArrayMethods;
        crate::dtypes::matches(&array.dtype(), dtype)
            .map_err(|got| bad(format!("array dtype {got} != field dtype {}", dtype.name())))?;
        if array.shape().first() != Some(&rows) {
            return Err(bad(format!(
                "array shape {:?} does not start with the {rows} keys asked for",
                array.shape()
            )));
        }
        let destination = Destination::of(array)
            .ok_or_else(|| bad("the array must be writable and C-contiguous".into()))?;
        let row_shape = array.shape()[1..].to_vec();
        Ok(Target { field: name.to_owned(), row_shape, destination })
    }

    /// The sample a Python dict describes, converted field by field by the schema.
    fn sample_from(&self, py: Python<'_>, sample: &Bound<'_, PyAny>) -> PyResult<Sample> {
        let dict = sample.cast::<PyDict>().map_err(|_| {
            errors::invalid(
                py,
                format!("a sample is a dict of field -> value, got {}", sample.get_type()),
            )
        })?;
        let mut out = Sample::new();
        for (name, value) in dict.iter() {
            let name: String = name
                .extract()
                .map_err(|_| errors::invalid(py, format!("field names are str, got {name}")))?;
            let Some(spec) = self.schema.get(&name) else {
                let fields: Vec<&str> =
                    self.schema.fields.iter().map(|f| f.name.as_str()).collect();
                return Err(errors::schema_mismatch(
                    py,
                    &name,
                    format!("not in the schema (fields: {fields:?})"),
                ));
            };
            let converted = if value.is_none() {
                Value::Null
            } else {
                match &spec.kind {
                    FieldKind::Tensor { dtype, .. } => {
                        Value::Tensor(arrays::tensor_from(py, &name, &value, *dtype)?)
                    }
                    FieldKind::Bytes => Value::Bytes(bytes_of(py, &name, &value)?.into()),
                    FieldKind::Json { .. } => Value::Json(json_of(py, &value)?),
                }
            };
            out.insert(name, converted);
        }
        Ok(out)
    }
}

/// The bytes of a `bytes`, `bytearray` or `memoryview`.
fn bytes_of(py: Python<'_>, field: &str, value: &Bound<'_, PyAny>) -> PyResult<Vec<u8>> {
    if let Ok(bytes) = value.cast::<PyBytes>() {
        return Ok(bytes.as_bytes().to_vec());
    }
    let is_buffer = value.is_instance_of::<pyo3::types::PyByteArray>()
        || value.is_instance_of::<pyo3::types::PyMemoryView>();
    if is_buffer {
        let copied = py.get_type::<PyBytes>().call1((value,))?;
        return Ok(copied.cast::<PyBytes>()?.as_bytes().to_vec());
    }
    Err(errors::schema_mismatch(
        py,
        field,
        format!("a bytes field takes bytes, bytearray or memoryview, got {}", value.get_type()),
    ))
}

/// JSON text: a `str` as it is, anything else through `json.dumps`.
fn json_of(py: Python<'_>, value: &Bound<'_, PyAny>) -> PyResult<String> {
    if let Ok(text) = value.extract::<String>() {
        return Ok(text);
    }
    PyModule::import(py, "json")?.getattr("dumps")?.call1((value,))?.extract()
}

/// The dtype and shape every value shares when all are tensors of one shape.
fn stackable<'v>(values: &[&'v Value]) -> Option<(stowage_core::DType, &'v [usize])> {
    let first = values.first()?.as_tensor()?;
    let same = values.iter().all(|v| {
        v.as_tensor().is_some_and(|t| t.dtype() == first.dtype() && t.shape() == first.shape())
    });
    same.then(|| (first.dtype(), first.shape()))
}

/// Why `get_batch_into` stopped.
enum BatchFailure {
    Stowage(stowage_core::Error),
    Missing(String),
    Shape(String),
}

/// Reads `keys` and copies each target field's row of each sample into its array as soon as the
/// sample is read (no GIL held), while its bytes are in the CPU cache. Stops at the first missing
/// key, row of another shape, or read error.
fn copy_batch(handle: &Handle, keys: &[&str], targets: &[Target]) -> Result<(), BatchFailure> {
    let mut failure = None;
    let mut copy =
        |at: usize, sample: Option<Sample>| match copy_sample(keys[at], at, sample, targets) {
            Ok(()) => ControlFlow::Continue(()),
            Err(stop) => {
                failure = Some(stop);
                ControlFlow::Break(())
            }
        };
    handle.read(|r| r.get_batch_each(keys, &mut copy)).map_err(BatchFailure::Stowage)?;
    failure.map_or(Ok(()), Err)
}

/// Copies the rows of `sample` (the one of `key`, at position `at` of the batch) into `targets`.
fn copy_sample(
    key: &str,
    at: usize,
    sample: Option<Sample>,
    targets: &[Target],
) -> Result<(), BatchFailure> {
    let sample = sample.ok_or_else(|| BatchFailure::Missing(key.to_owned()))?;
    for target in targets {
        let tensor = sample.tensor(&target.field);
        let Some(tensor) = tensor.filter(|t| t.shape() == target.row_shape) else {
            let shape = tensor.map(|t| t.shape());
            return Err(BatchFailure::Shape(format!(
                "out[{:?}]: sample {key:?} has {} where the array's rows have shape {:?}",
                target.field,
                shape.map_or("no tensor (null)".to_owned(), |s| format!("shape {s:?}")),
                target.row_shape,
            )));
        };
        let bytes = tensor.bytes();
        // SAFETY: the caller holds the array. The row's shape is the array's row shape and the
        // array's dtype is the field's, so row `at` of `keys.len()` lies inside the array
        // (`write` asserts it too).
        unsafe { target.destination.write(at * bytes.len(), bytes) };
    }
    Ok(())
}
