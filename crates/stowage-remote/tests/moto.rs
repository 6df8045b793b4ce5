//! Against a real S3 server (moto's, started per test on 127.0.0.1): the server honours the
//! conditional puts stowage's commits rely on, and `RemoteStore` behaves on it as on the local
//! stores.

use object_store::aws::AmazonS3Builder;
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutMode, PutOptions, UpdateVersion};
use stowage_core::Error;
use stowage_core::bytes::Bytes;
use stowage_remote::{Created, RemoteStore, runtime};
use stowage_test_support::moto::MotoServer;

fn options(moto: &MotoServer) -> Vec<(&'static str, String)> {
    moto.s3_options()
}

fn open(moto: &MotoServer, url: &str) -> RemoteStore {
    let options = options(moto);
    let pairs: Vec<(&str, &str)> = options.iter().map(|(k, v)| (*k, v.as_str())).collect();
    RemoteStore::open_with(url, &pairs).unwrap()
}

#[test]
fn the_server_honours_if_none_match_and_if_match() {
    let Some(moto) = MotoServer::start("the_server_honours_if_none_match_and_if_match") else {
        return;
    };
    moto.create_bucket("conditions");
    let mut builder = AmazonS3Builder::new().with_bucket_name("conditions");
    for (key, value) in options(&moto) {
        builder = builder.with_config(key.parse().unwrap(), value);
    }
    let s3 = builder.build().unwrap();
    let path = Path::from("manifest");
    let create = || PutOptions { mode: PutMode::Create, ..PutOptions::default() };
    runtime::block_on(async {
        let first = s3.put_opts(&path, Bytes::from_static(b"v1").into(), create()).await.unwrap();
        // If-None-Match: * on an existing object is refused, and the object is unchanged.
        let again = s3.put_opts(&path, Bytes::from_static(b"v2").into(), create()).await;
        assert!(
            matches!(
                again,
                Err(object_store::Error::AlreadyExists { .. }
                    | object_store::Error::Precondition { .. })
            ),
            "{again:?}"
        );
        assert_eq!(s3.get(&path).await.unwrap().bytes().await.unwrap().as_ref(), b"v1");
        // If-Match with the current entity tag replaces; with a stale one it is refused.
        let current = UpdateVersion { e_tag: first.e_tag.clone(), version: first.version.clone() };
        let update = PutOptions { mode: PutMode::Update(current.clone()), ..PutOptions::default() };
        s3.put_opts(&path, Bytes::from_static(b"v3").into(), update.clone()).await.unwrap();
        let stale = s3.put_opts(&path, Bytes::from_static(b"v4").into(), update).await;
        assert!(matches!(stale, Err(object_store::Error::Precondition { .. })), "{stale:?}");
        assert_eq!(s3.get(&path).await.unwrap().bytes().await.unwrap().as_ref(), b"v3");
    })
    .unwrap();
}

#[test]
fn a_remote_store_on_s3_reads_ranges_lists_and_creates_once() {
    let Some(moto) = MotoServer::start("a_remote_store_on_s3_reads_ranges_lists_and_creates_once")
    else {
        return;
    };
    moto.create_bucket("stowage");
    let store = open(&moto, "s3://stowage/caches/one");
    let data = Bytes::from((0..=255u8).cycle().take(100_000).collect::<Vec<u8>>());
    assert_eq!(store.put_new("objects/a", data.clone()).unwrap(), Created::New);
    assert_eq!(store.put_new("objects/a", data.clone()).unwrap(), Created::AlreadyThere);
    let err = store.put_new("objects/a", Bytes::from_static(b"other")).unwrap_err();
    assert!(matches!(err, Error::AlreadyExists { .. }), "{err}");
    assert!(err.to_string().contains("s3://stowage/caches/one/objects/a"), "{err}");

    assert_eq!(store.get_range("objects/a", 1_000..1_016).unwrap(), data.slice(1_000..1_016));
    let ranges = [0..4, 50_000..50_100, 99_990..100_000];
    let parts = store.get_ranges("objects/a", &ranges).unwrap();
    for (range, part) in ranges.iter().zip(&parts) {
        assert_eq!(part, &data.slice(range.start as usize..range.end as usize));
    }
    store.put_new("versions/1", Bytes::from_static(b"{}")).unwrap();
    let names: Vec<String> = store.list("").unwrap().into_iter().map(|o| o.name).collect();
    assert_eq!(names, ["objects/a", "versions/1"]);
    assert_eq!(store.head("objects/a").unwrap().unwrap().size, 100_000);
    let err = store.get("objects/none").unwrap_err();
    assert!(matches!(err, Error::NotFound { .. }), "{err}");
    // Another prefix in the same bucket sees none of it.
    assert!(open(&moto, "s3://stowage/caches/two").list("").unwrap().is_empty());
}

#[test]
fn on_s3_the_newest_version_costs_three_requests_and_versions_are_created_once() {
    use std::sync::Arc;
    use stowage_remote::faults::{FaultyStore, Operation};
    use stowage_remote::manifest::Manifest;
    use stowage_remote::{RemoteUrl, versions};

    let Some(moto) = MotoServer::start("on_s3_the_newest_version_costs_three_requests") else {
        return;
    };
    moto.create_bucket("versions");
    let options = options(&moto);
    let s3 = {
        let mut builder = AmazonS3Builder::new().with_bucket_name("versions");
        for (key, value) in &options {
            builder = builder.with_config(key.parse().unwrap(), value);
        }
        Arc::new(builder.build().unwrap())
    };
    let faulty = FaultyStore::new(s3);
    let store = faulty.store(RemoteUrl::parse("s3://versions/cache").unwrap());
    let mut manifest = Manifest::empty("arrow");
    for version in 1..=5 {
        manifest.version = version;
        assert_eq!(versions::commit(&store, &manifest).unwrap(), Created::New);
    }
    let mut other = manifest.clone();
    other.format = "npy".into();
    let err = versions::commit(&store, &other).unwrap_err();
    assert!(matches!(err, Error::AlreadyExists { .. }), "{err}");

    faulty.clear_log();
    assert_eq!(versions::newest(&store).unwrap().unwrap(), manifest);
    let kinds: Vec<Operation> = faulty.requests().iter().map(|r| r.operation).collect();
    assert_eq!(kinds, [Operation::Get, Operation::List, Operation::Get]);
}
