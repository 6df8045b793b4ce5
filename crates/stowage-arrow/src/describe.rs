//! What an Arrow segment cache says about itself for a report
//! ([`stowage_core::Reader::describe`]): stowage's (commit log, key sidecars, key index runs,
//! row checksums) and torchcachex's (segments, `schema.json`, `index.pkl`).

use stowage_core::check_plan::problem_of;
use stowage_core::describe::{
    Dedup, Description, FileRoles, Integrity, count, note_shapes_seen, projected_memory,
    segment_log_state,
};
use stowage_core::{Reader, Result, ValidationReport};

use crate::commit_log::SegmentEntry;
use crate::ownership::SegmentOrigin;
use crate::reader::CacheReader;
use crate::segment::Segment;
use crate::{ArrowBackend, TorchcachexReader};

/// The description of a cache stowage wrote: the commit log's format and version, the key
/// index runs, segments and rows, what the row checksums cover, and the check of the log and
/// the key index (with the segments another writer added listed as unchecked).
pub(crate) fn describe_stowage(cache: &ArrowBackend) -> Result<Description> {
    let reader = cache.reader();
    let committed = crate::lost_segments::read(reader.layout())?;
    let mut description = Description::new(segment_log_state(cache.is_finalized()));
    description.format_name = Some(crate::commit_log::FORMAT_NAME.to_owned());
    description.version = Some(committed.header.version.to_string());
    description.finalized = Some(cache.is_finalized());
    if let Some(line) = lost_line(&committed.own.lost) {
        description.detail("lost", line);
    }
    let runs: Vec<String> = reader
        .runs()
        .map(|run| format!("{}..={}", run.entry().first, run.entry().through))
        .collect();
    description.detail(
        "key index",
        format!(
            "{} ({}), {} found through their sidecars",
            count(runs.len() as u64, "run"),
            if runs.is_empty() { "none".to_owned() } else { runs.join(", ") },
            count(reader.unmerged_segments() as u64, "segment")
        ),
    );
    let keys = cache.keys()?;
    segments(&mut description, reader, &keys, true)?;
    let mut structure = cache.validate_log_and_index()?;
    structure.unchecked.extend(cache.unchecked());
    if let Some(line) = pickled_index_line(reader) {
        description.detail("index.pkl", line);
    }
    (description.memory, _) = projected_memory(cache, &keys);
    description.integrity = Integrity::checked(
        structure,
        "`stowage verify` also decodes every row and checks its checksum",
    );
    Ok(description)
}

/// What a power cut took from a cache written without fsync (`crate::lost_segments`), if
/// anything.
fn lost_line(lost: &[SegmentEntry]) -> Option<String> {
    let ids: Vec<String> = lost.iter().map(|s| s.id.to_string()).collect();
    let rows: u64 = lost.iter().map(|s| s.rows).sum();
    (!lost.is_empty()).then(|| {
        format!(
            "{} ({}, {}) written without fsync: a power cut took their files",
            count(lost.len() as u64, "segment"),
            ids.join(", "),
            count(rows, "row")
        )
    })
}

/// The description of a cache torchcachex wrote: no completion marker, `index.pkl`, segments and
/// rows, the shapes seen (its schema records none), and the check that `schema.json` and every
/// segment open.
pub(crate) fn describe_torchcachex(source: &TorchcachexReader) -> Result<Description> {
    let reader = source.reader();
    let mut description = Description::new(
        "no completion marker in this format (torchcachex appends segments at any time)",
    );
    description.format_name = Some("torchcachex Arrow IPC segments".into());
    description.detail(
        "index.pkl",
        pickled_index_line(reader).unwrap_or("absent (torchcachex rebuilds it from the segments)"),
    );
    let keys = source.keys()?;
    segments(&mut description, reader, &keys, false)?;
    let (memory, shapes) = projected_memory(source, &keys);
    description.memory = memory;
    note_shapes_seen(&mut description, &shapes);
    let mut structure = ValidationReport::default();
    let schema_path = reader.layout().schema();
    if schema_path.exists() {
        structure.files_checked += 1;
        if let Err(e) = crate::schema_json::SchemaJson::read(&schema_path) {
            structure.problems.push(problem_of(&e, None));
        }
    }
    for (id, path) in reader.segment_paths() {
        structure.files_checked += 1;
        if let Err(e) = Segment::open(id, path) {
            structure.problems.push(problem_of(&e, None));
        }
    }
    description.integrity =
        Integrity::checked(structure, "`stowage verify` also decodes every row");
    Ok(description)
}

/// What `index.pkl` is to stowage, when there is one.
fn pickled_index_line(reader: &CacheReader) -> Option<&'static str> {
    reader.layout().pickled_index().exists().then_some(
        "present (torchcachex's index, which it trusts while it exists; stowage reads the \
         segments, never the pickle, and removes it before it adds a segment)",
    )
}

/// What both kinds share: the output structure, segments and rows, checksum coverage, the rows
/// that keys put again left behind, and the role of each file.
fn segments(
    description: &mut Description,
    reader: &CacheReader,
    keys: &[String],
    stowage: bool,
) -> Result<()> {
    description.detail("structure", reader.output_structure()?.name());
    let root = reader.layout().root();
    let mut rows = 0u64;
    let mut with_sums = 0u64;
    let mut covered_rows = 0u64;
    let mut segments = 0u64;
    for (id, path, origin) in reader.segment_origins() {
        segments += 1;
        let Ok(segment) = Segment::open(id, path) else { continue };
        let name = stowage_core::describe::relative_name(path, root);
        rows += segment.rows() as u64;
        // Another writer's segment is not covered, whatever sidecar files lie beside it.
        let foreign = matches!(origin, SegmentOrigin::Foreign { .. });
        if !foreign && crate::row_sums::sums_path(path).is_file() {
            with_sums += 1;
            covered_rows += segment.rows() as u64;
            description.checksums.covered_files.push(name);
        } else {
            description.checksums.uncovered_files.push(name);
        }
    }
    description.detail("segments", segments.to_string());
    description.rows = Some(rows);
    description.checksums.covered_samples = Some(covered_rows);
    description.checksums.samples = Some(rows);
    description.checksums.scheme = if stowage {
        "xxh3 per row in segments/*.sums; key sidecars, key index runs and stowage.log carry \
         their own checksums"
            .into()
    } else if with_sums == 0 {
        "none (torchcachex writes no checksums)".into()
    } else {
        format!("none from torchcachex; {with_sums} segments have stowage's row checksums (.sums)")
    };
    description.dedup.push(Dedup::new(
        "rows".into(),
        rows,
        keys.len() as u64,
        "rows per distinct key: a key put again leaves its older rows behind (the newest wins; \
         compaction drops the others)"
            .into(),
    ));
    description.files = FileRoles::by(|name| {
        if name.ends_with(".arrow") {
            "segment".into()
        } else if name.ends_with(".keys") {
            "key sidecar".into()
        } else if name.ends_with(".sums") {
            "row checksums".into()
        } else if name.starts_with("stowage_index_") {
            "key index run".into()
        } else {
            match name {
                "stowage.log" => "commit log".into(),
                "stowage.complete" => "finalize marker".into(),
                "schema.json" => "torchcachex schema".into(),
                "index.pkl" => "torchcachex index (pickle)".into(),
                _ => String::new(),
            }
        }
    });
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ArrowOptions;
    use stowage_core::{Backend, DType, OpenMode, Sample, Schema, ShapeRule, Tensor};

    fn sample(v: f32) -> Sample {
        Sample::new().with("x", Tensor::from_slice(&[2], &[v, v]).unwrap())
    }

    #[test]
    fn a_stowage_cache_counts_rows_left_behind_and_covers_its_segments() {
        let dir = tempfile::tempdir().unwrap();
        let schema = Schema::new().tensor("x", DType::F32, ShapeRule::Fixed(vec![2]));
        let mut cache = ArrowBackend::create(dir.path(), &schema, ArrowOptions::default()).unwrap();
        cache.put("a", &sample(1.0)).unwrap();
        cache.put("b", &sample(2.0)).unwrap();
        cache.flush().unwrap();
        cache.put("a", &sample(3.0)).unwrap();
        cache.finalize().unwrap();
        drop(cache);
        let cache =
            ArrowBackend::open(dir.path(), OpenMode::ReadOnly, ArrowOptions::default()).unwrap();
        let d = cache.describe().unwrap();
        assert_eq!(d.format_name.as_deref(), Some("stowage-arrow"));
        assert_eq!(d.finalized, Some(true));
        assert_eq!(d.rows, Some(3));
        assert_eq!((d.dedup[0].references, d.dedup[0].stored), (3, 2));
        assert_eq!((d.checksums.covered_samples, d.checksums.samples), (Some(3), Some(3)));
        assert_eq!(d.checksums.covered_files.len(), 2, "{:?}", d.checksums);
        assert!(d.checksums.covered_files[0].starts_with("segments/"), "{:?}", d.checksums);
        assert_eq!(d.files.role("stowage.log"), "commit log");
        assert_eq!(d.files.role("segments/segment_000000.arrow"), "segment");
        let labels: Vec<&str> = d.details.iter().map(|x| x.label.as_str()).collect();
        assert_eq!(labels, ["key index", "structure", "segments"]);
        assert_eq!(d.memory.as_ref().unwrap().bytes, 2 * 8);
        assert!(matches!(d.integrity, Integrity::Checked { ref report, .. } if report.is_clean()));
    }

    #[test]
    fn a_torchcachex_cache_notes_shapes_seen_and_a_bad_schema_json_is_a_problem() {
        let dir = tempfile::tempdir().unwrap();
        let schema = Schema::new().tensor("x", DType::F32, ShapeRule::Fixed(vec![2]));
        let mut cache = ArrowBackend::create(dir.path(), &schema, ArrowOptions::default()).unwrap();
        cache.put("a", &sample(1.0)).unwrap();
        cache.finalize().unwrap();
        drop(cache);
        // What torchcachex leaves: its segments and schema.json, none of stowage's files.
        for name in ["stowage.log", "stowage.complete", ".stowage.lock"] {
            let _ = std::fs::remove_file(dir.path().join(name));
        }
        for entry in std::fs::read_dir(dir.path()).unwrap() {
            let path = entry.unwrap().path();
            if path.file_name().unwrap().to_string_lossy().starts_with("stowage_index_") {
                std::fs::remove_file(path).unwrap();
            }
        }
        let source = TorchcachexReader::open(dir.path()).unwrap();
        let d = source.describe().unwrap();
        assert_eq!(d.format_name.as_deref(), Some("torchcachex Arrow IPC segments"));
        assert_eq!(d.note_of("x"), Some("seen (2,)"));
        assert_eq!(
            d.checksums.scheme,
            "none from torchcachex; 1 segments have stowage's row checksums (.sums)"
        );
        let labels: Vec<&str> = d.details.iter().map(|x| x.label.as_str()).collect();
        assert_eq!(labels, ["index.pkl", "structure", "segments"]);
        let Integrity::Checked { report, .. } = &d.integrity else { panic!("{d:?}") };
        assert!(report.is_clean(), "{report:?}");

        // schema.json is read again by the check, after the reader opened.
        let schema_json = dir.path().join("schema.json");
        std::fs::write(&schema_json, b"{not json").unwrap();
        let d = describe_torchcachex(&source).unwrap();
        let Integrity::Checked { report, .. } = &d.integrity else { panic!("{d:?}") };
        assert_eq!(report.problems.len(), 1, "{report:?}");
        assert_eq!(report.problems[0].path.as_deref(), Some(schema_json.as_path()));
    }
}
