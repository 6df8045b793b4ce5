//! The `json.dumps` keyword arguments that change the output bytes.

/// The `separators=(item, key)` argument of `json.dumps`.
///
/// ```
/// use stowage_fingerprint::canonical_json::Separators;
/// assert_eq!(Separators::Default.item(), ", ");
/// assert_eq!(Separators::Compact.key(), ":");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Separators {
    /// `(", ", ": ")`: Python's default when `indent` is not given.
    #[default]
    Default,
    /// `(",", ":")`: the usual "compact" form (`separators=(",", ":")`).
    Compact,
    /// `(",", ": ")`: Python's default when `indent` is given (no trailing space before each newline).
    Indented,
}

impl Separators {
    /// The text between two items of a list or two entries of an object.
    ///
    /// ```
    /// assert_eq!(stowage_fingerprint::canonical_json::Separators::Indented.item(), ",");
    /// ```
    pub fn item(self) -> &'static str {
        match self {
            Separators::Default => ", ",
            Separators::Compact | Separators::Indented => ",",
        }
    }

    /// The text between an object key and its value.
    ///
    /// ```
    /// assert_eq!(stowage_fingerprint::canonical_json::Separators::Indented.key(), ": ");
    /// ```
    pub fn key(self) -> &'static str {
        match self {
            Separators::Default | Separators::Indented => ": ",
            Separators::Compact => ":",
        }
    }
}

/// The options of Python's `json.dumps` that [`to_python_json`](super::to_python_json) reproduces.
///
/// `Default` is `json.dumps(value)` with no keyword arguments. `allow_nan` is always Python's default
/// (`True`): non-finite floats are written as `NaN`, `Infinity` and `-Infinity`.
///
/// ```
/// use stowage_fingerprint::canonical_json::{PyJsonOptions, Separators};
/// let options = PyJsonOptions::dnanet();
/// assert!(options.sort_keys && options.ensure_ascii);
/// assert_eq!(options.separators, Separators::Default);
/// assert_eq!(options.indent, None);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PyJsonOptions {
    /// `sort_keys=True`: object keys in Unicode code point order (Python's `str` order).
    pub sort_keys: bool,
    /// `separators=`.
    pub separators: Separators,
    /// `ensure_ascii=True`: every non-ASCII character escaped as `\uXXXX`.
    pub ensure_ascii: bool,
    /// `indent=N`: one item per line, indented by `N` spaces per level (`Some(0)` only adds newlines).
    pub indent: Option<usize>,
}

impl Default for PyJsonOptions {
    /// `json.dumps(value)`: insertion order, `", "`/`": "`, ASCII escapes, one line.
    fn default() -> Self {
        PyJsonOptions {
            sort_keys: false,
            separators: Separators::Default,
            ensure_ascii: true,
            indent: None,
        }
    }
}

impl PyJsonOptions {
    /// `json.dumps(value, sort_keys=True)`: the form DNANet hashes for cache keys and fingerprints.
    ///
    /// ```
    /// use stowage_fingerprint::canonical_json::{to_python_json, PyJsonOptions};
    /// let text = to_python_json(&serde_json::json!({"b": 1, "a": "ë"}), &PyJsonOptions::dnanet());
    /// assert_eq!(text, r#"{"a": "\u00eb", "b": 1}"#);
    /// ```
    pub fn dnanet() -> Self {
        PyJsonOptions { sort_keys: true, ..PyJsonOptions::default() }
    }

    /// `json.dumps(value, sort_keys=True, separators=(",", ":"))`: the form aenet hashes for its
    /// compat signature.
    ///
    /// ```
    /// use stowage_fingerprint::canonical_json::{to_python_json, PyJsonOptions};
    /// let text = to_python_json(&serde_json::json!({"b": [1, 2], "a": 0.5}), &PyJsonOptions::aenet_compat());
    /// assert_eq!(text, r#"{"a":0.5,"b":[1,2]}"#);
    /// ```
    pub fn aenet_compat() -> Self {
        PyJsonOptions {
            sort_keys: true,
            separators: Separators::Compact,
            ..PyJsonOptions::default()
        }
    }

    /// `json.dumps(value, indent=spaces)`: insertion order, one item per line, ASCII escapes; the form
    /// DNANet writes `fingerprint.json` in.
    ///
    /// ```
    /// use stowage_fingerprint::canonical_json::{to_python_json, PyJsonOptions};
    /// let text = to_python_json(&serde_json::json!({"a": [1], "b": {}}), &PyJsonOptions::indented(2));
    /// assert_eq!(text, "{\n  \"a\": [\n    1\n  ],\n  \"b\": {}\n}");
    /// ```
    pub fn indented(spaces: usize) -> Self {
        PyJsonOptions {
            separators: Separators::Indented,
            indent: Some(spaces),
            ..PyJsonOptions::default()
        }
    }
}
