//! DNANet's reference caches are fresh for the config and sources they were built from, and a
//! changed config field or source is named by the explanation.

use stowage_fingerprint::{FingerprintFile, SourceChange};
use stowage_memmap::{MemmapBackend, MemmapOptions};

#[test]
fn reference_caches_explain_fresh_and_stale_fingerprints() {
    let Some(set) = stowage_test_support::reference::reference_set("dnanet-memmap") else { return };
    for key in ["aed9b48500e9acfd", "ff9cde909fae61f6"] {
        let dir = set.join("cache_root").join(key);
        let cache = MemmapBackend::open_read_only(&dir, MemmapOptions::default()).unwrap();
        let stored = FingerprintFile::read(dir.join("fingerprint.json")).unwrap();

        let fresh = cache.check_fingerprint(&stored.config, &stored.sources).unwrap();
        assert!(fresh.is_fresh(), "{key}: {fresh}");

        let mut config = stored.config.clone();
        config["cache_version"] = serde_json::json!(6);
        let stale = cache.check_fingerprint(&config, &stored.sources).unwrap();
        assert!(!stale.is_fresh(), "{key}");
        assert_eq!(stale.config_changes.len(), 1, "{key}: {stale}");
        assert_eq!(stale.config_changes[0].to_string(), "cache_version: 5 -> 6");

        let fewer = &stored.sources[1..];
        let removed = cache.check_fingerprint(&stored.config, fewer).unwrap();
        assert_eq!(removed.source_changes, [SourceChange::Removed(stored.sources[0].clone())]);
    }
    let unfinished = set.join("cache_root").join("d3c3787192a40966");
    let cache = MemmapBackend::open_read_only(&unfinished, MemmapOptions::default()).unwrap();
    let err = cache.check_fingerprint(&serde_json::json!({}), &[]).unwrap_err();
    assert!(matches!(err, stowage_core::Error::NotFound { .. }), "{err}");
}
