//! A store opened before a fork works in the child (a DataLoader worker) and, afterwards, in the
//! parent: the child makes its own runtime and client instead of using the parent's.
//!
//! One test in a binary of its own, so that no other test's threads are running when it forks.

use stowage_core::bytes::Bytes;
use stowage_remote::{RemoteStore, runtime};
use stowage_test_support::fork::{Ended, fork_child, wait_child};
use stowage_test_support::moto::MotoServer;

fn use_across_fork(store: &RemoteStore) {
    let data = Bytes::from_static(b"written by the parent before the fork");
    store.put_new("objects/parent", data.clone()).unwrap();
    assert_eq!(store.get_range("objects/parent", 0..7).unwrap().as_ref(), b"written");
    let parent = std::process::id();
    assert_eq!(runtime::made_in(), Some(parent));

    let child = fork_child(30, || {
        let read = store.get("objects/parent").ok() == Some(data.clone());
        let wrote = store.put_new("objects/child", Bytes::from_static(b"child")).is_ok();
        let own_runtime = runtime::made_in() == Some(std::process::id());
        i32::from(!(read && wrote && own_runtime))
    });
    let ended = wait_child(child);
    assert_eq!(
        ended,
        Ended::Exited(0),
        "{}: the forked child could not read and write",
        store.url()
    );
    // The parent's runtime and client are untouched by the child's.
    assert_eq!(runtime::made_in(), Some(parent));
    assert_eq!(store.get("objects/child").unwrap().as_ref(), b"child", "{}", store.url());
    assert_eq!(store.get("objects/parent").unwrap(), data);
}

#[test]
fn a_store_opened_before_a_fork_works_in_the_child_and_then_the_parent() {
    let dir = tempfile::tempdir().unwrap();
    let local = RemoteStore::open(&format!("file://{}/cache", dir.path().display())).unwrap();
    use_across_fork(&local);

    // Over HTTP the client holds pooled connections, which the child must not share.
    let Some(moto) = MotoServer::start("a_store_opened_before_a_fork_works (s3)") else { return };
    moto.create_bucket("fork");
    let options = moto.s3_options();
    let pairs: Vec<(&str, &str)> = options.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let s3 = RemoteStore::open_with("s3://fork/cache", &pairs).unwrap();
    use_across_fork(&s3);
}
