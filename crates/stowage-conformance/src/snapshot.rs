//! Every entry of a directory tree as it is on disk (kind, size, modification time, a hash of
//! the content), to prove that an operation that must not write (`validate`, `recognize`)
//! wrote nothing: not a byte, not a new or removed file, not even a rewrite with the same bytes.

use std::collections::BTreeMap;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::io;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

/// What one entry looked like.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Entry {
    kind: &'static str,
    size: u64,
    modified: Option<SystemTime>,
    /// Of the bytes of a file, or the target of a symbolic link; 0 for a directory.
    content: u64,
}

/// The state of every entry below a directory (the directory itself included).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Snapshot(BTreeMap<PathBuf, Entry>);

impl Snapshot {
    /// Reads every entry below `root`, following no symbolic link.
    pub(crate) fn take(root: &Path) -> io::Result<Snapshot> {
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
            let relative = path.strip_prefix(root).unwrap_or(&path).to_path_buf();
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
    pub(crate) fn changes(&self, after: &Snapshot) -> Vec<String> {
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

/// A path relative to the snapshot's root, the root itself as `.`.
fn show(path: &Path) -> String {
    if path.as_os_str().is_empty() { ".".to_owned() } else { path.display().to_string() }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rewrite_with_the_same_bytes_and_a_new_file_are_changes() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("a"), b"one").unwrap();
        let before = Snapshot::take(dir.path()).unwrap();
        assert!(before.changes(&Snapshot::take(dir.path()).unwrap()).is_empty());
        std::thread::sleep(std::time::Duration::from_millis(20));
        std::fs::write(dir.path().join("a"), b"one").unwrap();
        std::fs::write(dir.path().join("b"), b"").unwrap();
        let changes = before.changes(&Snapshot::take(dir.path()).unwrap());
        assert!(changes.iter().any(|c| c.starts_with("file a changed (modification time")));
        assert!(changes.contains(&"file b added".to_string()), "{changes:?}");
    }
}
