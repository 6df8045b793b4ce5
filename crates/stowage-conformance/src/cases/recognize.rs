//! `recognize`: a factory knows its own caches, leaves every other path to the next factory,
//! obeys the stowage markers, and never writes. Files are planted and watched through the
//! context's [`crate::storage::CacheStorage`].

use super::build;
use crate::generate::basic_schema;
use crate::{CaseContext, CaseResult, Failure, Outcome, ensure};
use std::path::Path;
use stowage_core::file_safety::AppendLog;
use stowage_core::{Format, Result};

/// Runs `recognize` on `path` and checks that it changed nothing below `watched` (the path, or
/// its directory when it is a file), as the storage sees it.
fn recognize_without_writing(
    ctx: &CaseContext<'_>,
    path: &Path,
    watched: &Path,
    what: &str,
) -> std::result::Result<Result<Option<&'static Format>>, Failure> {
    let storage = ctx.storage();
    let reading = |e| Failure::new(format!("reading {}", watched.display()), "success", e);
    let snapshot = || storage.snapshot(watched).map_err(reading);
    let exists = || storage.exists(watched).map_err(reading);
    let before = if exists()? { Some(snapshot()?) } else { None };
    let result = ctx.factory.recognize(path);
    let changes = match &before {
        Some(before) => before.changes(&snapshot()?),
        None if exists()? => vec![format!("{} created", watched.display())],
        None => Vec::new(),
    };
    ensure!(
        changes.is_empty(),
        format!("recognize of {what}"),
        expected: "no file changed",
        got: changes.join("; "),
        clause: "recognize.never-writes"
    );
    Ok(result)
}

/// A format for messages: its id, or `None`.
fn shown(result: &Result<Option<&'static Format>>) -> String {
    match result {
        Ok(Some(format)) => format!("Ok(Some({:?}))", format.id),
        Ok(None) => "Ok(None)".into(),
        Err(e) => format!("Err({e})"),
    }
}

/// Writes `bytes` to the object `name` of `dir`, as the suite's own setup.
fn write(
    ctx: &CaseContext<'_>,
    dir: &Path,
    name: &str,
    bytes: &[u8],
) -> std::result::Result<(), Failure> {
    ctx.storage()
        .write(dir, name, bytes)
        .map_err(|e| Failure::new(format!("writing {}", dir.join(name).display()), "success", e))
}

/// The factory recognizes every cache it creates, flushed and finalized, as its own format (the
/// first of `formats()`), and returns `Ok(None)` for an empty directory, a directory of
/// unrelated files, a plain file and a path that does not exist; recognizing writes nothing.
pub fn recognize_finds_own_caches(ctx: &CaseContext<'_>) -> CaseResult {
    let formats = ctx.factory.formats();
    let Some(own) = formats.first() else {
        return Err(Failure::new("formats()", "the factory's own format first", "an empty list")
            .clause("recognize.own-caches"));
    };
    let schema = basic_schema(ctx.caps());
    for (stage, finalize) in [("a flushed cache", false), ("a finalized cache", true)] {
        let (path, _) = build(ctx, &format!("c{finalize}"), &schema, 5, finalize)?;
        let got = recognize_without_writing(ctx, &path, &path, stage)?;
        ensure!(
            matches!(got, Ok(Some(format)) if format.id == own.id),
            format!("recognize of {stage} this factory created"),
            expected: format!("Ok(Some({:?})), the first of formats()", own.id),
            got: shown(&got),
            clause: "recognize.own-caches"
        );
    }
    let empty = ctx.cache_path("empty");
    ctx.storage()
        .make_empty(&empty)
        .map_err(|e| Failure::new(format!("creating {}", empty.display()), "success", e))?;
    let unrelated = ctx.cache_path("unrelated");
    write(ctx, &unrelated, "notes.txt", b"shopping list\n")?;
    write(ctx, &unrelated, "data.bin", &[0x5a; 4096])?;
    write(ctx, &unrelated, "misc/readme.md", b"# not a cache\n")?;
    let file = unrelated.join("notes.txt");
    let missing = ctx.cache_path("does-not-exist");
    for (path, watched, what) in [
        (&empty, &empty, "an empty directory"),
        (&unrelated, &unrelated, "a directory of unrelated files"),
        (&file, &unrelated, "a plain text file"),
        (&missing, &missing, "a path that does not exist"),
    ] {
        let got = recognize_without_writing(ctx, path, watched, what)?;
        ensure!(
            matches!(got, Ok(None)),
            format!("recognize of {what}"),
            expected: "Ok(None): not a cache of this factory",
            got: shown(&got),
            clause: "recognize.own-caches"
        );
    }
    Ok(Outcome::Passed)
}

/// Copies the cache at `from` to `to` and removes its stowage markers, so that the caller can
/// plant one of its own.
fn copy_without_markers(
    ctx: &CaseContext<'_>,
    from: &Path,
    to: &Path,
) -> std::result::Result<(), Failure> {
    let storage = ctx.storage();
    storage
        .copy_cache(from, to)
        .map_err(|e| Failure::new(format!("copying {}", from.display()), "success", e))?;
    for marker in ["stowage.json", "stowage.log"] {
        match storage.remove(to, marker) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                return Err(Failure::new(format!("removing {marker} of the copy"), "success", e));
            }
            _ => {}
        }
    }
    Ok(())
}

/// A stowage marker decides, whatever else the directory holds: in a copy of one of the
/// factory's caches, a `stowage.json` naming another format, or a `stowage.log` (without a
/// `stowage.json`) whose header names another format, makes `recognize` return `Ok(None)`; a
/// `stowage.json` that does not parse (in the copy, and alone in a directory) is an `Err`,
/// never guessed around.
pub fn recognize_follows_the_marker(ctx: &CaseContext<'_>) -> CaseResult {
    let schema = basic_schema(ctx.caps());
    let (path, _) = build(ctx, "c", &schema, 5, true)?;
    let other = format!("not-{}", ctx.backend());

    let json = ctx.cache_path("other-json");
    copy_without_markers(ctx, &path, &json)?;
    write(ctx, &json, "stowage.json", format!("{{\"format\": {other:?}}}").as_bytes())?;
    let log = ctx.cache_path("other-log");
    copy_without_markers(ctx, &path, &log)?;
    let header = format!("{{\"cache\": {{\"format\": {other:?}}}}}");
    write(ctx, &log, "stowage.log", &append_log(header.as_bytes())?)?;
    for (dir, what) in [
        (&json, format!("a copy of its cache with a stowage.json naming {other:?}")),
        (&log, format!("a copy of its cache with only a stowage.log naming {other:?}")),
    ] {
        let got = recognize_without_writing(ctx, dir, dir, &what)?;
        ensure!(
            matches!(got, Ok(None)),
            format!("recognize of {what}"),
            expected: "Ok(None): the marker names another format",
            got: shown(&got),
            clause: "recognize.marker-decides"
        );
    }

    let garbage = ctx.cache_path("garbage-json");
    copy_without_markers(ctx, &path, &garbage)?;
    write(ctx, &garbage, "stowage.json", b"{\"format\": \"half a docu")?;
    let alone = ctx.cache_path("garbage-alone");
    write(ctx, &alone, "stowage.json", b"\x00\x01 not json at all")?;
    for (dir, what) in [
        (&garbage, "a copy of its cache with a stowage.json that does not parse"),
        (&alone, "a directory holding only a stowage.json that does not parse"),
    ] {
        let got = recognize_without_writing(ctx, dir, dir, what)?;
        ensure!(
            got.is_err(),
            format!("recognize of {what}"),
            expected: "Err: a marker that cannot be read is never guessed around",
            got: shown(&got),
            clause: "recognize.unreadable-marker-is-error"
        );
    }
    Ok(Outcome::Passed)
}

/// The bytes of a new `stowage.log` holding only `header` (made in a scratch directory, so
/// that any storage can hold a copy).
fn append_log(header: &[u8]) -> std::result::Result<Vec<u8>, Failure> {
    let failed =
        |e: String| Failure::new("writing a stowage.log naming another format", "success", e);
    let scratch = tempfile::tempdir().map_err(|e| failed(e.to_string()))?;
    let file = scratch.path().join("stowage.log");
    AppendLog::create_new(&file, header).map_err(|e| failed(e.to_string()))?;
    std::fs::read(&file).map_err(|e| failed(e.to_string()))
}
