//! `stowage convert SRC DST --to NAME [--verify]`: every sample of any cache a registered
//! factory reads, streamed into a new cache of any registered backend (`memmap`, `arrow`, `hdf5`,
//! `npy`, or a third party's).
//!
//! 1. The source's schema is translated for the target ([`translate`]): a field the target's
//!    [`Capabilities`] cannot hold as declared is narrowed to what the source really holds (one
//!    fixed shape, a maximum shape, no nulls), found by reading the source once; a field that
//!    still does not fit is refused, naming it and the reason, before anything is written.
//! 2. `DST` records which source it is converted from ([`ConvertRecord`], written durably before
//!    the cache is created). `DST` is created, or, when it already holds a cache of the target
//!    backend with the same schema converted from the same source, opened in append mode: the
//!    keys it has committed are skipped. So an interrupted conversion (even `kill -9`, at any
//!    point) is finished by running the same command again. A different source is refused
//!    unless `--merge` is given; then the target's samples win for the keys it already holds,
//!    and the run says how many of those differ from the source's.
//! 3. Samples are put in the source's key order and flushed (made durable) every
//!    `--flush-every` samples; the target is finalized at the end, also when a rerun finds every
//!    key already there but the target not yet finalized.
//! 4. With `--verify`, every key is read back from `DST` and its sample's digest compared with
//!    the source's ([`sample_digest`]).
//!
//! `SRC` and `DST` may be URLs (`s3://bucket/cache`). A URL source opens through the registry like
//! any cache. A URL target must be of a scheme the `--to` backend serves
//! ([`stowage_core::location::check_served`], checked before anything is read or created), and
//! nothing of it is on the local file system: it is created, found and resumed through the
//! factory alone, and it holds no [`ConvertRecord`] (the backend's store has no place for one),
//! so a rerun resumes it from the keys it holds without checking which source they came from.

use std::collections::HashSet;
use std::io::Write;
use std::path::Path;
use std::time::Instant;

use stowage_core::{
    Backend, BackendFactory, Capabilities, DynReader, FieldKind, Format, OpenMode, Reader,
    Registry, Sample, Schema, ShapeRule, ValidationLevel, Value,
};

use stowage_arrow::BlobEncoding;
use stowage_arrow::OutputStructure;

use crate::builtin::Builtin;
use crate::convert_record::{ConvertRecord, SourceId};
use crate::error::{CliError, Status};
use crate::locate::{Recognized, is_url, recognize_here};
use crate::open::open_reader;
use crate::out::{Progress, count, display_key, human, note};
use crate::phase_trace::PhaseTrace;

/// The backend `convert` writes: a registered factory, or, for a built-in backend that carries
/// over what the source records ([`Carried`]), the same backend set up to do so.
struct Target<'r> {
    /// The factory `--to` names, as registered.
    registered: &'r dyn BackendFactory,
    /// The built-in backend configured to carry what the source records, when it does.
    configured: Option<Box<dyn BackendFactory>>,
}

impl<'r> Target<'r> {
    /// The registered factory `registered`, set up to carry over what the source records that
    /// the target's layout can hold too ([`Carried`]).
    fn new(registered: &'r dyn BackendFactory, carried: &Carried) -> Target<'r> {
        let own = own_format(registered).and_then(Builtin::of);
        let configured: Option<Box<dyn BackendFactory>> = match own {
            Some(Builtin::StowageMemmap) if carried.fingerprint.is_some() => {
                Some(Box::new(stowage_memmap::MemmapFactory {
                    options: stowage_memmap::MemmapOptions {
                        carry_fingerprint: carried.fingerprint.clone(),
                        ..Default::default()
                    },
                }))
            }
            Some(Builtin::StowageArrow) if carried.arrow_structure.is_some() => {
                Some(Box::new(stowage_arrow::ArrowFactory {
                    options: stowage_arrow::ArrowOptions {
                        output_structure: carried.arrow_structure,
                        blob_encoding: carried.blob_encoding,
                        ..Default::default()
                    },
                }))
            }
            _ => None,
        };
        Target { registered, configured }
    }

    /// The factory that creates and opens the target.
    fn factory(&self) -> &dyn BackendFactory {
        self.configured.as_deref().unwrap_or(self.registered)
    }

    /// The backend's name, as `--to` takes it.
    fn name(&self) -> &'static str {
        self.registered.name()
    }

    /// The format the backend writes: its factory's first.
    fn format(&self) -> Option<&'static Format> {
        own_format(self.registered)
    }

    /// What the target is called in sentences: `stowage memmap row cache`.
    fn description(&self) -> &'static str {
        self.format().map_or(self.name(), |format| format.description)
    }

    /// The files this backend's create writes before the directory is a cache of its kind, and
    /// which its create, run again, replaces: Arrow writes torchcachex's `schema.json` before
    /// its log, NUMPY_10 its empty logs before `stowage.json`.
    fn written_before_the_cache(&self) -> &'static [&'static str] {
        match self.format().and_then(Builtin::of) {
            Some(Builtin::StowageArrow) => &["schema.json"],
            Some(Builtin::StowageNpy) => &["records.log", "owned_files.log"],
            _ => &[],
        }
    }
}

/// The format a factory writes: the first it lists.
fn own_format(factory: &dyn BackendFactory) -> Option<&'static Format> {
    factory.formats().first()
}

/// `--to NAME` names no registered backend.
fn unknown_target(registry: &Registry, name: &str) -> CliError {
    CliError::new(format!(
        "--to {name:?}: no registered backend has that name (the backends are {})",
        target_names(registry).join(", ")
    ))
}

/// The names `--to` takes: every registered factory's.
pub fn target_names(registry: &Registry) -> Vec<&'static str> {
    registry.factories().map(|factory| factory.name()).collect()
}

/// What `convert` was asked to do.
#[derive(Debug, Clone)]
pub struct ConvertOptions {
    /// The backend to write: a registered factory's name.
    pub target: String,
    /// Read every converted sample back and compare digests.
    pub verify: bool,
    /// Samples between two flushes.
    pub flush_every: usize,
    /// Accept a target converted from another source: its samples win for the keys it holds.
    pub merge: bool,
}

/// What a conversion carries over besides the samples: what the source records about itself
/// that the target's layout has a place for.
#[derive(Debug, Default)]
struct Carried {
    /// DNANet's `fingerprint.json`, byte for byte, into a memmap row cache from another one: so
    /// DNANet's `validate_fingerprint` accepts the copy whenever it accepts the source.
    fingerprint: Option<stowage_memmap::CarriedFingerprint>,
    /// torchcachex's output structure, into an Arrow cache from another one: a tuple stays a
    /// tuple for torchcachex (the schema alone would make it a dict of `item0`, `item1`, ...).
    arrow_structure: Option<OutputStructure>,
    /// How bytes fields are stored, into an Arrow cache from another one: torchcachex's pickles
    /// are kept as they are (pickling them again would hand torchcachex the pickle's bytes
    /// instead of the object); raw bytes of an old stowage cache are pickled as `bytes`.
    blob_encoding: BlobEncoding,
}

impl Carried {
    /// What `source`, a cache of `format`, records that the backend `target` writes (a
    /// registered factory's own format) can hold, and a line saying what happens to the rest
    /// (`None` when there is nothing to say).
    fn from_source(
        source: &dyn Reader,
        format: &'static Format,
        target: Option<&'static Format>,
    ) -> Result<(Carried, Option<String>), CliError> {
        let target_builtin = target.and_then(Builtin::of);
        if target_builtin == Some(Builtin::StowageArrow)
            && let Some((structure, encoding)) = arrow_choices(source.path(), format)?
        {
            let blob_encoding = match encoding {
                BlobEncoding::Raw => BlobEncoding::PickledBytes,
                kept => kept,
            };
            let carried =
                Carried { arrow_structure: Some(structure), blob_encoding, ..Carried::default() };
            let line = format!(
                "torchcachex layout: output structure {:?} and bytes stored as {} carried over",
                structure.name(),
                blob_encoding.name()
            );
            return Ok((carried, Some(line)));
        }
        let memmap_source =
            matches!(Builtin::of(format), Some(Builtin::StowageMemmap | Builtin::DnanetMemmap));
        let fingerprint = match memmap_source {
            true => stowage_memmap::CarriedFingerprint::read(source.path())?,
            false => None,
        };
        let Some(fingerprint) = fingerprint else { return Ok((Carried::default(), None)) };
        if target_builtin == Some(Builtin::StowageMemmap) {
            let line = format!(
                "fingerprint: {} carried over byte for byte (hash {})",
                fingerprint.source().display(),
                fingerprint.fingerprint().hash
            );
            return Ok((
                Carried { fingerprint: Some(fingerprint), ..Carried::default() },
                Some(line),
            ));
        }
        let line = format!(
            "fingerprint: {} is not carried over: a {} has no place for DNANet's fingerprint \
             (DNANet reads only memmap row caches); the source keeps it, and `stowage explain` \
             of the source still tells whether it is fresh",
            fingerprint.source().display(),
            target.map_or("cache of another backend", |format| format.description)
        );
        Ok((Carried::default(), Some(line)))
    }
}

/// The output structure and bytes encoding of the cache at `path`, of `format`, when it is an
/// Arrow cache (stowage's or torchcachex's); `None` for the other formats.
fn arrow_choices(
    path: &Path,
    format: &Format,
) -> Result<Option<(OutputStructure, BlobEncoding)>, CliError> {
    Ok(match Builtin::of(format) {
        Some(Builtin::StowageArrow) => {
            let options = stowage_arrow::ArrowOptions::default();
            let cache = stowage_arrow::ArrowBackend::open(path, OpenMode::ReadOnly, options)?;
            Some((cache.output_structure(), cache.blob_encoding()))
        }
        Some(Builtin::Torchcachex) => {
            let reader = stowage_arrow::CacheReader::open(path)?;
            Some((reader.output_structure()?, reader.blob_encoding()))
        }
        _ => None,
    })
}

/// What the source holds in one field, as far as a scan saw.
#[derive(Debug, Clone, Default)]
struct Seen {
    /// The first shape seen, and whether every later one equals it.
    first: Option<Vec<usize>>,
    same: bool,
    /// Whether every shape has the first's rank, and the largest size per dimension.
    same_rank: bool,
    max: Vec<usize>,
    nulls: bool,
}

impl Seen {
    fn add(&mut self, value: &Value) {
        let shape = match value {
            Value::Null => {
                self.nulls = true;
                return;
            }
            Value::Tensor(t) => t.shape(),
            _ => return,
        };
        match &self.first {
            None => {
                self.first = Some(shape.to_vec());
                self.same = true;
                self.same_rank = true;
                self.max = shape.to_vec();
            }
            Some(first) => {
                self.same &= first.as_slice() == shape;
                self.same_rank &= first.len() == shape.len();
                if self.same_rank {
                    self.max.iter_mut().zip(shape).for_each(|(m, s)| *m = (*m).max(*s));
                }
            }
        }
    }
}

/// Whether `field` fits `caps` as declared.
fn fits(kind: &FieldKind, nullable: bool, caps: &Capabilities) -> bool {
    if nullable && !caps.nullable {
        return false;
    }
    match kind {
        FieldKind::Bytes => caps.bytes_fields,
        FieldKind::Json { .. } => caps.json_fields,
        FieldKind::Tensor { dtype, shape } => {
            caps.dtypes.contains(dtype) && shape_fits(shape, caps)
        }
    }
}

/// Whether a tensor field of `shape` fits `caps`.
fn shape_fits(shape: &ShapeRule, caps: &Capabilities) -> bool {
    match shape {
        ShapeRule::Fixed(_) => true,
        ShapeRule::Max(_) => caps.variable_shapes,
        ShapeRule::RaggedLeading(_) | ShapeRule::Any => caps.ragged,
    }
}

/// The source's schema as the target `backend` with `caps` can hold it: each field that does
/// not fit as declared narrowed to what `seen` says the source holds, or refused naming the field
/// and why. `seen` is only called (it reads the whole source) when a field needs it.
fn translate(
    schema: &Schema,
    caps: &Capabilities,
    backend: &str,
    seen: &mut dyn FnMut() -> Result<Vec<Seen>, CliError>,
) -> Result<Schema, CliError> {
    let refuse = |name: &str, why: String| {
        CliError::new(format!(
            "field {name:?} cannot be converted to {backend}: {why}; nothing was written"
        ))
    };
    let mut scanned: Option<Vec<Seen>> = None;
    let mut fields = Vec::new();
    for (i, field) in schema.fields.iter().enumerate() {
        let mut field = field.clone();
        if !fits(&field.kind, field.nullable, caps) {
            if scanned.is_none() {
                scanned = Some(seen()?);
            }
            let seen = &scanned.as_ref().expect("scanned just now")[i];
            if field.nullable && !caps.nullable {
                if seen.nulls {
                    return Err(refuse(
                        &field.name,
                        "the source holds null values and the target has no nullable fields".into(),
                    ));
                }
                field.nullable = false;
            }
            match &mut field.kind {
                FieldKind::Bytes if !caps.bytes_fields => {
                    return Err(refuse(&field.name, "the target has no bytes fields".into()));
                }
                FieldKind::Json { .. } if !caps.json_fields => {
                    return Err(refuse(&field.name, "the target has no JSON fields".into()));
                }
                FieldKind::Tensor { dtype, .. } if !caps.dtypes.contains(dtype) => {
                    return Err(refuse(&field.name, format!("the target cannot store {dtype}")));
                }
                FieldKind::Tensor { shape, .. } if !shape_fits(shape, caps) => {
                    *shape = narrowed(seen, caps).map_err(|why| refuse(&field.name, why))?;
                }
                _ => {}
            }
        }
        fields.push(field);
    }
    let schema = Schema { fields };
    caps.check_schema(&schema, "target").map_err(|e| {
        CliError::new(format!(
            "{backend} cannot hold the source's schema: {e}; nothing was written"
        ))
    })?;
    Ok(schema)
}

/// The narrowest shape rule the target holds for the shapes `seen`.
fn narrowed(seen: &Seen, caps: &Capabilities) -> Result<ShapeRule, String> {
    match &seen.first {
        None => Err("the source holds no value of it to take a shape from".into()),
        Some(first) if seen.same => Ok(ShapeRule::Fixed(first.clone())),
        Some(_) if seen.same_rank && caps.variable_shapes => Ok(ShapeRule::Max(seen.max.clone())),
        Some(_) if seen.same_rank => Err(format!(
            "its shapes vary (up to {}) and the target holds one fixed shape per field",
            stowage_core::shape::display(&seen.max)
        )),
        Some(_) => Err("its shapes differ in rank and the target holds no ragged shapes".into()),
    }
}

/// Reads every sample of `source` and records what each field of its schema holds.
fn scan(source: &dyn Reader, keys: &[String]) -> Result<Vec<Seen>, CliError> {
    let mut seen = vec![Seen::default(); source.schema().fields.len()];
    let progress = Progress::new(keys.len() as u64, "reading shapes");
    for key in keys {
        let sample = get(source, key)?;
        for (field, seen) in source.schema().fields.iter().zip(&mut seen) {
            seen.add(sample.get(&field.name).unwrap_or(&Value::Null));
        }
        progress.inc(1);
    }
    progress.finish();
    Ok(seen)
}

fn get(source: &dyn Reader, key: &str) -> Result<Sample, CliError> {
    source.get(key)?.ok_or_else(|| {
        CliError::new(format!(
            "key {key:?} is listed by {} but cannot be read from it",
            source.path().display()
        ))
    })
}

/// A digest of a sample: every field by name, with its kind, dtype, shape and bytes.
pub fn sample_digest(sample: &Sample) -> u64 {
    let mut fields: Vec<(&str, &Value)> = sample.fields().collect();
    fields.sort_by(|a, b| a.0.cmp(b.0));
    let mut hasher = xxhash_rust::xxh3::Xxh3::new();
    for (name, value) in fields {
        hasher.update(&(name.len() as u64).to_le_bytes());
        hasher.update(name.as_bytes());
        let (tag, bytes): (&[u8], &[u8]) = match value {
            Value::Null => (b"n", &[]),
            Value::Bytes(b) => (b"b", b),
            Value::Json(text) => (b"j", text.as_bytes()),
            Value::Tensor(t) => {
                hasher.update(t.dtype().name().as_bytes());
                for dim in t.shape() {
                    hasher.update(&(*dim as u64).to_le_bytes());
                }
                (b"t", t.bytes())
            }
        };
        hasher.update(tag);
        hasher.update(&(bytes.len() as u64).to_le_bytes());
        hasher.update(bytes);
    }
    hasher.digest()
}

/// Converts `src` into `dst` and prints what was done and how fast. The source is opened
/// through `registry` (any format it reads); the target is created by the registered factory
/// `options.target` names. Notes go to `notes`.
pub fn run(
    registry: &Registry,
    src: &Path,
    dst: &Path,
    options: &ConvertOptions,
    out: &mut dyn Write,
    notes: &mut dyn Write,
) -> Result<Status, CliError> {
    let trace = PhaseTrace::from_env(notes);
    // Before the source is read: a wrong --to is an argument error.
    let registered = registry
        .factory(&options.target)
        .ok_or_else(|| unknown_target(registry, &options.target))?;
    // A URL target: a scheme some backend serves, and the one --to names, before anything is
    // read or created (a URL a backend of local files took would become a local directory).
    stowage_core::location::refuse_unserved(dst, &registry.url_schemes())?;
    stowage_core::location::check_served(registered, dst)?;
    let at_url = is_url(dst);
    let (source, source_format) = open_reader(registry, src, "convert")?;
    let keys = source.keys()?;
    let (carried, carried_line) =
        Carried::from_source(source.as_ref(), source_format, own_format(registered))?;
    let target = Target::new(registered, &carried);
    let factory = target.factory();
    let caps = factory.capabilities();
    let backend = target.description();
    let schema = translate(source.schema(), &caps, backend, &mut || scan(source.as_ref(), &keys))?;

    let source_id = SourceId::of(src, source_format.description)?;
    let appending = existing(registry, dst, &target)?;
    let (merging, record) = check_provenance(dst, options, &target, source_id, appending)?;
    let done: HashSet<String> = match appending {
        true => factory.open_reader(dst)?.keys()?.into_iter().collect(),
        false => HashSet::new(),
    };
    if at_url && appending && !options.merge {
        note(
            notes,
            &format!(
                "{} is a URL, where convert keeps no record of its source: its {} are kept as \
                 they are (resumed), not checked to come from {}",
                dst.display(),
                count(done.len() as u64, "key"),
                src.display()
            ),
        );
    }
    let todo: Vec<&String> = keys.iter().filter(|k| !done.contains(*k)).collect();
    // A finished conversion run again is not reopened for writing (a finalized memmap or
    // NUMPY_10 cache cannot be); one killed inside finalize is, to finalize it: also one whose
    // log says finalized but whose finalize did not complete (an HDF5 cache without
    // stowage.complete), which an append-open completes.
    let finalized = appending && todo.is_empty() && {
        let target = factory.open(dst, OpenMode::ReadOnly)?;
        target.is_finalized() && target.validate(ValidationLevel::Structure)?.is_undamaged()
    };
    let mut target_cache = match appending {
        true if finalized => None,
        true => {
            trace.mark("open");
            let target_cache = factory.open(dst, OpenMode::Append)?;
            if target_cache.schema() != &schema {
                return Err(CliError::new(format!(
                    "{} already holds a {backend} with another schema than the converted one: \
                     convert into a new directory, or delete it to start over",
                    dst.display()
                )));
            }
            // Recorded once the target takes the source's keys.
            record.map(|r| r.write(dst)).transpose()?;
            Some(target_cache)
        }
        false if at_url => {
            trace.mark("create");
            Some(factory.create(dst, &schema)?)
        }
        false => {
            // Recorded before the cache exists, so a rerun knows whose leftovers it finds.
            std::fs::create_dir_all(dst).map_err(|e| crate::error::io_error(dst, &e))?;
            trace.mark("create");
            record.map(|r| r.write(dst)).transpose()?;
            Some(factory.create(dst, &schema)?)
        }
    };
    if target_cache.is_some() && !at_url {
        // Under the target's writer lock no other convert is writing the record: a temporary
        // of it is a killed run's.
        let record_temp = |name: &str| name == crate::convert_record::FILE_NAME;
        stowage_core::file_safety::remove_abandoned_temps(dst, record_temp)?;
    }
    let started = Instant::now();
    let progress = Progress::new(todo.len() as u64, "converting");
    let mut bytes = 0u64;
    if let Some(target_cache) = &mut target_cache {
        trace.mark("copy");
        bytes =
            copy(source.as_ref(), &todo, target_cache.as_mut(), dst, options, &trace, &progress)?;
        trace.mark("finalize");
        // An append-open of a cache whose finalize was cut short may complete it (HDF5): then
        // there is nothing left to finalize unless this run put keys.
        if !todo.is_empty() || !target_cache.is_finalized() {
            target_cache.finalize()?;
        }
    }
    trace.mark("done");
    progress.finish();
    drop(target_cache);
    let seconds = started.elapsed().as_secs_f64().max(1e-9);
    say!(
        out,
        "converted {} from {} ({}) to {} ({backend}) in {seconds:.2} s: {:.0} samples/s, {}/s{}",
        count(todo.len() as u64, "sample"),
        src.display(),
        source_format.description,
        dst.display(),
        todo.len() as f64 / seconds,
        human((bytes as f64 / seconds) as u64),
        if done.is_empty() {
            String::new()
        } else {
            format!(" ({} already in the target skipped)", count(done.len() as u64, "key"))
        }
    );
    if let Some(line) = carried_line {
        say!(out, "{line}");
    }
    if merging || options.verify {
        let converted = factory.open_reader(dst)?;
        if merging {
            merge_line(source.as_ref(), &keys, &done, dst, converted.as_ref(), out)?;
        }
        if options.verify {
            return verify(source.as_ref(), &keys, dst, converted.as_ref(), out);
        }
    }
    Ok(Status::Success)
}

/// Puts every key of `todo`, read from `source`, into `target`, flushing every
/// `options.flush_every` samples; returns the bytes copied.
fn copy(
    source: &DynReader,
    todo: &[&String],
    target: &mut dyn Backend,
    dst: &Path,
    options: &ConvertOptions,
    trace: &PhaseTrace,
    progress: &Progress,
) -> Result<u64, CliError> {
    let mut bytes = 0u64;
    for (i, key) in todo.iter().enumerate() {
        let sample = get(source, key)?;
        bytes += crate::inspect::report::sample_bytes(&sample);
        target.put(key, &sample).map_err(|e| {
            CliError::new(format!("key {}: writing to {}: {e}", display_key(key), dst.display()))
        })?;
        if (i + 1) % options.flush_every.max(1) == 0 {
            trace.mark("flush");
            target.flush()?;
            trace.mark("copy");
        }
        progress.inc(1);
    }
    Ok(bytes)
}

/// Whether `dst` already holds a cache of the target's own format (to append to); an error when
/// it holds something else. A directory holding only what an interrupted `convert` leaves before
/// the cache exists (its [`ConvertRecord`], the writer lock, temporary files) is not a cache yet.
///
/// A URL is asked of the factories serving its scheme alone: no cache there means a new target.
fn existing(registry: &Registry, dst: &Path, target: &Target<'_>) -> Result<bool, CliError> {
    if is_url(dst) {
        return match recognize_here(registry, dst)? {
            Some(found) if is_target(found, target) => Ok(true),
            Some(found) => Err(holds_another(dst, found, target)),
            None => Ok(false),
        };
    }
    if !dst.exists() {
        return Ok(false);
    }
    // A directory the record proves a conversion made may hold what the target's create
    // writes before the directory becomes a cache; killed there, it may read as another format.
    let ours = dst.join(crate::convert_record::FILE_NAME).exists();
    match recognize_here(registry, dst)? {
        Some(found) if is_target(found, target) => Ok(true),
        _ if ours && holds_only_convert_leftovers(dst, target.written_before_the_cache())? => {
            Ok(false)
        }
        Some(found) => Err(holds_another(dst, found, target)),
        None if dst.is_dir() && holds_only_convert_leftovers(dst, &[])? => Ok(false),
        None => Err(CliError::new(format!(
            "{} exists and is not an empty directory: convert into a new or empty directory",
            dst.display()
        ))),
    }
}

/// Whether `found` is a cache of the target's own format, written by its backend.
fn is_target(found: Recognized<'_>, target: &Target<'_>) -> bool {
    found.factory.name() == target.name()
        && target.format().is_some_and(|own| own.id == found.format.id)
}

/// `dst` holds `found`, a cache that is not the target's.
fn holds_another(dst: &Path, found: Recognized<'_>, target: &Target<'_>) -> CliError {
    CliError::new(format!(
        "{} already holds a {}, not a {}: convert into a new {}",
        dst.display(),
        found.format.description,
        target.description(),
        if is_url(dst) { "URL" } else { "directory" }
    ))
}

/// Whether every entry of the directory `dst` is one a conversion leaves before its cache
/// exists: the record, the writer lock, stowage's temporary files (`.<name>.tmp-<pid>-<n>`, and
/// `.<name>.new`, a log staged before it takes its name), and directories (not links) holding
/// nothing else (a create killed after making `segments/`); `also` names more files that count
/// as leftovers.
fn holds_only_convert_leftovers(dst: &Path, also: &[&str]) -> Result<bool, CliError> {
    let entries = std::fs::read_dir(dst).map_err(|e| crate::error::io_error(dst, &e))?;
    for entry in entries {
        let entry = entry.map_err(|e| crate::error::io_error(dst, &e))?;
        let name = entry.file_name();
        let name = name.to_string_lossy();
        let leftover = match entry.file_type().map_err(|e| crate::error::io_error(dst, &e))? {
            kind if kind.is_dir() => holds_only_convert_leftovers(&entry.path(), &[])?,
            _ => {
                name == crate::convert_record::FILE_NAME
                    || also.contains(&name.as_ref())
                    || name == stowage_core::file_safety::WriterLock::FILE_NAME
                    || (name.starts_with('.') && (name.contains(".tmp-") || name.ends_with(".new")))
            }
        };
        if !leftover {
            return Ok(false);
        }
    }
    Ok(true)
}

/// Checks that `dst` is converted from `source` (its record lists it), or that it may be: a
/// new target, or `--merge`. Returns whether this run merges a source into a target converted
/// from another one (or written by another program), and the record to write (`None` when the
/// record already lists `source`). A `dst` at a URL holds no record: its keys are resumed, or,
/// with `--merge`, merged into.
fn check_provenance(
    dst: &Path,
    options: &ConvertOptions,
    target: &Target<'_>,
    source: SourceId,
    appending: bool,
) -> Result<(bool, Option<ConvertRecord>), CliError> {
    if is_url(dst) {
        // No record at a URL: a target there is resumed, or merged into with --merge.
        return Ok((appending && options.merge, None));
    }
    let record = ConvertRecord::read(dst)?;
    let backend = target.description();
    let refusal = |from: String| {
        CliError::new(format!(
            "{} {from}, not from {source}: run the conversion from that source again to resume \
             it, convert into a new directory, or pass --merge to add this source's keys (the \
             target's samples win for keys it already holds)",
            dst.display()
        ))
    };
    match &record {
        Some(record) if record.has(&source) => return Ok((false, None)),
        Some(record) if !options.merge => {
            return Err(refusal(format!("is converted from {}", record.describe_sources())));
        }
        None if appending && !options.merge => {
            return Err(refusal(format!(
                "already holds a {backend} that records no conversion source (written by \
                 another program, or by a stowage older than the record {})",
                crate::convert_record::FILE_NAME
            )));
        }
        _ => {}
    }
    let merging = appending || record.is_some();
    let record = match record {
        Some(mut record) => {
            record.sources.push(source);
            record
        }
        None => ConvertRecord::new(target.name(), source),
    };
    Ok((merging, Some(record)))
}

/// Says what a merge kept: how many of the source's keys the target already held (their samples
/// stay the target's) and how many of those differ from the source's.
fn merge_line(
    source: &dyn Reader,
    keys: &[String],
    done: &HashSet<String>,
    dst: &Path,
    converted: &dyn Reader,
    out: &mut dyn Write,
) -> Result<(), CliError> {
    let both: Vec<&String> = keys.iter().filter(|k| done.contains(*k)).collect();
    let progress = Progress::new(both.len() as u64, "comparing kept keys");
    let mut differ = 0u64;
    for key in &both {
        let theirs = converted.get(key)?.map(|s| sample_digest(&s));
        if theirs != Some(sample_digest(&get(source, key)?)) {
            differ += 1;
        }
        progress.inc(1);
    }
    progress.finish();
    say!(
        out,
        "merged into {}: the target's samples win; {} of {} were already there and kept, {} of \
         them differing from the source's",
        dst.display(),
        count(both.len() as u64, "key"),
        source.path().display(),
        differ
    );
    Ok(())
}

/// Reads every key back from `converted` (the cache in `dst`) and compares its sample's digest
/// with the source's; prints each mismatch and a summary. Status 1 when any differs.
fn verify(
    source: &dyn Reader,
    keys: &[String],
    dst: &Path,
    converted: &dyn Reader,
    out: &mut dyn Write,
) -> Result<Status, CliError> {
    let progress = Progress::new(keys.len() as u64, "verifying");
    let mut mismatches = 0u64;
    for key in keys {
        let want = sample_digest(&get(source, key)?);
        let got = match converted.get(key) {
            Ok(Some(sample)) => format!("{:016x}", sample_digest(&sample)),
            Ok(None) => "missing".to_owned(),
            Err(e) => format!("unreadable ({e})"),
        };
        if got != format!("{want:016x}") {
            mismatches += 1;
            say!(
                out,
                "key {}: source sample digest {want:016x}, {} has {got}",
                display_key(key),
                dst.display()
            );
        }
        progress.inc(1);
    }
    progress.finish();
    let verdict =
        if mismatches == 0 { "identical".to_owned() } else { count(mismatches, "mismatch") };
    say!(
        out,
        "verified {} read back from {}: {verdict}",
        count(keys.len() as u64, "sample"),
        dst.display()
    );
    Ok(if mismatches == 0 { Status::Success } else { Status::ProblemsFound })
}
