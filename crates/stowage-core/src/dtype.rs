//! Element types, their sizes, and their spellings in numpy (`descr`) and torch.

use crate::{Error, Result};
use serde::{Deserialize, Serialize};
use std::fmt;

/// The element type of a tensor. Bytes are always stored little-endian, C order.
///
/// ```
/// use stowage_core::DType;
/// assert_eq!(DType::F32.item_size(), 4);
/// assert_eq!(DType::F32.numpy_descr(), Some("<f4"));
/// assert_eq!(DType::from_torch_name("torch.float32").unwrap(), DType::F32);
/// assert_eq!(DType::BF16.numpy_descr(), None); // numpy has no bfloat16
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DType {
    /// One byte per element, 0 or 1.
    Bool,
    /// Unsigned 8-bit integer.
    U8,
    /// Unsigned 16-bit integer.
    U16,
    /// Unsigned 32-bit integer.
    U32,
    /// Unsigned 64-bit integer.
    U64,
    /// Signed 8-bit integer.
    I8,
    /// Signed 16-bit integer.
    I16,
    /// Signed 32-bit integer.
    I32,
    /// Signed 64-bit integer.
    I64,
    /// IEEE 754 half precision.
    F16,
    /// bfloat16 (brain floating point).
    BF16,
    /// IEEE 754 single precision.
    F32,
    /// IEEE 754 double precision.
    F64,
}

/// Byte order of a numpy `descr`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ByteOrder {
    /// `<`, or `=` / `|` on this (little-endian) platform, or not applicable for one-byte types.
    Little,
    /// `>`: must be converted with [`swap_to_little_endian`] before use.
    Big,
}

impl DType {
    /// Every dtype, in declaration order.
    pub const ALL: [DType; 13] = [
        DType::Bool,
        DType::U8,
        DType::U16,
        DType::U32,
        DType::U64,
        DType::I8,
        DType::I16,
        DType::I32,
        DType::I64,
        DType::F16,
        DType::BF16,
        DType::F32,
        DType::F64,
    ];

    /// Size of one element in bytes.
    pub const fn item_size(self) -> usize {
        match self {
            DType::Bool | DType::U8 | DType::I8 => 1,
            DType::U16 | DType::I16 | DType::F16 | DType::BF16 => 2,
            DType::U32 | DType::I32 | DType::F32 => 4,
            DType::U64 | DType::I64 | DType::F64 => 8,
        }
    }

    /// The short stowage name (`"float32"`), the same as numpy's `dtype.name`.
    pub const fn name(self) -> &'static str {
        match self {
            DType::Bool => "bool",
            DType::U8 => "uint8",
            DType::U16 => "uint16",
            DType::U32 => "uint32",
            DType::U64 => "uint64",
            DType::I8 => "int8",
            DType::I16 => "int16",
            DType::I32 => "int32",
            DType::I64 => "int64",
            DType::F16 => "float16",
            DType::BF16 => "bfloat16",
            DType::F32 => "float32",
            DType::F64 => "float64",
        }
    }

    /// Parses [`DType::name`].
    ///
    /// ```
    /// assert_eq!(stowage_core::DType::from_name("int16").unwrap(), stowage_core::DType::I16);
    /// ```
    pub fn from_name(name: &str) -> Result<DType> {
        DType::ALL
            .into_iter()
            .find(|d| d.name() == name)
            .ok_or_else(|| Error::invalid(format!("unknown dtype name {name:?}")))
    }

    /// numpy's `dtype.str` for the little-endian form, or `None` for bfloat16, which numpy cannot express.
    pub const fn numpy_descr(self) -> Option<&'static str> {
        Some(match self {
            DType::Bool => "|b1",
            DType::U8 => "|u1",
            DType::U16 => "<u2",
            DType::U32 => "<u4",
            DType::U64 => "<u8",
            DType::I8 => "|i1",
            DType::I16 => "<i2",
            DType::I32 => "<i4",
            DType::I64 => "<i8",
            DType::F16 => "<f2",
            DType::BF16 => return None,
            DType::F32 => "<f4",
            DType::F64 => "<f8",
        })
    }

    /// Parses a numpy `descr` (`<f4`, `|u1`, `>i8`, `=f8`, `b1` ...) into a dtype and its byte order.
    ///
    /// Big-endian input is reported as [`ByteOrder::Big`] so that the caller converts it; it is never
    /// silently read as little-endian. Types numpy has but stowage does not (`<f16`, `<c8`, `|O`,
    /// `<U5`, ...) are an [`Error::Unsupported`] naming the descr.
    ///
    /// ```
    /// use stowage_core::{ByteOrder, DType};
    /// assert_eq!(DType::from_numpy_descr("<f4").unwrap(), (DType::F32, ByteOrder::Little));
    /// assert_eq!(DType::from_numpy_descr(">i2").unwrap(), (DType::I16, ByteOrder::Big));
    /// assert!(DType::from_numpy_descr("<c8").is_err());
    /// ```
    pub fn from_numpy_descr(descr: &str) -> Result<(DType, ByteOrder)> {
        let unsupported = || Error::unsupported("core", format!("numpy dtype descr {descr:?}"));
        let (order_char, code) = match descr.chars().next() {
            Some(c @ ('<' | '>' | '|' | '=')) => (c, &descr[1..]),
            Some(_) => ('=', descr),
            None => return Err(unsupported()),
        };
        let dtype = match code {
            "b1" | "?" => DType::Bool,
            "u1" | "B" => DType::U8,
            "u2" | "H" => DType::U16,
            "u4" | "I" => DType::U32,
            "u8" | "Q" => DType::U64,
            "i1" | "b" => DType::I8,
            "i2" | "h" => DType::I16,
            "i4" | "i" => DType::I32,
            "i8" | "q" => DType::I64,
            "f2" | "e" => DType::F16,
            "f4" | "f" => DType::F32,
            "f8" | "d" => DType::F64,
            _ => return Err(unsupported()),
        };
        let order = match order_char {
            '>' if dtype.item_size() > 1 => ByteOrder::Big,
            '|' if dtype.item_size() > 1 => {
                return Err(Error::invalid(format!(
                    "numpy descr {descr:?}: '|' (not applicable) byte order on a multi-byte type"
                )));
            }
            _ => ByteOrder::Little,
        };
        Ok((dtype, order))
    }

    /// The torch spelling, `torch.float32`; bool is `torch.bool`.
    pub const fn torch_name(self) -> &'static str {
        match self {
            DType::Bool => "torch.bool",
            DType::U8 => "torch.uint8",
            DType::U16 => "torch.uint16",
            DType::U32 => "torch.uint32",
            DType::U64 => "torch.uint64",
            DType::I8 => "torch.int8",
            DType::I16 => "torch.int16",
            DType::I32 => "torch.int32",
            DType::I64 => "torch.int64",
            DType::F16 => "torch.float16",
            DType::BF16 => "torch.bfloat16",
            DType::F32 => "torch.float32",
            DType::F64 => "torch.float64",
        }
    }

    /// Parses a torch dtype name, with or without the `torch.` prefix, including torch's aliases
    /// (`torch.float`, `torch.half`, `torch.long`, ...).
    ///
    /// ```
    /// use stowage_core::DType;
    /// assert_eq!(DType::from_torch_name("torch.half").unwrap(), DType::F16);
    /// assert_eq!(DType::from_torch_name("long").unwrap(), DType::I64);
    /// ```
    pub fn from_torch_name(name: &str) -> Result<DType> {
        let short = name.strip_prefix("torch.").unwrap_or(name);
        Ok(match short {
            "bool" => DType::Bool,
            "uint8" => DType::U8,
            "uint16" => DType::U16,
            "uint32" => DType::U32,
            "uint64" => DType::U64,
            "int8" => DType::I8,
            "int16" | "short" => DType::I16,
            "int32" | "int" => DType::I32,
            "int64" | "long" => DType::I64,
            "float16" | "half" => DType::F16,
            "bfloat16" => DType::BF16,
            "float32" | "float" => DType::F32,
            "float64" | "double" => DType::F64,
            _ => return Err(Error::unsupported("core", format!("torch dtype {name:?}"))),
        })
    }

    /// Whether this is a floating-point type.
    pub const fn is_float(self) -> bool {
        matches!(self, DType::F16 | DType::BF16 | DType::F32 | DType::F64)
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Reverses the byte order of every element of `bytes` in place (big-endian -> little-endian).
///
/// ```
/// let mut b = vec![0x12, 0x34, 0xab, 0xcd];
/// stowage_core::dtype::swap_to_little_endian(&mut b, stowage_core::DType::I16).unwrap();
/// assert_eq!(b, [0x34, 0x12, 0xcd, 0xab]);
/// ```
pub fn swap_to_little_endian(bytes: &mut [u8], dtype: DType) -> Result<()> {
    let size = dtype.item_size();
    if !bytes.len().is_multiple_of(size) {
        return Err(Error::invalid(format!(
            "{} bytes is not a whole number of {dtype} elements ({size} bytes each)",
            bytes.len()
        )));
    }
    if size > 1 {
        bytes.chunks_exact_mut(size).for_each(<[u8]>::reverse);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_numpy_descr_round_trips() {
        for dtype in DType::ALL {
            if let Some(descr) = dtype.numpy_descr() {
                assert_eq!(DType::from_numpy_descr(descr).unwrap(), (dtype, ByteOrder::Little));
            }
        }
    }

    #[test]
    fn every_name_and_torch_name_round_trips() {
        for dtype in DType::ALL {
            assert_eq!(DType::from_name(dtype.name()).unwrap(), dtype);
            assert_eq!(DType::from_torch_name(dtype.torch_name()).unwrap(), dtype);
        }
    }

    #[test]
    fn big_endian_is_reported_not_misread() {
        assert_eq!(DType::from_numpy_descr(">f8").unwrap(), (DType::F64, ByteOrder::Big));
        // One-byte types have no byte order: '>' on them is harmless.
        assert_eq!(DType::from_numpy_descr(">u1").unwrap(), (DType::U8, ByteOrder::Little));
    }

    #[test]
    fn unsupported_descrs_are_errors() {
        for d in ["<f16", "<c8", "|O", "<U5", "", "|V4", "|f4"] {
            assert!(DType::from_numpy_descr(d).is_err(), "{d:?} must be rejected");
        }
    }

    #[test]
    fn swap_rejects_partial_elements() {
        assert!(swap_to_little_endian(&mut [1, 2, 3], DType::I16).is_err());
    }
}
