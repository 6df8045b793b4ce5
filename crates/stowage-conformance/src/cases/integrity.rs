//! Integrity: validate on clean caches, and corrupted copies (flipped bytes, truncated and deleted
//! files) that must be reported and never returned as data; stray files that must be ignored.
//! Every file is reached through the context's [`crate::storage::CacheStorage`].

use super::{Written, build, check_samples, open_read_only};
use crate::check::ok;
use crate::corrupt::spread_offsets;
use crate::generate::{basic_dtype, basic_schema, compare_sample};
use crate::storage::{CacheStorage, join};
use crate::{CaseContext, CaseResult, Failure, Outcome, ensure};
use std::path::Path;
use stowage_core::{Error, OpenMode, Schema, ShapeRule, ValidationLevel};

/// The schema the corruption cases use: the basic field plus a variable-shape one when declared.
fn integrity_schema(ctx: &CaseContext<'_>) -> Schema {
    let schema = basic_schema(ctx.caps());
    if ctx.caps().variable_shapes {
        schema.tensor("v", basic_dtype(ctx.caps()), ShapeRule::Max(vec![6, 5]))
    } else {
        schema
    }
}

/// `validate` at both levels finds nothing on a clean cache, finalized or only flushed.
pub fn validate_clean_cache_reports_no_problem(ctx: &CaseContext<'_>) -> CaseResult {
    let schema = integrity_schema(ctx);
    for finalize in [false, true] {
        let (path, written) = build(ctx, &format!("c{finalize}"), &schema, 30, finalize)?;
        let reader = open_read_only(ctx, &path)?;
        for level in [ValidationLevel::Structure, ValidationLevel::Full] {
            let report = ok("validate", reader.validate(level))?;
            ensure!(
                report.is_clean(),
                format!("validate({level:?}) of a clean cache (finalized: {finalize})"),
                expected: "no problem",
                got: format!("{:?}", report.problems)
            );
        }
        check_samples(&*reader, &written)?;
    }
    Ok(Outcome::Passed)
}

/// What one corrupted copy showed.
struct Verdict {
    /// Open, get or validate noticed something.
    detected: bool,
}

/// Opens the corrupted copy at `path` and checks the two rules: `get` returns exactly the written
/// sample or an error (never other bytes), and whenever `get` noticed something, so does
/// `validate(Full)`.
fn examine(
    ctx: &CaseContext<'_>,
    path: &Path,
    written: &Written,
    what: &str,
) -> Result<Verdict, Failure> {
    let reader = match ctx.factory.open(path, OpenMode::ReadOnly) {
        Ok(r) => r,
        Err(_) => return Ok(Verdict { detected: true }),
    };
    let mut get_noticed = None;
    for (key, want) in written {
        match reader.get(key) {
            Ok(Some(got)) => compare_sample(key, want, Some(&got)).map_err(|f| {
                Failure { expected: format!("{}, or an error", f.expected), ..f.within(what) }
                    .clause("get.corruption-is-an-error")
            })?,
            Ok(None) => get_noticed = Some(format!("key {key:?} vanished")),
            Err(Error::Corrupted { key: Some(named), .. }) if named != *key => {
                return Err(Failure::new(
                    format!("{what}: get {key:?}"),
                    format!("Error::Corrupted naming the key {key:?} (or none)"),
                    format!("Error::Corrupted naming the key {named:?}"),
                )
                .clause("get.corruption-is-an-error"));
            }
            Err(e) => get_noticed = Some(e.to_string()),
        }
    }
    let report = reader.validate(ValidationLevel::Full).map_err(|e| {
        Failure::new(format!("{what}: validate(Full)"), "a report", format!("an error: {e}"))
            .clause("validate.reports-what-get-detects")
    })?;
    if let Some(seen) = &get_noticed {
        ensure!(
            !report.is_clean(),
            format!("{what}: validate(Full) after get noticed ({seen})"),
            expected: "a problem reported",
            got: "a clean report",
            clause: "validate.reports-what-get-detects"
        );
    }
    Ok(Verdict { detected: get_noticed.is_some() || !report.is_clean() })
}

/// Builds the pristine cache for a corruption case, or explains why the case does not apply.
fn pristine(
    ctx: &CaseContext<'_>,
) -> Result<Result<(std::path::PathBuf, Written), Outcome>, Failure> {
    if !ctx.caps().checksums {
        return Ok(Err(Outcome::Skipped(
            "checksums not declared: corruption cannot be detected".into(),
        )));
    }
    Ok(Ok(build(ctx, "pristine", &integrity_schema(ctx), 40, true)?))
}

/// Corrupts the object `name` of the cache `cache` in `storage`, with one argument (an offset,
/// a length).
type Corruptor = fn(&dyn CacheStorage, &Path, &str, u64) -> std::io::Result<()>;

/// Runs `corrupt` on a fresh copy of the pristine cache for each target file, and requires that
/// every copy is detected when `must_detect_each`, or at least one copy per file otherwise.
fn corruption_case(
    ctx: &CaseContext<'_>,
    label: &str,
    variants: impl Fn(u64) -> Vec<u64>,
    corrupt: Corruptor,
    must_detect_each: bool,
) -> CaseResult {
    let (path, written) = match pristine(ctx)? {
        Ok(built) => built,
        Err(skip) => return Ok(skip),
    };
    let storage = ctx.storage();
    let files = storage.data_objects(&path).map_err(|e| io_failure("listing", &path, e))?;
    ensure!(
        !files.is_empty(),
        format!("the files of the finalized cache at {} ({})", path.display(), storage.name()),
        expected: "at least one file",
        got: "none"
    );
    let mut trial = 0;
    for name in &files {
        let bytes =
            storage.read(&path, name).map_err(|e| io_failure("reading", &path.join(name), e))?;
        let len = bytes.len() as u64;
        let mut detected_any = false;
        for arg in variants(len) {
            trial += 1;
            let copy = ctx.cache_path(&format!("trial{trial}"));
            storage.copy_cache(&path, &copy).map_err(|e| io_failure("copying", &path, e))?;
            corrupt(storage, &copy, name, arg)
                .map_err(|e| io_failure("corrupting", &copy.join(name), e))?;
            let what = format!("{label} {name} at {arg}");
            let verdict = examine(ctx, &copy, &written, &what)?;
            ensure!(
                !must_detect_each || verdict.detected,
                &what,
                expected: "reported by open, get or validate(Full)",
                got: "not reported",
                clause: "validate.reports-what-get-detects"
            );
            detected_any |= verdict.detected;
            let _ = storage.remove_cache(&copy);
        }
        ensure!(
            detected_any,
            format!("{label} {name} ({len} bytes) at spread offsets"),
            expected: "at least one of the corruptions reported by open, get or validate(Full)",
            got: "none reported",
            clause: "validate.reports-what-get-detects"
        );
    }
    Ok(Outcome::Passed)
}

/// Spread flips per file on local files, where a trial costs a directory copy.
const FLIPS_LOCAL: u64 = 16;
/// Spread flips per object on other storages (an object store), where each trial copies the
/// whole cache through the store: still the first and the last byte and two between them, so
/// every object's head, body and tail is hit (deterministically, the same offsets every run).
const FLIPS_REMOTE: u64 = 4;

/// A flipped byte in any file: `get` never returns other bytes, and for each file at least one of
/// the spread flips (16 on local files, 4 on other storages, always the first and the last byte)
/// is reported (flips in unused preallocated space may be harmless).
pub fn flipped_byte_is_detected(ctx: &CaseContext<'_>) -> CaseResult {
    let flips = if ctx.storage().is_local_files() { FLIPS_LOCAL } else { FLIPS_REMOTE };
    corruption_case(ctx, "byte flipped in", move |len| spread_offsets(len, flips), flip, false)
}

/// XORs the byte at `offset` of an object with 0xff.
fn flip(storage: &dyn CacheStorage, cache: &Path, name: &str, offset: u64) -> std::io::Result<()> {
    let mut bytes = storage.read(cache, name)?;
    let i = usize::try_from(offset).map_err(std::io::Error::other)?;
    let byte = bytes.get_mut(i).ok_or_else(|| std::io::Error::other("offset past end of file"))?;
    *byte ^= 0xff;
    storage.write(cache, name, &bytes)
}

/// A file cut short (to half, and by one byte) is always reported; `get` never returns other bytes.
pub fn truncated_file_is_detected(ctx: &CaseContext<'_>) -> CaseResult {
    corruption_case(
        ctx,
        "truncated",
        |len| vec![len / 2, len - 1],
        |s, c, n, len| s.truncate(c, n, len),
        true,
    )
}

/// A deleted file is always reported; `get` never returns other bytes.
pub fn deleted_file_is_detected(ctx: &CaseContext<'_>) -> CaseResult {
    corruption_case(ctx, "deleted", |_| vec![0], |s, c, n, _| s.remove(c, n), true)
}

/// Files the backend did not write (notes, editor droppings, unknown data-like names) in any of the
/// cache's directories are ignored: same keys, same samples, clean validate.
pub fn stray_files_are_ignored(ctx: &CaseContext<'_>) -> CaseResult {
    let schema = integrity_schema(ctx);
    let (path, written) = build(ctx, "c", &schema, 20, true)?;
    let storage = ctx.storage();
    let dirs = storage.directories(&path).map_err(|e| io_failure("listing", &path, e))?;
    for dir in &dirs {
        for (name, content) in
            [("notes.txt", &b"hello"[..]), (".DS_Store", b"\0\0\x01"), ("zz-stray.bin", b"junk")]
        {
            let stray = join(dir, name);
            storage
                .write(&path, &stray, content)
                .map_err(|e| io_failure("writing", &path.join(&stray), e))?;
        }
        let stray = path.join(join(dir, "stray-dir"));
        storage.make_empty(&stray).map_err(|e| io_failure("creating", &stray, e))?;
    }
    let reader = open_read_only(ctx, &path)?;
    check_samples(&*reader, &written)?;
    let report = ok("validate", reader.validate(ValidationLevel::Full))?;
    ensure!(
        report.is_clean(),
        "validate(Full) of a cache with stray files in every directory",
        expected: "no problem",
        got: format!("{:?}", report.problems)
    );
    Ok(Outcome::Passed)
}

/// A failure of the suite's own file handling (copying, corrupting, listing a cache), naming
/// the path the factory was handed.
fn io_failure(doing: &str, path: &Path, e: std::io::Error) -> Failure {
    Failure::new(format!("{doing} {}", path.display()), "success", e)
}

/// `validate` at both levels, on a read-only and on an append handle of a flushed and of a
/// finalized cache, changes no file: every entry of the cache keeps its size, modification
/// time (where the storage keeps one) and content, and none is added or removed. (The
/// snapshot is taken once the handle is open: opening for appending may take the lock or
/// finish an interrupted finalize.)
pub fn validate_never_writes(ctx: &CaseContext<'_>) -> CaseResult {
    let schema = integrity_schema(ctx);
    for finalize in [false, true] {
        let (path, _) = build(ctx, &format!("c{finalize}"), &schema, 30, finalize)?;
        for mode in [OpenMode::ReadOnly, OpenMode::Append] {
            let what = format!(
                "validate on a {mode:?} handle of a {} cache",
                if finalize { "finalized" } else { "flushed" }
            );
            let handle = ok(&format!("open {mode:?}"), ctx.factory.open(&path, mode))?;
            let snapshot =
                || ctx.storage().snapshot(&path).map_err(|e| io_failure("reading", &path, e));
            let before = snapshot()?;
            for level in [ValidationLevel::Structure, ValidationLevel::Full] {
                ok(&format!("{what}: validate({level:?})"), handle.validate(level))?;
            }
            let changes = before.changes(&snapshot()?);
            ensure!(
                changes.is_empty(),
                &what,
                expected: "no file changed",
                got: changes.join("; ")
            );
        }
    }
    Ok(Outcome::Passed)
}
