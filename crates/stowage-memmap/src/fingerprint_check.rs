//! Checking a cache's `fingerprint.json` against the configuration and sources a caller has now.

use crate::MemmapBackend;
use stowage_core::{Error, Result};
use stowage_fingerprint::{Explanation, FingerprintFile, SourceStamp, explain};

impl MemmapBackend {
    /// Whether this cache was built from `config` and `sources` (DNANet's rule: the recomputed
    /// hash equals the stored one), and if not, which config fields and which sources differ.
    ///
    /// Stamps must be of the kind the cache was fingerprinted with (`mtime_ns`/`size`, or
    /// `content_hash`). Errors: `NotFound` when the cache has no `fingerprint.json` (an
    /// unfinished cache), `Corrupted` when it does not parse.
    ///
    /// ```
    /// use stowage_core::{Backend, DType, Sample, Schema, ShapeRule, Tensor};
    /// use stowage_memmap::{MemmapBackend, MemmapOptions};
    ///
    /// let dir = tempfile::tempdir()?;
    /// let schema = Schema::new().tensor("x", DType::U8, ShapeRule::Fixed(vec![2]));
    /// let mut cache = MemmapBackend::create(dir.path(), &schema, MemmapOptions::default())?;
    /// cache.put("a", &Sample::new().with("x", Tensor::from_slice(&[2], &[1u8, 2])?))?;
    /// let config = serde_json::json!({"scaling": {"resolution": 32}});
    /// cache.finalize_with_fingerprint(config.clone(), Vec::new())?;
    ///
    /// assert!(cache.check_fingerprint(&config, &[])?.is_fresh());
    /// let changed = serde_json::json!({"scaling": {"resolution": 64}});
    /// let why = cache.check_fingerprint(&changed, &[])?;
    /// assert_eq!(why.config_changes[0].to_string(), "scaling.resolution: 32 -> 64");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn check_fingerprint(
        &self,
        config: &serde_json::Value,
        sources: &[SourceStamp],
    ) -> Result<Explanation> {
        let path = self.layout().fingerprint();
        if !path.exists() {
            return Err(Error::NotFound {
                what: format!("{} (the cache was never finalized)", path.display()),
            });
        }
        let stored = FingerprintFile::read(&path)?;
        Ok(explain(&stored, config, sources))
    }
}
