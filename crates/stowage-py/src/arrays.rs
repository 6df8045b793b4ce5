//! numpy arrays over stowage tensors, and stowage tensors from numpy arrays.

use std::ffi::{CStr, c_void};
use std::ptr;

use numpy::npyffi::{self, NPY_ARRAY_WRITEABLE, npy_intp};
use numpy::{PY_ARRAY_API, PyArrayDescrMethods, PyUntypedArray, PyUntypedArrayMethods};
use pyo3::prelude::*;
use pyo3::types::PyCapsule;
use stowage_core::{DType, Tensor};

use crate::dtypes;
use crate::errors;

/// The name of the capsule that owns the bytes a read-only array shows (the array's `base`).
/// The capsule holds the tensor's reference-counted bytes, which hold the memory map (or the
/// buffer) they come from, so the array stays valid after its cache is closed or dropped. A
/// capsule, not a class: pyo3's classes are tracked by the garbage collector, and one per `get`
/// made the collector run every few hundred reads.
const PAGES: &CStr = c"stowage.pages";

/// A read-only numpy array of `tensor`'s dtype and shape over its bytes, without a copy; bytes
/// not aligned for their dtype (a row at an odd offset of a fetched object) are copied into an
/// aligned array instead, as numpy and torch expect aligned data.
pub fn read_only<'py>(py: Python<'py>, tensor: &Tensor) -> PyResult<Bound<'py, PyAny>> {
    let bytes = tensor.to_shared_bytes();
    if !(bytes.as_ptr() as usize).is_multiple_of(tensor.dtype().item_size()) {
        let array = empty(py, tensor.dtype(), tensor.shape())?;
        let destination =
            Destination::of(&array).expect("a new array is writable and C-contiguous");
        // SAFETY: the new array holds exactly the tensor's byte count and is alive here; its
        // flags are cleared while no other reference to it exists.
        unsafe {
            destination.write(0, &bytes);
            (*array.as_array_ptr()).fields.flags &= !NPY_ARRAY_WRITEABLE;
        }
        return Ok(array.into_any());
    }
    let data = bytes.as_ptr() as *mut c_void;
    let owner = PyCapsule::new_with_value(py, bytes, PAGES)?;
    // SAFETY: `data` points at the tensor's bytes, exactly the shape's byte count times the
    // dtype's size (a `Tensor` invariant); they stay alive and unchanged as long as `owner`,
    // which becomes the array's base (the reference is moved into numpy).
    unsafe {
        let array = new_array(py, tensor.dtype(), tensor.shape(), data)?;
        if PY_ARRAY_API.PyArray_SetBaseObject(
            py,
            array.as_ptr() as *mut npyffi::PyArrayObject,
            owner.into_ptr(),
        ) != 0
        {
            return Err(PyErr::fetch(py));
        }
        Ok(array.into_any())
    }
}

/// A new writable, C-contiguous numpy array of `dtype` and `shape` (contents undefined).
pub fn empty<'py>(
    py: Python<'py>,
    dtype: DType,
    shape: &[usize],
) -> PyResult<Bound<'py, PyUntypedArray>> {
    // SAFETY: a null data pointer makes numpy allocate the array's memory itself.
    unsafe { new_array(py, dtype, shape, ptr::null_mut()) }
}

/// `PyArray_NewFromDescr` of `dtype` and `shape`, C order: over `data` (read-only, flags 0), or
/// over memory numpy allocates (writable) when `data` is null.
///
/// # Safety
/// A non-null `data` must point at the shape's byte count and outlive the array (the caller
/// sets its base).
unsafe fn new_array<'py>(
    py: Python<'py>,
    dtype: DType,
    shape: &[usize],
    data: *mut c_void,
) -> PyResult<Bound<'py, PyUntypedArray>> {
    let descr = dtypes::descriptor(py, dtype)?;
    let mut dims = Dims::of(py, shape)?;
    // SAFETY: as the caller promises for `data`; NewFromDescr steals the descriptor reference
    // `into_dtype_ptr` gives.
    unsafe {
        let array = PY_ARRAY_API.PyArray_NewFromDescr(
            py,
            npyffi::get_type_object(py, npyffi::NpyTypes::PyArray_Type),
            descr.into_dtype_ptr(),
            dims.rank(),
            dims.as_mut_ptr(),
            ptr::null_mut(),
            data,
            0,
            ptr::null_mut(),
        );
        if array.is_null() {
            return Err(PyErr::fetch(py));
        }
        Ok(Bound::from_owned_ptr(py, array).cast_into_unchecked())
    }
}

/// An array's dimensions as numpy takes them, on the stack for the usual ranks (a `get` makes
/// one per field).
enum Dims {
    Inline { rank: usize, dims: [npy_intp; Dims::INLINE] },
    Heap(Vec<npy_intp>),
}

impl Dims {
    const INLINE: usize = 8;

    fn of(py: Python<'_>, shape: &[usize]) -> PyResult<Dims> {
        let dim = |d: usize| {
            npy_intp::try_from(d)
                .map_err(|_| errors::invalid(py, format!("dimension {d} is too large for numpy")))
        };
        if shape.len() <= Dims::INLINE {
            let mut dims = [0; Dims::INLINE];
            for (slot, &d) in dims.iter_mut().zip(shape) {
                *slot = dim(d)?;
            }
            Ok(Dims::Inline { rank: shape.len(), dims })
        } else {
            Ok(Dims::Heap(shape.iter().map(|&d| dim(d)).collect::<PyResult<_>>()?))
        }
    }

    fn rank(&self) -> i32 {
        // A shape's rank is far below i32::MAX (numpy allows 64).
        match self {
            Dims::Inline { rank, .. } => *rank as i32,
            Dims::Heap(dims) => dims.len() as i32,
        }
    }

    fn as_mut_ptr(&mut self) -> *mut npy_intp {
        match self {
            Dims::Inline { dims, .. } => dims.as_mut_ptr(),
            Dims::Heap(dims) => dims.as_mut_ptr(),
        }
    }
}

/// Where a caller-owned array's bytes are: checked writable and C-contiguous, so a copy into
/// it can run without the GIL.
#[derive(Clone, Copy)]
pub struct Destination {
    data: *mut u8,
    len: usize,
}

// SAFETY: the pointer is only written while the array it came from is kept alive by the caller
// (the `Bound` outlives the GIL-free section that writes through it).
unsafe impl Send for Destination {}
// SAFETY: as for `Send`; concurrent writers to one destination are the caller's to avoid, as
// with any numpy array shared between threads.
unsafe impl Sync for Destination {}

impl Destination {
    /// The bytes of `array`: `None` unless it is writable and C-contiguous.
    pub fn of(array: &Bound<'_, PyUntypedArray>) -> Option<Destination> {
        let raw = array.as_array_ptr();
        // SAFETY: `raw` is a live ndarray (the `Bound` holds it); reading its flags and data
        // pointer is what numpy's own accessors do.
        let (flags, data) = unsafe { ((*raw).fields.flags, (*raw).fields.data) };
        if flags & NPY_ARRAY_WRITEABLE == 0 || !array.is_c_contiguous() {
            return None;
        }
        let len = array.len_elements() * array.dtype().itemsize();
        Some(Destination { data: data as *mut u8, len })
    }

    /// The destination's length in bytes.
    pub fn byte_len(&self) -> usize {
        self.len
    }

    /// Copies `bytes` to offset `at`.
    ///
    /// # Safety
    /// The array this came from must be alive and not resized; `at + bytes.len() <= len`.
    pub unsafe fn write(&self, at: usize, bytes: &[u8]) {
        assert!(
            at + bytes.len() <= self.len,
            "copy of {} bytes at {at} past {}",
            bytes.len(),
            self.len
        );
        // SAFETY: in bounds (asserted); the caller keeps the array alive; the source is a
        // tensor's bytes, never the array itself.
        unsafe { ptr::copy_nonoverlapping(bytes.as_ptr(), self.data.add(at), bytes.len()) }
    }
}

/// The number of elements of an array.
trait ElementCount {
    fn len_elements(&self) -> usize;
}

impl ElementCount for Bound<'_, PyUntypedArray> {
    fn len_elements(&self) -> usize {
        self.shape().iter().product()
    }
}

/// The tensor of field `field` (dtype `dtype`) from a Python value: a numpy array of exactly that
/// dtype (a `uint16` array for bfloat16). Nothing is cast; a non-contiguous array is copied in C
/// order. Errors are `SchemaMismatchError` naming the field and both sides.
pub fn tensor_from(
    py: Python<'_>,
    field: &str,
    value: &Bound<'_, PyAny>,
    dtype: DType,
) -> PyResult<Tensor> {
    let array = value.cast::<PyUntypedArray>().map_err(|_| {
        let got = value.get_type().name().map(|n| n.to_string()).unwrap_or_else(|_| "?".into());
        errors::schema_mismatch(
            py,
            field,
            format!("expected a numpy array of {}, got a {got} (wrap it with numpy.asarray(..., dtype=...))", dtype.name()),
        )
    })?;
    let descr = array.dtype();
    dtypes::matches(&descr, dtype).map_err(|got| {
        errors::schema_mismatch(
            py,
            field,
            format!("array dtype {got} != schema dtype {} (stowage does not cast)", dtype.name()),
        )
    })?;
    let shape = array.shape().to_vec();
    let contiguous;
    let source = if array.is_c_contiguous() {
        array
    } else {
        let numpy = PyModule::import(py, "numpy")?;
        contiguous =
            numpy.getattr("ascontiguousarray")?.call1((array,))?.cast_into::<PyUntypedArray>()?;
        &contiguous
    };
    let len = shape.iter().product::<usize>() * dtype.item_size();
    let raw = source.as_array_ptr();
    // SAFETY: `source` is a live C-contiguous array of `len` bytes (its dtype's size equals the
    // stowage dtype's, checked above); the bytes are copied before the GIL is released.
    let bytes = unsafe {
        let data = (*raw).fields.data as *const u8;
        if len == 0 { Vec::new() } else { std::slice::from_raw_parts(data, len).to_vec() }
    };
    Tensor::new(dtype, shape, bytes).map_err(|e| match e {
        stowage_core::Error::InvalidArgument { detail } => {
            errors::schema_mismatch(py, field, detail)
        }
        other => errors::to_py(py, other),
    })
}
