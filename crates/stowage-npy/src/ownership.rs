//! Which collection files stowage created: `owned_files.log`.
//!
//! hangar writes its own collection files into the same `data/10` and marks them in the same
//! `stage_data/10` and `store_data/10`, with nothing in the file saying who wrote it. stowage must
//! still commit and unstage only its own files and report every other one as unchecked, including
//! its own files that no record points into yet (a session killed before its first flush). So every
//! uid is *claimed* in this log, durably, before its data file is created:
//!
//! ```text
//! record = "claim <uid>"     the file data/10/<uid>.npy is stowage's, if it exists
//!        | "release <uid>"   the claim is withdrawn: the name was taken before stowage got it
//! ```
//!
//! Claim first, then create with `O_EXCL`: after a crash at any point, every file stowage created
//! is claimed, and a claim whose file was never created names no file. A file another writer
//! creates under a name stowage claimed but never created is the one way a claim can be wrong;
//! stowage draws uids that exist nowhere in the cache, so that takes another writer drawing the same
//! 8 random characters (one in 36^8).
//!
//! Caches written before this log existed have none; their files are known from `records.log`
//! only, and a file of a session that crashed before its first flush looks like another writer's.

use crate::layout::Layout;
use crate::record::is_valid_uid;
use std::collections::BTreeSet;
use stowage_core::file_safety::{AppendLog, Damage};
use stowage_core::{Error, Result};

const CLAIM: &str = "claim ";
const RELEASE: &str = "release ";

/// What `owned_files.log` says: the uids stowage claimed and did not release.
///
/// ```
/// # let dir = tempfile::tempdir()?;
/// let layout = stowage_npy::test_support::Layout::new(dir.path());
/// // No log yet (a new cache, or one written before the log existed): no claims.
/// let claims = stowage_npy::test_support::read_claims(&layout)?;
/// assert!(claims.uids.is_empty() && claims.damage.is_none() && claims.records.is_none());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Claims {
    /// The claimed uids, read up to the first damaged record.
    pub uids: BTreeSet<String>,
    /// The log's first damaged record, if any: claims after it are unknown.
    pub damage: Option<Damage>,
    /// Good records read (claims and releases); `None` when there is no log.
    pub records: Option<u64>,
}

/// Reads `owned_files.log` without changing it; no log reads as no claims.
///
/// Errors: [`Error::Corrupted`] naming the log and the record when a record with a good checksum
/// is not a claim or a release of a valid uid, or the file is not an append log; [`Error::Io`].
///
/// ```
/// # let dir = tempfile::tempdir()?;
/// # let layout = stowage_npy::test_support::Layout::new(dir.path());
/// std::fs::write(layout.owned_files_log(), b"not a log")?;
/// assert!(stowage_npy::test_support::read_claims(&layout).is_err());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn read_claims(layout: &Layout) -> Result<Claims> {
    let path = layout.owned_files_log();
    let scanned = match AppendLog::read_all(&path) {
        Ok(scanned) => scanned,
        Err(Error::NotFound { .. }) if !path.exists() => return Ok(Claims::default()),
        Err(e) => return Err(e),
    };
    Ok(Claims {
        uids: decode(&scanned.records, layout)?,
        damage: scanned.damage,
        records: Some(scanned.records.len() as u64),
    })
}

fn decode(records: &[Vec<u8>], layout: &Layout) -> Result<BTreeSet<String>> {
    let mut uids = BTreeSet::new();
    for (i, record) in records.iter().enumerate() {
        match parse(record) {
            Some(Entry::Claim(uid)) => uids.insert(uid.to_owned()),
            Some(Entry::Release(uid)) => uids.remove(uid),
            None => {
                return Err(Error::corrupted(
                    layout.owned_files_log(),
                    format!(
                        "record {i}: {} is not \"claim <uid>\" or \"release <uid>\" with an \
                         8-character [a-z0-9] uid",
                        stowage_core::quote::quote(&String::from_utf8_lossy(record), 40)
                    ),
                ));
            }
        };
    }
    Ok(uids)
}

/// One record of the log.
enum Entry<'a> {
    Claim(&'a str),
    Release(&'a str),
}

fn parse(record: &[u8]) -> Option<Entry<'_>> {
    let text = std::str::from_utf8(record).ok()?;
    let entry = match (text.strip_prefix(CLAIM), text.strip_prefix(RELEASE)) {
        (Some(uid), _) => Entry::Claim(uid),
        (_, Some(uid)) => Entry::Release(uid),
        _ => return None,
    };
    let (Entry::Claim(uid) | Entry::Release(uid)) = entry;
    is_valid_uid(uid).then_some(entry)
}

/// The writer's side of the log: the files this cache's writers created, claimed before each is.
pub(crate) struct OwnedFiles {
    log: AppendLog,
    /// Claimed uids and every uid `records.log` points into (stowage wrote those files as well,
    /// also in caches written before this log existed).
    uids: BTreeSet<String>,
}

impl OwnedFiles {
    /// Opens (creating it when missing) the log of a cache whose records point into the files
    /// `referenced`. A log damaged before its end is refused, as `records.log` is: cutting it back
    /// would silently disown files.
    pub(crate) fn open<'a>(
        layout: &Layout,
        referenced: impl IntoIterator<Item = &'a String>,
    ) -> Result<OwnedFiles> {
        let path = layout.owned_files_log();
        let claims = read_claims(layout)?;
        if let Some(damage) = claims.damage.as_ref().filter(|d| d.is_mid_log()) {
            return Err(Error::corrupted(&path, damage.to_string()));
        }
        // A torn tail is a claim whose sync never completed, so its file was never created.
        let (log, _) = AppendLog::open(&path, true)?;
        let mut uids = claims.uids;
        uids.extend(referenced.into_iter().cloned());
        Ok(OwnedFiles { log, uids })
    }

    /// Whether stowage created (or claimed) collection file `uid`.
    pub(crate) fn contains(&self, uid: &str) -> bool {
        self.uids.contains(uid)
    }

    /// Every file stowage created or claimed.
    pub(crate) fn uids(&self) -> impl Iterator<Item = &str> {
        self.uids.iter().map(String::as_str)
    }

    /// Claims `uid`, durably: only then may its data file be created.
    pub(crate) fn claim(&mut self, uid: &str) -> Result<()> {
        self.append(CLAIM, uid)?;
        self.uids.insert(uid.to_owned());
        Ok(())
    }

    /// Withdraws the claim of a uid whose file could not be created because the name was taken.
    pub(crate) fn release(&mut self, uid: &str) -> Result<()> {
        self.append(RELEASE, uid)?;
        self.uids.remove(uid);
        Ok(())
    }

    /// Records in the log (claims and releases).
    pub(crate) fn records(&self) -> u64 {
        self.log.len()
    }

    fn append(&mut self, what: &str, uid: &str) -> Result<()> {
        self.log.append(format!("{what}{uid}").as_bytes())?;
        self.log.sync()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn claims_and_releases_are_replayed_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let layout = Layout::new(dir.path());
        let referenced = vec!["refd0000".to_owned()];
        let mut owned = OwnedFiles::open(&layout, &referenced).unwrap();
        owned.claim("aaaa1111").unwrap();
        owned.claim("bbbb2222").unwrap();
        owned.release("aaaa1111").unwrap();
        assert!(owned.contains("bbbb2222") && owned.contains("refd0000"));
        assert!(!owned.contains("aaaa1111"));
        drop(owned);
        let claims = read_claims(&layout).unwrap();
        assert_eq!(claims.uids.into_iter().collect::<Vec<_>>(), ["bbbb2222"]);
        let reopened = OwnedFiles::open(&layout, &[]).unwrap();
        assert_eq!(reopened.uids().collect::<Vec<_>>(), ["bbbb2222"]);
    }

    #[test]
    fn a_record_that_is_no_claim_is_corruption_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        let layout = Layout::new(dir.path());
        let (mut log, _) = AppendLog::open(layout.owned_files_log(), true).unwrap();
        log.append(b"claim abcd1234").unwrap();
        log.append(b"claim ../../etc").unwrap();
        log.sync().unwrap();
        drop(log);
        let err = read_claims(&layout).unwrap_err();
        assert!(matches!(err, Error::Corrupted { .. }), "{err}");
        let msg = err.to_string();
        assert!(msg.contains("owned_files.log") && msg.contains("record 1"), "{msg}");
        assert!(msg.contains("claim ../../etc"), "{msg}");
        assert!(OwnedFiles::open(&layout, &[]).is_err());
    }

    #[test]
    fn mid_log_damage_refuses_the_writer_and_leaves_the_log_alone() {
        let dir = tempfile::tempdir().unwrap();
        let layout = Layout::new(dir.path());
        let mut owned = OwnedFiles::open(&layout, &[]).unwrap();
        owned.claim("aaaa1111").unwrap();
        owned.claim("bbbb2222").unwrap();
        drop(owned);
        let path = layout.owned_files_log();
        let mut bytes = std::fs::read(&path).unwrap();
        // The first record's payload starts after the 8-byte magic and its 12-byte frame header.
        bytes[8 + 12] ^= 0x20;
        std::fs::write(&path, &bytes).unwrap();
        let claims = read_claims(&layout).unwrap();
        assert!(claims.damage.as_ref().is_some_and(Damage::is_mid_log), "{claims:?}");
        assert!(claims.uids.is_empty());
        let err = OwnedFiles::open(&layout, &[]).err().expect("mid-log damage is refused");
        assert!(matches!(err, Error::Corrupted { .. }), "{err}");
        assert_eq!(std::fs::read(&path).unwrap(), bytes, "the damaged log is left as found");
    }
}
