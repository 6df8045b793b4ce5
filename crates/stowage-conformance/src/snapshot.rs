//! Every entry of a cache as it is stored (kind, size, modification time where the storage
//! has one, a hash of the content), to prove that an operation that must not write
//! (`validate`, `recognize`) wrote nothing: not a byte, not a new or removed file, not even a
//! rewrite with the same bytes (where modification times show it).

use std::collections::BTreeMap;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::io;
use std::path::Path;
use std::time::SystemTime;

use crate::storage::CacheStorage;

/// What one entry looked like.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// `"file"`, `"directory"`, `"symbolic link"`, `"object"`: shown in messages.
    pub kind: &'static str,
    /// In bytes.
    pub size: u64,
    /// `None` where the storage keeps none.
    pub modified: Option<SystemTime>,
    /// A hash of the bytes of a file or object, or of the target of a symbolic link; 0 for a
    /// directory.
    pub content: u64,
}

impl Entry {
    /// An object holding `bytes`, without a modification time.
    pub fn object(bytes: &[u8]) -> Entry {
        let mut hasher = DefaultHasher::new();
        bytes.hash(&mut hasher);
        Entry { kind: "object", size: bytes.len() as u64, modified: None, content: hasher.finish() }
    }
}

/// The state of every entry of a cache, by relative `/`-separated name (`""` is the cache's
/// directory itself, where it has one).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Snapshot(BTreeMap<String, Entry>);

impl Snapshot {
    /// A snapshot of the given entries.
    pub fn from_entries(entries: impl IntoIterator<Item = (String, Entry)>) -> Snapshot {
        Snapshot(entries.into_iter().collect())
    }

    /// Every object of `cache` in `storage`, read through it ([`Entry::object`]).
    pub fn of_objects<S: CacheStorage + ?Sized>(storage: &S, cache: &Path) -> io::Result<Snapshot> {
        let mut entries = BTreeMap::new();
        for name in storage.list(cache)? {
            let entry = Entry::object(&storage.read(cache, &name)?);
            entries.insert(name, entry);
        }
        Ok(Snapshot(entries))
    }

    /// Reads every entry below the directory `root` (itself included), following no symbolic
    /// link.
    pub fn of_directory(root: &Path) -> io::Result<Snapshot> {
        let mut entries = BTreeMap::new();
        let mut pending = vec![root.to_path_buf()];
        while let Some(path) = pending.pop() {
            let meta = std::fs::symlink_metadata(&path)?;
            let mut hasher = DefaultHasher::new();
            let kind = if meta.is_dir() {
                for child in std::fs::read_dir(&path)? {
                    pending.push(child?.path());
                }
                "directory"
            } else if meta.is_symlink() {
                std::fs::read_link(&path)?.hash(&mut hasher);
                "symbolic link"
            } else {
                std::fs::read(&path)?.hash(&mut hasher);
                "file"
            };
            let relative = path.strip_prefix(root).unwrap_or(&path).to_string_lossy().into_owned();
            let entry = Entry {
                kind,
                size: meta.len(),
                modified: meta.modified().ok(),
                content: hasher.finish(),
            };
            entries.insert(relative, entry);
        }
        Ok(Snapshot(entries))
    }

    /// What changed from `self` to `after`, one line per entry: added, removed, or changed
    /// (kind, size, modification time or content), empty when nothing did.
    pub fn changes(&self, after: &Snapshot) -> Vec<String> {
        let mut changes = Vec::new();
        for (path, before) in &self.0 {
            let shown = show(path);
            match after.0.get(path) {
                None => changes.push(format!("{} {shown} removed", before.kind)),
                Some(now) if now == before => {}
                Some(now) => {
                    let mut what = Vec::new();
                    if now.kind != before.kind {
                        what.push(format!("{} -> {}", before.kind, now.kind));
                    }
                    if now.size != before.size {
                        what.push(format!("size {} -> {}", before.size, now.size));
                    }
                    if now.content != before.content {
                        what.push("content".to_string());
                    }
                    if now.modified != before.modified {
                        what.push("modification time".to_string());
                    }
                    changes.push(format!("{} {shown} changed ({})", before.kind, what.join(", ")));
                }
            }
        }
        for (path, now) in &after.0 {
            if !self.0.contains_key(path) {
                changes.push(format!("{} {} added", now.kind, show(path)));
            }
        }
        changes
    }
}

/// A name relative to the snapshot's root, the root itself as `.`.
fn show(name: &str) -> String {
    if name.is_empty() { ".".to_owned() } else { name.to_owned() }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rewrite_with_the_same_bytes_and_a_new_file_are_changes() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a"), b"one").unwrap();
        let before = Snapshot::of_directory(dir.path()).unwrap();
        assert!(before.changes(&Snapshot::of_directory(dir.path()).unwrap()).is_empty());
        std::thread::sleep(std::time::Duration::from_millis(20));
        std::fs::write(dir.path().join("a"), b"one").unwrap();
        std::fs::write(dir.path().join("b"), b"").unwrap();
        let changes = before.changes(&Snapshot::of_directory(dir.path()).unwrap());
        assert!(changes.iter().any(|c| c.starts_with("file a changed (modification time")));
        assert!(changes.contains(&"file b added".to_string()), "{changes:?}");
    }
}
