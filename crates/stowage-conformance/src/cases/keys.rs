//! Keys: many of them, unusual ones, missing ones, repeated ones, their order, batches of them.

use super::{Written, build, check_samples, open_read_only};
use crate::check::{expect_unsupported, is_unsupported_from, ok};
use crate::generate::{basic_schema, compare_sample, sample_for};
use crate::{CaseContext, CaseResult, Failure, Outcome, ensure};
use std::collections::HashSet;
use std::ops::ControlFlow;
use stowage_core::{DynReader, Error, OpenMode, Sample, Schema};

/// 10,000 keys: all listed once, in put order, all readable after finalize and reopen.
pub fn ten_thousand_keys_round_trip(ctx: &CaseContext<'_>) -> CaseResult {
    let schema = basic_schema(ctx.caps());
    let (path, written) = build(ctx, "many", &schema, 10_000, true)?;
    let reader = open_read_only(ctx, &path)?;
    check_samples(&*reader, &written)?;
    let keys = ok("keys", reader.keys())?;
    let listed: HashSet<&str> = keys.iter().map(String::as_str).collect();
    ensure!(
        listed.len() == keys.len(),
        "keys() after reopen",
        expected: "each key once",
        got: format!("{} keys listed, {} distinct", keys.len(), listed.len()),
        clause: "keys.first-put-order"
    );
    expect_order(&keys, &written, "keys() of 10,000 keys after reopen")?;
    Ok(Outcome::Passed)
}

/// `keys` equals the keys of `written` in order; the failure names the first difference.
fn expect_order(keys: &[String], written: &Written, what: &str) -> Result<(), Failure> {
    let want: Vec<&str> = written.iter().map(|(k, _)| k.as_str()).collect();
    if keys.iter().map(String::as_str).eq(want.iter().copied()) {
        return Ok(());
    }
    let at = keys.iter().zip(&want).position(|(a, b)| a != b).unwrap_or(keys.len().min(want.len()));
    let around = |list: Vec<&str>| -> String {
        let end = (at + 3).min(list.len());
        format!("{:?}", &list[at.min(end)..end])
    };
    Err(Failure::new(
        what,
        format!(
            "{} keys in order of first put ({} from position {at})",
            want.len(),
            around(want.clone())
        ),
        format!(
            "{} keys ({} from position {at})",
            keys.len(),
            around(keys.iter().map(String::as_str).collect())
        ),
    )
    .clause("keys.first-put-order"))
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
        expect_unsupported(
            ctx.backend(),
            "put of a 1 KiB key beyond max_key_bytes",
            cache.put(&long, &sample_for(&schema, 0)),
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
    check_samples(&*open_read_only(ctx, &path)?, &written)?;
    let mut escaped = Vec::new();
    for beside in ["a/b/escape", "a/escape", "escape"] {
        let at = ctx.dir.join(beside);
        let exists = ctx.storage().exists(&at).map_err(|e| {
            Failure::new(
                format!("looking for {} ({})", at.display(), ctx.storage().name()),
                "success",
                e,
            )
        })?;
        if exists {
            escaped.push(beside);
        }
    }
    ensure!(
        escaped.is_empty(),
        "put of the key \"../../escape\"",
        expected: "no file outside the cache directory",
        got: format!("{escaped:?} created beside the cache")
    );
    Ok(Outcome::Passed)
}

/// The empty key is refused with `Error::InvalidArgument` (or `Unsupported`), and nothing is stored.
pub fn empty_key_is_rejected(ctx: &CaseContext<'_>) -> CaseResult {
    let schema = basic_schema(ctx.caps());
    let mut cache = ok("create", ctx.factory.create(&ctx.cache_path("c"), &schema))?;
    let what = "put with the empty key";
    let expected = "Error::InvalidArgument or Error::Unsupported";
    match cache.put("", &sample_for(&schema, 0)) {
        Err(Error::InvalidArgument { .. }) => {}
        Err(e) if is_unsupported_from(ctx.backend(), what, &e)? => {}
        Err(e) => return Err(Failure::new(what, expected, format!("a different error: {e}"))),
        Ok(()) => return Err(Failure::new(what, expected, "Ok(())")),
    }
    ensure!(cache.len() == 0, "len() after a refused put", expected: 0, got: cache.len());
    Ok(Outcome::Passed)
}

/// `get` of a key never put returns `Ok(None)`; `contains` is false; on a writer and a reader.
pub fn get_missing_key_is_none(ctx: &CaseContext<'_>) -> CaseResult {
    let schema = basic_schema(ctx.caps());
    let path = ctx.cache_path("c");
    let mut cache = ok("create", ctx.factory.create(&path, &schema))?;
    for (n, handle) in ["writer before any put", "writer after a put"].into_iter().enumerate() {
        let got = ok("get missing", cache.get("never-put"))?;
        ensure!(
            got.is_none(),
            format!("{handle}: get of a missing key"),
            expected: "Ok(None)",
            got: format!("{got:?}"),
            clause: "get.missing-is-none"
        );
        ensure!(
            !ok("contains", cache.contains("never-put"))?,
            format!("{handle}: contains of a missing key"),
            expected: "false",
            got: "true",
            clause: "contains.agrees-with-get"
        );
        ok("put", cache.put(&format!("present-{n}"), &sample_for(&schema, n as u64)))?;
    }
    ok("finalize", cache.finalize())?;
    drop(cache);
    let reader = open_read_only(ctx, &path)?;
    let got = ok("get missing", reader.get("never-put"))?;
    ensure!(
        got.is_none(),
        "reader: get of a missing key",
        expected: "Ok(None)",
        got: format!("{got:?}"),
        clause: "get.missing-is-none"
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
    compare_sample("k", &old, ok("get", cache.get("k"))?.as_ref())?;
    let expected = if ctx.caps().overwrite {
        ok("second put (overwrite declared)", cache.put("k", &new))?;
        new
    } else {
        expect_unsupported(
            ctx.backend(),
            "second put of the same key (overwrite not declared)",
            cache.put("k", &new),
        )?;
        old
    };
    // Before flush the second put must already show (or, refused, not show); after flush and
    // reopen the value must be the one the overwrite rule says.
    let stage = |stage: &'static str, clause: &'static str| {
        move |f: Failure| f.within(stage).clause(clause)
    };
    compare_sample("k", &expected, ok("get", cache.get("k"))?.as_ref())
        .map_err(stage("before flush", "put.visible-at-once"))?;
    ok("flush", cache.flush())?;
    compare_sample("k", &expected, ok("get", cache.get("k"))?.as_ref())
        .map_err(stage("after flush", "put.existing-key-follows-overwrite"))?;
    ensure!(
        cache.len() == 1,
        "len() after two puts of one key",
        expected: 1,
        got: cache.len(),
        clause: "len.counts-distinct-keys"
    );
    ok("finalize", cache.finalize())?;
    drop(cache);
    let reader = ok("reopen", ctx.factory.open(&path, OpenMode::ReadOnly))?;
    compare_sample("k", &expected, ok("get", reader.get("k"))?.as_ref())
        .map_err(stage("after reopen", "put.existing-key-follows-overwrite"))?;
    ensure!(
        reader.len() == 1,
        "len() after reopen",
        expected: 1,
        got: reader.len(),
        clause: "len.counts-distinct-keys"
    );
    Ok(Outcome::Passed)
}

/// `n` keys in an order that is neither sorted nor any hash order, starting at `first`.
fn scrambled_keys(schema: &Schema, first: usize, n: usize) -> Written {
    (first..first + n)
        .map(|i| {
            // 37 is prime to every n used here, so i * 37 % 101 visits distinct values.
            let k = format!("{:03}-key-{i}", (i * 37) % 101);
            (k, sample_for(schema, 1000 + i as u64))
        })
        .collect()
}

/// Puts `samples` into `cache`.
fn put_all(cache: &mut stowage_core::DynBackend, samples: &Written) -> Result<(), Failure> {
    for (k, s) in samples {
        ok(&format!("put {k:?}"), cache.put(k, s))?;
    }
    Ok(())
}

/// `keys()` and `len()` of `cache` against `expected`, in order.
fn check_order(cache: &DynReader, expected: &Written, stage: &str) -> Result<(), Failure> {
    expect_order(&ok("keys", cache.keys())?, expected, &format!("keys() {stage}"))?;
    ensure!(
        cache.len() == expected.len(),
        format!("len() {stage}"),
        expected: expected.len(),
        got: cache.len(),
        clause: "len.counts-distinct-keys"
    );
    Ok(())
}

/// `keys()` lists each key once in the order of its first put: on the writer before and after
/// flush, after overwrites (when declared; an overwrite never moves a key), after resuming
/// (when declared), and after finalize and reopen. Every put is visible to `get` on the writer
/// at once.
pub fn keys_follow_first_put_order(ctx: &CaseContext<'_>) -> CaseResult {
    let schema = basic_schema(ctx.caps());
    let path = ctx.cache_path("c");
    let mut cache = ok("create", ctx.factory.create(&path, &schema))?;
    let mut expected = scrambled_keys(&schema, 0, 40);
    put_all(&mut *cache, &expected)?;
    for (k, s) in &expected {
        compare_sample(k, s, ok(&format!("get {k:?}"), cache.get(k))?.as_ref()).map_err(|f| {
            f.within("on the writer before any flush").clause("put.visible-at-once")
        })?;
    }
    check_order(&*cache, &expected, "on the writer before any flush")?;
    ok("flush", cache.flush())?;
    check_order(&*cache, &expected, "on the writer after flush")?;
    if ctx.caps().overwrite {
        for i in (0..expected.len()).step_by(3) {
            let newer = sample_for(&schema, 5000 + i as u64);
            ok(&format!("overwrite {:?}", expected[i].0), cache.put(&expected[i].0, &newer))?;
            expected[i].1 = newer;
        }
        check_order(&*cache, &expected, "after overwriting every third key")?;
    }
    let more = scrambled_keys(&schema, 40, 10);
    put_all(&mut *cache, &more)?;
    expected.extend(more);
    ok("flush", cache.flush())?;
    check_order(&*cache, &expected, "after more puts and a flush")?;
    if ctx.caps().resume {
        drop(cache);
        cache = ok("append-open to resume", ctx.factory.open(&path, OpenMode::Append))?;
        check_order(&*cache, &expected, "after resuming")?;
        if ctx.caps().overwrite {
            let newer = sample_for(&schema, 9000);
            ok("overwrite after resuming", cache.put(&expected[1].0, &newer))?;
            expected[1].1 = newer;
        }
        let resumed = scrambled_keys(&schema, 50, 5);
        put_all(&mut *cache, &resumed)?;
        expected.extend(resumed);
        check_order(&*cache, &expected, "after puts on the resumed cache")?;
    }
    ok("finalize", cache.finalize())?;
    drop(cache);
    let reader = open_read_only(ctx, &path)?;
    check_order(&*reader, &expected, "after finalize and reopen")?;
    check_samples(&*reader, &expected)?;
    Ok(Outcome::Passed)
}

/// `get_batch` returns, position by position, what `get` returns, `get_batch_each` visits what
/// `get_batch` returns, and `get_if_ready`, when it answers, holds what `get` returns: on a
/// finalized reader and on a writer holding unflushed puts, for present, missing and repeated
/// keys.
pub fn get_batch_agrees_with_get(ctx: &CaseContext<'_>) -> CaseResult {
    let schema = basic_schema(ctx.caps());
    let (path, written) = build(ctx, "c", &schema, 20, true)?;
    let reader = open_read_only(ctx, &path)?;
    let k = |i: usize| written[i].0.as_str();
    let batch = [k(3), "never-put", k(0), k(3), k(19), "also-never-put", k(7)];
    batch_matches_get(&*reader, &batch, "on a finalized reader")?;
    let empty = ok("get_batch of no keys", reader.get_batch(&[]))
        .map_err(|f| f.clause("get-batch.agrees-with-get"))?;
    ensure!(
        empty.is_empty(),
        "get_batch(&[])",
        expected: "an empty list",
        got: "a non-empty list",
        clause: "get-batch.agrees-with-get"
    );

    let mut writer = ok("create", ctx.factory.create(&ctx.cache_path("w"), &schema))?;
    let unflushed = scrambled_keys(&schema, 0, 6);
    put_all(&mut *writer, &unflushed)?;
    let batch: Vec<&str> =
        unflushed.iter().rev().map(|(k, _)| k.as_str()).chain(["nope"]).collect();
    batch_matches_get(&*writer, &batch, "on a writer before flush")?;
    Ok(Outcome::Passed)
}

/// `get_batch(batch)` on `cache` equals `get` of each key in turn, `get_batch_each(batch)`
/// visits what `get_batch` returns, and `get_if_ready` agrees with `get`.
fn batch_matches_get(cache: &DynReader, batch: &[&str], stage: &str) -> Result<(), Failure> {
    let got = batch_agrees_with_get(cache, batch, stage)
        .map_err(|f| f.clause("get-batch.agrees-with-get"))?;
    each_matches_batch(cache, batch, &got, stage)
        .map_err(|f| f.clause("get-batch-each.agrees-with-get-batch"))?;
    ready_matches_get(cache, batch, stage).map_err(|f| f.clause("get-if-ready.agrees-with-get"))
}

/// `get_if_ready` of each key of `batch` on `cache`, asked right after `get` read the key (a
/// backend that opens files on first need has them open then), holds what `get` returns
/// whenever it answers.
fn ready_matches_get(cache: &DynReader, batch: &[&str], stage: &str) -> Result<(), Failure> {
    let context = format!("get_if_ready of each key of {batch:?} {stage}");
    for (i, key) in batch.iter().enumerate() {
        let single = ok(&format!("get {key:?}"), cache.get(key))?;
        if let Some(ready) = cache.get_if_ready(key) {
            let ready = ok(&format!("get_if_ready {key:?}"), ready)?;
            same_at(&context, i, key, single.as_ref(), ready.as_ref(), "get")?;
        }
    }
    Ok(())
}

/// `get_batch(batch)` on `cache` equals `get` of each key in turn; what it returned.
fn batch_agrees_with_get(
    cache: &DynReader,
    batch: &[&str],
    stage: &str,
) -> Result<Vec<Option<Sample>>, Failure> {
    let context = format!("get_batch({batch:?}) {stage}");
    let got = ok(&context, cache.get_batch(batch))?;
    ensure!(
        got.len() == batch.len(),
        &context,
        expected: format!("{} results, one per key", batch.len()),
        got: format!("{} results", got.len())
    );
    for (i, (key, from_batch)) in batch.iter().zip(&got).enumerate() {
        let single = ok(&format!("get {key:?}"), cache.get(key))?;
        same_at(&context, i, key, single.as_ref(), from_batch.as_ref(), "get")?;
    }
    Ok(got)
}

/// What `context` gave at `position` (for `key`), `got`, equals what `reference` gave, `want`.
fn same_at(
    context: &str,
    position: usize,
    key: &str,
    want: Option<&Sample>,
    got: Option<&Sample>,
    reference: &str,
) -> Result<(), Failure> {
    match (want, got) {
        (None, None) => Ok(()),
        (Some(want), _) => compare_sample(key, want, got)
            .map_err(|f| f.within(format!("{context} at position {position} against {reference}"))),
        (None, Some(_)) => Err(Failure::new(
            format!("{context} at position {position} ({key:?})"),
            format!("None, as {reference} returns"),
            "a sample",
        )),
    }
}

/// `get_batch_each(batch)` on `cache` visits each position once, in order, with what
/// `get_batch` returned (`got`), and visits nothing after a break.
fn each_matches_batch(
    cache: &DynReader,
    batch: &[&str],
    got: &[Option<Sample>],
    stage: &str,
) -> Result<(), Failure> {
    let context = format!("get_batch_each({batch:?}) {stage}");
    let mut visited = Vec::with_capacity(batch.len());
    ok(
        &context,
        cache.get_batch_each(batch, &mut |at, sample| {
            visited.push((at, sample));
            ControlFlow::Continue(())
        }),
    )?;
    let positions: Vec<usize> = visited.iter().map(|(at, _)| *at).collect();
    ensure!(
        positions == (0..batch.len()).collect::<Vec<_>>(),
        &context,
        expected: format!("positions 0 to {} once each, in order", batch.len()),
        got: format!("positions {positions:?}")
    );
    for ((at, sample), from_batch) in visited.iter().zip(got) {
        same_at(&context, *at, batch[*at], from_batch.as_ref(), sample.as_ref(), "get_batch")?;
    }
    if batch.len() > 2 {
        let mut after_break = 0;
        ok(
            &context,
            cache.get_batch_each(batch, &mut |at, _| {
                after_break += 1;
                if at == 1 { ControlFlow::Break(()) } else { ControlFlow::Continue(()) }
            }),
        )?;
        ensure!(
            after_break == 2,
            format!("{context}, breaking at position 1"),
            expected: "2 visits (positions 0 and 1)",
            got: format!("{after_break} visits")
        );
    }
    Ok(())
}
