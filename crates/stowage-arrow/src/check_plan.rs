//! How an Arrow segment cache is checked from end to end ([`stowage_core::Reader::check_plan`]),
//! stowage's or torchcachex's: the whole-cache checks once (the commit log and key index of
//! stowage's; the `schema.json` of torchcachex's, and that stowage's log is not lost), then one
//! unit per segment: every row of it decoded (and checked against its row checksums), or with a
//! sample, the selected keys whose winning row is in it.
//!
//! A torchcachex cache whose reader does not open (a damaged segment keeps the keys from being
//! listed) is still checked segment by segment ([`torchcachex_unopened`]), so each damaged one is
//! named.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use stowage_core::check_plan::{
    CheckPlan, CheckUnit, NoChecksums, Selection, Unplanned, check_json, problem_of,
};
use stowage_core::{Error, Reader, Result, ValidationReport};

use crate::layout::Layout;
use crate::reader::CacheReader;
use crate::schema_json::{OutputStructure, SchemaJson};
use crate::{ArrowBackend, TorchcachexReader};

/// How a damaged key of stowage's Arrow cache is repaired.
const STOWAGE_REPAIR: &str = "put the damaged keys again (a later row replaces them), or delete a \
    damaged segment's .keys/.sums sidecar or stowage_index_*.bin run only through a writer \
    (reopening for writing rebuilds what it can); a damaged segment's keys are lost";

/// How a damaged key of a cache torchcachex wrote is repaired.
const TORCHCACHEX_REPAIR: &str = "recompute the damaged keys with torchcachex (delete a \
    damaged segment, or the cache directory, and torchcachex writes them again)";

/// What checking a torchcachex cache that does not open covers without a sample.
const EVERY_SEGMENT: &str = "every segment";

/// The plan of stowage's Arrow cache: the commit log and key index checked once, then its
/// segments. A sample reads rows, not whole segments, so another writer's segments are listed as
/// unchecked whether or not a row of theirs is drawn.
pub(crate) fn stowage_plan<'a>(
    cache: &'a ArrowBackend,
    selection: &Selection,
) -> Result<CheckPlan<'a>> {
    let mut structure = cache.validate_log_and_index()?;
    let keys = cache.keys()?;
    if selection.is_sample() {
        structure.unchecked.extend(cache.unchecked());
    }
    let segments = Segments { reader: cache.reader(), backend: Some(cache) };
    segments.plan(structure, &keys, selection)
}

/// The plan of a cache torchcachex wrote: its `schema.json` parses and stowage's commit log is
/// not lost, then its segments, reported as unchecked (torchcachex writes no checksums).
pub(crate) fn torchcachex_plan<'a>(
    source: &'a TorchcachexReader,
    selection: &Selection,
) -> Result<CheckPlan<'a>> {
    let mut structure = ValidationReport::default();
    check_schema_json(source.reader(), &mut structure);
    check_no_lost_log(source.path(), &mut structure)?;
    let keys = source.reader().keys()?;
    let segments = Segments { reader: source.reader(), backend: None };
    segments.plan(structure, &keys, selection)
}

/// A torchcachex cache whose reader does not open (`error`): every segment is still checked on
/// its own, so each damaged one is named. A sample needs the keys, so it is refused; a cache
/// without a readable `schema.json` (which says how rows decode) is `error`.
pub(crate) fn torchcachex_unopened(
    path: &Path,
    error: Error,
    selection: &Selection,
) -> std::result::Result<CheckPlan<'static>, Unplanned> {
    if selection.is_sample() {
        return Err(Unplanned::NoSample { error, scope: EVERY_SEGMENT });
    }
    let layout = Layout::new(path);
    let Ok(Some(schema)) = SchemaJson::read(&layout.schema()) else { return Err(error.into()) };
    let mut structure = ValidationReport { files_checked: 1, ..Default::default() };
    let segments = layout.list_segments()?;
    if segments.is_empty() {
        structure.problem(Some(path), None, error.to_string());
    }
    Ok(CheckPlan {
        units: whole_segment_units(path, segments, schema.output_structure),
        no_checksums: Some(torchcachex_no_checksums(path)),
        ..CheckPlan::new(structure, TORCHCACHEX_REPAIR)
    })
}

/// The segments of an Arrow cache, stowage's or torchcachex's.
struct Segments<'a> {
    reader: &'a CacheReader,
    /// The cache stowage writes, which knows how its segments are decoded and which ones another
    /// writer added, and has row checksums in every segment it wrote; `None` for a cache
    /// torchcachex wrote alone.
    backend: Option<&'a ArrowBackend>,
}

impl<'a> Segments<'a> {
    /// One unit per segment: every row of it checked (a reader over that segment alone,
    /// [`CacheReader::validate`]), or with a sample, the selected keys whose winning row is in it.
    /// `structure` holds the whole-cache checks already made; the plan keeps every problem in it.
    fn plan(
        &self,
        mut structure: ValidationReport,
        keys: &[String],
        selection: &Selection,
    ) -> Result<CheckPlan<'a>> {
        let reader = self.reader;
        let selected = selection.select(keys);
        let output = reader.output_structure()?;
        let root = reader.layout().root().to_path_buf();
        let segments: Vec<(u64, PathBuf)> =
            reader.segment_paths().map(|(id, path)| (id, path.to_path_buf())).collect();
        let units = if !selection.is_sample() {
            match self.backend {
                Some(cache) => segments
                    .into_iter()
                    .map(|(id, path)| {
                        segment_unit(path, move |path| {
                            validated(path, cache.segment_reader(id).and_then(|r| r.validate()))
                        })
                    })
                    .collect(),
                None => whole_segment_units(&root, segments, output),
            }
        } else {
            let mut by_segment: BTreeMap<u64, Vec<String>> = BTreeMap::new();
            for key in &selected {
                match reader.locate(key) {
                    Ok(Some((id, _))) => by_segment.entry(id).or_default().push(key.clone()),
                    Err(e) => structure.problems.push(problem_of(&e, Some(key))),
                    Ok(None) => structure.problem(
                        Some(&root),
                        Some(key),
                        "listed in a segment but not found by a lookup: a key index run or \
                         sidecar misses it",
                    ),
                }
            }
            by_segment.into_iter().map(|(id, keys)| sampled_unit(reader, id, keys)).collect()
        };
        let stowage = self.backend.is_some();
        Ok(CheckPlan {
            keys: keys.len() as u64,
            selected: selected.len() as u64,
            units,
            no_checksums: (!stowage).then(|| torchcachex_no_checksums(&root)),
            ..CheckPlan::new(structure, if stowage { STOWAGE_REPAIR } else { TORCHCACHEX_REPAIR })
        })
    }
}

/// A unit reading `keys` (whose winning rows are all in segment `id`) through `reader`, each
/// decoded and its JSON fields parsed.
fn sampled_unit(reader: &CacheReader, id: u64, keys: Vec<String>) -> CheckUnit<'_> {
    CheckUnit::new(keys.len() as u64, move |progress: &dyn Fn(u64)| {
        let mut report = ValidationReport { files_checked: 1, ..Default::default() };
        let path = reader.layout().segment(id);
        for key in &keys {
            report.samples_checked += 1;
            match reader.get(key) {
                Ok(Some(sample)) => check_json(&mut report, Some(&path), key, &sample),
                Ok(None) => report.problem(Some(&path), Some(key), "not found"),
                Err(e) => report.problems.push(problem_of(&e, Some(key))),
            }
            progress(1);
        }
        report
    })
}

/// One unit per segment of a cache torchcachex wrote, checking all of it ([`whole_segment`]).
fn whole_segment_units(
    root: &Path,
    segments: Vec<(u64, PathBuf)>,
    output: OutputStructure,
) -> Vec<CheckUnit<'static>> {
    segments
        .into_iter()
        .map(|(id, path)| {
            let root = root.to_path_buf();
            segment_unit(path, move |path| whole_segment(&root, id, path, output))
        })
        .collect()
}

/// A unit checking the whole segment at `path` with `check`; progress counts its bytes, which
/// measure the work better than rows when segments differ in size.
fn segment_unit<'a>(
    path: PathBuf,
    check: impl Fn(&Path) -> ValidationReport + Send + Sync + 'a,
) -> CheckUnit<'a> {
    let bytes = std::fs::metadata(&path).map_or(1, |m| m.len().max(1));
    CheckUnit::new(bytes, move |progress: &dyn Fn(u64)| {
        let report = check(&path);
        progress(bytes);
        report
    })
}

/// Every row of segment `id` (at `path`) of a cache torchcachex wrote decoded, and checked
/// against its row checksums where stowage added them.
fn whole_segment(root: &Path, id: u64, path: &Path, output: OutputStructure) -> ValidationReport {
    let reader = CacheReader::open_segments(root, [id], output, &[]);
    validated(path, reader.and_then(|reader| reader.validate()))
}

/// The report of a segment's validation, or its error as a problem naming the segment.
fn validated(path: &Path, result: Result<ValidationReport>) -> ValidationReport {
    result.unwrap_or_else(|e| {
        let mut report = ValidationReport { files_checked: 1, ..Default::default() };
        let mut problem = problem_of(&e, None);
        problem.path.get_or_insert_with(|| path.to_path_buf());
        report.problems.push(problem);
        report
    })
}

/// Samples of a cache torchcachex wrote.
fn torchcachex_no_checksums(path: &Path) -> NoChecksums {
    NoChecksums {
        path: path.to_path_buf(),
        writer: "torchcachex",
        next_step: "torchcachex writes no checksums: verify decoded every row, not the bytes' \
            integrity; `stowage adopt` starts stowage's log beside torchcachex's files and \
            checksums every segment (torchcachex's files are not changed)",
    }
}

/// A torchcachex `schema.json` that exists must parse (torchcachex reads it at open).
fn check_schema_json(reader: &CacheReader, report: &mut ValidationReport) {
    let path = reader.layout().schema();
    if path.exists() {
        report.files_checked += 1;
        if let Err(e) = SchemaJson::read(&path) {
            report.problems.push(problem_of(&e, None));
        }
    }
}

/// A cache without `stowage.log` reads as one torchcachex wrote alone; but stowage's own files
/// beside it (sidecars, index runs, the complete marker) mean stowage wrote it and its log is
/// lost: damage, never "unchecked".
fn check_no_lost_log(path: &Path, report: &mut ValidationReport) -> Result<()> {
    let layout = Layout::new(path);
    let mut stowage_files: Vec<PathBuf> =
        layout.list_index_runs()?.into_iter().map(|(_, _, path)| path).collect();
    stowage_files.extend(Some(layout.complete_marker()).filter(|p| p.exists()));
    if let Ok(entries) = std::fs::read_dir(layout.segments_dir()) {
        stowage_files.extend(
            entries.flatten().map(|e| e.path()).filter(|p| {
                matches!(p.extension().and_then(|e| e.to_str()), Some("keys" | "sums"))
            }),
        );
    }
    stowage_core::check_plan::report_lost_marker(
        report,
        &layout.commit_log(),
        &stowage_files,
        "commit log is lost, so which rows it committed is unknown",
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ArrowOptions;
    use stowage_core::{
        Backend, BackendFactory, DType, OpenMode, Sample, Schema, ShapeRule, Tensor,
    };

    /// A finalized stowage cache of 7 samples in 3 segments (3, 3 and 1 rows).
    fn stowage_cache(dir: &Path) {
        let schema = Schema::new().tensor("tensor", DType::F32, ShapeRule::Any);
        let options = ArrowOptions { flush_every: 3, ..ArrowOptions::default() };
        let mut cache = ArrowBackend::create(dir, &schema, options).unwrap();
        for i in 0..7 {
            let x = Tensor::from_slice(&[2], &[i as f32, 1.0]).unwrap();
            cache.put(&format!("k{i}"), &Sample::new().with("tensor", x)).unwrap();
        }
        cache.finalize().unwrap();
    }

    /// The same cache as torchcachex alone would have left it: stowage's files removed.
    fn torchcachex_cache(dir: &Path) {
        stowage_cache(dir);
        let layout = Layout::new(dir);
        std::fs::remove_file(layout.commit_log()).unwrap();
        std::fs::remove_file(layout.complete_marker()).unwrap();
        for (_, _, run) in layout.list_index_runs().unwrap() {
            std::fs::remove_file(run).unwrap();
        }
        for entry in std::fs::read_dir(layout.segments_dir()).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_some_and(|e| e == "keys" || e == "sums") {
                std::fs::remove_file(path).unwrap();
            }
        }
    }

    fn run(plan: &CheckPlan<'_>) -> ValidationReport {
        let mut all = ValidationReport::default();
        for unit in &plan.units {
            let done = std::sync::atomic::AtomicU64::new(0);
            let report = (unit.check)(&|n| {
                done.fetch_add(n, std::sync::atomic::Ordering::Relaxed);
            });
            assert_eq!(done.into_inner(), unit.samples, "a unit reports all of its progress");
            all.samples_checked += report.samples_checked;
            all.files_checked += report.files_checked;
            all.problems.extend(report.problems);
        }
        all
    }

    #[test]
    fn stowage_cache_one_unit_per_segment_or_the_sampled_keys() {
        let dir = tempfile::tempdir().unwrap();
        stowage_cache(dir.path());
        let cache =
            ArrowBackend::open(dir.path(), OpenMode::ReadOnly, ArrowOptions::default()).unwrap();
        let plan = cache.check_plan(&Selection::all()).unwrap();
        assert_eq!((plan.keys, plan.selected, plan.units.len()), (7, 7, 3));
        assert_eq!(plan.repair, STOWAGE_REPAIR);
        assert!(plan.no_checksums.is_none());
        let report = run(&plan);
        assert_eq!(report.samples_checked, 7);
        assert!(report.problems.is_empty(), "{:?}", report.problems);

        let plan = cache.check_plan(&Selection { fraction: Some(0.5), seed: 1 }).unwrap();
        assert_eq!((plan.keys, plan.selected), (7, 4));
        assert_eq!(plan.units.iter().map(|u| u.samples).sum::<u64>(), 4);
        assert_eq!(run(&plan).samples_checked, 4);
    }

    #[test]
    fn a_torchcachex_cache_is_unchecked_and_a_lost_log_is_damage() {
        let dir = tempfile::tempdir().unwrap();
        torchcachex_cache(dir.path());
        let source = TorchcachexReader::open(dir.path()).unwrap();
        let plan = source.check_plan(&Selection::all()).unwrap();
        assert_eq!((plan.keys, plan.units.len()), (7, 3));
        assert_eq!(plan.repair, TORCHCACHEX_REPAIR);
        assert_eq!(plan.no_checksums.as_ref().unwrap().writer, "torchcachex");
        assert!(plan.structure.problems.is_empty(), "{:?}", plan.structure.problems);
        assert!(run(&plan).problems.is_empty());

        // A sidecar of stowage's left behind: stowage wrote the cache and its log is lost.
        let sidecar = Layout::new(dir.path()).segments_dir().join("segment_000000.keys");
        std::fs::write(&sidecar, b"").unwrap();
        let plan = source.check_plan(&Selection::all()).unwrap();
        let problem = &plan.structure.problems[0];
        assert_eq!(problem.path.as_deref(), Some(Layout::new(dir.path()).commit_log().as_path()));
        assert!(problem.detail.contains("1 file of stowage's are here"), "{}", problem.detail);
    }

    #[test]
    fn a_torchcachex_cache_that_does_not_open_is_checked_segment_by_segment() {
        let dir = tempfile::tempdir().unwrap();
        torchcachex_cache(dir.path());
        let segments = Layout::new(dir.path()).list_segments().unwrap();
        std::fs::write(&segments[1].1, b"not arrow").unwrap();
        let error = TorchcachexReader::open(dir.path()).map(|_| ()).unwrap_err();
        let factory = crate::ArrowFactory::default();
        let sample = Selection { fraction: Some(0.5), seed: 0 };
        match factory.check_plan_unopened(dir.path(), error, &sample) {
            Err(Unplanned::NoSample { scope, .. }) => assert_eq!(scope, EVERY_SEGMENT),
            other => panic!("a sample needs the keys: {other:?}"),
        }
        let error = TorchcachexReader::open(dir.path()).map(|_| ()).unwrap_err();
        let plan = factory.check_plan_unopened(dir.path(), error, &Selection::all()).unwrap();
        assert_eq!(plan.units.len(), 3);
        let report = run(&plan);
        assert_eq!(report.problems.len(), 1, "{:?}", report.problems);
        assert_eq!(report.problems[0].path.as_deref(), Some(segments[1].1.as_path()));
        assert_eq!(report.samples_checked, 4, "the two intact segments are read whole");
    }

    #[test]
    fn stowage_cache_that_does_not_open_is_its_error() {
        let dir = tempfile::tempdir().unwrap();
        let factory = crate::ArrowFactory::default();
        stowage_cache(dir.path());
        let error = Error::corrupted(dir.path().join("stowage.log"), "torn");
        match factory.check_plan_unopened(dir.path(), error, &Selection::all()) {
            Err(Unplanned::Error(Error::Corrupted { detail, .. })) => assert_eq!(detail, "torn"),
            other => panic!("{other:?}"),
        }
    }
}
