//! Corruptors: flip a byte, truncate a tail, delete a file; and copying caches to corrupt copies.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

/// Files a corruption case targets: every regular non-empty file under `dir`, except the writer
/// lock (which holds no data). Sorted, so runs are reproducible.
pub fn data_files(dir: &Path) -> io::Result<Vec<PathBuf>> {
    let mut files = Vec::new();
    collect(dir, &mut files)?;
    files.retain(|p| p.file_name().is_some_and(|n| n != ".stowage.lock"));
    files.sort();
    Ok(files)
}

fn collect(dir: &Path, out: &mut Vec<PathBuf>) -> io::Result<()> {
    for entry in fs::read_dir(dir)? {
        let entry = entry?;
        let kind = entry.file_type()?;
        if kind.is_dir() {
            collect(&entry.path(), out)?;
        } else if kind.is_file() && entry.metadata()?.len() > 0 {
            out.push(entry.path());
        }
    }
    Ok(())
}

/// Copies the directory tree `from` into `to` (created if missing). Copied files are writable even
/// when the originals are read-only, so that a test can corrupt or substitute them.
pub fn copy_tree(from: &Path, to: &Path) -> io::Result<()> {
    fs::create_dir_all(to)?;
    for entry in fs::read_dir(from)? {
        let entry = entry?;
        let target = to.join(entry.file_name());
        if entry.file_type()?.is_dir() {
            copy_tree(&entry.path(), &target)?;
        } else {
            fs::copy(entry.path(), &target)?;
            let mut permissions = fs::metadata(&target)?.permissions();
            #[allow(clippy::permissions_set_readonly_false)] // the copy is the test's own file
            permissions.set_readonly(false);
            fs::set_permissions(&target, permissions)?;
        }
    }
    Ok(())
}

/// XORs the byte at `offset` of `path` with 0xff.
pub fn flip_byte(path: &Path, offset: u64) -> io::Result<()> {
    let mut bytes = fs::read(path)?;
    let i = usize::try_from(offset).map_err(io::Error::other)?;
    let byte = bytes.get_mut(i).ok_or_else(|| io::Error::other("offset past end of file"))?;
    *byte ^= 0xff;
    fs::write(path, bytes)
}

/// Cuts `path` down to `len` bytes.
pub fn truncate(path: &Path, len: u64) -> io::Result<()> {
    fs::OpenOptions::new().write(true).open(path)?.set_len(len)
}

/// Up to `count` offsets spread evenly over a file of `len` bytes, always including the first and
/// the last byte.
pub fn spread_offsets(len: u64, count: u64) -> Vec<u64> {
    if len == 0 {
        return Vec::new();
    }
    let count = count.clamp(2, len.max(2));
    let mut offsets: Vec<u64> = (0..count).map(|i| i * (len - 1) / (count - 1)).collect();
    offsets.dedup();
    offsets
}
