//! Reading and writing the header of a numpy `.npy` file.
//!
//! A `.npy` file starts with the magic `\x93NUMPY`, a two-byte format version, a little-endian
//! header length (u16 for format 1.0, u32 for 2.0 and 3.0) and the ASCII text of a Python dict
//! literal such as `{'descr': '<f4', 'fortran_order': False, 'shape': (1000, 10, 10), }`, padded
//! with spaces and a final `\n`. The array data starts right after the header.
//!
//! [`parse`] treats its input as hostile: it never panics, never allocates more than the input it
//! was given (the header length is capped at [`MAX_HEADER_LEN`] and the rank at [`MAX_RANK`]), checks
//! every dimension and the data size for overflow, and names the byte or field that is wrong.
//! [`write_header`] writes format 1.0 byte-for-byte as numpy >= 1.24 does.

use std::fmt;
use std::path::Path;

use crate::{ByteOrder, DType, Error, shape};

/// The six bytes every `.npy` file starts with.
pub const MAGIC: &[u8; 6] = b"\x93NUMPY";

/// Largest header (the dict text after the length field) [`parse`] accepts: 1 MiB.
///
/// A real header is at most a few hundred bytes (numpy itself refuses more than 10 000 by
/// default), so anything near this limit is damage or an attack.
pub const MAX_HEADER_LEN: usize = 1 << 20;

/// Largest number of dimensions [`parse`] accepts (numpy's own limit is 64).
pub const MAX_RANK: usize = 64;

/// numpy aligns the start of the data to this many bytes.
const ARRAY_ALIGN: usize = 64;

/// numpy >= 1.24 leaves room after the dict for the first dimension to grow to this many digits.
const GROWTH_AXIS_MAX_DIGITS: usize = 21;

/// How much of a hostile string an error message quotes.
const QUOTE_LIMIT: usize = 40;

/// A parsed `.npy` header.
///
/// ```
/// use stowage_core::DType;
/// use stowage_core::npy_header::{parse, write_header};
///
/// let bytes = write_header(DType::F32, &[1000, 10, 10]);
/// let header = parse(&bytes).unwrap();
/// assert_eq!(header.dtype, DType::F32);
/// assert_eq!(header.shape, vec![1000, 10, 10]);
/// assert_eq!(header.data_offset, 128);
/// assert_eq!(header.data_len().unwrap(), 1000 * 10 * 10 * 4);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NpyHeader {
    /// The `descr` string exactly as written in the file, e.g. `<f4`.
    pub descr: String,
    /// The element type `descr` stands for.
    pub dtype: DType,
    /// Byte order of the stored elements; [`ByteOrder::Big`] data must be converted before use.
    pub byte_order: ByteOrder,
    /// The `fortran_order` flag. [`parse`] accepts `True` only where Fortran and C order lay out
    /// the same bytes (at most one dimension longer than 1, or no elements at all).
    pub fortran_order: bool,
    /// The array shape; empty for a 0-d array.
    pub shape: Vec<usize>,
    /// Offset of the first data byte from the start of the file (magic + version + length + header).
    pub data_offset: usize,
    /// Format version `(major, minor)`: `(1, 0)`, `(2, 0)` or `(3, 0)`.
    pub version: (u8, u8),
}

impl NpyHeader {
    /// Number of data bytes the header describes (`prod(shape) * itemsize`), overflow-checked.
    ///
    /// Never fails for a header returned by [`parse`], which checks this already; the fields are
    /// public, so a hand-built header may overflow.
    pub fn data_len(&self) -> crate::Result<usize> {
        shape::byte_count(&self.shape, self.dtype.item_size())
    }
}

/// What kind of problem a [`HeaderError`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum HeaderErrorKind {
    /// The input ends before the header does; `needed` bytes would be required to go on.
    Truncated {
        /// How many bytes from the start of the file the header needs.
        needed: usize,
    },
    /// The bytes are not a well-formed `.npy` header.
    Malformed,
    /// A well-formed header that stowage cannot read: a format version, dtype or memory order it
    /// does not support.
    Unsupported,
}

/// Why a `.npy` header could not be parsed. The detail names the byte offset (from the start of
/// the file) or the field that is wrong.
///
/// Convert it into the workspace error with [`HeaderError::into_error`], which adds the file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeaderError {
    kind: HeaderErrorKind,
    detail: String,
}

impl HeaderError {
    fn truncated(needed: usize, available: usize, what: &str) -> Self {
        HeaderError {
            kind: HeaderErrorKind::Truncated { needed },
            detail: format!("truncated: {what} needs {needed} bytes, only {available} present"),
        }
    }

    fn malformed(detail: impl Into<String>) -> Self {
        HeaderError { kind: HeaderErrorKind::Malformed, detail: detail.into() }
    }

    fn unsupported(detail: impl Into<String>) -> Self {
        HeaderError { kind: HeaderErrorKind::Unsupported, detail: detail.into() }
    }

    /// The kind of problem.
    pub fn kind(&self) -> HeaderErrorKind {
        self.kind
    }

    /// The human-readable description (without the file name).
    pub fn detail(&self) -> &str {
        &self.detail
    }

    /// The workspace error for this problem in the file at `path`: truncated and malformed headers
    /// are [`Error::Corrupted`], unsupported ones [`Error::Incompatible`].
    ///
    /// ```
    /// let err = stowage_core::npy_header::parse(b"not a npy file").unwrap_err();
    /// let err = err.into_error("/data/x.npy");
    /// assert!(matches!(err, stowage_core::Error::Corrupted { .. }));
    /// assert!(err.to_string().contains("/data/x.npy"));
    /// ```
    pub fn into_error(self, path: impl AsRef<Path>) -> Error {
        let path = path.as_ref().to_path_buf();
        let detail = format!(".npy header: {}", self.detail);
        match self.kind {
            HeaderErrorKind::Truncated { .. } | HeaderErrorKind::Malformed => {
                Error::corrupted(path, detail)
            }
            HeaderErrorKind::Unsupported => Error::Incompatible { path, detail },
        }
    }
}

impl fmt::Display for HeaderError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "invalid .npy header: {}", self.detail)
    }
}

impl std::error::Error for HeaderError {}

/// Parses the header at the start of `bytes` (a whole file or any prefix that holds the header).
///
/// Accepts format versions 1.0, 2.0 and 3.0, takes the header length from the length field (never
/// assumes a size) and reads the dict with its keys in any order, single or double quotes,
/// `True`/`False`, tuples with or without a trailing comma, `()` for 0-d and any whitespace.
///
/// Errors: [`HeaderErrorKind::Truncated`] when `bytes` ends inside the header,
/// [`HeaderErrorKind::Malformed`] for anything that is not a `.npy` header, and
/// [`HeaderErrorKind::Unsupported`] for other format versions, dtypes stowage does not have
/// (object, unicode, bytes, complex, structured, ...) and real Fortran-order data.
///
/// ```
/// use stowage_core::npy_header::parse;
/// let mut file = b"\x93NUMPY\x01\x00\x46\x00".to_vec();
/// file.extend_from_slice(b"{\"shape\": (3,), \"fortran_order\": False, \"descr\": \">i2\"}");
/// file.resize(10 + 0x46 - 1, b' ');
/// file.push(b'\n');
/// let h = parse(&file).unwrap();
/// assert_eq!(h.shape, vec![3]);
/// assert_eq!(h.byte_order, stowage_core::ByteOrder::Big);
/// assert!(parse(&file[..20]).is_err());
/// ```
pub fn parse(bytes: &[u8]) -> Result<NpyHeader, HeaderError> {
    // Check the magic on whatever is present first, so random bytes are reported as "not .npy"
    // rather than as "truncated".
    if let Some(pos) = bytes.iter().zip(MAGIC).position(|(a, b)| a != b) {
        return Err(HeaderError::malformed(format!(
            "byte {pos} is {}, expected {} of the magic \\x93NUMPY: not a .npy file",
            show_byte(bytes[pos]),
            show_byte(MAGIC[pos])
        )));
    }
    if bytes.len() < 8 {
        return Err(HeaderError::truncated(8, bytes.len(), "the magic and format version"));
    }
    let version = (bytes[6], bytes[7]);
    let len_size = match version {
        (1, 0) => 2,
        (2, 0) | (3, 0) => 4,
        (major, minor) => {
            return Err(HeaderError::unsupported(format!(
                ".npy format version {major}.{minor} (bytes 6-7); supported are 1.0, 2.0 and 3.0"
            )));
        }
    };
    let prefix_len = 8 + len_size;
    let Some(len_bytes) = bytes.get(8..prefix_len) else {
        return Err(HeaderError::truncated(prefix_len, bytes.len(), "the header length field"));
    };
    let header_len = len_bytes.iter().rev().fold(0usize, |acc, &b| (acc << 8) | usize::from(b));
    if header_len > MAX_HEADER_LEN {
        return Err(HeaderError::malformed(format!(
            "header length field (bytes 8-{}) declares {header_len} bytes, more than the \
             {MAX_HEADER_LEN}-byte limit",
            prefix_len - 1
        )));
    }
    let data_offset = prefix_len + header_len;
    let Some(text) = bytes.get(prefix_len..data_offset) else {
        return Err(HeaderError::truncated(
            data_offset,
            bytes.len(),
            &format!("a header of declared length {header_len}"),
        ));
    };

    let dict = DictParser { text, pos: 0, base: prefix_len }.parse_dict()?;
    let (dtype, byte_order) = dtype_of(&dict.descr)?;
    check_memory_order(dict.fortran_order, &dict.shape)?;
    // The shape must describe a byte count that fits in memory; the caller then only compares it
    // with the file size, never overflows.
    shape::byte_count(&dict.shape, dtype.item_size()).map_err(|_| {
        HeaderError::malformed(format!(
            "shape {} of {}-byte elements describes more bytes than fit in memory",
            shape::display(&dict.shape),
            dtype.item_size()
        ))
    })?;
    Ok(NpyHeader {
        descr: dict.descr,
        dtype,
        byte_order,
        fortran_order: dict.fortran_order,
        shape: dict.shape,
        data_offset,
        version,
    })
}

/// The `descr` under which `dtype` is stored in a `.npy` file.
///
/// This is numpy's little-endian `dtype.str` (`<f4`, `|u1`, ...), except for bfloat16, which numpy
/// cannot express: its raw 16-bit patterns are stored as `<u2`, and stowage records the real dtype
/// in its own metadata. A plain numpy reader therefore sees bfloat16 data as `uint16`.
///
/// ```
/// use stowage_core::DType;
/// use stowage_core::npy_header::storage_descr;
/// assert_eq!(storage_descr(DType::F32), "<f4");
/// assert_eq!(storage_descr(DType::BF16), "<u2");
/// ```
pub fn storage_descr(dtype: DType) -> &'static str {
    dtype.numpy_descr().unwrap_or("<u2")
}

/// The complete header (magic through the final `\n`) numpy writes for a C-order little-endian
/// array of `dtype` and `shape`, byte-for-byte as `numpy.save` in numpy >= 1.24 writes it.
///
/// That is format 1.0: the dict with sorted keys, `21 - len(str(shape[0]))` spare spaces (none for
/// 0-d) so the first dimension can grow in place, then spaces up to a multiple of 64 bytes and `\n`.
/// Like numpy, it falls back to format 2.0 only when the header would not fit a u16 length (a rank
/// in the thousands). bfloat16 is written as [`storage_descr`] says (`<u2`).
///
/// # Panics
/// Only if the header would exceed 4 GiB (a shape of about 200 million dimensions).
///
/// ```
/// use stowage_core::DType;
/// let h = stowage_core::npy_header::write_header(DType::U8, &[1000]);
/// assert_eq!(h.len(), 128);
/// assert!(h.starts_with(b"\x93NUMPY\x01\x00\x76\x00{'descr': '|u1', 'fortran_order': False, 'shape': (1000,), }"));
/// assert!(h.ends_with(b" \n"));
/// ```
pub fn write_header(dtype: DType, shape: &[usize]) -> Vec<u8> {
    let mut dict = format!(
        "{{'descr': '{}', 'fortran_order': False, 'shape': {}, }}",
        storage_descr(dtype),
        shape::display(shape)
    );
    if let Some(first) = shape.first() {
        let digits = first.to_string().len();
        dict.extend(std::iter::repeat_n(' ', GROWTH_AXIS_MAX_DIGITS.saturating_sub(digits)));
    }
    // numpy's _wrap_header: the dict, `padlen` spaces and "\n" with (prefix + dict + 1) + padlen a
    // multiple of 64. padlen is 64, not 0, when the unpadded preamble is already aligned.
    let text_len = dict.len() + 1;
    let wrap = |prefix_len: usize| {
        let pad = ARRAY_ALIGN - (prefix_len + text_len) % ARRAY_ALIGN;
        text_len + pad
    };
    // The length field: u16 (format 1.0) when it fits, else u32 (format 2.0), as numpy does.
    let (header_len, len_field) = match u16::try_from(wrap(10)) {
        Ok(len) => (wrap(10), [1u8, 0].into_iter().chain(len.to_le_bytes()).collect::<Vec<u8>>()),
        Err(_) => {
            let len = u32::try_from(wrap(12)).expect("a 4 GiB header needs a shape of ~200M dims");
            (wrap(12), [2u8, 0].into_iter().chain(len.to_le_bytes()).collect())
        }
    };
    let mut out = Vec::with_capacity(MAGIC.len() + len_field.len() + header_len);
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&len_field);
    out.extend_from_slice(dict.as_bytes());
    out.resize(out.len() + header_len - text_len, b' ');
    out.push(b'\n');
    out
}

/// The three entries of the header dict.
struct Dict {
    descr: String,
    fortran_order: bool,
    shape: Vec<usize>,
}

/// A value of the header dict, as far as the three known keys need it.
enum Value {
    Str(String),
    Bool(bool),
    Tuple(Vec<usize>),
}

/// A cursor over the dict text. `base` is the file offset of `text[0]`, for error messages.
struct DictParser<'a> {
    text: &'a [u8],
    pos: usize,
    base: usize,
}

impl DictParser<'_> {
    fn parse_dict(&mut self) -> Result<Dict, HeaderError> {
        let mut descr = None;
        let mut fortran_order = None;
        let mut shape = None;

        self.skip_ws();
        self.expect(b'{', "'{' opening the header dict")?;
        loop {
            self.skip_ws();
            if self.peek() == Some(b'}') {
                self.pos += 1;
                break;
            }
            let key_at = self.offset();
            let key = self.string("a dict key")?;
            self.skip_ws();
            self.expect(b':', &format!("':' after key {}", quote(&key)))?;
            self.skip_ws();
            let value_at = self.offset();
            match key.as_str() {
                "descr" => {
                    if self.peek() == Some(b'[') {
                        return Err(HeaderError::unsupported(format!(
                            "'descr' at byte {value_at} is a list: structured (record) dtypes \
                             are not supported"
                        )));
                    }
                    set_once(&mut descr, self.value()?, "descr", key_at)?;
                }
                "fortran_order" => {
                    set_once(&mut fortran_order, self.value()?, "fortran_order", key_at)?
                }
                "shape" => set_once(&mut shape, self.value()?, "shape", key_at)?,
                _ => {
                    return Err(HeaderError::malformed(format!(
                        "unexpected key {} at byte {key_at}; a .npy header has exactly the keys \
                         'descr', 'fortran_order' and 'shape'",
                        quote(&key)
                    )));
                }
            }
            self.skip_ws();
            match self.peek() {
                Some(b',') => self.pos += 1,
                Some(b'}') => {
                    self.pos += 1;
                    break;
                }
                found => return Err(self.unexpected(found, "',' or '}' after a dict value")),
            }
        }
        self.skip_ws();
        if let Some(found) = self.peek() {
            return Err(self.unexpected(Some(found), "only padding after the header dict"));
        }

        let missing = |key: &str| HeaderError::malformed(format!("header dict has no {key:?} key"));
        let descr = match descr.ok_or_else(|| missing("descr"))? {
            (Value::Str(s), _) => s,
            (_, at) => {
                return Err(HeaderError::malformed(format!(
                    "'descr' at byte {at} is not a string"
                )));
            }
        };
        let fortran_order = match fortran_order.ok_or_else(|| missing("fortran_order"))? {
            (Value::Bool(b), _) => b,
            (_, at) => {
                return Err(HeaderError::malformed(format!(
                    "'fortran_order' at byte {at} is not True or False"
                )));
            }
        };
        let shape = match shape.ok_or_else(|| missing("shape"))? {
            (Value::Tuple(t), _) => t,
            (_, at) => {
                return Err(HeaderError::malformed(format!(
                    "'shape' at byte {at} is not a tuple of integers"
                )));
            }
        };
        Ok(Dict { descr, fortran_order, shape })
    }

    /// One value: a string, `True`/`False` or a tuple of non-negative integers.
    fn value(&mut self) -> Result<(Value, usize), HeaderError> {
        let at = self.offset();
        let value = match self.peek() {
            Some(b'\'' | b'"') => Value::Str(self.string("a string")?),
            Some(b'(') => Value::Tuple(self.tuple()?),
            Some(c) if c.is_ascii_alphabetic() => {
                let start = self.pos;
                while self.peek().is_some_and(|c| c.is_ascii_alphanumeric() || c == b'_') {
                    self.pos += 1;
                }
                match &self.text[start..self.pos] {
                    b"True" => Value::Bool(true),
                    b"False" => Value::Bool(false),
                    name => {
                        return Err(HeaderError::malformed(format!(
                            "unexpected name {} at byte {at}; expected True, False, a string or a \
                             tuple",
                            quote(&String::from_utf8_lossy(name))
                        )));
                    }
                }
            }
            found => return Err(self.unexpected(found, "a value (string, True/False or tuple)")),
        };
        Ok((value, at))
    }

    /// A quoted string without escapes (numpy never writes any).
    fn string(&mut self, what: &str) -> Result<String, HeaderError> {
        let at = self.offset();
        let quote_char = match self.peek() {
            Some(q @ (b'\'' | b'"')) => q,
            found => return Err(self.unexpected(found, what)),
        };
        self.pos += 1;
        let start = self.pos;
        loop {
            match self.peek() {
                Some(c) if c == quote_char => break,
                Some(b'\\') => {
                    return Err(HeaderError::unsupported(format!(
                        "escape sequence at byte {} in the string starting at byte {at}",
                        self.offset()
                    )));
                }
                Some(b'\n' | b'\r') | None => {
                    return Err(HeaderError::malformed(format!(
                        "unterminated string starting at byte {at}"
                    )));
                }
                Some(_) => self.pos += 1,
            }
        }
        // Format 1.0/2.0 headers are latin-1 and 3.0 is UTF-8; a name outside ASCII can only be an
        // unsupported descr or key, so a lossy conversion is enough to report it.
        let s = String::from_utf8_lossy(&self.text[start..self.pos]).into_owned();
        self.pos += 1;
        Ok(s)
    }

    /// `()`, `(n,)`, `(n, m)`, `(n, m,)`: non-negative decimal integers, at most [`MAX_RANK`].
    fn tuple(&mut self) -> Result<Vec<usize>, HeaderError> {
        let at = self.offset();
        self.expect(b'(', "'(' opening the shape tuple")?;
        let mut dims = Vec::new();
        let mut trailing_comma = false;
        loop {
            self.skip_ws();
            if self.peek() == Some(b')') {
                self.pos += 1;
                break;
            }
            if dims.len() == MAX_RANK {
                return Err(HeaderError::malformed(format!(
                    "shape tuple at byte {at} has more than {MAX_RANK} dimensions"
                )));
            }
            dims.push(self.dimension()?);
            self.skip_ws();
            match self.peek() {
                Some(b',') => {
                    self.pos += 1;
                    trailing_comma = true;
                }
                Some(b')') => {
                    self.pos += 1;
                    trailing_comma = false;
                    break;
                }
                found => return Err(self.unexpected(found, "',' or ')' in the shape tuple")),
            }
        }
        if dims.len() == 1 && !trailing_comma {
            return Err(HeaderError::malformed(format!(
                "shape at byte {at} is ({}) without a trailing comma: an integer in parentheses, \
                 not a tuple (numpy writes ({},))",
                dims[0], dims[0]
            )));
        }
        Ok(dims)
    }

    /// A decimal dimension, overflow-checked. Python 2 numpy wrote longs as `10L`; that suffix is
    /// accepted.
    fn dimension(&mut self) -> Result<usize, HeaderError> {
        let at = self.offset();
        if self.peek() == Some(b'-') {
            return Err(HeaderError::malformed(format!("negative dimension at byte {at}")));
        }
        let start = self.pos;
        while self.peek().is_some_and(|c| c.is_ascii_digit()) {
            self.pos += 1;
        }
        let digits = &self.text[start..self.pos];
        if digits.is_empty() {
            return Err(self.unexpected(self.peek(), "a non-negative integer dimension"));
        }
        let value = digits
            .iter()
            .try_fold(0usize, |acc, &d| acc.checked_mul(10)?.checked_add(usize::from(d - b'0')));
        let Some(value) = value else {
            return Err(HeaderError::malformed(format!(
                "dimension at byte {at} ({} digits) does not fit in a {}-bit integer",
                digits.len(),
                usize::BITS
            )));
        };
        if self.peek() == Some(b'L') {
            self.pos += 1;
        }
        Ok(value)
    }

    fn peek(&self) -> Option<u8> {
        self.text.get(self.pos).copied()
    }

    fn offset(&self) -> usize {
        self.base + self.pos
    }

    /// Python's whitespace between tokens (newlines are fine inside braces).
    fn skip_ws(&mut self) {
        while matches!(self.peek(), Some(b' ' | b'\t' | b'\n' | b'\r' | b'\x0c')) {
            self.pos += 1;
        }
    }

    fn expect(&mut self, byte: u8, what: &str) -> Result<(), HeaderError> {
        if self.peek() == Some(byte) {
            self.pos += 1;
            Ok(())
        } else {
            Err(self.unexpected(self.peek(), what))
        }
    }

    fn unexpected(&self, found: Option<u8>, expected: &str) -> HeaderError {
        match found {
            Some(b) => HeaderError::malformed(format!(
                "byte {} is {}, expected {expected}",
                self.offset(),
                show_byte(b)
            )),
            None => HeaderError::malformed(format!(
                "header text ends at byte {}, expected {expected}",
                self.offset()
            )),
        }
    }
}

/// Stores a dict value, rejecting a key given twice (Python would silently keep the last one).
fn set_once(
    slot: &mut Option<(Value, usize)>,
    value: (Value, usize),
    key: &str,
    key_at: usize,
) -> Result<(), HeaderError> {
    if slot.is_some() {
        return Err(HeaderError::malformed(format!(
            "key '{key}' appears twice (again at byte {key_at})"
        )));
    }
    *slot = Some(value);
    Ok(())
}

/// The stowage dtype of a `descr`, with a reason when it has none.
fn dtype_of(descr: &str) -> Result<(DType, ByteOrder), HeaderError> {
    DType::from_numpy_descr(descr).map_err(|err| {
        let code = descr.trim_start_matches(['<', '>', '|', '=']);
        let kind = match code.chars().next() {
            Some('O') => "object (Python objects)",
            Some('U') => "unicode string",
            Some('S' | 'a') => "bytes string",
            Some('V') => "void / raw bytes",
            Some('c' | 'F' | 'D' | 'G') => "complex",
            Some('M') => "datetime64",
            Some('m') => "timedelta64",
            Some('f' | 'g') => "extended-precision float",
            _ => "unknown",
        };
        match err {
            Error::Unsupported { .. } => HeaderError::unsupported(format!(
                "descr {} is a {kind} dtype; stowage reads bool, int8-64, uint8-64 and float16/32/64",
                quote(descr)
            )),
            other => HeaderError::malformed(format!("descr {}: {other}", quote(descr))),
        }
    })
}

/// Fortran order is only harmless when it does not change the byte layout.
fn check_memory_order(fortran_order: bool, shape: &[usize]) -> Result<(), HeaderError> {
    let long_axes = shape.iter().filter(|&&d| d > 1).count();
    if fortran_order && long_axes > 1 && !shape.contains(&0) {
        return Err(HeaderError::unsupported(format!(
            "'fortran_order': True with shape {}: column-major data is not supported, only C order",
            shape::display(shape)
        )));
    }
    Ok(())
}

/// A hostile string, shortened and escaped for an error message.
fn quote(s: &str) -> String {
    crate::quote::quote(s, QUOTE_LIMIT)
}

/// A byte for an error message: `'x'` when printable, else `0x93`.
fn show_byte(b: u8) -> String {
    if b.is_ascii_graphic() || b == b' ' {
        format!("'{}'", char::from(b))
    } else {
        format!("0x{b:02x}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng, rngs::StdRng};

    /// A header with `text` as the dict, padded to 64 bytes like numpy.
    fn npy_v1(text: &str) -> Vec<u8> {
        let mut len = text.len() + 1;
        len += (64 - (10 + len) % 64) % 64;
        let mut out = MAGIC.to_vec();
        out.extend_from_slice(&[1, 0]);
        out.extend_from_slice(&(len as u16).to_le_bytes());
        out.extend_from_slice(text.as_bytes());
        out.resize(10 + len - 1, b' ');
        out.push(b'\n');
        out
    }

    #[test]
    fn reads_numpy_style_headers() {
        let h =
            parse(&npy_v1("{'descr': '<f4', 'fortran_order': False, 'shape': (1000, 10, 10), }"))
                .unwrap();
        assert_eq!(h.dtype, DType::F32);
        assert_eq!(h.byte_order, ByteOrder::Little);
        assert_eq!(h.shape, vec![1000, 10, 10]);
        assert_eq!(h.data_offset, 128);
        assert_eq!(h.version, (1, 0));
        assert_eq!(h.descr, "<f4");
    }

    #[test]
    fn dict_syntax_variants() {
        let cases: &[(&str, &[usize])] = &[
            ("{'shape': (), 'descr': '|b1', 'fortran_order': False}", &[]),
            ("{\"descr\":\"<i8\",\"fortran_order\":False,\"shape\":(7,)}", &[7]),
            ("  {\n'descr' : '<u2' ,\t'fortran_order':False,'shape':( 2 , 3 , ) , }  ", &[2, 3]),
            ("{'descr': '<f8', 'fortran_order': False, 'shape': (10L, 3L), }", &[10, 3]),
            ("{'descr': '<f2', 'fortran_order': True, 'shape': (1, 5, 1), }", &[1, 5, 1]),
            ("{'descr': '<f2', 'fortran_order': True, 'shape': (0, 5, 3), }", &[0, 5, 3]),
        ];
        for (text, shape) in cases {
            let h = parse(&npy_v1(text)).unwrap_or_else(|e| panic!("{text}: {e}"));
            assert_eq!(h.shape, *shape, "{text}");
        }
    }

    #[test]
    fn versions_2_and_3_use_a_u32_length() {
        for major in [2u8, 3] {
            let text = "{'descr': '<i4', 'fortran_order': False, 'shape': (4,), }";
            let mut b = MAGIC.to_vec();
            b.extend_from_slice(&[major, 0]);
            b.extend_from_slice(&(text.len() as u32 + 1).to_le_bytes());
            b.extend_from_slice(text.as_bytes());
            b.push(b'\n');
            let h = parse(&b).unwrap();
            assert_eq!((h.version, h.data_offset, h.dtype), ((major, 0), b.len(), DType::I32));
        }
    }

    #[test]
    fn big_endian_is_reported() {
        let h =
            parse(&npy_v1("{'descr': '>f8', 'fortran_order': False, 'shape': (2,), }")).unwrap();
        assert_eq!((h.dtype, h.byte_order), (DType::F64, ByteOrder::Big));
    }

    #[test]
    fn unsupported_headers_are_clear_errors() {
        for descr in ["|O", "<U5", "|S3", "<c8", "<c16", "<f16", "|V4", "<M8[ns]", "<m8[s]"] {
            let text = format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': (2,), }}");
            let err = parse(&npy_v1(&text)).unwrap_err();
            assert_eq!(err.kind(), HeaderErrorKind::Unsupported, "{descr}: {err}");
            assert!(err.detail().contains(descr), "{err}");
        }
        let err =
            parse(&npy_v1("{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (2,), }"))
                .unwrap_err();
        assert!(err.detail().contains("structured"), "{err}");
        let err = parse(&npy_v1("{'descr': '<f4', 'fortran_order': True, 'shape': (2, 3), }"))
            .unwrap_err();
        assert_eq!(err.kind(), HeaderErrorKind::Unsupported);
        assert!(err.detail().contains("fortran_order"), "{err}");
        let mut v4 = npy_v1("{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }");
        v4[6] = 4;
        assert!(parse(&v4).unwrap_err().detail().contains("4.0"));
    }

    #[test]
    fn malformed_dicts_are_errors() {
        let bad = [
            "",
            "{",
            "}",
            "{'descr': '<f4', 'fortran_order': False}",
            "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), 'extra': 1}",
            "{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (2,)}",
            "{'descr': '<f4', 'fortran_order': 0, 'shape': (2,)}",
            "{'descr': '<f4', 'fortran_order': false, 'shape': (2,)}",
            "{'descr': '<f4', 'fortran_order': False, 'shape': (2)}",
            "{'descr': '<f4', 'fortran_order': False, 'shape': [2]}",
            "{'descr': '<f4', 'fortran_order': False, 'shape': (-2,)}",
            "{'descr': '<f4', 'fortran_order': False, 'shape': (2.5,)}",
            "{'descr': '<f4', 'fortran_order': False, 'shape': (,)}",
            "{'descr': '<f4', 'fortran_order': False, 'shape': (2,,)}",
            "{'descr': '<f4', 'fortran_order': False, 'shape': (nan,)}",
            "{'descr': '<f4', 'fortran_order': False, 'shape': (2,)} x",
            "{'descr': '<f4\", 'fortran_order': False, 'shape': (2,)}",
            "{'descr': 4, 'fortran_order': False, 'shape': (2,)}",
            "{'descr': '<f4' 'fortran_order': False, 'shape': (2,)}",
            "{descr: '<f4', 'fortran_order': False, 'shape': (2,)}",
            "{'descr': '|f4', 'fortran_order': False, 'shape': (2,)}",
            "{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999999,)}",
            "{'descr': '<f8', 'fortran_order': False, 'shape': (4294967296, 4294967296)}",
        ];
        for text in bad {
            let err = parse(&npy_v1(text)).unwrap_err();
            assert_eq!(err.kind(), HeaderErrorKind::Malformed, "{text}: {err}");
        }
        assert!(parse(&npy_v1("{'descr': '<f4'")).unwrap_err().detail().contains("byte"));
    }

    #[test]
    fn rank_is_capped() {
        let dims = vec!["1"; MAX_RANK + 1].join(", ");
        let text = format!("{{'descr': '<f4', 'fortran_order': False, 'shape': ({dims}), }}");
        assert!(parse(&npy_v1(&text)).unwrap_err().detail().contains("more than 64"));
        let dims = vec!["1"; MAX_RANK].join(", ");
        let text = format!("{{'descr': '<f4', 'fortran_order': False, 'shape': ({dims}), }}");
        assert_eq!(parse(&npy_v1(&text)).unwrap().shape.len(), MAX_RANK);
    }

    #[test]
    fn huge_declared_lengths_are_rejected_without_allocating() {
        let mut b = MAGIC.to_vec();
        b.extend_from_slice(&[2, 0, 0xff, 0xff, 0xff, 0xff]);
        let err = parse(&b).unwrap_err();
        assert_eq!(err.kind(), HeaderErrorKind::Malformed);
        assert!(err.detail().contains("4294967295"), "{err}");
        // Just under the cap but absent: truncated, and says how much is needed.
        let mut b = MAGIC.to_vec();
        b.extend_from_slice(&[2, 0, 0, 0, 0x10, 0]);
        assert_eq!(
            parse(&b).unwrap_err().kind(),
            HeaderErrorKind::Truncated { needed: 12 + (1 << 20) }
        );
    }

    #[test]
    fn every_truncation_is_an_error() {
        let full = write_header(DType::F32, &[1000, 2, 3]);
        for len in 0..full.len() {
            let err = parse(&full[..len]).unwrap_err();
            assert!(matches!(err.kind(), HeaderErrorKind::Truncated { .. }), "len {len}: {err}");
        }
        assert!(parse(&full).is_ok());
    }

    #[test]
    fn random_bytes_and_mutations_never_panic() {
        let mut rng = StdRng::seed_from_u64(0x5eed);
        for _ in 0..20_000 {
            let len = rng.random_range(0..200);
            let mut b: Vec<u8> = (0..len).map(|_| rng.random()).collect();
            if rng.random_bool(0.5) && b.len() >= 6 {
                b[..6].copy_from_slice(MAGIC);
            }
            let _ = parse(&b);
        }
        let base = write_header(DType::I16, &[10, 20, 3]);
        let alphabet = b"{}()[],:'\" \n0123456789-LTrueFalsxdescrshape<>|f4\\\x00\xff";
        for _ in 0..50_000 {
            let mut b = base.clone();
            for _ in 0..rng.random_range(1..5) {
                let i = rng.random_range(0..b.len());
                b[i] = if rng.random_bool(0.7) {
                    alphabet[rng.random_range(0..alphabet.len())]
                } else {
                    rng.random()
                };
            }
            if rng.random_bool(0.1) {
                b.truncate(rng.random_range(0..b.len()));
            }
            if let Ok(h) = parse(&b) {
                assert!(h.data_offset <= b.len());
                h.data_len().unwrap();
            }
        }
    }

    #[test]
    fn write_then_parse_round_trips() {
        for dtype in DType::ALL {
            for shape in [&[][..], &[0], &[1000], &[1000, 2, 3], &[usize::MAX, 0]] {
                let bytes = write_header(dtype, shape);
                assert_eq!(bytes.len() % 64, 0);
                assert_eq!(*bytes.last().unwrap(), b'\n');
                let h = parse(&bytes).unwrap();
                let stored = if dtype == DType::BF16 { DType::U16 } else { dtype };
                assert_eq!(
                    (h.dtype, h.shape.as_slice(), h.data_offset),
                    (stored, shape, bytes.len())
                );
            }
        }
    }

    #[test]
    fn oversized_header_falls_back_to_version_2() {
        let shape = vec![usize::MAX; 3000];
        let bytes = write_header(DType::U8, &shape);
        assert_eq!(&bytes[6..8], &[2, 0]);
        assert_eq!(bytes.len() % 64, 0);
        // The reader caps the rank, so this header is (correctly) refused.
        assert!(parse(&bytes).unwrap_err().detail().contains("more than 64"));
    }

    /// Shapes whose numpy headers exercise every branch: 0-d, one element, the growth spaces for
    /// 1 to 20 digits, and one whose unpadded preamble is already a multiple of 64 (numpy then
    /// adds 64 spaces, not 0).
    fn shapes_to_compare() -> Vec<Vec<usize>> {
        let mut shapes: Vec<Vec<usize>> = vec![
            vec![],
            vec![0],
            vec![1000],
            vec![1000, 2, 3],
            vec![1000, 10, 10],
            vec![10, 10, 10],
            vec![1099511627776, 0, 3, 3, 1, 65536, 255, 255, 10, 10, 10],
            vec![1; 31],
            vec![usize::MAX],
        ];
        let mut d = 1usize;
        for _ in 0..19 {
            shapes.push(vec![d, 7]);
            d *= 10;
        }
        shapes
    }

    /// Runs numpy's own header writer on `cases`; `None` when python3 or numpy is missing.
    fn numpy_headers(cases: &[(String, Vec<usize>)]) -> Option<Vec<Vec<u8>>> {
        use std::io::Write;
        use std::process::{Command, Stdio};
        const SCRIPT: &str = r#"
import io, sys
import numpy.lib.format as fmt
for line in sys.stdin.read().splitlines():
    descr, dims = line.split(";")
    shape = tuple(int(x) for x in dims.split(",") if x)
    buf = io.BytesIO()
    fmt.write_array_header_1_0(buf, {"descr": descr, "fortran_order": False, "shape": shape})
    print(buf.getvalue().hex())
"#;
        let input: String = cases
            .iter()
            .map(|(descr, shape)| {
                let dims: Vec<String> = shape.iter().map(usize::to_string).collect();
                format!("{descr};{}\n", dims.join(","))
            })
            .collect();
        let mut child = Command::new("python3")
            .args(["-c", SCRIPT])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .ok()?;
        child.stdin.take()?.write_all(input.as_bytes()).ok()?;
        let out = child.wait_with_output().ok()?;
        if !out.status.success() {
            eprintln!("python3/numpy failed: {}", String::from_utf8_lossy(&out.stderr));
            return None;
        }
        let text = String::from_utf8(out.stdout).ok()?;
        let decode = |hex: &str| {
            (0..hex.len())
                .step_by(2)
                .map(|i| u8::from_str_radix(&hex[i..i + 2], 16).expect("python printed hex"))
                .collect::<Vec<u8>>()
        };
        Some(text.lines().map(decode).collect())
    }

    #[test]
    fn write_header_matches_numpy_byte_for_byte() {
        let mut cases = Vec::new();
        for dtype in DType::ALL {
            for shape in shapes_to_compare() {
                cases.push((dtype, storage_descr(dtype).to_owned(), shape));
            }
        }
        let input: Vec<(String, Vec<usize>)> =
            cases.iter().map(|(_, d, s)| (d.clone(), s.clone())).collect();
        let Some(expected) = numpy_headers(&input) else {
            if std::env::var("STOWAGE_REQUIRE_PYTHON").as_deref() == Ok("1") {
                panic!("python3 with numpy is required (STOWAGE_REQUIRE_PYTHON=1) but unavailable");
            }
            crate::skip::report_skip(
                "prerequisite",
                "python3 with numpy not available (set STOWAGE_REQUIRE_PYTHON=1 to fail)",
            );
            return;
        };
        assert_eq!(expected.len(), cases.len());
        for ((dtype, descr, shape), numpy) in cases.iter().zip(&expected) {
            let ours = write_header(*dtype, shape);
            assert_eq!(
                ours,
                *numpy,
                "{descr} {shape:?}:\n ours  {:?}\n numpy {:?}",
                String::from_utf8_lossy(&ours),
                String::from_utf8_lossy(numpy)
            );
        }
        // The case where numpy pads with a full 64 spaces (not 0) really was exercised: 8 spare
        // spaces for the 13-digit first dimension, then 64 of alignment.
        let aligned =
            write_header(DType::F32, &[1099511627776, 0, 3, 3, 1, 65536, 255, 255, 10, 10, 10]);
        let trailing = aligned.iter().rev().skip(1).take_while(|&&b| b == b' ').count();
        assert_eq!(trailing, 8 + 64);
    }
}
