//! How a bytes field is stored in a `_blob` column, so that torchcachex can read every row.
//!
//! torchcachex decodes every `_blob` cell with `pickle.loads`: a cell that is not a pickle (raw
//! bytes), a null cell, or its own `b""` placeholder for a missing value raises. So a cache stowage
//! writes stores each bytes value as a pickle, in one of two encodings recorded in the commit log
//! header ([`crate::commit_log::CacheHeader`]):
//!
//! - [`BlobEncoding::PickledBytes`] (the default): each value is `pickle.dumps(value)` of the Python
//!   `bytes` object, exactly as CPython's C pickler writes it at protocol 4 ([`pickle_bytes`]); a
//!   null is `pickle.dumps(None)`. torchcachex returns the `bytes` (or `None`); stowage reads the
//!   bytes back with a strict parser ([`unpickle_bytes`]). A pickle of anything else in such a
//!   column (torchcachex appended an object that is not `bytes`) is refused as
//!   [`Error::Unsupported`](stowage_core::Error::Unsupported), never returned as if it were the
//!   value.
//! - [`BlobEncoding::VerbatimPickles`]: each value already is a pickle (a torchcachex cache's blobs
//!   being converted) and is stored as it is; [`check_pickle`] makes sure it is one at least
//!   structurally (protocol opcode first, STOP last). A null is the pickle of `None`, marked null by
//!   the row's null column ([`crate::encode`]). This is also how torchcachex's own caches read
//!   ([`crate::reader::CacheReader::open`]).
//! - [`BlobEncoding::Raw`]: the bytes as they are, what stowage wrote before commit log version 3.
//!   Those caches keep reading this way; new caches cannot choose it (torchcachex cannot read it).
//!
//! In every encoding an Arrow null and torchcachex's `b""` placeholder read as null (Raw excepted,
//! where `b""` is an empty value).

use serde::{Deserialize, Serialize};

/// How a cache stores its bytes fields: each value as a pickle torchcachex can load, in one of the
/// two encodings below, recorded in the commit log header.
///
/// ```
/// use stowage_arrow::BlobEncoding;
/// assert_eq!(BlobEncoding::default(), BlobEncoding::PickledBytes);
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BlobEncoding {
    /// Each value stored as the pickle of a Python `bytes` object; torchcachex reads `bytes`.
    #[default]
    PickledBytes,
    /// Each value already is a pickle, stored as it is; torchcachex reads the pickled object.
    VerbatimPickles,
    /// The bytes as they are (caches written before commit log version 3; torchcachex cannot read
    /// them). Read only.
    Raw,
}

impl BlobEncoding {
    /// The name in the commit log header and in messages.
    pub fn name(self) -> &'static str {
        match self {
            BlobEncoding::PickledBytes => "pickled_bytes",
            BlobEncoding::VerbatimPickles => "verbatim_pickles",
            BlobEncoding::Raw => "raw",
        }
    }
}

/// `pickle.dumps(None)` at protocol 4: PROTO 4, NONE, STOP (too short to be framed).
pub const PICKLED_NONE: &[u8] = b"\x80\x04N.";

const PROTO: u8 = 0x80;
const FRAME: u8 = 0x95;
const SHORT_BINBYTES: u8 = b'C';
const BINBYTES: u8 = b'B';
const BINBYTES8: u8 = 0x8e;
const NONE: u8 = b'N';
const MEMOIZE: u8 = 0x94;
const BINPUT: u8 = b'q';
const LONG_BINPUT: u8 = b'r';
const STOP: u8 = b'.';
/// CPython's `FRAME_SIZE_TARGET`: a bytes payload this large is written outside any frame.
const FRAME_SIZE_TARGET: usize = 64 * 1024;

/// The opcodes before a `bytes` payload and after it that [`pickle_bytes`] writes around a payload
/// of `len` bytes: `(head, tail)`, so that a writer can lay the pickle out without copying the
/// payload twice.
///
/// ```
/// use stowage_arrow::test_support::blob_encoding::pickle_parts;
/// let (head, tail) = pickle_parts(3);
/// assert_eq!(head, b"\x80\x04\x95\x07\x00\x00\x00\x00\x00\x00\x00C\x03");
/// assert_eq!(&tail, b"\x94.");
/// ```
pub fn pickle_parts(len: usize) -> (Vec<u8>, [u8; 2]) {
    let mut opcode = Vec::with_capacity(9);
    if len <= 0xff {
        opcode.extend_from_slice(&[SHORT_BINBYTES, len as u8]);
    } else if let Ok(len) = u32::try_from(len) {
        opcode.push(BINBYTES);
        opcode.extend_from_slice(&len.to_le_bytes());
    } else {
        opcode.push(BINBYTES8);
        opcode.extend_from_slice(&(len as u64).to_le_bytes());
    }
    let mut head = vec![PROTO, 4];
    // CPython's C pickler frames everything after PROTO, unless the payload is large enough to
    // bypass the frame buffer: then the opcode and payload are written unframed, and MEMOIZE and
    // STOP (2 bytes, under the 4-byte minimum) get no frame either.
    if len < FRAME_SIZE_TARGET {
        let frame = (opcode.len() + len + 2) as u64;
        head.push(FRAME);
        head.extend_from_slice(&frame.to_le_bytes());
    }
    head.extend_from_slice(&opcode);
    (head, [MEMOIZE, STOP])
}

/// `pickle.dumps(value)` of the Python `bytes` object `value`, byte for byte as CPython writes it
/// at protocol 4 (its default protocol through Python 3.13).
///
/// ```
/// use stowage_arrow::test_support::blob_encoding::{pickle_bytes, unpickle_bytes};
/// assert_eq!(pickle_bytes(b"abc"), b"\x80\x04\x95\x07\0\0\0\0\0\0\0C\x03abc\x94.");
/// assert_eq!(unpickle_bytes(&pickle_bytes(b"abc")).unwrap(), Some(&b"abc"[..]));
/// ```
#[cfg(any(test, feature = "fuzzing", feature = "test-support"))]
pub fn pickle_bytes(value: &[u8]) -> Vec<u8> {
    let (head, tail) = pickle_parts(value.len());
    let mut out = Vec::with_capacity(head.len() + value.len() + tail.len());
    out.extend_from_slice(&head);
    out.extend_from_slice(value);
    out.extend_from_slice(&tail);
    out
}

/// The payload of a pickle of a Python `bytes` object (`Some`) or of `None` (`None`), as any
/// CPython pickler writes them at protocols 3 to 5 (with or without frames, memoized with MEMOIZE,
/// BINPUT or LONG_BINPUT); `None` alone is also accepted at protocol 2.
///
/// Errors: [`UnpickleError::NotBytes`] saying what the pickle holds instead (`a pickled str`,
/// `a pickled object of class …`); [`UnpickleError::Broken`] saying where it breaks the grammar
/// (not a pickle, cut off, bytes after STOP). The caller names the key and field.
///
/// ```
/// use stowage_arrow::test_support::blob_encoding::{UnpickleError, unpickle_bytes};
/// assert_eq!(unpickle_bytes(b"\x80\x04N.").unwrap(), None);
/// // pickle.dumps("abc"): a str, not bytes.
/// let err = unpickle_bytes(b"\x80\x04\x95\x07\0\0\0\0\0\0\0\x8c\x03abc\x94.").unwrap_err();
/// assert!(matches!(&err, UnpickleError::NotBytes(why) if why.contains("a pickled str")), "{err}");
/// ```
pub fn unpickle_bytes(pickle: &[u8]) -> Result<Option<&[u8]>, UnpickleError> {
    let broken = UnpickleError::Broken;
    let mut parser = Parser { bytes: pickle, at: 0 };
    let protocol = parser.protocol().map_err(broken)?;
    let mut value: Option<Option<&[u8]>> = None;
    let mut memoized = false;
    loop {
        let at = parser.at;
        let opcode =
            parser.byte().ok_or_else(|| broken(format!("a pickle cut off at byte {at}")))?;
        match opcode {
            FRAME if protocol >= 4 => {
                let len = parser.u64().map_err(broken)?;
                let end = (parser.at as u64).checked_add(len);
                if end.is_none_or(|end| end > pickle.len() as u64) {
                    return Err(broken(format!(
                        "a pickle whose frame at byte {at} runs past its end"
                    )));
                }
            }
            SHORT_BINBYTES | BINBYTES | BINBYTES8 if value.is_none() && protocol >= 3 => {
                let len = match opcode {
                    SHORT_BINBYTES => parser.byte().map(u64::from).ok_or("a pickle cut off".into()),
                    BINBYTES => parser.u32().map(u64::from),
                    _ => parser.u64(),
                };
                value = Some(Some(parser.take(len.map_err(broken)?).map_err(broken)?));
            }
            NONE if value.is_none() => value = Some(None),
            MEMOIZE if value.is_some() && !memoized && protocol >= 4 => memoized = true,
            BINPUT | LONG_BINPUT if value.is_some() && !memoized => {
                let len = if opcode == BINPUT { 1 } else { 4 };
                parser.take(len).map_err(broken)?;
                memoized = true;
            }
            STOP if value.is_some() => {
                if parser.at != pickle.len() {
                    let extra = pickle.len() - parser.at;
                    return Err(broken(format!("a pickle followed by {extra} more bytes")));
                }
                return Ok(value.expect("checked"));
            }
            other if value.is_none() => {
                return Err(UnpickleError::NotBytes(describe(pickle, other, at)));
            }
            other => {
                return Err(UnpickleError::NotBytes(format!(
                    "a pickle holding more than one value (opcode 0x{other:02x} at byte {at})"
                )));
            }
        }
    }
}

/// Why [`unpickle_bytes`] refused a pickle.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UnpickleError {
    /// A well-formed pickle of something other than Python `bytes` or `None`: what it holds.
    NotBytes(String),
    /// Not a complete pickle: where it breaks.
    Broken(String),
}

impl std::fmt::Display for UnpickleError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            UnpickleError::NotBytes(why) | UnpickleError::Broken(why) => f.write_str(why),
        }
    }
}

/// Checks that `value` is at least structurally a pickle, as [`BlobEncoding::VerbatimPickles`]
/// requires: a protocol opcode (protocol 2 to 5) first and STOP last.
///
/// ```
/// use stowage_arrow::test_support::blob_encoding::check_pickle;
/// assert!(check_pickle(b"\x80\x04N.").is_ok());
/// assert!(check_pickle(b"raw bytes").unwrap_err().contains("not a pickle"));
/// ```
pub fn check_pickle(value: &[u8]) -> Result<(), String> {
    match value {
        [] => Err("empty (b\"\" is torchcachex's placeholder for a missing value, which \
                   torchcachex itself cannot read back; put null instead)"
            .into()),
        [PROTO, 2..=5, .., STOP] => Ok(()),
        [first, ..] => Err(format!(
            "not a pickle ({} bytes, first 0x{first:02x}, last 0x{:02x}; a pickle starts with \
             PROTO 0x80 and a protocol from 2 to 5 and ends with STOP 0x2e)",
            value.len(),
            value[value.len() - 1]
        )),
    }
}

/// What an opcode that starts a value other than `bytes` or `None` stands for; for an object
/// (protocol 4: module and class name as two strs, then STACK_GLOBAL) its class.
fn describe(pickle: &[u8], opcode: u8, at: usize) -> String {
    if let Some(class) = stack_global(pickle, at) {
        return format!("a pickled object of class {class} (at byte {at}), not Python bytes");
    }
    let what = match opcode {
        b'X' | b'V' | 0x8c | 0x8d => "a pickled str",
        b'I' | b'J' | b'K' | b'M' | b'L' | 0x8a | 0x8b => "a pickled int",
        b'F' | b'G' => "a pickled float",
        0x88 | 0x89 => "a pickled bool",
        b'}' => "a pickled dict",
        b']' | b'l' => "a pickled list",
        b')' | b't' | 0x85 | 0x86 | 0x87 => "a pickled tuple",
        b'(' => "a pickled container or object",
        0x8f..=0x91 => "a pickled set",
        b'c' | 0x93 | b'i' => "a pickled object of a class",
        0x96 => "a pickled bytearray",
        0x97 => "a pickle with an out-of-band buffer",
        b'U' | b'T' => "a pickled str of protocol 2 or older",
        _ => {
            return format!(
                "a pickle of something other than bytes (opcode 0x{opcode:02x} at byte {at})"
            );
        }
    };
    format!("{what} (opcode 0x{opcode:02x} at byte {at}), not of Python bytes")
}

/// `module.name` when the pickle from `at` on is SHORT_BINUNICODE module, SHORT_BINUNICODE name
/// (each optionally memoized), STACK_GLOBAL: how protocol 4 names an object's class.
fn stack_global(pickle: &[u8], at: usize) -> Option<String> {
    let mut parser = Parser { bytes: pickle, at };
    let mut text = || -> Option<String> {
        if parser.byte()? != 0x8c {
            return None;
        }
        let len = parser.byte()?;
        let text = String::from_utf8_lossy(parser.take(u64::from(len)).ok()?).into_owned();
        if parser.bytes.get(parser.at) == Some(&MEMOIZE) {
            parser.at += 1;
        }
        Some(text)
    };
    let (module, name) = (text()?, text()?);
    (parser.byte()? == 0x93).then(|| format!("{module}.{name}"))
}

/// A cursor over a pickle's bytes.
struct Parser<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Parser<'a> {
    fn protocol(&mut self) -> Result<u8, String> {
        match self.bytes {
            [] => Err("empty".into()),
            [PROTO, protocol @ 2..=5, ..] => {
                self.at = 2;
                Ok(*protocol)
            }
            [PROTO, protocol, ..] => Err(format!("a pickle of unknown protocol {protocol}")),
            [first, ..] => Err(format!(
                "not a pickle ({} bytes, first 0x{first:02x}; a pickle of protocol 2 or later \
                 starts with PROTO 0x80)",
                self.bytes.len()
            )),
        }
    }

    fn byte(&mut self) -> Option<u8> {
        let byte = *self.bytes.get(self.at)?;
        self.at += 1;
        Some(byte)
    }

    fn take(&mut self, len: u64) -> Result<&'a [u8], String> {
        let end = usize::try_from(len).ok().and_then(|len| self.at.checked_add(len));
        match end.filter(|&end| end <= self.bytes.len()) {
            Some(end) => {
                let taken = &self.bytes[self.at..end];
                self.at = end;
                Ok(taken)
            }
            None => Err(format!(
                "a pickle cut off: {len} bytes announced at byte {}, {} left",
                self.at,
                self.bytes.len() - self.at
            )),
        }
    }

    fn u32(&mut self) -> Result<u32, String> {
        Ok(u32::from_le_bytes(self.take(4)?.try_into().expect("4 bytes")))
    }

    fn u64(&mut self) -> Result<u64, String> {
        Ok(u64::from_le_bytes(self.take(8)?.try_into().expect("8 bytes")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_size_class_round_trips() {
        for len in [0, 1, 255, 256, 65_535, 65_536, 65_537, 200_000] {
            let value: Vec<u8> = (0..len).map(|i| (i * 7) as u8).collect();
            let pickle = pickle_bytes(&value);
            assert_eq!(unpickle_bytes(&pickle).unwrap(), Some(value.as_slice()), "{len}");
            assert!(check_pickle(&pickle).is_ok());
        }
        assert_eq!(unpickle_bytes(PICKLED_NONE).unwrap(), None);
    }

    /// Protocols 3 and 5 and the memo opcodes other picklers use read too.
    #[test]
    fn other_protocols_and_memo_opcodes_are_accepted() {
        // pickle.dumps(b"ab", protocol=3)
        assert_eq!(unpickle_bytes(b"\x80\x03C\x02abq\x00.").unwrap(), Some(&b"ab"[..]));
        // protocol 5, unframed large form with LONG_BINPUT
        assert_eq!(
            unpickle_bytes(b"\x80\x05B\x01\x00\x00\x00zr\x00\x00\x00\x00.").unwrap(),
            Some(&b"z"[..])
        );
        assert_eq!(unpickle_bytes(b"\x80\x02N.").unwrap(), None);
    }

    #[test]
    fn anything_else_is_refused_saying_what_it_is() {
        let cases: [(&[u8], &str); 10] = [
            (b"", "empty"),
            (b"raw", "not a pickle"),
            (b"\x80\x09N.", "unknown protocol 9"),
            (b"\x80\x04K\x05.", "a pickled int"),
            (b"\x80\x04}\x94.", "a pickled dict"),
            (b"\x80\x04\x8c\x08builtins\x94\x8c\x03set\x94\x93\x94.", "class builtins.set"),
            (b"\x80\x04C\x05ab", "cut off"),
            (b"\x80\x04C\x01a\x94.extra", "more bytes"),
            (b"\x80\x04C\x01aC\x01b.", "more than one value"),
            (b"\x80\x04\x95\xff\x00\x00\x00\x00\x00\x00\x00N.", "runs past its end"),
        ];
        for (pickle, needle) in cases {
            let err = unpickle_bytes(pickle).unwrap_err();
            assert!(err.to_string().contains(needle), "{pickle:?}: {err}");
            let broken = ["empty", "not a pickle", "unknown", "cut off", "more bytes", "runs past"];
            assert_eq!(
                matches!(err, UnpickleError::Broken(_)),
                broken.iter().any(|b| needle.contains(b)),
                "{pickle:?}: {err:?}"
            );
        }
        let class = unpickle_bytes(b"\x80\x04c__main__\nX\n\x94.").unwrap_err();
        assert!(class.to_string().contains("a class"), "{class}");
        assert!(check_pickle(b"").unwrap_err().contains("placeholder"));
        assert!(check_pickle(b"\x80\x04N").is_err());
    }
}
