//! Shape arithmetic and Python-style shape display, shared by tensors, schemas and error messages.

use crate::{Error, Result};

/// Number of elements of `shape` (1 for a 0-d shape), or an error when the product overflows `usize`.
///
/// ```
/// assert_eq!(stowage_core::shape::element_count(&[2, 3]).unwrap(), 6);
/// assert_eq!(stowage_core::shape::element_count(&[]).unwrap(), 1);
/// assert_eq!(stowage_core::shape::element_count(&[4, 0]).unwrap(), 0);
/// assert!(stowage_core::shape::element_count(&[usize::MAX, 2]).is_err());
/// ```
pub fn element_count(shape: &[usize]) -> Result<usize> {
    shape.iter().try_fold(1usize, |acc, &d| acc.checked_mul(d)).ok_or_else(|| {
        Error::invalid(format!("shape {} has more elements than fit in memory", display(shape)))
    })
}

/// Number of bytes of a C-order array of `shape` with `item_size`-byte elements, overflow-checked.
///
/// ```
/// assert_eq!(stowage_core::shape::byte_count(&[2, 3], 4).unwrap(), 24);
/// ```
pub fn byte_count(shape: &[usize], item_size: usize) -> Result<usize> {
    element_count(shape)?.checked_mul(item_size).ok_or_else(|| {
        Error::invalid(format!("shape {} of {item_size}-byte elements overflows", display(shape)))
    })
}

/// Formats a shape as Python prints a tuple: `()`, `(5,)`, `(2, 3)`.
///
/// ```
/// use stowage_core::shape::display;
/// assert_eq!(display(&[]), "()");
/// assert_eq!(display(&[5]), "(5,)");
/// assert_eq!(display(&[2, 3]), "(2, 3)");
/// ```
pub fn display(shape: &[usize]) -> String {
    match shape {
        [] => "()".to_owned(),
        [d] => format!("({d},)"),
        _ => {
            let dims: Vec<String> = shape.iter().map(usize::to_string).collect();
            format!("({})", dims.join(", "))
        }
    }
}
