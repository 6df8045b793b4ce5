//! Symbolic links inside a cache directory whose targets lie outside it.
//!
//! Reads follow such links (users link data directories), but every writer refuses to write
//! through them, and a cache that reaches outside its directory is easy to break by moving or
//! deleting the other place: `inspect` lists each one.

use std::path::Path;

/// Every symlink under `root` (not followed when it names a directory) whose target, resolved,
/// is not inside `root` resolved: `"<link> -> <target>"`, the link relative to `root`, in name
/// order. A dangling link is listed with its target as written and `(missing)`.
pub fn reaching_outside(root: &Path) -> Vec<String> {
    let Ok(real_root) = std::fs::canonicalize(root) else { return Vec::new() };
    let mut found = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else { continue };
        for entry in entries.flatten() {
            let path = entry.path();
            let Ok(meta) = std::fs::symlink_metadata(&path) else { continue };
            if meta.is_dir() {
                stack.push(path);
                continue;
            }
            if !meta.file_type().is_symlink() {
                continue;
            }
            let link = path.strip_prefix(root).unwrap_or(&path).display().to_string();
            match std::fs::canonicalize(&path) {
                Ok(target) if target.starts_with(&real_root) => {}
                Ok(target) => found.push(format!("{link} -> {}", target.display())),
                Err(_) => {
                    let written = std::fs::read_link(&path).unwrap_or_default();
                    found.push(format!("{link} -> {} (missing)", written.display()));
                }
            }
        }
    }
    found.sort();
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn links_leaving_the_directory_are_listed_and_inner_ones_are_not() {
        let dir = tempfile::tempdir().unwrap();
        let cache = dir.path().join("cache");
        std::fs::create_dir_all(cache.join("segments")).unwrap();
        std::fs::write(dir.path().join("elsewhere.bin"), b"x").unwrap();
        std::fs::write(cache.join("inner.bin"), b"y").unwrap();
        std::os::unix::fs::symlink(dir.path().join("elsewhere.bin"), cache.join("segments/a.bin"))
            .unwrap();
        std::os::unix::fs::symlink(cache.join("inner.bin"), cache.join("b.bin")).unwrap();
        std::os::unix::fs::symlink("/nonexistent/x", cache.join("c.bin")).unwrap();
        let real = std::fs::canonicalize(dir.path().join("elsewhere.bin")).unwrap();
        assert_eq!(
            reaching_outside(&cache),
            vec![
                "c.bin -> /nonexistent/x (missing)".to_owned(),
                format!("segments/a.bin -> {}", real.display()),
            ]
        );
    }
}
