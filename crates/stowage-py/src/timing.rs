//! The Rust side of the Python benchmark (`cargo xtask bench --suite python`): the same reads
//! timed without Python, on the same open handle, in the same process, so the Python overhead
//! is measured side by side.

use std::time::Instant;

use pyo3::prelude::*;
use pyo3::pybacked::PyBackedStr;

use crate::cache::Cache;
use crate::errors::ResultExt;

/// Seconds that `Reader::get` of every key of `keys`, in order, takes in Rust (each sample is
/// dropped; a missing key is an error). The GIL is released meanwhile.
#[pyfunction]
pub fn _time_rust_gets(py: Python<'_>, cache: &Cache, keys: Vec<PyBackedStr>) -> PyResult<f64> {
    let handle = cache.handle(py)?;
    let keys: Vec<&str> = keys.iter().map(|k| &**k).collect();
    py.detach(|| {
        let started = Instant::now();
        for key in &keys {
            let sample = handle.read(|r| r.get(key))?;
            if sample.is_none() {
                return Err(stowage_core::Error::NotFound { what: format!("key {key:?}") });
            }
        }
        Ok(started.elapsed().as_secs_f64())
    })
    .py(py)
}

/// Seconds that `Reader::get_batch` of each batch of `batches` takes in Rust (the samples are
/// dropped). The GIL is released meanwhile.
#[pyfunction]
pub fn _time_rust_get_batches(
    py: Python<'_>,
    cache: &Cache,
    batches: Vec<Vec<PyBackedStr>>,
) -> PyResult<f64> {
    let handle = cache.handle(py)?;
    let batches: Vec<Vec<&str>> =
        batches.iter().map(|b| b.iter().map(|k| &**k).collect()).collect();
    py.detach(|| {
        let started = Instant::now();
        for batch in &batches {
            let samples = handle.read(|r| r.get_batch(batch))?;
            if samples.iter().any(Option::is_none) {
                return Err(stowage_core::Error::NotFound { what: "a key of the batch".into() });
            }
        }
        Ok(started.elapsed().as_secs_f64())
    })
    .py(py)
}
