//! A handle whose write failed refuses every later write with `Error::Poisoned`, naming the cache
//! and the first failure; reopening the cache resumes from what was flushed.

use stowage_core::{Backend, DType, Error, Reader, Sample, Schema, ShapeRule, Tensor};
use stowage_npy::{NpyBackend, NpyOptions};

fn sample(value: u8) -> Sample {
    Sample::new().with("x", Tensor::from_slice(&[2], &[value, value]).unwrap())
}

#[test]
fn a_failed_put_poisons_the_handle_until_the_cache_is_reopened() {
    let dir = tempfile::tempdir().unwrap();
    let schema = Schema::new().tensor("x", DType::U8, ShapeRule::Fixed(vec![2]));
    // One slot per collection file: every put creates a new file.
    let options = NpyOptions { collection_size: 1, ..NpyOptions::default() };
    let mut cache = NpyBackend::create(dir.path(), &schema, options.clone()).unwrap();
    cache.put("kept", &sample(1)).unwrap();
    cache.flush().unwrap();

    // The next collection file cannot be created: data/10 is now a regular file (this fails for
    // root as well, unlike a permission change).
    let data = dir.path().join("data").join("10");
    let moved = dir.path().join("data").join("10.moved");
    std::fs::rename(&data, &moved).unwrap();
    std::fs::write(&data, b"not a directory").unwrap();

    let first = cache.put("lost", &sample(2)).unwrap_err();
    assert!(!matches!(first, Error::Poisoned { .. }), "the failure itself is reported: {first}");
    for (what, result) in [
        ("put", cache.put("after", &sample(3))),
        ("flush", cache.flush()),
        ("finalize", cache.finalize()),
    ] {
        match result {
            Err(Error::Poisoned { path, cause }) => {
                assert_eq!(path, dir.path(), "{what}");
                assert_eq!(cause, first.to_string(), "{what}: the first failure is the cause");
            }
            other => panic!("{what} on a poisoned handle: expected Poisoned, got {other:?}"),
        }
    }
    assert!(!cache.is_finalized());
    assert_eq!(cache.keys().unwrap(), ["kept"], "reads still work and show no failed put");
    drop(cache);

    std::fs::remove_file(&data).unwrap();
    std::fs::rename(&moved, &data).unwrap();
    let mut reopened = NpyBackend::open_append(dir.path(), options).unwrap();
    assert_eq!(reopened.keys().unwrap(), ["kept"]);
    reopened.put("after", &sample(3)).unwrap();
    reopened.finalize().unwrap();
    assert_eq!(reopened.get("after").unwrap(), Some(sample(3)));
    assert_eq!(reopened.get("kept").unwrap(), Some(sample(1)));
}
