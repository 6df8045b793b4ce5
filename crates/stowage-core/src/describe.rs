//! What a cache says about itself for a report (`stowage inspect`): a [`Description`].
//!
//! A tool can list a cache's keys, schema and files through the [`Reader`] trait and the file
//! system alone, but only the format knows the rest: the name and version its metadata records,
//! what "finalized" means for it, which file is which, what its checksums cover, what it
//! deduplicates, how much memory its samples take when that is recorded, and the original tool's
//! own report when it has one. A reader says it in [`Reader::describe`]; a factory says what it
//! can of a cache that does not open in [`crate::BackendFactory::describe_unopened`]. The tool
//! adds what it sees itself (the path, the format's id and description, keys, schema, file sizes,
//! links) and renders the whole as text or JSON; the parts that appear in JSON ([`Detail`],
//! [`Coverage`], [`Dedup`], [`Memory`]) serialize as they are.
//!
//! ```
//! use stowage_core::describe::{Dedup, Description, Detail};
//! let mut description = Description::new("finalized (complete)");
//! description.detail("collection", "1000 slots per data file");
//! description.dedup.push(Dedup::new("rows".into(), 16, 13, "rows per distinct key".into()));
//! assert_eq!(description.details, [Detail::new("collection", "1000 slots per data file")]);
//! assert!((description.dedup[0].ratio - 16.0 / 13.0).abs() < 1e-9);
//! ```

use std::fmt;

use serde::Serialize;

use crate::check_plan::Selection;
use crate::{Capabilities, Error, Reader, Result, Sample, Schema, ValidationLevel};
use crate::{ValidationReport, Value, shape};

/// Samples read to project the memory of a format whose sizes are not recorded
/// ([`projected_memory`]).
pub const MEMORY_SAMPLE: usize = 1000;

/// What a cache's format says about one cache, for a report.
///
/// Every part is optional in spirit: [`Description::new`] starts from a state in words and
/// nothing else ("no checksums", "not checked"), and the format fills in what it knows.
#[derive(Debug)]
pub struct Description {
    /// The format's name as the cache records it (`stowage-npy`,
    /// `aenet.torch_training.cache.v2`).
    pub format_name: Option<String>,
    /// The format's version as the cache records it (`1`, `2 (/torch_cache)`).
    pub version: Option<String>,
    /// Whether the cache is finalized (complete); `None` when the format cannot tell.
    pub finalized: Option<bool>,
    /// The state in words: what finalized or unfinished means for this format.
    pub state: String,
    /// Physical rows, when they differ from keys (a key put again leaves its older rows).
    pub rows: Option<u64>,
    /// Format-specific facts, each a labelled line, in order.
    pub details: Vec<Detail>,
    /// The schema the cache's metadata records, for a cache that did not open (a reader's own
    /// schema is [`Reader::schema`]).
    pub schema: Option<Schema>,
    /// A note per field (`stored as <f4`, the shapes seen), by field name.
    pub field_notes: Vec<FieldNote>,
    /// What each file of the cache is.
    pub files: FileRoles,
    /// What the cache's checksums cover.
    pub checksums: Coverage,
    /// Sharing of stored values between keys, where the format deduplicates.
    pub dedup: Vec<Dedup>,
    /// Memory needed to hold every sample in RAM: exact when the format records sizes,
    /// projected from a sample read otherwise ([`projected_memory`]).
    pub memory: Option<Memory>,
    /// The structure check.
    pub integrity: Integrity,
    /// The original tool's own report of the cache, printed byte for byte before the rest
    /// (DNANet's inspection text for a memmap row cache).
    pub original_report: Option<String>,
    /// What could not be read, one line each (besides [`Description::failure`]).
    pub errors: Vec<String>,
    /// The error that kept the description from being complete (the cache did not open, a file
    /// could not be read): a tool prints the description, then fails with it.
    pub failure: Option<Error>,
}

impl Default for Description {
    /// The state `unknown`, and nothing else.
    fn default() -> Description {
        Description {
            format_name: None,
            version: None,
            finalized: None,
            state: "unknown".into(),
            rows: None,
            details: Vec::new(),
            schema: None,
            field_notes: Vec::new(),
            files: FileRoles::default(),
            checksums: Coverage::default(),
            dedup: Vec::new(),
            memory: None,
            integrity: Integrity::default(),
            original_report: None,
            errors: Vec::new(),
            failure: None,
        }
    }
}

impl Description {
    /// A description with only a state in words: no details, no checksums, not checked.
    pub fn new(state: impl Into<String>) -> Description {
        Description { state: state.into(), ..Description::default() }
    }

    /// Adds a labelled line.
    pub fn detail(&mut self, label: &str, value: impl Into<String>) {
        self.details.push(Detail::new(label, value));
    }

    /// Adds a note to `field`.
    pub fn note(&mut self, field: &str, note: impl Into<String>) {
        self.field_notes.push(FieldNote { field: field.to_owned(), note: note.into() });
    }

    /// The note on `field`, if any (the last one given).
    pub fn note_of(&self, field: &str) -> Option<&str> {
        self.field_notes.iter().rev().find(|n| n.field == field).map(|n| n.note.as_str())
    }

    /// What the [`Reader`] trait alone tells about `reader`, the description of a format with
    /// nothing more to say ([`Reader::describe`]'s default): the format's id, the finalized state,
    /// the backend and the capabilities it declares, checksums as the capabilities declare them,
    /// memory projected from a sample read, and the structure check.
    ///
    /// Errors: the keys cannot be listed, or the structure check fails.
    pub fn of_reader<R: Reader + ?Sized>(reader: &R) -> Result<Description> {
        let state = if reader.is_finalized() {
            "finalized (committed as complete)"
        } else {
            "not finalized (being written, or interrupted)"
        };
        let mut description = Description::new(state);
        description.format_name = Some(reader.format().id.to_owned());
        description.finalized = Some(reader.is_finalized());
        description.detail("backend", format!("{} (a registered backend)", reader.name()));
        description.detail("supports", capability_names(reader.capabilities()));
        let keys = reader.keys()?;
        let samples = keys.len() as u64;
        description.checksums.samples = Some(samples);
        if reader.capabilities().checksums {
            description.checksums.scheme =
                format!("the {} backend's own, over every sample's bytes", reader.name());
            // Which files hold the checksums is the backend's business: only the samples are
            // known.
            description.checksums.covered_samples = Some(samples);
        } else {
            description.checksums.scheme =
                format!("none (the {} backend declares none)", reader.name());
            description.checksums.covered_samples = Some(0);
        }
        (description.memory, _) = projected_memory(reader, &keys);
        description.integrity = Integrity::checked(
            reader.validate(ValidationLevel::Structure)?,
            "`stowage verify` also reads every sample",
        );
        Ok(description)
    }

    /// What can be said of a cache of a format with nothing more to say that did not open with
    /// `error` ([`crate::BackendFactory::describe_unopened`]'s default): its format and backend,
    /// the problems `structure` (the factory's check of the unopened cache, when it could make
    /// one) found, and `error` as the failure.
    pub fn unopened(
        backend: &str,
        format: &crate::Format,
        structure: Option<ValidationReport>,
        error: Error,
    ) -> Description {
        let mut description = Description::new("unknown (cannot be opened)");
        description.format_name = Some(format.id.to_owned());
        description.detail("backend", format!("{backend} (a registered backend)"));
        description.integrity = match structure {
            Some(structure) if !structure.is_undamaged() => {
                Integrity::checked(structure, "`stowage verify` lists every problem it finds")
            }
            _ => Integrity::NotChecked("cannot be opened (the error follows)".into()),
        };
        description.errors.push(error.to_string());
        description.failure = Some(error);
        description
    }
}

/// A labelled line of a report.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Detail {
    /// The label (`collection`).
    pub label: String,
    /// The value.
    pub value: String,
}

impl Detail {
    /// The line `label: value`.
    pub fn new(label: &str, value: impl Into<String>) -> Detail {
        Detail { label: label.to_owned(), value: value.into() }
    }
}

/// A note on one field of the schema: how it is stored, the shapes seen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldNote {
    /// The field's name.
    pub field: String,
    /// The note.
    pub note: String,
}

/// What each file of a cache is: a role for a file by its path relative to the cache (`""` when
/// the format has nothing to say of it), and groups of files summed in one line.
///
/// A role is a function rather than a table because some formats name files by content (a
/// NUMPY_10 collection file holds one field's samples, found through the records).
#[derive(Default)]
pub struct FileRoles {
    role: Option<Box<RoleOf>>,
    /// Files summed in one line each, instead of listed one by one (hangar's empty markers).
    pub groups: Vec<FileGroup>,
}

impl FileRoles {
    /// Roles given by `role`, from a file's path relative to the cache (`/`-separated).
    pub fn by(role: impl Fn(&str) -> String + Send + Sync + 'static) -> FileRoles {
        FileRoles { role: Some(Box::new(role)), groups: Vec::new() }
    }

    /// Also sums the files under any of `prefixes` in one line, saying they are `what`.
    pub fn with_group(mut self, prefixes: &[&str], what: &str) -> FileRoles {
        self.groups.push(FileGroup {
            prefixes: prefixes.iter().map(|p| (*p).to_owned()).collect(),
            what: what.to_owned(),
        });
        self
    }

    /// The role of the file at `name` (relative to the cache); `""` when none is known.
    pub fn role(&self, name: &str) -> String {
        self.role.as_ref().map_or_else(String::new, |role| role(name))
    }

    /// The group `name` belongs to, as an index into [`FileRoles::groups`].
    pub fn group_of(&self, name: &str) -> Option<usize> {
        self.groups.iter().position(|g| g.prefixes.iter().any(|p| name.starts_with(p.as_str())))
    }
}

impl fmt::Debug for FileRoles {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FileRoles")
            .field("role", &self.role.as_ref().map(|_| "fn"))
            .field("groups", &self.groups)
            .finish()
    }
}

/// The role of a file, from its path relative to the cache.
pub type RoleOf = dyn Fn(&str) -> String + Send + Sync;

/// Files summed in one line of a report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileGroup {
    /// The path prefixes (relative to the cache) whose files belong to the group.
    pub prefixes: Vec<String>,
    /// What one of the files is, singular (`empty marker file`).
    pub what: String,
}

/// What a cache's checksums cover.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Coverage {
    /// The algorithm and where the checksums live; `none` when the format has none.
    pub scheme: String,
    /// The files whose bytes are covered.
    pub covered_files: Vec<String>,
    /// The files holding samples that no checksum covers.
    pub uncovered_files: Vec<String>,
    /// Samples (rows) that carry a checksum, when known.
    pub covered_samples: Option<u64>,
    /// All samples (rows), when known.
    pub samples: Option<u64>,
}

impl Default for Coverage {
    /// No checksums, nothing known of the samples.
    fn default() -> Coverage {
        Coverage {
            scheme: "none".into(),
            covered_files: Vec::new(),
            uncovered_files: Vec::new(),
            covered_samples: None,
            samples: None,
        }
    }
}

/// How much stored data keys share.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Dedup {
    /// What is shared (`field "x"`, `rows`).
    pub what: String,
    /// References (rows or records).
    pub references: u64,
    /// Distinct stored values they point at.
    pub stored: u64,
    /// `references / stored` (1.0: nothing shared).
    pub ratio: f64,
    /// Where the values are stored.
    pub note: String,
}

impl Dedup {
    /// `references` pointing at `stored` values.
    pub fn new(what: String, references: u64, stored: u64, note: String) -> Dedup {
        let ratio = if stored == 0 { 1.0 } else { references as f64 / stored as f64 };
        Dedup { what, references, stored, ratio, note }
    }
}

/// Memory to realize a cache in RAM.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Memory {
    /// Bytes.
    pub bytes: u64,
    /// How it was computed.
    pub basis: String,
}

/// The structure check of a report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Integrity {
    /// The check ran: what it found, and what a full check (`stowage verify`) adds to it.
    Checked {
        /// What the check found.
        report: ValidationReport,
        /// What a full check adds (`` `stowage verify` also checks every checksum ``).
        verify_adds: String,
    },
    /// The check did not run, and why (`cannot be opened (the error follows)`).
    NotChecked(String),
}

impl Integrity {
    /// The check ran and found `report`; `verify_adds` says what a full check adds.
    pub fn checked(report: ValidationReport, verify_adds: &str) -> Integrity {
        Integrity::Checked { report, verify_adds: verify_adds.to_owned() }
    }
}

impl Default for Integrity {
    /// `not checked`.
    fn default() -> Integrity {
        Integrity::NotChecked("not checked".into())
    }
}

/// The state of a cache kept by a segment commit log ([`crate::segment_log`]), finalized or not.
pub fn segment_log_state(finalized: bool) -> String {
    if finalized {
        "finalized (the commit log's last record; appends reopen it)".into()
    } else {
        "not finalized (being written, or interrupted: a writer resumes after the last committed \
         segment)"
            .into()
    }
}

/// The capabilities a backend declares, as words: `overwrite, resume, checksums`.
///
/// ```
/// let caps = stowage_core::Capabilities::none();
/// assert_eq!(stowage_core::describe::capability_names(&caps), "none beyond fixed-shape tensors");
/// ```
pub fn capability_names(caps: &Capabilities) -> String {
    let flags = [
        (caps.variable_shapes, "variable shapes"),
        (caps.ragged, "ragged shapes"),
        (caps.nullable, "nullable fields"),
        (caps.bytes_fields, "bytes fields"),
        (caps.json_fields, "JSON fields"),
        (caps.overwrite, "overwrite"),
        (caps.append_after_finalize, "append after finalize"),
        (caps.resume, "resume"),
        (caps.checksums, "checksums"),
        (caps.zero_copy_get, "zero-copy get"),
        (caps.concurrent_readers, "concurrent readers"),
    ];
    let names: Vec<&str> = flags.iter().filter(|(on, _)| *on).map(|(_, name)| *name).collect();
    if names.is_empty() { "none beyond fixed-shape tensors".into() } else { names.join(", ") }
}

/// How a report names a file of the cache at `root`: `path` relative to `root`, `root` itself as
/// `.`, a path outside it as it is.
///
/// ```
/// use std::path::Path;
/// use stowage_core::describe::relative_name;
/// assert_eq!(relative_name(Path::new("/c/segments/a.arrow"), Path::new("/c")), "segments/a.arrow");
/// assert_eq!(relative_name(Path::new("/c"), Path::new("/c")), ".");
/// ```
pub fn relative_name(path: &std::path::Path, root: &std::path::Path) -> String {
    match path.strip_prefix(root) {
        Ok(rel) if rel.as_os_str().is_empty() => ".".to_owned(),
        Ok(rel) => rel.display().to_string(),
        Err(_) => path.display().to_string(),
    }
}

/// `1 file`, `2 files`: `n` and `noun`, plural unless `n` is 1.
pub fn count(n: u64, noun: &str) -> String {
    if n == 1 { format!("1 {noun}") } else { format!("{n} {noun}s") }
}

/// Bytes a sample holds in memory: its tensors' bytes, bytes fields and JSON texts.
pub fn sample_bytes(sample: &Sample) -> u64 {
    sample
        .fields()
        .map(|(_, value)| match value {
            Value::Tensor(t) => t.bytes().len() as u64,
            Value::Bytes(b) => b.len() as u64,
            Value::Json(text) => text.len() as u64,
            Value::Null => 0,
        })
        .sum()
}

/// Per tensor field, the distinct shapes a sample read saw (a few).
pub type ShapesSeen = Vec<(String, Vec<Vec<usize>>)>;

/// The memory every sample of `reader` takes, read from every key up to [`MEMORY_SAMPLE`] of
/// `keys` and projected from a seeded sample beyond; and the shapes seen per tensor field (up to
/// 4), for a schema that records none ([`note_shapes_seen`]). A sample that cannot be read is
/// left out; `None` when none could be read.
pub fn projected_memory<R: Reader + ?Sized>(
    reader: &R,
    keys: &[String],
) -> (Option<Memory>, ShapesSeen) {
    if keys.is_empty() {
        return (Some(Memory { bytes: 0, basis: "no samples".into() }), Vec::new());
    }
    let fraction = (MEMORY_SAMPLE as f64 / keys.len() as f64).min(1.0);
    let chosen = Selection { fraction: Some(fraction), seed: 0 }.select(keys);
    let mut bytes = 0u64;
    let mut read = 0u64;
    let mut shapes: ShapesSeen = Vec::new();
    for key in &chosen {
        let Ok(Some(sample)) = reader.get(key) else { continue };
        read += 1;
        bytes += sample_bytes(&sample);
        for (name, value) in sample.fields() {
            let Value::Tensor(t) = value else { continue };
            let at = match shapes.iter().position(|(n, _)| n == name) {
                Some(at) => at,
                None => {
                    shapes.push((name.to_owned(), Vec::new()));
                    shapes.len() - 1
                }
            };
            let seen = &mut shapes[at].1;
            if seen.len() < 4 && !seen.iter().any(|s| s.as_slice() == t.shape()) {
                seen.push(t.shape().to_vec());
            }
        }
    }
    if read == 0 {
        return (None, shapes);
    }
    let memory = if read as usize == keys.len() {
        Memory {
            bytes,
            basis: format!(
                "every sample's tensors, bytes and JSON, read: {}",
                count(read, "sample")
            ),
        }
    } else {
        Memory {
            bytes: (bytes as f64 / read as f64 * keys.len() as f64).round() as u64,
            basis: format!("projected from a seeded sample of {} of {} samples", read, keys.len()),
        }
    };
    (Some(memory), shapes)
}

/// Notes the shapes seen ([`projected_memory`]) on the fields of a schema that records none:
/// `seen (2, 3) (4, 3)`.
pub fn note_shapes_seen(description: &mut Description, shapes: &ShapesSeen) {
    for (field, seen) in shapes {
        let list: Vec<String> = seen.iter().map(|s| shape::display(s)).collect();
        description.note(field, format!("seen {}", list.join(" ")));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Tensor;

    #[test]
    fn roles_come_from_the_function_and_groups_from_prefixes() {
        let roles =
            FileRoles::by(
                |name| {
                    if name.ends_with(".npy") { "collection".into() } else { String::new() }
                },
            )
            .with_group(&["store_data/", "stage_data/"], "empty marker file");
        assert_eq!(roles.role("data/10/a.npy"), "collection");
        assert_eq!(roles.role("records.log"), "");
        assert_eq!(roles.group_of("stage_data/10/a.npy"), Some(0));
        assert_eq!(roles.group_of("data/10/a.npy"), None);
        assert_eq!(FileRoles::default().role("x"), "");
    }

    #[test]
    fn a_new_description_claims_nothing() {
        let d = Description::new("unknown");
        assert_eq!(d.checksums.scheme, "none");
        assert_eq!(d.integrity, Integrity::NotChecked("not checked".into()));
        assert!(d.failure.is_none() && d.memory.is_none() && d.finalized.is_none());
    }

    #[test]
    fn shapes_seen_become_notes_and_the_last_note_wins() {
        let mut d = Description::new("x");
        d.note("a", "stored as <f4");
        note_shapes_seen(&mut d, &vec![("a".to_owned(), vec![vec![2, 3], vec![4]])]);
        assert_eq!(d.note_of("a"), Some("seen (2, 3) (4,)"));
        assert_eq!(d.note_of("b"), None);
    }

    #[test]
    fn sample_bytes_count_every_kind_of_value() {
        let sample = Sample::new()
            .with("t", Tensor::from_slice(&[2], &[1f32, 2.]).unwrap())
            .with("b", Value::Bytes(vec![1u8, 2, 3].into()))
            .with("j", Value::Json("{}".into()))
            .with("n", Value::Null);
        assert_eq!(sample_bytes(&sample), 8 + 3 + 2);
    }

    #[test]
    fn unopened_keeps_the_error_and_reports_only_damage() {
        let format = crate::Format { id: "x-fmt", description: "x", signature: "y" };
        let mut damaged = ValidationReport::default();
        damaged.problem(None, None, "torn");
        let d = Description::unopened("x", &format, Some(damaged), Error::invalid("bad"));
        assert!(matches!(d.integrity, Integrity::Checked { .. }));
        assert_eq!(d.errors, ["invalid argument: bad"]);
        assert!(d.failure.is_some());
        let clean = Some(ValidationReport::default());
        let d = Description::unopened("x", &format, clean, Error::invalid("bad"));
        assert_eq!(
            d.integrity,
            Integrity::NotChecked("cannot be opened (the error follows)".into())
        );
        assert_eq!(d.format_name.as_deref(), Some("x-fmt"));
    }
}
