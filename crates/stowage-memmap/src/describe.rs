//! What a memmap row cache (stowage's or DNANet's) says about itself for a report
//! ([`stowage_core::Reader::describe`]): DNANet's own inspection report, byte for byte
//! ([`InspectReport`]), then stowage's view of the state, files, checksums and dedup. The
//! original report is made also when the cache does not open, from whatever files can be read.

use std::collections::HashSet;
use std::path::Path;

use stowage_core::describe::{Dedup, Description, FileRoles, Integrity, Memory};
use stowage_core::{Error, Reader, ValidationLevel};

use crate::MemmapBackend;
use crate::index::JsonRef;
use crate::inspect::{CacheState, InspectReport};
use crate::layout::CACHE_VERSION;
use crate::row_format::{FORMAT_NAME, JsonStorage};

/// The description of an open cache: the original report, checksum coverage, dedup of the JSON
/// sidecars and the structure check. A file the original report could not read, or a structure
/// check that fails, is the description's failure.
pub(crate) fn describe(cache: &MemmapBackend) -> Description {
    let mut description = original(cache.path());
    coverage(cache, &mut description);
    description.dedup = dedup(cache);
    match cache.validate(ValidationLevel::Structure) {
        Ok(structure) => {
            let verify_adds = "`stowage verify` also reads every row and checks its checksums, \
                               where stowage wrote them";
            description.integrity = Integrity::checked(structure, verify_adds);
        }
        Err(e) => description.failure = description.failure.or(Some(e)),
    }
    description
}

/// The description of a cache at `path` that did not open with `error`: the original report of
/// what can be read, with `error` as the failure unless a file of the report failed first.
pub(crate) fn describe_unopened(path: &Path, error: Error) -> Description {
    let mut description = original(path);
    description.integrity = Integrity::NotChecked(format!("cannot be opened: {error}"));
    description.failure = description.failure.or(Some(error));
    description
}

/// DNANet's report of the cache at `path` and what stowage reads from it: the state, rows,
/// index columns, writer, file roles and the realization's memory. The first file that could not
/// be read is the failure; the others are listed as errors.
fn original(path: &Path) -> Description {
    let mut original = InspectReport::read(path);
    let mut description = Description::new(match &original.state {
        CacheState::Finalized => "finalized (_COMPLETE)".into(),
        CacheState::Unfinished { committed_rows, .. } => format!(
            "unfinished: manifest.jsonl commits {} rows; a writer resumes after them",
            committed_rows.map_or("an unknown number of".into(), |n| n.to_string())
        ),
        CacheState::FinalizeInterrupted => "finalize interrupted before _COMPLETE".into(),
        CacheState::NotStarted => "nothing committed yet".into(),
    });
    description.original_report = Some(original.to_string());
    description.format_name = Some(FORMAT_NAME.to_owned());
    description.version = Some(format!("{CACHE_VERSION} (DNANet's CACHE_VERSION)"));
    description.finalized = Some(original.finalized);
    description.rows = original.rows;
    if let Some(index) = &original.index {
        description.detail("index columns", index.columns.join(", "));
    }
    description.detail(
        "written by",
        if original.written_by_stowage {
            "stowage (stowage.json)"
        } else {
            "DNANet (no stowage.json)"
        },
    );
    description.files = FileRoles::by(|name| {
        if name.ends_with(".bin") && name != "stowage_checksums.bin" {
            "tensor rows".into()
        } else {
            String::new()
        }
    });
    description.memory = original.projected_ram_bytes.map(|bytes| Memory {
        bytes,
        basis: "stowage's realization: tensors, index strings and sidecar texts".into(),
    });
    if !original.errors.is_empty() {
        description.failure = Some(original.errors.remove(0));
    }
    description.errors = original.errors.iter().map(ToString::to_string).collect();
    description
}

/// `stowage_checksums.bin` (caches stowage wrote) covers every row's key and fields; DNANet
/// writes none.
fn coverage(cache: &MemmapBackend, description: &mut Description) {
    let format = cache.row_format();
    let data: Vec<String> =
        format.tensors.iter().map(|t| format!("{}.bin", t.layout.name)).collect();
    let rows = cache.len() as u64;
    let checksums = &mut description.checksums;
    checksums.samples = Some(rows);
    if format.checksums {
        checksums.scheme =
            "xxh3-64 per row over its key and every field, in stowage_checksums.bin".into();
        checksums.covered_files = data;
        checksums.covered_samples = Some(rows);
    } else {
        checksums.scheme = "none (DNANet writes no checksums)".into();
        checksums.uncovered_files = data;
        checksums.covered_samples = Some(0);
    }
}

/// Per deduplicated JSON field: the rows referencing its sidecar and the distinct texts stored.
/// The rows stream by once ([`MemmapBackend::each_row`]: an unfinished cache's manifest is read,
/// not loaded); what is kept is the distinct keys and texts, bounded by the distinct values.
fn dedup(cache: &MemmapBackend) -> Vec<Dedup> {
    let format = cache.row_format();
    let fields: Vec<(usize, &str, &str)> = format
        .json
        .iter()
        .enumerate()
        .filter_map(|(j, column)| match &column.storage {
            JsonStorage::Deduplicated { sidecar, .. } => {
                Some((j, column.name.as_str(), &**sidecar))
            }
            JsonStorage::Plain { .. } => None,
        })
        .collect();
    let mut counts: Vec<(u64, HashSet<i32>, HashSet<std::sync::Arc<str>>)> =
        fields.iter().map(|_| (0, HashSet::new(), HashSet::new())).collect();
    let streamed = cache.each_row(&mut |_, row| {
        for ((j, _, _), (references, keys, inline)) in fields.iter().zip(&mut counts) {
            match &row.json[*j] {
                JsonRef::Key(key) => {
                    *references += 1;
                    keys.insert(*key);
                }
                JsonRef::Inline(text) => {
                    *references += 1;
                    if !inline.contains(text) {
                        inline.insert(text.clone());
                    }
                }
                JsonRef::Null => {}
            }
        }
        Ok(())
    });
    if streamed.is_err() {
        return Vec::new();
    }
    fields
        .iter()
        .zip(counts)
        .map(|((_, name, sidecar), (references, keys, inline))| {
            Dedup::new(
                format!("field {name:?}"),
                references,
                (keys.len() + inline.len()) as u64,
                format!("rows with a text -> distinct texts in {sidecar}"),
            )
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::unit_fixtures::write_dnanet_cache;
    use crate::{MemmapFactory, MemmapOptions};
    use stowage_core::BackendFactory;

    #[test]
    fn a_dnanet_cache_has_the_original_report_and_no_checksums() {
        let dir = tempfile::tempdir().unwrap();
        write_dnanet_cache(dir.path());
        let cache = MemmapBackend::open_read_only(dir.path(), MemmapOptions::default()).unwrap();
        let d = cache.describe().unwrap();
        let text = d.original_report.as_deref().unwrap();
        assert!(text.contains(&InspectReport::header(dir.path())), "{text}");
        assert_eq!(d.state, "finalized (_COMPLETE)");
        assert_eq!((d.finalized, d.rows), (Some(true), Some(3)));
        assert_eq!(d.checksums.scheme, "none (DNANet writes no checksums)");
        assert_eq!(d.checksums.covered_samples, Some(0));
        assert!(d.checksums.uncovered_files.contains(&"data.bin".to_owned()), "{d:?}");
        assert_eq!(d.files.role("data.bin"), "tensor rows");
        assert_eq!(d.files.role("stowage_checksums.bin"), "");
        assert!(d.dedup.iter().any(|x| x.what == "field \"panel\""), "{:?}", d.dedup);
        assert!(matches!(d.integrity, Integrity::Checked { .. }));
        assert!(d.failure.is_none(), "{:?}", d.failure);
    }

    #[test]
    fn an_unopened_cache_still_has_the_original_report_and_fails_after_it() {
        let dir = tempfile::tempdir().unwrap();
        write_dnanet_cache(dir.path());
        let data = dir.path().join("data.bin");
        let len = std::fs::metadata(&data).unwrap().len();
        std::fs::OpenOptions::new().write(true).open(&data).unwrap().set_len(len - 1).unwrap();
        let factory = MemmapFactory::default();
        let error = factory.open_reader(dir.path()).err().expect("a short field file");
        let message = error.to_string();
        let format = factory.recognize(dir.path()).unwrap().unwrap();
        let d = factory.describe_unopened(dir.path(), format, error).unwrap();
        assert!(d.original_report.is_some());
        assert_eq!(d.integrity, Integrity::NotChecked(format!("cannot be opened: {message}")));
        assert!(d.failure.is_some());
    }
}
