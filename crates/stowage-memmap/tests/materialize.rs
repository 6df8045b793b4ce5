//! In-memory realization: identical samples from RAM, the RAM guard's refusal and the real budget.

use std::path::Path;

use stowage_core::{Backend, DynReader, Error, Reader, Sample};
use stowage_memmap::test_support::{check_realization, parse_cgroup_limit, parse_meminfo_total};
use stowage_memmap::{
    BudgetSource, MaterializedMemmap, MemmapBackend, MemmapOptions, MemoryBudget, dnanet,
};

#[path = "common/dnanet_rows.rs"]
mod dnanet_rows;
use dnanet_rows::{D, L, key};

const ROWS: usize = 12;

/// DNANet row `i` (four distinct panels (the realization sizes below count their text)).
fn dnanet_row(i: usize) -> Sample {
    dnanet_rows::dnanet_row(i, format!("{{\"panel\": {}}}", i % 4))
}

/// Writes `ROWS` rows; finalized unless `finalize` is false (then flushed: an unfinished cache).
fn write_cache(dir: &Path, finalize: bool) {
    let mut cache = MemmapBackend::create(dir, &dnanet(D, L), MemmapOptions::default()).unwrap();
    for i in 0..ROWS {
        cache.put(&key(i), &dnanet_row(i)).unwrap();
    }
    if finalize {
        cache.finalize().unwrap();
    } else {
        cache.flush().unwrap();
    }
}

fn read_only(dir: &Path) -> MemmapBackend {
    MemmapBackend::open_read_only(dir, MemmapOptions::default()).unwrap()
}

fn plenty() -> MemoryBudget {
    MemoryBudget::total_ram(1 << 40)
}

/// Every key and every row (positive and negative) reads the same from RAM as from the maps.
fn check_identical(reader: &MemmapBackend, in_ram: &dyn Reader, get_row: impl Fn(i64) -> Sample) {
    assert_eq!(in_ram.len(), ROWS);
    assert_eq!(in_ram.keys().unwrap(), reader.keys().unwrap());
    for i in 0..ROWS {
        let from_ram = in_ram.get(&key(i)).unwrap().unwrap();
        assert_eq!(Some(&from_ram), reader.get(&key(i)).unwrap().as_ref(), "key {}", key(i));
        for (name, value) in dnanet_row(i).fields() {
            assert_eq!(from_ram.get(name), Some(value), "row {i} field {name}");
        }
        assert!(from_ram.fields().all(|(_, v)| v.as_tensor().is_none_or(|t| !t.is_zero_copy())));
        assert_eq!(get_row(i as i64), from_ram);
        assert_eq!(get_row(i as i64 - ROWS as i64), from_ram);
        assert_eq!(reader.get_row(i as i64 - ROWS as i64).unwrap(), from_ram);
        assert!(in_ram.contains(&key(i)).unwrap());
    }
    assert_eq!(in_ram.get("/nope").unwrap(), None);
    assert!(!in_ram.contains("/nope").unwrap());
}

#[test]
fn materialized_rows_equal_the_memmap_rows() {
    let dir = tempfile::tempdir().unwrap();
    write_cache(dir.path(), true);
    let reader = read_only(dir.path());
    let in_ram = reader.materialize(&plenty()).unwrap();
    check_identical(&reader, &in_ram, |i| in_ram.get_row(i).unwrap());
    assert!(in_ram.is_finalized());
    assert_eq!(in_ram.schema(), reader.schema());
    assert_eq!(in_ram.path(), dir.path());
    assert!(!in_ram.capabilities().zero_copy_get);
    assert_eq!(in_ram.resident_tensor_bytes(), (ROWS * (2 * D * L + D * L + 4 * L)) as u64);
    assert_eq!(in_ram.projected_bytes(), reader.projected_realization_bytes().unwrap());
    assert!(in_ram.validate(stowage_core::ValidationLevel::Full).unwrap().is_clean());
    for i in [ROWS as i64, -(ROWS as i64) - 1, i64::MIN, i64::MAX] {
        let err = in_ram.get_row(i).unwrap_err().to_string();
        assert!(err.contains(&format!("row {i} ")) && err.contains("12 rows"), "{err}");
    }
}

#[test]
fn unfinished_caches_materialize_too() {
    let dir = tempfile::tempdir().unwrap();
    write_cache(dir.path(), false);
    let reader = read_only(dir.path());
    assert!(!reader.is_finalized());
    let in_ram = reader.materialize(&plenty()).unwrap();
    check_identical(&reader, &in_ram, |i| in_ram.get_row(i).unwrap());
    assert!(!in_ram.is_finalized());
}

#[test]
fn an_owned_realization_is_a_boxed_reader() {
    let dir = tempfile::tempdir().unwrap();
    write_cache(dir.path(), true);
    let owned: MaterializedMemmap = read_only(dir.path()).into_materialized(&plenty()).unwrap();
    let first = owned.get_row(0).unwrap();
    let boxed: Box<DynReader> = Box::new(owned);
    let reader = read_only(dir.path());
    check_identical(&reader, &*boxed, |i| reader.get_row(i).unwrap());
    assert_eq!(boxed.get_batch(&[&key(0), "/nope"]).unwrap(), [Some(first), None]);
    assert_eq!(boxed.format(), &stowage_memmap::STOWAGE_MEMMAP);
    assert_eq!(boxed.len(), ROWS);
}

#[test]
fn a_budget_below_twice_the_projection_is_refused_with_the_spec_message() {
    let dir = tempfile::tempdir().unwrap();
    write_cache(dir.path(), true);
    let reader = read_only(dir.path());
    let projected = reader.projected_realization_bytes().unwrap();
    // Tensors alone: data i16 + annotation i8 + scaler f32, per row.
    let tensors = (ROWS * (2 * D * L + D * L + 4 * L)) as u64;
    assert!(projected > tensors, "{projected}");
    // Plus the text bytes: 12 keys of 16 bytes, 12 meta_json texts (10 of 8 bytes, 2 of 9), the 4
    // distinct panels (12 bytes each) and the one allele (5 bytes) of the sidecars, each once.
    assert_eq!(projected, tensors + 12 * 16 + (10 * 8 + 2 * 9) + 4 * 12 + 5);

    // Exactly 50% is allowed; one byte less of budget refuses.
    assert!(reader.materialize(&MemoryBudget::total_ram(2 * projected)).is_ok());
    let budget = MemoryBudget::total_ram(2 * projected - 1);
    let Err(Error::InvalidArgument { detail }) = reader.materialize(&budget) else {
        panic!("not refused")
    };
    assert_eq!(
        detail,
        format!(
            "load_in_memory=True refused: cache would use {:.2} GB which exceeds 50% of total RAM \
             ({:.2} GB). Set load_in_memory=False and stream from the memmap instead.",
            projected as f64 / 1e9,
            (2 * projected - 1) as f64 / 1e9
        )
    );
    assert!(detail.contains("cache would use 0.00 GB") && detail.contains("RAM (0.00 GB)."));

    // The text with real numbers, as a cache of 12.35 GB would see it on a 16 GB machine or in an
    // 8 GiB cgroup.
    let err = check_realization(12_345_678_901, &MemoryBudget::total_ram(16_000_000_000));
    assert_eq!(
        err.unwrap_err().to_string(),
        "invalid argument: load_in_memory=True refused: cache would use 12.35 GB which exceeds \
         50% of total RAM (16.00 GB). Set load_in_memory=False and stream from the memmap instead."
    );
    let cgroup = MemoryBudget { total_bytes: 8 << 30, source: BudgetSource::CgroupLimit };
    let Err(Error::InvalidArgument { detail }) = check_realization(4_294_967_297, &cgroup) else {
        panic!("not refused")
    };
    assert_eq!(
        detail,
        "load_in_memory=True refused: cache would use 4.29 GB which exceeds 50% of the cgroup \
         memory limit (8.59 GB). Set load_in_memory=False and stream from the memmap instead."
    );
}

#[test]
fn damaged_rows_are_reported_while_materializing() {
    let dir = tempfile::tempdir().unwrap();
    write_cache(dir.path(), true);
    let path = dir.path().join("scaler.bin");
    let mut scaler = std::fs::read(&path).unwrap();
    scaler[4 * L * 5 + 1] ^= 0x40; // row 5
    std::fs::write(&path, scaler).unwrap();
    let reader = read_only(dir.path());
    let err = reader.materialize(&plenty()).err().expect("the damaged row is reported");
    let Error::Corrupted { path: bad, key: Some(bad_key), detail } = &err else { panic!("{err}") };
    assert_eq!(bad, &path);
    assert_eq!(bad_key, &key(5));
    assert!(detail.starts_with("row 5: field \"scaler\""), "{detail}");
}

#[test]
fn the_real_budget_comes_from_proc_meminfo() {
    let Ok(meminfo) = std::fs::read_to_string("/proc/meminfo") else {
        return; // not Linux: nothing to compare with
    };
    let ram = parse_meminfo_total(&meminfo).expect("MemTotal parses");
    let budget = MemoryBudget::detect().unwrap();
    assert!(budget.total_bytes > 0 && budget.total_bytes <= ram, "{budget:?} vs {ram}");
    match budget.source {
        BudgetSource::TotalRam => assert_eq!(budget.total_bytes, ram),
        BudgetSource::CgroupLimit => {
            let limits =
                ["/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"].map(
                    |p| std::fs::read_to_string(p).ok().as_deref().and_then(parse_cgroup_limit),
                );
            assert!(limits.contains(&Some(budget.total_bytes)), "{limits:?} {budget:?}");
        }
    }
    assert_eq!(budget.limit_bytes(), budget.total_bytes / 2);
}

#[test]
fn cgroup_limit_texts() {
    assert_eq!(parse_cgroup_limit("max\n"), None);
    assert_eq!(parse_cgroup_limit("1073741824\n"), Some(1 << 30));
    assert_eq!(parse_cgroup_limit("not a number"), None);
    let meminfo = "MemTotal:       16318412 kB\n";
    let ram = MemoryBudget::total_ram(16_318_412 * 1024);
    assert_eq!(MemoryBudget::from_texts(meminfo, Some("max\n"), None).unwrap(), ram);
    assert_eq!(MemoryBudget::from_texts(meminfo, Some("garbage"), Some("x")).unwrap(), ram);
    assert_eq!(
        MemoryBudget::from_texts(meminfo, Some("1073741824\n"), None).unwrap(),
        MemoryBudget { total_bytes: 1 << 30, source: BudgetSource::CgroupLimit }
    );
    assert_eq!(
        MemoryBudget::from_texts(meminfo, None, Some("2147483648\n")).unwrap(),
        MemoryBudget { total_bytes: 2 << 30, source: BudgetSource::CgroupLimit }
    );
}
