//! Positioned reads and writes of a file (`pread` / `pwrite`), on unix and windows.

use std::fs::File;

/// Reads exactly `bytes.len()` bytes at `offset`.
#[cfg(unix)]
pub(crate) fn read_exact_at(file: &File, bytes: &mut [u8], offset: u64) -> std::io::Result<()> {
    std::os::unix::fs::FileExt::read_exact_at(file, bytes, offset)
}

/// Reads exactly `bytes.len()` bytes at `offset`.
#[cfg(windows)]
pub(crate) fn read_exact_at(
    file: &File,
    mut bytes: &mut [u8],
    mut offset: u64,
) -> std::io::Result<()> {
    while !bytes.is_empty() {
        let n = std::os::windows::fs::FileExt::seek_read(file, bytes, offset)?;
        if n == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        bytes = &mut bytes[n..];
        offset += n as u64;
    }
    Ok(())
}

/// Reads into `bytes` at `offset`; returns how many bytes were read (0 at the end).
#[cfg(unix)]
fn read_at(file: &File, bytes: &mut [u8], offset: u64) -> std::io::Result<usize> {
    std::os::unix::fs::FileExt::read_at(file, bytes, offset)
}

/// Reads into `bytes` at `offset`; returns how many bytes were read (0 at the end).
#[cfg(windows)]
fn read_at(file: &File, bytes: &mut [u8], offset: u64) -> std::io::Result<usize> {
    std::os::windows::fs::FileExt::seek_read(file, bytes, offset)
}

/// A [`std::io::Read`] over `file` from an offset on, by positioned reads: the threads of one
/// handle sharing an open file never move each other's offset (a `try_clone` would share it).
#[derive(Debug)]
pub(crate) struct ReadFrom<'a> {
    file: &'a File,
    offset: u64,
}

impl<'a> ReadFrom<'a> {
    /// Reads `file` from byte `offset` on.
    pub(crate) fn new(file: &'a File, offset: u64) -> ReadFrom<'a> {
        ReadFrom { file, offset }
    }
}

impl std::io::Read for ReadFrom<'_> {
    fn read(&mut self, bytes: &mut [u8]) -> std::io::Result<usize> {
        let n = read_at(self.file, bytes, self.offset)?;
        self.offset += n as u64;
        Ok(n)
    }
}

/// Writes all of `bytes` at `offset`.
#[cfg(unix)]
pub(crate) fn write_all_at(file: &File, bytes: &[u8], offset: u64) -> std::io::Result<()> {
    std::os::unix::fs::FileExt::write_all_at(file, bytes, offset)
}

/// Writes all of `bytes` at `offset`.
#[cfg(windows)]
pub(crate) fn write_all_at(file: &File, mut bytes: &[u8], mut offset: u64) -> std::io::Result<()> {
    while !bytes.is_empty() {
        let n = std::os::windows::fs::FileExt::seek_write(file, bytes, offset)?;
        if n == 0 {
            return Err(std::io::ErrorKind::WriteZero.into());
        }
        bytes = &bytes[n..];
        offset += n as u64;
    }
    Ok(())
}

/// A new file written under a temporary name beside its final path (core's
/// `create_temp_beside`: `.<name>.tmp-<pid>-<n>`, which the cache's next writer removes if a
/// crash leaves it), for a file too large to build in memory and written while other files are:
/// [`Staged::publish`] fsyncs it, renames it over the final path and fsyncs the directory, as
/// `atomic_write` does. Dropped unpublished, the temporary is removed.
#[derive(Debug)]
pub(crate) struct Staged {
    temp: std::path::PathBuf,
    path: std::path::PathBuf,
    published: bool,
}

impl Staged {
    /// A new, empty temporary for `path`, and the file open for writing.
    pub(crate) fn create(path: &std::path::Path) -> stowage_core::Result<(Staged, File)> {
        use stowage_core::IoResultExt;
        let (temp, file) = stowage_core::file_safety::create_temp_beside(path).at(path)?;
        Ok((Staged { temp, path: path.to_path_buf(), published: false }, file))
    }

    /// The temporary's path (to read it back before it is published).
    pub(crate) fn temp(&self) -> &std::path::Path {
        &self.temp
    }

    /// Makes `file` (this temporary, written whole) durable and names it.
    pub(crate) fn publish(mut self, file: File) -> stowage_core::Result<()> {
        use stowage_core::IoResultExt;
        file.sync_all().at(&self.path)?;
        drop(file);
        std::fs::rename(&self.temp, &self.path).at(&self.path)?;
        self.published = true;
        let dir = self.path.parent().filter(|p| !p.as_os_str().is_empty());
        stowage_core::file_safety::fsync_dir(dir.unwrap_or(std::path::Path::new(".")))
    }
}

impl Drop for Staged {
    fn drop(&mut self) {
        if !self.published {
            let _ = std::fs::remove_file(&self.temp);
        }
    }
}
