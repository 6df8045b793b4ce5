//! Finding every cache below a directory.
//!
//! The walk is depth first in name order, so its output is the same on every run. It asks the
//! registry about every directory and regular file it meets ([`recognize_here`]: a cache format
//! may be a directory or a single file). It never follows a symbolic link (a link loop cannot trap
//! it, and a cache linked twice is reported once), never descends into a directory it recognized
//! as a cache (a cache's `segments/` or `data/10/` are part of it), and skips whatever is not a
//! cache: other files, directories it cannot list.

use std::path::{Path, PathBuf};

use stowage_core::Registry;

use crate::error::CliError;
use crate::locate::{Recognized, recognize_here};

/// One cache found by [`find_caches`]: its path and what it is, or why it could not be recognized
/// (a `stowage.json` that does not parse, an HDF5 file whose cache cannot be opened).
pub type Found<'r> = (PathBuf, Result<Recognized<'r>, CliError>);

/// Every cache below `root` (not `root` itself), in walk order.
///
/// Errors: only `root` itself cannot be listed; a subdirectory that cannot be listed is skipped.
pub fn find_caches<'r>(registry: &'r Registry, root: &Path) -> Result<Vec<Found<'r>>, CliError> {
    let mut found = Vec::new();
    let entries = sorted_entries(root)?;
    for (path, file_type) in entries {
        visit(registry, &path, file_type, &mut found);
    }
    Ok(found)
}

fn visit<'r>(
    registry: &'r Registry,
    path: &Path,
    file_type: std::fs::FileType,
    found: &mut Vec<Found<'r>>,
) {
    if file_type.is_symlink() || !(file_type.is_file() || file_type.is_dir()) {
        return;
    }
    match recognize_here(registry, path) {
        Ok(Some(recognized)) => found.push((path.to_path_buf(), Ok(recognized))),
        Err(e) => found.push((path.to_path_buf(), Err(e))),
        Ok(None) if file_type.is_dir() => {
            for (child, child_type) in sorted_entries(path).unwrap_or_default() {
                visit(registry, &child, child_type, found);
            }
        }
        Ok(None) => {}
    }
}

/// The entries of `dir` with their types (of the entry itself, links not followed), by name.
fn sorted_entries(dir: &Path) -> Result<Vec<(PathBuf, std::fs::FileType)>, CliError> {
    let read = std::fs::read_dir(dir).map_err(|e| crate::error::io_error(dir, &e))?;
    let mut entries: Vec<(PathBuf, std::fs::FileType)> = read
        .filter_map(Result::ok)
        .filter_map(|entry| entry.file_type().ok().map(|t| (entry.path(), t)))
        .collect();
    entries.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(entries)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_walk_skips_links_and_non_caches_and_stops_at_caches() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::create_dir_all(root.join("a/deeper/hangar/data/10")).unwrap();
        std::fs::write(root.join("a/deeper/hangar/data/10/x.npy"), b"not really").unwrap();
        std::fs::create_dir_all(root.join("b/dnanet")).unwrap();
        std::fs::write(root.join("b/dnanet/_COMPLETE"), b"").unwrap();
        std::fs::create_dir_all(root.join("b/dnanet/inner/data/10")).unwrap();
        std::fs::write(root.join("b/dnanet/inner/data/10/y.npy"), b"").unwrap();
        std::fs::write(root.join("notes.txt"), b"hello").unwrap();
        #[cfg(unix)]
        {
            std::os::unix::fs::symlink(root, root.join("a/loop")).unwrap();
            std::os::unix::fs::symlink(root.join("b/dnanet"), root.join("c-link")).unwrap();
        }
        let registry = crate::default_registry();
        let found = find_caches(&registry, root).unwrap();
        let names: Vec<(String, &str)> = found
            .iter()
            .map(|(p, r)| {
                (stowage_core::describe::relative_name(p, root), r.as_ref().unwrap().format.id)
            })
            .collect();
        assert_eq!(
            names,
            [
                ("a/deeper/hangar".to_owned(), stowage_npy::HANGAR_NUMPY10.id),
                ("b/dnanet".to_owned(), stowage_memmap::DNANET_MEMMAP.id),
            ]
        );
    }
}
