//! Cache keys and fingerprints against the caches DNANet itself wrote (`dnanet-memmap` reference set).
//!
//! Reads `$STOWAGE_REFERENCE_DIR/dnanet-memmap/manifest.json` (default: `../shared/reference` beside
//! the workspace). Without it the tests report themselves skipped (`stowage_core::skip`), unless
//! `STOWAGE_REQUIRE_REFERENCE=1`.

use std::path::{Path, PathBuf};
use std::time::{Duration, UNIX_EPOCH};

use serde_json::Value;
use stowage_fingerprint::canonical_json::{PyJsonOptions, to_python_json};
use stowage_fingerprint::{
    ConfigChange, FINGERPRINT_FILE_NAME, FingerprintFile, FingerprintStatus, SourceChange,
    SourceStamp, cache_key, explain, fingerprint_digest_input, fingerprint_hash,
    validate_fingerprint,
};

struct ReferenceSet {
    /// `<reference dir>/dnanet-memmap`.
    dir: PathBuf,
    manifest: Value,
}

impl ReferenceSet {
    fn caches(&self) -> &[Value] {
        self.manifest["caches"].as_array().expect("manifest.json: \"caches\" is a list")
    }

    /// The caches that were finalized, so they have a fingerprint.
    fn complete_caches(&self) -> Vec<&Value> {
        let complete: Vec<&Value> =
            self.caches().iter().filter(|cache| cache.get("fingerprint_hash").is_some()).collect();
        assert!(!complete.is_empty(), "manifest.json lists no cache with a fingerprint_hash");
        complete
    }

    /// The complete caches written with fingerprint module variant `variant` (at least one).
    fn caches_of_variant(&self, variant: &str) -> Vec<&Value> {
        let caches: Vec<&Value> = self
            .complete_caches()
            .into_iter()
            .filter(|cache| text(cache, "fingerprint_module_variant") == variant)
            .collect();
        assert!(!caches.is_empty(), "manifest.json has no complete cache of variant {variant}");
        caches
    }

    fn cache_dir(&self, cache: &Value) -> PathBuf {
        self.dir.join("cache_root").join(text(cache, "key"))
    }
}

fn reference_set() -> Option<ReferenceSet> {
    let base = std::env::var_os("STOWAGE_REFERENCE_DIR").map(PathBuf::from).unwrap_or_else(|| {
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../../shared/reference")
    });
    let dir = base.join("dnanet-memmap");
    let manifest_path = dir.join("manifest.json");
    if !manifest_path.is_file() {
        let required = std::env::var("STOWAGE_REQUIRE_REFERENCE").is_ok_and(|value| value == "1");
        assert!(
            !required,
            "STOWAGE_REQUIRE_REFERENCE=1 but {} does not exist",
            manifest_path.display()
        );
        stowage_core::skip::report_skip(
            "prerequisite",
            &format!("reference caches not found at {}", manifest_path.display()),
        );
        return None;
    }
    let text = std::fs::read_to_string(&manifest_path)
        .unwrap_or_else(|error| panic!("cannot read {}: {error}", manifest_path.display()));
    let manifest = serde_json::from_str(&text)
        .unwrap_or_else(|error| panic!("{} is not JSON: {error}", manifest_path.display()));
    Some(ReferenceSet { dir, manifest })
}

fn text<'a>(object: &'a Value, field: &str) -> &'a str {
    object[field]
        .as_str()
        .unwrap_or_else(|| panic!("manifest: field {field:?} is not a string in {object}"))
}

fn name(cache: &Value) -> &str {
    text(cache, "name")
}

/// The stamps DNANet recorded, rebuilt from the manifest's description of the source files:
/// variant A stamps `{path, mtime_ns, size}`, variant B `{path, content_hash}`; the missing source
/// has null fields. Returned in reverse order so that the sorting is exercised.
fn recorded_stamps(cache: &Value) -> Vec<SourceStamp> {
    let variant = text(cache, "fingerprint_module_variant");
    let missing_path = text(cache, "missing_source_path").to_owned();
    let files = cache["source_files"].as_array().expect("manifest: source_files is a list");
    let mut stamps: Vec<SourceStamp> = files
        .iter()
        .map(|file| {
            let path = text(file, "path").to_owned();
            match variant {
                "A" => SourceStamp::MtimeSize {
                    path,
                    mtime_ns: Some(file["mtime_ns"].as_i64().expect("mtime_ns")),
                    size: Some(file["size"].as_u64().expect("size")),
                },
                "B" => SourceStamp::ContentHash {
                    path,
                    content_hash: Some(text(file, "sha256").to_owned()),
                },
                other => panic!("{}: unknown fingerprint variant {other:?}", name(cache)),
            }
        })
        .collect();
    stamps.push(match variant {
        "A" => SourceStamp::MtimeSize { path: missing_path, mtime_ns: None, size: None },
        _ => SourceStamp::ContentHash { path: missing_path, content_hash: None },
    });
    stamps.reverse();
    stamps
}

fn sorted(mut stamps: Vec<SourceStamp>) -> Vec<SourceStamp> {
    stamps.sort_by(|left, right| left.path().cmp(right.path()));
    stamps
}

#[test]
fn canonical_json_and_cache_key_match_every_reference_cache() {
    let Some(reference) = reference_set() else { return };
    for cache in reference.caches() {
        let payload = &cache["config_payload"];
        assert_eq!(
            to_python_json(payload, &PyJsonOptions::dnanet()),
            text(cache, "config_payload_canonical_json"),
            "{}: canonical JSON of the config payload",
            name(cache)
        );
        let key = cache_key(payload);
        assert_eq!(key, text(cache, "key"), "{}: cache key", name(cache));
        let dir = reference.cache_dir(cache);
        assert!(dir.is_dir(), "{}: the key names no directory: {}", name(cache), dir.display());
    }
}

#[test]
fn fingerprint_hash_matches_reference_digest_input_and_hash() {
    let Some(reference) = reference_set() else { return };
    for cache in reference.complete_caches() {
        let payload = &cache["config_payload"];
        let stamps = recorded_stamps(cache);
        assert_eq!(
            fingerprint_digest_input(payload, &stamps),
            text(cache, "fingerprint_digest_input"),
            "{}: fingerprint digest input",
            name(cache)
        );
        assert_eq!(
            fingerprint_hash(payload, &stamps),
            text(cache, "fingerprint_hash"),
            "{}: fingerprint hash",
            name(cache)
        );
    }
}

#[test]
fn stored_fingerprint_json_reads_validates_and_rewrites_byte_for_byte() {
    let Some(reference) = reference_set() else { return };
    let scratch = tempfile::tempdir().unwrap();
    for cache in reference.complete_caches() {
        let path = reference.cache_dir(cache).join(FINGERPRINT_FILE_NAME);
        let stored =
            FingerprintFile::read(&path).unwrap_or_else(|error| panic!("{}: {error}", name(cache)));
        let payload = &cache["config_payload"];
        let stamps = recorded_stamps(cache);

        assert_eq!(stored.cache_version, 5, "{}: cache_version", name(cache));
        assert_eq!(stored.hash, text(cache, "fingerprint_hash"), "{}: stored hash", name(cache));
        assert_eq!(&stored.config, payload, "{}: stored config", name(cache));
        assert_eq!(stored.sources, sorted(stamps.clone()), "{}: stored sources", name(cache));
        assert_eq!(
            stored.recompute_hash(),
            stored.hash,
            "{}: stored hash is self-consistent",
            name(cache)
        );
        assert_eq!(
            validate_fingerprint(&path, payload, &stamps),
            FingerprintStatus::Fresh,
            "{}: validation against the recorded inputs",
            name(cache)
        );
        assert!(explain(&stored, payload, &stamps).is_fresh(), "{}: explanation", name(cache));

        // Writing what was read gives DNANet's bytes back (json.dumps(..., indent=2)).
        let original = std::fs::read(&path).unwrap();
        assert_eq!(
            stored.to_python_json().as_bytes(),
            original.as_slice(),
            "{}: re-encoding",
            name(cache)
        );
        let rewritten = scratch.path().join(format!("{}.json", name(cache)));
        stored.write(&rewritten).unwrap();
        assert_eq!(std::fs::read(&rewritten).unwrap(), original, "{}: rewritten file", name(cache));
        let rebuilt = FingerprintFile::new(5, payload.clone(), stamps);
        assert_eq!(
            rebuilt,
            stored,
            "{}: FingerprintFile::new from the recorded inputs",
            name(cache)
        );
    }
}

#[test]
fn metadata_stamps_of_the_fixture_files_reproduce_variant_a() {
    let Some(reference) = reference_set() else { return };
    let caches = reference.caches_of_variant("A");
    for cache in caches {
        // The fixtures lost their recorded mtime when copied; give copies of them that mtime back.
        let scratch = tempfile::tempdir().unwrap();
        let mut stamps = Vec::new();
        for file in cache["source_files"].as_array().unwrap() {
            let fixture = reference.dir.join(text(file, "fixture_file"));
            let copy = scratch.path().join(fixture.file_name().unwrap());
            std::fs::copy(&fixture, &copy).unwrap();
            let mtime = UNIX_EPOCH + Duration::from_nanos(file["mtime_ns"].as_u64().unwrap());
            std::fs::File::options().write(true).open(&copy).unwrap().set_modified(mtime).unwrap();
            let SourceStamp::MtimeSize { mtime_ns, size, .. } =
                SourceStamp::from_metadata(&copy).unwrap()
            else {
                panic!("from_metadata gave another kind of stamp");
            };
            assert_eq!(mtime_ns, file["mtime_ns"].as_i64(), "{}: mtime_ns", copy.display());
            assert_eq!(size, file["size"].as_u64(), "{}: size", copy.display());
            // Record it under the path DNANet saw.
            stamps.push(SourceStamp::MtimeSize {
                path: text(file, "path").to_owned(),
                mtime_ns,
                size,
            });
        }
        let missing = SourceStamp::from_metadata(scratch.path().join("9Z9_Z99_01.hid")).unwrap();
        assert!(missing.is_missing());
        stamps.push(SourceStamp::MtimeSize {
            path: text(cache, "missing_source_path").to_owned(),
            mtime_ns: None,
            size: None,
        });
        assert_eq!(
            fingerprint_hash(&cache["config_payload"], &stamps),
            text(cache, "fingerprint_hash"),
            "{}: hash from stat-ed fixture copies",
            name(cache)
        );
    }
}

#[test]
fn content_stamps_of_the_fixture_files_reproduce_variant_b() {
    let Some(reference) = reference_set() else { return };
    let caches = reference.caches_of_variant("B");
    for cache in caches {
        // Lay the fixtures out under a dataset root, as DNANet saw them.
        let scratch = tempfile::tempdir().unwrap();
        let root_name =
            Path::new(text(&cache["compute_key_arguments"], "root")).file_name().unwrap();
        let root = scratch.path().join(root_name);
        std::fs::create_dir(&root).unwrap();
        let mut absolute_stamps = Vec::new();
        for file in cache["source_files"].as_array().unwrap() {
            let fixture = reference.dir.join(text(file, "fixture_file"));
            std::fs::copy(&fixture, root.join(fixture.file_name().unwrap())).unwrap();
            let stamp = SourceStamp::from_contents(&fixture, None).unwrap();
            let SourceStamp::ContentHash { content_hash, .. } = stamp else {
                panic!("wrong stamp kind")
            };
            assert_eq!(
                content_hash.as_deref(),
                Some(text(file, "sha256")),
                "{}",
                fixture.display()
            );
            absolute_stamps.push(SourceStamp::ContentHash {
                path: text(file, "path").to_owned(),
                content_hash,
            });
        }
        absolute_stamps.push(SourceStamp::ContentHash {
            path: text(cache, "missing_source_path").to_owned(),
            content_hash: None,
        });
        assert_eq!(
            fingerprint_hash(&cache["config_payload"], &absolute_stamps),
            text(cache, "fingerprint_hash"),
            "{}: hash from hashed fixture files",
            name(cache)
        );

        // With root=<dataset root>, paths are recorded relative to it.
        let relative = &cache["fingerprint_with_root_relative_paths"];
        let mut relative_stamps: Vec<SourceStamp> = relative["sources"]
            .as_array()
            .unwrap()
            .iter()
            .map(|recorded| {
                SourceStamp::from_contents(root.join(text(recorded, "path")), Some(&root)).unwrap()
            })
            .collect();
        let recorded: Vec<Value> = relative["sources"].as_array().unwrap().clone();
        let produced: Vec<Value> = relative_stamps.iter().map(SourceStamp::to_json).collect();
        assert_eq!(produced, recorded, "{}: root-relative stamps", name(cache));
        relative_stamps.reverse();
        assert_eq!(
            fingerprint_hash(&cache["config_payload"], &relative_stamps),
            text(relative, "hash"),
            "{}: root-relative fingerprint hash",
            name(cache)
        );
    }
}

#[test]
fn explain_names_a_moved_dataset_root_and_a_touched_source() {
    let Some(reference) = reference_set() else { return };
    let cache = reference.complete_caches()[0];
    let stored =
        FingerprintFile::read(reference.cache_dir(cache).join(FINGERPRINT_FILE_NAME)).unwrap();
    let mut moved = cache["config_payload"].clone();
    moved["root"] = Value::from("/mnt/new_home");
    let mut stamps = sorted(recorded_stamps(cache));
    let touched_before = stamps[0].clone();
    stamps[0] = match &stamps[0] {
        SourceStamp::MtimeSize { path, size, .. } => {
            SourceStamp::MtimeSize { path: path.clone(), mtime_ns: Some(1), size: *size }
        }
        SourceStamp::ContentHash { path, .. } => {
            SourceStamp::ContentHash { path: path.clone(), content_hash: Some("0".repeat(64)) }
        }
    };
    let explanation = explain(&stored, &moved, &stamps);
    assert!(!explanation.is_fresh());
    assert_eq!(
        explanation.config_changes,
        [ConfigChange {
            path: "root".into(),
            stored: Some(cache["config_payload"]["root"].clone()),
            current: Some(Value::from("/mnt/new_home")),
        }]
    );
    assert_eq!(
        explanation.source_changes,
        [SourceChange::Changed { stored: touched_before, current: stamps[0].clone() }]
    );
    let report = explanation.to_string();
    assert!(report.contains("root: ") && report.contains("-> \"/mnt/new_home\""), "{report}");
}

#[test]
fn unfinalized_cache_has_its_key_but_no_fingerprint() {
    let Some(reference) = reference_set() else { return };
    for cache in reference.caches() {
        if cache.get("fingerprint_hash").is_some() {
            continue;
        }
        assert_eq!(cache_key(&cache["config_payload"]), text(cache, "key"), "{}: key", name(cache));
        let path = reference.cache_dir(cache).join(FINGERPRINT_FILE_NAME);
        let status = validate_fingerprint(&path, &cache["config_payload"], &recorded_stamps(cache));
        assert_eq!(status, FingerprintStatus::Missing { path }, "{}", name(cache));
    }
}
