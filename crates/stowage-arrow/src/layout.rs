//! Where each file of a torchcachex cache lives, and which files are segments.
//!
//! ```text
//! <cache>/segments/segment_000000.arrow       one Arrow IPC file per flush, immutable once renamed
//! <cache>/segments/segment_000001.arrow       ids grow by one; past 999,999 the name grows a digit
//! <cache>/segments/segment_000002.arrow.tmp   a segment being written: never data
//! <cache>/index.pkl                           optional pickled {key: (segment, row)} accelerator
//! <cache>/schema.json                         fields, metadata and output structure
//! <cache>/stowage.log                         stowage's commit log (caches stowage writes)
//! <cache>/stowage.complete                    stowage's mark of a finalized cache
//! <cache>/stowage_index_000000_000031.bin     stowage's key index run over segments 0..=31
//! <cache>/segments/segment_000000.keys        stowage's key sidecar of a segment
//! <cache>/segments/segment_000000.sums        stowage's row checksums of a segment
//! <cache>/stowage-ranks/rank-3/               rank 3's inbox (`ArrowOptions::rank_inboxes`): a
//!                                             stowage Arrow cache of its own, which the writer
//!                                             rank ingests; no scan of the cache looks in it
//! ```
//!
//! torchcachex never reads stowage's files, and stowage never needs torchcachex's `index.pkl`.
//!
//! Segments are ordered by their numeric id, never by name: torchcachex sorts names as text, so
//! `segment_1000000` would come before `segment_999999` and the older row would win.

use std::path::{Path, PathBuf};
use stowage_core::{IoResultExt, Result};

/// Paths inside one cache directory (torchcachex's `<cache_dir>/<module_id>`).
///
/// ```
/// let layout = stowage_arrow::test_support::layout::Layout::new("cache/encoder");
/// assert!(layout.segment(7).ends_with("segments/segment_000007.arrow"));
/// assert!(layout.segment(1_234_567).ends_with("segments/segment_1234567.arrow"));
/// ```
#[derive(Debug, Clone)]
pub struct Layout {
    root: PathBuf,
}

impl Layout {
    /// The layout of the cache in `root`.
    pub fn new(root: impl Into<PathBuf>) -> Layout {
        Layout { root: root.into() }
    }

    /// The cache directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// `segments/`.
    pub fn segments_dir(&self) -> PathBuf {
        self.root.join("segments")
    }

    /// `segments/segment_<id:06>.arrow`.
    pub fn segment(&self, id: u64) -> PathBuf {
        self.segments_dir().join(segment_file_name(id))
    }

    /// `schema.json`.
    pub fn schema(&self) -> PathBuf {
        self.root.join("schema.json")
    }

    /// `stowage_index_<first:06>_<through:06>.bin`, a run of stowage's merged key index over
    /// segments `first..=through` ([`crate::merged_index`]).
    pub fn index_run(&self, first: u64, through: u64) -> PathBuf {
        self.root.join(format!("stowage_index_{first:06}_{through:06}.bin"))
    }

    /// Every key index run file in the cache directory: (first, through, path), in no order.
    ///
    /// Errors: [`stowage_core::Error::Io`] naming the directory when it cannot be listed.
    pub fn list_index_runs(&self) -> Result<Vec<(u64, u64, PathBuf)>> {
        let entries = match std::fs::read_dir(&self.root) {
            Ok(entries) => entries,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(e).at(&self.root),
        };
        let mut runs = Vec::new();
        for entry in entries {
            let entry = entry.at(&self.root)?;
            if let Some((first, through)) = entry.file_name().to_str().and_then(parse_run_name) {
                runs.push((first, through, entry.path()));
            }
        }
        Ok(runs)
    }

    /// `stowage.log`, the commit log of a cache stowage writes ([`crate::commit_log`]).
    pub fn commit_log(&self) -> PathBuf {
        self.root.join("stowage.log")
    }

    /// `.stowage.log.new`, where `create` and `attach` write a new commit log before renaming it
    /// into place.
    pub fn new_commit_log(&self) -> PathBuf {
        self.root.join(".stowage.log.new")
    }

    /// `stowage.complete`, written when a cache stowage writes is finalized.
    pub fn complete_marker(&self) -> PathBuf {
        self.root.join("stowage.complete")
    }

    /// `index.pkl`, torchcachex's optional index.
    pub fn pickled_index(&self) -> PathBuf {
        self.root.join("index.pkl")
    }

    /// `stowage-ranks/`, where the ranks other than the writer rank keep their inboxes
    /// (`ArrowOptions::rank_inboxes`).
    pub fn ranks_dir(&self) -> PathBuf {
        self.root.join("stowage-ranks")
    }

    /// `stowage-ranks/rank-<rank>/`, the inbox of rank `rank`: a stowage Arrow cache of its own.
    pub fn rank_inbox(&self, rank: u32) -> PathBuf {
        self.ranks_dir().join(format!("rank-{rank}"))
    }

    /// Every inbox directory in `stowage-ranks/` (`rank-<digits>`), ascending ranks; a missing
    /// `stowage-ranks/` has none. Other names are skipped.
    ///
    /// Errors: [`stowage_core::Error::Io`] naming `stowage-ranks/` when it cannot be listed.
    pub fn list_rank_inboxes(&self) -> Result<Vec<(u32, PathBuf)>> {
        let dir = self.ranks_dir();
        let entries = match std::fs::read_dir(&dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(e).at(&dir),
        };
        let mut inboxes = Vec::new();
        for entry in entries {
            let entry = entry.at(&dir)?;
            let rank = entry.file_name().to_str().and_then(|name| {
                let digits = name.strip_prefix("rank-")?;
                let plain = !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit());
                plain.then(|| digits.parse::<u32>().ok()).flatten()
            });
            if let Some(rank) = rank
                && entry.file_type().at(entry.path())?.is_dir()
            {
                inboxes.push((rank, entry.path()));
            }
        }
        inboxes.sort_unstable_by_key(|&(rank, _)| rank);
        Ok(inboxes)
    }

    /// Every segment in `segments/`, in numeric id order. Temporary files (`.tmp`) and names that
    /// are not `segment_<digits>.arrow` are skipped; a missing `segments/` is an empty cache.
    ///
    /// Errors: [`stowage_core::Error::Io`] naming `segments/` when it cannot be listed.
    pub fn list_segments(&self) -> Result<Vec<(u64, PathBuf)>> {
        let dir = self.segments_dir();
        let entries = match std::fs::read_dir(&dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(e).at(&dir),
        };
        let mut segments = Vec::new();
        for entry in entries {
            let entry = entry.at(&dir)?;
            if let Some(id) = entry.file_name().to_str().and_then(parse_segment_file_name) {
                segments.push((id, entry.path()));
            }
        }
        segments.sort_unstable_by_key(|&(id, _)| id);
        Ok(segments)
    }
}

/// Whether stowage writes the cache directory's file `name` under a temporary name first
/// (`.<name>.tmp-<pid>-<n>`, the core's `atomic_write`): `schema.json`, `stowage.complete` and
/// the key index runs. torchcachex's own temporaries (`index.pkl.tmp`, `segments/*.arrow.tmp`)
/// are named otherwise.
pub(crate) fn is_written_through_temporary(name: &str) -> bool {
    matches!(name, "schema.json" | "stowage.complete") || parse_run_name(name).is_some()
}

/// The (first, through) of a key index run file name, `stowage_index_<first>_<through>.bin`;
/// `None` for anything else (a temporary file included).
fn parse_run_name(name: &str) -> Option<(u64, u64)> {
    let number = |s: &str| {
        let digits = !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
        digits.then(|| s.parse::<u64>().ok()).flatten()
    };
    let (first, through) =
        name.strip_prefix("stowage_index_")?.strip_suffix(".bin")?.split_once('_')?;
    Some((number(first)?, number(through)?))
}

/// `segment_<id:06>.arrow`: at least six digits, more past 999,999.
pub fn segment_file_name(id: u64) -> String {
    format!("segment_{id:06}.arrow")
}

/// The id of a segment file name, or `None` for anything else: a `.tmp` file, another extension,
/// a non-digit or signed id, an id beyond `u64`, fewer than six digits.
///
/// ```
/// use stowage_arrow::test_support::layout::parse_segment_file_name as parse;
/// assert_eq!(parse("segment_000042.arrow"), Some(42));
/// assert_eq!(parse("segment_1000000.arrow"), Some(1_000_000));
/// assert_eq!(parse("segment_000042.arrow.tmp"), None);
/// assert_eq!(parse("segment_42.arrow"), None);
/// ```
pub fn parse_segment_file_name(name: &str) -> Option<u64> {
    let digits = name.strip_prefix("segment_")?.strip_suffix(".arrow")?;
    if digits.len() < 6 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// The segment id of a segment file or one of its sidecars (`segment_<id>.arrow`, `.keys`,
/// `.sums`), or `None` for any other name.
///
/// ```
/// use stowage_arrow::test_support::layout::segment_file_id;
/// assert_eq!(segment_file_id("segment_000042.sums"), Some(42));
/// assert_eq!(segment_file_id("segment_000042.arrow"), Some(42));
/// assert_eq!(segment_file_id("segment_000042.txt"), None);
/// ```
pub fn segment_file_id(name: &str) -> Option<u64> {
    let stem = ["arrow", "keys", "sums"]
        .iter()
        .find_map(|ext| name.strip_suffix(ext)?.strip_suffix('.'))?;
    parse_segment_file_name(&format!("{stem}.arrow"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_strays_are_not_segments() {
        for id in [0, 1, 999_999, 1_000_000, u64::MAX] {
            assert_eq!(parse_segment_file_name(&segment_file_name(id)), Some(id));
        }
        for stray in [
            "segment_000001.arrow.tmp",
            "segment_00000a.arrow",
            "segment_+00001.arrow",
            "segment_000001.feather",
            "segment_99999999999999999999999.arrow",
            "index.pkl",
            "segment_.arrow",
        ] {
            assert_eq!(parse_segment_file_name(stray), None, "{stray}");
        }
    }

    #[test]
    fn index_runs_are_listed_by_name_and_strays_skipped() {
        let dir = tempfile::tempdir().unwrap();
        let layout = Layout::new(dir.path());
        std::fs::write(layout.index_run(0, 31), b"").unwrap();
        std::fs::write(layout.index_run(32, 1_000_000), b"").unwrap();
        for stray in [
            ".stowage_index_000000_000031.bin.tmp-1-2",
            "stowage_index_000000.bin",
            "stowage_index_00000a_000001.bin",
            "stowage_index_000000_000001.bin.bench-pristine",
        ] {
            std::fs::write(dir.path().join(stray), b"").unwrap();
        }
        let mut runs: Vec<(u64, u64)> =
            layout.list_index_runs().unwrap().into_iter().map(|(f, t, _)| (f, t)).collect();
        runs.sort_unstable();
        assert_eq!(runs, [(0, 31), (32, 1_000_000)]);
    }

    #[test]
    fn the_files_written_through_temporaries_are_named_as_the_layout_names_them() {
        let layout = Layout::new("cache");
        for path in [layout.schema(), layout.complete_marker(), layout.index_run(0, 31)] {
            let name = path.file_name().unwrap().to_str().unwrap();
            assert!(is_written_through_temporary(name), "{name}");
        }
        for other in ["index.pkl", "stowage.log", "segment_000001.arrow", "stowage_index_1.bin"] {
            assert!(!is_written_through_temporary(other), "{other}");
        }
    }

    #[test]
    fn rank_inboxes_are_listed_in_rank_order_and_strays_skipped() {
        let dir = tempfile::tempdir().unwrap();
        let layout = Layout::new(dir.path());
        assert!(layout.list_rank_inboxes().unwrap().is_empty(), "no stowage-ranks/: none");
        for rank in [10, 2, 3] {
            std::fs::create_dir_all(layout.rank_inbox(rank)).unwrap();
        }
        for stray in ["rank-", "rank-x", "rank--1", "rank-99999999999", "notes"] {
            std::fs::create_dir(layout.ranks_dir().join(stray)).unwrap();
        }
        std::fs::write(layout.ranks_dir().join("rank-4"), b"a file").unwrap();
        let ranks: Vec<u32> =
            layout.list_rank_inboxes().unwrap().into_iter().map(|(rank, _)| rank).collect();
        assert_eq!(ranks, [2, 3, 10]);
        assert!(layout.rank_inbox(3).ends_with("stowage-ranks/rank-3"));
    }

    #[test]
    fn segments_are_listed_in_numeric_order() {
        let dir = tempfile::tempdir().unwrap();
        let layout = Layout::new(dir.path());
        assert!(layout.list_segments().unwrap().is_empty(), "no segments/ is an empty cache");
        std::fs::create_dir(layout.segments_dir()).unwrap();
        for id in [1_000_000, 999_999, 2, 10] {
            std::fs::write(layout.segment(id), b"").unwrap();
        }
        std::fs::write(layout.segments_dir().join("segment_000003.arrow.tmp"), b"").unwrap();
        std::fs::write(layout.segments_dir().join("notes.txt"), b"").unwrap();
        let ids: Vec<u64> = layout.list_segments().unwrap().into_iter().map(|(id, _)| id).collect();
        assert_eq!(ids, [2, 10, 999_999, 1_000_000]);
    }
}
