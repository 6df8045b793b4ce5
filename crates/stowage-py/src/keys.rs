//! Sample keys from Python strings without a copy.
//!
//! PyO3's abi3-py39 build turns each `str` into a new UTF-8 `bytes` object (the limited API of
//! 3.9 has no borrowed form), which cost a quarter of a microsecond per `get`. CPython caches a
//! string's UTF-8 form in the string object and hands it out with `PyUnicode_AsUTF8AndSize`:
//! part of the limited API since 3.10 and exported by every CPython 3 (3.9 included), so the
//! abi3 wheel calls it directly.

use std::ffi::c_char;

use pyo3::exceptions::PyTypeError;
use pyo3::ffi::{Py_ssize_t, PyObject};
use pyo3::prelude::*;
use pyo3::types::PyString;

// SAFETY (of the declaration): the signature of CPython's function, which every CPython 3
// exports.
unsafe extern "C" {
    fn PyUnicode_AsUTF8AndSize(unicode: *mut PyObject, size: *mut Py_ssize_t) -> *const c_char;
}

/// The key `key` (a `str`) as UTF-8, borrowed from the string object; `TypeError` for anything
/// else, `UnicodeEncodeError` for a string with lone surrogates.
pub fn borrow<'a>(key: &'a Bound<'_, PyAny>) -> PyResult<&'a str> {
    let Ok(text) = key.cast::<PyString>() else {
        return Err(PyTypeError::new_err(format!(
            "keys are str, got {}",
            key.get_type().name().map(|n| n.to_string()).unwrap_or_else(|_| "?".into())
        )));
    };
    let mut size: Py_ssize_t = 0;
    // SAFETY: `text` is a live str (checked above); the returned buffer is owned by it and lives
    // as long as it, which outlives the borrow `'a`; CPython guarantees it is valid UTF-8.
    unsafe {
        let data = PyUnicode_AsUTF8AndSize(text.as_ptr(), &mut size);
        if data.is_null() {
            return Err(PyErr::fetch(key.py()));
        }
        let bytes = std::slice::from_raw_parts(data.cast::<u8>(), size as usize);
        Ok(std::str::from_utf8_unchecked(bytes))
    }
}

/// Every key of `keys` (a sequence of `str`), borrowed as [`borrow`] does.
pub fn borrow_all<'a>(keys: &'a [Bound<'_, PyAny>]) -> PyResult<Vec<&'a str>> {
    keys.iter().map(borrow).collect()
}
