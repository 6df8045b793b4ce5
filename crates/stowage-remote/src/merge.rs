//! Folding the ranks' commits into the next version: no lock, and a result that does not depend
//! on timing.
//!
//! Any process may merge (a writer does after each commit). A merge reads the newest version,
//! finds every rank's commits past that version's watermark for it, folds them in, and creates
//! the next version with a conditional put. When another merger created that version first, it
//! reads the new one and tries again (backing off), so every commit is folded by some merge.
//!
//! [`fold`] is a pure function of the base version and the commits: parts are kept sorted by
//! (rank, sequence), and for a key that several parts hold the first in that order wins, so the
//! content after a set of commits is the same whichever merges folded them, in whatever order.
//! Two mergers that fold the same commits onto the same base write byte-identical manifests, and
//! the second finds the first's ([`Created::AlreadyThere`]) instead of conflicting.
//!
//! Cost of a merge: the three requests of [`versions::newest`], one listing of `commits/` (per
//! thousand ranks), one listing per rank, one GET per new commit, and one conditional put (plus
//! one round per lost race).

use std::time::Duration;

use stowage_core::{Error, Result};

use crate::commits::{self, CommitRecord};
use crate::manifest::{Manifest, ObjectRef, PartRef, check_rank};
use crate::store::{Created, RemoteStore};
use crate::versions;

/// How many times a merge tries before it reports that it kept losing races (the commits stay
/// durable, and the next merge folds them).
pub const MERGE_ATTEMPTS: u32 = 16;

/// A commit not folded into the base version yet.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pending {
    /// The commit as stored.
    pub record: CommitRecord,
    /// The reference the manifest keeps of its object.
    pub reference: ObjectRef,
}

/// What [`merge`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Merged {
    /// It created version `version`, folding `folded` commits (or found that another merger had
    /// created exactly that version).
    Version {
        /// The version created.
        version: u64,
        /// The commits it folded.
        folded: usize,
    },
    /// No commit was waiting; the newest version is `version` (`None`: there is none).
    NothingPending {
        /// The newest version.
        version: Option<u64>,
    },
}

/// The version that folds `pending` into `base` (`None`: the cache has no version yet; the
/// result is version 1). Pure: the same arguments give the same manifest, whatever their order.
///
/// Errors: [`Error::Incompatible`] naming the commit when its format is not the cache's;
/// [`Error::InvalidArgument`] when a commit is already folded or leaves a gap in its rank's
/// sequence (the caller gathered them wrong).
///
/// ```
/// use stowage_remote::commits::CommitRecord;
/// use stowage_remote::manifest::ObjectRef;
/// use stowage_remote::merge::{Pending, fold};
///
/// let pending = |rank: &str, seq: u64| {
///     let record = CommitRecord { layout: 1, rank: rank.into(), seq, format: "arrow".into(), rows: 2, objects: vec![] };
///     let name = CommitRecord::name_of(rank, seq);
///     Pending { reference: ObjectRef::of(&name, &record.to_bytes()), record }
/// };
/// let one_order = fold(None, "arrow", &[pending("b", 1), pending("a", 1), pending("a", 2)]).unwrap();
/// let other_order = fold(None, "arrow", &[pending("a", 2), pending("b", 1), pending("a", 1)]).unwrap();
/// assert_eq!(one_order.to_bytes(), other_order.to_bytes());
/// assert_eq!((one_order.version, one_order.rows, one_order.parts[0].rank.as_str()), (1, 6, "a"));
/// ```
pub fn fold(base: Option<&Manifest>, format: &str, pending: &[Pending]) -> Result<Manifest> {
    let mut next = match base {
        Some(base) => base.clone(),
        None => Manifest { version: 0, ..Manifest::empty(format) },
    };
    if next.format != format {
        return Err(Error::Incompatible {
            path: "manifest".into(),
            detail: format!("the cache holds {} parts, the writer writes {format}", next.format),
        });
    }
    let mut pending: Vec<&Pending> = pending.iter().collect();
    pending.sort_by(|a, b| (&a.record.rank, a.record.seq).cmp(&(&b.record.rank, b.record.seq)));
    for commit in pending {
        let record = &commit.record;
        if record.format != next.format {
            return Err(Error::Incompatible {
                path: commit.reference.name.clone().into(),
                detail: format!("a {} commit into a {} cache", record.format, next.format),
            });
        }
        let mark = next.watermarks.get(&record.rank).copied().unwrap_or(0);
        if record.seq != mark + 1 {
            return Err(Error::invalid(format!(
                "commit {} of rank {} cannot follow its watermark {mark}",
                record.seq, record.rank
            )));
        }
        next.watermarks.insert(record.rank.clone(), record.seq);
        next.rows += record.rows;
        next.keys += record.rows;
        next.parts.push(PartRef {
            rank: record.rank.clone(),
            seq: record.seq,
            commit: commit.reference.clone(),
            rows: record.rows,
            objects: record.objects.clone(),
        });
    }
    next.parts.sort_by(|a, b| (&a.rank, a.seq).cmp(&(&b.rank, b.seq)));
    next.version += 1;
    Ok(next)
}

/// Every commit past `base`'s watermarks: per rank, the run of consecutive sequence numbers
/// after its watermark (a gap, which only a commit still being created leaves, ends the run).
/// Names under `commits/` that are not a rank's are not stowage's, and are skipped.
///
/// Errors: the store's; [`Error::Corrupted`] for a commit that does not parse.
pub fn pending(store: &RemoteStore, base: Option<&Manifest>) -> Result<Vec<Pending>> {
    let mut found = Vec::new();
    for rank in store.list_dirs("commits")? {
        if check_rank(&rank).is_err() {
            continue;
        }
        let mark = base.and_then(|b| b.watermarks.get(&rank).copied()).unwrap_or(0);
        let after = if mark == 0 {
            format!("commits/{rank}/0")
        } else {
            CommitRecord::name_of(&rank, mark)
        };
        let mut seqs: Vec<u64> = store
            .list_after(&format!("commits/{rank}"), &after)?
            .iter()
            .filter_map(|object| CommitRecord::seq_of(&rank, &object.name))
            .collect();
        seqs.sort_unstable();
        for (expected, seq) in (mark + 1..).zip(seqs) {
            if seq != expected {
                break;
            }
            let (record, reference) = commits::read(store, &rank, seq)?;
            found.push(Pending { record, reference });
        }
    }
    Ok(found)
}

/// Folds every pending commit into a new version of the cache in `store` (format `format`),
/// retrying when another merger wins the version (see the module docs). Every row counts as a
/// distinct key: [`merge_with`] counts them.
///
/// Errors: the store's; those of [`fold`] and [`pending`]; [`Error::Io`] (`ResourceBusy`) after
/// [`MERGE_ATTEMPTS`] lost races in a row (nothing is lost: the commits stay durable, and the
/// next merge folds them).
pub fn merge(store: &RemoteStore, format: &str) -> Result<Merged> {
    merge_with(store, format, false, &|next, _, _| Ok(next.keys))
}

/// Counts the distinct keys of a version: given the fold's result, its base and the commits
/// folded, the number of distinct keys its parts hold. Must depend on nothing else, so that the
/// manifest stays a function of its commits.
pub type KeyCounter<'a> = dyn Fn(&Manifest, Option<&Manifest>, &[Pending]) -> Result<u64> + 'a;

/// [`merge`], with the distinct keys counted by `count`, and with `finalize` the new version
/// marked complete. With `finalize` and nothing pending, a version that only marks the newest
/// complete is created, unless it is complete already.
///
/// Errors: as [`merge`]; `count`'s.
pub fn merge_with(
    store: &RemoteStore,
    format: &str,
    finalize: bool,
    count: &KeyCounter<'_>,
) -> Result<Merged> {
    for attempt in 0..MERGE_ATTEMPTS {
        let base = versions::newest(store)?;
        let pending = pending(store, base.as_ref())?;
        let complete = base.as_ref().is_some_and(|b| b.finalized);
        if pending.is_empty() && (!finalize || complete) {
            return Ok(Merged::NothingPending { version: base.map(|b| b.version) });
        }
        let mut next = fold(base.as_ref(), format, &pending)?;
        next.keys = count(&next, base.as_ref(), &pending)?;
        next.finalized |= finalize;
        match versions::commit(store, &next) {
            Ok(Created::New | Created::AlreadyThere) => {
                return Ok(Merged::Version { version: next.version, folded: pending.len() });
            }
            Err(Error::AlreadyExists { .. }) => std::thread::sleep(backoff(attempt)),
            Err(other) => return Err(other),
        }
    }
    Err(Error::io(
        store.url().object_url("versions"),
        std::io::Error::new(
            std::io::ErrorKind::ResourceBusy,
            format!(
                "lost {MERGE_ATTEMPTS} merge races in a row to other mergers; the commits are \
                 durable and the next merge folds them"
            ),
        ),
    ))
}

/// The wait after losing race `attempt`: growing, with a per-process jitter so that mergers that
/// lost together do not retry together.
fn backoff(attempt: u32) -> Duration {
    let base_ms = 2u64 << attempt.min(7);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    let seed = u64::from(std::process::id()) ^ u64::from(nanos) ^ u64::from(attempt);
    let jitter = xxhash_rust::xxh3::xxh3_64(&seed.to_le_bytes()) % base_ms.max(1);
    Duration::from_millis(base_ms + jitter)
}
