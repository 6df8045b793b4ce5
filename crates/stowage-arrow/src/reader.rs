//! Reading a torchcachex cache through stowage's key indexes, segments mapped on first use.
//!
//! The segments are the source of truth: `index.pkl` is never read (it may be stale, missing or
//! corrupt, and a segment renamed into place just before a crash is absent from it). A key is
//! found through the merged table ([`crate::merged_index`]) for the segments it covers, and
//! through each newer segment's sidecar ([`crate::key_sidecar`]; built in memory from the
//! segment's `key` column when the segment has none, as torchcachex's do), newest first: a later
//! row of a segment and a higher segment both win, as torchcachex writes them. A merged table
//! with a damaged header is ignored, and so is one whose last segment is gone; damage inside its
//! slots can hide a key but never return another key's row (every candidate is confirmed against
//! the segment's `key` column), and `validate` is what finds it. A newer segment's sidecar is
//! checked whole and rebuilt in memory when damaged. A missing or damaged `schema.json` does not
//! make the data unreadable: the structure is then inferred from the columns (a `list` then
//! reads as a `tuple`, which has the same columns).
//!
//! Opening maps the merged table and reads the keys of the segments it does not cover (to count
//! distinct keys); covered segments are opened on their first read.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use stowage_core::{Error, Result, Sample};

use crate::decode::{ColumnGroup, column_groups, decode_row};
use crate::key_sidecar::{self, KeySidecar};
use crate::layout::Layout;
use crate::merged_index::MergedIndex;
use crate::row_sums::{self, RowSums};
use crate::schema_json::{OutputStructure, SchemaJson};
use crate::segment::Segment;

/// One segment file, opened on first use.
#[derive(Debug)]
struct SegmentSlot {
    id: u64,
    path: PathBuf,
    open: OnceLock<OpenSegment>,
}

/// An opened segment: its batches, the sample fields its columns hold, and its row checksums
/// (none for segments torchcachex wrote; the reason when the checksum file is damaged, reported
/// by every get from the segment, which can then not be vouched for).
#[derive(Debug)]
struct OpenSegment {
    segment: Segment,
    groups: Vec<ColumnGroup>,
    sums: std::result::Result<Option<RowSums>, (PathBuf, String)>,
}

/// A read-only view of a torchcachex cache directory (`<cache_dir>/<module_id>`).
#[derive(Debug)]
pub struct CacheReader {
    layout: Layout,
    structure: Option<OutputStructure>,
    /// Every segment, in id order.
    segments: Vec<SegmentSlot>,
    merged: Option<MergedIndex>,
    /// Sidecars of the segments the merged table does not cover: (position in `segments`,
    /// sidecar), newest first.
    recent: Vec<(usize, KeySidecar)>,
    len: usize,
    verify_checksums: bool,
}

impl CacheReader {
    /// Opens the cache in `dir`.
    ///
    /// Errors: [`Error::Corrupted`] naming the segment when a segment the merged table does not
    /// cover is not a valid Arrow IPC file or has no `key` column; [`Error::Io`] naming the path
    /// that cannot be read.
    pub fn open(dir: impl AsRef<Path>) -> Result<CacheReader> {
        let layout = Layout::new(dir.as_ref());
        let structure =
            SchemaJson::read(&layout.schema()).ok().flatten().map(|s| s.output_structure);
        let segments: Vec<SegmentSlot> = layout
            .list_segments()?
            .into_iter()
            .map(|(id, path)| SegmentSlot { id, path, open: OnceLock::new() })
            .collect();
        // The merged table only counts when the segments it covers are all still there.
        let merged = MergedIndex::open(&layout.merged_index())
            .ok()
            .filter(|m| segments.iter().any(|s| s.id == m.through()));
        let through = merged.as_ref().map(MergedIndex::through);
        let mut reader = CacheReader {
            layout,
            structure,
            segments,
            merged,
            recent: Vec::new(),
            len: 0,
            verify_checksums: true,
        };
        let mut new_keys: HashSet<String> = HashSet::new();
        let mut recent = Vec::new();
        for position in 0..reader.segments.len() {
            if through.is_some_and(|t| reader.segments[position].id <= t) {
                continue;
            }
            let segment = reader.segment(position)?;
            let keys = segment.keys()?;
            let sidecar_path = key_sidecar::sidecar_path(segment.path());
            let sidecar = KeySidecar::open(&sidecar_path)
                .ok()
                .filter(|s| s.rows() == keys.len() && s.verify().is_ok())
                .map_or_else(|| KeySidecar::in_memory(segment.path(), &keys), Ok)?;
            for key in &keys {
                let covered = reader.merged.as_ref().is_some_and(|m| {
                    m.find(key, |id, row| reader.key_at(id, row).is_some_and(|k| k == *key))
                        .is_some()
                });
                if !covered {
                    new_keys.insert((*key).to_owned());
                }
            }
            recent.push((position, sidecar));
        }
        recent.reverse();
        reader.recent = recent;
        reader.len = reader.merged.as_ref().map_or(0, |m| m.keys() as usize) + new_keys.len();
        Ok(reader)
    }

    /// Whether `get` checks each row against its segment's row checksums (on by default;
    /// segments torchcachex wrote have none and are read unchecked).
    pub fn with_checksums(mut self, verify: bool) -> CacheReader {
        self.verify_checksums = verify;
        self
    }

    /// The cache directory's layout.
    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    /// How samples are split into columns: `schema.json`'s, else inferred from the first segment.
    pub fn output_structure(&self) -> Result<OutputStructure> {
        match (self.structure, self.segments.is_empty()) {
            (Some(structure), _) => Ok(structure),
            (None, true) => Ok(OutputStructure::Tensor),
            (None, false) => Ok(infer_structure(self.segment(0)?)),
        }
    }

    /// Number of distinct keys.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the cache holds no key.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Every key, each once, in segment and row order of its winning row.
    pub fn keys(&self) -> Result<Vec<String>> {
        let mut keys = Vec::with_capacity(self.len);
        for position in 0..self.segments.len() {
            let segment = self.segment(position)?;
            for (row, key) in segment.keys()?.into_iter().enumerate() {
                if self.locate(key) == Some((segment.id(), row)) {
                    keys.push(key.to_owned());
                }
            }
        }
        Ok(keys)
    }

    /// The segment id and row holding the winning value of `key`.
    pub fn locate(&self, key: &str) -> Option<(u64, usize)> {
        for (position, sidecar) in &self.recent {
            let id = self.segments[*position].id;
            if let Some(row) = sidecar.find(key, |row| self.key_at(id, row) == Some(key)) {
                return Some((id, row));
            }
        }
        let merged = self.merged.as_ref()?;
        merged.find(key, |id, row| self.key_at(id, row) == Some(key))
    }

    /// The sample stored under `key`, `Ok(None)` when absent. Tensors share the segment's map.
    ///
    /// Errors: [`Error::Corrupted`] naming the segment, the key and the column when the row
    /// cannot be a sample (a shape that does not match its values, a null inside a tensor), or
    /// when the segment holding it is damaged.
    pub fn get(&self, key: &str) -> Result<Option<Sample>> {
        let Some((id, row)) = self.locate(key) else { return Ok(None) };
        let position = self.position(id).expect("located in a listed segment");
        let OpenSegment { segment, groups, sums } = self.opened(position)?;
        let (batch, at) = segment.locate(row).expect("located rows exist");
        let sample = decode_row(batch, at, groups).map_err(|why| {
            Error::corrupted(segment.path(), format!("key {key:?} (row {row}): {why}"))
        })?;
        let sums = match sums {
            Ok(sums) => sums.as_ref().filter(|_| self.verify_checksums),
            Err((path, why)) if self.verify_checksums => {
                return Err(Error::corrupted(path, format!("key {key:?} (row {row}): {why}")));
            }
            Err(_) => None,
        };
        if let Some(sums) = sums {
            let (stored, actual) = (sums.get(row), row_sums::of_sample(key, &sample));
            if stored != Some(actual) {
                return Err(Error::corrupted(
                    segment.path(),
                    format!(
                        "key {key:?} (row {row}): checksum {actual:016x}, {} records {}",
                        sums.path().display(),
                        stored.map_or("none".into(), |s| format!("{s:016x}"))
                    ),
                ));
            }
        }
        Ok(Some(sample))
    }

    /// The key of row `row` of segment `id`; `None` when the segment is missing, unreadable or
    /// shorter (a lookup then treats the candidate as not confirmed).
    fn key_at(&self, id: u64, row: usize) -> Option<&str> {
        self.segment(self.position(id)?).ok()?.key(row)
    }

    fn position(&self, id: u64) -> Option<usize> {
        self.segments.binary_search_by_key(&id, |s| s.id).ok()
    }

    fn segment(&self, position: usize) -> Result<&Segment> {
        self.opened(position).map(|open| &open.segment)
    }

    /// Segment `position`, its column groups and row checksums, opened on first use.
    fn opened(&self, position: usize) -> Result<&OpenSegment> {
        let slot = &self.segments[position];
        if let Some(open) = slot.open.get() {
            return Ok(open);
        }
        let segment = Segment::open(slot.id, &slot.path)?;
        let structure = self.structure.unwrap_or_else(|| infer_structure(&segment));
        let names: Vec<&str> =
            segment.schema().fields().iter().map(|f| f.name().as_str()).collect();
        let groups = column_groups(&names, structure)
            .map_err(|why| Error::corrupted(segment.path(), why))?;
        let sums_path = row_sums::sums_path(&slot.path);
        let sums = match RowSums::open(&sums_path) {
            Ok(sums) if sums.rows() == segment.rows() => Ok(Some(sums)),
            Ok(sums) => Err((
                sums_path,
                format!("{} checksums for the {} rows of its segment", sums.rows(), segment.rows()),
            )),
            Err(Error::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {
                Ok(None)
            }
            Err(e) => Err((sums_path, e.to_string())),
        };
        let _ = slot.open.set(OpenSegment { segment, groups, sums });
        Ok(slot.open.get().expect("set just now or by another thread"))
    }
}

/// The structure a segment's columns imply when `schema.json` cannot tell.
fn infer_structure(segment: &Segment) -> OutputStructure {
    let has = |name: &str| segment.schema().fields().iter().any(|f| f.name() == name);
    let item = segment.schema().fields().iter().any(|f| f.name().starts_with("item0_"));
    match (has("data"), has("blob"), item) {
        (true, _, _) => OutputStructure::Tensor,
        (_, true, _) => OutputStructure::Blob,
        (_, _, true) => OutputStructure::Tuple,
        _ => OutputStructure::Dict,
    }
}
