//! Tensors: a dtype, a shape and C-order little-endian bytes, possibly borrowed from a memory map.

use crate::{DType, Error, Result, shape};
use bytes::Bytes;
use std::fmt;

mod sealed {
    pub trait Sealed {}
}

/// A Rust element type with a fixed stowage [`DType`]: `u8`...`u64`, `i8`...`i64`, `f32`, `f64`,
/// [`half::f16`] and [`half::bf16`]. `bool` is handled by [`Tensor::from_bools`] / [`Tensor::to_bools`]
/// because not every byte is a valid `bool`.
pub trait Element: bytemuck::Pod + sealed::Sealed {
    /// The dtype of this element type.
    const DTYPE: DType;
}

macro_rules! element {
    ($($t:ty => $d:ident),* $(,)?) => {$(
        impl sealed::Sealed for $t {}
        impl Element for $t { const DTYPE: DType = DType::$d; }
    )*};
}
element!(u8 => U8, u16 => U16, u32 => U32, u64 => U64, i8 => I8, i16 => I16, i32 => I32, i64 => I64,
         half::f16 => F16, half::bf16 => BF16, f32 => F32, f64 => F64);

/// An n-dimensional array: dtype + shape + C-order little-endian bytes.
///
/// 0-d tensors (shape `[]`, one element) and zero-length dimensions are allowed. The bytes are a
/// reference-counted [`Bytes`]: a tensor returned by a backend's `get` may share the pages of a
/// memory map (zero-copy, see [`Tensor::is_zero_copy`]); the map stays alive as long as the tensor.
///
/// ```
/// use stowage_core::{DType, Tensor};
/// let t = Tensor::from_slice(&[2, 2], &[1.0f32, 2.0, 3.0, 4.0]).unwrap();
/// assert_eq!(t.dtype(), DType::F32);
/// assert_eq!(t.shape(), &[2, 2]);
/// assert_eq!(t.to_vec::<f32>().unwrap(), vec![1.0, 2.0, 3.0, 4.0]);
/// assert!(Tensor::from_slice(&[3], &[1.0f32, 2.0]).is_err()); // 2 elements do not fill shape (3,)
/// ```
#[derive(Clone)]
pub struct Tensor {
    dtype: DType,
    shape: Vec<usize>,
    data: Bytes,
    zero_copy: bool,
}

impl Tensor {
    /// Builds a tensor from raw little-endian bytes, checking that their length matches the shape and,
    /// for `bool`, that every byte is 0 or 1.
    ///
    /// ```
    /// use stowage_core::{DType, Tensor};
    /// let t = Tensor::new(DType::U8, vec![3], vec![1u8, 2, 3]).unwrap();
    /// assert_eq!(t.bytes(), &[1, 2, 3]);
    /// assert!(Tensor::new(DType::Bool, vec![1], vec![2u8]).is_err());
    /// ```
    pub fn new(dtype: DType, shape: Vec<usize>, data: impl Into<Bytes>) -> Result<Tensor> {
        Self::build(dtype, shape, data.into(), false)
    }

    /// Like [`Tensor::new`], for bytes that share a memory map or another reader-owned buffer; the
    /// tensor then reports [`Tensor::is_zero_copy`]. Backends use it to hand out mapped bytes.
    ///
    /// ```
    /// use stowage_core::{DType, Tensor};
    /// let page = bytes::Bytes::from_static(&[0u8; 8]);
    /// let t = Tensor::shared(DType::F32, vec![2], page.slice(0..8)).unwrap();
    /// assert!(t.is_zero_copy());
    /// ```
    pub fn shared(dtype: DType, shape: Vec<usize>, data: Bytes) -> Result<Tensor> {
        Self::build(dtype, shape, data, true)
    }

    fn build(dtype: DType, shape: Vec<usize>, data: Bytes, zero_copy: bool) -> Result<Tensor> {
        let expected = shape::byte_count(&shape, dtype.item_size())?;
        if data.len() != expected {
            return Err(Error::invalid(format!(
                "{dtype} tensor of shape {} needs {expected} bytes, got {}",
                shape::display(&shape),
                data.len()
            )));
        }
        if dtype == DType::Bool
            && let Some(pos) = data.iter().position(|&b| b > 1)
        {
            return Err(Error::invalid(format!(
                "bool tensor byte {pos} is {}, not 0 or 1",
                data[pos]
            )));
        }
        Ok(Tensor { dtype, shape, data, zero_copy })
    }

    /// Copies a typed slice into a new tensor of `shape`.
    pub fn from_slice<T: Element>(shape: &[usize], values: &[T]) -> Result<Tensor> {
        Self::new(T::DTYPE, shape.to_vec(), bytemuck::cast_slice::<T, u8>(values).to_vec())
    }

    /// A 0-d tensor holding one value.
    ///
    /// ```
    /// let t = stowage_core::Tensor::scalar(7i64);
    /// assert_eq!(t.shape(), &[] as &[usize]);
    /// assert_eq!(t.to_vec::<i64>().unwrap(), vec![7]);
    /// ```
    pub fn scalar<T: Element>(value: T) -> Tensor {
        Self::from_slice(&[], &[value]).expect("one element always fits a 0-d shape")
    }

    /// Builds a `bool` tensor.
    ///
    /// ```
    /// let t = stowage_core::Tensor::from_bools(&[2], &[true, false]).unwrap();
    /// assert_eq!(t.to_bools().unwrap(), vec![true, false]);
    /// ```
    pub fn from_bools(shape: &[usize], values: &[bool]) -> Result<Tensor> {
        let bytes: Vec<u8> = values.iter().map(|&b| u8::from(b)).collect();
        Self::new(DType::Bool, shape.to_vec(), bytes)
    }

    /// A tensor of `shape` filled with zero bytes.
    pub fn zeros(dtype: DType, shape: &[usize]) -> Result<Tensor> {
        let len = shape::byte_count(shape, dtype.item_size())?;
        Self::new(dtype, shape.to_vec(), vec![0u8; len])
    }

    /// The element type.
    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// The shape; empty for a 0-d tensor.
    pub fn shape(&self) -> &[usize] {
        &self.shape
    }

    /// Number of elements.
    pub fn element_count(&self) -> usize {
        self.data.len() / self.dtype.item_size()
    }

    /// The raw C-order little-endian bytes.
    pub fn bytes(&self) -> &[u8] {
        &self.data
    }

    /// The bytes as a cheap reference-counted handle (no copy).
    pub fn to_shared_bytes(&self) -> Bytes {
        self.data.clone()
    }

    /// Whether the bytes are shared with a memory map or another reader-owned buffer instead of copied.
    pub fn is_zero_copy(&self) -> bool {
        self.zero_copy
    }

    /// Returns a copy whose bytes are owned (not shared with a memory map).
    pub fn to_owned_copy(&self) -> Tensor {
        Tensor { data: Bytes::from(self.data.to_vec()), zero_copy: false, ..self.clone() }
    }

    fn check_dtype<T: Element>(&self) -> Result<()> {
        if T::DTYPE != self.dtype {
            return Err(Error::invalid(format!(
                "tensor holds {}, asked for {}",
                self.dtype,
                T::DTYPE
            )));
        }
        Ok(())
    }

    /// Borrows the elements as `&[T]` without copying. Fails when `T` is not the tensor's dtype or
    /// when the bytes are not aligned for `T` (possible for mapped bytes at odd offsets); use
    /// [`Tensor::to_vec`] then.
    pub fn view<T: Element>(&self) -> Result<&[T]> {
        self.check_dtype::<T>()?;
        bytemuck::try_cast_slice(&self.data).map_err(|e| {
            Error::invalid(format!(
                "cannot view {} tensor bytes as &[{}]: {e}",
                self.dtype,
                T::DTYPE
            ))
        })
    }

    /// Copies the elements into a `Vec<T>`; works at any alignment.
    pub fn to_vec<T: Element>(&self) -> Result<Vec<T>> {
        self.check_dtype::<T>()?;
        Ok(bytemuck::pod_collect_to_vec(&self.data))
    }

    /// Copies a `bool` tensor's elements out.
    pub fn to_bools(&self) -> Result<Vec<bool>> {
        if self.dtype != DType::Bool {
            return Err(Error::invalid(format!("tensor holds {}, asked for bool", self.dtype)));
        }
        Ok(self.data.iter().map(|&b| b != 0).collect())
    }
}

/// Tensors are equal when dtype, shape and bytes are; where the bytes live (copied or shared with a
/// memory map) does not matter.
impl PartialEq for Tensor {
    fn eq(&self, other: &Tensor) -> bool {
        self.dtype == other.dtype && self.shape == other.shape && self.data == other.data
    }
}

impl Eq for Tensor {}

impl fmt::Debug for Tensor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "Tensor({} {}, {} bytes",
            self.dtype,
            shape::display(&self.shape),
            self.data.len()
        )?;
        if self.zero_copy {
            f.write_str(", zero-copy")?;
        }
        f.write_str(")")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zero_length_dimensions_hold_no_bytes() {
        let t = Tensor::zeros(DType::F64, &[0, 3]).unwrap();
        assert_eq!(t.bytes().len(), 0);
        assert_eq!(t.element_count(), 0);
    }

    #[test]
    fn wrong_typed_access_is_an_error() {
        let t = Tensor::scalar(1.5f32);
        assert!(t.to_vec::<f64>().is_err());
        assert!(t.view::<i32>().is_err());
        assert!(t.to_bools().is_err());
    }

    #[test]
    fn half_types_round_trip() {
        let v = [half::bf16::from_f32(1.5), half::bf16::from_f32(-2.0)];
        let t = Tensor::from_slice(&[2], &v).unwrap();
        assert_eq!(t.dtype(), DType::BF16);
        assert_eq!(t.to_vec::<half::bf16>().unwrap(), v);
    }

    #[test]
    fn misaligned_view_is_an_error_but_copy_works() {
        let raw = Bytes::from(vec![0u8; 9]);
        let t = Tensor::shared(DType::F32, vec![2], raw.slice(1..9)).unwrap();
        // Whether slice(1..) is misaligned depends on the allocation; to_vec must work either way.
        assert_eq!(t.to_vec::<f32>().unwrap(), vec![0.0, 0.0]);
    }

    #[test]
    fn equality_ignores_where_the_bytes_live() {
        let owned = Tensor::from_slice(&[2], &[1u8, 2]).unwrap();
        let shared = Tensor::shared(DType::U8, vec![2], Bytes::from_static(&[1, 2])).unwrap();
        assert_eq!(owned, shared);
        assert_ne!(owned, Tensor::from_slice(&[1, 2], &[1u8, 2]).unwrap());
    }

    #[test]
    fn overflowing_shape_is_rejected() {
        assert!(Tensor::zeros(DType::F64, &[usize::MAX / 2, 3]).is_err());
    }
}
