//! The node-local cache shared by processes: concurrent fetches of one object download it once,
//! and a downloader killed with `kill -9` leaves no copy behind and blocks no one.
//!
//! One test in a binary of its own: it forks.

use std::sync::Arc;
use std::time::{Duration, Instant};

use object_store::ObjectStore;
use object_store::local::LocalFileSystem;
use stowage_core::bytes::Bytes;
use stowage_remote::faults::{Fault, FaultyStore, Operation, Rule};
use stowage_remote::node_cache::{NodeCache, ObjectDigest, Source};
use stowage_remote::{RemoteStore, RemoteUrl};
use stowage_test_support::fork::{Ended, fork_child, kill_child, wait_child};

/// A `file://` store (shared by the processes) whose gets of data objects take `delay`, so that
/// fetches overlap.
fn slow_store(root: &std::path::Path, delay: Duration) -> RemoteStore {
    let url = RemoteUrl::parse(&format!("file://{}/cache", root.display())).unwrap();
    RemoteStore::with_maker(
        url,
        Arc::new(move || {
            let faulty = FaultyStore::new(Arc::new(LocalFileSystem::new()));
            faulty
                .inject(Rule::once(Operation::Get, "data/", Fault::Slow(delay)).times(usize::MAX));
            Ok(faulty as Arc<dyn ObjectStore>)
        }),
    )
}

/// Whether some process holds the lock of a download in `cache` (its only lock file).
fn a_download_is_in_progress(cache: &std::path::Path) -> bool {
    let Ok(entries) = std::fs::read_dir(cache.join("locks")) else { return false };
    entries.flatten().any(|entry| {
        let file = std::fs::File::open(entry.path()).unwrap();
        // SAFETY: a non-blocking flock on a descriptor this File owns.
        let free = unsafe {
            libc::flock(std::os::fd::AsRawFd::as_raw_fd(&file), libc::LOCK_EX | libc::LOCK_NB)
        } == 0;
        !free
    })
}

#[test]
fn processes_share_downloads_and_survive_a_killed_downloader() {
    let remote = tempfile::tempdir().unwrap();
    let data = Bytes::from((0..200_000u32).map(|i| (i % 251) as u8).collect::<Vec<u8>>());
    let digest = ObjectDigest::of(&data);
    slow_store(remote.path(), Duration::ZERO).put_new("data/a", data.clone()).unwrap();
    let store = slow_store(remote.path(), Duration::from_millis(300));

    // Four processes fetch one object at once: one downloads, three wait and read its copy.
    let local = tempfile::tempdir().unwrap();
    let cache = NodeCache::open(local.path(), 1 << 30).unwrap();
    let children: Vec<libc::pid_t> = (0..4)
        .map(|_| {
            fork_child(60, || match cache.fetch(&store, "data/a", digest) {
                Ok(copy) if copy.bytes() == &data => match copy.source() {
                    Source::Downloaded => 10,
                    Source::Cached => 11,
                },
                _ => 1,
            })
        })
        .collect();
    let ended: Vec<Ended> = children.into_iter().map(wait_child).collect();
    let downloaded = ended.iter().filter(|e| **e == Ended::Exited(10)).count();
    let cached = ended.iter().filter(|e| **e == Ended::Exited(11)).count();
    assert_eq!((downloaded, cached), (1, 3), "{ended:?}");

    // A downloader killed mid-download: its lock goes with it, and no partial copy is served.
    let local = tempfile::tempdir().unwrap();
    let cache = NodeCache::open(local.path(), 1 << 30).unwrap();
    let stuck = slow_store(remote.path(), Duration::from_secs(30));
    let victim = fork_child(60, || i32::from(cache.fetch(&stuck, "data/a", digest).is_err()));
    let start = Instant::now();
    while !a_download_is_in_progress(local.path()) {
        assert!(start.elapsed() < Duration::from_secs(20), "the downloader never took its lock");
        std::thread::sleep(Duration::from_millis(10));
    }
    kill_child(victim);
    assert_eq!(wait_child(victim), Ended::Signaled(libc::SIGKILL));
    assert_eq!(cache.usage().unwrap(), (0, 0));
    let copy = cache.fetch(&store, "data/a", digest).unwrap();
    assert_eq!((copy.bytes(), copy.source()), (&data, Source::Downloaded));
}
