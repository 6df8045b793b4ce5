//! Chained fingerprints: one identity per derived state of a dataset (as in Hugging Face datasets).

use serde_json::Value;
use xxhash_rust::xxh64::xxh64;

use crate::canonical_json::{PyJsonOptions, to_python_json};

/// Tag that starts every chained-fingerprint input, so that a future change of the scheme cannot
/// collide with this one.
const SCHEME_TAG: &str = "stowage.chain.v1";

/// The fingerprint of the dataset state produced by applying `transform` with `params` to the state
/// whose fingerprint is `previous`. The same chain of transforms on the same data always gives the
/// same fingerprint, so its cache can be reused; any difference gives a new one.
///
/// # Scheme (version 1)
/// 1. Parameters equal to their default are dropped, so that spelling out a default does not change
///    the fingerprint: when both `params` and `defaults` are objects, every top-level entry of
///    `params` whose value equals (as a JSON value: `1` and `1.0` differ) the entry of the same key in
///    `defaults` is removed. Otherwise `params` is used as it is.
/// 2. The input text is the JSON list `["stowage.chain.v1", previous, transform, params]` written as
///    Python's `json.dumps(..., sort_keys=True, separators=(",", ":"))` (ASCII escapes, Python float
///    repr; see [`PyJsonOptions::aenet_compat`]).
/// 3. The fingerprint is xxh64 with seed 0 over the UTF-8 bytes of that text, as 16 lowercase hex
///    digits.
///
/// ```
/// use stowage_fingerprint::chain_fingerprint;
/// use serde_json::json;
/// let defaults = json!({"batched": false, "num_proc": 1});
/// let mapped = chain_fingerprint("a1b2c3d4e5f60718", "map:tokenize", &json!({"num_proc": 1, "max_len": 128}), &defaults);
///
/// // The exact bytes that were hashed: num_proc equals its default and was dropped.
/// let input = r#"["stowage.chain.v1","a1b2c3d4e5f60718","map:tokenize",{"max_len":128}]"#;
/// assert_eq!(mapped, format!("{:016x}", xxhash_rust::xxh64::xxh64(input.as_bytes(), 0)));
///
/// // Spelling out a default changes nothing; a real parameter change does.
/// assert_eq!(mapped, chain_fingerprint("a1b2c3d4e5f60718", "map:tokenize", &json!({"max_len": 128}), &defaults));
/// assert_ne!(mapped, chain_fingerprint("a1b2c3d4e5f60718", "map:tokenize", &json!({"max_len": 64}), &defaults));
/// ```
pub fn chain_fingerprint(
    previous: &str,
    transform: &str,
    params: &Value,
    defaults: &Value,
) -> String {
    let params = without_default_entries(params, defaults);
    let input = Value::Array(vec![SCHEME_TAG.into(), previous.into(), transform.into(), params]);
    let text = to_python_json(&input, &PyJsonOptions::aenet_compat());
    format!("{:016x}", xxh64(text.as_bytes(), 0))
}

fn without_default_entries(params: &Value, defaults: &Value) -> Value {
    match (params, defaults) {
        (Value::Object(params), Value::Object(defaults)) => Value::Object(
            params
                .iter()
                .filter(|(key, value)| defaults.get(*key) != Some(*value))
                .map(|(key, value)| (key.clone(), value.clone()))
                .collect(),
        ),
        _ => params.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn known_answer() {
        // xxhash.xxh64(b'["stowage.chain.v1","0000000000000000","shuffle",{"seed":42}]', seed=0).hexdigest()
        assert_eq!(
            chain_fingerprint("0000000000000000", "shuffle", &json!({"seed": 42}), &json!({})),
            "210ae2f7259312ff"
        );
    }

    #[test]
    fn previous_transform_and_params_all_matter() {
        let base = chain_fingerprint("p", "t", &json!({"a": 1}), &json!(null));
        assert_ne!(base, chain_fingerprint("q", "t", &json!({"a": 1}), &json!(null)));
        assert_ne!(base, chain_fingerprint("p", "u", &json!({"a": 1}), &json!(null)));
        assert_ne!(base, chain_fingerprint("p", "t", &json!({"a": 2}), &json!(null)));
        assert_eq!(base.len(), 16);
    }

    #[test]
    fn float_default_does_not_drop_an_int_param() {
        let defaults = json!({"lr": 1.0});
        assert_ne!(
            chain_fingerprint("p", "t", &json!({"lr": 1}), &defaults),
            chain_fingerprint("p", "t", &json!({}), &defaults)
        );
        assert_eq!(
            chain_fingerprint("p", "t", &json!({"lr": 1.0}), &defaults),
            chain_fingerprint("p", "t", &json!({}), &defaults)
        );
    }

    #[test]
    fn parameter_order_does_not_matter() {
        let reordered: Value = serde_json::from_str(r#"{"b": 2, "a": 1}"#).unwrap();
        assert_eq!(
            chain_fingerprint("p", "t", &json!({"a": 1, "b": 2}), &json!({})),
            chain_fingerprint("p", "t", &reordered, &json!({}))
        );
    }

    #[test]
    fn non_object_params_are_hashed_as_they_are() {
        assert_ne!(
            chain_fingerprint("p", "t", &json!([1, 2]), &json!([1, 2])),
            chain_fingerprint("p", "t", &json!([]), &json!([1, 2]))
        );
    }
}
