//! `stowage verify PATH [--sample FRACTION] [--jobs N]`: checks every byte the cache can check
//! (or a seeded sample of its keys) and lists every problem.
//!
//! Each format's checks are split in two ([`Plan`]): the checks made once for the whole cache
//! (its structure: logs, markers, sizes, indexes), and independent [`Unit`]s of sample checks,
//! one per data file where the format allows (a collection file of NUMPY_10, a segment of an
//! Arrow cache; rows spread over every file of a memmap cache, and libhdf5 serializes HDF5 reads,
//! so those are split into runs of keys). The units run on `--jobs` threads; their results are
//! put back in unit order, so the output is the same for any number of jobs.
//!
//! The built-in formats have plans of their own ([`Builtin`]); every other registered format is
//! checked through its factory ([`BackendFactory::validate_path`], or the reader's `get` per key
//! with `--sample`), with the same verdicts and exit statuses.

use std::collections::{BTreeMap, HashSet};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use stowage_arrow::reader::CacheReader;
use stowage_arrow::schema_json::SchemaJson;
use stowage_arrow::{ArrowBackend, ArrowOptions, TorchcachexReader};
use stowage_core::{
    BackendFactory, Error, OpenMode, Problem, Reader, Registry, Sample, ValidationLevel,
    ValidationReport, Value,
};
use stowage_hdf5::AenetReader;
use stowage_npy::{NpyBackend, NpyOptions};

use crate::builtin::Builtin;
use crate::error::{CliError, Status, escape_control};
use crate::hangar::HangarDir;
use crate::locate::{Located, locate};
use crate::open::directory_has_no_keys;
use crate::out::{Progress, count, display_key, note};

/// Samples per unit when a format's samples are checked in runs of keys.
const KEYS_PER_UNIT: usize = 1024;

/// What to check.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct VerifyOptions {
    /// The fraction of keys whose samples are checked, in `(0, 1]`; `None` checks every one.
    pub sample: Option<f64>,
    /// Seed of the sample: the same seed picks the same keys.
    pub seed: u64,
    /// Threads checking units at once (at least 1).
    pub jobs: usize,
}

/// One independent piece of sample checks.
pub struct Unit<'a> {
    /// Samples it checks (for the progress bar).
    pub samples: u64,
    /// Runs the checks, reporting progress in samples.
    pub check: Box<dyn Fn(&Progress) -> ValidationReport + Send + Sync + 'a>,
}

/// Everything `verify` does to one cache.
pub struct Plan<'a> {
    /// The checks made once, already run.
    pub structure: ValidationReport,
    /// The sample checks.
    pub units: Vec<Unit<'a>>,
    /// Keys in the cache (the sample's denominator).
    pub keys: u64,
    /// Keys whose samples the units check.
    pub selected: u64,
    /// Samples the format stores without checksums, reported as unchecked.
    pub no_checksums: Option<NoChecksums>,
    /// How a damaged key can be repaired, for the advice line.
    pub repair: &'static str,
    /// How damaged files whose keys cannot be named are repaired, when the format has such files
    /// (a damaged segment of a stowage HDF5 cache): then they are listed with this advice.
    pub file_repair: Option<&'static str>,
}

/// Samples a cache's format stores without checksums (the original tools write none): verify
/// reads them and checks what it can (decoding, shapes, JSON), but not their bytes, so they are
/// reported as [`stowage_core::Unchecked`] and the cache is never called clean.
pub struct NoChecksums {
    /// The cache.
    pub path: PathBuf,
    /// The tool that wrote them.
    pub writer: &'static str,
    /// What verify checked instead, and how to get checksums.
    pub next_step: &'static str,
}

/// Prints each problem on its own line, then the damaged keys and how to repair them, then
/// the data no checksum covers, then `N samples, M files checked: clean` (status 0),
/// `...: K problems` (status 1) or `...: no problem, U samples unchecked` (status 3). A cache
/// that cannot be opened is an error (status 2). Notes go to `notes`.
pub fn run(
    registry: &Registry,
    path: &Path,
    options: VerifyOptions,
    out: &mut dyn Write,
    notes: &mut dyn Write,
) -> Result<Status, CliError> {
    let recognized = match locate(registry, path)? {
        Located::Cache(recognized) => recognized,
        Located::Directory(found) => return Err(directory_has_no_keys(path, &found, "verify")),
    };
    let Some(builtin) = Builtin::of(recognized.format) else {
        return generic(path, recognized.factory, options, out);
    };
    match builtin {
        Builtin::StowageNpy => {
            let cache = NpyBackend::open_read_only(path, NpyOptions::default())?;
            report(plan_npy(&cache, options)?, options, out)
        }
        Builtin::StowageArrow => {
            let cache = ArrowBackend::open(path, OpenMode::ReadOnly, ArrowOptions::default())?;
            let mut structure = cache.validate_log_and_index()?;
            let keys = cache.keys()?;
            if options.sample.is_some_and(|f| f < 1.0) {
                // A sample reads rows, not whole segments: another writer's segments are
                // unchecked whether or not a row of theirs is drawn.
                structure.unchecked.extend(cache.unchecked());
            }
            let segments = ArrowSegments {
                reader: cache.reader(),
                backend: Some(&cache),
                checksums_required: true,
            };
            report(segments.plan(structure, &keys, options)?, options, out)
        }
        Builtin::Torchcachex => {
            let source = match TorchcachexReader::open(path) {
                Ok(source) => source,
                Err(e) => {
                    return report(damaged_torchcachex(path, e.into(), options)?, options, out);
                }
            };
            let mut structure = ValidationReport::default();
            check_schema_json(source.reader(), &mut structure);
            check_no_lost_log(path, &mut structure)?;
            let keys = source.reader().keys()?;
            let segments =
                ArrowSegments { reader: source.reader(), backend: None, checksums_required: false };
            report(segments.plan(structure, &keys, options)?, options, out)
        }
        Builtin::AenetHdf5 => {
            let source = match AenetReader::open(path) {
                Ok(source) => source,
                Err(e) => {
                    return report(damaged_aenet(path, e.into(), options)?, options, out);
                }
            };
            report(plan_aenet(&source, options)?, options, out)
        }
        Builtin::HangarNumpy10 => hangar(path, &HangarDir::scan(path)?, options, out, notes),
        Builtin::StowageMemmap | Builtin::DnanetMemmap | Builtin::StowageHdf5 => {
            let source = match recognized.factory.open_reader(path) {
                Ok(source) => source,
                Err(e) if builtin == Builtin::StowageHdf5 => {
                    let factory = recognized.factory;
                    return report(damaged_hdf5(path, factory, e.into(), options)?, options, out);
                }
                Err(e) => return Err(e.into()),
            };
            report(plan_by_keys(source.as_ref(), builtin, options)?, options, out)
        }
    }
}

/// How a damaged key of a format with no plan of its own here is repaired.
const GENERIC_REPAIR: &str = "put the damaged keys again, or rebuild the cache (delete it and \
    write it again, or `stowage convert` from an intact copy)";

/// How a damaged file of a format with no plan of its own here is repaired.
const GENERIC_FILE_REPAIR: &str =
    "restore the listed files from an intact copy, or delete the cache and write it again";

/// A cache of a format with no plan of its own here (a third party's backend), checked through
/// its factory: without `--sample`, [`BackendFactory::validate_path`] at full level (which checks
/// even a cache too damaged to open, when the backend can); with one, the structure check once
/// and each selected key read through the reader, in runs of keys.
///
/// A cache whose damage keeps it from opening (`Error::Corrupted`) is reported as a problem in
/// the file the error names (status 1), not as an error: finding damage is verify's job.
fn generic(
    path: &Path,
    factory: &dyn BackendFactory,
    options: VerifyOptions,
    out: &mut dyn Write,
) -> Result<Status, CliError> {
    let plan = |structure: ValidationReport| Plan {
        keys: structure.samples_checked,
        selected: structure.samples_checked,
        structure,
        units: Vec::new(),
        no_checksums: None,
        repair: GENERIC_REPAIR,
        file_repair: Some(GENERIC_FILE_REPAIR),
    };
    let damaged = |e: Error| match e {
        Error::Corrupted { .. } => Ok(plan(ValidationReport {
            files_checked: 1,
            problems: vec![problem_of(&e, None)],
            ..Default::default()
        })),
        other => Err(CliError::from(other)),
    };
    if options.sample.is_none_or(|f| f >= 1.0) {
        let plan = match factory.validate_path(path, ValidationLevel::Full) {
            Ok(structure) => plan(structure),
            Err(e) => damaged(e)?,
        };
        return report(plan, options, out);
    }
    let reader = factory.open_reader(path).map_err(|e| {
        CliError::new(format!(
            "{e} (the keys cannot be listed, so no sample of them can be drawn; run verify \
             without --sample to check the whole cache)"
        ))
    })?;
    let structure = reader.validate(ValidationLevel::Structure)?;
    let keys = reader.keys()?;
    let selected = select(&keys, options.sample, options.seed);
    let reader = reader.as_ref();
    let plan = Plan {
        structure,
        keys: keys.len() as u64,
        selected: selected.len() as u64,
        units: key_units(&selected, move |report, key| check_key(report, reader, key)),
        no_checksums: None,
        repair: GENERIC_REPAIR,
        file_repair: Some(GENERIC_FILE_REPAIR),
    };
    report(plan, options, out)
}

/// The keys whose samples are checked: all of them, or the `ceil(fraction * n)` keys with the
/// smallest seeded hash (the same keys for the same seed, whatever the number of jobs), in their
/// cache order.
pub fn select(keys: &[String], fraction: Option<f64>, seed: u64) -> Vec<String> {
    let Some(fraction) = fraction.filter(|f| *f < 1.0) else { return keys.to_vec() };
    let want = ((keys.len() as f64) * fraction).ceil() as usize;
    let mut ranked: Vec<(u64, usize)> = keys
        .iter()
        .enumerate()
        .map(|(i, key)| (xxhash_rust::xxh3::xxh3_64_with_seed(key.as_bytes(), seed), i))
        .collect();
    ranked.sort_unstable();
    let mut chosen: Vec<usize> = ranked.into_iter().take(want).map(|(_, i)| i).collect();
    chosen.sort_unstable();
    chosen.into_iter().map(|i| keys[i].clone()).collect()
}

/// A problem from an error: its file when the error names one, the key (`key`, else the one the
/// error names), the rest as detail.
pub fn problem_of(e: &Error, key: Option<&str>) -> Problem {
    let (path, detail, named) = match e {
        Error::Corrupted { path, key, detail } => (Some(path.clone()), detail.clone(), key.clone()),
        Error::Incompatible { path, detail } => (Some(path.clone()), detail.clone(), None),
        Error::Io { path, source } => (Some(path.clone()), source.to_string(), None),
        other => (None, other.to_string(), None),
    };
    Problem { path, key: key.map(str::to_owned).or(named), detail }
}

/// Every JSON field of `sample` parses; `path` is the file the sample came from.
fn check_json(report: &mut ValidationReport, path: Option<&Path>, key: &str, sample: &Sample) {
    for (name, value) in sample.fields() {
        if let Value::Json(text) = value
            && let Err(e) = serde_json::from_str::<serde_json::Value>(text)
        {
            report.problem(path, Some(key), format!("field {name:?} is not valid JSON: {e}"));
        }
    }
}

/// Reads `key` through `source` and checks its JSON fields; a problem when it is missing or
/// damaged.
fn check_key(report: &mut ValidationReport, source: &dyn Reader, key: &str) {
    report.samples_checked += 1;
    match source.get(key) {
        Ok(Some(sample)) => check_json(report, None, key, &sample),
        Ok(None) => report.problem(
            Some(source.path()),
            Some(key),
            "listed among the keys but not found by a lookup",
        ),
        Err(e) => report.problems.push(Problem {
            path: None,
            key: Some(key.to_owned()),
            detail: e.to_string(),
        }),
    }
}

/// Units of [`KEYS_PER_UNIT`] keys, each key checked by `check`.
fn key_units<'a, F>(keys: &[String], check: F) -> Vec<Unit<'a>>
where
    F: Fn(&mut ValidationReport, &str) + Copy + Send + Sync + 'a,
{
    keys.chunks(KEYS_PER_UNIT)
        .map(|chunk| {
            let chunk = chunk.to_vec();
            Unit {
                samples: chunk.len() as u64,
                check: Box::new(move |progress: &Progress| {
                    let mut report = ValidationReport::default();
                    for key in &chunk {
                        check(&mut report, key);
                        progress.inc(1);
                    }
                    report
                }),
            }
        })
        .collect()
}

/// Memmap row caches and stowage's HDF5 caches: the backend's structure check once, then every
/// selected key read (and its checksum checked) in runs of keys: a memmap row is spread over
/// every field's file, and libhdf5 serializes reads.
fn plan_by_keys<'a>(
    source: &'a dyn Reader,
    builtin: Builtin,
    options: VerifyOptions,
) -> Result<Plan<'a>, CliError> {
    let structure = source.validate(ValidationLevel::Structure)?;
    // A memmap index that cannot be read is a structure problem: no key to check then.
    let keys = match source.keys() {
        Ok(keys) => keys,
        Err(_) if !structure.is_undamaged() => Vec::new(),
        Err(e) => return Err(e.into()),
    };
    let selected = select(&keys, options.sample, options.seed);
    let (no_checksums, repair) = match builtin {
        Builtin::DnanetMemmap => (
            Some(NoChecksums {
                path: source.path().to_path_buf(),
                writer: "DNANet",
                next_step: DNANET_NO_CHECKSUMS,
            }),
            "rows cannot be replaced in a memmap cache: rebuild it with DNANet (delete its \
             directory; the next run writes it again)",
        ),
        Builtin::StowageMemmap => (
            None,
            "rows cannot be replaced in a memmap cache: rebuild it (delete its directory and \
             write it again, or `stowage convert` from an intact copy)",
        ),
        _ => (
            None,
            "put the damaged keys again (a later segment's row replaces them) or rebuild the cache",
        ),
    };
    Ok(Plan {
        structure,
        keys: keys.len() as u64,
        selected: selected.len() as u64,
        units: key_units(&selected, move |report, key| check_key(report, source, key)),
        no_checksums,
        repair,
        file_repair: None,
    })
}

/// A stowage NUMPY_10 cache: the structure check once (record log, markers, every record fits
/// its file), then one unit per collection file reading each selected record in it with its
/// xxh64 checked.
fn plan_npy(cache: &NpyBackend, options: VerifyOptions) -> Result<Plan<'_>, CliError> {
    let structure = cache.validate(ValidationLevel::Structure)?;
    let keys = cache.keys()?;
    let selected = select(&keys, options.sample, options.seed);
    let fields: Vec<String> = cache.schema().fields.iter().map(|f| f.name.clone()).collect();
    let mut by_file: BTreeMap<String, Vec<(String, String, stowage_npy::Numpy10Record)>> =
        BTreeMap::new();
    for key in &selected {
        for field in &fields {
            if let Some(record) = cache.record(key, field) {
                by_file.entry(record.uid.clone()).or_default().push((
                    key.clone(),
                    field.clone(),
                    record,
                ));
            }
        }
    }
    let layout = cache.layout().clone();
    let units = by_file
        .into_values()
        .map(|records| {
            let layout = layout.clone();
            Unit {
                samples: records.len() as u64,
                check: Box::new(move |progress: &Progress| {
                    let mut report = ValidationReport::default();
                    report.files_checked += 1;
                    for (key, field, record) in &records {
                        if let Err(e) = cache.read_record(field, record, true) {
                            let file = layout.data_file(&record.uid);
                            let detail = match &e {
                                stowage_core::Error::Corrupted { detail, .. } => detail.clone(),
                                other => other.to_string(),
                            };
                            report.problem(
                                Some(&file),
                                Some(key),
                                format!("field {field:?}: {detail}"),
                            );
                        }
                        progress.inc(1);
                    }
                    report
                }),
            }
        })
        .collect();
    Ok(Plan {
        // The structure check counted the files the units read.
        structure: ValidationReport { samples_checked: 0, ..structure },
        keys: keys.len() as u64,
        selected: selected.len() as u64,
        units,
        no_checksums: None,
        file_repair: None,
        repair: "put the damaged keys again (the new sample goes to a new slot) or rebuild the \
                 cache",
    })
}

/// The segments of an Arrow cache, stowage's or torchcachex's.
struct ArrowSegments<'a> {
    reader: &'a CacheReader,
    /// The cache stowage writes, which knows how its segments are decoded and which ones another
    /// writer added; `None` for a cache torchcachex wrote alone.
    backend: Option<&'a ArrowBackend>,
    /// Every segment must have row checksums (stowage wrote it).
    checksums_required: bool,
}

impl<'a> ArrowSegments<'a> {
    /// One unit per segment: every row of it checked (a reader over that segment alone,
    /// [`CacheReader::validate`]), or with a sample, the selected keys whose winning row is in it.
    /// `structure` holds the whole-cache checks already made; the plan keeps every problem in it.
    fn plan(
        &self,
        mut structure: ValidationReport,
        keys: &[String],
        options: VerifyOptions,
    ) -> Result<Plan<'a>, CliError> {
        let reader = self.reader;
        let selected = select(keys, options.sample, options.seed);
        let output = reader.output_structure()?;
        let root = reader.layout().root().to_path_buf();
        let required = self.checksums_required;
        let segments: Vec<(u64, PathBuf)> =
            reader.segment_paths().map(|(id, path)| (id, path.to_path_buf())).collect();
        let units = if options.sample.is_none_or(|f| f >= 1.0) {
            match self.backend {
                Some(cache) => segments
                    .into_iter()
                    .map(|(id, path)| {
                        segment_unit(path, move |path| {
                            validated(path, cache.segment_reader(id).and_then(|r| r.validate()))
                        })
                    })
                    .collect(),
                None => segment_units(&root, segments, output),
            }
        } else {
            let mut by_segment: BTreeMap<u64, Vec<String>> = BTreeMap::new();
            for key in &selected {
                match reader.locate(key) {
                    Some((id, _)) => by_segment.entry(id).or_default().push(key.clone()),
                    None => structure.problem(
                        Some(&root),
                        Some(key),
                        "listed in a segment but not found by a lookup: a key index run or \
                         sidecar misses it",
                    ),
                }
            }
            by_segment
                .into_iter()
                .map(|(id, keys)| Unit {
                    samples: keys.len() as u64,
                    check: Box::new(move |progress: &Progress| {
                        let mut report =
                            ValidationReport { files_checked: 1, ..Default::default() };
                        let path = reader.layout().segment(id);
                        for key in &keys {
                            report.samples_checked += 1;
                            match reader.get(key) {
                                Ok(Some(sample)) => {
                                    check_json(&mut report, Some(&path), key, &sample)
                                }
                                Ok(None) => report.problem(Some(&path), Some(key), "not found"),
                                Err(e) => report.problems.push(problem_of(&e, Some(key))),
                            }
                            progress.inc(1);
                        }
                        report
                    }),
                })
                .collect()
        };
        Ok(Plan {
            structure,
            keys: keys.len() as u64,
            selected: selected.len() as u64,
            units,
            no_checksums: (!required).then(|| torchcachex_no_checksums(&root)),
            file_repair: None,
            repair: if required {
                "put the damaged keys again (a later row replaces them), or delete a damaged \
                 segment's .keys/.sums sidecar or stowage_index_*.bin run only through a writer \
                 (reopening for writing rebuilds what it can); a damaged segment's keys are lost"
            } else {
                TORCHCACHEX_REPAIR
            },
        })
    }
}

/// One unit per segment of a cache torchcachex wrote, checking all of it ([`whole_segment`]).
fn segment_units(
    root: &Path,
    segments: Vec<(u64, PathBuf)>,
    output: stowage_arrow::schema_json::OutputStructure,
) -> Vec<Unit<'static>> {
    segments
        .into_iter()
        .map(|(id, path)| {
            let root = root.to_path_buf();
            segment_unit(path, move |path| whole_segment(&root, id, path, output))
        })
        .collect()
}

/// A unit checking the whole segment at `path` with `check`; progress counts its bytes.
fn segment_unit<'a>(
    path: PathBuf,
    check: impl Fn(&Path) -> ValidationReport + Send + Sync + 'a,
) -> Unit<'a> {
    let bytes = std::fs::metadata(&path).map_or(1, |m| m.len().max(1));
    Unit {
        samples: bytes,
        check: Box::new(move |progress: &Progress| {
            let report = check(&path);
            progress.inc(bytes);
            report
        }),
    }
}

/// The report of a segment's validation, or its error as a problem naming the segment.
fn validated(path: &Path, result: stowage_core::Result<ValidationReport>) -> ValidationReport {
    result.unwrap_or_else(|e| {
        let mut report = ValidationReport { files_checked: 1, ..Default::default() };
        let mut problem = problem_of(&e, None);
        problem.path.get_or_insert_with(|| path.to_path_buf());
        report.problems.push(problem);
        report
    })
}

/// A cache that does not open has no key list to draw a sample from: with `--sample`, the open's
/// error saying so; without, the error back for the caller's fallback.
fn refuse_a_sample(open_error: CliError, options: VerifyOptions) -> Result<CliError, CliError> {
    match options.sample.is_some_and(|f| f < 1.0) {
        true => Err(CliError::new(format!(
            "{open_error} (the keys cannot be listed, so no sample of them can be drawn; run \
             verify without --sample to check every segment)"
        ))),
        false => Ok(open_error),
    }
}

/// A torchcachex cache whose reader cannot open (a damaged segment keeps the keys from being
/// listed): every segment is still checked on its own, so each damaged one is named. A sample
/// needs the keys, so it is refused then.
fn damaged_torchcachex(
    path: &Path,
    open_error: CliError,
    options: VerifyOptions,
) -> Result<Plan<'static>, CliError> {
    let open_error = refuse_a_sample(open_error, options)?;
    let layout = stowage_arrow::layout::Layout::new(path);
    let Ok(Some(schema)) = SchemaJson::read(&layout.schema()) else { return Err(open_error) };
    let mut structure = ValidationReport { files_checked: 1, ..Default::default() };
    let segments = layout.list_segments()?;
    if segments.is_empty() {
        structure.problem(Some(path), None, open_error.to_string());
    }
    Ok(Plan {
        structure,
        units: segment_units(path, segments, schema.output_structure),
        keys: 0,
        selected: 0,
        no_checksums: Some(torchcachex_no_checksums(path)),
        repair: TORCHCACHEX_REPAIR,
        file_repair: None,
    })
}

/// A stowage HDF5 cache that does not open (a committed segment is damaged, so no key can be
/// looked up): [`damaged`] with the factory's validation from disk, which names each damaged
/// segment with how many samples it held and checks every row of the intact ones.
fn damaged_hdf5(
    path: &Path,
    factory: &dyn BackendFactory,
    open_error: CliError,
    options: VerifyOptions,
) -> Result<Plan<'static>, CliError> {
    let validate = || factory.validate_path(path, ValidationLevel::Full);
    let repair = "put the damaged keys again (a later segment's row replaces them) or rebuild the \
                  cache";
    let file_repair = "a damaged segment keeps the whole cache from opening, and its keys cannot \
                       be read from it: restore the listed files from an intact copy, or delete \
                       the cache directory and write it again";
    damaged(open_error, options, validate, repair, Some(file_repair))
}

/// An aenet file whose torch cache does not open (libhdf5 refused or crashed on it, in a child
/// process): [`damaged`] with the file's validation.
fn damaged_aenet(
    path: &Path,
    open_error: CliError,
    options: VerifyOptions,
) -> Result<Plan<'static>, CliError> {
    let validate = || stowage_hdf5::TorchCache::validate(path, ValidationLevel::Full);
    damaged(open_error, options, validate, AENET_REPAIR, None)
}

/// A cache that does not open, reported with the damage `validate` sees (status 1); the open's
/// error when it sees none (a permission error, say). A sample needs the keys, so it is refused.
fn damaged(
    open_error: CliError,
    options: VerifyOptions,
    validate: impl FnOnce() -> stowage_core::Result<ValidationReport>,
    repair: &'static str,
    file_repair: Option<&'static str>,
) -> Result<Plan<'static>, CliError> {
    let open_error = refuse_a_sample(open_error, options)?;
    let structure = validate()?;
    if structure.is_undamaged() {
        return Err(open_error);
    }
    Ok(Plan {
        structure,
        units: Vec::new(),
        keys: 0,
        selected: 0,
        no_checksums: None,
        repair,
        file_repair,
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

/// What verify checks of a cache DNANet wrote.
const DNANET_NO_CHECKSUMS: &str = "DNANet writes no checksums: verify checked file sizes, the \
    index, the sidecars, every row's readability and JSON texts, not the bytes' integrity; \
    `stowage adopt` adds stowage's checksums of every row beside DNANet's files";

/// How to repair a cache torchcachex wrote.
const TORCHCACHEX_REPAIR: &str = "recompute the damaged keys with torchcachex (delete a \
    damaged segment, or the cache directory, and torchcachex writes them again)";

/// Every row of segment `id` (at `path`) of a cache torchcachex wrote decoded, and checked
/// against its row checksums where stowage added them.
fn whole_segment(
    root: &Path,
    id: u64,
    path: &Path,
    output: stowage_arrow::schema_json::OutputStructure,
) -> ValidationReport {
    let reader = CacheReader::open_segments(root, [id], output, &[]);
    validated(path, reader.and_then(|reader| reader.validate()))
}

/// A torchcachex `schema.json` that exists must parse (torchcachex reads it at open).
/// A NUMPY_10 cache without `stowage.json` reads as a bare hangar data directory; but stowage's
/// own files beside it (its record log, its owned-files log, its complete marker) mean stowage
/// wrote it and its metadata is lost: damage, never "unchecked".
fn check_no_lost_metadata(path: &Path, report: &mut ValidationReport) {
    let layout = stowage_npy::layout::Layout::new(path);
    let stowage_files: Vec<PathBuf> =
        [layout.records_log(), layout.owned_files_log(), layout.complete_marker()]
            .into_iter()
            .filter(|p| p.exists())
            .collect();
    if let Some(first) = stowage_files.first() {
        report.problem(
            Some(&layout.metadata()),
            None,
            format!(
                "missing, but {} of stowage's are here ({} among them): stowage wrote this \
                 cache and its metadata (the schema) is lost",
                count(stowage_files.len() as u64, "file"),
                first.display()
            ),
        );
    }
}

/// A cache without `stowage.log` reads as one torchcachex wrote alone; but stowage's own files
/// beside it (sidecars, index runs, the complete marker) mean stowage wrote it and its log is
/// lost: damage, never "unchecked".
fn check_no_lost_log(path: &Path, report: &mut ValidationReport) -> Result<(), CliError> {
    let layout = stowage_arrow::layout::Layout::new(path);
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
    if let Some(first) = stowage_files.first() {
        report.problem(
            Some(&layout.commit_log()),
            None,
            format!(
                "missing, but {} of stowage's are here ({} among them): stowage wrote this \
                 cache and its commit log is lost, so which rows it committed is unknown",
                count(stowage_files.len() as u64, "file"),
                first.display()
            ),
        );
    }
    Ok(())
}

fn check_schema_json(reader: &CacheReader, report: &mut ValidationReport) {
    let path = reader.layout().schema();
    if path.exists() {
        report.files_checked += 1;
        if let Err(e) = SchemaJson::read(&path) {
            report.problems.push(problem_of(&e, None));
        }
    }
}

/// An aenet torch cache: opening it checked the index tables (every row points into its
/// payload, no entry twice) and the structure check lists the rows stowage's checksums do not
/// cover (aenet's); each unit reads its entries' features and derivatives, checking stowage's
/// rows against their checksums and every array's shape against the section's attributes.
fn plan_aenet(source: &AenetReader, options: VerifyOptions) -> Result<Plan<'_>, CliError> {
    let structure = source.cache().check(ValidationLevel::Structure);
    let keys = source.keys()?;
    let selected = select(&keys, options.sample, options.seed);
    let units = key_units(&selected, move |report, key| check_aenet_entry(report, source, key));
    Ok(Plan {
        structure,
        keys: keys.len() as u64,
        selected: selected.len() as u64,
        units,
        no_checksums: None,
        repair: AENET_REPAIR,
        file_repair: None,
    })
}

/// How a damaged aenet torch cache is repaired.
const AENET_REPAIR: &str = "rebuild the torch cache with aenet (delete /torch_cache from the dataset file, or use an \
     intact copy)";

fn check_aenet_entry(report: &mut ValidationReport, source: &AenetReader, key: &str) {
    report.samples_checked += 1;
    let cache = source.cache();
    let path = cache.path();
    let entry: i64 = key.parse().unwrap_or(-1);
    if let Err(e) = cache.features(entry) {
        report.problems.push(problem_of(&e, Some(key)));
    }
    let Some(layout) = cache.derivative_layout() else { return };
    match cache.derivatives(entry) {
        Ok(Some(d)) => {
            if let Err(e) =
                d.check(layout.n_radial_features, layout.n_angular_features, layout.multi)
            {
                report.problem(Some(path), Some(key), format!("derivatives: {e}"));
            }
        }
        Ok(None) => {}
        Err(e) => report.problems.push(problem_of(&e, Some(key))),
    }
}

/// Every collection file's header and size, and every marker's data file; no records here, so no
/// samples and no sample to choose (`--sample` does not apply).
fn hangar(
    path: &Path,
    dir: &HangarDir,
    options: VerifyOptions,
    out: &mut dyn Write,
    notes: &mut dyn Write,
) -> Result<Status, CliError> {
    let mut structure = ValidationReport::default();
    for (path, detail) in &dir.problems {
        structure.problem(Some(path), None, detail.clone());
    }
    check_no_lost_metadata(path, &mut structure);
    let units = dir
        .files
        .iter()
        .map(|file| Unit {
            samples: 1,
            check: Box::new(move |progress: &Progress| {
                let mut report = ValidationReport { files_checked: 1, ..Default::default() };
                if let Some(problem) = file.check().problem {
                    report.problem(Some(&file.path), None, problem);
                }
                progress.inc(1);
                report
            }),
        })
        .collect();
    if options.sample.is_some() {
        note(
            notes,
            "--sample does not apply to a bare hangar data directory (it holds no records): every file was checked",
        );
    }
    let plan = Plan {
        structure,
        units,
        keys: 0,
        selected: 0,
        no_checksums: None,
        repair: "",
        file_repair: None,
    };
    let (mut report, _) =
        execute(plan.units, plan.structure, VerifyOptions { sample: None, ..options });
    // The samples are there, but only hangar's records (in its LMDB, not here) say where and
    // carry their checksums: none of them was checked.
    for file in &dir.files {
        report.unchecked.push(stowage_core::Unchecked {
            path: file.path.clone(),
            writer: "hangar".to_owned(),
            samples: 0,
            next_step: format!(
                "its samples' records (and their xxh64 checksums) are in hangar's database, not \
                 in this directory: check a sample with `stowage get {} --record REC`",
                path.display()
            ),
        });
    }
    for problem in &report.problems {
        say!(out, "{}", escape_control(&problem.to_string()));
    }
    print_unchecked(&report, out)?;
    say!(
        out,
        "0 samples, {} checked: {} (a bare hangar data directory has no records: headers \
         and sizes only)",
        count(report.files_checked, "file"),
        verdict(&report)
    );
    Ok(status(&report))
}

/// Runs the units on `jobs` threads and merges their reports into `structure`'s, in unit order;
/// a problem a unit finds for a file and key the structure check already named is dropped.
/// Returns the merged report and the units' sample count.
fn execute(
    units: Vec<Unit<'_>>,
    structure: ValidationReport,
    options: VerifyOptions,
) -> (ValidationReport, u64) {
    let total: u64 = units.iter().map(|u| u.samples).sum();
    let progress = Progress::new(total, "verifying");
    let results: Mutex<Vec<Option<ValidationReport>>> =
        Mutex::new((0..units.len()).map(|_| None).collect());
    let next = AtomicUsize::new(0);
    std::thread::scope(|scope| {
        for _ in 0..options.jobs.clamp(1, units.len().max(1)) {
            scope.spawn(|| {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let Some(unit) = units.get(i) else { break };
                    let report = (unit.check)(&progress);
                    results.lock().unwrap_or_else(|e| e.into_inner())[i] = Some(report);
                }
            });
        }
    });
    progress.finish();
    let mut merged = structure;
    let known: HashSet<(Option<PathBuf>, Option<String>)> =
        merged.problems.iter().map(|p| (p.path.clone(), p.key.clone())).collect();
    let results = results.into_inner().unwrap_or_else(|e| e.into_inner());
    for report in results.into_iter().flatten() {
        merged.samples_checked += report.samples_checked;
        merged.files_checked += report.files_checked;
        merged.unchecked.extend(report.unchecked);
        merged.problems.extend(
            report
                .problems
                .into_iter()
                .filter(|p| p.key.is_none() || !known.contains(&(p.path.clone(), p.key.clone()))),
        );
    }
    (merged, total)
}

/// `clean`, `K problems`, or `no problem, U samples unchecked`: a cache holding data that no
/// checksum covers is never called clean.
fn verdict(report: &ValidationReport) -> String {
    if !report.problems.is_empty() {
        return count(report.problems.len() as u64, "problem");
    }
    if report.unchecked.is_empty() {
        return "clean".to_owned();
    }
    let samples: u64 = report.unchecked.iter().map(|u| u.samples).sum();
    let files = count(report.unchecked.len() as u64, "file");
    match samples {
        0 => format!("no problem, {files} unchecked"),
        _ => format!("no problem, {} unchecked", count(samples, "sample")),
    }
}

/// Exit 1 for problems, 3 for unchecked data and no problem, 0 for a clean cache.
fn status(report: &ValidationReport) -> Status {
    if !report.problems.is_empty() {
        Status::ProblemsFound
    } else if !report.unchecked.is_empty() {
        Status::CannotTell
    } else {
        Status::Success
    }
}

/// Each file holding data another writer added, with what to do next.
fn print_unchecked(report: &ValidationReport, out: &mut dyn Write) -> Result<(), CliError> {
    for unchecked in &report.unchecked {
        say!(out, "unchecked: {}", escape_control(&unchecked.to_string()));
    }
    Ok(())
}

/// Runs `plan` and prints its problems, the damaged keys and how to repair them, and the summary.
fn report(plan: Plan<'_>, options: VerifyOptions, out: &mut dyn Write) -> Result<Status, CliError> {
    let (keys, selected, repair, file_repair, no_checksums) =
        (plan.keys, plan.selected, plan.repair, plan.file_repair, plan.no_checksums);
    let (mut report, _) = execute(plan.units, plan.structure, options);
    if let Some(no_checksums) = no_checksums {
        report.unchecked.push(stowage_core::Unchecked {
            path: no_checksums.path,
            writer: no_checksums.writer.to_owned(),
            samples: report.samples_checked,
            next_step: no_checksums.next_step.to_owned(),
        });
    }
    for problem in &report.problems {
        say!(out, "{}", escape_control(&problem.to_string()));
    }
    let mut damaged: Vec<&str> = report.problems.iter().filter_map(|p| p.key.as_deref()).collect();
    damaged.sort_unstable();
    damaged.dedup();
    if !damaged.is_empty() {
        let shown: Vec<String> = damaged.iter().take(20).map(|k| display_key(k)).collect();
        let more = if damaged.len() > 20 {
            format!(" and {} more", damaged.len() - 20)
        } else {
            String::new()
        };
        say!(out, "damaged keys ({}): {}{more}", damaged.len(), shown.join(", "));
        say!(out, "to repair: {repair}");
    }
    if let Some(file_repair) = file_repair {
        let mut files: Vec<String> = report
            .problems
            .iter()
            .filter(|p| p.key.is_none())
            .filter_map(|p| p.path.as_ref().map(|path| path.display().to_string()))
            .collect();
        files.sort_unstable();
        files.dedup();
        if !files.is_empty() {
            say!(out, "damaged files ({}): {}", files.len(), escape_control(&files.join(", ")));
            say!(out, "to repair: {file_repair}");
        }
    }
    print_unchecked(&report, out)?;
    let samples = if selected < keys {
        let percent = 100.0 * selected as f64 / keys.max(1) as f64;
        format!("{} of {keys} samples ({percent:.1}%, seed {})", selected, options.seed)
    } else {
        count(report.samples_checked.max(selected), "sample")
    };
    say!(out, "{samples}, {} checked: {}", count(report.files_checked, "file"), verdict(&report));
    Ok(status(&report))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sample_is_seeded_sized_and_in_cache_order() {
        let keys: Vec<String> = (0..1000).map(|i| format!("k{i}")).collect();
        let tenth = select(&keys, Some(0.1), 7);
        assert_eq!(tenth.len(), 100);
        assert_eq!(tenth, select(&keys, Some(0.1), 7));
        assert_ne!(tenth, select(&keys, Some(0.1), 8));
        let positions: Vec<usize> =
            tenth.iter().map(|k| keys.iter().position(|x| x == k).unwrap()).collect();
        assert!(positions.windows(2).all(|w| w[0] < w[1]));
        assert_eq!(select(&keys, Some(0.0001), 7).len(), 1);
        assert_eq!(select(&keys, None, 7), keys);
        assert_eq!(select(&keys, Some(1.0), 7), keys);
    }
}
