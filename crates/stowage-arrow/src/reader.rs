//! Reading a torchcachex cache: every segment mapped once, a key index rebuilt from the segments.
//!
//! The segments are the source of truth: `index.pkl` is never read (it may be stale, missing or
//! corrupt, and a segment renamed into place just before a crash is absent from it). Keys are
//! indexed by scanning the segments' `key` columns in numeric segment order, so a later row of a
//! segment and a higher segment both win, as torchcachex writes them. A missing or damaged
//! `schema.json` does not make the data unreadable: the structure is then inferred from the
//! columns (a `list` then reads as a `tuple`, which has the same columns).
//!
//! This is the first read path (issue 4): its in-memory key map costs memory per key; the index
//! that scales to a billion keys replaces it.

use std::collections::HashMap;
use std::path::Path;

use stowage_core::{Error, Result, Sample};

use crate::decode::{ColumnGroup, column_groups, decode_row};
use crate::layout::Layout;
use crate::schema_json::{OutputStructure, SchemaJson};
use crate::segment::Segment;

/// A read-only view of a torchcachex cache directory (`<cache_dir>/<module_id>`).
#[derive(Debug)]
pub struct CacheReader {
    layout: Layout,
    structure: OutputStructure,
    segments: Vec<(Segment, Vec<ColumnGroup>)>,
    /// Key -> (position in `segments`, row).
    index: HashMap<Box<str>, (u32, u32)>,
}

impl CacheReader {
    /// Opens the cache in `dir`: maps every segment and indexes its keys.
    ///
    /// Errors: [`Error::Corrupted`] naming the segment when one is not a valid Arrow IPC file,
    /// has no `key` column or columns that do not fit the output structure; [`Error::Io`] naming
    /// the path that cannot be read.
    pub fn open(dir: impl AsRef<Path>) -> Result<CacheReader> {
        let layout = Layout::new(dir.as_ref());
        let schema = SchemaJson::read(&layout.schema()).ok().flatten();
        let mut segments = Vec::new();
        for (id, path) in layout.list_segments()? {
            segments.push(Segment::open(id, &path)?);
        }
        let structure = match (&schema, segments.first()) {
            (Some(schema), _) => schema.output_structure,
            (None, Some(first)) => infer_structure(first),
            (None, None) => OutputStructure::Tensor,
        };
        let mut index = HashMap::new();
        let mut opened = Vec::with_capacity(segments.len());
        for (position, segment) in segments.into_iter().enumerate() {
            let names: Vec<&str> =
                segment.schema().fields().iter().map(|f| f.name().as_str()).collect();
            let groups = column_groups(&names, structure)
                .map_err(|why| Error::corrupted(segment.path(), why))?;
            let position = u32::try_from(position).expect("fewer than 2^32 segments");
            for (row, key) in segment.keys()?.into_iter().enumerate() {
                let row = u32::try_from(row)
                    .map_err(|_| Error::corrupted(segment.path(), "more than 2^32 rows"))?;
                index.insert(Box::from(key), (position, row));
            }
            opened.push((segment, groups));
        }
        Ok(CacheReader { layout, structure, segments: opened, index })
    }

    /// The cache directory's layout.
    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    /// How samples are split into columns.
    pub fn output_structure(&self) -> OutputStructure {
        self.structure
    }

    /// Number of distinct keys.
    pub fn len(&self) -> usize {
        self.index.len()
    }

    /// Whether the cache holds no key.
    pub fn is_empty(&self) -> bool {
        self.index.is_empty()
    }

    /// Every key, in no particular order.
    pub fn keys(&self) -> impl Iterator<Item = &str> {
        self.index.keys().map(|k| &**k)
    }

    /// The segment id and row holding the winning value of `key`.
    pub fn locate(&self, key: &str) -> Option<(u64, usize)> {
        let &(position, row) = self.index.get(key)?;
        Some((self.segments[position as usize].0.id(), row as usize))
    }

    /// The sample stored under `key`, `Ok(None)` when absent. Tensors share the segment's map.
    ///
    /// Errors: [`Error::Corrupted`] naming the segment, the key and the column when the row
    /// cannot be a sample (a shape that does not match its values, a null inside a tensor).
    pub fn get(&self, key: &str) -> Result<Option<Sample>> {
        let Some(&(position, row)) = self.index.get(key) else { return Ok(None) };
        let (segment, groups) = &self.segments[position as usize];
        let (batch, at) = segment.locate(row as usize).expect("indexed rows exist");
        decode_row(batch, at, groups).map(Some).map_err(|why| {
            Error::corrupted(segment.path(), format!("key {key:?} (row {row}): {why}"))
        })
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
