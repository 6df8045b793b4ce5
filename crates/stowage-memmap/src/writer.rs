//! The writing half of a [`crate::MemmapBackend`]: the writer lock, one appender per `.bin` file
//! (and the checksum file), and the manifest whose lines commit the rows. Whether the handle may
//! write at all (read-only, finalized, poisoned) is the handle's [`stowage_core::WriteState`].
//!
//! Durability order (see `docs/architecture.md`): a row's bytes reach each `.bin` file first; in
//! `flush` every `.bin` is fdatasynced, and only then are the rows' manifest lines written and the
//! manifest fdatasynced. A manifest line therefore never points at bytes that are not durable.

use std::ops::Range;
use std::path::Path;
use std::sync::Arc;

use foldhash::HashSet;
use stowage_core::Result;
use stowage_core::bytes::Bytes;
use stowage_core::file_safety::WriterLock;
use stowage_core::write_behind::BackgroundWriter;

use crate::bin_appender::BinAppender;
use crate::coverage;
use crate::layout::Layout;
use crate::manifest::ManifestWriter;
use crate::row_format::RowFormat;

/// The writer of one cache: present on handles opened by `create` or `open_append`.
#[derive(Debug)]
pub(crate) struct Writer {
    /// The open files; `None` when the cache was already finalized when opened.
    pub(crate) session: Option<Session>,
    /// Declared last, so dropped last: released only after the session's background writes
    /// have stopped, so that the next writer never runs beside them.
    _lock: WriterLock,
}

impl Writer {
    /// A writer holding `lock`, with `session` open (or none for a finalized cache).
    pub(crate) fn new(lock: WriterLock, session: Option<Session>) -> Writer {
        Writer { _lock: lock, session }
    }
}

/// The files a writer appends to.
#[derive(Debug)]
pub(crate) struct Session {
    /// One per tensor field, in [`RowFormat::tensors`] order.
    pub(crate) bins: Vec<BinAppender>,
    /// `stowage_checksums.bin`, when the cache has checksums.
    pub(crate) checksums: Option<BinAppender>,
    pub(crate) manifest: ManifestWriter,
    /// Per JSON field: its distinct texts, so repeated texts share one allocation.
    pub(crate) interned: Vec<HashSet<Arc<str>>>,
    /// Per tensor field: the zero placeholder row of a null value, made on first use and shared.
    zero_rows: Vec<Option<Bytes>>,
}

impl Session {
    /// Fresh, empty files for a new cache (stale bytes of an earlier cache are cut away).
    pub(crate) fn create(layout: &Layout, format: &RowFormat) -> Result<Session> {
        let worker = Arc::new(BackgroundWriter::start(crate::BACKEND_NAME)?);
        let create = |path: &Path, row_bytes: usize| {
            BinAppender::create(path, row_bytes, Arc::clone(&worker))
        };
        let bins = format
            .tensors
            .iter()
            .map(|t| create(&layout.field_file(&t.layout.name), t.layout.row_bytes))
            .collect::<Result<Vec<_>>>()?;
        let checksums = format
            .checksums
            .then(|| create(&layout.checksums(), format.checksum_layout().row_bytes))
            .transpose()?;
        let manifest = ManifestWriter::open(&layout.manifest(), 0, false)?;
        Ok(Session::over(format, bins, checksums, manifest))
    }

    /// The files of an unfinished cache with `rows` committed rows: each `.bin` cut back to them
    /// (a shorter one is `Error::Corrupted`), the manifest cut back to `committed_len` bytes, and
    /// the checksum file aligned with the rows: a placeholder for each row another writer
    /// committed (`foreign`, keys from `key_of`) that it has no checksum row for
    /// ([`coverage::recover_checksum_file`]).
    pub(crate) fn recover(
        layout: &Layout,
        format: &RowFormat,
        rows: usize,
        manifest: (u64, bool),
        foreign: &[Range<usize>],
        key_of: impl Fn(usize) -> String,
    ) -> Result<Session> {
        let (committed_len, missing_newline) = manifest;
        if format.checksums {
            let width = format.checksum_layout().row_bytes;
            coverage::recover_checksum_file(&layout.checksums(), width, rows, foreign, key_of)?;
        }
        let worker = Arc::new(BackgroundWriter::start(crate::BACKEND_NAME)?);
        let recover = |path: &Path, row_bytes: usize| {
            BinAppender::recover(path, row_bytes, rows, Arc::clone(&worker))
        };
        let bins = format
            .tensors
            .iter()
            .map(|t| recover(&layout.field_file(&t.layout.name), t.layout.row_bytes))
            .collect::<Result<Vec<_>>>()?;
        let checksums = format
            .checksums
            .then(|| recover(&layout.checksums(), format.checksum_layout().row_bytes))
            .transpose()?;
        let manifest = ManifestWriter::open(&layout.manifest(), committed_len, missing_newline)?;
        Ok(Session::over(format, bins, checksums, manifest))
    }

    /// Opens the checksum file again after it was replaced (by adopt) with one of `rows` rows;
    /// the writes of the old one must be synced.
    pub(crate) fn reopen_checksums(
        &mut self,
        layout: &Layout,
        format: &RowFormat,
        rows: usize,
    ) -> Result<()> {
        let worker = match &self.checksums {
            Some(old) => old.worker(),
            None => Arc::new(BackgroundWriter::start(crate::BACKEND_NAME)?),
        };
        let width = format.checksum_layout().row_bytes;
        self.checksums = Some(BinAppender::recover(&layout.checksums(), width, rows, worker)?);
        Ok(())
    }

    fn over(
        format: &RowFormat,
        bins: Vec<BinAppender>,
        checksums: Option<BinAppender>,
        manifest: ManifestWriter,
    ) -> Session {
        let interned = vec![HashSet::default(); format.json.len()];
        let zero_rows = vec![None; format.tensors.len()];
        Session { bins, checksums, manifest, interned, zero_rows }
    }

    /// The zero placeholder row (`row_bytes` zeros) of tensor field `t`.
    pub(crate) fn zero_row(&mut self, t: usize, row_bytes: usize) -> Bytes {
        self.zero_rows[t].get_or_insert_with(|| Bytes::from(vec![0u8; row_bytes])).clone()
    }

    /// A shared copy of `text` for JSON field `j`.
    pub(crate) fn intern(&mut self, j: usize, text: &str) -> Arc<str> {
        if let Some(shared) = self.interned[j].get(text) {
            return shared.clone();
        }
        let shared: Arc<str> = Arc::from(text);
        self.interned[j].insert(shared.clone());
        shared
    }

    /// The commit: every `.bin` and the checksum file durable, then the manifest lines.
    pub(crate) fn flush(&mut self) -> Result<()> {
        if !self.manifest.has_pending() {
            return Ok(());
        }
        BinAppender::sync_all(self.bins.iter_mut().chain(self.checksums.as_mut()))?;
        self.manifest.commit()
    }
}
