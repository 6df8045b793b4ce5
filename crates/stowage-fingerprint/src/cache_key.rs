//! The cache key: which directory a configuration's cache lives in.

use crate::canonical_json::{PyJsonOptions, ToPyValue, sha256_hex, to_python_json};

/// The DNANet cache key of `payload`: the first 16 lowercase hex digits of
/// `sha256(json.dumps(payload, sort_keys=True).encode("utf-8"))`.
///
/// Any change to the configuration gives a different key, so it routes to a fresh cache directory.
/// Accepts a [`serde_json::Value`] or a [`PyValue`](crate::canonical_json::PyValue) (for configs
/// holding `NaN` or `Infinity`).
///
/// ```
/// use stowage_fingerprint::cache_key;
/// let payload = serde_json::json!({"b": 1, "a": "é"});
/// // sha256(b'{"a": "\\u00e9", "b": 1}').hexdigest()[:16]
/// assert_eq!(cache_key(&payload), "d73913efb309b598");
/// ```
pub fn cache_key(payload: &(impl ToPyValue + ?Sized)) -> String {
    let mut digest = sha256_hex(&to_python_json(payload, &PyJsonOptions::dnanet()));
    digest.truncate(16);
    digest
}

#[cfg(test)]
mod tests {
    use super::cache_key;
    use crate::canonical_json::PyValue;

    #[test]
    fn key_ignores_insertion_order() {
        let first = serde_json::json!({"a": 1, "b": [1.5, null]});
        let second: serde_json::Value =
            serde_json::from_str(r#"{"b": [1.5, null], "a": 1}"#).unwrap();
        assert_eq!(cache_key(&first), cache_key(&second));
    }

    #[test]
    fn int_and_float_give_different_keys_like_python() {
        assert_ne!(
            cache_key(&serde_json::json!({"a": 1})),
            cache_key(&serde_json::json!({"a": 1.0}))
        );
    }

    #[test]
    fn nan_config_has_a_key() {
        // sha256(b'{"x": NaN}').hexdigest()[:16]
        let payload = PyValue::Dict(vec![("x".into(), PyValue::Float(f64::NAN))]);
        assert_eq!(cache_key(&payload), "baab068bbf85ddff");
    }
}
