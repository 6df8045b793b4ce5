//! Round trips of every dtype, shape rule and field kind; capability checks for each.

use super::{build, check_samples, open_read_only};
use crate::check::{expect_unsupported, ok};
use crate::generate::{basic_dtype, random_tensor};
use crate::{CaseContext, CaseResult, Failure, Outcome, ensure};
use rand::{SeedableRng, rngs::StdRng};
use stowage_core::{DType, FieldKind, FieldSpec, Sample, Schema, ShapeRule, Value};

/// Every dtype the backend declares, in fields of a fixed (3, 2) shape; written, finalized, reopened.
pub fn round_trip_every_dtype(ctx: &CaseContext<'_>) -> CaseResult {
    let per_cache = ctx.caps().max_fields.unwrap_or(usize::MAX).max(1);
    for (n, dtypes) in ctx.caps().dtypes.chunks(per_cache).enumerate() {
        let mut schema = Schema::new();
        for d in dtypes {
            schema = schema.tensor(&format!("f_{}", d.name()), *d, ShapeRule::Fixed(vec![3, 2]));
        }
        let (path, written) = build(ctx, &format!("dtypes{n}"), &schema, 5, true)?;
        check_samples(&*open_read_only(ctx, &path)?, &written)?;
    }
    // An undeclared dtype must be refused at creation.
    if let Some(missing) = DType::ALL.into_iter().find(|d| !ctx.caps().dtypes.contains(d)) {
        let schema = Schema::new().tensor("x", missing, ShapeRule::Fixed(vec![2]));
        expect_unsupported(
            ctx.backend(),
            &format!("create with undeclared dtype {missing}"),
            ctx.factory.create(&ctx.cache_path("undeclared"), &schema).map(|_| ()),
        )
        .map_err(|f| f.clause("capabilities.undeclared-unsupported"))?;
    }
    Ok(Outcome::Passed)
}

/// 0-d tensors and tensors with a zero-length dimension.
pub fn round_trip_scalar_and_zero_length_tensors(ctx: &CaseContext<'_>) -> CaseResult {
    let d = basic_dtype(ctx.caps());
    let fields = [("scalar", vec![]), ("empty", vec![0, 4])];
    for (name, dims) in fields {
        let schema = Schema::new().tensor(name, d, ShapeRule::Fixed(dims));
        let (path, written) = build(ctx, name, &schema, 4, true)?;
        check_samples(&*open_read_only(ctx, &path)?, &written)?;
    }
    Ok(Outcome::Passed)
}

/// One 4 MiB tensor per sample.
pub fn round_trip_multi_megabyte_tensor(ctx: &CaseContext<'_>) -> CaseResult {
    let schema = Schema::new().tensor("big", DType::U8, ShapeRule::Fixed(vec![1024, 4096]));
    if !ctx.caps().dtypes.contains(&DType::U8) {
        return Ok(Outcome::Skipped("uint8 not among the declared dtypes".into()));
    }
    let (path, written) = build(ctx, "big", &schema, 3, true)?;
    check_samples(&*open_read_only(ctx, &path)?, &written)?;
    Ok(Outcome::Passed)
}

/// Shared body of the "X follows capability" cases: when declared, `schema` round-trips; when not,
/// creating a cache with it returns `Error::Unsupported` and leaves no cache behind.
fn follows_capability(
    ctx: &CaseContext<'_>,
    declared: bool,
    what: &str,
    schema: Schema,
) -> CaseResult {
    if declared {
        let declared_works = |f: Failure| f.within(what).clause("capabilities.declared-works");
        let (path, written) = build(ctx, "declared", &schema, 24, true).map_err(declared_works)?;
        check_samples(&*open_read_only(ctx, &path)?, &written).map_err(declared_works)?;
        return Ok(Outcome::Passed);
    }
    let path = ctx.cache_path("undeclared");
    expect_unsupported(
        ctx.backend(),
        &format!("create with {what} (capability not declared)"),
        ctx.factory.create(&path, &schema).map(|_| ()),
    )
    .map_err(|f| f.clause("capabilities.undeclared-unsupported"))?;
    ensure!(
        ctx.factory.open(&path, stowage_core::OpenMode::ReadOnly).is_err(),
        format!("open of {} after a refused create", path.display()),
        expected: "an error: the refused create creates nothing",
        got: "an openable cache",
        clause: "create.unsupported-schema-creates-nothing"
    );
    Ok(Outcome::Passed)
}

/// `ShapeRule::Max` fields work iff `variable_shapes` is declared.
pub fn variable_shapes_follow_capability(ctx: &CaseContext<'_>) -> CaseResult {
    let d = basic_dtype(ctx.caps());
    let schema = Schema::new().tensor("v", d, ShapeRule::Max(vec![5, 3, 2]));
    follows_capability(ctx, ctx.caps().variable_shapes, "a variable (max) shape", schema)
}

/// `ShapeRule::RaggedLeading` fields work iff `ragged` is declared.
pub fn ragged_shapes_follow_capability(ctx: &CaseContext<'_>) -> CaseResult {
    let d = basic_dtype(ctx.caps());
    let schema = Schema::new().tensor("r", d, ShapeRule::RaggedLeading(vec![3]));
    follows_capability(ctx, ctx.caps().ragged, "a ragged shape", schema)
}

/// Nullable fields work iff `nullable` is declared; a null reads back as null.
pub fn nullable_fields_follow_capability(ctx: &CaseContext<'_>) -> CaseResult {
    let d = basic_dtype(ctx.caps());
    let schema = Schema::new().tensor("x", d, ShapeRule::Fixed(vec![2])).nullable_tensor(
        "maybe",
        d,
        ShapeRule::Fixed(vec![2, 2]),
    );
    follows_capability(ctx, ctx.caps().nullable, "a nullable field", schema)
}

/// Bytes fields work iff `bytes_fields` is declared.
pub fn bytes_fields_follow_capability(ctx: &CaseContext<'_>) -> CaseResult {
    let schema = Schema::new().bytes("blob");
    follows_capability(ctx, ctx.caps().bytes_fields, "a bytes field", schema)
}

/// JSON fields (plain and deduplicated) work iff `json_fields` is declared.
pub fn json_fields_follow_capability(ctx: &CaseContext<'_>) -> CaseResult {
    let schema = Schema::new().json("meta", false).field(FieldSpec {
        name: "shared".into(),
        kind: FieldKind::Json { deduplicate: true },
        nullable: false,
    });
    follows_capability(ctx, ctx.caps().json_fields, "a JSON field", schema)
}

/// Declared `zero_copy_get`: `get` on a finalized, reopened cache returns tensors that share the
/// backend's mapped bytes.
pub fn zero_copy_get_follows_capability(ctx: &CaseContext<'_>) -> CaseResult {
    if !ctx.caps().zero_copy_get {
        return Ok(Outcome::Skipped("zero_copy_get not declared; copies are allowed".into()));
    }
    let d = basic_dtype(ctx.caps());
    let schema = Schema::new().tensor("x", d, ShapeRule::Fixed(vec![64]));
    let mut rng = StdRng::seed_from_u64(7);
    let path = ctx.cache_path("zc");
    let mut cache = ok("create", ctx.factory.create(&path, &schema))?;
    let t = random_tensor(&mut rng, d, &[64]);
    ok("put", cache.put("k", &Sample::new().with("x", t.clone())))?;
    ok("finalize", cache.finalize())?;
    drop(cache);
    let reader = open_read_only(ctx, &path)?;
    let got = ok("get", reader.get("k"))?
        .ok_or_else(|| Failure::new("get \"k\" after reopen", "the sample that was put", "None"))?;
    match got.get("x") {
        Some(Value::Tensor(g)) => {
            ensure!(
                g.bytes() == t.bytes(),
                "zero-copy get \"k\" field \"x\"",
                expected: "the bytes that were put",
                got: "different bytes",
                clause: "get.returns-what-was-put"
            );
            ensure!(
                g.is_zero_copy(),
                "get \"k\" field \"x\" with zero_copy_get declared",
                expected: "a tensor sharing the backend's mapped bytes",
                got: "a copied tensor",
                clause: "capabilities.declared-works"
            );
        }
        other => {
            return Err(Failure::new("get \"k\" field \"x\"", "a tensor", format!("{other:?}")));
        }
    }
    Ok(Outcome::Passed)
}
