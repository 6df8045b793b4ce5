//! Stowage's key index of a finalized cache (`stowage_index/`): reads by key go through it
//! without loading `index.parquet`; a stale, damaged or missing index never yields another key's
//! row: lookups fall back to `index.parquet` (correct if slower), and `validate` says why.

use std::path::Path;

use stowage_core::{Backend, Reader, Sample, Tensor, ValidationLevel, Value};
use stowage_memmap::{MemmapBackend, MemmapOptions, dnanet};

fn key(prefix: &str, i: usize) -> String {
    format!("/{prefix}/{i:05}.hid")
}

fn row(i: usize) -> Sample {
    let mut sample = Sample::new()
        .with("data", Tensor::from_slice(&[1, 1], &[i as i16]).unwrap())
        .with("scaler", Tensor::from_slice(&[1], &[i as f32]).unwrap())
        .with("meta_json", Value::Json(format!("{{\"i\": {i}}}")));
    if i.is_multiple_of(3) {
        sample = sample.with("annotation", Tensor::from_slice(&[1, 1], &[1i8]).unwrap());
    }
    if i.is_multiple_of(2) {
        sample = sample.with("panel", Value::Json(format!("[{}]", i % 7)));
    }
    sample
}

/// A cache stowage finalized: `rows` rows under `prefix`.
fn write_cache(dir: &Path, prefix: &str, rows: usize) {
    let mut cache = MemmapBackend::create(dir, &dnanet(1, 1), MemmapOptions::default()).unwrap();
    for i in 0..rows {
        cache.put(&key(prefix, i), &row(i)).unwrap();
    }
    cache.finalize().unwrap();
}

fn open(dir: &Path) -> MemmapBackend {
    MemmapBackend::open_read_only(dir, MemmapOptions::default()).unwrap()
}

/// Every key reads its own row; `prefix`'s keys beyond `rows` and other prefixes are absent.
fn assert_reads(cache: &MemmapBackend, prefix: &str, rows: usize) {
    for i in 0..rows {
        let got = cache.get(&key(prefix, i)).unwrap().unwrap_or_else(|| panic!("row {i}"));
        assert_eq!(got, cache.schema_filled(row(i)), "row {i}");
        assert_eq!(cache.get_row(i as i64).unwrap(), got);
        assert!(cache.contains(&key(prefix, i)).unwrap());
    }
    assert!(cache.get(&key(prefix, rows)).unwrap().is_none());
    assert!(!cache.contains(&key("other", 0)).unwrap());
    let want: Vec<String> = (0..rows).map(|i| key(prefix, i)).collect();
    assert_eq!(cache.keys().unwrap(), want);
}

/// What a read returns for a put sample: absent nullable fields read as null.
trait Filled {
    fn schema_filled(&self, sample: Sample) -> Sample;
}

impl Filled for MemmapBackend {
    fn schema_filled(&self, sample: Sample) -> Sample {
        let mut filled = Sample::new();
        for field in &self.schema().fields {
            let value = sample.get(&field.name).cloned().unwrap_or(Value::Null);
            filled.insert(field.name.as_str(), value);
        }
        filled
    }
}

fn problems(cache: &MemmapBackend) -> Vec<String> {
    let report = cache.validate(ValidationLevel::Full).unwrap();
    report.problems.iter().map(|p| format!("{:?}: {}", p.path, p.detail)).collect()
}

#[test]
fn finalize_writes_a_key_index_that_agrees_with_index_parquet() {
    let tmp = tempfile::tempdir().unwrap();
    write_cache(tmp.path(), "a", 500);
    assert!(tmp.path().join("stowage_index/keys.bin").exists());
    assert!(tmp.path().join("stowage_index/run.bin").exists());
    let cache = open(tmp.path());
    assert!(cache.uses_key_index());
    assert_reads(&cache, "a", 500);
    assert!(!cache.index_loaded(), "no read by key or number loaded index.parquet");
    assert!(problems(&cache).is_empty(), "{:?}", problems(&cache));
    // The same answers through index.parquet.
    std::fs::remove_dir_all(tmp.path().join("stowage_index")).unwrap();
    let cache = open(tmp.path());
    assert!(!cache.uses_key_index());
    assert_reads(&cache, "a", 500);
}

#[test]
fn a_stale_index_after_another_writer_added_rows_is_not_used() {
    // The key index of a 10-row finalize, beside an index.parquet of 15 rows (the rows another
    // writer, DNANet, added and finalized after it): the index covers 10 rows and names another
    // index.parquet.
    let (old, new) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    write_cache(old.path(), "a", 10);
    write_cache(new.path(), "a", 15);
    for name in ["keys.bin", "run.bin"] {
        let from = old.path().join("stowage_index").join(name);
        std::fs::copy(from, new.path().join("stowage_index").join(name)).unwrap();
    }
    let cache = open(new.path());
    assert!(!cache.uses_key_index());
    assert_reads(&cache, "a", 15);
    let found = problems(&cache);
    assert!(found.len() == 1 && found[0].contains("not used"), "{found:?}");
    assert!(found[0].contains("covers 10 rows, the cache has 15"), "{found:?}");

    // Same row count, another index.parquet (rewritten by another writer): not used either.
    let other = tempfile::tempdir().unwrap();
    write_cache(other.path(), "b", 15);
    for name in ["keys.bin", "run.bin"] {
        let from = other.path().join("stowage_index").join(name);
        std::fs::copy(from, new.path().join("stowage_index").join(name)).unwrap();
    }
    let cache = open(new.path());
    assert!(!cache.uses_key_index());
    assert_reads(&cache, "a", 15);
    assert!(cache.get(&key("b", 3)).unwrap().is_none());
    let found = problems(&cache);
    assert!(found.len() == 1 && found[0].contains("is not the file"), "{found:?}");
}

/// The run's slots: (offset of the payload in the file, payload), occupied ones only.
fn payloads(run: &[u8]) -> Vec<(usize, u64)> {
    (80..run.len())
        .step_by(16)
        .map(|at| (at + 8, u64::from_le_bytes(run[at + 8..at + 16].try_into().unwrap())))
        .filter(|&(_, payload)| payload != 0)
        .collect()
}

#[test]
fn a_damaged_run_never_returns_another_keys_row() {
    const ROWS: usize = 300;
    let tmp = tempfile::tempdir().unwrap();
    write_cache(tmp.path(), "a", ROWS);
    let run_path = tmp.path().join("stowage_index/run.bin");
    let clean = std::fs::read(&run_path).unwrap();

    // Every slot holds the next slot's payload (another key's whole record): every key is
    // hidden, none reads another's row.
    let mut shifted = clean.clone();
    let slots = payloads(&clean);
    for (i, &(at, _)) in slots.iter().enumerate() {
        let next = slots[(i + 1) % slots.len()].1;
        shifted[at..at + 8].copy_from_slice(&next.to_le_bytes());
    }
    std::fs::write(&run_path, &shifted).unwrap();
    let cache = open(tmp.path());
    assert!(cache.uses_key_index(), "the header is whole: the run is used");
    for i in 0..ROWS {
        assert_eq!(cache.get(&key("a", i)).unwrap(), None, "row {i}: hidden, not another's");
    }
    let found = problems(&cache);
    assert!(found.iter().any(|p| p.contains("slots checksum")), "{found:?}");
    assert!(found.iter().any(|p| p.contains("not found at its row")), "{found:?}");

    // Payloads naming a row whose record is elsewhere: the lookup cannot confirm, and asks
    // index.parquet, which answers right.
    let mut mismatched = clean.clone();
    for &(at, payload) in &slots {
        let other_row = payload + (1 << 32);
        mismatched[at..at + 8].copy_from_slice(&other_row.to_le_bytes());
    }
    std::fs::write(&run_path, &mismatched).unwrap();
    let cache = open(tmp.path());
    for i in 0..ROWS {
        assert_eq!(cache.get(&key("a", i)).unwrap(), Some(cache.schema_filled(row(i))));
    }
    assert!(cache.index_loaded());

    // Bytes flipped all over the slots: a key reads its own row or nothing.
    for seed in 0..20u64 {
        let mut damaged = clean.clone();
        let mut state = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
        for _ in 0..64 {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            let at = 80 + (state as usize) % (damaged.len() - 80);
            damaged[at] ^= 1 << (state >> 61);
        }
        std::fs::write(&run_path, &damaged).unwrap();
        let cache = open(tmp.path());
        for i in 0..ROWS {
            if let Some(got) = cache.get(&key("a", i)).unwrap() {
                assert_eq!(got, cache.schema_filled(row(i)), "seed {seed}, row {i}");
            }
        }
    }
}

#[test]
fn a_damaged_key_file_falls_back_to_index_parquet() {
    const ROWS: usize = 200;
    let tmp = tempfile::tempdir().unwrap();
    write_cache(tmp.path(), "a", ROWS);
    let keys_path = tmp.path().join("stowage_index/keys.bin");
    let clean = std::fs::read(&keys_path).unwrap();
    let records = 80 + (ROWS + 1) * 8;
    // A byte of an offset, a byte of a record's path, a byte of the last record's JSON.
    for at in [80 + 8 * 17 + 1, records + (clean.len() - records) / 2, clean.len() - 2] {
        let mut damaged = clean.clone();
        damaged[at] ^= 0x20;
        std::fs::write(&keys_path, &damaged).unwrap();
        let cache = open(tmp.path());
        assert!(cache.uses_key_index());
        assert_reads(&cache, "a", ROWS);
        assert!(cache.index_loaded(), "byte {at}: the damaged record was read from index.parquet");
        let found = problems(&cache);
        assert!(!found.is_empty() && found.iter().all(|p| p.contains("keys.bin")), "{found:?}");
    }
    // A damaged header: the index is not used at all.
    let mut damaged = clean.clone();
    damaged[20] ^= 1;
    std::fs::write(&keys_path, &damaged).unwrap();
    let cache = open(tmp.path());
    assert!(!cache.uses_key_index());
    assert_reads(&cache, "a", ROWS);
    let found = problems(&cache);
    assert!(found.len() == 1 && found[0].contains("header checksum"), "{found:?}");
    // A missing run: not used either.
    std::fs::write(&keys_path, &clean).unwrap();
    std::fs::remove_file(tmp.path().join("stowage_index/run.bin")).unwrap();
    let cache = open(tmp.path());
    assert!(!cache.uses_key_index());
    assert_reads(&cache, "a", ROWS);
    assert_eq!(problems(&cache).len(), 1);
}

#[test]
fn a_writer_resumes_a_finalized_cache_with_its_key_index() {
    let tmp = tempfile::tempdir().unwrap();
    write_cache(tmp.path(), "a", 20);
    let mut writer = MemmapBackend::open_append(tmp.path(), MemmapOptions::default()).unwrap();
    assert!(writer.is_finalized());
    assert!(writer.put(&key("a", 99), &row(99)).is_err());
    assert_eq!(writer.get(&key("a", 3)).unwrap(), Some(writer.schema_filled(row(3))));
}
