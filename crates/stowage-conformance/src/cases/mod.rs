//! The case bodies, one module per theme. Each public function is one case of [`crate::CASES`].

mod concurrency;
mod integrity;
mod keys;
mod lifecycle;
mod round_trip;

pub use crate::crash::crash_loses_no_flushed_sample;
pub use concurrency::{concurrent_readers_see_identical_samples, second_writer_is_refused};
pub use integrity::{
    deleted_file_is_detected, flipped_byte_is_detected, stray_files_are_ignored,
    truncated_file_is_detected, validate_clean_cache_reports_no_problem,
};
pub use keys::{
    duplicate_key_follows_overwrite_capability, empty_key_is_rejected, get_missing_key_is_none,
    ten_thousand_keys_round_trip, unicode_and_long_keys_round_trip,
};
pub use lifecycle::{
    create_over_existing_cache_is_rejected, open_missing_cache_is_not_found,
    put_after_finalize_is_rejected, read_only_handle_rejects_writes,
    reopen_after_finalize_keeps_samples, reopen_after_flush_keeps_samples,
    resume_follows_capability, schema_violation_writes_nothing,
};
pub use round_trip::{
    bytes_fields_follow_capability, json_fields_follow_capability,
    nullable_fields_follow_capability, ragged_shapes_follow_capability, round_trip_every_dtype,
    round_trip_multi_megabyte_tensor, round_trip_scalar_and_zero_length_tensors,
    variable_shapes_follow_capability, zero_copy_get_follows_capability,
};

use crate::CaseContext;
use crate::check::ok;
use crate::generate::{compare, key, sample_for};
use std::path::PathBuf;
use stowage_core::{Backend, DynBackend, OpenMode, Sample, Schema};

/// Samples written by [`build`]: `(key, sample)` in put order.
pub(crate) type Written = Vec<(String, Sample)>;

/// Creates cache `name`, puts `count` generated samples, and finalizes it (or only flushes it when
/// `finalize` is false). Returns the cache path and what was written; the handle is dropped.
pub(crate) fn build(
    ctx: &CaseContext<'_>,
    name: &str,
    schema: &Schema,
    count: usize,
    finalize: bool,
) -> Result<(PathBuf, Written), String> {
    let path = ctx.cache_path(name);
    let mut cache = ok("create", ctx.factory.create(&path, schema))?;
    let written = put_generated(&mut *cache, schema, 0..count)?;
    if finalize {
        ok("finalize", cache.finalize())?;
    } else {
        ok("flush", cache.flush())?;
    }
    Ok((path, written))
}

/// Puts the generated samples `range` into `cache`.
pub fn put_generated(
    cache: &mut DynBackend,
    schema: &Schema,
    range: std::ops::Range<usize>,
) -> Result<Written, String> {
    let mut written = Vec::with_capacity(range.len());
    for i in range {
        let (k, s) = (key(i), sample_for(schema, i as u64));
        ok(&format!("put {k:?}"), cache.put(&k, &s))?;
        written.push((k, s));
    }
    Ok(written)
}

/// Checks that `cache` returns exactly `written`, and that its key count matches.
pub fn check_all(cache: &dyn Backend, written: &Written) -> Result<(), String> {
    for (k, s) in written {
        compare(k, s, ok(&format!("get {k:?}"), cache.get(k))?.as_ref())?;
        crate::ensure!(
            ok("contains", cache.contains(k))?,
            "contains({k:?}) is false for a key get returns"
        );
    }
    crate::ensure!(
        cache.len() == written.len(),
        "len() is {}, expected {}",
        cache.len(),
        written.len()
    );
    Ok(())
}

/// Opens `path` read-only.
pub(crate) fn open_read_only(
    ctx: &CaseContext<'_>,
    path: &std::path::Path,
) -> Result<Box<DynBackend>, String> {
    ok("open read-only", ctx.factory.open(path, OpenMode::ReadOnly))
}
