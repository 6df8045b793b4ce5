//! `RemoteStore` on the in-memory and local-directory stores: names stay under the prefix, reads
//! return exactly what was asked for, conditional puts create once, errors name the object.

use stowage_core::Error;
use stowage_core::bytes::Bytes;
use stowage_remote::{Created, RemoteStore};

/// A memory store of its own per test, and a fresh directory for `file://`.
fn stores(test: &str) -> (Vec<RemoteStore>, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let file_url = format!("file://{}/cache", dir.path().display());
    let stores = vec![
        RemoteStore::open(&format!("memory://{test}/cache")).unwrap(),
        RemoteStore::open(&file_url).unwrap(),
    ];
    (stores, dir)
}

#[test]
fn objects_round_trip_and_list_under_the_prefix() {
    let (stores, _dir) = stores("round-trip");
    for store in &stores {
        let url = store.url().as_str();
        let data = Bytes::from((0..=255u8).cycle().take(10_000).collect::<Vec<u8>>());
        assert_eq!(store.put_new("objects/b", data.clone()).unwrap(), Created::New, "{url}");
        assert_eq!(store.put_new("objects/a", Bytes::from_static(b"a")).unwrap(), Created::New);
        assert_eq!(store.put_new("versions/1", Bytes::from_static(b"v1")).unwrap(), Created::New);
        assert_eq!(store.get("objects/b").unwrap(), data, "{url}");
        assert_eq!(store.get_range("objects/b", 300..302).unwrap().as_ref(), &[44, 45]);
        let parts = store.get_ranges("objects/b", &[0..1, 5_000..5_010, 9_999..10_000]).unwrap();
        assert_eq!(parts, [data.slice(0..1), data.slice(5_000..5_010), data.slice(9_999..10_000)]);

        let names: Vec<String> =
            store.list("objects").unwrap().into_iter().map(|o| o.name).collect();
        assert_eq!(names, ["objects/a", "objects/b"], "{url}");
        let all = store.list("").unwrap();
        assert_eq!(all.len(), 3, "{url}: {all:?}");
        let head = store.head("objects/b").unwrap().unwrap();
        assert_eq!((head.name.as_str(), head.size), ("objects/b", 10_000));
        assert_eq!(store.head("objects/none").unwrap(), None);
    }
}

#[test]
fn a_second_put_of_the_same_name_finds_or_refuses_never_overwrites() {
    let (stores, _dir) = stores("put-new");
    for store in &stores {
        let first = Bytes::from_static(b"first");
        assert_eq!(store.put_new("versions/1", first.clone()).unwrap(), Created::New);
        assert_eq!(store.put_new("versions/1", first.clone()).unwrap(), Created::AlreadyThere);
        let err = store.put_new("versions/1", Bytes::from_static(b"second")).unwrap_err();
        assert!(matches!(err, Error::AlreadyExists { .. }), "{err}");
        assert!(err.to_string().contains(&store.url().object_url("versions/1")), "{err}");
        assert_eq!(store.get("versions/1").unwrap(), first, "{}", store.url());
    }
}

#[test]
fn missing_objects_bad_ranges_and_bad_names_are_errors_naming_what() {
    let (stores, _dir) = stores("errors");
    for store in &stores {
        store.put_new("objects/a", Bytes::from_static(b"0123")).unwrap();
        let err = store.get("objects/missing").unwrap_err();
        assert!(matches!(err, Error::NotFound { .. }), "{err}");
        assert!(err.to_string().contains("objects/missing"), "{err}");
        let err = store.get_range("objects/missing", 0..1).unwrap_err();
        assert!(matches!(err, Error::NotFound { .. }), "{err}");
        #[allow(clippy::reversed_empty_ranges)] // the point: a reversed range is refused
        let bad_ranges = [2..2, 3..1];
        for range in bad_ranges {
            let err = store.get_range("objects/a", range.clone()).unwrap_err();
            assert!(matches!(err, Error::InvalidArgument { .. }), "{range:?}: {err}");
        }
        // Past the end: never fewer bytes returned as if they were the range.
        let err = store.get_range("objects/a", 2..10).unwrap_err();
        assert!(matches!(err, Error::Io { .. } | Error::InvalidArgument { .. }), "{err}");
        for bad in ["../escape", "a//b", ""] {
            let err = store.put_new(bad, Bytes::from_static(b"x")).unwrap_err();
            assert!(matches!(err, Error::InvalidArgument { .. }), "{bad:?}: {err}");
        }
    }
}

#[test]
fn memory_stores_are_shared_by_name_and_separate_otherwise() {
    let one = RemoteStore::open("memory://shared-by-name/c").unwrap();
    let again = RemoteStore::open("memory://shared-by-name/c").unwrap();
    let other = RemoteStore::open("memory://another-name/c").unwrap();
    one.put_new("x", Bytes::from_static(b"1")).unwrap();
    assert_eq!(again.get("x").unwrap().as_ref(), b"1");
    assert!(matches!(other.get("x").unwrap_err(), Error::NotFound { .. }));
}

#[test]
fn local_and_memory_stores_refuse_options_and_unknown_keys_are_named() {
    let err = RemoteStore::open_with("memory://opts/c", &[("aws_region", "x")]).unwrap_err();
    assert!(err.to_string().contains("aws_region"), "{err}");
    let err = RemoteStore::open_with("s3://bucket/c", &[("no_such_key", "x")]).unwrap_err();
    assert!(matches!(err, Error::InvalidArgument { .. }), "{err}");
    assert!(err.to_string().contains("s3://bucket"), "{err}");
}
