//! A rank's commits: how one writer (a process, on any machine) makes its objects durable and
//! announces them, without a lock and without touching another rank's objects.
//!
//! A rank uploads its data objects under `ranks/<rank>/`, then creates its commit
//! `commits/<rank>/<20-digit seq>.json` with a conditional put. The commit is the only thing
//! that makes the objects count: a rank killed mid-upload leaves objects no commit names, which
//! no reader ever sees. Sequence numbers count from 1 without gaps, because a rank creates
//! commit `s + 1` only after commit `s` exists; a restarted rank finds its next number with one
//! listing of its own commits ([`next_seq`]).
//!
//! Commits come from the store, so [`CommitRecord::parse`] checks them as it checks manifests.

use serde::{Deserialize, Serialize};
use stowage_core::bytes::Bytes;
use stowage_core::{Error, Result};

use crate::manifest::{
    LAYOUT, MAX_MANIFEST_BYTES, ObjectRef, check_object_name, check_rank, sequence_of,
};
use crate::store::{Created, RemoteStore};

/// A rank's commit, as stored.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CommitRecord {
    /// Always [`LAYOUT`].
    pub layout: u32,
    /// The rank that wrote it.
    pub rank: String,
    /// Its sequence number among the rank's commits, from 1.
    pub seq: u64,
    /// The backend format of its data objects.
    pub format: String,
    /// The rows it commits.
    pub rows: u64,
    /// Its data objects, all under `ranks/<rank>/`.
    pub objects: Vec<ObjectRef>,
}

impl CommitRecord {
    /// The object name of `rank`'s commit `seq`.
    ///
    /// ```
    /// use stowage_remote::commits::CommitRecord;
    /// assert_eq!(CommitRecord::name_of("r0", 3), "commits/r0/00000000000000000003.json");
    /// ```
    pub fn name_of(rank: &str, seq: u64) -> String {
        format!("commits/{rank}/{seq:020}.json")
    }

    /// The sequence number a commit's object name (under `commits/<rank>/`) stands for.
    pub fn seq_of(rank: &str, name: &str) -> Option<u64> {
        sequence_of(name.strip_prefix("commits/")?.strip_prefix(rank)?.strip_prefix('/')?)
    }

    /// The record's bytes: deterministic JSON.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut bytes = serde_json::to_vec_pretty(self).expect("a commit serializes");
        bytes.push(b'\n');
        bytes
    }

    /// Parses and checks the commit read from object `name` (`source` is its URL, for errors):
    /// it must be the rank and sequence its name says, name only objects under its rank's
    /// prefix, and be of this layout.
    ///
    /// Errors: [`Error::Corrupted`] naming `source` and what is wrong.
    pub fn parse(source: &str, name: &str, bytes: &[u8]) -> Result<CommitRecord> {
        let bad = |detail: String| Error::corrupted(source, detail);
        let record: CommitRecord = serde_json::from_slice(bytes)
            .map_err(|e| bad(format!("not a layout {LAYOUT} commit: {e}")))?;
        if record.layout != LAYOUT {
            return Err(bad(format!(
                "commit layout {}, this version reads {LAYOUT}",
                record.layout
            )));
        }
        check_rank(&record.rank).map_err(bad)?;
        if CommitRecord::seq_of(&record.rank, name) != Some(record.seq) {
            return Err(bad(format!(
                "it says it is commit {} of rank {}, but it is stored as {name}",
                record.seq, record.rank
            )));
        }
        let own = format!("ranks/{}/", record.rank);
        for object in &record.objects {
            check_object_name(&object.name).map_err(bad)?;
            object.digest()?;
            if !object.name.starts_with(&own) {
                return Err(bad(format!(
                    "it names {}, outside its rank's prefix {own}: a rank commits only its own \
                     objects",
                    object.name
                )));
            }
        }
        if record.to_bytes() != bytes {
            return Err(bad(
                "not in the form this layout writes a commit (edited or damaged)".into()
            ));
        }
        Ok(record)
    }
}

/// The sequence number `rank`'s next commit takes: one more than its newest commit, found with
/// one listing of `commits/<rank>/`.
///
/// Errors: [`Error::InvalidArgument`] for a bad rank name; the store's errors.
pub fn next_seq(store: &RemoteStore, rank: &str) -> Result<u64> {
    check_rank(rank).map_err(Error::invalid)?;
    let under = format!("commits/{rank}");
    let listed = store.list_after(&under, &format!("{under}/0"))?;
    let newest = listed.iter().filter_map(|o| CommitRecord::seq_of(rank, &o.name)).max();
    Ok(newest.unwrap_or(0) + 1)
}

/// Creates `record`'s commit object (conditional create). The rank's objects must already be
/// in the store: the commit is what makes them count.
///
/// Errors: [`Error::AlreadyExists`] when that commit exists with other content (two processes
/// claim the same rank: a configuration error, named, never resolved by overwriting).
pub fn commit(store: &RemoteStore, record: &CommitRecord) -> Result<Created> {
    let name = CommitRecord::name_of(&record.rank, record.seq);
    store.put_new(&name, Bytes::from(record.to_bytes())).map_err(|e| match e {
        Error::AlreadyExists { path } => Error::AlreadyExists {
            path: format!(
                "{} (another process committed as rank {} with other content: give every \
                 writer its own rank)",
                path.display(),
                record.rank
            )
            .into(),
        },
        other => other,
    })
}

/// Reads and checks `rank`'s commit `seq`, with the reference a manifest keeps of it.
///
/// Errors: [`Error::NotFound`] when there is no such commit; [`Error::Corrupted`] as
/// [`CommitRecord::parse`].
pub fn read(store: &RemoteStore, rank: &str, seq: u64) -> Result<(CommitRecord, ObjectRef)> {
    let name = CommitRecord::name_of(rank, seq);
    let bytes = store.get_at_most(&name, MAX_MANIFEST_BYTES)?;
    let record = CommitRecord::parse(&store.url().object_url(&name), &name, &bytes)?;
    Ok((record, ObjectRef::of(&name, &bytes)))
}
