//! The cache handle over stores: writes, reads, resumes and several writers at once.

use stowage_core::{Backend, DType, Reader, Sample, Schema, ShapeRule, Tensor, ValidationLevel};
use stowage_remote::{RemoteCache, RemoteOptions};

fn options(dir: &tempfile::TempDir) -> RemoteOptions {
    RemoteOptions { node_cache: Some(dir.path().join("node")), ..RemoteOptions::default() }
}

fn schema() -> Schema {
    Schema::new().tensor("x", DType::U32, ShapeRule::Fixed(vec![2]))
}

fn sample(i: u32) -> Sample {
    Sample::new().with("x", Tensor::from_slice(&[2], &[i, i * 7]).unwrap())
}

#[test]
fn a_resumed_writer_counts_each_key_once() {
    let dir = tempfile::tempdir().unwrap();
    let url = "memory://cache-test/resume";
    let mut cache = RemoteCache::create(url, &schema(), &options(&dir)).unwrap();
    for i in 0..30 {
        cache.put(&format!("k{i}"), &sample(i)).unwrap();
    }
    cache.flush().unwrap();
    assert_eq!(cache.len(), 30);
    for i in 30..35 {
        cache.put(&format!("k{i}"), &sample(i)).unwrap();
    }
    assert_eq!(cache.len(), 35);
    cache.flush().unwrap();
    assert_eq!(cache.len(), 35);
    drop(cache);
    let mut next = RemoteCache::open_append(url, &options(&dir)).unwrap();
    assert_eq!(next.len(), 35);
    for i in 35..40 {
        next.put(&format!("k{i}"), &sample(i)).unwrap();
    }
    next.finalize().unwrap();
    assert_eq!(next.len(), 40);
    let reader = RemoteCache::open(url, &options(&dir)).unwrap();
    assert_eq!((reader.len(), reader.keys().unwrap().len()), (40, 40));
    assert!(reader.validate(ValidationLevel::Full).unwrap().is_clean());
    for i in 0..40 {
        assert_eq!(reader.get(&format!("k{i}")).unwrap().unwrap(), sample(i));
    }
}

/// A cache of `n` keys written by one rank in flushes of `per_flush`.
fn write_keys(store: stowage_remote::RemoteStore, dir: &tempfile::TempDir, n: u32, per_flush: u32) {
    let mut cache = RemoteCache::create_in(store, &schema(), &options(dir)).unwrap();
    for i in 0..n {
        cache.put(&format!("k{i}"), &sample(i)).unwrap();
        if (i + 1) % per_flush == 0 {
            cache.flush().unwrap();
        }
    }
    cache.finalize().unwrap();
}

fn faulty(name: &str) -> (stowage_remote::RemoteStore, std::sync::Arc<FaultyStore>) {
    let faulty = FaultyStore::new(std::sync::Arc::new(object_store::memory::InMemory::new()));
    let url = stowage_remote::RemoteUrl::parse(&format!("memory://{name}/cache")).unwrap();
    (faulty.store(url), faulty)
}

use stowage_remote::faults::{Fault, FaultyStore, Operation, Rule};

#[test]
fn opening_costs_four_requests_and_a_cold_get_one_range_read() {
    let dir = tempfile::tempdir().unwrap();
    let (store, faulty) = faulty("cache-open-cost");
    write_keys(store.clone(), &dir, 2_000, 100);
    faulty.clear_log();
    let reader = RemoteCache::open_in(store, &options(&dir), false).unwrap();
    let requests = faulty.requests();
    assert_eq!(requests.len(), 4, "{requests:?}");
    assert_eq!(reader.len(), 2_000);
    // The first get of a part fetches its row table once (or finds it in the node cache);
    // every get is then one range read.
    reader.get("k1999").unwrap().unwrap();
    faulty.clear_log();
    for i in [1990, 1991, 1999] {
        assert_eq!(reader.get(&format!("k{i}")).unwrap().unwrap(), sample(i));
    }
    assert_eq!(faulty.count(Operation::Get), 3, "{:?}", faulty.requests());
    assert_eq!(faulty.requests().len(), 3, "{:?}", faulty.requests());
    // A batch over one part coalesces its neighbouring rows into one request.
    faulty.clear_log();
    let keys: Vec<String> = (1900..2000).map(|i| format!("k{i}")).collect();
    let refs: Vec<&str> = keys.iter().map(String::as_str).collect();
    let got = reader.get_batch(&refs).unwrap();
    assert!(got.iter().zip(1900..).all(|(s, i)| s.as_ref() == Some(&sample(i))));
    assert_eq!(faulty.count(Operation::Get), 1, "{:?}", faulty.requests());
}

#[test]
fn two_ranks_write_one_cache_at_once_and_lose_no_put() {
    let dir = tempfile::tempdir().unwrap();
    let url = "memory://cache-test/two-ranks";
    RemoteCache::create(url, &schema(), &options(&dir)).unwrap();
    std::thread::scope(|scope| {
        for rank in ["a", "b"] {
            let dir = &dir;
            scope.spawn(move || {
                let opts = RemoteOptions { rank: Some(rank.into()), ..options(dir) };
                let mut cache = RemoteCache::open_append(url, &opts).unwrap();
                let base = if rank == "a" { 0 } else { 10_000 };
                for i in base..base + 300 {
                    cache.put(&format!("k{i}"), &sample(i)).unwrap();
                    if i % 50 == 49 {
                        cache.flush().unwrap();
                    }
                }
                cache.flush().unwrap();
            });
        }
    });
    let reader = RemoteCache::open(url, &options(&dir)).unwrap();
    assert_eq!((reader.len(), reader.keys().unwrap().len()), (600, 600));
    for i in (0..300).chain(10_000..10_300) {
        assert_eq!(reader.get(&format!("k{i}")).unwrap().unwrap(), sample(i), "k{i}");
    }
    assert!(reader.validate(ValidationLevel::Full).unwrap().is_clean());
}

#[test]
fn a_key_two_ranks_wrote_unseen_is_won_by_the_first_rank_and_counted_once() {
    let dir = tempfile::tempdir().unwrap();
    let url = "memory://cache-test/same-key";
    RemoteCache::create(url, &schema(), &options(&dir)).unwrap();
    let open = |rank: &str| {
        let opts = RemoteOptions { rank: Some(rank.into()), ..options(&dir) };
        RemoteCache::open_append(url, &opts).unwrap()
    };
    let (mut b, mut a) = (open("b"), open("a"));
    b.put("shared", &sample(2)).unwrap();
    a.put("shared", &sample(1)).unwrap();
    a.put("only-a", &sample(3)).unwrap();
    b.flush().unwrap();
    a.flush().unwrap();
    let reader = RemoteCache::open(url, &options(&dir)).unwrap();
    assert_eq!(reader.get("shared").unwrap().unwrap(), sample(1));
    assert_eq!(reader.len(), 2);
    assert_eq!(reader.keys().unwrap(), ["shared", "only-a"]);
}

#[test]
fn a_rank_refuses_a_key_it_can_see_and_the_old_value_stays() {
    let dir = tempfile::tempdir().unwrap();
    let url = "memory://cache-test/refuse";
    let mut cache = RemoteCache::create(url, &schema(), &options(&dir)).unwrap();
    cache.put("k", &sample(1)).unwrap();
    let err = cache.put("k", &sample(2)).unwrap_err();
    assert!(matches!(err, stowage_core::Error::Unsupported { .. }), "{err}");
    cache.flush().unwrap();
    let mut other = RemoteCache::open_append(url, &options(&dir)).unwrap();
    assert!(matches!(other.put("k", &sample(3)), Err(stowage_core::Error::Unsupported { .. })));
    assert_eq!(other.get("k").unwrap().unwrap(), sample(1));
}

#[test]
fn a_flipped_byte_in_a_record_is_an_error_naming_the_key_never_data() {
    let dir = tempfile::tempdir().unwrap();
    let url = "memory://cache-test/flip";
    write_keys(stowage_remote::RemoteStore::open(url).unwrap(), &dir, 10, 5);
    let store = stowage_remote::RemoteStore::open(url).unwrap();
    let rows: Vec<String> = store
        .list("ranks")
        .unwrap()
        .into_iter()
        .map(|o| o.name)
        .filter(|n| n.ends_with(".rows"))
        .collect();
    assert_eq!(rows.len(), 2);
    for name in &rows {
        let mut bytes = store.get(name).unwrap().to_vec();
        let last = bytes.len() - 1;
        bytes[last] ^= 0x01;
        store.put_pointer(name, bytes.into()).unwrap();
    }
    let reader = RemoteCache::open(url, &options(&dir)).unwrap();
    // The last record of each part is damaged: k4 and k9.
    for key in ["k4", "k9"] {
        let err = reader.get(key).unwrap_err();
        assert!(
            matches!(&err, stowage_core::Error::Corrupted { key: Some(k), .. } if k == key),
            "{err}"
        );
    }
    assert_eq!(reader.get("k0").unwrap().unwrap(), sample(0));
    let report = reader.validate(ValidationLevel::Full).unwrap();
    assert!(report.problems.iter().any(|p| p.key.as_deref() == Some("k4")), "{report:?}");
}

#[test]
fn a_flush_that_fails_poisons_the_handle_and_a_lost_answer_does_not() {
    let dir = tempfile::tempdir().unwrap();
    let (store, faulty) = faulty("cache-poison");
    let mut cache = RemoteCache::create_in(store.clone(), &schema(), &options(&dir)).unwrap();
    cache.put("a", &sample(1)).unwrap();
    // The commit's answer is lost: reading it back finds it, and the flush succeeds.
    faulty.inject(Rule::once(Operation::Put, "commits/", Fault::LoseResponse));
    cache.flush().unwrap();
    cache.put("b", &sample(2)).unwrap();
    faulty.inject(Rule::once(Operation::Put, ".rows", Fault::Unavailable).times(3));
    assert!(cache.flush().is_err());
    let err = cache.put("c", &sample(3)).unwrap_err();
    assert!(matches!(err, stowage_core::Error::Poisoned { .. }), "{err}");
    drop(cache);
    let mut resumed = RemoteCache::open_in(store.clone(), &options(&dir), true).unwrap();
    assert_eq!(resumed.get("a").unwrap().unwrap(), sample(1));
    assert_eq!(resumed.get("b").unwrap(), None);
    resumed.put("b", &sample(2)).unwrap();
    resumed.finalize().unwrap();
    let reader = RemoteCache::open_in(store, &options(&dir), false).unwrap();
    assert_eq!((reader.len(), reader.is_finalized()), (2, true));
}

#[test]
fn after_finalize_puts_are_refused_also_after_reopening() {
    let dir = tempfile::tempdir().unwrap();
    let url = "memory://cache-test/finalized";
    write_keys(stowage_remote::RemoteStore::open(url).unwrap(), &dir, 3, 10);
    let mut again = RemoteCache::open_append(url, &options(&dir)).unwrap();
    assert!(matches!(again.put("new", &sample(9)), Err(stowage_core::Error::Finalized { .. })));
    let reader = RemoteCache::open(url, &options(&dir)).unwrap();
    assert!(matches!(
        RemoteCache::open(url, &options(&dir)).unwrap().flush(),
        Err(stowage_core::Error::Unsupported { .. })
    ));
    assert_eq!(reader.len(), 3);
}

#[test]
fn with_cache_rows_a_part_is_fetched_once_then_read_locally() {
    let dir = tempfile::tempdir().unwrap();
    let (store, faulty) = faulty("cache-rows");
    write_keys(store.clone(), &dir, 200, 100);
    let opts = RemoteOptions { cache_rows: true, ..options(&dir) };
    let reader = RemoteCache::open_in(store, &opts, false).unwrap();
    faulty.clear_log();
    assert_eq!(reader.get("k150").unwrap().unwrap(), sample(150));
    // The part's rows object whole, once (its row table is in the node cache already: the
    // writer's merges counted keys with it).
    let rows_gets = faulty.requests().iter().filter(|r| r.path.ends_with(".rows")).count();
    assert_eq!(rows_gets, 1, "{:?}", faulty.requests());
    faulty.clear_log();
    for i in 100..200 {
        assert_eq!(reader.get(&format!("k{i}")).unwrap().unwrap(), sample(i));
    }
    let keys: Vec<String> = (100..200).map(|i| format!("k{i}")).collect();
    let refs: Vec<&str> = keys.iter().map(String::as_str).collect();
    assert_eq!(reader.get_batch(&refs).unwrap().len(), 100);
    assert!(faulty.requests().is_empty(), "{:?}", faulty.requests());
}
