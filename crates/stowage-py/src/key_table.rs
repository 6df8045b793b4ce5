//! `stowage._stowage.KeyTable`: a dataset's keys held in Rust, read by index.
//!
//! A DataLoader asks for samples by index. Turning 256 random indices into 256 `str` objects
//! touches 256 scattered Python objects (a cache miss each, a quarter of a microsecond per
//! sample measured); a `KeyTable` keeps every key in one buffer, so a batch's keys are found
//! without touching Python objects at all ([`crate::cache::Cache`]'s `_get_rows_into`).

use pyo3::exceptions::PyIndexError;
use pyo3::prelude::*;

use crate::keys;

/// The keys of a dataset, in order, in one buffer.
///
/// ```python
/// table = stowage._stowage.KeyTable(["a", "b"])
/// len(table)   # 2
/// table[1]     # "b"
/// ```
#[pyclass(frozen, module = "stowage._stowage")]
pub struct KeyTable {
    text: String,
    /// Where each key ends in `text` (key `i` starts where key `i - 1` ends).
    ends: Vec<usize>,
}

impl KeyTable {
    /// Key `index`; `IndexError` naming the index and the table's length when out of range.
    pub fn key(&self, index: usize) -> PyResult<&str> {
        let end = *self.ends.get(index).ok_or_else(|| {
            PyIndexError::new_err(format!(
                "index {index} is out of range for {} samples",
                self.ends.len()
            ))
        })?;
        let start = if index == 0 { 0 } else { self.ends[index - 1] };
        Ok(&self.text[start..end])
    }
}

#[pymethods]
impl KeyTable {
    /// A table of `keys` (an iterable of `str`), in their order.
    #[new]
    fn new(keys: &Bound<'_, PyAny>) -> PyResult<KeyTable> {
        let mut text = String::new();
        let mut ends = Vec::new();
        for key in keys.try_iter()? {
            let key = key?;
            text.push_str(keys::borrow(&key)?);
            ends.push(text.len());
        }
        Ok(KeyTable { text, ends })
    }

    fn __len__(&self) -> usize {
        self.ends.len()
    }

    /// Key `index` (no negative indices).
    fn __getitem__(&self, index: usize) -> PyResult<&str> {
        self.key(index)
    }
}
