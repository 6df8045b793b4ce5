//! The value model the encoder works on: Python's JSON-able types.

use std::borrow::Cow;

/// A JSON-able Python value: what `json.dumps` accepts, including what `serde_json::Value` cannot
/// hold (`NaN`, `Infinity`, `-Infinity`, integers beyond the `u64` range).
///
/// Objects keep their entries in insertion order, like a Python `dict`; keys are expected to be
/// unique (a Python `dict` cannot hold the same key twice).
///
/// ```
/// use stowage_fingerprint::canonical_json::{to_python_json, PyJsonOptions, PyValue};
/// let config = PyValue::Dict(vec![
///     ("lr".into(), PyValue::Float(f64::NAN)),
///     ("seed".into(), PyValue::Int(1 << 70)),
/// ]);
/// assert_eq!(
///     to_python_json(&config, &PyJsonOptions::dnanet()),
///     r#"{"lr": NaN, "seed": 1180591620717411303424}"#
/// );
/// ```
#[derive(Debug, Clone, PartialEq)]
pub enum PyValue {
    /// `None`, written `null`.
    Null,
    /// `True`/`False`, written `true`/`false`.
    Bool(bool),
    /// An `int`, written in decimal.
    Int(i128),
    /// A `float`, written as Python's `repr(float)`; non-finite values as `NaN`, `Infinity`, `-Infinity`.
    Float(f64),
    /// A `str`.
    Str(String),
    /// A `list` (or tuple).
    List(Vec<PyValue>),
    /// A `dict` with string keys, in insertion order.
    Dict(Vec<(String, PyValue)>),
}

impl From<&serde_json::Value> for PyValue {
    /// Converts a `serde_json::Value` the way Python's `json.loads` would read its text: integers
    /// stay integers, numbers with a fraction or exponent become floats.
    ///
    /// ```
    /// use stowage_fingerprint::canonical_json::PyValue;
    /// assert_eq!(PyValue::from(&serde_json::json!([1, 1.0])), PyValue::List(vec![PyValue::Int(1), PyValue::Float(1.0)]));
    /// ```
    fn from(value: &serde_json::Value) -> Self {
        use serde_json::Value;
        match value {
            Value::Null => PyValue::Null,
            Value::Bool(flag) => PyValue::Bool(*flag),
            Value::Number(number) => {
                if let Some(int) = number.as_i64() {
                    PyValue::Int(int.into())
                } else if let Some(int) = number.as_u64() {
                    PyValue::Int(int.into())
                } else {
                    // Without serde_json's `arbitrary_precision` every other number is an f64.
                    PyValue::Float(number.as_f64().unwrap_or(f64::NAN))
                }
            }
            Value::String(text) => PyValue::Str(text.clone()),
            Value::Array(items) => PyValue::List(items.iter().map(PyValue::from).collect()),
            Value::Object(entries) => PyValue::Dict(
                entries.iter().map(|(key, item)| (key.clone(), PyValue::from(item))).collect(),
            ),
        }
    }
}

impl From<serde_json::Value> for PyValue {
    /// Same as `PyValue::from(&value)`.
    fn from(value: serde_json::Value) -> Self {
        PyValue::from(&value)
    }
}

/// Anything [`to_python_json`](super::to_python_json) and the fingerprint functions can encode:
/// [`serde_json::Value`] and [`PyValue`].
///
/// ```
/// use stowage_fingerprint::canonical_json::{PyValue, ToPyValue};
/// assert_eq!(*serde_json::json!(null).to_py_value(), PyValue::Null);
/// ```
pub trait ToPyValue {
    /// This value as a [`PyValue`], borrowed when it already is one.
    fn to_py_value(&self) -> Cow<'_, PyValue>;
}

impl ToPyValue for PyValue {
    fn to_py_value(&self) -> Cow<'_, PyValue> {
        Cow::Borrowed(self)
    }
}

impl ToPyValue for serde_json::Value {
    fn to_py_value(&self) -> Cow<'_, PyValue> {
        Cow::Owned(PyValue::from(self))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn numbers_convert_like_json_loads() {
        let value = json!([0, -1, u64::MAX, i64::MIN, 0.5, 1e300, -0.0]);
        assert_eq!(
            PyValue::from(&value),
            PyValue::List(vec![
                PyValue::Int(0),
                PyValue::Int(-1),
                PyValue::Int(u64::MAX.into()),
                PyValue::Int(i64::MIN.into()),
                PyValue::Float(0.5),
                PyValue::Float(1e300),
                PyValue::Float(-0.0),
            ])
        );
    }

    #[test]
    fn objects_keep_insertion_order() {
        let value: serde_json::Value = serde_json::from_str(r#"{"z": 1, "a": 2}"#).unwrap();
        let PyValue::Dict(entries) = PyValue::from(&value) else { panic!("not a dict") };
        let keys: Vec<&str> = entries.iter().map(|(key, _)| key.as_str()).collect();
        assert_eq!(keys, ["z", "a"]);
    }
}
