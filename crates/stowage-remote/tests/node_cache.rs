//! The node-local cache in one process: downloads are checked before they are kept, the budget
//! evicts the least recently fetched copies that are not in use, a damaged copy is fetched
//! again, and a directory that is not a node cache is never taken over.

use stowage_core::Error;
use stowage_core::bytes::Bytes;
use stowage_remote::RemoteStore;
use stowage_remote::node_cache::{NodeCache, ObjectDigest, Source};

fn store_with(test: &str, objects: usize, size: usize) -> (RemoteStore, Vec<(String, Bytes)>) {
    let store = RemoteStore::open(&format!("memory://node-cache-{test}/c")).unwrap();
    let objects = (0..objects)
        .map(|i| {
            let data = Bytes::from(vec![i as u8; size]);
            let name = format!("data/{i}");
            store.put_new(&name, data.clone()).unwrap();
            (name, data)
        })
        .collect();
    (store, objects)
}

#[test]
fn a_download_that_does_not_match_its_digest_is_an_error_and_nothing_is_kept() {
    let (store, objects) = store_with("digest", 1, 100);
    let dir = tempfile::tempdir().unwrap();
    let cache = NodeCache::open(dir.path(), 1 << 20).unwrap();
    let (name, data) = &objects[0];
    for wrong in [
        ObjectDigest { size: 100, xxh3_128: ObjectDigest::of(data).xxh3_128 ^ 1 },
        ObjectDigest { size: 99, ..ObjectDigest::of(data) },
    ] {
        let err = cache.fetch(&store, name, wrong).unwrap_err();
        assert!(matches!(err, Error::Corrupted { .. }), "{err}");
        let text = err.to_string();
        assert!(text.contains("memory://node-cache-digest/c/data/0"), "{text}");
        assert!(text.contains(&format!("{:032x}", wrong.xxh3_128)), "{text}");
        assert_eq!(cache.usage().unwrap(), (0, 0));
    }
    let right = cache.fetch(&store, name, ObjectDigest::of(data)).unwrap();
    assert_eq!(right.bytes(), data);
}

#[test]
fn the_budget_evicts_the_least_recently_fetched_copies_first() {
    let (store, objects) = store_with("lru", 5, 1000);
    let dir = tempfile::tempdir().unwrap();
    let cache = NodeCache::open(dir.path(), 3000).unwrap();
    for (name, data) in &objects {
        let copy = cache.fetch(&store, name, ObjectDigest::of(data)).unwrap();
        assert_eq!((copy.bytes(), copy.source()), (data, Source::Downloaded));
    }
    assert_eq!(cache.usage().unwrap(), (3000, 3));
    for (i, (name, data)) in objects.iter().enumerate().rev() {
        let expected = if i >= 2 { Source::Cached } else { Source::Downloaded };
        let copy = cache.fetch(&store, name, ObjectDigest::of(data)).unwrap();
        assert_eq!((copy.bytes(), copy.source()), (data, expected), "object {i}");
    }
}

#[test]
fn copies_in_use_are_never_evicted_and_stay_readable() {
    let (store, objects) = store_with("in-use", 5, 1000);
    let dir = tempfile::tempdir().unwrap();
    let cache = NodeCache::open(dir.path(), 1000).unwrap();
    let held: Vec<Bytes> = objects[..4]
        .iter()
        .map(|(name, data)| {
            cache.fetch(&store, name, ObjectDigest::of(data)).unwrap().bytes().clone()
        })
        .collect();
    // Every copy is held: the directory exceeds its budget rather than pull one from under a
    // reader.
    assert_eq!(cache.usage().unwrap(), (4000, 4));
    for ((_, data), bytes) in objects[..4].iter().zip(&held) {
        assert_eq!(bytes, data);
    }
    // Released, they are evicted when the next download needs the room.
    drop(held);
    let (name, data) = &objects[4];
    cache.fetch(&store, name, ObjectDigest::of(data)).unwrap();
    assert_eq!(cache.usage().unwrap(), (1000, 1));
}

#[test]
fn a_copy_damaged_on_the_local_disk_is_fetched_again() {
    let (store, objects) = store_with("damaged", 1, 4096);
    let dir = tempfile::tempdir().unwrap();
    let cache = NodeCache::open(dir.path(), 1 << 20).unwrap();
    let (name, data) = &objects[0];
    let path = cache.fetch(&store, name, ObjectDigest::of(data)).unwrap().path().to_path_buf();
    std::fs::OpenOptions::new().write(true).open(&path).unwrap().set_len(100).unwrap();
    let again = cache.fetch(&store, name, ObjectDigest::of(data)).unwrap();
    assert_eq!((again.bytes(), again.source()), (data, Source::Downloaded));
}

#[test]
fn a_directory_that_is_not_a_node_cache_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("precious.bin"), b"not ours").unwrap();
    let err = NodeCache::open(dir.path(), 1).unwrap_err();
    assert!(matches!(err, Error::Incompatible { .. }), "{err}");
    assert!(err.to_string().contains("precious.bin"), "{err}");
    assert_eq!(std::fs::read(dir.path().join("precious.bin")).unwrap(), b"not ours");

    let other = tempfile::tempdir().unwrap();
    std::fs::write(other.path().join("stowage-node-cache"), b"layout 99\n").unwrap();
    let err = NodeCache::open(other.path(), 1).unwrap_err();
    assert!(matches!(err, Error::Incompatible { .. }), "{err}");
    assert!(err.to_string().contains("layout 99"), "{err}");
    // Reopening a node cache is fine.
    let fresh = tempfile::tempdir().unwrap();
    NodeCache::open(fresh.path(), 1).unwrap();
    NodeCache::open(fresh.path(), 1).unwrap();
}
