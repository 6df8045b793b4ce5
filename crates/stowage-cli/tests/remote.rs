//! The `stowage` command on caches on object storage: converting in and out (resumably),
//! `inspect`, `verify`, `keys` and `get` on `file://` URLs, on moto's S3 server, and on a local
//! directory written in the remote layout.

mod common;

use std::path::Path;

use common::{Run, stowage_with_env};
use stowage_core::{Backend, DType, Reader, Sample, Schema, ShapeRule, Tensor};
use stowage_test_support::moto::MotoServer;

const KEYS: usize = 40;

fn schema() -> Schema {
    Schema::new().tensor("x", DType::F32, ShapeRule::Fixed(vec![3])).tensor(
        "tokens",
        DType::U16,
        ShapeRule::Max(vec![6]),
    )
}

fn sample(i: usize) -> Sample {
    let f = i as f32;
    let tokens: Vec<u16> = (0..i % 7).map(|t| (t * i) as u16).collect();
    Sample::new()
        .with("x", Tensor::from_slice(&[3], &[f, -f, f * 0.5]).unwrap())
        .with("tokens", Tensor::from_slice(&[tokens.len()], &tokens).unwrap())
}

/// A finalized stowage-npy cache of `KEYS` samples.
fn source(dir: &Path) -> std::path::PathBuf {
    let path = dir.join("source");
    let factory = stowage_npy::NpyFactory::default();
    let mut cache = stowage_core::BackendFactory::create(&factory, &path, &schema()).unwrap();
    for i in 0..KEYS {
        cache.put(&format!("key-{i:03}"), &sample(i)).unwrap();
    }
    cache.finalize().unwrap();
    path
}

/// Every key of the cache at `path` (a path or URL) holds its sample, read through the
/// command's own registry.
fn check_cache(path: &str, env: &[(&str, &str)]) {
    let run = stowage_with_env(["keys", path], env);
    assert_eq!(run.code, 0, "{run:?}");
    let mut keys: Vec<&str> = run.stdout.lines().collect();
    keys.sort_unstable();
    let expected: Vec<String> = (0..KEYS).map(|i| format!("key-{i:03}")).collect();
    assert_eq!(keys, expected, "{run:?}");
    let run = stowage_with_env(["verify", path], env);
    assert_eq!(run.code, 0, "{run:?}");
}

/// Converts `source` into `url`, checks it from every command, converts it back into a local
/// arrow cache, and compares every sample with the source.
fn round_trip(dir: &Path, url: &str, env: &[(&str, &str)]) {
    let src = source(dir);
    let src = src.to_str().unwrap();
    let ok = |run: Run| assert_eq!(run.code, 0, "{run:?}");
    ok(stowage_with_env(["convert", src, url, "--to", "remote"], env));
    check_cache(url, env);
    // Converting again resumes: nothing is written twice, nothing is refused.
    ok(stowage_with_env(["convert", src, url, "--to", "remote"], env));
    check_cache(url, env);
    let run = stowage_with_env(["inspect", url], env);
    assert_eq!(run.code, 0, "{run:?}");
    assert!(run.stdout.contains("stowage-remote") && run.stdout.contains("40"), "{run:?}");
    let out = dir.join("got");
    ok(stowage_with_env(["get", url, "key-007", "--out", out.to_str().unwrap()], env));
    assert!(std::fs::read_dir(&out).unwrap().count() >= 2, "one .npy per field");
    let back = dir.join("back");
    ok(stowage_with_env(["convert", url, back.to_str().unwrap(), "--to", "arrow"], env));
    let reader = stowage_cli::default_registry().open(&back).unwrap();
    assert_eq!(reader.len(), KEYS);
    for i in 0..KEYS {
        assert_eq!(reader.get(&format!("key-{i:03}")).unwrap().unwrap(), sample(i), "key {i}");
    }
}

#[test]
fn a_cache_goes_to_a_file_url_and_back() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("file://{}/remote", dir.path().display());
    round_trip(dir.path(), &url, &[]);
    // The same layout at a plain local path is recognized by its marker.
    check_cache(&format!("{}/remote", dir.path().display()), &[]);
}

#[test]
fn a_cache_goes_to_s3_and_back() {
    let Some(moto) = MotoServer::start("a_cache_goes_to_s3_and_back") else { return };
    moto.create_bucket("cli-remote");
    let options = moto.s3_options();
    let value = |key: &str| options.iter().find(|(k, _)| *k == key).unwrap().1.as_str();
    let env = [
        ("AWS_ENDPOINT", value("aws_endpoint")),
        ("AWS_ALLOW_HTTP", "true"),
        ("AWS_ACCESS_KEY_ID", value("aws_access_key_id")),
        ("AWS_SECRET_ACCESS_KEY", value("aws_secret_access_key")),
        ("AWS_REGION", value("aws_region")),
    ];
    let dir = tempfile::tempdir().unwrap();
    round_trip(dir.path(), "s3://cli-remote/caches/one", &env);
}
