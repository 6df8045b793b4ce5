//! Who wrote each segment file: stowage (committed in its log), another writer (torchcachex, which
//! appends segments to the same directory), or a stowage writer session that crashed between a
//! segment's rename and its commit record.
//!
//! torchcachex numbers its segments from the directory listing and knows nothing of stowage's
//! log, so a segment the log does not list is another writer's unless it is *proven* to be
//! stowage's own leftover. The proof is in the files themselves:
//!
//! - the segment's own Arrow schema metadata holds `stowage_segment` (its id, equal to the id in
//!   its name) and `stowage_session` (a random nonce of the writer session that wrote it). Not
//!   `schema.json`: torchcachex copies `schema.json`'s metadata into the segments it writes;
//! - both sidecars (`.keys`, `.sums`) are there and record the same session in their checked
//!   headers. Only stowage writes sidecars, and it renames them into place before the segment.
//!
//! A segment without that proof is kept and read as another writer's: one torchcachex wrote, a
//! leftover of a stowage version before the proof existed, a segment copied from elsewhere.
//! Only proven leftovers are ever deleted. Sidecars and stowage temporary files the log does not
//! vouch for are always stowage's own (no other writer makes them) and are deleted by the next
//! writer.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use stowage_core::{IoResultExt, Result};

use crate::key_sidecar::{self, KeySidecar};
use crate::layout::{Layout, parse_segment_file_name, segment_file_id};
use crate::row_sums::{self, RowSums};
use crate::segment::Segment;

/// The segment schema metadata key holding the segment's id.
pub const SEGMENT_METADATA: &str = "stowage_segment";
/// The segment schema metadata key holding the writer session's nonce (16 hex digits).
pub const SESSION_METADATA: &str = "stowage_session";

/// The writer name of a foreign segment without stowage's metadata.
pub const TORCHCACHEX: &str = "torchcachex";
/// The writer name of a foreign segment that cannot be told apart (unreadable, or claiming to be
/// stowage's without the proof).
pub const ANOTHER_WRITER: &str = "another writer";

/// Who wrote a segment of a cache stowage writes, as its commit log and the proof tell.
///
/// ```
/// use stowage_arrow::test_support::ownership::SegmentOrigin;
/// assert!(SegmentOrigin::Foreign { writer: "torchcachex" }.is_foreign());
/// assert!(!SegmentOrigin::Adopted.is_foreign());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SegmentOrigin {
    /// Written and committed by stowage: key sidecar and row checksums beside it.
    Stowage,
    /// Written by another writer, then adopted ([`crate::ArrowBackend::adopt`]): committed, with
    /// key sidecar and row checksums stowage wrote; its rows are checked against the schema.
    Adopted,
    /// Written by another writer and not adopted: read unchecked (any sidecar files beside it are
    /// ignored), its rows checked against the schema.
    Foreign {
        /// Who wrote it, as far as the files tell ([`TORCHCACHEX`] or [`ANOTHER_WRITER`]).
        writer: &'static str,
    },
}

impl SegmentOrigin {
    /// Whether the segment is another writer's and not adopted.
    pub fn is_foreign(self) -> bool {
        matches!(self, SegmentOrigin::Foreign { .. })
    }

    /// Whether stowage wrote the segment's rows (rather than adopting or reading another
    /// writer's).
    pub fn is_stowage(self) -> bool {
        self == SegmentOrigin::Stowage
    }
}

/// A new writer session's nonce: random, never 0 (0 means "not recorded").
///
/// ```
/// let (a, b) = (stowage_arrow::test_support::ownership::new_session(), stowage_arrow::test_support::ownership::new_session());
/// assert!(a != 0 && a != b);
/// ```
pub fn new_session() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    // RandomState is seeded from the OS; time, pid and a counter make each call differ.
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    hasher.write_u128(nanos);
    hasher.write_u32(std::process::id());
    hasher.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
    hasher.finish().max(1)
}

/// The schema metadata that proves segment `id` was written by writer session `session`.
pub fn segment_metadata(id: u64, session: u64) -> HashMap<String, String> {
    HashMap::from([
        (SEGMENT_METADATA.to_owned(), id.to_string()),
        (SESSION_METADATA.to_owned(), format!("{session:016x}")),
    ])
}

/// Who wrote the segment at `path` (id `id`), when the commit log does not list it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Uncommitted {
    /// Proven stowage's own: renamed into place by a session whose commit record never became
    /// durable (its flush never returned). Readers ignore it; the next writer deletes it.
    Leftover,
    /// Another writer's (or not proven stowage's): read, reported, never deleted.
    Foreign {
        /// Who wrote it, as far as the files tell.
        writer: &'static str,
    },
}

/// Whether the uncommitted segment `id` at `path` is proven stowage's own leftover (see this
/// module's docs).
pub fn classify_uncommitted(id: u64, path: &Path) -> Uncommitted {
    let Ok(segment) = Segment::open(id, path) else {
        return Uncommitted::Foreign { writer: ANOTHER_WRITER };
    };
    let metadata = segment.schema().metadata();
    let (Some(claimed), Some(session)) =
        (metadata.get(SEGMENT_METADATA), metadata.get(SESSION_METADATA))
    else {
        return Uncommitted::Foreign { writer: TORCHCACHEX };
    };
    let session = u64::from_str_radix(session, 16).ok().filter(|&s| s != 0 && session.len() == 16);
    let sidecar_session = || -> Option<u64> {
        let keys = KeySidecar::open(&key_sidecar::sidecar_path(path)).ok()?.session();
        let sums = RowSums::open(&row_sums::sums_path(path)).ok()?.session();
        (keys == sums).then_some(keys)
    };
    match session {
        Some(session)
            if claimed.parse::<u64>().ok() == Some(id) && sidecar_session() == Some(session) =>
        {
            Uncommitted::Leftover
        }
        _ => Uncommitted::Foreign { writer: ANOTHER_WRITER },
    }
}

/// A segment another writer added to a cache stowage writes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ForeignSegment {
    /// Its id.
    pub id: u64,
    /// Its file.
    pub path: PathBuf,
    /// Who wrote it, as far as the files tell.
    pub writer: &'static str,
}

/// What `segments/` holds beside the segments the commit log vouches for.
#[derive(Debug, Clone, Default)]
pub struct Survey {
    /// Segments another writer added, ascending ids.
    pub foreign: Vec<ForeignSegment>,
    /// Proven leftovers of crashed stowage sessions (ids, ascending).
    pub leftovers: Vec<u64>,
    /// Key sidecars and row checksum files of no vouched-for segment and no leftover (stowage's:
    /// a crash before their segment's rename, an adoption cut short).
    pub stray_sidecars: Vec<PathBuf>,
    /// stowage's temporary files (`.segment_<id>.<ext>.tmp-<pid>-<n>`).
    pub temporaries: Vec<PathBuf>,
    /// The highest id any name in `segments/` uses: a segment, a sidecar, torchcachex's
    /// `segment_<id>.arrow.tmp` (a write it may be about to rename).
    pub highest_id: Option<u64>,
}

/// The highest id any name in `segments/` of `layout` uses (see [`Survey::highest_id`]), from the
/// listing alone.
///
/// Errors: [`stowage_core::Error::Io`] naming `segments/` when it cannot be listed.
pub fn highest_id(layout: &Layout) -> Result<Option<u64>> {
    let dir = layout.segments_dir();
    let entries = match std::fs::read_dir(&dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e).at(&dir),
    };
    let mut highest = None;
    for entry in entries {
        let name = entry.at(&dir)?.file_name();
        highest = highest.max(name.to_str().and_then(named_id));
    }
    Ok(highest)
}

/// The segment id a name in `segments/` uses: a segment, a sidecar, torchcachex's temporary.
fn named_id(name: &str) -> Option<u64> {
    segment_file_id(name).or_else(|| name.strip_suffix(".tmp").and_then(parse_segment_file_name))
}

/// Sorts out `segments/` of `layout`; `vouched(id)` says whether the commit log vouches for
/// segment `id` (committed, or replaced by a compaction and kept for older readers).
///
/// Errors: [`stowage_core::Error::Io`] naming `segments/` when it cannot be listed.
pub fn survey(layout: &Layout, vouched: impl Fn(u64) -> bool) -> Result<Survey> {
    let dir = layout.segments_dir();
    let entries = match std::fs::read_dir(&dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Survey::default()),
        Err(e) => return Err(e).at(&dir),
    };
    let mut survey = Survey::default();
    // Per id: the segment file, and the sidecar files.
    let mut ids: BTreeMap<u64, (Option<PathBuf>, Vec<PathBuf>)> = BTreeMap::new();
    for entry in entries {
        let entry = entry.at(&dir)?;
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        if name.starts_with(".segment_") && name.contains(".tmp") {
            survey.temporaries.push(entry.path());
        } else if let Some(id) = name.strip_suffix(".tmp").and_then(parse_segment_file_name) {
            // torchcachex's temporary name: never data, never stowage's to delete.
            survey.highest_id = survey.highest_id.max(Some(id));
        } else if let Some(id) = segment_file_id(name) {
            survey.highest_id = survey.highest_id.max(Some(id));
            let slot = ids.entry(id).or_default();
            match parse_segment_file_name(name) {
                Some(_) => slot.0 = Some(entry.path()),
                None => slot.1.push(entry.path()),
            }
        }
    }
    for (id, (segment, sidecars)) in ids {
        if vouched(id) {
            continue;
        }
        match segment.map(|path| (classify_uncommitted(id, &path), path)) {
            Some((Uncommitted::Leftover, _)) => survey.leftovers.push(id),
            Some((Uncommitted::Foreign { writer }, path)) => {
                survey.foreign.push(ForeignSegment { id, path, writer });
                survey.stray_sidecars.extend(sidecars);
            }
            None => survey.stray_sidecars.extend(sidecars),
        }
    }
    survey.temporaries.sort();
    survey.stray_sidecars.sort();
    Ok(survey)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::encode::{arrow_schema, columns_for};
    use crate::segment_writer::{SegmentFormat, write_segment};
    use std::sync::Arc;
    use stowage_core::{DType, Sample, Schema, ShapeRule, Tensor};

    fn format(dir: &Path) -> SegmentFormat {
        let (structure, fields) =
            columns_for(&Schema::new().tensor("tensor", DType::F32, ShapeRule::Any));
        let schema = Arc::new(arrow_schema(structure, &fields));
        SegmentFormat::new(Layout::new(dir), schema, fields)
    }

    /// A segment stowage wrote and did not commit is proven; copied under another id, with its
    /// sidecars missing, or with a sidecar of another session, it is not.
    #[test]
    fn only_a_segment_with_its_own_id_and_session_everywhere_is_a_leftover() {
        let dir = tempfile::tempdir().unwrap();
        let layout = Layout::new(dir.path());
        let sample = Sample::new().with("tensor", Tensor::from_slice(&[1], &[1f32]).unwrap());
        let format = format(dir.path());
        let path = write_segment(&format, 3, &[("a", &sample)]).unwrap();
        assert_eq!(classify_uncommitted(3, &path), Uncommitted::Leftover);
        // The same bytes under id 4 (and its sidecars copied too): not proven.
        for ext in ["arrow", "keys", "sums"] {
            std::fs::copy(path.with_extension(ext), layout.segment(4).with_extension(ext)).unwrap();
        }
        let foreign = Uncommitted::Foreign { writer: ANOTHER_WRITER };
        assert_eq!(classify_uncommitted(4, &layout.segment(4)), foreign);
        // A sidecar of another session.
        let other = SegmentFormat { session: format.session + 1, ..format.clone() };
        let other_path = write_segment(&other, 5, &[("a", &sample)]).unwrap();
        std::fs::copy(other_path.with_extension("sums"), path.with_extension("sums")).unwrap();
        assert_eq!(classify_uncommitted(3, &path), foreign);
        std::fs::remove_file(other_path.with_extension("keys")).unwrap();
        assert_eq!(classify_uncommitted(5, &other_path), foreign, "a sidecar is missing");
        std::fs::write(layout.segment(6), b"not arrow").unwrap();
        assert_eq!(classify_uncommitted(6, &layout.segment(6)), foreign);

        let survey = survey(&layout, |id| id == 5).unwrap();
        let foreign: Vec<u64> = survey.foreign.iter().map(|f| f.id).collect();
        assert_eq!(foreign, [3, 4, 6]);
        assert!(survey.leftovers.is_empty());
        assert_eq!(survey.highest_id, Some(6));
        let strays: Vec<String> = survey
            .stray_sidecars
            .iter()
            .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        assert_eq!(
            strays,
            [
                "segment_000003.keys",
                "segment_000003.sums",
                "segment_000004.keys",
                "segment_000004.sums"
            ]
        );
    }
}
