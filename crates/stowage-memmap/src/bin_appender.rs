//! The writer's side of one headerless `.bin` file: rows appended through a buffer, fdatasynced on
//! flush, and readable again (from the buffer or the file) before they are committed.

use std::fs::{File, OpenOptions};
use std::path::{Path, PathBuf};

use stowage_core::{Error, IoResultExt, Result};

/// Buffered bytes are handed to the OS once this many have gathered.
const BUFFER_BYTES: usize = 1 << 20;

/// An open `.bin` file being appended to.
#[derive(Debug)]
pub struct BinAppender {
    path: PathBuf,
    file: File,
    row_bytes: usize,
    /// Bytes already handed to the OS.
    written: u64,
    /// Bytes appended but not yet handed to the OS.
    buffer: Vec<u8>,
    /// Bytes were written since the last sync.
    dirty: bool,
}

impl BinAppender {
    /// Creates `path` empty (truncating stale bytes of an earlier cache) for rows of `row_bytes`.
    pub fn create(path: &Path, row_bytes: usize) -> Result<BinAppender> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(path)
            .at(path)?;
        file.sync_all().at(path)?;
        Ok(BinAppender::over(path, file, row_bytes, 0))
    }

    /// Opens `path`, which must hold at least `rows` committed rows, and cuts off everything after
    /// them (the torn append of a crashed writer).
    ///
    /// Errors: [`Error::Corrupted`] naming the file, the row count and both sizes when it is
    /// shorter than its committed rows (never padded) or missing.
    pub fn recover(path: &Path, row_bytes: usize, rows: usize) -> Result<BinAppender> {
        let expected = (rows as u64).checked_mul(row_bytes as u64).ok_or_else(|| {
            Error::corrupted(path, format!("{rows} rows of {row_bytes} bytes overflow"))
        })?;
        let file = match OpenOptions::new().read(true).write(true).open(path) {
            Ok(file) => file,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(Error::corrupted(
                    path,
                    format!(
                        "file is missing; the manifest commits {rows} rows of {row_bytes} bytes"
                    ),
                ));
            }
            Err(e) => return Err(Error::io(path, e)),
        };
        let actual = file.metadata().at(path)?.len();
        if actual < expected {
            return Err(Error::corrupted(
                path,
                format!(
                    "file is {actual} bytes, the manifest commits {rows} rows of {row_bytes} bytes \
                     ({expected} bytes); a short file is never padded"
                ),
            ));
        }
        if actual > expected {
            file.set_len(expected).at(path)?;
            file.sync_all().at(path)?;
        }
        Ok(BinAppender::over(path, file, row_bytes, expected))
    }

    fn over(path: &Path, file: File, row_bytes: usize, written: u64) -> BinAppender {
        BinAppender {
            path: path.to_path_buf(),
            file,
            row_bytes,
            written,
            buffer: Vec::new(),
            dirty: false,
        }
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Appends one row; `bytes` must be exactly one row long.
    pub fn append(&mut self, bytes: &[u8]) -> Result<()> {
        debug_assert_eq!(bytes.len(), self.row_bytes);
        self.buffer.extend_from_slice(bytes);
        if self.buffer.len() >= BUFFER_BYTES {
            self.write_out()?;
        }
        Ok(())
    }

    /// Hands the buffered bytes to the OS (no sync).
    pub fn write_out(&mut self) -> Result<()> {
        if self.buffer.is_empty() {
            return Ok(());
        }
        write_all_at(&self.file, &self.buffer, self.written).at(&self.path)?;
        self.written += self.buffer.len() as u64;
        self.buffer.clear();
        self.dirty = true;
        Ok(())
    }

    /// Writes out and fdatasyncs: every row appended so far is durable afterwards.
    pub fn sync(&mut self) -> Result<()> {
        self.write_out()?;
        if self.dirty {
            self.file.sync_data().at(&self.path)?;
            self.dirty = false;
        }
        Ok(())
    }

    /// The bytes of row `row` (appended earlier), from the buffer or the file.
    pub fn read_row(&self, row: usize) -> Result<Vec<u8>> {
        let start = row as u64 * self.row_bytes as u64;
        let mut bytes = vec![0u8; self.row_bytes];
        if start >= self.written {
            let at = (start - self.written) as usize;
            let slice = self.buffer.get(at..at + self.row_bytes).ok_or_else(|| {
                Error::invalid(format!("row {row} was never appended to {}", self.path.display()))
            })?;
            bytes.copy_from_slice(slice);
        } else {
            read_exact_at(&self.file, &mut bytes, start).map_err(|e| {
                Error::corrupted(&self.path, format!("row {row} cannot be read back: {e}"))
            })?;
        }
        Ok(bytes)
    }
}

#[cfg(unix)]
fn write_all_at(file: &File, bytes: &[u8], offset: u64) -> std::io::Result<()> {
    std::os::unix::fs::FileExt::write_all_at(file, bytes, offset)
}

#[cfg(unix)]
fn read_exact_at(file: &File, bytes: &mut [u8], offset: u64) -> std::io::Result<()> {
    std::os::unix::fs::FileExt::read_exact_at(file, bytes, offset)
}

#[cfg(windows)]
fn write_all_at(file: &File, mut bytes: &[u8], mut offset: u64) -> std::io::Result<()> {
    while !bytes.is_empty() {
        let n = std::os::windows::fs::FileExt::seek_write(file, bytes, offset)?;
        bytes = &bytes[n..];
        offset += n as u64;
    }
    Ok(())
}

#[cfg(windows)]
fn read_exact_at(file: &File, mut bytes: &mut [u8], mut offset: u64) -> std::io::Result<()> {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_read_back_before_and_after_sync_and_tails_are_cut() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.bin");
        std::fs::write(&path, b"stale bytes of an old cache").unwrap();
        let mut bin = BinAppender::create(&path, 2).unwrap();
        bin.append(&[1, 2]).unwrap();
        bin.append(&[3, 4]).unwrap();
        assert_eq!(bin.read_row(1).unwrap(), [3, 4]);
        bin.sync().unwrap();
        assert_eq!(bin.read_row(0).unwrap(), [1, 2]);
        assert_eq!(std::fs::read(&path).unwrap(), [1, 2, 3, 4]);
        drop(bin);
        std::fs::write(&path, [1, 2, 3, 4, 5]).unwrap();
        let bin = BinAppender::recover(&path, 2, 2).unwrap();
        assert_eq!(bin.read_row(1).unwrap(), [3, 4]);
        assert_eq!(std::fs::metadata(&path).unwrap().len(), 4);
        let err = BinAppender::recover(&path, 2, 3).unwrap_err();
        assert!(matches!(err, Error::Corrupted { .. }), "{err}");
        assert!(err.to_string().contains("4 bytes") && err.to_string().contains("3 rows"), "{err}");
        assert_eq!(std::fs::metadata(&path).unwrap().len(), 4, "never padded");
    }
}
