//! Sample keys from Python strings without a copy: CPython keeps a string's UTF-8 form in the
//! string object and lends it out (`PyUnicode_AsUTF8AndSize`, in the limited API since 3.10).

use pyo3::exceptions::PyTypeError;
use pyo3::ffi::Py_ssize_t;
use pyo3::prelude::*;
use pyo3::types::{PyList, PyString};

/// The key `key` (a `str`) as UTF-8, borrowed from the string object; `TypeError` for anything
/// else, `UnicodeEncodeError` for a string with lone surrogates.
pub fn borrow<'a>(key: &'a Bound<'_, PyAny>) -> PyResult<&'a str> {
    let Ok(text) = key.cast::<PyString>() else {
        return Err(PyTypeError::new_err(format!(
            "keys are str, got {}",
            key.get_type().name().map(|n| n.to_string()).unwrap_or_else(|_| "?".into())
        )));
    };
    text.to_str()
}

/// How many items ahead of the one being read a list's items are asked of the CPU
/// ([`each_item_prefetched`]): a batch's `str` (or `int`) objects lie scattered in memory, and
/// loading several at once overlaps their cache misses (a fifth of a microsecond each,
/// measured, when taken one after another).
const PREFETCH_AHEAD: usize = 8;

/// Keys copied into one Rust buffer: no reference to a Python object is held, so the keys stay
/// valid without the GIL whatever other threads do to the objects they came from.
#[derive(Debug, Default, Clone)]
pub struct KeyBuffer {
    text: String,
    /// Where each key ends in `text` (key `i` starts where key `i - 1` ends).
    ends: Vec<usize>,
}

impl KeyBuffer {
    /// The keys of `keys`, a `list`, `tuple` or other iterable of `str` (but not a `str`
    /// itself), in order. A list's items are read in place, the next ones' memory requested
    /// ahead of use.
    pub fn of_sequence(keys: &Bound<'_, PyAny>) -> PyResult<KeyBuffer> {
        if keys.is_instance_of::<PyString>() {
            return Err(PyTypeError::new_err("keys must be a sequence of str, not a str"));
        }
        let mut buffer = KeyBuffer::default();
        if let Ok(list) = keys.cast::<PyList>() {
            buffer.reserve(list.len());
            each_item_prefetched(list, |key| {
                buffer.push(borrow(&key)?);
                Ok(())
            })?;
        } else {
            for key in keys.try_iter()? {
                buffer.push(borrow(&key?)?);
            }
        }
        Ok(buffer)
    }

    /// Room for `count` more keys of about 16 bytes.
    fn reserve(&mut self, count: usize) {
        self.ends.reserve(count);
        self.text.reserve(16 * count);
    }

    /// Appends `key`.
    pub fn push(&mut self, key: &str) {
        self.text.push_str(key);
        self.ends.push(self.text.len());
    }

    /// Key `index`, if there is one.
    pub fn get(&self, index: usize) -> Option<&str> {
        let end = *self.ends.get(index)?;
        let start = if index == 0 { 0 } else { self.ends[index - 1] };
        Some(&self.text[start..end])
    }

    /// How many keys there are.
    pub fn len(&self) -> usize {
        self.ends.len()
    }

    /// Whether there are no keys.
    pub fn is_empty(&self) -> bool {
        self.ends.is_empty()
    }

    /// Every key, in order.
    pub fn all(&self) -> Vec<&str> {
        let mut start = 0;
        self.ends
            .iter()
            .map(|&end| {
                let key = &self.text[start..end];
                start = end;
                key
            })
            .collect()
    }
}

/// Calls `each` on every item of `list` in order, the memory of the item `PREFETCH_AHEAD`
/// places ahead requested first.
pub fn each_item_prefetched(
    list: &Bound<'_, PyList>,
    mut each: impl FnMut(Bound<'_, PyAny>) -> PyResult<()>,
) -> PyResult<()> {
    let count = list.len();
    for index in 0..count {
        if index + PREFETCH_AHEAD < count {
            prefetch_object(list, index + PREFETCH_AHEAD);
        }
        each(list.get_item(index)?)?;
    }
    Ok(())
}

/// Asks the CPU to load the first two cache lines of item `index` of `list`, if it has one (a
/// compact `str` keeps its characters right after its header).
fn prefetch_object(list: &Bound<'_, PyList>, index: usize) {
    // The list may have shrunk since its length was read (an item's `__index__` is Python code),
    // and an index out of range would leave an IndexError set.
    if index >= list.len() {
        return;
    }
    // SAFETY: `index` is in range and the GIL is held; the borrowed pointer is only handed to
    // a prefetch hint, never dereferenced.
    let item = unsafe { pyo3::ffi::PyList_GetItem(list.as_ptr(), index as Py_ssize_t) };
    let at = item.cast::<u8>();
    stowage_core::prefetch::prefetch_line(at);
    stowage_core::prefetch::prefetch_line(at.wrapping_add(64));
}
