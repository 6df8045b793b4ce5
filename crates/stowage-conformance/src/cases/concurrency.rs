//! One writer at a time; many readers at once.

use super::{build, check_samples, open_read_only, put_samples};
use crate::check::{expect_err, ok};
use crate::generate::{basic_schema, compare_sample};
use crate::{CaseContext, CaseResult, Failure, Outcome};
use stowage_core::{Error, OpenMode};

/// While a writer holds a cache, a second append-open and a create are refused with
/// `Error::Locked` (create may say `AlreadyExists`), readers still open and read what was flushed,
/// and once the writer is dropped the next writer gets in.
pub fn second_writer_is_refused(ctx: &CaseContext<'_>) -> CaseResult {
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
