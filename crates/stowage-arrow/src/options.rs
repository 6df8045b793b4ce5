//! `ArrowOptions`: how an Arrow segment cache writes and reads.

use stowage_core::cold_reads::ColdReadAdvice;
use stowage_core::{Error, Result};

use crate::blob_encoding::BlobEncoding;
use crate::error::ArrowCacheError;
use crate::schema_json::OutputStructure;

/// Tuning and process-role options of an [`crate::ArrowBackend`].
///
/// ```
/// let options = stowage_arrow::ArrowOptions { flush_every: 512, ..Default::default() };
/// assert!(options.durable);
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArrowOptions {
    /// Pending samples that make `put` write a segment (torchcachex's `flush_every`, 2048).
    pub flush_every: usize,
    /// Largest payload of one segment in bytes (about 256 MiB by default): a flush of more pending
    /// bytes writes several segments, so no segment outgrows memory maps, Arrow's 32-bit list
    /// offsets or an object store's single-request size.
    pub max_segment_bytes: u64,
    /// fsync each segment, its sidecars and the commit log before `flush` returns (on by
    /// default). Off gives torchcachex's durability: a crash can lose flushed samples (never
    /// return a partial one).
    pub durable: bool,
    /// Write segments on a background thread: a `put` that fills the buffer returns at once and
    /// the next call reports a failure; `flush` and `finalize` wait for every queued segment
    /// (off by default).
    pub background_flush: bool,
    /// Segments in no key index run after which the writer merges them into one, on a
    /// background thread (a lookup probes one table per unmerged segment).
    pub merge_after: usize,
    /// Keys of segments in no key index run that one merge gathers at most (131,072 by
    /// default): a merge holds them in memory, about 100 bytes each, so a merge over more (a
    /// rebuild after a compaction, or the final merge of a cache whose runs are gone) is done in
    /// steps of this many, each recorded as a background merge is. A segment larger than this
    /// is merged alone.
    pub merge_rows: u64,
    /// Check every row against its checksum on `get` (on by default).
    pub verify_checksums: bool,
    /// Segments a reader keeps mapped once the cache has more: the least recently used is
    /// closed when another one opens. Fewer segments than this stay open from their first read
    /// to the end, read with no lock. By default an eighth of the kernel's limit on memory maps
    /// (`vm.max_map_count`, 8,191 segments for the usual 65,530), at least 64.
    pub max_open_segments: usize,
    /// Whether `get_batch` tells the kernel ahead of time which pages of the maps it will read
    /// (`madvise(MADV_WILLNEED)`, [`stowage_core::cold_reads`]): key index slots, then keys,
    /// then rows' offsets and checksums, then values, each step's pages requested together, so
    /// that a batch missing from the page cache keeps many reads in flight. `Adaptive` (the
    /// default) advises only when `mincore` finds a sampled page missing; `Never` reads as
    /// before.
    pub cold_read_advice: ColdReadAdvice,
    /// Bytes of recently read samples kept decoded in memory, least recently used evicted
    /// (torchcachex's LRU, bounded by bytes); 0, the default, turns it off.
    pub sample_cache_bytes: usize,
    /// The rank that writes (torchcachex's `writer_rank`, 0). Other ranks never write a file.
    pub writer_rank: u32,
    /// This process's rank; `None` reads the `RANK` environment variable (0 when unset).
    pub rank: Option<u32>,
    /// Let every rank write (off by default: a rank other than the writer rank refuses every
    /// put). On, such a rank writes its puts into its own *inbox*, a stowage Arrow cache of its
    /// own at `<cache>/stowage-ranks/rank-<rank>/` (made on its first open with the cache's
    /// schema, output structure and blob encoding; it has its own writer lock, so one process
    /// per rank): its `flush` makes them durable there, its `finalize` is a flush of the inbox
    /// (only the writer rank finalizes the cache), and its `get`, `contains`, `keys` and `len`
    /// see its inbox and the cache (a key in both counts once; the inbox's sample wins).
    ///
    /// The writer rank, opened with this on, *ingests* the inboxes at each `flush` (and so at
    /// `finalize`): every key an inbox has flushed that the cache does not hold yet (committed,
    /// pending or being written) is put into the cache and committed with that flush, into the
    /// cache's own segments, where torchcachex reads it too. A key the cache already holds is
    /// left: the first sample to reach the cache wins, and a later one from an inbox is never
    /// taken. Ingestion reads an inbox read-only and never changes or deletes its files: they
    /// stay the rank's durable copy (delete `stowage-ranks/` once the cache is finalized).
    /// Every other reader of the cache (a read-only handle, another rank's, torchcachex) sees
    /// an inbox's samples once the writer rank has ingested them.
    pub rank_inboxes: bool,
    /// Compress each segment's buffers (Arrow IPC body compression); `None`, the default, keeps
    /// torchcachex's uncompressed files. pyarrow reads either; torchcachex 0.2 and memory-mapped
    /// zero-copy gets need `None`.
    pub compression: Option<Compression>,
    /// The output structure a new cache is written in, so that torchcachex returns samples as
    /// that structure (a tuple or list of the fields `item0`, `item1`, …, say); `None`, the
    /// default, infers it from the schema (`columns_with`). Used by `create`
    /// only: an existing cache keeps the structure its commit log records, and `attach` takes
    /// torchcachex's.
    pub output_structure: Option<OutputStructure>,
    /// How a new cache stores bytes fields ([`BlobEncoding`]): pickled Python `bytes` (the
    /// default), or values that already are pickles, kept verbatim. Used by `create` only
    /// (`attach` keeps torchcachex's pickles verbatim). [`BlobEncoding::Raw`] is refused:
    /// torchcachex cannot read it.
    pub blob_encoding: BlobEncoding,
}

/// An Arrow IPC buffer compression codec.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Compression {
    /// LZ4 frame: fast, modest ratio.
    Lz4,
    /// Zstandard: slower, smaller.
    Zstd,
}

impl Compression {
    /// The codec as Arrow names it.
    pub fn ipc(self) -> arrow_ipc::CompressionType {
        match self {
            Compression::Lz4 => arrow_ipc::CompressionType::LZ4_FRAME,
            Compression::Zstd => arrow_ipc::CompressionType::ZSTD,
        }
    }
}

impl Default for ArrowOptions {
    fn default() -> ArrowOptions {
        ArrowOptions {
            flush_every: 2048,
            max_segment_bytes: 256 << 20,
            durable: true,
            background_flush: false,
            merge_after: 32,
            merge_rows: 131_072,
            verify_checksums: true,
            max_open_segments: crate::open_segments::default_max_open_segments(),
            cold_read_advice: ColdReadAdvice::Adaptive,
            sample_cache_bytes: 0,
            writer_rank: 0,
            rank: None,
            rank_inboxes: false,
            compression: None,
            output_structure: None,
            blob_encoding: BlobEncoding::PickledBytes,
        }
    }
}

impl ArrowOptions {
    /// This process's rank: [`ArrowOptions::rank`], else `RANK`, else 0.
    ///
    /// Errors: [`Error::InvalidArgument`] quoting `RANK` when it is not a number.
    pub fn current_rank(&self) -> Result<u32> {
        if let Some(rank) = self.rank {
            return Ok(rank);
        }
        match std::env::var("RANK") {
            Ok(text) => {
                text.trim().parse().map_err(|_| ArrowCacheError::InvalidRank { text }.into())
            }
            Err(_) => Ok(0),
        }
    }

    /// Whether this process writes: its rank is the writer rank.
    pub fn is_writer(&self) -> Result<bool> {
        Ok(self.current_rank()? == self.writer_rank)
    }

    /// Checks the options are usable.
    ///
    /// Errors: [`Error::InvalidArgument`] naming the option.
    pub fn check(&self) -> Result<()> {
        if self.flush_every == 0 {
            return Err(Error::invalid("ArrowOptions::flush_every must be at least 1"));
        }
        if self.max_segment_bytes == 0 {
            return Err(Error::invalid("ArrowOptions::max_segment_bytes must be at least 1"));
        }
        if self.max_open_segments == 0 {
            return Err(Error::invalid("ArrowOptions::max_open_segments must be at least 1"));
        }
        if self.merge_after == 0 {
            return Err(Error::invalid("ArrowOptions::merge_after must be at least 1"));
        }
        if self.merge_rows == 0 {
            return Err(Error::invalid("ArrowOptions::merge_rows must be at least 1"));
        }
        if self.blob_encoding == BlobEncoding::Raw {
            return Err(Error::invalid(
                "ArrowOptions::blob_encoding Raw is how caches before commit log version 3 \
                 stored bytes; torchcachex cannot read it, so new caches use PickledBytes or \
                 VerbatimPickles",
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn explicit_rank_wins_and_zero_sizes_are_refused() {
        let options = ArrowOptions { rank: Some(3), writer_rank: 3, ..Default::default() };
        assert_eq!(options.current_rank().unwrap(), 3);
        assert!(options.is_writer().unwrap());
        let bad = ArrowOptions { flush_every: 0, ..Default::default() };
        assert!(bad.check().unwrap_err().to_string().contains("flush_every"));
    }
}
