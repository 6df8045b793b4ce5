//! The node-local cache: copies of remote objects in a directory with a byte budget, shared by
//! every process on the machine.
//!
//! The objects a cache stores remotely are immutable and named with their size and checksum
//! ([`ObjectDigest`]), so a local copy never goes stale: it is correct or it is absent.
//!
//! ```text
//! <dir>/stowage-node-cache   marker, made on first use
//! <dir>/objects/<ab>/<key>   verified copies, <key> = hash of (store, object, size, checksum)
//! <dir>/locks/<key>          one lock file per object: its holder is downloading it
//! <dir>/partial/<key>        a download in progress, written only by the lock's holder
//! ```
//!
//! - A download is checked (size, then xxh3-128 of the whole object) before anything is kept,
//!   synced, then put in place with one atomic link. A copy in `objects/` is always complete.
//! - One process downloads an object at a time (`flock` on its lock file, which the kernel
//!   releases when the holder dies, even by `kill -9`); the others wait for it, then read its
//!   copy. No shared memory, no daemon.
//! - A process using a copy holds a shared `flock` on it. Eviction removes only copies it can
//!   lock exclusively, least recently fetched first (a fetch touches the copy's mtime), until
//!   the directory is within its budget. Copies in use are never removed, so the directory can
//!   exceed its budget while they are held.
//! - Only `fetch` puts files in `objects/`, and each is a copy of a remote object named by its
//!   checksum: whatever eviction removes can be fetched again. Nothing else stowage keeps
//!   (staged writes, a rank's uncommitted objects) ever lives here.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use memmap2::Mmap;
use stowage_core::bytes::Bytes;
use stowage_core::file_safety::{fsync_dir, publish_no_replace};
use stowage_core::{Error, IoResultExt, Result};
use xxhash_rust::xxh3::{Xxh3, xxh3_128};

use crate::store::RemoteStore;

/// The marker file of a node cache directory.
const MARKER: &str = "stowage-node-cache";

/// What the marker says: the layout version of the directory.
const MARKER_TEXT: &[u8] = b"stowage node cache, layout 1\n";

/// The size and content checksum a remote object must have: its identity, since remote objects
/// are immutable.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ObjectDigest {
    /// Its length in bytes.
    pub size: u64,
    /// XXH3-128 of its bytes.
    pub xxh3_128: u128,
}

impl ObjectDigest {
    /// The digest of `bytes`.
    ///
    /// ```
    /// let digest = stowage_remote::node_cache::ObjectDigest::of(b"abc");
    /// assert_eq!(digest.size, 3);
    /// ```
    pub fn of(bytes: &[u8]) -> ObjectDigest {
        ObjectDigest { size: bytes.len() as u64, xxh3_128: xxh3_128(bytes) }
    }
}

/// Whether [`NodeCache::fetch`] read the object from the store or found a copy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    /// This call downloaded it.
    Downloaded,
    /// A copy was there already (fetched by this or another process).
    Cached,
}

/// A verified local copy of a remote object, mapped. While it (or a [`Bytes`] taken from it)
/// lives, its holder's shared lock keeps eviction from removing the file.
#[derive(Debug)]
pub struct CachedObject {
    bytes: Bytes,
    path: PathBuf,
    source: Source,
}

impl CachedObject {
    /// The object's bytes, sharing the map (the map and the lock live as long as any clone).
    pub fn bytes(&self) -> &Bytes {
        &self.bytes
    }

    /// The local copy's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Whether this fetch downloaded it.
    pub fn source(&self) -> Source {
        self.source
    }
}

/// A map that holds its file's shared lock for as long as it lives.
struct LockedMap {
    map: Mmap,
    // Closing the file releases the lock, after the map is gone.
    _file: File,
}

impl AsRef<[u8]> for LockedMap {
    fn as_ref(&self) -> &[u8] {
        &self.map
    }
}

/// A directory of verified copies of remote objects, within a byte budget (see the module
/// docs).
///
/// ```
/// use stowage_core::bytes::Bytes;
/// use stowage_remote::RemoteStore;
/// use stowage_remote::node_cache::{NodeCache, ObjectDigest, Source};
///
/// let store = RemoteStore::open("memory://node-cache-doc/cache").unwrap();
/// let data = Bytes::from_static(b"an immutable data object");
/// store.put_new("data/0", data.clone()).unwrap();
/// let dir = tempfile::tempdir().unwrap();
/// let cache = NodeCache::open(dir.path(), 1 << 20).unwrap();
/// let first = cache.fetch(&store, "data/0", ObjectDigest::of(&data)).unwrap();
/// assert_eq!((first.bytes(), first.source()), (&data, Source::Downloaded));
/// let again = cache.fetch(&store, "data/0", ObjectDigest::of(&data)).unwrap();
/// assert_eq!(again.source(), Source::Cached);
/// ```
#[derive(Clone, Debug)]
pub struct NodeCache {
    dir: PathBuf,
    budget: u64,
}

impl NodeCache {
    /// Opens (making it when absent) the node cache in `dir`, keeping at most `budget` bytes of
    /// copies that are not in use.
    ///
    /// Errors: [`Error::Io`] naming the directory; [`Error::Incompatible`] when `dir` holds a
    /// marker of another layout, or files but no marker (a directory that is not a node cache
    /// is never taken over: eviction would delete its files).
    pub fn open(dir: impl AsRef<Path>, budget: u64) -> Result<NodeCache> {
        let dir = dir.as_ref().to_path_buf();
        std::fs::create_dir_all(&dir).at(&dir)?;
        let marker = dir.join(MARKER);
        match std::fs::read(&marker) {
            Ok(text) if text == MARKER_TEXT => {}
            Ok(text) => {
                return Err(Error::Incompatible {
                    path: marker,
                    detail: format!(
                        "marker says {:?}, this version reads {:?}",
                        String::from_utf8_lossy(&text).trim(),
                        String::from_utf8_lossy(MARKER_TEXT).trim()
                    ),
                });
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let foreign = std::fs::read_dir(&dir)
                    .at(&dir)?
                    .filter_map(|entry| entry.ok())
                    .find(|entry| {
                        !["objects", "locks", "partial"]
                            .contains(&&*entry.file_name().to_string_lossy())
                    });
                if let Some(entry) = foreign {
                    return Err(Error::Incompatible {
                        path: dir.clone(),
                        detail: format!(
                            "not a node cache (no {MARKER} marker) and not empty ({} is there): \
                             give an empty or new directory",
                            entry.path().display()
                        ),
                    });
                }
                stowage_core::file_safety::atomic_write(&marker, MARKER_TEXT)?;
            }
            Err(e) => return Err(Error::io(&marker, e)),
        }
        for sub in ["objects", "locks", "partial"] {
            let path = dir.join(sub);
            std::fs::create_dir_all(&path).at(&path)?;
        }
        Ok(NodeCache { dir, budget })
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The byte budget.
    pub fn budget(&self) -> u64 {
        self.budget
    }

    /// A verified local copy of object `name` of `store`, which must have `digest`: the copy
    /// there, or one downloaded now (by this process, or by another that was already at it).
    ///
    /// Errors: [`Error::Corrupted`] naming the object's URL and both sides when the downloaded
    /// bytes do not match `digest` (nothing is kept); the store's errors; [`Error::Io`] on the
    /// local directory.
    pub fn fetch(
        &self,
        store: &RemoteStore,
        name: &str,
        digest: ObjectDigest,
    ) -> Result<CachedObject> {
        let key = cache_key(store, name, digest);
        let path = self.object_path(&key);
        if let Some(bytes) = self.open_copy(&path, digest)? {
            return Ok(CachedObject { bytes, path, source: Source::Cached });
        }
        let lock_path = self.dir.join("locks").join(&key);
        let lock = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&lock_path)
            .at(&lock_path)?;
        flock(&lock, libc::LOCK_EX).at(&lock_path)?;
        // Another process may have finished while this one waited for the lock.
        if let Some(bytes) = self.open_copy(&path, digest)? {
            return Ok(CachedObject { bytes, path, source: Source::Cached });
        }
        let data = store.get(name)?;
        let got = ObjectDigest::of(&data);
        if got != digest {
            return Err(Error::corrupted(
                store.url().object_url(name),
                format!(
                    "downloaded {} bytes with xxh3-128 {:032x}; the manifest records {} bytes \
                     with {:032x}",
                    got.size, got.xxh3_128, digest.size, digest.xxh3_128
                ),
            ));
        }
        self.make_room(data.len() as u64)?;
        self.publish(&key, &path, &data)?;
        drop(lock);
        match self.open_copy(&path, digest)? {
            Some(bytes) => Ok(CachedObject { bytes, path, source: Source::Downloaded }),
            // Evicted by another process between the publish and the open: it was verified
            // above, so it is served from memory.
            None => Ok(CachedObject { bytes: data, path, source: Source::Downloaded }),
        }
    }

    /// The bytes of copies not in use that eviction would count, and how many copies there are.
    pub fn usage(&self) -> Result<(u64, usize)> {
        let copies = self.copies()?;
        Ok((copies.iter().map(|c| c.size).sum(), copies.len()))
    }

    fn object_path(&self, key: &str) -> PathBuf {
        self.dir.join("objects").join(&key[..2]).join(key)
    }

    /// The copy at `path`, locked shared and mapped, its mtime touched; `None` when there is
    /// none, or when the copy has the wrong size (damaged on the local disk: it is removed and
    /// fetched again).
    fn open_copy(&self, path: &Path, digest: ObjectDigest) -> Result<Option<Bytes>> {
        let file = match File::open(path) {
            Ok(file) => file,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(Error::io(path, e)),
        };
        flock(&file, libc::LOCK_SH).at(path)?;
        let len = file.metadata().at(path)?.len();
        if len != digest.size {
            drop(file);
            match std::fs::remove_file(path) {
                Ok(()) => return Ok(None),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
                Err(e) => return Err(Error::io(path, e)),
            }
        }
        // The fetch time is the LRU clock: eviction removes the least recently fetched first.
        file.set_modified(SystemTime::now()).at(path)?;
        if len == 0 {
            return Ok(Some(Bytes::new()));
        }
        // SAFETY: copies are immutable once published (written whole under a temporary name,
        // linked into place, never opened for writing again), and eviction only unlinks them,
        // which keeps the mapped inode alive.
        let map = unsafe { Mmap::map(&file) }.at(path)?;
        Ok(Some(Bytes::from_owner(LockedMap { map, _file: file })))
    }

    /// Writes `data` to `partial/<key>`, syncs it and links it into place.
    fn publish(&self, key: &str, path: &Path, data: &[u8]) -> Result<()> {
        let partial = self.dir.join("partial").join(key);
        let mut file = File::create(&partial).at(&partial)?;
        file.write_all(data).at(&partial)?;
        file.sync_all().at(&partial)?;
        let parent = path.parent().expect("objects/<ab>/<key>");
        std::fs::create_dir_all(parent).at(parent)?;
        match publish_no_replace(&partial, path) {
            Ok(()) => {}
            // Only the lock's holder publishes, and it looked first: a copy there now is one a
            // holder that died after its link left; it was verified before the link.
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(Error::io(path, e)),
        }
        fsync_dir(parent)?;
        std::fs::remove_file(&partial).at(&partial)?;
        Ok(())
    }

    /// Every copy, with its size and fetch time.
    fn copies(&self) -> Result<Vec<CopyEntry>> {
        let objects = self.dir.join("objects");
        let mut copies = Vec::new();
        for shard in std::fs::read_dir(&objects).at(&objects)? {
            let shard = shard.at(&objects)?.path();
            let Ok(entries) = std::fs::read_dir(&shard) else { continue };
            for entry in entries.flatten() {
                let Ok(meta) = entry.metadata() else { continue };
                let fetched = meta.modified().unwrap_or(SystemTime::UNIX_EPOCH);
                copies.push(CopyEntry { path: entry.path(), size: meta.len(), fetched });
            }
        }
        Ok(copies)
    }

    /// Evicts copies not in use, least recently fetched first, until `incoming` more bytes fit
    /// in the budget (or nothing more can be evicted).
    fn make_room(&self, incoming: u64) -> Result<()> {
        let mut copies = self.copies()?;
        let mut total: u64 = copies.iter().map(|c| c.size).sum::<u64>() + incoming;
        if total <= self.budget {
            return Ok(());
        }
        copies.sort_by_key(|c| c.fetched);
        for copy in copies {
            if total <= self.budget {
                break;
            }
            let Ok(file) = File::open(&copy.path) else { continue };
            // In use (a shared lock held) or being evicted by another process: skip it.
            if flock(&file, libc::LOCK_EX | libc::LOCK_NB).is_err() {
                continue;
            }
            match std::fs::remove_file(&copy.path) {
                Ok(()) => total = total.saturating_sub(copy.size),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(Error::io(&copy.path, e)),
            }
        }
        Ok(())
    }
}

/// A copy found by a scan.
struct CopyEntry {
    path: PathBuf,
    size: u64,
    fetched: SystemTime,
}

/// The name of the copy of `name` in `store` with `digest`: a hash of all three, so that two
/// stores, two caches or two versions of an object never share a copy.
fn cache_key(store: &RemoteStore, name: &str, digest: ObjectDigest) -> String {
    let mut hasher = Xxh3::new();
    for part in
        [store.url().store_name().as_bytes(), b"\n", store.url().object_url(name).as_bytes(), b"\n"]
    {
        hasher.update(part);
    }
    hasher.update(&digest.size.to_le_bytes());
    hasher.update(&digest.xxh3_128.to_le_bytes());
    format!("{:032x}", hasher.digest128())
}

/// `flock(2)` on `file`: `LOCK_SH`, `LOCK_EX`, optionally `| LOCK_NB`.
fn flock(file: &File, operation: libc::c_int) -> std::io::Result<()> {
    loop {
        // SAFETY: flock on a descriptor this File owns.
        if unsafe { libc::flock(file.as_raw_fd(), operation) } == 0 {
            return Ok(());
        }
        let err = std::io::Error::last_os_error();
        if err.kind() != std::io::ErrorKind::Interrupted {
            return Err(err);
        }
    }
}
