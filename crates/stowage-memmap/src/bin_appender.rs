//! The writer's side of one headerless `.bin` file: rows appended in batches that a shared
//! background thread writes ([`BackgroundWriter`]), fdatasynced on flush, and readable again (from
//! the batch or the file) before they are committed.

use std::fs::{File, OpenOptions};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use stowage_core::bytes::Bytes;
use stowage_core::file_safety::{open_no_follow, sync_together};
use stowage_core::write_behind::{BackgroundWriter, Job};
use stowage_core::{Error, IoResultExt, Result};

use crate::file_io::read_exact_at;

/// Rows are handed to the background writer once this many bytes have gathered.
const BATCH_BYTES: usize = 1 << 20;
/// Rows gathered before a write, at most (the kernel takes at most 1024 buffers per `writev`).
const BATCH_ROWS: usize = 1024;

/// An open `.bin` file being appended to.
pub struct BinAppender {
    path: PathBuf,
    file: Arc<File>,
    row_bytes: usize,
    /// Bytes handed to the background writer: the file offset of the next batch.
    sent: u64,
    /// Rows appended but not yet handed over, one part per row (sharing the caller's tensor bytes).
    batch: Vec<Bytes>,
    worker: Arc<BackgroundWriter>,
    /// Ticket of the last batch handed over (0: none): reads from the file wait for it.
    last_ticket: u64,
    /// Bytes were handed over since the last sync.
    dirty: bool,
}

impl std::fmt::Debug for BinAppender {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BinAppender")
            .field("path", &self.path)
            .field("row_bytes", &self.row_bytes)
            .field("sent", &self.sent)
            .field("batched_rows", &self.batch.len())
            .finish_non_exhaustive()
    }
}

impl BinAppender {
    /// Creates `path` empty (truncating stale bytes of an earlier cache) for rows of `row_bytes`,
    /// written by `worker`.
    pub fn create(
        path: &Path,
        row_bytes: usize,
        worker: Arc<BackgroundWriter>,
    ) -> Result<BinAppender> {
        // Never through a link: the truncation would empty the file it points to.
        let file = open_no_follow(
            OpenOptions::new().read(true).write(true).create(true).truncate(true),
            path,
        )
        .at(path)?;
        file.sync_all().at(path)?;
        Ok(BinAppender::over(path, file, row_bytes, 0, worker))
    }

    /// Reopens `path` holding `rows` committed rows: bytes beyond them (a torn append) are cut
    /// off.
    ///
    /// Errors: [`Error::Corrupted`] naming the file, the row count and both sizes when it is
    /// shorter than its committed rows (never padded) or missing.
    pub fn recover(
        path: &Path,
        row_bytes: usize,
        rows: usize,
        worker: Arc<BackgroundWriter>,
    ) -> Result<BinAppender> {
        let expected = (rows as u64).checked_mul(row_bytes as u64).ok_or_else(|| {
            Error::corrupted(path, format!("{rows} rows of {row_bytes} bytes overflow"))
        })?;
        // Never through a link: the cut and the appends would change the file it points to.
        let file = match open_no_follow(OpenOptions::new().read(true).write(true), path) {
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
        Ok(BinAppender::over(path, file, row_bytes, expected, worker))
    }

    fn over(
        path: &Path,
        file: File,
        row_bytes: usize,
        sent: u64,
        worker: Arc<BackgroundWriter>,
    ) -> BinAppender {
        BinAppender {
            path: path.to_path_buf(),
            file: Arc::new(file),
            row_bytes,
            sent,
            batch: Vec::new(),
            worker,
            last_ticket: 0,
            dirty: false,
        }
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The background writer this appender hands its batches to.
    pub fn worker(&self) -> Arc<BackgroundWriter> {
        Arc::clone(&self.worker)
    }

    /// Appends one row (exactly `row_bytes`; shared, not copied, until the kernel copies it).
    pub fn append(&mut self, row: Bytes) -> Result<()> {
        debug_assert_eq!(row.len(), self.row_bytes);
        self.batch.push(row);
        if self.batch.len() * self.row_bytes >= BATCH_BYTES || self.batch.len() >= BATCH_ROWS {
            self.send_batch()?;
        }
        Ok(())
    }

    /// Hands the batched rows to the background writer.
    fn send_batch(&mut self) -> Result<()> {
        if self.batch.is_empty() {
            return Ok(());
        }
        let parts = std::mem::take(&mut self.batch);
        let bytes = (parts.len() * self.row_bytes) as u64;
        let job =
            Job { file: Arc::clone(&self.file), path: self.path.clone(), offset: self.sent, parts };
        self.last_ticket = self.worker.send(job)?;
        self.sent += bytes;
        self.dirty = true;
        Ok(())
    }

    /// Writes out and fdatasyncs every appender in `bins`: every row appended so far is durable
    /// afterwards. The fdatasyncs start together ([`sync_together`]), so that a flush pays about
    /// one journal commit for all of them.
    pub fn sync_all<'a>(bins: impl IntoIterator<Item = &'a mut BinAppender>) -> Result<()> {
        let mut dirty = Vec::new();
        for bin in bins {
            bin.send_batch()?;
            if bin.dirty {
                dirty.push(bin);
            }
        }
        for bin in &dirty {
            bin.worker.wait_for(bin.last_ticket)?;
        }
        let files: Vec<(&Path, &File)> =
            dirty.iter().map(|bin| (bin.path.as_path(), &*bin.file)).collect();
        sync_together(&files, &[])?;
        for bin in dirty {
            bin.dirty = false;
        }
        Ok(())
    }

    /// The bytes of row `row` (appended earlier), from the batch or the file (once the writes
    /// handed over are done).
    pub fn read_row(&self, row: usize) -> Result<Vec<u8>> {
        if self.row_bytes == 0 {
            return Ok(Vec::new());
        }
        let start = row as u64 * self.row_bytes as u64;
        if start >= self.sent {
            let at = ((start - self.sent) / self.row_bytes as u64) as usize;
            let part = self.batch.get(at).ok_or_else(|| {
                Error::invalid(format!("row {row} was never appended to {}", self.path.display()))
            })?;
            return Ok(part.to_vec());
        }
        if self.last_ticket > 0 {
            self.worker.wait_for(self.last_ticket)?;
        }
        let mut bytes = vec![0u8; self.row_bytes];
        read_exact_at(&self.file, &mut bytes, start).map_err(|e| {
            Error::corrupted(&self.path, format!("row {row} cannot be read back: {e}"))
        })?;
        Ok(bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_read_back_before_and_after_sync_and_tails_are_cut() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.bin");
        std::fs::write(&path, b"stale bytes of an old cache").unwrap();
        let worker = Arc::new(BackgroundWriter::start("test").unwrap());
        let mut bin = BinAppender::create(&path, 2, Arc::clone(&worker)).unwrap();
        bin.append(Bytes::from_static(&[1, 2])).unwrap();
        bin.append(Bytes::from_static(&[3, 4])).unwrap();
        assert_eq!(bin.read_row(1).unwrap(), [3, 4]);
        BinAppender::sync_all([&mut bin]).unwrap();
        assert_eq!(bin.read_row(0).unwrap(), [1, 2]);
        assert_eq!(std::fs::read(&path).unwrap(), [1, 2, 3, 4]);
        drop(bin);
        std::fs::write(&path, [1, 2, 3, 4, 5]).unwrap();
        let bin = BinAppender::recover(&path, 2, 2, Arc::clone(&worker)).unwrap();
        assert_eq!(bin.read_row(1).unwrap(), [3, 4]);
        assert_eq!(std::fs::metadata(&path).unwrap().len(), 4);
        let err = BinAppender::recover(&path, 2, 3, worker).unwrap_err();
        assert!(matches!(err, Error::Corrupted { .. }), "{err}");
        assert!(err.to_string().contains("4 bytes") && err.to_string().contains("3 rows"), "{err}");
        assert_eq!(std::fs::metadata(&path).unwrap().len(), 4, "never padded");
    }
}
