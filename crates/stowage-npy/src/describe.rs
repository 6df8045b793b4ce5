//! What a NUMPY_10 cache says about itself for a report ([`stowage_core::Reader::describe`]):
//! stowage's caches (`stowage.json`, the record log, hangar's `data/10` tree), also when they do
//! not open, and bare hangar data directories, which have no reader at all.

use std::collections::{HashMap, HashSet};
use std::path::Path;

use stowage_core::describe::{Dedup, Description, FileRoles, Integrity, Memory, count};
use stowage_core::npy_header::storage_descr;
use stowage_core::{Error, FieldKind, Reader, Result, ValidationLevel, ValidationReport, shape};

use crate::NpyBackend;
use crate::hangar_dir::HangarDir;
use crate::layout::{CacheMetadata, Layout};

/// hangar's empty marker files, summed in one line.
const MARKERS: &[&str] = &["store_data/", "stage_data/"];

/// The description of an open stowage NUMPY_10 cache.
pub(crate) fn describe(cache: &NpyBackend) -> Result<Description> {
    let mut description = of_cache(cache.layout(), cache.metadata(), Some(cache));
    let structure = cache.validate(ValidationLevel::Structure)?;
    description.integrity =
        Integrity::checked(structure, "`stowage verify` also checks every checksum");
    Ok(description)
}

/// The description of a stowage NUMPY_10 cache at `path` that did not open with `error`: what its
/// `stowage.json` records, its files, and `error` as the failure.
///
/// Errors: `stowage.json` cannot be read either (there is nothing to report).
pub(crate) fn describe_unopened(path: &Path, error: Error) -> Result<Description> {
    let layout = Layout::new(path);
    let meta = CacheMetadata::read(&layout.metadata())?;
    let mut description = of_cache(&layout, &meta, None);
    description.state = "unknown (cannot be opened)".into();
    description.integrity = Integrity::NotChecked("cannot be opened (the error follows)".into());
    description.errors.push(error.to_string());
    description.failure = Some(error);
    Ok(description)
}

/// What `meta` records, and what the records of `cache` (when it opened) say of the files,
/// dedup, memory and checksums.
fn of_cache(layout: &Layout, meta: &CacheMetadata, cache: Option<&NpyBackend>) -> Description {
    let mut description = Description::new("unknown (cannot be opened)");
    description.format_name = Some(meta.format.clone());
    description.version = Some(meta.format_version.to_string());
    description.schema = Some(meta.schema.clone());
    for field in &meta.schema.fields {
        if let FieldKind::Tensor { dtype, .. } = field.kind {
            description.note(&field.name, format!("stored as {}", storage_descr(dtype)));
        }
    }
    description.detail("collection", format!("{} slots per data file", meta.collection_size));

    let mut field_of_uid: HashMap<String, String> = HashMap::new();
    if let Some(cache) = cache {
        description.finalized = Some(cache.is_finalized());
        description.state = if cache.is_finalized() {
            "finalized (complete)".into()
        } else {
            "not finalized (being written, or interrupted: a writer can resume it)".into()
        };
        let mut bytes = 0u64;
        let mut records = vec![0u64; meta.schema.fields.len()];
        let mut slots: Vec<HashSet<(String, u64)>> = vec![HashSet::new(); records.len()];
        let all = cache.records().unwrap_or_else(|e| {
            description.errors.push(e.to_string());
            Vec::new()
        });
        description.detail("key index", cache.key_index_summary());
        for (_, field_records) in all {
            for (f, (record, field)) in field_records.iter().zip(&meta.schema.fields).enumerate() {
                field_of_uid.entry(record.uid.clone()).or_insert_with(|| field.name.clone());
                if let FieldKind::Tensor { dtype, .. } = field.kind {
                    bytes +=
                        record.shape.iter().product::<usize>() as u64 * dtype.item_size() as u64;
                }
                records[f] += 1;
                slots[f].insert((record.uid.clone(), record.collection_index));
            }
        }
        for (f, field) in meta.schema.fields.iter().enumerate() {
            description.dedup.push(Dedup::new(
                format!("field {:?}", field.name),
                records[f],
                slots[f].len() as u64,
                "records sharing a slot hold identical bytes (hangar's NUMPY_10 dedup)".into(),
            ));
        }
        description.memory = Some(Memory {
            bytes,
            basis: "every key's tensors at their own shapes, from the records".into(),
        });
        let samples = cache.len() as u64;
        description.checksums.covered_samples = Some(samples);
        description.checksums.samples = Some(samples);
    }
    description.checksums.scheme =
        "xxh64 per sample and field, in each record (records.log), hangar's".into();

    // Files stowage created that no record uses yet (a session that crashed before a flush) are
    // its own; every other unused file is another writer's (hangar's).
    let claimed = crate::ownership::read_claims(layout).map(|c| c.uids).unwrap_or_default();
    let is_covered = |uid: &str| field_of_uid.contains_key(uid) || claimed.contains(uid);
    let (covered, uncovered): (Vec<String>, Vec<String>) = data_files(layout)
        .into_iter()
        .partition(|name| is_covered(name.trim_start_matches("data/10/").trim_end_matches(".npy")));
    description.checksums.covered_files = covered;
    description.checksums.uncovered_files = uncovered;

    let used = cache.is_some();
    let (store, stage) = (layout.store_dir(), layout.stage_dir());
    description.files = FileRoles::by(move |name| {
        let Some(file) = name.strip_prefix("data/10/") else {
            return match name {
                "records.log" => "record log".into(),
                "owned_files.log" => "collection files stowage created".into(),
                "stowage.json" => "metadata".into(),
                "_COMPLETE" => "finalize marker".into(),
                n if n.starts_with("store_data/") => "committed marker".into(),
                n if n.starts_with("stage_data/") => "staged marker".into(),
                _ => String::new(),
            };
        };
        let uid = file.strip_suffix(".npy").unwrap_or(file);
        let used_by = match field_of_uid.get(uid) {
            Some(field) => format!("field {field:?}"),
            None if used && claimed.contains(uid) => "stowage's, no record uses it".to_owned(),
            None if used => "another writer's (no stowage record)".to_owned(),
            None => String::new(),
        };
        let marker = if store.join(file).exists() {
            "committed"
        } else if stage.join(file).exists() {
            "staged"
        } else {
            "unmarked"
        };
        format!("{used_by}, {marker}").trim_start_matches(", ").to_owned()
    })
    .with_group(MARKERS, "empty marker file");
    description
}

/// Every regular file in `data/10` (links not followed), as `data/10/<name>`, by name; none when
/// the directory cannot be listed (the structure check reports that).
fn data_files(layout: &Layout) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir(layout.data_dir()) else { return Vec::new() };
    let mut names: Vec<String> = entries
        .flatten()
        .filter(|entry| entry.file_type().is_ok_and(|t| t.is_file()))
        .map(|entry| format!("data/10/{}", entry.file_name().to_string_lossy()))
        .collect();
    names.sort();
    names
}

/// The description of a bare hangar data directory at `path`: its collection files, their
/// headers, markers and sizes (it has no records, so no keys and no checksums).
///
/// Errors: `data/10` or a marker directory cannot be listed.
pub(crate) fn describe_hangar(path: &Path) -> Result<Description> {
    let dir = HangarDir::scan(path)?;
    let mut description = Description::new(
        "no completion marker in this format: store_data marks committed files, stage_data \
         staged ones",
    );
    description.format_name = Some("hangar NUMPY_10 (backend 10)".into());
    description.detail(
        "records",
        format!(
            "none here (hangar keeps them in its LMDB database); read one sample with `stowage \
             get {} --record RECORD --out FILE.npy`",
            path.display()
        ),
    );
    let markers = match (dir.committed_markers, dir.staged_markers) {
        (None, None) => {
            "none (no store_data/10 or stage_data/10: every file is unmarked)".to_owned()
        }
        (store, stage) => {
            let part = |name: &str, n: Option<usize>| match n {
                Some(n) => format!("{name}: {}", count(n as u64, "file")),
                None => format!("{name} absent"),
            };
            format!("{}, {}", part("store_data/10", store), part("stage_data/10", stage))
        }
    };
    description.detail("markers", markers);
    description
        .detail("collections", count(dir.files.len() as u64, "collection file") + " in data/10");
    let mut roles = HashMap::new();
    let mut problems = ValidationReport::default();
    let mut slot_bytes = 0u64;
    for file in &dir.files {
        problems.files_checked += 1;
        let check = file.check();
        let layout = match &check.header {
            Some(h) if !h.shape.is_empty() => {
                slot_bytes += h.data_len().unwrap_or(0) as u64;
                format!(
                    "{} {}: {} of {}",
                    h.descr,
                    shape::display(&h.shape),
                    count(h.shape[0] as u64, "slot"),
                    shape::display(&h.shape[1..])
                )
            }
            Some(h) => format!("{} {}", h.descr, shape::display(&h.shape)),
            None => "header unreadable".to_owned(),
        };
        roles.insert(format!("data/10/{}", file.name), format!("{layout}, {}", file.marker.name()));
        if let Some(problem) = check.problem {
            problems.problem(Some(&file.path), None, problem);
        }
    }
    for (path, detail) in &dir.problems {
        problems.problem(Some(path), None, detail.clone());
    }
    description.files = FileRoles::by(move |name| roles.get(name).cloned().unwrap_or_default())
        .with_group(MARKERS, "empty marker file");
    description.checksums.scheme = "none here: hangar keeps each sample's xxh64 in its LMDB \
                                    records, which are not in this directory"
        .into();
    description.checksums.uncovered_files =
        dir.files.iter().map(|f| format!("data/10/{}", f.name)).collect();
    description.memory = Some(Memory {
        bytes: slot_bytes,
        basis: "at most: every slot of every collection file (which slots hold samples is in \
                hangar's records)"
            .into(),
    });
    description.integrity =
        Integrity::checked(problems, "headers and sizes; no records here, so no checksums");
    Ok(description)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{NpyFactory, NpyOptions};
    use stowage_core::{Backend, BackendFactory, DType, Sample, Schema, ShapeRule, Tensor};

    fn cache(dir: &Path) -> NpyBackend {
        let schema = Schema::new().tensor("x", DType::F32, ShapeRule::Max(vec![4]));
        let mut cache = NpyBackend::create(dir, &schema, NpyOptions::default()).unwrap();
        for (key, n) in [("a", 4usize), ("b", 2)] {
            let values: Vec<f32> = (0..n).map(|i| i as f32).collect();
            let sample = Sample::new().with("x", Tensor::from_slice(&[n], &values).unwrap());
            cache.put(key, &sample).unwrap();
        }
        cache
    }

    #[test]
    fn an_open_cache_reports_records_memory_and_the_field_of_each_file() {
        let dir = tempfile::tempdir().unwrap();
        let mut cache = cache(dir.path());
        cache.finalize().unwrap();
        let d = cache.describe().unwrap();
        assert_eq!(
            (d.format_name.as_deref(), d.version.as_deref()),
            (Some("stowage-npy"), Some("1"))
        );
        assert_eq!(d.finalized, Some(true));
        assert_eq!(d.note_of("x"), Some("stored as <f4"));
        assert_eq!(d.memory.as_ref().unwrap().bytes, (4 + 2) * 4);
        assert_eq!((d.checksums.covered_samples, d.checksums.samples), (Some(2), Some(2)));
        assert_eq!(d.checksums.covered_files.len(), 1);
        assert!(d.checksums.uncovered_files.is_empty());
        let data = &d.checksums.covered_files[0];
        assert_eq!(d.files.role(data), "field \"x\", committed");
        assert_eq!(d.files.role("records.log"), "record log");
        assert_eq!(d.files.group_of("store_data/10/x.npy"), Some(0));
        assert_eq!(d.dedup[0].references, 2);
        assert!(matches!(d.integrity, Integrity::Checked { ref report, .. } if report.is_clean()));
        assert!(d.failure.is_none());
    }

    #[test]
    fn another_writers_file_is_uncovered_and_named_so() {
        let dir = tempfile::tempdir().unwrap();
        let mut cache = cache(dir.path());
        cache.flush().unwrap();
        std::fs::copy(
            dir.path().join(&cache.describe().unwrap().checksums.covered_files[0]),
            dir.path().join("data/10/zzzzzzzz.npy"),
        )
        .unwrap();
        let d = cache.describe().unwrap();
        assert_eq!(d.checksums.uncovered_files, ["data/10/zzzzzzzz.npy"]);
        assert_eq!(
            d.files.role("data/10/zzzzzzzz.npy"),
            "another writer's (no stowage record), unmarked"
        );
        assert_eq!(d.finalized, Some(false));
    }

    #[test]
    fn an_unopened_cache_reports_its_metadata_and_keeps_the_error() {
        let dir = tempfile::tempdir().unwrap();
        drop(cache(dir.path()));
        std::fs::write(dir.path().join("records.log"), b"garbage").unwrap();
        let factory = NpyFactory::default();
        let error = factory.open_reader(dir.path()).err().expect("a torn log does not open");
        let message = error.to_string();
        let d = factory.describe_unopened(dir.path(), &crate::STOWAGE_NPY, error).unwrap();
        assert_eq!(d.state, "unknown (cannot be opened)");
        assert_eq!(d.schema.as_ref().unwrap().fields[0].name, "x");
        assert_eq!(d.errors, [message]);
        assert!(d.failure.is_some() && d.memory.is_none());

        std::fs::remove_file(dir.path().join("stowage.json")).unwrap();
        let e = factory.describe_unopened(dir.path(), &crate::STOWAGE_NPY, Error::invalid("x"));
        assert!(e.unwrap_err().to_string().contains("stowage.json"));
    }

    #[test]
    fn a_hangar_directory_reports_each_collection_file_and_its_problems() {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("data/10");
        std::fs::create_dir_all(&data).unwrap();
        std::fs::create_dir_all(dir.path().join("store_data/10")).unwrap();
        let header = stowage_core::npy_header::write_header(DType::F32, &[3, 2]);
        let mut bytes = header.clone();
        bytes.extend_from_slice(&[0u8; 24]);
        std::fs::write(data.join("aaaaaaaa.npy"), &bytes).unwrap();
        std::fs::write(dir.path().join("store_data/10/aaaaaaaa.npy"), b"").unwrap();
        std::fs::write(data.join("bbbbbbbb.npy"), &bytes[..bytes.len() - 1]).unwrap();
        let factory = NpyFactory::default();
        let error = factory.open_reader(dir.path()).err().unwrap();
        let d = factory.describe_unopened(dir.path(), &crate::HANGAR_NUMPY10, error).unwrap();
        assert!(d.failure.is_none(), "a bare directory is described completely");
        assert_eq!(d.files.role("data/10/aaaaaaaa.npy"), "<f4 (3, 2): 3 slots of (2,), committed");
        assert_eq!(d.memory.as_ref().unwrap().bytes, 24 + 24);
        assert_eq!(d.checksums.uncovered_files.len(), 2);
        let Integrity::Checked { report, .. } = &d.integrity else { panic!("{d:?}") };
        assert_eq!(report.files_checked, 2);
        assert_eq!(report.problems.len(), 1, "{report:?}");
        assert!(report.problems[0].detail.contains("1 bytes too short"), "{report:?}");
    }
}
