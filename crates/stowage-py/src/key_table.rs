//! `stowage._stowage.KeyTable`: a dataset's keys held in Rust, read by index.
//!
//! A DataLoader asks for samples by index. Turning 256 random indices into 256 `str` objects
//! touches 256 scattered Python objects (a cache miss each, a quarter of a microsecond per
//! sample measured); a `KeyTable` keeps every key in one buffer, so a batch's keys are found
//! without touching Python objects at all ([`crate::cache::Cache`]'s `_get_rows_into`).

use pyo3::exceptions::PyIndexError;
use pyo3::prelude::*;

use pyo3::types::PyList;

use crate::keys::{KeyBuffer, each_item_prefetched};

/// The keys of a dataset, in order, in one buffer.
///
/// ```python
/// table = stowage._stowage.KeyTable(["a", "b"])
/// len(table)   # 2
/// table[1]     # "b"
/// ```
#[pyclass(frozen, module = "stowage._stowage")]
pub struct KeyTable {
    keys: KeyBuffer,
}

impl KeyTable {
    /// Key `index`; `IndexError` naming the index and the table's length when out of range.
    pub fn key(&self, index: usize) -> PyResult<&str> {
        self.keys.get(index).ok_or_else(|| {
            PyIndexError::new_err(format!(
                "index {index} is out of range for {} samples",
                self.keys.len()
            ))
        })
    }
}

#[pymethods]
impl KeyTable {
    /// A table of `keys` (an iterable of `str`), in their order.
    #[new]
    fn new(keys: &Bound<'_, PyAny>) -> PyResult<KeyTable> {
        Ok(KeyTable { keys: KeyBuffer::of_sequence(keys)? })
    }

    fn __len__(&self) -> usize {
        self.keys.len()
    }

    /// Key `index` (no negative indices).
    fn __getitem__(&self, index: usize) -> PyResult<&str> {
        self.key(index)
    }
}

/// The indices of a batch (a sequence of non-negative `int`), as `Vec<usize>` extraction gives
/// them (`OverflowError` for a negative one, `TypeError` for a non-integer); a list's items are
/// read with the next ones' memory requested ahead of use.
pub fn indices_of(indices: &Bound<'_, PyAny>) -> PyResult<Vec<usize>> {
    let Ok(list) = indices.cast::<PyList>() else {
        return indices.extract();
    };
    let mut out = Vec::with_capacity(list.len());
    each_item_prefetched(list, |index| {
        out.push(index.extract()?);
        Ok(())
    })?;
    Ok(out)
}
