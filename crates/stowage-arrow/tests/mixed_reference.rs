//! The mixed-writer reference caches (`../shared/reference/mixed/torchcachex-*`): stowage wrote
//! them, then the real torchcachex appended a segment (tensor and dict structures) or only opened
//! the cache (rewriting `index.pkl`). Every key reads back as the manifest expects through
//! read-only and append opens, torchcachex's later rows winning; `validate` lists torchcachex's
//! segment as unchecked; on a copy, a stowage append takes an id above torchcachex's, leaves its
//! segment byte for byte, removes `index.pkl`, and `adopt` makes `validate` clean; torchcachex
//! (its peer) then reads every key, stowage's new one included.

mod peer;

use std::path::{Path, PathBuf};

use stowage_arrow::{ArrowBackend, ArrowOptions};
use stowage_core::{Backend, OpenMode, Reader, Sample, Tensor, ValidationLevel};
use stowage_test_support::reference::reference_set;

/// One reference set: its cache and manifest.
struct Set {
    root: PathBuf,
    manifest: serde_json::Value,
}

impl Set {
    fn load(name: &str) -> Option<Set> {
        let root = reference_set(&format!("mixed/{name}"))?;
        let text = std::fs::read_to_string(root.join("manifest.json")).unwrap();
        Some(Set { manifest: serde_json::from_str(&text).unwrap(), root })
    }

    fn cache(&self) -> PathBuf {
        self.root.join("cache")
    }

    /// A writable copy of the cache, as `<tmp>/cache` (torchcachex's module id).
    fn copy(&self) -> (tempfile::TempDir, PathBuf) {
        let tmp = tempfile::tempdir().unwrap();
        let copy = tmp.path().join("cache");
        stowage_conformance::corrupt::copy_tree(&self.cache(), &copy).unwrap();
        (tmp, copy)
    }

    /// Every key with its expected sample (from the `.npy` files), in manifest order.
    fn expected(&self) -> Vec<(String, Sample)> {
        let keys = self.manifest["keys"].as_object().unwrap();
        keys.iter()
            .map(|(key, described)| {
                let mut sample = Sample::new();
                for (field, leaf) in described["fields"].as_object().unwrap() {
                    let file = self.root.join(leaf["expected_file"].as_str().unwrap());
                    sample.insert(field.as_str(), npy(&file));
                }
                (key.clone(), sample)
            })
            .collect()
    }
}

/// The tensor an `.npy` file holds.
fn npy(path: &Path) -> Tensor {
    let bytes = std::fs::read(path).unwrap();
    let header = stowage_core::npy_header::parse(&bytes).unwrap();
    Tensor::new(header.dtype, header.shape.clone(), bytes[header.data_offset..].to_vec()).unwrap()
}

/// Every expected key reads back equal (dtype, shape, bytes), through `get` and `get_batch`,
/// and the cache lists exactly those keys.
fn check_every_key(cache: &ArrowBackend, expected: &[(String, Sample)], what: &str) {
    for (key, sample) in expected {
        let got = cache.get(key).unwrap().unwrap_or_else(|| panic!("{what}: {key} missing"));
        assert_eq!(&got, sample, "{what}: {key}");
    }
    let keys: Vec<&str> = expected.iter().map(|(k, _)| k.as_str()).collect();
    let batch = cache.get_batch(&keys).unwrap();
    for ((key, sample), got) in expected.iter().zip(batch) {
        assert_eq!(got.as_ref(), Some(sample), "{what}: {key} in a batch");
    }
    let mut listed = cache.keys().unwrap();
    listed.sort();
    let mut want: Vec<String> = expected.iter().map(|(k, _)| k.clone()).collect();
    want.sort();
    assert_eq!(listed, want, "{what}");
    assert_eq!(cache.len(), expected.len(), "{what}");
    assert!(expected.iter().all(|(k, _)| cache.contains(k).unwrap()), "{what}");
}

fn options() -> ArrowOptions {
    ArrowOptions { rank: Some(0), ..ArrowOptions::default() }
}

#[test]
fn every_key_of_the_mixed_sets_reads_back_with_torchcachex_rows_winning() {
    for name in
        ["torchcachex-append-tensor", "torchcachex-append-dict", "torchcachex-readonly-open"]
    {
        let Some(set) = Set::load(name) else { return };
        let expected = set.expected();
        let reader = ArrowBackend::open(set.cache(), OpenMode::ReadOnly, options()).unwrap();
        check_every_key(&reader, &expected, name);
        // The value a later row replaced is never the one returned.
        let mut superseded = 0;
        for (key, described) in set.manifest["keys"].as_object().unwrap() {
            for earlier in described["earlier_writes"].as_array().into_iter().flatten() {
                for (field, leaf) in earlier["fields"].as_object().unwrap() {
                    let old = npy(&set.root.join(leaf["file"].as_str().unwrap()));
                    let got = reader.get(key).unwrap().unwrap();
                    assert_ne!(got.tensor(field), Some(&old), "{name}: {key} superseded value");
                    superseded += 1;
                }
            }
        }
        assert!(superseded >= 1, "{name}: the set overwrites a key");
        let report = reader.validate(ValidationLevel::Full).unwrap();
        assert!(report.is_undamaged(), "{name}: {:?}", report.problems);
        let torchcachex_segments: Vec<String> = report
            .unchecked
            .iter()
            .map(|u| {
                assert_eq!(u.writer, "torchcachex", "{name}");
                assert!(u.next_step.contains("stowage adopt"), "{name}: {u}");
                u.path.file_name().unwrap().to_string_lossy().into_owned()
            })
            .collect();
        if name == "torchcachex-readonly-open" {
            assert!(report.is_clean(), "{name}: {report:?}");
        } else {
            assert_eq!(torchcachex_segments, ["segment_000002.arrow"], "{name}");
            let rows = set.manifest["physical_rows"].as_array().unwrap();
            let in_segment_2 = rows.iter().filter(|r| r["segment"] == 2).count() as u64;
            assert_eq!(report.unchecked[0].samples, in_segment_2, "{name}");
            assert!(!report.is_clean(), "{name}: unchecked data is never clean");
        }
        // An append open reads the same, and changes nothing until it writes.
        let (_tmp, copy) = set.copy();
        let before = listing(&copy);
        let writer = ArrowBackend::open(&copy, OpenMode::Append, options()).unwrap();
        check_every_key(&writer, &expected, &format!("{name} (append open)"));
        drop(writer);
        assert_eq!(listing(&copy), before, "{name}: an open without writes changed files");
    }
}

/// On a copy: stowage appends (an id above torchcachex's, torchcachex's segment byte for byte,
/// `index.pkl` removed), `adopt` then makes `validate` clean, and torchcachex reads every key.
#[test]
fn stowage_appends_to_the_mixed_sets_then_adopts_and_torchcachex_reads_everything() {
    let peer = peer::Peer::find("mixed reference: torchcachex reads after stowage's append");
    for name in
        ["torchcachex-append-tensor", "torchcachex-append-dict", "torchcachex-readonly-open"]
    {
        let Some(set) = Set::load(name) else { return };
        let mut expected = set.expected();
        let (_tmp, copy) = set.copy();
        let segments = copy.join("segments");
        let foreign = segments.join("segment_000002.arrow");
        let foreign_bytes = std::fs::read(&foreign).ok();
        assert!(copy.join("index.pkl").exists(), "{name}: the set has torchcachex's index.pkl");
        let mut writer = ArrowBackend::open(&copy, OpenMode::Append, options()).unwrap();
        // A new key, and a key torchcachex wrote (or stowage, in the read-only set) again.
        let template = expected[0].1.clone();
        let overwritten = expected.last().unwrap().0.clone();
        writer.put("stowage_new", &template).unwrap();
        writer.put(&overwritten, &template).unwrap();
        writer.flush().unwrap();
        expected.push(("stowage_new".into(), template.clone()));
        let at = expected.iter().position(|(k, _)| *k == overwritten).unwrap();
        expected[at].1 = template.clone();
        assert!(!copy.join("index.pkl").exists(), "{name}: stale index.pkl left in place");
        if let Some(bytes) = &foreign_bytes {
            assert_eq!(&std::fs::read(&foreign).unwrap(), bytes, "{name}: torchcachex's segment");
        }
        let log = stowage_arrow::test_support::commit_log::read(&copy.join("stowage.log")).unwrap();
        let new_id = log.segments.last().unwrap().id;
        let above = if foreign_bytes.is_some() { 3 } else { 2 };
        assert_eq!(new_id, above, "{name}: the new segment's id");
        check_every_key(&writer, &expected, &format!("{name} after the append"));
        let adoption = writer.adopt().unwrap();
        match &foreign_bytes {
            Some(bytes) => {
                assert_eq!(adoption.files, std::slice::from_ref(&foreign), "{name}");
                assert_eq!(&std::fs::read(&foreign).unwrap(), bytes, "{name}: adopt touched it");
            }
            None => assert!(adoption.is_empty(), "{name}"),
        }
        let report = writer.validate(ValidationLevel::Full).unwrap();
        assert!(report.is_clean(), "{name}: {report:?}");
        drop(writer);
        let reader = ArrowBackend::open(&copy, OpenMode::ReadOnly, options()).unwrap();
        check_every_key(&reader, &expected, &format!("{name} after adopt"));
        assert!(reader.validate(ValidationLevel::Full).unwrap().is_clean(), "{name}");
        let Some(peer) = &peer else { continue };
        let structure = reader.output_structure();
        let (schema, encoding) = (reader.schema().clone(), reader.blob_encoding());
        let read = peer.read(&copy);
        assert_eq!(read.len(), expected.len(), "{name}: torchcachex's keys {read:?}");
        for (key, sample) in &expected {
            let want = peer::torchcachex_view(&schema, structure, encoding, sample);
            assert_eq!(read.get(key), Some(&want), "{name}: torchcachex's {key}");
        }
    }
}

/// Every file under `dir` with a digest of its bytes, but the writer lock (which holds the pid
/// of its last holder).
fn listing(dir: &Path) -> Vec<(PathBuf, u64)> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        if entry.file_type().unwrap().is_dir() {
            files.extend(listing(&entry.path()));
        } else if entry.file_name() != ".stowage.lock" {
            let digest = xxhash_rust::xxh3::xxh3_64(&std::fs::read(entry.path()).unwrap());
            files.push((entry.path(), digest));
        }
    }
    files.sort();
    files
}
