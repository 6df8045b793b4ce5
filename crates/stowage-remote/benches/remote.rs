//! Remote cache benchmark (`cargo xtask bench --suite remote`): a cache on moto's S3 server on
//! loopback, side by side with object_store's own requests for the same bytes on the same server
//! in the same run, and the local backend with the fastest warm get on the same samples.
//!
//! The server: `$STOWAGE_BENCH_S3_ENDPOINT` (the xtask starts moto's server and keeps it running
//! for the Python peer), else a moto server this bench starts and stops. Workload
//! (`s3://stowage-bench/f32x512`): `STOWAGE_BENCH_REMOTE_ROWS` (16,384) samples of float32[512],
//! one part per 4,096 samples.
//!
//! - `reference_range_get`: object_store's `get_range` of each row record's bytes, one request
//!   per key (the physical reference); `get_cold`: `RemoteCache::get` of the same keys with the
//!   parts' row tables in the node cache and the records not (one range GET each, checked and
//!   decoded). 64 keys per iteration; `reference_range_get_p50` / `get_cold_p50`: the medians of
//!   single requests timed alternately (levels, ms).
//! - `reference_get_ranges`: object_store's `get_ranges` per rows object with exactly the ranges
//!   `get_batch` asks for, every object's at once (as `get_batch` sends every part's records in
//!   one round); `store_get_ranges`: the same through the cache's `RemoteStore::get_ranges_of`
//!   (its retries and length checks); `get_batch`: one `get_batch` of 1,024 keys.
//!   `reference_get_ranges_p50` / `get_batch_p50`: the medians of 40 batches of each, run
//!   alternately on the same keys (levels, ms per batch).
//! - `get_warm`: `get` with `cache_rows` (whole rows objects in the node cache, warm);
//!   `local_get`: stowage-memmap's `get` (checksums on) of the same samples from a local cache
//!   with warm maps. 1,000 keys per iteration; `local_get_p50` / `get_warm_p50`: the medians of
//!   300 rounds of 1,000 keys of each, run alternately (levels, ms per 1,000 gets).
//! - `open`: opening the S3 cache read-only; `open_10m`: opening a `file://` cache of
//!   `STOWAGE_BENCH_REMOTE_OPEN_KEYS` (10,000,000) float32[1] keys, built once and kept in the
//!   bench directory (same layout and request count as on S3; writing it to moto would take too
//!   long). `open_requests_10m` counts the requests of that open, `open_rss_10m` the resident
//!   memory it adds (levels in `measurements.json`); `open_requests` the S3 open's requests.
//!
//! Left in `$STOWAGE_BENCH_DIR` for the peer (`xtask/py/remote_peer.py`): `ranges.json`, the
//! endpoint, bucket, and the object and byte range of each key `get_cold` reads, in its order.

use std::hint::black_box;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{BenchmarkGroup, Criterion, SamplingMode, Throughput};
use criterion::{criterion_group, criterion_main};
use object_store::aws::AmazonS3Builder;
use object_store::path::Path as ObjectPath;
use object_store::{ObjectStore, ObjectStoreExt};
use stowage_core::{Backend, DType, Reader, Sample, Schema, ShapeRule, Tensor};
use stowage_memmap::{MemmapBackend, MemmapOptions};
use stowage_remote::faults::FaultyStore;
use stowage_remote::part::PartObjects;
use stowage_remote::row_table::key_hash;
use stowage_remote::{RemoteCache, RemoteOptions, RemoteStore, runtime, versions, view};
use stowage_test_support::moto::MotoServer;
use stowage_test_support::workload::{WIDTH, key, sample, schema};

type Group<'a> = BenchmarkGroup<'a, criterion::measurement::WallTime>;

/// Samples per part (one flush each).
const PART_ROWS: usize = 4096;
/// Keys per iteration of the one-request-per-key benchmarks.
const COLD_READS: usize = 64;
/// Keys per `get_batch`.
const BATCH: usize = 1024;
/// Keys per iteration of the warm and local gets.
const WARM_READS: usize = 1000;
/// Single requests timed for each median.
const P50_READS: usize = 400;
/// Alternating rounds of 1,024-key batches timed for their medians.
const BATCH_ROUNDS: usize = 40;
/// Alternating rounds of 1,000 warm or local gets timed for their medians.
const WARM_ROUNDS: usize = 300;
/// The bucket and prefix of the S3 cache.
const BUCKET: &str = "stowage-bench";
const PREFIX: &str = "f32x512";
/// The credentials the bench and the peer sign with (moto accepts any).
const CREDENTIALS: [(&str, &str); 3] = [
    ("aws_access_key_id", "stowage-bench"),
    ("aws_secret_access_key", "stowage-bench-secret"),
    ("aws_region", "us-east-1"),
];

/// A size knob from the environment.
fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name).ok().and_then(|v| v.parse().ok()).unwrap_or(default)
}

/// Where the bench leaves its data: `$STOWAGE_BENCH_DIR`, or a directory under /tmp.
fn bench_dir() -> PathBuf {
    std::env::var_os("STOWAGE_BENCH_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| std::env::temp_dir().join("stowage-bench-remote"))
}

/// The S3 server: the xtask's (its endpoint in the environment) or one of our own, kept alive
/// for the whole run.
struct Server {
    endpoint: String,
    _own: Option<MotoServer>,
}

impl Server {
    fn start() -> Server {
        match std::env::var("STOWAGE_BENCH_S3_ENDPOINT") {
            Ok(endpoint) if !endpoint.is_empty() => Server { endpoint, _own: None },
            _ => {
                let moto = MotoServer::start("remote bench")
                    .expect("python3 with moto[server] and boto3 (pip install 'moto[server]')");
                Server { endpoint: moto.endpoint().to_owned(), _own: Some(moto) }
            }
        }
    }

    /// object_store's settings for this server.
    fn options(&self) -> Vec<(String, String)> {
        let mut options = vec![
            ("aws_endpoint".to_owned(), self.endpoint.clone()),
            ("aws_allow_http".to_owned(), "true".to_owned()),
        ];
        options.extend(CREDENTIALS.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())));
        options
    }

    /// Creates the bucket (through boto3: object_store has no call for it); one that exists is
    /// kept.
    fn create_bucket(&self) {
        let script = "import boto3, sys\n\
             s3 = boto3.client('s3', endpoint_url=sys.argv[1], aws_access_key_id=sys.argv[3], \
             aws_secret_access_key=sys.argv[4], region_name=sys.argv[5])\n\
             try:\n    s3.create_bucket(Bucket=sys.argv[2])\n\
             except s3.exceptions.BucketAlreadyOwnedByYou:\n    pass\n\
             print('created')";
        let [id, secret, region] = CREDENTIALS.map(|(_, v)| v);
        let out = stowage_test_support::python::run_script(
            "python3",
            script,
            &[&self.endpoint, BUCKET, id, secret, region],
            b"",
            "creating the bench bucket",
        );
        assert_eq!(out, "created");
    }
}

/// Where one key's record lies: its rows object and byte range.
#[derive(Clone)]
struct Located {
    object: String,
    range: std::ops::Range<u64>,
}

/// Writes `rows` samples to `url`, a part per [`PART_ROWS`], and finalizes.
fn write_cache(url: &str, options: &RemoteOptions, rows: usize) {
    let mut cache = RemoteCache::create(url, &schema(), options).expect("create");
    for i in 0..rows {
        cache.put(&key(i), &sample(i)).expect("put");
        if (i + 1) % PART_ROWS == 0 {
            cache.flush().expect("flush");
        }
    }
    cache.finalize().expect("finalize");
}

/// Every key's rows object and range, from the newest version's row tables (the lookup a get
/// makes, done once ahead of the timed loops).
fn locate_all(store: &RemoteStore, options: &RemoteOptions, rows: usize) -> Vec<Located> {
    let node = options.open_node_cache().expect("node cache");
    let manifest = versions::newest(store).expect("newest").expect("a version");
    let mut tables = Vec::new();
    for part in &manifest.parts {
        let objects = PartObjects::of("bench", &part.objects).expect("part");
        tables.push((objects.rows.name.clone(), view::fetch_table(store, &node, &objects.table)));
    }
    (0..rows)
        .map(|i| {
            let hash = key_hash(&key(i));
            tables
                .iter()
                .find_map(|(rows, table)| {
                    let entry = table.as_ref().expect("row table").find(hash)?;
                    let range = entry.offset..entry.offset + u64::from(entry.len);
                    Some(Located { object: rows.clone(), range })
                })
                .expect("every key is in a part")
        })
        .collect()
}

/// object_store's own client for the server, configured as the cache's store is.
fn raw_client(url: &str, options: &[(String, String)]) -> Arc<dyn ObjectStore> {
    let mut builder = AmazonS3Builder::from_env().with_url(url);
    for (key, value) in options {
        builder = builder.with_config(key.parse().expect("config key"), value);
    }
    Arc::new(builder.build().expect("S3 client"))
}

/// One range GET through object_store's client, on the runtime the cache's store uses.
fn raw_get_range(client: &dyn ObjectStore, path: &ObjectPath, range: std::ops::Range<u64>) {
    let bytes = runtime::block_on(client.get_range(path, range)).expect("runtime").expect("get");
    black_box(bytes);
}

/// The median of `times`, in milliseconds.
fn median_ms(mut times: Vec<Duration>) -> f64 {
    times.sort_unstable();
    times[times.len() / 2].as_secs_f64() * 1e3
}

/// Resident memory fields of `/proc/self/status`, in MiB (0 where there is none).
fn status_mib(field: &str) -> f64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let kib: f64 = status
        .lines()
        .find_map(|line| line.strip_prefix(field))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0);
    kib / 1024.0
}

/// Writes the S3 cache, then measures each read beside its reference, then the opens.
fn benches(c: &mut Criterion) {
    let dir = bench_dir();
    let rows = env_usize("STOWAGE_BENCH_REMOTE_ROWS", 16_384);
    let open_keys = env_usize("STOWAGE_BENCH_REMOTE_OPEN_KEYS", 10_000_000);
    std::fs::create_dir_all(&dir).expect("bench dir");
    let node_dir = dir.join("node");
    let _ = std::fs::remove_dir_all(&node_dir);
    let mut levels: Vec<(&str, f64, &str)> = Vec::new();

    let server = Server::start();
    server.create_bucket();
    let url = format!("s3://{BUCKET}/{PREFIX}");
    let options = RemoteOptions {
        rank: Some("bench".into()),
        node_cache: Some(node_dir.clone()),
        store_options: server.options(),
        ..RemoteOptions::default()
    };
    eprintln!(
        "remote bench: writing {rows} samples of float32[{WIDTH}] to {url} on {}",
        server.endpoint
    );
    let started = Instant::now();
    write_cache(&url, &options, rows);
    eprintln!("remote bench: written in {:.1?}", started.elapsed());

    let store = options.open_store(&url).expect("store");
    let located = locate_all(&store, &options, rows);
    let client = raw_client(&url, &options.store_options);
    let path_of = |name: &str| store.url().object(name).expect("object path");
    let paths: Vec<ObjectPath> = located.iter().map(|l| path_of(&l.object)).collect();
    let keys: Vec<String> = (0..rows).map(key).collect();

    // The cold reader: row tables fetched into the node cache (and its view) by one get per
    // part; records are never cached.
    let cold = RemoteCache::open(&url, &options).expect("open");
    for i in (0..rows).step_by(PART_ROWS) {
        black_box(cold.get(&keys[i]).expect("get"));
    }
    let order = stowage_conformance::generate::epoch_order(rows, rows.max(BATCH * 8), 18);
    write_ranges(&dir, &server, &located, &paths, &order);

    let mut group = c.benchmark_group("remote");
    group.sampling_mode(SamplingMode::Flat).sample_size(10);
    group.warm_up_time(Duration::from_secs(1)).measurement_time(Duration::from_secs(4));

    // One request per key: object_store's, then the cache's, on the same keys in the same order.
    group.throughput(Throughput::Elements(COLD_READS as u64));
    bench_chunks(&mut group, "reference_range_get", &order, COLD_READS, |picks| {
        for &i in picks {
            raw_get_range(client.as_ref(), &paths[i], located[i].range.clone());
        }
    });
    bench_chunks(&mut group, "get_cold", &order, COLD_READS, |picks| {
        for &i in picks {
            black_box(cold.get(&keys[i]).expect("get").expect("present"));
        }
    });
    let (mut raw_times, mut get_times) = (Vec::new(), Vec::new());
    for &i in order.iter().take(P50_READS) {
        let started = Instant::now();
        raw_get_range(client.as_ref(), &paths[i], located[i].range.clone());
        raw_times.push(started.elapsed());
        let started = Instant::now();
        black_box(cold.get(&keys[i]).expect("get").expect("present"));
        get_times.push(started.elapsed());
    }
    levels.push(("reference_range_get_p50", median_ms(raw_times), "ms"));
    levels.push(("get_cold_p50", median_ms(get_times), "ms"));

    // 1,024 keys at once: object_store's get_ranges per rows object, then one get_batch.
    group.throughput(Throughput::Elements(BATCH as u64));
    let ranges_by_object = |picks: &[usize]| {
        let mut by_object: std::collections::BTreeMap<&str, Vec<std::ops::Range<u64>>> =
            std::collections::BTreeMap::new();
        for &i in picks {
            by_object.entry(&located[i].object).or_default().push(located[i].range.clone());
        }
        by_object
    };
    // Every rows object's get_ranges in flight at once, as get_batch sends every part's
    // records in one round.
    let reference_batch = |picks: &[usize]| {
        let requests = ranges_by_object(picks).into_iter().map(|(object, ranges)| {
            let (client, path) = (&client, path_of(object));
            async move { client.get_ranges(&path, &ranges).await }
        });
        let parts = runtime::block_on(futures_util::future::try_join_all(requests));
        black_box(parts.expect("runtime").expect("get_ranges"));
    };
    let stowage_batch = |picks: &[usize]| {
        let batch: Vec<&str> = picks.iter().map(|&i| keys[i].as_str()).collect();
        black_box(cold.get_batch(&batch).expect("get_batch"));
    };
    bench_chunks(&mut group, "reference_get_ranges", &order, BATCH, reference_batch);
    // The same requests through the cache's store (its retries and length checks), to tell
    // the store's share of get_batch from the lookup, checksum and decoding.
    bench_chunks(&mut group, "store_get_ranges", &order, BATCH, |picks| {
        let by_object = ranges_by_object(picks);
        let asked: Vec<(&str, &[std::ops::Range<u64>])> =
            by_object.iter().map(|(object, ranges)| (*object, ranges.as_slice())).collect();
        black_box(cold.store().get_ranges_of(&asked).expect("get_ranges_of"));
    });
    bench_chunks(&mut group, "get_batch", &order, BATCH, stowage_batch);
    let (reference, stowage) =
        alternate(&order, BATCH, BATCH_ROUNDS, reference_batch, stowage_batch);
    levels.push(("reference_get_ranges_p50", reference, "ms"));
    levels.push(("get_batch_p50", stowage, "ms"));

    // Warm: whole rows objects in the node cache against the fastest local backend.
    let warm_options = RemoteOptions { cache_rows: true, ..options.clone() };
    let warm = RemoteCache::open(&url, &warm_options).expect("open");
    let local_dir = dir.join("memmap");
    let _ = std::fs::remove_dir_all(&local_dir);
    let mut local =
        MemmapBackend::create(&local_dir, &schema(), MemmapOptions::default()).expect("create");
    for (i, key) in keys.iter().enumerate() {
        local.put(key, &sample(i)).expect("put");
    }
    local.finalize().expect("finalize");
    drop(local);
    let local = MemmapBackend::open_read_only(&local_dir, MemmapOptions::default()).expect("open");
    for key in &keys {
        black_box(warm.get(key).expect("get").expect("present"));
        black_box(local.get(key).expect("get").expect("present"));
    }
    group.sampling_mode(SamplingMode::Auto).sample_size(30);
    group.measurement_time(Duration::from_secs(3));
    group.throughput(Throughput::Elements(WARM_READS as u64));
    let warm_gets = |picks: &[usize]| {
        for &i in picks {
            black_box(warm.get(&keys[i]).expect("get").expect("present"));
        }
    };
    let local_gets = |picks: &[usize]| {
        for &i in picks {
            black_box(local.get(&keys[i]).expect("get").expect("present"));
        }
    };
    bench_chunks(&mut group, "get_warm", &order, WARM_READS, warm_gets);
    bench_chunks(&mut group, "local_get", &order, WARM_READS, local_gets);
    let (local_p50, warm_p50) = alternate(&order, WARM_READS, WARM_ROUNDS, local_gets, warm_gets);
    levels.push(("local_get_p50", local_p50, "ms"));
    levels.push(("get_warm_p50", warm_p50, "ms"));

    // Opens: the S3 cache, and the 10-million-key cache on file://.
    group.sampling_mode(SamplingMode::Flat).sample_size(10);
    group.throughput(Throughput::Elements(1));
    group.bench_function("open", |b| {
        b.iter(|| black_box(RemoteCache::open(&url, &options).expect("open")))
    });
    let (store, faulty) = FaultyStore::wrap(&url, &as_pairs(&options.store_options)).expect("wrap");
    faulty.clear_log();
    black_box(RemoteCache::open_in(store, &options, false).expect("open"));
    levels.push(("open_requests", faulty.requests().len() as f64, "requests"));

    let big_url = build_open_cache(&dir.join("open10m"), open_keys);
    let file_options = RemoteOptions { node_cache: Some(node_dir.clone()), ..Default::default() };
    group.bench_function("open_10m", |b| {
        b.iter(|| black_box(RemoteCache::open(&big_url, &file_options).expect("open")))
    });
    let (store, faulty) = FaultyStore::wrap(&big_url, &[]).expect("wrap");
    faulty.clear_log();
    let _ = std::fs::write("/proc/self/clear_refs", "5");
    let before = status_mib("VmRSS:");
    let opened = RemoteCache::open_in(store, &file_options, false).expect("open");
    let peak = status_mib("VmHWM:");
    black_box(&opened);
    levels.push(("open_requests_10m", faulty.requests().len() as f64, "requests"));
    levels.push(("open_rss_10m", (peak - before).max(0.0), "MiB"));
    eprintln!("remote bench: levels {levels:?} ({open_keys} keys in the file:// cache)");
    group.finish();
    write_measurements(&dir.join("measurements.json"), &levels, open_keys, rows);
}

/// `options` as the `(&str, &str)` pairs object_store's builders take.
fn as_pairs(options: &[(String, String)]) -> Vec<(&str, &str)> {
    options.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect()
}

/// A `file://` cache of `keys` float32[1] samples at `dir`, built unless a complete one is
/// there (its `built` file names the key count). The writer's node cache is its own, removed
/// after the build.
fn build_open_cache(dir: &Path, keys: usize) -> String {
    let url = format!("file://{}", dir.join("cache").display());
    let marker = dir.join("built");
    let wanted = format!("{keys} keys, layout {}", stowage_remote::manifest::LAYOUT);
    if std::fs::read_to_string(&marker).ok().as_deref() == Some(wanted.as_str()) {
        return url;
    }
    let _ = std::fs::remove_dir_all(dir);
    std::fs::create_dir_all(dir).expect("open10m dir");
    eprintln!("remote bench: writing {keys} keys to {url} (once; kept for later runs)");
    let started = Instant::now();
    let options = RemoteOptions {
        rank: Some("bench".into()),
        node_cache: Some(dir.join("writer-node")),
        ..RemoteOptions::default()
    };
    let schema = Schema::new().tensor("x", DType::F32, ShapeRule::Fixed(vec![1]));
    let mut cache = RemoteCache::create(&url, &schema, &options).expect("create");
    for i in 0..keys {
        let sample = Sample::new().with("x", Tensor::from_slice(&[1], &[i as f32]).expect("fits"));
        cache.put(&format!("k{i:09}"), &sample).expect("put");
    }
    cache.finalize().expect("finalize");
    drop(cache);
    let _ = std::fs::remove_dir_all(dir.join("writer-node"));
    std::fs::write(&marker, wanted).expect("marker");
    eprintln!("remote bench: written in {:.1?}", started.elapsed());
    url
}

/// `ranges.json` for the peer: where the server is and what `get_cold` reads, in its order.
fn write_ranges(
    dir: &Path,
    server: &Server,
    located: &[Located],
    paths: &[ObjectPath],
    order: &[usize],
) {
    let reads: Vec<serde_json::Value> = order
        .iter()
        .take(WARM_READS)
        .map(|&i| {
            let l = &located[i];
            serde_json::json!({
                "key": key(i),
                "object": paths[i].to_string(),
                "start": l.range.start,
                "end": l.range.end,
            })
        })
        .collect();
    let credentials: serde_json::Map<String, serde_json::Value> =
        CREDENTIALS.iter().map(|(k, v)| ((*k).to_owned(), (*v).into())).collect();
    let json = serde_json::json!({
        "endpoint": server.endpoint,
        "bucket": BUCKET,
        "credentials": credentials,
        "reads": reads,
    });
    std::fs::write(dir.join("ranges.json"), json.to_string()).expect("ranges.json");
}

/// The median times (ms) of `first` and `second` over `rounds` rounds of `per` picks of
/// `order`, the two run alternately on the same picks: a load that comes and goes on a shared
/// machine strikes both alike, which criterion's one-after-the-other means cannot promise.
fn alternate(
    order: &[usize],
    per: usize,
    rounds: usize,
    mut first: impl FnMut(&[usize]),
    mut second: impl FnMut(&[usize]),
) -> (f64, f64) {
    let (mut first_times, mut second_times) = (Vec::new(), Vec::new());
    for picks in order.chunks_exact(per).cycle().take(rounds) {
        let started = Instant::now();
        first(picks);
        first_times.push(started.elapsed());
        let started = Instant::now();
        second(picks);
        second_times.push(started.elapsed());
    }
    (median_ms(first_times), median_ms(second_times))
}

/// Benchmarks `read` of the next `per` picks of `order` per iteration: every benchmark walks
/// `order` from its start, so each reads the same keys in the same order.
fn bench_chunks(
    group: &mut Group<'_>,
    id: &str,
    order: &[usize],
    per: usize,
    mut read: impl FnMut(&[usize]),
) {
    let mut picks = order.chunks_exact(per).cycle();
    group.bench_function(id, |b| b.iter(|| read(picks.next().expect("cycle"))));
}

/// Writes the levels as `{"<name>": {"value": v, "unit": u}}` for `cargo xtask bench`, with the
/// sizes used.
fn write_measurements(path: &Path, levels: &[(&str, f64, &str)], open_keys: usize, rows: usize) {
    let mut json: serde_json::Map<String, serde_json::Value> = levels
        .iter()
        .map(|(name, value, unit)| {
            ((*name).to_owned(), serde_json::json!({"value": value, "unit": unit}))
        })
        .collect();
    json.insert("sizes".into(), serde_json::json!({"rows": rows, "open_keys": open_keys}));
    std::fs::write(path, serde_json::Value::Object(json).to_string()).expect("measurements.json");
}

criterion_group!(remote, benches);
criterion_main!(remote);
