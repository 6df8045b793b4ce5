//! The life of a cache: create, flush, reopen, finalize, resume, read-only handles, bad samples.

use super::{build, check_samples, open_read_only, put_samples};
use crate::check::{expect_err, expect_unsupported, is_unsupported_from, ok};
use crate::generate::{basic_dtype, basic_schema, sample_for};
use crate::{CaseContext, CaseResult, Failure, Outcome, ensure};
use stowage_core::{Error, OpenMode, Sample, Tensor, Value};

/// Samples flushed but never finalized are read back by a read-only handle, with the same schema.
pub fn reopen_after_flush_keeps_samples(ctx: &CaseContext<'_>) -> CaseResult {
    let schema = basic_schema(ctx.caps());
    let (path, written) = build(ctx, "c", &schema, 50, false)?;
    let reader = open_read_only(ctx, &path)?;
    ensure!(
        reader.schema() == &schema,
        "schema() after reopen",
        expected: format!("{schema:?}"),
        got: format!("{:?}", reader.schema()),
        clause: "schema.survives-reopen"
    );
    ensure!(
        !reader.is_finalized(),
        "is_finalized() of a cache that was only flushed",
        expected: "false",
        got: "true",
        clause: "finalize.commits"
    );
    check_samples(&*reader, &written)?;
    Ok(Outcome::Passed)
}

/// A finalized cache reopens complete, with the same schema and samples.
pub fn reopen_after_finalize_keeps_samples(ctx: &CaseContext<'_>) -> CaseResult {
    let schema = basic_schema(ctx.caps());
    let (path, written) = build(ctx, "c", &schema, 50, true)?;
    let reader = open_read_only(ctx, &path)?;
    ensure!(
        reader.schema() == &schema,
        "schema() after reopen",
        expected: format!("{schema:?}"),
        got: format!("{:?}", reader.schema()),
        clause: "schema.survives-reopen"
    );
    ensure!(
        reader.is_finalized(),
        "is_finalized() of a finalized cache after reopen",
        expected: "true",
        got: "false",
        clause: "finalize.commits"
    );
    check_samples(&*reader, &written)?;
    Ok(Outcome::Passed)
}

/// `put` after `finalize` is `Error::Finalized` on the same handle; reopened in append mode it works
/// iff `append_after_finalize` is declared.
pub fn put_after_finalize_is_rejected(ctx: &CaseContext<'_>) -> CaseResult {
    let schema = basic_schema(ctx.caps());
    let path = ctx.cache_path("c");
    let mut cache = ok("create", ctx.factory.create(&path, &schema))?;
    let mut written = put_samples(&mut *cache, &schema, 0..3)?;
    ok("finalize", cache.finalize())?;
    ensure!(
        cache.is_finalized(),
        "is_finalized() right after finalize()",
        expected: "true",
        got: "false",
        clause: "finalize.commits"
    );
    let finalized = |e: &Error| matches!(e, Error::Finalized { .. });
    expect_err(
        "put after finalize",
        "Error::Finalized",
        cache.put("late", &sample_for(&schema, 9)),
        finalized,
    )?;
    drop(cache);

    let mut appender =
        ok("open a finalized cache in append mode", ctx.factory.open(&path, OpenMode::Append))?;
    if ctx.caps().append_after_finalize {
        written.extend(put_samples(&mut *appender, &schema, 3..6)?);
        ok("finalize again", appender.finalize())?;
    } else {
        expect_err(
            "put on a finalized cache reopened in append mode (append_after_finalize not declared)",
            "Error::Finalized",
            appender.put("late", &sample_for(&schema, 9)),
            finalized,
        )?;
    }
    drop(appender);
    check_samples(&*open_read_only(ctx, &path)?, &written)?;
    Ok(Outcome::Passed)
}

/// Samples that break the schema are refused with `Error::SchemaMismatch` and leave no trace, even
/// after flush and reopen.
pub fn schema_violation_writes_nothing(ctx: &CaseContext<'_>) -> CaseResult {
    let schema = basic_schema(ctx.caps());
    let d = basic_dtype(ctx.caps());
    let other = if d == stowage_core::DType::F64 {
        stowage_core::DType::U8
    } else {
        stowage_core::DType::F64
    };
    let zeros = |dtype, dims: &[usize]| Value::Tensor(Tensor::zeros(dtype, dims).expect("small"));
    let bad: Vec<(&str, Sample)> = vec![
        ("wrong shape", Sample::new().with("x", zeros(d, &[3, 4]))),
        ("wrong rank", Sample::new().with("x", zeros(d, &[12]))),
        ("wrong dtype", Sample::new().with("x", zeros(other, &[4, 3]))),
        ("missing field", Sample::new()),
        ("unknown field", sample_for(&schema, 0).with("extra", zeros(d, &[1]))),
        ("bytes instead of tensor", Sample::new().with("x", Value::Bytes(vec![0u8; 48].into()))),
        ("null in a non-nullable field", Sample::new().with("x", Value::Null)),
    ];
    let path = ctx.cache_path("c");
    let mut cache = ok("create", ctx.factory.create(&path, &schema))?;
    let good = sample_for(&schema, 1);
    ok("put good", cache.put("good", &good))?;
    for (what, sample) in &bad {
        expect_err(
            &format!("put of a sample with {what}"),
            "Error::SchemaMismatch",
            cache.put(what, sample),
            |e| matches!(e, Error::SchemaMismatch { .. }),
        )?;
        let got = ok("get", cache.get(what))?;
        ensure!(
            got.is_none(),
            format!("get of the key of a refused put of a sample with {what}"),
            expected: "None",
            got: "the refused sample"
        );
    }
    ensure!(
        cache.len() == 1,
        format!("len() after 1 good and {} refused puts", bad.len()),
        expected: 1,
        got: cache.len()
    );
    ok("finalize", cache.finalize())?;
    drop(cache);
    check_samples(&*open_read_only(ctx, &path)?, &vec![("good".to_string(), good)])?;
    Ok(Outcome::Passed)
}

/// A read-only handle refuses `put`, `flush` and `finalize` with `Error::Unsupported`.
pub fn read_only_handle_rejects_writes(ctx: &CaseContext<'_>) -> CaseResult {
    let schema = basic_schema(ctx.caps());
    for finalize in [false, true] {
        let (path, written) = build(ctx, &format!("c{finalize}"), &schema, 3, finalize)?;
        let mut reader = open_read_only(ctx, &path)?;
        let backend = ctx.backend();
        let stage = if finalize { "finalized" } else { "flushed" };
        expect_unsupported(
            backend,
            &format!("put on a read-only handle ({stage} cache)"),
            reader.put("x", &sample_for(&schema, 5)),
        )?;
        expect_unsupported(
            backend,
            &format!("flush on a read-only handle ({stage} cache)"),
            reader.flush(),
        )?;
        expect_unsupported(
            backend,
            &format!("finalize on a read-only handle ({stage} cache)"),
            reader.finalize(),
        )?;
        check_samples(&*reader, &written)?;
    }
    Ok(Outcome::Passed)
}

/// `create` where a cache already exists is `Error::AlreadyExists`, and the old cache is untouched.
pub fn create_over_existing_cache_is_rejected(ctx: &CaseContext<'_>) -> CaseResult {
    let schema = basic_schema(ctx.caps());
    for finalize in [false, true] {
        let (path, written) = build(ctx, &format!("c{finalize}"), &schema, 3, finalize)?;
        expect_err(
            "create over an existing cache",
            "Error::AlreadyExists",
            ctx.factory.create(&path, &schema).map(|_| ()),
            |e| matches!(e, Error::AlreadyExists { .. }),
        )?;
        check_samples(&*open_read_only(ctx, &path)?, &written)?;
    }
    Ok(Outcome::Passed)
}

/// Opening a directory that holds no cache (absent, or existing and empty: for a storage that
/// is not local files, a location with no objects) is `Error::NotFound`, in both modes.
pub fn open_missing_cache_is_not_found(ctx: &CaseContext<'_>) -> CaseResult {
    let empty = ctx.cache_path("empty");
    ok("mkdir", ctx.storage().make_empty(&empty).map_err(|e| Error::io(&empty, e)))?;
    for path in [ctx.cache_path("absent"), empty] {
        for mode in [OpenMode::ReadOnly, OpenMode::Append] {
            expect_err(
                &format!("open {} ({mode:?})", path.display()),
                "Error::NotFound",
                ctx.factory.open(&path, mode).map(|_| ()),
                |e| matches!(e, Error::NotFound { .. }),
            )?;
        }
    }
    Ok(Outcome::Passed)
}

/// An unfinished cache (flushed, handle dropped) reopened in append mode keeps its samples and takes
/// more iff `resume` is declared; otherwise the reopened handle's `put` is `Error::Unsupported`.
pub fn resume_follows_capability(ctx: &CaseContext<'_>) -> CaseResult {
    let schema = basic_schema(ctx.caps());
    let (path, mut written) = build(ctx, "c", &schema, 20, false)?;
    let opened = ctx.factory.open(&path, OpenMode::Append);
    if !ctx.caps().resume {
        let what = "append-open of an unfinished cache (resume not declared)";
        return match opened {
            Err(e) if is_unsupported_from(ctx.backend(), what, &e)? => Ok(Outcome::Passed),
            Err(e) => {
                Err(Failure::new(what, "Error::Unsupported", format!("a different error: {e}")))
            }
            Ok(mut cache) => {
                expect_unsupported(
                    ctx.backend(),
                    "put on a resumed cache (resume not declared)",
                    cache.put("x", &sample_for(&schema, 99)),
                )?;
                Ok(Outcome::Passed)
            }
        };
    }
    let mut cache = ok("append-open an unfinished cache", opened)?;
    check_samples(&*cache, &written)?;
    written.extend(put_samples(&mut *cache, &schema, 20..40)?);
    ok("finalize", cache.finalize())?;
    drop(cache);
    check_samples(&*open_read_only(ctx, &path)?, &written)?;
    Ok(Outcome::Passed)
}
