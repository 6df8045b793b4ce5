//! The key index at scale: does a flush cost the same with 10 thousand, 1 million and 10 million
//! keys cached, and what does opening a 10-million-key cache cost?
//!
//! Caches of float32[4] samples (small, so that 10 million fit this machine's disk and time) are
//! built once in `<bench dir>/scale/<keys>` (rebuilt when the build recipe changes) and merged
//! into one key index run over all their keys.
//!
//! - `flush_2048_<keys>`: one `flush` of 2,048 new samples (opened in append mode and put before
//!   timing) with default options (durable: segment, sidecars and log fsynced). Each timed flush
//!   is undone afterwards (its segment files deleted, the commit log cut back), so every flush
//!   meets exactly `<keys>` cached keys and no background merge: the merge the writer runs every
//!   32 segments is measured on its own.
//! - `merge_<keys>`: the background merge the writer starts after 32 more segments of 2,048 new
//!   keys ([`stowage_arrow::test_support::merged_index::plan_merge`]: here a new run over those segments, the
//!   big run left as it is), per new key.
//! - `open_<keys>`: `ArrowBackend::open` read-only, then drop (no throughput: per open).
//! - The resident memory an open adds before the first get, returned as `open_rss_<keys>` in MiB
//!   for `measurements.json`.
//!
//! `STOWAGE_BENCH_ARROW_SCALE` lists the key counts (default `10000,1000000,10000000`).

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use criterion::Throughput;
use stowage_arrow::{ArrowBackend, ArrowOptions};
use stowage_core::{Backend, DType, OpenMode, Sample, Schema, ShapeRule, Tensor};

/// Samples per timed flush.
const FLUSH_ROWS: usize = 2048;
/// Changes whenever the way the caches are built changes, so old ones are rebuilt.
const RECIPE: &str =
    "arrow-scale v2: float32[4], keys k{i:010}, 1Mi-row segments, one key index run";

fn schema() -> Schema {
    Schema::new().tensor("tensor", DType::F32, ShapeRule::Fixed(vec![4]))
}

fn sample(i: u64) -> Sample {
    let v = i as f32;
    Sample::new()
        .with("tensor", Tensor::from_slice(&[4], &[v, v + 0.25, v + 0.5, v + 0.75]).unwrap())
}

fn key(i: u64) -> String {
    format!("k{i:010}")
}

fn sizes() -> Vec<u64> {
    std::env::var("STOWAGE_BENCH_ARROW_SCALE")
        .unwrap_or_else(|_| "10000,1000000,10000000".into())
        .split(',')
        .map(|n| n.trim().parse().expect("STOWAGE_BENCH_ARROW_SCALE: comma-separated counts"))
        .collect()
}

fn label(keys: u64) -> String {
    match keys {
        k if k >= 1_000_000 && k % 1_000_000 == 0 => format!("{}m", k / 1_000_000),
        k if k >= 1_000 && k % 1_000 == 0 => format!("{}k", k / 1_000),
        k => k.to_string(),
    }
}

/// The cache of `keys` samples, built unless an intact one of this recipe is there.
fn cache_of(root: &Path, keys: u64) -> PathBuf {
    let dir = root.join(label(keys));
    let stamp = dir.join("recipe.txt");
    if std::fs::read_to_string(&stamp).is_ok_and(|s| s == RECIPE) {
        return dir;
    }
    let _ = std::fs::remove_dir_all(&dir);
    let started = Instant::now();
    let options = ArrowOptions { flush_every: 1 << 20, rank: Some(0), ..ArrowOptions::default() };
    let mut cache = ArrowBackend::create(&dir, &schema(), options).unwrap();
    for i in 0..keys {
        cache.put(&key(i), &sample(i)).unwrap();
    }
    cache.flush().unwrap();
    cache.merge_index().unwrap();
    drop(cache);
    std::fs::write(&stamp, RECIPE).unwrap();
    eprintln!("built {} ({keys} keys) in {:.1?}", dir.display(), started.elapsed());
    dir
}

/// Runs the scale benchmarks on caches below `root`; returns each cache's open RSS (MiB) under
/// its name, `open_rss_<keys>`.
pub fn benches(group: &mut super::Group<'_>, root: &Path) -> Vec<(String, f64)> {
    group.sample_size(20).warm_up_time(Duration::from_secs(1));
    group.measurement_time(Duration::from_secs(10));
    let mut rss = Vec::new();
    for keys in sizes() {
        let dir = cache_of(root, keys);
        group.throughput(Throughput::Elements(FLUSH_ROWS as u64));
        // Default options, but puts never flush by themselves: the timed flush writes them.
        let options =
            ArrowOptions { flush_every: 2 * FLUSH_ROWS, rank: Some(0), ..ArrowOptions::default() };
        let pristine = Snapshot::take(&dir);
        group.bench_function(format!("flush_2048_{}", label(keys)), |b| {
            b.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    let mut cache =
                        ArrowBackend::open(&dir, OpenMode::Append, options.clone()).unwrap();
                    for i in keys..keys + FLUSH_ROWS as u64 {
                        cache.put(&key(i), &sample(i)).unwrap();
                    }
                    let started = Instant::now();
                    cache.flush().unwrap();
                    total += started.elapsed();
                    drop(cache);
                    pristine.restore();
                }
                total
            })
        });
        group.throughput(Throughput::Elements(32 * FLUSH_ROWS as u64));
        // 32 segments of 2,048, merged by hand rather than in the background.
        let unmerged =
            ArrowOptions { flush_every: FLUSH_ROWS, merge_after: usize::MAX, ..options.clone() };
        group.bench_function(format!("merge_{}", label(keys)), |b| {
            b.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    let mut cache =
                        ArrowBackend::open(&dir, OpenMode::Append, unmerged.clone()).unwrap();
                    for i in keys..keys + 32 * FLUSH_ROWS as u64 {
                        cache.put(&key(i), &sample(i)).unwrap();
                    }
                    cache.flush().unwrap();
                    drop(cache);
                    let started = Instant::now();
                    background_merge(&dir);
                    total += started.elapsed();
                    pristine.restore();
                }
                total
            })
        });
        // Per open: no throughput, so the rate is opens per second.
        group.throughput(Throughput::Elements(1));
        group.bench_function(format!("open_{}", label(keys)), |b| {
            b.iter(|| drop(ArrowBackend::open(&dir, OpenMode::ReadOnly, options.clone()).unwrap()))
        });
        let mib = open_rss(&dir, &options);
        eprintln!("open_rss_{}: {mib:.1} MiB", label(keys));
        rss.push((format!("open_rss_{}", label(keys)), mib));
    }
    rss
}

/// The merge the writer starts in the background once `merge_after` segments are in no run
/// (the segments no run covers, with the newest runs no larger than them), run here.
fn background_merge(dir: &Path) {
    use stowage_arrow::test_support::merged_index::{
        MergedIndex, SegmentKeys, merge_run, plan_merge,
    };
    let layout = stowage_arrow::test_support::layout::Layout::new(dir);
    let committed = stowage_arrow::test_support::commit_log::read(&layout.commit_log()).unwrap();
    let through = committed.own.runs.last().map_or(0, |run| run.through);
    let fresh: Vec<&stowage_arrow::test_support::commit_log::SegmentEntry> =
        committed.segments.iter().filter(|s| s.id > through).collect();
    let run_keys: Vec<u64> = committed.own.runs.iter().map(|run| run.keys).collect();
    let taken = plan_merge(&run_keys, fresh.iter().map(|s| s.rows).sum());
    let open = |runs: &[stowage_arrow::test_support::commit_log::RunEntry]| -> Vec<MergedIndex> {
        runs.iter().map(|run| MergedIndex::open_entry(&layout, run).unwrap()).collect()
    };
    let split = committed.own.runs.len() - taken;
    let (older, inputs) = (open(&committed.own.runs[..split]), open(&committed.own.runs[split..]));
    let segments = SegmentKeys::of_ids(&layout, &committed.ids());
    let fresh: Vec<u64> = fresh.iter().map(|s| s.id).collect();
    merge_run(&layout, &segments, &inputs, &fresh, &older).unwrap();
}

/// A cache's files as built, to undo what a benchmark appended.
struct Snapshot {
    dir: PathBuf,
    /// (file, a hard link to it as built, its inode then).
    files: Vec<(PathBuf, PathBuf, u64)>,
    log_len: u64,
}

impl Snapshot {
    /// Remembers the commit log's length, and keeps the files a flush or merge may replace or
    /// remove (the key index run, the completion marker) as hard links: restoring them copies
    /// nothing, so no benchmark pays for rewriting a 10-million-key table in the page cache.
    fn take(dir: &Path) -> Snapshot {
        use std::os::unix::fs::MetadataExt;
        let log_len = std::fs::metadata(dir.join("stowage.log")).unwrap().len();
        let layout = stowage_arrow::test_support::layout::Layout::new(dir);
        let runs = layout.list_index_runs().unwrap().into_iter().map(|(_, _, path)| path);
        let files = runs
            .chain([layout.complete_marker()])
            .filter_map(|path| {
                let inode = std::fs::metadata(&path).ok()?.ino();
                let name = path.file_name()?.to_string_lossy().into_owned();
                let kept = dir.join(format!("{name}.bench-pristine"));
                let _ = std::fs::remove_file(&kept);
                std::fs::hard_link(&path, &kept).unwrap();
                Some((path, kept, inode))
            })
            .collect();
        Snapshot { dir: dir.to_path_buf(), files, log_len }
    }

    /// Deletes the segments committed since, cuts the log back and puts back the files that
    /// were replaced or removed.
    fn restore(&self) {
        use std::os::unix::fs::MetadataExt;
        let committed =
            stowage_arrow::test_support::commit_log::read(&self.dir.join("stowage.log")).unwrap();
        let log = std::fs::OpenOptions::new().write(true).open(self.dir.join("stowage.log"));
        log.unwrap().set_len(self.log_len).unwrap();
        let kept =
            stowage_arrow::test_support::commit_log::read(&self.dir.join("stowage.log")).unwrap();
        let layout = stowage_arrow::test_support::layout::Layout::new(&self.dir);
        for entry in &committed.segments[kept.segments.len()..] {
            let segment = layout.segment(entry.id);
            for path in [segment.with_extension("keys"), segment.with_extension("sums"), segment] {
                std::fs::remove_file(path).unwrap();
            }
        }
        // Runs a benchmark merged (the cache as built has one, kept in `files`).
        for (_, _, path) in layout.list_index_runs().unwrap() {
            if !self.files.iter().any(|(kept, _, _)| *kept == path) {
                std::fs::remove_file(path).unwrap();
            }
        }
        for (path, pristine, inode) in &self.files {
            if std::fs::metadata(path).map(|m| m.ino()).ok() != Some(*inode) {
                let temp = path.with_extension("bench-restore");
                let _ = std::fs::remove_file(&temp);
                std::fs::hard_link(pristine, &temp).unwrap();
                std::fs::rename(&temp, path).unwrap();
            }
        }
    }
}

/// Resident memory (MiB) that opening the cache at `dir` adds, measured around the open.
fn open_rss(dir: &Path, options: &ArrowOptions) -> f64 {
    let before = resident_bytes();
    let cache = ArrowBackend::open(dir, OpenMode::ReadOnly, options.clone()).unwrap();
    let after = resident_bytes();
    drop(cache);
    after.saturating_sub(before) as f64 / (1 << 20) as f64
}

/// This process's resident set, from `/proc/self/statm` (0 where there is none).
fn resident_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: u64 = statm.split_whitespace().nth(1).and_then(|p| p.parse().ok()).unwrap_or(0);
    pages * 4096
}
