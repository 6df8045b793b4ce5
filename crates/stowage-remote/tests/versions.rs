//! Versions on a store: the newest is found in three requests whatever the pointer says, a
//! version is created once, and hostile manifests are errors.

use std::sync::Arc;

use object_store::memory::InMemory;
use stowage_core::Error;
use stowage_core::bytes::Bytes;
use stowage_remote::faults::{Fault, FaultyStore, Operation, Rule};
use stowage_remote::manifest::{Manifest, ObjectRef, PartRef};
use stowage_remote::versions::{self, LATEST};
use stowage_remote::{Created, RemoteStore, RemoteUrl};

fn faulty_store() -> (RemoteStore, Arc<FaultyStore>) {
    let faulty = FaultyStore::new(Arc::new(InMemory::new()));
    (faulty.store(RemoteUrl::parse("memory://versions/cache").unwrap()), faulty)
}

/// Version `version` with one part from rank `rank`.
fn manifest(version: u64, rank: &str) -> Manifest {
    let mut m = Manifest::empty("arrow");
    m.version = version;
    let name = format!("ranks/{rank}/commits/{version:020}.json");
    m.parts.push(PartRef {
        rank: rank.into(),
        seq: version,
        commit: ObjectRef::of(&name, b"c"),
        rows: 1,
        objects: Vec::new(),
    });
    m.rows = 1;
    m.watermarks.insert(rank.into(), version);
    m
}

#[test]
fn the_newest_version_costs_three_requests_whatever_the_pointer_says() {
    let (store, faulty) = faulty_store();
    assert_eq!(versions::newest(&store).unwrap(), None);
    for version in 1..=30 {
        assert_eq!(versions::commit(&store, &manifest(version, "r0")).unwrap(), Created::New);
    }
    for pointer in ["30\n", "7\n", "1\n"] {
        store.put_pointer(LATEST, Bytes::from(pointer)).unwrap();
        faulty.clear_log();
        assert_eq!(versions::newest(&store).unwrap().unwrap(), manifest(30, "r0"), "{pointer}");
        let requests = faulty.requests();
        assert_eq!(requests.len(), 3, "pointer {pointer:?}: {requests:?}");
        let kinds: Vec<Operation> = requests.iter().map(|r| r.operation).collect();
        assert_eq!(kinds, [Operation::Get, Operation::List, Operation::Get]);
    }
    // A pointer that is damaged, hostile or ahead of every version costs a full listing, and
    // still finds the newest.
    for pointer in ["garbage", "99999\n", "0\n", ""] {
        store.put_pointer(LATEST, Bytes::from(pointer)).unwrap();
        assert_eq!(versions::newest(&store).unwrap().unwrap().version, 30, "{pointer:?}");
    }
}

#[test]
fn a_version_is_created_once_and_a_lost_race_is_named() {
    let (store, faulty) = faulty_store();
    versions::commit(&store, &manifest(1, "r0")).unwrap();
    // The same bytes: the other committer folded the same commits.
    assert_eq!(versions::commit(&store, &manifest(1, "r0")).unwrap(), Created::AlreadyThere);
    let err = versions::commit(&store, &manifest(1, "r1")).unwrap_err();
    assert!(matches!(err, Error::AlreadyExists { .. }), "{err}");
    assert!(err.to_string().contains("versions/00000000000000000001.json"), "{err}");
    assert_eq!(versions::newest(&store).unwrap().unwrap(), manifest(1, "r0"));
    // An answer lost after the create took effect is resolved by reading back.
    faulty.inject(Rule::once(Operation::Put, "versions/", Fault::LoseResponse));
    assert_eq!(versions::commit(&store, &manifest(2, "r0")).unwrap(), Created::AlreadyThere);
    assert_eq!(versions::newest(&store).unwrap().unwrap().version, 2);
}

#[test]
fn hostile_manifests_are_errors_naming_the_object() {
    let (store, _faulty) = faulty_store();
    versions::commit(&store, &manifest(1, "r0")).unwrap();
    // Version 2's object claims to be version 1.
    store.put_new(&Manifest::name_of(2), Bytes::from(manifest(1, "r1").to_bytes())).unwrap();
    let err = versions::newest(&store).unwrap_err();
    assert!(matches!(err, Error::Corrupted { .. }), "{err}");
    assert!(err.to_string().contains("says it is version 1, its name says 2"), "{err}");

    for (version, bytes) in [
        (3, Bytes::from_static(b"{\"layout\": 1")),
        (4, Bytes::from_static(b"\xff\xfe")),
        (5, Bytes::from(vec![b' '; stowage_remote::manifest::MAX_MANIFEST_BYTES as usize + 1])),
    ] {
        store.put_new(&Manifest::name_of(version), bytes).unwrap();
        let err = versions::read(&store, version).unwrap_err();
        assert!(matches!(err, Error::Corrupted { .. }), "{version}: {err}");
        assert!(err.to_string().contains(&Manifest::name_of(version)), "{err}");
    }
    let err = versions::read(&store, 77).unwrap_err();
    assert!(matches!(err, Error::NotFound { .. }), "{err}");
}
