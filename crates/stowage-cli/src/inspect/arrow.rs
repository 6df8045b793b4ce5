//! Reports of Arrow segment caches: stowage's (commit log, sidecars, key index runs) and
//! torchcachex's (segments, `schema.json`, `index.pkl`).

use std::path::Path;

use stowage_arrow::reader::CacheReader;
use stowage_arrow::segment::Segment;
use stowage_arrow::{ArrowBackend, ArrowOptions, TorchcachexReader};
use stowage_core::{Format, OpenMode, Reader, ValidationReport};

use super::report::{CacheReport, Dedup, note_shapes_seen, projected_memory};
use crate::error::CliError;

/// A cache stowage wrote, of `format` ([`stowage_arrow::STOWAGE_ARROW`]).
pub fn stowage_arrow(path: &Path, format: &'static Format) -> Result<CacheReport, CliError> {
    let cache = ArrowBackend::open(path, OpenMode::ReadOnly, ArrowOptions::default())?;
    let mut report = CacheReport::new(path, format);
    report.format = Some(stowage_arrow::commit_log::FORMAT_NAME.to_owned());
    let committed = stowage_arrow::commit_log::read(&cache.reader().layout().commit_log())?;
    report.version = Some(committed.header.version.to_string());
    report.finalized = Some(cache.is_finalized());
    report.state = super::report::segment_cache_state(cache.is_finalized());
    report.set_schema(cache.schema());
    let runs: Vec<String> = cache
        .reader()
        .runs()
        .map(|run| format!("{}..={}", run.entry().first, run.entry().through))
        .collect();
    report.detail(
        "key index",
        format!(
            "{} ({}), {} found through their sidecars",
            crate::out::count(runs.len() as u64, "run"),
            if runs.is_empty() { "none".to_owned() } else { runs.join(", ") },
            crate::out::count(cache.reader().unmerged_segments() as u64, "segment")
        ),
    );
    let keys = cache.keys()?;
    common(&mut report, cache.reader(), &keys, true)?;
    let mut structure = cache.validate_log_and_index()?;
    structure.unchecked.extend(cache.unchecked());
    if let Some(line) = pickled_index_line(cache.reader()) {
        report.detail("index.pkl", line);
    }
    (report.memory, _) = projected_memory(&cache, &keys);
    report.set_integrity(
        &structure,
        "`stowage verify` also decodes every row and checks its checksum",
    );
    Ok(report)
}

/// A cache torchcachex wrote, of `format` ([`stowage_arrow::TORCHCACHEX`]).
pub fn torchcachex(path: &Path, format: &'static Format) -> Result<CacheReport, CliError> {
    let source = TorchcachexReader::open(path)?;
    let reader = source.reader();
    let mut report = CacheReport::new(path, format);
    report.format = Some("torchcachex Arrow IPC segments".into());
    report.state = "no completion marker in this format (torchcachex appends segments at any \
                    time)"
        .into();
    report.set_schema(source.schema());
    report.detail(
        "index.pkl",
        pickled_index_line(reader).unwrap_or("absent (torchcachex rebuilds it from the segments)"),
    );
    let keys = source.keys()?;
    common(&mut report, reader, &keys, false)?;
    let (memory, shapes) = projected_memory(&source, &keys);
    report.memory = memory;
    note_shapes_seen(&mut report, &shapes);
    let mut structure = ValidationReport::default();
    let schema_path = reader.layout().schema();
    if schema_path.exists() {
        structure.files_checked += 1;
        if let Err(e) = stowage_arrow::schema_json::SchemaJson::read(&schema_path) {
            structure.problems.push(crate::verify::problem_of(&e, None));
        }
    }
    for (id, path) in reader.segment_paths() {
        structure.files_checked += 1;
        if let Err(e) = Segment::open(id, path) {
            structure.problems.push(crate::verify::problem_of(&e, None));
        }
    }
    report.set_integrity(&structure, "`stowage verify` also decodes every row");
    Ok(report)
}

/// What `index.pkl` is to stowage, when there is one.
fn pickled_index_line(reader: &CacheReader) -> Option<&'static str> {
    reader.layout().pickled_index().exists().then_some(
        "present (torchcachex's index, which it trusts while it exists; stowage reads the \
         segments, never the pickle, and removes it before it adds a segment)",
    )
}

/// What both kinds share: the output structure, segments and rows, files, checksum coverage and
/// the rows that overwritten keys left behind.
fn common(
    report: &mut CacheReport,
    reader: &CacheReader,
    keys: &[String],
    stowage: bool,
) -> Result<(), CliError> {
    report.keys = Some(keys.len() as u64);
    report.detail("structure", reader.output_structure()?.name());
    let mut rows = 0u64;
    let mut with_sums = 0u64;
    let mut covered_rows = 0u64;
    let mut segments = 0u64;
    for (id, path, origin) in reader.segment_origins() {
        segments += 1;
        let Ok(segment) = Segment::open(id, path) else { continue };
        let name = crate::walk::relative(path, reader.layout().root());
        rows += segment.rows() as u64;
        // Another writer's segment is not covered, whatever sidecar files lie beside it.
        let foreign = matches!(origin, stowage_arrow::ownership::SegmentOrigin::Foreign { .. });
        if !foreign && stowage_arrow::row_sums::sums_path(path).is_file() {
            with_sums += 1;
            covered_rows += segment.rows() as u64;
            report.checksums.covered_files.push(name);
        } else {
            report.checksums.uncovered_files.push(name);
        }
    }
    report.detail("segments", segments.to_string());
    report.rows = Some(rows);
    report.checksums.covered_samples = Some(covered_rows);
    report.checksums.samples = Some(rows);
    report.checksums.scheme = if stowage {
        "xxh3 per row in segments/*.sums; key sidecars, key index runs and stowage.log carry \
         their own checksums"
            .into()
    } else if with_sums == 0 {
        "none (torchcachex writes no checksums)".into()
    } else {
        format!("none from torchcachex; {with_sums} segments have stowage's row checksums (.sums)")
    };
    report.dedup.push(Dedup::new(
        "rows".into(),
        rows,
        keys.len() as u64,
        "rows per distinct key: a key put again leaves its older rows behind (the newest wins; \
         compaction drops the others)"
            .into(),
    ));
    report.set_files(
        reader.layout().root(),
        |name| {
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
        },
        &[],
    )
}
