//! One writer at a time (or, with `concurrent_writers`, many that keep every put); many readers
//! at once.

use super::{build, check_samples, open_read_only, put_samples};
use crate::check::{expect_err, ok};
use crate::generate::{basic_schema, compare_sample};
use crate::{CaseContext, CaseResult, Failure, Outcome};
use stowage_core::{Error, OpenMode};

/// While a writer holds a cache, a second append-open and a create are refused with
/// `Error::Locked` (create may say `AlreadyExists`), readers still open and read what was flushed,
/// and once the writer is dropped the next writer gets in.
///
/// A backend that declares `concurrent_writers` is checked for the opposite instead
/// (`open.concurrent-writers-keep-every-put`): two writers at once, and every flushed put kept.
pub fn second_writer_is_refused(ctx: &CaseContext<'_>) -> CaseResult {
    if ctx.caps().concurrent_writers {
        return concurrent_writers_keep_every_put(ctx);
    }
    let schema = basic_schema(ctx.caps());
    let path = ctx.cache_path("c");
    let mut writer = ok("create", ctx.factory.create(&path, &schema))?;
    let written = put_samples(&mut *writer, &schema, 0..10)?;
    ok("flush", writer.flush())?;
    expect_err(
        "second writer (append-open while a writer holds the cache)",
        "Error::Locked",
        ctx.factory.open(&path, OpenMode::Append).map(|_| ()),
        |e| matches!(e, Error::Locked { .. }),
    )
    .map_err(|f| f.clause("open.append-takes-the-lock"))?;
    expect_err(
        "create over a cache a writer holds",
        "Error::Locked or Error::AlreadyExists",
        ctx.factory.create(&path, &schema).map(|_| ()),
        |e| matches!(e, Error::Locked { .. } | Error::AlreadyExists { .. }),
    )
    .map_err(|f| f.clause("create.takes-the-lock"))?;
    let reader = open_read_only(ctx, &path).map_err(|f| {
        f.within("while a writer holds the cache").clause("open.read-only-takes-no-lock")
    })?;
    check_samples(&*reader, &written)
        .map_err(|f| f.within("a reader while a writer holds the cache"))?;
    drop(writer);
    ok(
        "append-open after the writer is dropped (the lock must be free)",
        ctx.factory.open(&path, OpenMode::Append),
    )
    .map_err(|f| f.clause("open.append-takes-the-lock"))?;
    Ok(Outcome::Passed)
}

/// With `concurrent_writers`: a created handle and an append-open of the same cache both put
/// distinct keys and flush, in turns; `create` over the cache is `Error::AlreadyExists`; a
/// read-only handle opened while both write reads everything flushed so far; and once both are
/// dropped, a fresh read-only handle reads every key of both, with its exact sample.
fn concurrent_writers_keep_every_put(ctx: &CaseContext<'_>) -> CaseResult {
    const CLAUSE: &str = "open.concurrent-writers-keep-every-put";
    let schema = basic_schema(ctx.caps());
    let path = ctx.cache_path("c");
    let mut first = ok("create", ctx.factory.create(&path, &schema))?;
    let mut written = put_samples(&mut *first, &schema, 0..10)?;
    ok("flush of the first writer", first.flush())?;
    let mut second = ok(
        "append-open while another writer holds the cache (concurrent_writers declared)",
        ctx.factory.open(&path, OpenMode::Append),
    )
    .map_err(|f| f.clause(CLAUSE))?;
    written.extend(put_samples(&mut *second, &schema, 10..20)?);
    ok("flush of the second writer", second.flush()).map_err(|f| f.clause(CLAUSE))?;
    written.extend(put_samples(&mut *first, &schema, 20..25)?);
    ok("second flush of the first writer", first.flush()).map_err(|f| f.clause(CLAUSE))?;
    expect_err(
        "create over a cache two writers hold (concurrent_writers declared)",
        "Error::AlreadyExists",
        ctx.factory.create(&path, &schema).map(|_| ()),
        |e| matches!(e, Error::AlreadyExists { .. }),
    )
    .map_err(|f| f.clause("create.takes-the-lock"))?;
    let reader = open_read_only(ctx, &path).map_err(|f| {
        f.within("while two writers hold the cache").clause("open.read-only-takes-no-lock")
    })?;
    check_samples(&*reader, &written).map_err(|f| {
        f.within("a reader opened while two writers hold the cache, after both flushed")
            .clause(CLAUSE)
    })?;
    drop((first, second, reader));
    check_samples(&*open_read_only(ctx, &path)?, &written).map_err(|f| {
        f.within("a reader opened once both writers (each with flushed puts) were dropped")
            .clause(CLAUSE)
    })?;
    Ok(Outcome::Passed)
}

/// Eight threads share one read-only handle and two more handles read at the same time; every
/// thread sees every sample intact.
pub fn concurrent_readers_see_identical_samples(ctx: &CaseContext<'_>) -> CaseResult {
    if !ctx.caps().concurrent_readers {
        return Ok(Outcome::Skipped("concurrent_readers not declared".into()));
    }
    let schema = basic_schema(ctx.caps());
    let (path, written) = build(ctx, "c", &schema, 300, true)?;
    let shared = open_read_only(ctx, &path)?;
    let extra = [open_read_only(ctx, &path)?, open_read_only(ctx, &path)?];
    let results: Vec<Result<(), Failure>> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..10)
            .map(|t| {
                let reader = if t < 8 { &shared } else { &extra[t - 8] };
                let written = &written;
                scope.spawn(move || -> Result<(), Failure> {
                    for round in 0..3 {
                        for i in 0..written.len() {
                            let (key, want) = &written[(i * 7 + t * 31 + round) % written.len()];
                            let got = ok(&format!("get {key:?}"), reader.get(key))
                                .map_err(|f| f.within(format!("reader thread {t}")))?;
                            compare_sample(key, want, got.as_ref())
                                .map_err(|f| f.within(format!("reader thread {t}")))?;
                        }
                    }
                    Ok(())
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|_| Err(Failure::panicked("in a reader thread"))))
            .collect()
    });
    results.into_iter().collect::<Result<Vec<()>, Failure>>()?;
    check_samples(&*shared, &written)?;
    Ok(Outcome::Passed)
}

/// A read-only handle opened while a writer holds the cache (with samples flushed, more pending)
/// keeps serving what it opened with after that writer flushes more and finalizes (a finalize
/// may remove or replace the files the handle found): every sample flushed before the open reads
/// back exact, `contains` and `keys` list it, and `validate(Full)` is clean.
pub fn read_only_handle_outlives_the_writers_finalize(ctx: &CaseContext<'_>) -> CaseResult {
    const CLAUSE: &str = "open.read-only-outlives-finalize";
    let schema = basic_schema(ctx.caps());
    let path = ctx.cache_path("c");
    let mut writer = ok("create", ctx.factory.create(&path, &schema))?;
    let mut flushed = Vec::new();
    for part in [0..40, 40..80] {
        flushed.extend(put_samples(&mut *writer, &schema, part)?);
        ok("flush", writer.flush())?;
    }
    put_samples(&mut *writer, &schema, 80..90)?;
    let reader = open_read_only(ctx, &path).map_err(|f| {
        f.within("while a writer holds the cache").clause("open.read-only-takes-no-lock")
    })?;
    put_samples(&mut *writer, &schema, 90..100)?;
    ok("flush after the reader opened", writer.flush())?;
    ok("finalize after the reader opened", writer.finalize())?;
    drop(writer);
    let within = "a read-only handle opened before the writer finalized, read after it";
    for (key, want) in &flushed {
        let got = ok(&format!("get {key:?}"), reader.get(key))
            .map_err(|f| f.within(within).clause(CLAUSE))?;
        compare_sample(key, want, got.as_ref()).map_err(|f| f.within(within).clause(CLAUSE))?;
        crate::ensure!(
            ok("contains", reader.contains(key)).map_err(|f| f.within(within).clause(CLAUSE))?,
            format!("contains({key:?}) of {within}"),
            expected: "true",
            got: "false",
            clause: CLAUSE
        );
    }
    let keys = ok("keys", reader.keys()).map_err(|f| f.within(within).clause(CLAUSE))?;
    let listed: std::collections::HashSet<&str> = keys.iter().map(String::as_str).collect();
    if let Some((key, _)) = flushed.iter().find(|(key, _)| !listed.contains(key.as_str())) {
        return Err(Failure::new(
            format!("keys() of {within}"),
            format!("every key flushed before the open, {key:?} among them"),
            format!("{} keys without {key:?}", keys.len()),
        )
        .clause(CLAUSE));
    }
    let report = ok("validate(Full)", reader.validate(stowage_core::ValidationLevel::Full))
        .map_err(|f| f.within(within).clause(CLAUSE))?;
    crate::ensure!(
        report.is_clean(),
        format!("validate(Full) of {within}"),
        expected: "no problem",
        got: format!("{:?}", report.problems),
        clause: CLAUSE
    );
    Ok(Outcome::Passed)
}
