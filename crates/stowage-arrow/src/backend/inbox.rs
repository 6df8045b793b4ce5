//! Rank inboxes ([`ArrowOptions::rank_inboxes`]): every rank writes, one cache results.
//!
//! A rank other than the writer rank writes its puts into its own inbox, a stowage Arrow cache
//! at `<cache>/stowage-ranks/rank-<rank>/` with the cache's schema, output structure and blob
//! encoding, under a writer lock of its own: its flush makes them durable there, and no two
//! ranks ever write the same file. The writer rank ingests the inboxes at each flush: it opens
//! each read-only (seeing what that rank flushed, taking no lock) and puts every key the cache
//! does not hold yet into its own pending samples, which that flush commits into the cache's
//! segments. A key the cache holds is left (the first sample to reach the cache wins).
//! Ingestion never changes an inbox: its files stay the rank's durable copy.

use stowage_core::{Backend, Error, OpenMode, Reader, Result, Sample};

use super::ArrowBackend;
use crate::blob_encoding::BlobEncoding;
use crate::commit_log::{self, CacheHeader};
use crate::layout::Layout;
use crate::options::ArrowOptions;

/// Keys an ingestion reads from an inbox at once.
const INGEST_BATCH: usize = 1024;

/// Segments an inbox opened for ingestion keeps mapped.
const INGEST_OPEN_SEGMENTS: usize = 64;

/// Opens the inbox of `rank` in the cache of `layout` for writing, creating it (with the schema,
/// output structure and blob encoding of `header`) on the rank's first open.
///
/// Errors: `InvalidArgument` when an inbox already there has another schema; `Locked` when
/// another process of this rank holds it; as [`ArrowBackend::create`] and
/// [`ArrowBackend::open`].
pub(super) fn open_inbox(
    layout: &Layout,
    header: &CacheHeader,
    options: &ArrowOptions,
    rank: u32,
) -> Result<ArrowBackend> {
    let (structure, _, encoding) = commit_log::columns(header)?;
    let options = ArrowOptions {
        rank: Some(options.writer_rank),
        rank_inboxes: false,
        output_structure: Some(structure),
        // A cache of commit log version 2 stores bytes raw, which no new cache does; its puts
        // are checked against that layout before they reach the inbox, and the values read back
        // are the same bytes.
        blob_encoding: match encoding {
            BlobEncoding::Raw => BlobEncoding::PickledBytes,
            other => other,
        },
        ..options.clone()
    };
    let dir = layout.rank_inbox(rank);
    std::fs::create_dir_all(layout.ranks_dir()).map_err(|e| Error::io(layout.ranks_dir(), e))?;
    let inbox = match Layout::new(&dir).commit_log().exists() {
        true => ArrowBackend::open(&dir, OpenMode::Append, options)?,
        false => ArrowBackend::create(&dir, &header.schema, options)?,
    };
    if inbox.schema() != &header.schema {
        return Err(Error::invalid(format!(
            "the inbox {} of rank {rank} holds another schema than its cache {}: delete it, or \
             finish the run it belongs to",
            dir.display(),
            layout.root().display()
        )));
    }
    Ok(inbox)
}

/// What the writer rank ingested of one inbox.
#[derive(Debug, Default)]
pub(super) struct Ingested {
    /// The length of the inbox's commit log at the last ingestion.
    log_len: u64,
    /// The inbox's segments ingested (segment ids are never reused).
    segments: std::collections::HashSet<u64>,
}

impl ArrowBackend {
    /// This rank's inbox, when it writes one.
    pub(super) fn inbox(&self) -> Option<&ArrowBackend> {
        match &self.role {
            super::Role::OtherRank { inbox: Some(inbox), .. } => Some(inbox),
            _ => None,
        }
    }

    /// The keys of `inbox` the cache this handle read does not hold (a key that cannot be
    /// listed or located is left out: the count cannot fail).
    pub(super) fn inbox_only_keys(&self, inbox: &ArrowBackend) -> Vec<String> {
        let keys = inbox.keys().unwrap_or_default();
        keys.into_iter().filter(|key| matches!(self.reader.locate(key), Ok(None))).collect()
    }

    /// [`ArrowBackend::get_batch`] of a rank writing an inbox: the inbox's samples first, the
    /// rest from the cache.
    pub(super) fn get_batch_with_inbox(
        &self,
        inbox: &ArrowBackend,
        keys: &[&str],
    ) -> Result<Vec<Option<Sample>>> {
        let mut found = inbox.get_batch(keys)?;
        let rest: Vec<&str> =
            keys.iter().zip(&found).filter(|(_, f)| f.is_none()).map(|(k, _)| *k).collect();
        if rest.is_empty() {
            return Ok(found);
        }
        let mut read = self.reader.get_batch(&rest)?.into_iter();
        for slot in found.iter_mut().filter(|f| f.is_none()) {
            *slot = read.next().flatten();
        }
        Ok(found)
    }

    /// On the writer rank with [`ArrowOptions::rank_inboxes`]: puts every key an inbox flushed
    /// that the cache does not hold (committed, pending or being written) into the pending
    /// samples, the inbox's winning sample of each. Only the inbox's segments this handle has
    /// not ingested are listed (a key written again in a later segment is held by then, and
    /// left); an inbox whose commit log has not grown since its last ingestion is not opened,
    /// nor is one still being created (no commit log yet). Nothing to do otherwise, or once
    /// this handle finalized the cache.
    ///
    /// Errors: the first inbox that cannot be read or whose schema differs (the others are still
    /// ingested); as `put`.
    pub(super) fn ingest_inboxes(&mut self) -> Result<()> {
        if !self.options.rank_inboxes || !self.is_writer() || self.state.is_finalized() {
            return Ok(());
        }
        let mut first_error = None;
        for (rank, dir) in self.layout.list_rank_inboxes()? {
            if let Err(e) = self.ingest_inbox(rank, &dir) {
                first_error.get_or_insert(e);
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    /// Ingests the inbox of `rank` in `dir` ([`ArrowBackend::ingest_inboxes`]).
    fn ingest_inbox(&mut self, rank: u32, dir: &std::path::Path) -> Result<()> {
        let log = Layout::new(dir).commit_log();
        let log_len = match std::fs::metadata(&log) {
            Ok(metadata) => metadata.len(),
            // Being created by its rank: nothing flushed yet.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(Error::io(log, e)),
        };
        if self.inboxes_ingested.get(&rank).is_some_and(|seen| seen.log_len == log_len) {
            return Ok(());
        }
        let options = ArrowOptions {
            rank_inboxes: false,
            sample_cache_bytes: 0,
            max_open_segments: INGEST_OPEN_SEGMENTS,
            ..self.options.clone()
        };
        let inbox = ArrowBackend::open(dir, OpenMode::ReadOnly, options)?;
        if inbox.schema() != &self.schema {
            return Err(Error::invalid(format!(
                "the inbox {} of rank {rank} holds another schema than its cache {}; it is not \
                 ingested",
                dir.display(),
                self.layout.root().display()
            )));
        }
        // Only the segments not ingested yet: every key of the others was put then, or held.
        let done = self.inboxes_ingested.get(&rank).map(|seen| &seen.segments);
        let segments: Vec<u64> = inbox
            .reader()
            .segment_origins()
            .map(|(id, ..)| id)
            .filter(|id| done.is_none_or(|done| !done.contains(id)))
            .collect();
        let mut new_keys = Vec::new();
        let mut seen = std::collections::HashSet::new();
        for &id in &segments {
            for key in inbox.segment_reader(id)?.keys()? {
                if !seen.contains(&key)
                    && self.unwritten(&key).is_none()
                    && self.reader.locate(&key)?.is_none()
                {
                    seen.insert(key.clone());
                    new_keys.push(key);
                }
            }
        }
        for chunk in new_keys.chunks(INGEST_BATCH) {
            let keys: Vec<&str> = chunk.iter().map(String::as_str).collect();
            for (key, sample) in keys.iter().zip(inbox.get_batch(&keys)?) {
                let sample = sample.ok_or_else(|| {
                    Error::corrupted(
                        dir,
                        format!("rank {rank}'s inbox lists key {key:?} but does not read it"),
                    )
                })?;
                self.put(key, &sample)?;
            }
        }
        // Recorded once every key is put: a failed ingestion is tried again at the next flush.
        let record = self.inboxes_ingested.entry(rank).or_default();
        record.log_len = log_len;
        record.segments.extend(segments);
        Ok(())
    }
}
