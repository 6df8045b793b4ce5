//! Capabilities as a whole: what an instance declares against its factory, and `max_rank`.

use super::{build, check_samples, open_read_only};
use crate::check::{expect_unsupported, is_unsupported_from, ok};
use crate::generate::basic_dtype;
use crate::{CaseContext, CaseResult, Failure, Outcome, ensure};
use stowage_core::{Capabilities, DynReader, OpenMode, Schema, ShapeRule};

/// The capability fields where `got` differs from `want`, as `field: want -> got`.
fn differences(want: &Capabilities, got: &Capabilities) -> Vec<String> {
    let mut out = Vec::new();
    let mut field = |name: &str, a: String, b: String| {
        if a != b {
            out.push(format!("{name}: {a} -> {b}"));
        }
    };
    macro_rules! fields {
        ($($name:ident),*) => {
            $(field(stringify!($name), format!("{:?}", want.$name), format!("{:?}", got.$name));)*
        };
    }
    fields!(
        variable_shapes,
        ragged,
        nullable,
        bytes_fields,
        json_fields,
        overwrite,
        append_after_finalize,
        resume,
        checksums,
        zero_copy_get,
        durable_flush,
        concurrent_readers,
        concurrent_writers,
        dtypes,
        max_rank,
        max_key_bytes,
        max_fields
    );
    if out.is_empty() && want != got {
        out.push("a field this suite does not know".into());
    }
    out
}

/// `handle` declares exactly the factory's capabilities, and its name is the factory's.
fn matches_factory(ctx: &CaseContext<'_>, handle: &DynReader, which: &str) -> Result<(), Failure> {
    let want = ctx.factory.capabilities();
    let diff = differences(&want, handle.capabilities());
    ensure!(
        diff.is_empty(),
        format!("capabilities() of {which}"),
        expected: "the factory's capabilities()",
        got: format!("differences (factory -> instance): {}", diff.join(", ")),
        clause: "capabilities.match-factory"
    );
    ensure!(
        handle.name() == ctx.factory.name(),
        format!("name() of {which}"),
        expected: format!("{:?}, the factory's name()", ctx.factory.name()),
        got: format!("{:?}", handle.name()),
        clause: "errors.unsupported-names-backend"
    );
    Ok(())
}

/// A cache declares exactly its factory's capabilities (and name) however it was obtained:
/// created, opened for appending and opened read-only, unfinished and finalized. (A backend
/// without `resume` may refuse to append-open an unfinished cache.)
pub fn capabilities_match_the_factory(ctx: &CaseContext<'_>) -> CaseResult {
    let schema = crate::generate::basic_schema(ctx.caps());
    let cache = ok("create", ctx.factory.create(&ctx.cache_path("created"), &schema))?;
    matches_factory(ctx, &*cache, "a created cache")?;
    drop(cache);
    for (stage, finalize) in [("an unfinished", false), ("a finalized", true)] {
        let (path, _) = build(ctx, &format!("c{finalize}"), &schema, 3, finalize)?;
        let what = format!("append-open of {stage} cache");
        match ctx.factory.open(&path, OpenMode::Append) {
            Ok(appender) => {
                matches_factory(ctx, &*appender, &format!("{stage} cache opened for appending"))?
            }
            Err(e)
                if !finalize
                    && !ctx.caps().resume
                    && is_unsupported_from(ctx.backend(), &what, &e)? => {}
            Err(e) => return Err(Failure::new(what, "success", format!("an error: {e}"))),
        }
        let reader = open_read_only(ctx, &path)?;
        matches_factory(ctx, &*reader, &format!("{stage} cache opened read-only"))?;
    }
    Ok(Outcome::Passed)
}

/// A fixed shape of `rank` dimensions, small (2 along the first two, 1 along the rest).
fn shape_of_rank(rank: usize) -> Vec<usize> {
    (0..rank).map(|i| if i < 2 { 2 } else { 1 }).collect()
}

/// `max_rank` is what the backend enforces: with `Some(n)`, a tensor of rank n round-trips and
/// `create` refuses rank n + 1 with `Error::Unsupported`, leaving no cache; with `None`, a
/// rank-8 tensor round-trips.
pub fn max_rank_is_enforced(ctx: &CaseContext<'_>) -> CaseResult {
    let d = basic_dtype(ctx.caps());
    let schema_of =
        |rank: usize| Schema::new().tensor("t", d, ShapeRule::Fixed(shape_of_rank(rank)));
    let round_trip = |rank: usize, why: &str| -> Result<(), Failure> {
        let declared = |f: Failure| {
            f.within(format!("a rank-{rank} tensor ({why})")).clause("capabilities.max-rank")
        };
        let (path, written) =
            build(ctx, &format!("rank{rank}"), &schema_of(rank), 4, true).map_err(declared)?;
        check_samples(&*open_read_only(ctx, &path)?, &written).map_err(declared)
    };
    let Some(max) = ctx.caps().max_rank else {
        round_trip(8, "max_rank is None: no limit")?;
        return Ok(Outcome::Passed);
    };
    round_trip(max, &format!("max_rank is Some({max})"))?;
    let over = max + 1;
    let path = ctx.cache_path(&format!("rank{over}"));
    expect_unsupported(
        ctx.backend(),
        &format!("create with a rank-{over} tensor (max_rank is Some({max}))"),
        ctx.factory.create(&path, &schema_of(over)).map(|_| ()),
    )
    .map_err(|f| f.clause("capabilities.max-rank"))?;
    ensure!(
        ctx.factory.open(&path, OpenMode::ReadOnly).is_err(),
        format!("open of {} after a refused create", path.display()),
        expected: "an error: the refused create creates nothing",
        got: "an openable cache",
        clause: "create.unsupported-schema-creates-nothing"
    );
    Ok(Outcome::Passed)
}
