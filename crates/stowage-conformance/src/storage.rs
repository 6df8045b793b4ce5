//! Where a factory's caches live, as the suite sees them: the cases that corrupt, copy, plant
//! stray objects in, or watch a cache (integrity, `recognize`, `validate` never writing) reach
//! its objects through a [`CacheStorage`], never the file system directly. [`LocalFiles`] is
//! the default: caches are directories of files at the paths the suite hands the factory. A
//! backend that maps those paths elsewhere (an object store) passes its own storage with
//! `storage = ...` to [`crate::backend_conformance!`].
//!
//! ```
//! use stowage_conformance::storage::{CacheStorage, LocalFiles};
//! let dir = tempfile::tempdir().unwrap();
//! let cache = dir.path().join("c");
//! LocalFiles.write(&cache, "parts/a.bin", b"abc").unwrap();
//! LocalFiles.write(&cache, "index", b"").unwrap();
//! assert_eq!(LocalFiles.list(&cache).unwrap(), ["index", "parts/a.bin"]);
//! assert_eq!(LocalFiles.data_objects(&cache).unwrap(), ["parts/a.bin"]); // empty ones hold no data
//! assert_eq!(LocalFiles.directories(&cache).unwrap(), ["", "parts"]);
//! ```

use crate::corrupt;
use crate::snapshot::Snapshot;
use std::collections::BTreeSet;
use std::fs;
use std::io;
use std::path::Path;

/// The name of the writer lock file, which holds no data and is never corrupted.
const LOCK_NAME: &str = ".stowage.lock";

/// Where a factory's caches live, as the suite sees them: a cache's objects by relative name.
///
/// A cache is named by the path the suite gave the factory (`ctx.cache_path(..)`); its objects
/// by `/`-separated names relative to it. Only `name`, the three capability answers and the
/// four object operations must be written; the rest default to combinations of them, as they
/// would be on an object store (where a "directory" is a name prefix and an empty one does not
/// exist).
pub trait CacheStorage: Send + Sync {
    /// What the caches live on, for messages: `"local files"`, `"memory://"`, `"s3 (moto)"`.
    fn name(&self) -> &str;

    /// Whether caches are local directories of files at the paths the suite hands out. The
    /// power-loss and I/O-error cases, which interpose libc file calls, need it.
    fn is_local_files(&self) -> bool;

    /// Whether another process (the suite's child writers, a copy of the test binary that
    /// evaluates the factory afresh) sees the same caches. The crash and failed-flush cases
    /// need it.
    fn shared_between_processes(&self) -> bool;

    /// Every object of the cache at `cache`, as relative `/`-separated names, sorted; empty
    /// when nothing is stored there.
    fn list(&self, cache: &Path) -> io::Result<Vec<String>>;

    /// The bytes of the object `name` of `cache`.
    fn read(&self, cache: &Path, name: &str) -> io::Result<Vec<u8>>;

    /// Creates or replaces the object `name` of `cache` with `bytes`.
    fn write(&self, cache: &Path, name: &str, bytes: &[u8]) -> io::Result<()>;

    /// Removes the object `name` of `cache`; `NotFound` when there is none.
    fn remove(&self, cache: &Path, name: &str) -> io::Result<()>;

    /// Whether anything is stored at `path` or below it. The default: whether
    /// [`CacheStorage::list`] finds an object.
    fn exists(&self, path: &Path) -> io::Result<bool> {
        Ok(!self.list(path)?.is_empty())
    }

    /// Makes `path` an existing location that holds nothing (where `create` may make a cache,
    /// and `open` and `recognize` must find none). The default does nothing: on an object
    /// store a prefix without objects already is one.
    fn make_empty(&self, _path: &Path) -> io::Result<()> {
        Ok(())
    }

    /// Copies every object of the cache `from` to the cache `to` (same names). The copies
    /// must be writable, so that a case can corrupt them.
    fn copy_cache(&self, from: &Path, to: &Path) -> io::Result<()> {
        for name in self.list(from)? {
            self.write(to, &name, &self.read(from, &name)?)?;
        }
        Ok(())
    }

    /// Removes every object of the cache at `cache`.
    fn remove_cache(&self, cache: &Path) -> io::Result<()> {
        for name in self.list(cache)? {
            self.remove(cache, &name)?;
        }
        Ok(())
    }

    /// The objects a corruption case targets: every non-empty object except the writer lock
    /// (which holds no data), sorted.
    fn data_objects(&self, cache: &Path) -> io::Result<Vec<String>> {
        let mut data = Vec::new();
        for name in self.list(cache)? {
            if base_name(&name) != LOCK_NAME && !self.read(cache, &name)?.is_empty() {
                data.push(name);
            }
        }
        Ok(data)
    }

    /// Cuts the object `name` of `cache` down to its first `len` bytes.
    fn truncate(&self, cache: &Path, name: &str, len: u64) -> io::Result<()> {
        let mut bytes = self.read(cache, name)?;
        bytes.truncate(usize::try_from(len).map_err(io::Error::other)?);
        self.write(cache, name, &bytes)
    }

    /// The cache's "directories", where stray objects go: `""` (the cache itself) and every
    /// distinct name prefix ending before a `/`, sorted.
    fn directories(&self, cache: &Path) -> io::Result<Vec<String>> {
        let mut dirs = BTreeSet::from([String::new()]);
        for name in self.list(cache)? {
            let mut at = 0;
            while let Some(slash) = name[at..].find('/') {
                at += slash;
                dirs.insert(name[..at].to_owned());
                at += 1;
            }
        }
        Ok(dirs.into_iter().collect())
    }

    /// The state of every object of `cache`, to prove that an operation wrote nothing. The
    /// default keeps each object's size and a hash of its content.
    fn snapshot(&self, cache: &Path) -> io::Result<Snapshot> {
        Snapshot::of_objects(self, cache)
    }
}

/// The last component of a `/`-separated name.
fn base_name(name: &str) -> &str {
    name.rsplit('/').next().unwrap_or(name)
}

/// `name` inside the "directory" `dir` (`""` is the cache itself).
pub fn join(dir: &str, name: &str) -> String {
    if dir.is_empty() { name.to_owned() } else { format!("{dir}/{name}") }
}

/// Caches are directories of files at the paths the suite hands the factory: the default, and
/// what every file-based backend uses.
///
/// Copies keep the tree and are made writable ([`corrupt::copy_tree`]); a snapshot also keeps
/// each entry's modification time and every directory, so that a rewrite with the same bytes
/// or a new empty directory counts as a write.
#[derive(Debug, Clone, Copy, Default)]
pub struct LocalFiles;

impl LocalFiles {
    /// Every regular file (and, with `dirs`, every directory) below `root`, relative.
    fn walk(root: &Path, dirs: bool) -> io::Result<Vec<String>> {
        let mut out = Vec::new();
        let mut pending = vec![String::new()];
        while let Some(dir) = pending.pop() {
            let entries = match fs::read_dir(root.join(&dir)) {
                Err(e) if dir.is_empty() && e.kind() == io::ErrorKind::NotFound => continue,
                entries => entries?,
            };
            for entry in entries {
                let entry = entry?;
                let name = join(&dir, &entry.file_name().to_string_lossy());
                let kind = entry.file_type()?;
                if kind.is_dir() {
                    if dirs {
                        out.push(name.clone());
                    }
                    pending.push(name);
                } else if kind.is_file() && !dirs {
                    out.push(name);
                }
            }
        }
        out.sort();
        Ok(out)
    }
}

impl CacheStorage for LocalFiles {
    fn name(&self) -> &str {
        "local files"
    }

    fn is_local_files(&self) -> bool {
        true
    }

    fn shared_between_processes(&self) -> bool {
        true
    }

    fn list(&self, cache: &Path) -> io::Result<Vec<String>> {
        LocalFiles::walk(cache, false)
    }

    fn read(&self, cache: &Path, name: &str) -> io::Result<Vec<u8>> {
        fs::read(cache.join(name))
    }

    fn write(&self, cache: &Path, name: &str, bytes: &[u8]) -> io::Result<()> {
        let path = cache.join(name);
        if let Some(parent) = path.parent() {
            fs::create_dir_all(parent)?;
        }
        fs::write(path, bytes)
    }

    fn remove(&self, cache: &Path, name: &str) -> io::Result<()> {
        fs::remove_file(cache.join(name))
    }

    fn exists(&self, path: &Path) -> io::Result<bool> {
        path.try_exists()
    }

    fn make_empty(&self, path: &Path) -> io::Result<()> {
        fs::create_dir_all(path)
    }

    fn copy_cache(&self, from: &Path, to: &Path) -> io::Result<()> {
        corrupt::copy_tree(from, to)
    }

    fn remove_cache(&self, cache: &Path) -> io::Result<()> {
        fs::remove_dir_all(cache)
    }

    fn data_objects(&self, cache: &Path) -> io::Result<Vec<String>> {
        let files = corrupt::data_files(cache)?;
        Ok(files
            .iter()
            .map(|file| {
                let relative = file.strip_prefix(cache).unwrap_or(file);
                relative.to_string_lossy().replace(std::path::MAIN_SEPARATOR, "/")
            })
            .collect())
    }

    fn truncate(&self, cache: &Path, name: &str, len: u64) -> io::Result<()> {
        corrupt::truncate(&cache.join(name), len)
    }

    fn directories(&self, cache: &Path) -> io::Result<Vec<String>> {
        fs::read_dir(cache)?; // a missing cache is an error, not a cache without directories
        let mut dirs = LocalFiles::walk(cache, true)?;
        dirs.insert(0, String::new());
        Ok(dirs)
    }

    fn snapshot(&self, cache: &Path) -> io::Result<Snapshot> {
        Snapshot::of_directory(cache)
    }
}

/// The storage a case runs on when none is given: [`LocalFiles`].
pub(crate) static LOCAL_FILES: LocalFiles = LocalFiles;

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;
    use std::path::PathBuf;
    use std::sync::Mutex;

    /// Objects in a map, using every default of the trait.
    #[derive(Default)]
    struct Objects(Mutex<BTreeMap<(PathBuf, String), Vec<u8>>>);

    impl CacheStorage for Objects {
        fn name(&self) -> &str {
            "objects"
        }
        fn is_local_files(&self) -> bool {
            false
        }
        fn shared_between_processes(&self) -> bool {
            false
        }
        fn list(&self, cache: &Path) -> io::Result<Vec<String>> {
            let map = self.0.lock().unwrap();
            Ok(map.keys().filter(|(c, _)| c == cache).map(|(_, n)| n.clone()).collect())
        }
        fn read(&self, cache: &Path, name: &str) -> io::Result<Vec<u8>> {
            let map = self.0.lock().unwrap();
            map.get(&(cache.to_owned(), name.to_owned()))
                .cloned()
                .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, name.to_owned()))
        }
        fn write(&self, cache: &Path, name: &str, bytes: &[u8]) -> io::Result<()> {
            self.0.lock().unwrap().insert((cache.to_owned(), name.to_owned()), bytes.to_vec());
            Ok(())
        }
        fn remove(&self, cache: &Path, name: &str) -> io::Result<()> {
            let mut map = self.0.lock().unwrap();
            map.remove(&(cache.to_owned(), name.to_owned()))
                .map(drop)
                .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, name.to_owned()))
        }
    }

    #[test]
    fn the_defaults_work_from_the_four_object_operations() {
        let store = Objects::default();
        let (a, b) = (Path::new("/c/a"), Path::new("/c/b"));
        store.write(a, "x/y/data", b"0123456789").unwrap();
        store.write(a, "x/.stowage.lock", b"pid").unwrap();
        store.write(a, "empty", b"").unwrap();
        assert_eq!(store.directories(a).unwrap(), ["", "x", "x/y"]);
        assert_eq!(store.data_objects(a).unwrap(), ["x/y/data"]);
        assert!(store.exists(a).unwrap() && !store.exists(b).unwrap());
        store.copy_cache(a, b).unwrap();
        assert_eq!(store.list(b).unwrap(), store.list(a).unwrap());
        let before = store.snapshot(b).unwrap();
        store.truncate(b, "x/y/data", 4).unwrap();
        assert_eq!(store.read(b, "x/y/data").unwrap(), b"0123");
        store.write(b, "new", b"!").unwrap();
        let changes = before.changes(&store.snapshot(b).unwrap());
        assert_eq!(
            changes,
            ["object x/y/data changed (size 10 -> 4, content)", "object new added"]
        );
        store.remove_cache(b).unwrap();
        assert!(store.list(b).unwrap().is_empty());
        assert_eq!(store.list(a).unwrap().len(), 3, "removing the copy kept the original");
    }

    #[test]
    fn local_files_list_every_file_and_skip_what_holds_no_data() {
        let dir = tempfile::tempdir().unwrap();
        let cache = dir.path().join("c");
        assert!(LocalFiles.list(&cache).unwrap().is_empty(), "a missing cache lists empty");
        assert!(LocalFiles.directories(&cache).is_err(), "a missing cache has no directories");
        LocalFiles.write(&cache, "seg/0.bin", b"data").unwrap();
        LocalFiles.write(&cache, ".stowage.lock", b"1234").unwrap();
        LocalFiles.make_empty(&cache.join("seg/empty-dir")).unwrap();
        assert_eq!(LocalFiles.list(&cache).unwrap(), [".stowage.lock", "seg/0.bin"]);
        assert_eq!(LocalFiles.data_objects(&cache).unwrap(), ["seg/0.bin"]);
        assert_eq!(LocalFiles.directories(&cache).unwrap(), ["", "seg", "seg/empty-dir"]);
        assert!(LocalFiles.exists(&cache.join("seg/empty-dir")).unwrap());
        LocalFiles.truncate(&cache, "seg/0.bin", 1).unwrap();
        assert_eq!(LocalFiles.read(&cache, "seg/0.bin").unwrap(), b"d");
    }
}
