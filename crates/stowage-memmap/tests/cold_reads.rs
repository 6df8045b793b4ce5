//! `get_batch` and `get` return the same samples whatever the cold-read advice
//! ([`MemmapOptions::cold_read_advice`]): the advice is a hint to the kernel and never changes a
//! result, an error included.

use std::path::Path;

use stowage_core::cold_reads::ColdReadAdvice;
use stowage_core::{Backend, Error, Reader};
use stowage_memmap::{MemmapBackend, MemmapOptions, dnanet};

#[path = "common/dnanet_rows.rs"]
mod dnanet_rows;
use dnanet_rows::{D, L, key};

use stowage_core::{Sample, Value};

/// A sample's fields by name (a read returns them in the cache's order, not the put's).
fn by_name(sample: Option<Sample>) -> Option<Vec<(String, Value)>> {
    sample.map(|sample| {
        let mut fields: Vec<(String, Value)> =
            sample.fields().map(|(name, value)| (name.to_owned(), value.clone())).collect();
        fields.sort_by(|a, b| a.0.cmp(&b.0));
        fields
    })
}

const ROWS: usize = 3_000;
const POLICIES: [ColdReadAdvice; 3] =
    [ColdReadAdvice::Adaptive, ColdReadAdvice::Always, ColdReadAdvice::Never];

/// DNANet row `i`, with one of 5 panels.
fn row(i: usize) -> Sample {
    dnanet_rows::dnanet_row(i, format!("{{\"panel\": {}}}", i % 5))
}

fn options(advice: ColdReadAdvice, verify_checksums: bool) -> MemmapOptions {
    MemmapOptions { cold_read_advice: advice, verify_checksums, ..MemmapOptions::default() }
}

fn write(dir: &Path, rows: std::ops::Range<usize>, finalize: bool) -> MemmapBackend {
    let mut cache =
        MemmapBackend::create(dir, &dnanet(D, L), options(ColdReadAdvice::Always, true)).unwrap();
    for i in rows {
        cache.put(&key(i), &row(i)).unwrap();
    }
    if finalize {
        cache.finalize().unwrap();
    } else {
        cache.flush().unwrap();
    }
    cache
}

/// Keys in a scrambled order, with repeats and keys that are not stored.
fn batch_keys() -> Vec<String> {
    let mut keys: Vec<String> = (0..ROWS).map(|i| key((i * 7919) % ROWS)).collect();
    keys.extend((0..50).map(|i| key(i * 13)));
    keys.insert(17, "/no/such/key".into());
    keys.push(key(ROWS + 5));
    keys
}

fn check_batch_agrees_with_get(cache: &MemmapBackend, keys: &[String]) {
    let refs: Vec<&str> = keys.iter().map(String::as_str).collect();
    let batch = cache.get_batch(&refs).unwrap();
    assert_eq!(batch.len(), keys.len());
    for (key, got) in keys.iter().zip(&batch) {
        assert_eq!(got, &cache.get(key).unwrap(), "{key}");
    }
    for (key, got) in keys.iter().zip(batch) {
        let stored = key.strip_prefix("/data/run").and_then(|k| k.strip_suffix(".hid"));
        match stored.and_then(|i| i.parse::<usize>().ok()).filter(|&i| i < ROWS) {
            Some(i) => assert_eq!(by_name(got), by_name(Some(row(i))), "{key}"),
            None => assert_eq!(got, None, "{key}"),
        }
    }
}

#[test]
fn get_batch_agrees_with_get_with_the_advice_on_and_off() {
    let dir = tempfile::tempdir().unwrap();
    drop(write(dir.path(), 0..ROWS, true));
    let keys = batch_keys();
    for advice in POLICIES {
        for verify in [true, false] {
            let cache = MemmapBackend::open_read_only(dir.path(), options(advice, verify)).unwrap();
            check_batch_agrees_with_get(&cache, &keys);
            // Empty and one-key batches.
            assert!(cache.get_batch(&[]).unwrap().is_empty());
            let one = cache.get_batch(&[&key(4)]).unwrap().pop().unwrap();
            assert_eq!(by_name(one), by_name(Some(row(4))));
        }
    }
}

#[test]
fn a_writer_reads_its_rows_the_same_with_the_advice_on_and_off() {
    for advice in POLICIES {
        let dir = tempfile::tempdir().unwrap();
        drop(write(dir.path(), 0..ROWS / 2, false));
        let mut cache = MemmapBackend::open_append(dir.path(), options(advice, true)).unwrap();
        for i in ROWS / 2..ROWS {
            cache.put(&key(i), &row(i)).unwrap();
        }
        check_batch_agrees_with_get(&cache, &batch_keys());
    }
}

#[test]
fn a_damaged_row_is_an_error_with_the_advice_on_and_off() {
    let dir = tempfile::tempdir().unwrap();
    drop(write(dir.path(), 0..ROWS, true));
    // Row 1234's first byte of `scaler` (L float32 per row).
    let path = dir.path().join("scaler.bin");
    let mut bytes = std::fs::read(&path).unwrap();
    bytes[1234 * L * 4] ^= 0x40;
    std::fs::write(&path, bytes).unwrap();
    for advice in POLICIES {
        let cache = MemmapBackend::open_read_only(dir.path(), options(advice, true)).unwrap();
        let keys = [key(5), key(1234), key(9)];
        let refs: Vec<&str> = keys.iter().map(String::as_str).collect();
        let err = cache.get_batch(&refs).unwrap_err();
        assert!(matches!(err, Error::Corrupted { .. }), "{err}");
        let text = err.to_string();
        assert!(text.contains("scaler") && text.contains(&key(1234)), "{text}");
        assert_eq!(text, cache.get(&key(1234)).unwrap_err().to_string());
        let one = cache.get_batch(&[&key(5)]).unwrap().pop().unwrap();
        assert_eq!(by_name(one), by_name(Some(row(5))));
    }
}
