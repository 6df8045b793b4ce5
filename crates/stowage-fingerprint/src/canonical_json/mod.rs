//! Python-compatible canonical JSON: the exact bytes Python's `json.dumps` emits.
//!
//! The original tools hash `json.dumps(...)` output (DNANet cache keys and fingerprints, aenet compat
//! signatures). Matching their hashes requires reproducing those bytes exactly: key order, separators,
//! `\uXXXX` escapes and Python's `repr(float)`. `serde_json` differs on several of these (it prints `1e-5`
//! and `1e16` where Python prints `1e-05` and `1e+16`, and it never escapes non-ASCII).
//!
//! - [`to_python_json`] encodes a [`serde_json::Value`] or a [`PyValue`] under [`PyJsonOptions`].
//! - [`PyValue`] can hold what `serde_json::Value` cannot: `NaN`, `Infinity`, integers beyond `u64`.
//! - [`python_float_repr`] is Python's `repr(float)` on its own, [`write_python_string`] a JSON
//!   string literal on its own (for writers that emit a fixed-shape line without building a value).
//! - [`sha256_hex`] hashes the encoded text the way the original tools do.
//!
//! ```
//! use stowage_fingerprint::canonical_json::{to_python_json, PyJsonOptions};
//! let payload = serde_json::json!({"root": "/srv/casework_é", "scale": 1e-5, "n": 3});
//! assert_eq!(
//!     to_python_json(&payload, &PyJsonOptions::dnanet()),
//!     r#"{"n": 3, "root": "/srv/casework_\u00e9", "scale": 1e-05}"#
//! );
//! ```

mod encoder;
mod float_repr;
mod options;
mod string_escape;
mod value;

pub use float_repr::python_float_repr;
pub use options::{PyJsonOptions, Separators};
pub use string_escape::write_python_string;
pub use value::{PyValue, ToPyValue};

use sha2::{Digest, Sha256};

/// Encodes `value` exactly as Python's `json.dumps(value, **options)` would.
///
/// Accepts a [`serde_json::Value`] or a [`PyValue`] (for `NaN`/`Infinity` or integers beyond `u64`).
///
/// ```
/// use stowage_fingerprint::canonical_json::{to_python_json, PyJsonOptions, PyValue};
/// let compact = PyJsonOptions::aenet_compat();
/// assert_eq!(to_python_json(&serde_json::json!({"b": [1, 2.0], "a": null}), &compact), r#"{"a":null,"b":[1,2.0]}"#);
/// let with_nan = PyValue::List(vec![PyValue::Float(f64::NAN), PyValue::Float(f64::NEG_INFINITY)]);
/// assert_eq!(to_python_json(&with_nan, &compact), "[NaN,-Infinity]");
/// ```
pub fn to_python_json(value: &(impl ToPyValue + ?Sized), options: &PyJsonOptions) -> String {
    encoder::encode(&value.to_py_value(), options)
}

/// Lowercase hex SHA-256 of the UTF-8 bytes of `text`, as Python's
/// `hashlib.sha256(text.encode("utf-8")).hexdigest()`.
///
/// ```
/// assert_eq!(
///     stowage_fingerprint::canonical_json::sha256_hex(""),
///     "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
/// );
/// ```
pub fn sha256_hex(text: &str) -> String {
    lower_hex(&Sha256::digest(text.as_bytes()))
}

/// Lowercase hex of `bytes`, two digits per byte.
pub(crate) fn lower_hex(bytes: &[u8]) -> String {
    use std::fmt::Write;
    let mut out = String::with_capacity(bytes.len() * 2);
    for byte in bytes {
        // Writing to a String cannot fail.
        let _ = write!(out, "{byte:02x}");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn sha256_hex_of_known_text() {
        assert_eq!(
            sha256_hex("abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }

    #[test]
    fn python_default_options_keep_insertion_order() {
        let value = json!({"b": 1, "a": [true, false, null]});
        assert_eq!(
            to_python_json(&value, &PyJsonOptions::default()),
            r#"{"b": 1, "a": [true, false, null]}"#
        );
    }

    #[test]
    fn serde_value_and_py_value_encode_alike() {
        let value =
            json!({"x": [1.5, -0.0, 1e300, 18446744073709551615u64, -9223372036854775808i64]});
        let py = PyValue::from(&value);
        let options = PyJsonOptions::dnanet();
        assert_eq!(to_python_json(&value, &options), to_python_json(&py, &options));
        assert_eq!(
            to_python_json(&value, &options),
            r#"{"x": [1.5, -0.0, 1e+300, 18446744073709551615, -9223372036854775808]}"#
        );
    }
}
