//! stowage's dtypes as numpy dtypes, and back.
//!
//! Each has one numpy descriptor, made once per interpreter. numpy has no bfloat16: its arrays
//! are `uint16` whose `dtype.metadata` is `{"stowage_dtype": "bfloat16"}`, so the bits come back
//! unchanged and the caller can tell them from plain `uint16`.

use numpy::{PyArrayDescr, PyArrayDescrMethods};
use pyo3::prelude::*;
use pyo3::sync::PyOnceLock;
use pyo3::types::PyDict;
use stowage_core::DType;

/// The `dtype.metadata` key that names the stowage dtype of a `uint16` array holding bfloat16.
pub const METADATA_KEY: &str = "stowage_dtype";

/// The numpy descriptors of [`DType::ALL`], in that order.
static DESCRIPTORS: PyOnceLock<Vec<Py<PyArrayDescr>>> = PyOnceLock::new();

/// The numpy dtype of `dtype` (for bfloat16: `uint16` with [`METADATA_KEY`] metadata).
pub fn descriptor<'py>(py: Python<'py>, dtype: DType) -> PyResult<Bound<'py, PyArrayDescr>> {
    let all = DESCRIPTORS.get_or_try_init(py, || {
        DType::ALL.iter().map(|&d| make_descriptor(py, d).map(Bound::unbind)).collect()
    })?;
    let index = DType::ALL.iter().position(|&d| d == dtype).expect("DType::ALL lists every dtype");
    Ok(all[index].bind(py).clone())
}

fn make_descriptor(py: Python<'_>, dtype: DType) -> PyResult<Bound<'_, PyArrayDescr>> {
    if dtype == DType::BF16 {
        let numpy = PyModule::import(py, "numpy")?;
        let metadata = PyDict::new(py);
        metadata.set_item(METADATA_KEY, dtype.name())?;
        let kwargs = PyDict::new(py);
        kwargs.set_item("metadata", metadata)?;
        let descr = numpy.getattr("dtype")?.call(("<u2",), Some(&kwargs))?;
        return Ok(descr.cast_into::<PyArrayDescr>()?);
    }
    let name = match dtype {
        DType::Bool => "bool",
        other => other.numpy_descr().expect("every dtype but bfloat16 has a numpy descr"),
    };
    PyArrayDescr::new(py, name)
}

/// The stowage dtype a numpy array of `descr` holds for a field of dtype `want`: `Ok(want)` when
/// they agree exactly (a `uint16` array is taken for a bfloat16 field: its bits), else the numpy
/// dtype's own name for the message.
pub fn matches(descr: &Bound<'_, PyArrayDescr>, want: DType) -> Result<(), String> {
    let got = classify(descr);
    let fits = match got {
        Some(DType::U16) => want == DType::U16 || want == DType::BF16,
        Some(got) => got == want,
        None => false,
    };
    if fits { Ok(()) } else { Err(describe(descr)) }
}

/// The stowage dtype of a native-order (or one-byte) numpy dtype; `None` for anything else
/// (big-endian, structured, object, strings, complex, datetimes).
pub fn classify(descr: &Bound<'_, PyArrayDescr>) -> Option<DType> {
    if descr.has_fields() || descr.has_subarray() || descr.is_native_byteorder() == Some(false) {
        return None;
    }
    let size = descr.itemsize();
    Some(match (descr.kind(), size) {
        (b'b', 1) => DType::Bool,
        (b'u', 1) => DType::U8,
        (b'u', 2) => DType::U16,
        (b'u', 4) => DType::U32,
        (b'u', 8) => DType::U64,
        (b'i', 1) => DType::I8,
        (b'i', 2) => DType::I16,
        (b'i', 4) => DType::I32,
        (b'i', 8) => DType::I64,
        (b'f', 2) => DType::F16,
        (b'f', 4) => DType::F32,
        (b'f', 8) => DType::F64,
        _ => return None,
    })
}

/// A numpy dtype as a message shows it: `float64`, or its `str` (`>f4`) when stowage has no
/// name for it.
pub fn describe(descr: &Bound<'_, PyArrayDescr>) -> String {
    match classify(descr) {
        Some(dtype) => dtype.name().to_owned(),
        None => descr
            .getattr("str")
            .and_then(|s| s.extract::<String>())
            .unwrap_or_else(|_| "an unknown dtype".into()),
    }
}
