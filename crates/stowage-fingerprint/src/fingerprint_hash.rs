//! The fingerprint hash: configuration plus the stamp of every source file.

use crate::canonical_json::{PyJsonOptions, PyValue, ToPyValue, sha256_hex, to_python_json};

use super::SourceStamp;

/// The exact text DNANet hashes for a fingerprint:
/// `json.dumps({"config": config, "sources": stamps}, sort_keys=True)` with the stamps sorted by path.
///
/// Paths are compared as strings (Unicode code point order). Stamps with equal paths keep their
/// order. Useful to see *what* went into a hash when two sides disagree.
///
/// ```
/// use stowage_fingerprint::{fingerprint_digest_input, SourceStamp};
/// let stamps = [
///     SourceStamp::ContentHash { path: "b.hid".into(), content_hash: None },
///     SourceStamp::ContentHash { path: "a.hid".into(), content_hash: Some("ab".into()) },
/// ];
/// assert_eq!(
///     fingerprint_digest_input(&serde_json::json!({"root": "/é"}), &stamps),
///     r#"{"config": {"root": "/\u00e9"}, "sources": [{"content_hash": "ab", "path": "a.hid"}, {"content_hash": null, "path": "b.hid"}]}"#
/// );
/// ```
pub fn fingerprint_digest_input(
    config: &(impl ToPyValue + ?Sized),
    stamps: &[SourceStamp],
) -> String {
    let mut sorted: Vec<&SourceStamp> = stamps.iter().collect();
    sorted.sort_by(|left, right| left.path().cmp(right.path()));
    let sources = sorted.into_iter().map(|stamp| stamp.to_py_value().into_owned()).collect();
    let document = PyValue::Dict(vec![
        ("config".to_owned(), config.to_py_value().into_owned()),
        ("sources".to_owned(), PyValue::List(sources)),
    ]);
    to_python_json(&document, &PyJsonOptions::dnanet())
}

/// The DNANet fingerprint: full lowercase SHA-256 hex of [`fingerprint_digest_input`].
///
/// Unlike the [cache key](super::cache_key), it changes when a source file changes, so a cache whose
/// stored fingerprint differs must be rebuilt.
///
/// ```
/// use stowage_fingerprint::{fingerprint_hash, SourceStamp};
/// let config = serde_json::json!({"cache_version": 5});
/// let stamps = [SourceStamp::MtimeSize { path: "/d/a.hid".into(), mtime_ns: Some(1), size: Some(2) }];
/// // sha256(b'{"config": {"cache_version": 5}, "sources": [{"mtime_ns": 1, "path": "/d/a.hid", "size": 2}]}')
/// assert_eq!(fingerprint_hash(&config, &stamps), "f776f9d35ce0ff5b88ea79dba553bbf8392a79849c364f2a370ba349090c0327");
/// ```
pub fn fingerprint_hash(config: &(impl ToPyValue + ?Sized), stamps: &[SourceStamp]) -> String {
    sha256_hex(&fingerprint_digest_input(config, stamps))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stamp_order_does_not_matter() {
        let config = serde_json::json!({"a": 1});
        let a = SourceStamp::ContentHash { path: "a".into(), content_hash: None };
        let b = SourceStamp::ContentHash { path: "b".into(), content_hash: Some("x".into()) };
        assert_eq!(
            fingerprint_hash(&config, &[a.clone(), b.clone()]),
            fingerprint_hash(&config, &[b, a])
        );
    }

    #[test]
    fn paths_sort_by_code_point() {
        let stamps: Vec<SourceStamp> = ["\u{10000}", "\u{ff61}", "b", "B"]
            .into_iter()
            .map(|path| SourceStamp::ContentHash { path: path.into(), content_hash: None })
            .collect();
        let text = fingerprint_digest_input(&serde_json::json!(null), &stamps);
        let order: Vec<usize> = ["\"B\"", "\"b\"", "\\uff61", "\\ud800\\udc00"]
            .iter()
            .map(|p| text.find(p).unwrap())
            .collect();
        assert!(order.windows(2).all(|pair| pair[0] < pair[1]), "{text}");
    }
}
