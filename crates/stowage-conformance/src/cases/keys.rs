//! Keys: many of them, unusual ones, missing ones, repeated ones.

use super::{build, check_all, open_read_only};
use crate::check::{expect_err, is_unsupported, ok};
use crate::generate::{basic_schema, compare, sample_for};
use crate::{CaseContext, CaseResult, Outcome, ensure};
use std::collections::HashSet;
use stowage_core::{Error, OpenMode};

/// 10,000 keys: all listed once, all readable after finalize and reopen.
pub fn ten_thousand_keys_round_trip(ctx: &CaseContext<'_>) -> CaseResult {
    let schema = basic_schema(ctx.caps());
    let (path, written) = build(ctx, "many", &schema, 10_000, true)?;
    let reader = open_read_only(ctx, &path)?;
    check_all(&*reader, &written)?;
    let keys = ok("keys", reader.keys())?;
    ensure!(
        keys.len() == written.len(),
        "keys() listed {} keys, expected {}",
        keys.len(),
        written.len()
    );
    let listed: HashSet<&str> = keys.iter().map(String::as_str).collect();
    ensure!(listed.len() == keys.len(), "keys() listed some key twice");
    for (k, _) in &written {
        ensure!(listed.contains(k.as_str()), "keys() does not list {k:?}");
    }
    Ok(Outcome::Passed)
}

/// Non-ASCII, path-like and 1 KiB keys round-trip (or the 1 KiB key is refused as `Unsupported`
/// when the backend declares a shorter `max_key_bytes`).
pub fn unicode_and_long_keys_round_trip(ctx: &CaseContext<'_>) -> CaseResult {
    let schema = basic_schema(ctx.caps());
    // Two levels down, so that any "../../escape" a backend wrongly follows stays inside the case's
    // own directory, where the check below looks.
    let path = ctx.cache_path("a/b/keys");
    let mut cache = ok("create", ctx.factory.create(&path, &schema))?;
    let long = "k".repeat(1024);
    let mut keys = vec![
        "ключ-🚀-ë".to_string(),
        "a/b\\c:d*e?f\"g<h>|".to_string(),
        "../../escape".to_string(),
        " spaced key ".to_string(),
        "new\nline\ttab\u{0}nul".to_string(),
    ];
    let limit = ctx.caps().max_key_bytes;
    if limit.is_some_and(|max| long.len() > max) {
        expect_err(
            "put of a 1 KiB key beyond max_key_bytes",
            "Error::Unsupported",
            cache.put(&long, &sample_for(&schema, 0)),
            is_unsupported,
        )?;
    } else {
        keys.push(long);
    }
    let mut written = Vec::new();
    for (i, k) in keys.into_iter().enumerate() {
        if limit.is_some_and(|max| k.len() > max) {
            continue;
        }
        let s = sample_for(&schema, i as u64);
        ok(&format!("put {k:?}"), cache.put(&k, &s))?;
        written.push((k, s));
    }
    ok("finalize", cache.finalize())?;
    drop(cache);
    check_all(&*open_read_only(ctx, &path)?, &written)?;
    let escaped = ["a/b/escape", "a/escape", "escape"].iter().any(|p| ctx.dir.join(p).exists());
    ensure!(!escaped, "the key \"../../escape\" created a file outside the cache directory");
    Ok(Outcome::Passed)
}

/// The empty key is refused with `Error::InvalidArgument` (or `Unsupported`), and nothing is stored.
pub fn empty_key_is_rejected(ctx: &CaseContext<'_>) -> CaseResult {
    let schema = basic_schema(ctx.caps());
    let mut cache = ok("create", ctx.factory.create(&ctx.cache_path("c"), &schema))?;
    expect_err(
        "put with the empty key",
        "Error::InvalidArgument or Error::Unsupported",
        cache.put("", &sample_for(&schema, 0)),
        |e| matches!(e, Error::InvalidArgument { .. } | Error::Unsupported { .. }),
    )?;
    ensure!(cache.len() == 0, "len() is {} after a refused put", cache.len());
    Ok(Outcome::Passed)
}

/// `get` of a key never put returns `Ok(None)`; `contains` is false; on a writer and a reader.
pub fn get_missing_key_is_none(ctx: &CaseContext<'_>) -> CaseResult {
    let schema = basic_schema(ctx.caps());
    let path = ctx.cache_path("c");
    let mut cache = ok("create", ctx.factory.create(&path, &schema))?;
    for (n, handle) in ["writer before any put", "writer after a put"].into_iter().enumerate() {
        let got = ok("get missing", cache.get("never-put"))?;
        ensure!(got.is_none(), "{handle}: get of a missing key returned {got:?}");
        ensure!(
            !ok("contains", cache.contains("never-put"))?,
            "{handle}: contains of a missing key is true"
        );
        ok("put", cache.put(&format!("present-{n}"), &sample_for(&schema, n as u64)))?;
    }
    ok("finalize", cache.finalize())?;
    drop(cache);
    let reader = open_read_only(ctx, &path)?;
    ensure!(
        ok("get missing", reader.get("never-put"))?.is_none(),
        "reader: get of a missing key is not None"
    );
    Ok(Outcome::Passed)
}

/// A repeated put: with `overwrite`, the new value wins (at once, after flush and after reopen) and
/// `len` counts the key once; without it, `Error::Unsupported` and the old value stays.
pub fn duplicate_key_follows_overwrite_capability(ctx: &CaseContext<'_>) -> CaseResult {
    let schema = basic_schema(ctx.caps());
    let path = ctx.cache_path("c");
    let (old, new) = (sample_for(&schema, 1), sample_for(&schema, 2));
    let mut cache = ok("create", ctx.factory.create(&path, &schema))?;
    ok("first put", cache.put("k", &old))?;
    ok("flush", cache.flush())?;
    compare("k", &old, ok("get", cache.get("k"))?.as_ref())?;
    let expected = if ctx.caps().overwrite {
        ok("second put (overwrite declared)", cache.put("k", &new))?;
        new
    } else {
        expect_err(
            "second put of the same key (overwrite not declared)",
            "Error::Unsupported",
            cache.put("k", &new),
            is_unsupported,
        )?;
        old
    };
    compare("k (before flush)", &expected, ok("get", cache.get("k"))?.as_ref())?;
    ok("flush", cache.flush())?;
    compare("k (after flush)", &expected, ok("get", cache.get("k"))?.as_ref())?;
    ensure!(cache.len() == 1, "len() is {} after two puts of one key", cache.len());
    ok("finalize", cache.finalize())?;
    drop(cache);
    let reader = ok("reopen", ctx.factory.open(&path, OpenMode::ReadOnly))?;
    compare("k (after reopen)", &expected, ok("get", reader.get("k"))?.as_ref())?;
    ensure!(reader.len() == 1, "len() is {} after reopen", reader.len());
    Ok(Outcome::Passed)
}
