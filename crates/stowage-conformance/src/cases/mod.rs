//! The case bodies, one module per theme. Each public function is one case of [`crate::CASES`].

mod capabilities;
mod concurrency;
mod integrity;
mod keys;
mod lifecycle;
mod recognize;
mod round_trip;

pub use crate::crash::{
    crash_during_finalize_leaves_resumable_or_complete, crash_loses_no_flushed_sample,
};
pub use crate::faults::failed_flush_poisons_the_handle;
pub use crate::io_errors::io_errors_are_reported_and_lose_no_flushed_sample;
pub use crate::power_loss::{
    power_loss_during_finalize_leaves_resumable_or_complete, power_loss_keeps_every_flushed_sample,
};
pub use capabilities::{capabilities_match_the_factory, max_rank_is_enforced};
pub use concurrency::{
    concurrent_readers_see_identical_samples, read_only_handle_outlives_the_writers_finalize,
    second_writer_is_refused,
};
pub use integrity::{
    deleted_file_is_detected, flipped_byte_is_detected, stray_files_are_ignored,
    truncated_file_is_detected, validate_clean_cache_reports_no_problem, validate_never_writes,
};
pub use keys::{
    duplicate_key_follows_overwrite_capability, empty_key_is_rejected, get_batch_agrees_with_get,
    get_missing_key_is_none, keys_follow_first_put_order, ten_thousand_keys_round_trip,
    unicode_and_long_keys_round_trip,
};
pub use lifecycle::{
    create_over_existing_cache_is_rejected, open_missing_cache_is_not_found,
    put_after_finalize_is_rejected, read_only_handle_rejects_writes,
    reopen_after_finalize_keeps_samples, reopen_after_flush_keeps_samples,
    resume_follows_capability, schema_violation_writes_nothing,
};
pub use recognize::{recognize_finds_own_caches, recognize_follows_the_marker};
pub use round_trip::{
    bytes_fields_follow_capability, json_fields_follow_capability,
    nullable_fields_follow_capability, ragged_shapes_follow_capability, round_trip_every_dtype,
    round_trip_multi_megabyte_tensor, round_trip_scalar_and_zero_length_tensors,
    variable_shapes_follow_capability, zero_copy_get_follows_capability,
};

use crate::check::ok;
use crate::generate::{compare_sample, key, sample_for};
use crate::{CaseContext, Failure};
use std::path::PathBuf;
use stowage_core::{DynBackend, DynReader, OpenMode, Sample, Schema};

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
) -> Result<(PathBuf, Written), Failure> {
    let path = ctx.cache_path(name);
    let mut cache = ok("create", ctx.factory.create(&path, schema))?;
    let written = put_samples(&mut *cache, schema, 0..count)?;
    if finalize {
        ok("finalize", cache.finalize())?;
    } else {
        ok("flush", cache.flush())?;
    }
    Ok((path, written))
}

/// Puts the generated samples `range` into `cache`.
pub(crate) fn put_samples(
    cache: &mut DynBackend,
    schema: &Schema,
    range: std::ops::Range<usize>,
) -> Result<Written, Failure> {
    let mut written = Vec::with_capacity(range.len());
    for i in range {
        let (k, s) = (key(i), sample_for(schema, i as u64));
        ok(&format!("put {k:?}"), cache.put(&k, &s))?;
        written.push((k, s));
    }
    Ok(written)
}

/// Checks that `cache` returns exactly `written`, that `contains` agrees, and that its key
/// count matches.
pub(crate) fn check_samples(cache: &DynReader, written: &Written) -> Result<(), Failure> {
    for (k, s) in written {
        compare_sample(k, s, ok(&format!("get {k:?}"), cache.get(k))?.as_ref())?;
        crate::ensure!(
            ok("contains", cache.contains(k))?,
            format!("contains({k:?}) for a key get returns"),
            expected: "true",
            got: "false",
            clause: "contains.agrees-with-get"
        );
    }
    crate::ensure!(
        cache.len() == written.len(),
        format!("len() of a cache holding {} distinct keys", written.len()),
        expected: written.len(),
        got: cache.len(),
        clause: "len.counts-distinct-keys"
    );
    Ok(())
}

/// Puts the generated samples `range` into `cache`; the error says which put failed.
pub fn put_generated(
    cache: &mut DynBackend,
    schema: &Schema,
    range: std::ops::Range<usize>,
) -> Result<Written, String> {
    Ok(put_samples(cache, schema, range)?)
}

/// Checks that `cache` returns exactly `written`, and that its key count matches; the error
/// names the key and the first difference.
pub fn check_all(cache: &DynReader, written: &Written) -> Result<(), String> {
    Ok(check_samples(cache, written)?)
}

/// Opens `path` read-only.
pub(crate) fn open_read_only(
    ctx: &CaseContext<'_>,
    path: &std::path::Path,
) -> Result<Box<DynBackend>, Failure> {
    ok("open read-only", ctx.factory.open(path, OpenMode::ReadOnly))
}
