//! What several test binaries of stowage-remote share.

use stowage_core::bytes::Bytes;
use stowage_remote::RemoteStore;
use stowage_remote::commits::{self, CommitRecord};
use stowage_remote::manifest::ObjectRef;

/// Rank `rank` uploads one data object and commits it as its next commit (`rows`: the sequence
/// number plus 10); returns the sequence number. A rank killed before its commit and run again
/// uploads the same bytes under the same name, which the store finds already there.
pub fn commit_one(store: &RemoteStore, rank: &str) -> u64 {
    let seq = commits::next_seq(store, rank).unwrap();
    let name = format!("ranks/{rank}/objects/{seq}.bin");
    let data = format!("{rank} rows of commit {seq}");
    store.put_new(&name, Bytes::from(data.clone())).unwrap();
    let record = CommitRecord {
        layout: 1,
        rank: rank.into(),
        seq,
        format: "arrow".into(),
        rows: 10 + seq,
        objects: vec![ObjectRef::of(&name, data.as_bytes())],
    };
    commits::commit(store, &record).unwrap();
    seq
}
