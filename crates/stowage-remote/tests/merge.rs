//! Rank commits and their merge into versions, in one process: the result does not depend on
//! how the commits were merged, a lost answer or a lost race loses nothing, and hostile commits
//! are errors or skipped, never folded.

mod common;

use std::sync::Arc;

use object_store::memory::InMemory;
use stowage_core::Error;
use stowage_core::bytes::Bytes;
use stowage_remote::commits::{self, CommitRecord};
use stowage_remote::faults::{Fault, FaultyStore, Operation, Rule};
use stowage_remote::manifest::{Manifest, ObjectRef};
use stowage_remote::merge::{self, Merged};
use stowage_remote::{Created, RemoteStore, RemoteUrl, versions};

fn faulty_store(name: &str) -> (RemoteStore, Arc<FaultyStore>) {
    let faulty = FaultyStore::new(Arc::new(InMemory::new()));
    (faulty.store(RemoteUrl::parse(&format!("memory://{name}/cache")).unwrap()), faulty)
}

/// A manifest's content without its version number.
fn content(manifest: &Manifest) -> Manifest {
    Manifest { version: 0, ..manifest.clone() }
}

#[test]
fn the_content_after_a_set_of_commits_does_not_depend_on_how_they_were_merged() {
    let schedule = ["r2", "r0", "r1", "r0", "r2", "r2", "r1", "r0"];
    // Merged after every commit.
    let (eager, _) = faulty_store("merge-eager");
    for rank in schedule {
        common::commit_one(&eager, rank);
        assert!(matches!(
            merge::merge(&eager, "arrow").unwrap(),
            Merged::Version { folded: 1, .. }
        ));
    }
    // Merged once at the end.
    let (lazy, _) = faulty_store("merge-lazy");
    for rank in schedule {
        common::commit_one(&lazy, rank);
    }
    assert_eq!(merge::merge(&lazy, "arrow").unwrap(), Merged::Version { version: 1, folded: 8 });
    assert_eq!(merge::merge(&lazy, "arrow").unwrap(), Merged::NothingPending { version: Some(1) });

    let eager_newest = versions::newest(&eager).unwrap().unwrap();
    let lazy_newest = versions::newest(&lazy).unwrap().unwrap();
    assert_eq!(eager_newest.version, 8);
    assert_eq!(content(&eager_newest).to_bytes(), content(&lazy_newest).to_bytes());
    let order: Vec<(String, u64)> =
        lazy_newest.parts.iter().map(|p| (p.rank.clone(), p.seq)).collect();
    let expected: Vec<(String, u64)> = [("r0", 1), ("r0", 2), ("r0", 3), ("r1", 1), ("r1", 2)]
        .into_iter()
        .chain([("r2", 1), ("r2", 2), ("r2", 3)])
        .map(|(r, s)| (r.to_owned(), s))
        .collect();
    assert_eq!(order, expected);
    assert_eq!(lazy_newest.rows, 8 * 10 + (1 + 2 + 3) + (1 + 2) + (1 + 2 + 3));
}

#[test]
fn mergers_of_the_same_commits_agree_and_a_lost_answer_loses_nothing() {
    let (store, faulty) = faulty_store("merge-race");
    common::commit_one(&store, "r0");
    common::commit_one(&store, "r1");
    // Two mergers that read the same base fold the same commits into the same bytes.
    let pending = merge::pending(&store, None).unwrap();
    let first = merge::fold(None, "arrow", &pending).unwrap();
    assert_eq!(versions::commit(&store, &first).unwrap(), Created::New);
    assert_eq!(versions::commit(&store, &first).unwrap(), Created::AlreadyThere);

    // The version's create takes effect but its answer is lost: the merge reads it back.
    common::commit_one(&store, "r0");
    faulty.inject(Rule::once(Operation::Put, "versions/", Fault::LoseResponse));
    assert_eq!(merge::merge(&store, "arrow").unwrap(), Merged::Version { version: 2, folded: 1 });
    // A 503 on the version's create: the merge sends it again.
    common::commit_one(&store, "r1");
    faulty.inject(Rule::once(Operation::Put, "versions/", Fault::Unavailable));
    assert_eq!(merge::merge(&store, "arrow").unwrap(), Merged::Version { version: 3, folded: 1 });
    let newest = versions::newest(&store).unwrap().unwrap();
    assert_eq!(newest.watermarks.values().copied().collect::<Vec<_>>(), [2, 2]);
}

#[test]
fn a_gap_in_a_ranks_commits_waits_and_other_writers_objects_are_never_folded() {
    let (store, _) = faulty_store("merge-gap");
    common::commit_one(&store, "r0");
    // Commit 3 of r0 exists while 2 is still being created: only 1 is folded.
    let record = |seq: u64, objects: Vec<ObjectRef>| CommitRecord {
        layout: 1,
        rank: "r0".into(),
        seq,
        format: "arrow".into(),
        rows: 1,
        objects,
    };
    commits::commit(&store, &record(3, vec![])).unwrap();
    assert_eq!(merge::merge(&store, "arrow").unwrap(), Merged::Version { version: 1, folded: 1 });
    commits::commit(&store, &record(2, vec![])).unwrap();
    assert_eq!(merge::merge(&store, "arrow").unwrap(), Merged::Version { version: 2, folded: 2 });

    // Something under commits/ that is not a rank's is not stowage's: skipped, kept.
    store.put_new("commits/not a rank!/x", Bytes::from_static(b"foreign")).unwrap();
    assert_eq!(merge::merge(&store, "arrow").unwrap(), Merged::NothingPending { version: Some(2) });
    assert_eq!(store.get("commits/not a rank!/x").unwrap().as_ref(), b"foreign");

    // A commit naming another rank's object is corruption, and nothing is folded.
    let stolen = ObjectRef::of("ranks/r9/objects/1.bin", b"x");
    commits::commit(&store, &record(4, vec![stolen])).unwrap();
    let err = merge::merge(&store, "arrow").unwrap_err();
    assert!(matches!(err, Error::Corrupted { .. }), "{err}");
    assert!(err.to_string().contains("outside its rank's prefix"), "{err}");
    assert_eq!(versions::newest(&store).unwrap().unwrap().version, 2);
}

#[test]
fn hostile_or_misnamed_commits_are_errors_naming_them() {
    let (store, _) = faulty_store("merge-hostile");
    let honest = CommitRecord {
        layout: 1,
        rank: "r0".into(),
        seq: 1,
        format: "arrow".into(),
        rows: 1,
        objects: vec![],
    };
    // Stored as commit 2 while it says it is commit 1.
    store.put_new(&CommitRecord::name_of("r0", 2), Bytes::from(honest.to_bytes())).unwrap();
    let err = commits::read(&store, "r0", 2).unwrap_err();
    assert!(err.to_string().contains("says it is commit 1 of rank r0"), "{err}");
    store.put_new(&CommitRecord::name_of("r1", 1), Bytes::from_static(b"{\"layout\": 1}")).unwrap();
    let err = commits::read(&store, "r1", 1).unwrap_err();
    assert!(matches!(err, Error::Corrupted { .. }), "{err}");
    assert!(err.to_string().contains("commits/r1/00000000000000000001.json"), "{err}");

    // Two processes that claim one rank: the second's different commit is refused by name.
    commits::commit(&store, &honest).unwrap();
    let other = CommitRecord { rows: 2, ..honest.clone() };
    let err = commits::commit(&store, &other).unwrap_err();
    assert!(matches!(err, Error::AlreadyExists { .. }), "{err}");
    assert!(err.to_string().contains("give every writer its own rank"), "{err}");

    // A commit of another format into an arrow cache is incompatible.
    let (store, _) = faulty_store("merge-format");
    common::commit_one(&store, "r0");
    merge::merge(&store, "arrow").unwrap();
    commits::commit(&store, &CommitRecord { rank: "r1".into(), format: "npy".into(), ..honest })
        .unwrap();
    let err = merge::merge(&store, "arrow").unwrap_err();
    assert!(matches!(err, Error::Incompatible { .. }), "{err}");
}
