//! Finding a cache's newest version in three requests, and committing the next one.
//!
//! Versions are manifests at `versions/<20 digits>.json`, each created once with a conditional
//! put ([`RemoteStore::put_new`]). A reader must find the newest without listing every version
//! (a cache committed every few minutes for months has tens of thousands), so committers also
//! write an advisory pointer, `latest`, holding the newest number they know. Readers never trust
//! it alone:
//!
//! 1. GET `latest` (absent or unreadable: no hint);
//! 2. LIST `versions/` after the hinted one (`StartAfter` on S3: one request, usually empty,
//!    however many versions precede it), and take the highest number found, else the hint;
//! 3. GET that manifest, and check that it is the version its name says.
//!
//! A pointer behind the newest version (its committer died before updating it, or two
//! committers updated it out of order) costs nothing more: step 2 finds the newer versions. A
//! pointer ahead of every version (damaged, or hostile) is caught at step 3, and the reader falls
//! back to listing every version.

use stowage_core::bytes::Bytes;
use stowage_core::{Error, Result};

use crate::manifest::{MAX_MANIFEST_BYTES, Manifest};
use crate::store::{Created, RemoteStore};

/// The advisory pointer's object name.
pub const LATEST: &str = "latest";

/// The newest version of the cache in `store`, or `None` when it has none yet.
///
/// Errors: [`Error::Corrupted`] naming the manifest when it does not parse or is not the version
/// its name says; the store's errors.
///
/// ```
/// use stowage_remote::RemoteStore;
/// use stowage_remote::manifest::Manifest;
/// use stowage_remote::versions::{commit, newest};
///
/// let store = RemoteStore::open("memory://versions-doc/cache").unwrap();
/// assert_eq!(newest(&store).unwrap(), None);
/// let mut manifest = Manifest::empty("arrow");
/// commit(&store, &manifest).unwrap();
/// manifest.version = 2;
/// commit(&store, &manifest).unwrap();
/// assert_eq!(newest(&store).unwrap().unwrap().version, 2);
/// ```
pub fn newest(store: &RemoteStore) -> Result<Option<Manifest>> {
    let hint = read_hint(store);
    let after = hint.map(Manifest::name_of).unwrap_or_else(|| "versions/0".to_owned());
    let found = newest_listed(store, &after)?;
    match (found, hint) {
        (Some(version), _) => read(store, version).map(Some),
        (None, None) => Ok(None),
        (None, Some(hinted)) => match read(store, hinted) {
            Err(Error::NotFound { .. }) => {
                // The pointer names a version that does not exist: list them all.
                match newest_listed(store, "versions/0")? {
                    Some(version) => read(store, version).map(Some),
                    None => Ok(None),
                }
            }
            other => other.map(Some),
        },
    }
}

/// Reads and checks version `version`'s manifest.
///
/// Errors: [`Error::NotFound`] when there is no such version; [`Error::Corrupted`] when its
/// manifest does not parse or says it is another version.
pub fn read(store: &RemoteStore, version: u64) -> Result<Manifest> {
    let name = Manifest::name_of(version);
    let source = store.url().object_url(&name);
    let bytes = store.get_at_most(&name, MAX_MANIFEST_BYTES)?;
    let manifest = Manifest::parse(&source, &bytes)?;
    if manifest.version != version {
        return Err(Error::corrupted(
            source,
            format!(
                "the manifest says it is version {}, its name says {version}",
                manifest.version
            ),
        ));
    }
    Ok(manifest)
}

/// Commits `manifest` as version `manifest.version`, then points `latest` at it (best effort:
/// readers do not depend on the pointer).
///
/// Returns [`Created::New`], or [`Created::AlreadyThere`] when that version already holds these
/// exact bytes (a committer that folded the same commits, or this one's earlier attempt whose
/// answer was lost).
///
/// Errors: [`Error::AlreadyExists`] naming the manifest when another manifest is that version:
/// the caller lost the race, and folds its commits onto the newer version instead.
pub fn commit(store: &RemoteStore, manifest: &Manifest) -> Result<Created> {
    let name = Manifest::name_of(manifest.version);
    let created = store.put_new(&name, Bytes::from(manifest.to_bytes()))?;
    // Advisory: a failure here costs readers at most one longer listing. On a local store it
    // is a failed write or sync of the cache's directory, which a flush must report.
    let pointed = store.put_pointer(LATEST, Bytes::from(format!("{}\n", manifest.version)));
    if let Err(e) = pointed
        && store.is_local()
    {
        return Err(e);
    }
    Ok(created)
}

/// The version `latest` names, if it names one.
fn read_hint(store: &RemoteStore) -> Option<u64> {
    let bytes = store.get_at_most(LATEST, 64).ok()?;
    let text = std::str::from_utf8(&bytes).ok()?;
    text.trim().parse::<u64>().ok().filter(|v| *v >= 1)
}

/// The highest version whose manifest's name sorts after `after`, by one listing.
fn newest_listed(store: &RemoteStore, after: &str) -> Result<Option<u64>> {
    let listed = store.list_after("versions", after)?;
    Ok(listed.iter().filter_map(|object| Manifest::version_of(&object.name)).max())
}
