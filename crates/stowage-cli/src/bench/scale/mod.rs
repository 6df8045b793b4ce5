//! `stowage bench --scale`: every backend at 100 thousand to 100 million keys of a 16-byte row
//! (float32[4]), each size reporting open time and memory (read-only and resumed), first get,
//! write rate, random get rates warm and cold, bytes per key, the physical references on the
//! same bytes in the same run, and issue 17's targets as PASS or FAIL.
//!
//! Streaming throughout: keys and samples are made from their index when needed, the random
//! order is drawn with replacement from a seeded generator ([`order`]), so the bench itself never
//! holds every key. Before it starts, [`disk`] estimates the bytes the chosen sizes need and
//! refuses when the disk has less.
//!
//! Modules: [`order`] the read order, [`physical`] page cache and references, [`measure`] one
//! backend at one size, [`disk`] the disk check, [`report`] the report and its targets.

pub mod disk;
pub mod measure;
pub mod order;
pub mod physical;
pub mod report;

use std::path::PathBuf;

use stowage_core::DType;

use self::order::Sampler;
use self::report::{Entry, Outcome, ScaleReport, SizeReport};
use super::subject::Kind;
use super::workload::Workload;

/// The sizes a run without `--sizes` measures.
pub const DEFAULT_SIZES: [usize; 4] = [100_000, 1_000_000, 10_000_000, 100_000_000];
/// Above this many keys only the backends of [`LARGEST_BACKENDS`] run (issue 17 asks 100 M keys
/// of arrow and memmap only).
pub const LARGEST_FOR_ALL: usize = 10_000_000;
/// The backends that also run above [`LARGEST_FOR_ALL`].
pub const LARGEST_BACKENDS: [Kind; 2] = [Kind::Memmap, Kind::Arrow];
/// The row: one float32[4] tensor, 16 bytes.
pub const ROW_SHAPE: [usize; 1] = [4];
/// Seed of the warm read order (the same for every backend and the raw copy).
const WARM_SEED: u64 = 17;

/// What `stowage bench --scale` runs.
#[derive(Debug, Clone)]
pub struct ScalePlan {
    /// Keys per cache, ascending.
    pub sizes: Vec<usize>,
    /// The backends, in order.
    pub backends: Vec<Kind>,
    /// Where the caches are written (one subdirectory per backend and size, each removed once
    /// measured unless `keep`).
    pub dir: PathBuf,
    /// Bytes the disk must still have free after the largest cache is written.
    pub keep_free_bytes: u64,
    /// Keep the caches.
    pub keep: bool,
    /// Also drop the machine's whole page cache before each cold measurement (`--drop-caches`).
    pub drop_caches: bool,
}

/// The workload of `rows` keys.
pub fn workload(rows: usize) -> Workload {
    Workload::flat(rows, DType::F32, ROW_SHAPE.to_vec())
}

/// Why `kind` does not run at `size` keys; `None` when it does.
pub fn not_planned(kind: Kind, size: usize) -> Option<String> {
    (size > LARGEST_FOR_ALL && !LARGEST_BACKENDS.contains(&kind)).then(|| {
        format!(
            "not run: above {} keys the suite runs memmap and arrow only (issue 17)",
            report::count(LARGEST_FOR_ALL)
        )
    })
}

/// `100k`, `1m`, `10M`, `2500` as a key count (k and m: thousands and millions).
///
/// Errors: anything else, or 0, as text quoting it.
pub fn parse_size(text: &str) -> Result<usize, String> {
    let lower = text.trim().to_ascii_lowercase();
    let (digits, factor) = match lower.strip_suffix('k') {
        Some(digits) => (digits, 1_000),
        None => match lower.strip_suffix('m') {
            Some(digits) => (digits, 1_000_000),
            None => (lower.as_str(), 1),
        },
    };
    let number: usize = digits
        .replace('_', "")
        .parse()
        .map_err(|_| format!("{text:?} is not a key count; say e.g. 100k, 1m, 10m or 2500"))?;
    match number.checked_mul(factor) {
        Some(0) => Err(format!("{text:?}: a size needs at least one key")),
        Some(n) => Ok(n),
        None => Err(format!("{text:?} is too large")),
    }
}

/// Runs `plan`: the disk check, then each size in turn (its raw-copy reference, then every
/// backend), calling `progress` before each step.
///
/// Errors: `plan.dir` cannot be created, or the disk check refuses, as text saying why.
pub fn run(plan: &ScalePlan, progress: &mut dyn FnMut(&str)) -> Result<ScaleReport, String> {
    std::fs::create_dir_all(&plan.dir)
        .map_err(|e| format!("cannot create {}: {e}", plan.dir.display()))?;
    let mut sizes = plan.sizes.clone();
    sizes.sort_unstable();
    sizes.dedup();
    progress("scale: disk check (a probe cache per backend)");
    let disk = disk::check(plan, &sizes)?;
    progress(&disk.summary());
    let mut reports = Vec::new();
    let mut cache_drop = None;
    for &size in &sizes {
        let workload = workload(size);
        let warm = Sampler::new(WARM_SEED, size).take_n(size.min(measure::WARM_READS));
        progress(&format!("scale: {} keys: raw copy out of a warm map", report::count(size)));
        let row_bytes = ROW_SHAPE.iter().product::<usize>() * DType::F32.item_size();
        let raw_copy = physical::warm_raw_copy(
            &plan.dir.join("reference.bin"),
            size,
            row_bytes,
            |i| workload.tensor_bytes(i),
            warm.clone(),
        );
        let mut backends = Vec::new();
        for &kind in &plan.backends {
            let outcome = match not_planned(kind, size) {
                Some(why) => Outcome::NotPlanned(why),
                None => {
                    progress(&format!(
                        "scale: {} keys: {}: write, resume, open, read warm and cold",
                        report::count(size),
                        kind.name()
                    ));
                    let dir = plan.dir.join(format!("{}-{size}", kind.name()));
                    let seed = 1_700 + size as u64;
                    let result =
                        measure::measure(kind, &workload, &dir, &warm, seed, plan.drop_caches);
                    if !plan.keep {
                        let _ = std::fs::remove_dir_all(&dir);
                    }
                    match result {
                        Ok((measured, dropped)) => {
                            cache_drop = Some(dropped);
                            Outcome::Measured(Box::new(measured))
                        }
                        Err(why) => Outcome::Failed(why),
                    }
                }
            };
            backends.push(Entry { backend: kind.name(), outcome });
        }
        reports.push(SizeReport {
            keys: size,
            warm_reads: warm.len(),
            raw_copy_rows_per_s: raw_copy.as_ref().ok().copied(),
            raw_copy_error: raw_copy.err(),
            backends,
        });
    }
    Ok(ScaleReport::new(reports, &plan.backends, cache_drop, disk))
}

/// `stowage bench --scale`: the plan from `args`, run with `progress`; the rendered report and
/// whether every backend ran at every size.
///
/// Errors: as [`run`].
pub fn run_command(
    args: &crate::command_line::BenchArgs,
    progress: &mut dyn FnMut(&str),
) -> Result<(String, bool), String> {
    use crate::command_line::BenchFormat;
    let (dir, temporary) = match &args.dir {
        Some(dir) => (dir.clone(), false),
        None => (std::env::temp_dir().join(format!("stowage-scale-{}", std::process::id())), true),
    };
    let plan = ScalePlan {
        sizes: if args.sizes.is_empty() { DEFAULT_SIZES.to_vec() } else { args.sizes.clone() },
        backends: if args.backends.is_empty() { Kind::ALL.to_vec() } else { args.backends.clone() },
        dir: dir.clone(),
        keep_free_bytes: args.keep_free.saturating_mul(1_000_000_000),
        keep: args.keep,
        drop_caches: args.drop_caches,
    };
    let report = run(&plan, progress);
    if temporary && !args.keep {
        let _ = std::fs::remove_dir_all(&dir);
    }
    let report = report?;
    let text = match args.format {
        BenchFormat::Json => report.to_json(),
        BenchFormat::Markdown | BenchFormat::Table => report.to_markdown(),
    };
    Ok((text, report.all_ran()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_with_suffixes_and_refuse_nonsense() {
        assert_eq!(parse_size("100k"), Ok(100_000));
        assert_eq!(parse_size("1m"), Ok(1_000_000));
        assert_eq!(parse_size("10M"), Ok(10_000_000));
        assert_eq!(parse_size("2500"), Ok(2_500));
        assert_eq!(parse_size("1_000"), Ok(1_000));
        assert!(parse_size("0").unwrap_err().contains("at least one key"));
        assert!(parse_size("ten").unwrap_err().contains("\"ten\" is not a key count"));
        assert!(parse_size("1.5m").is_err());
    }

    #[test]
    fn only_memmap_and_arrow_run_above_ten_million() {
        for kind in Kind::ALL {
            assert!(not_planned(kind, 10_000_000).is_none());
        }
        assert!(not_planned(Kind::Arrow, 100_000_000).is_none());
        assert!(not_planned(Kind::Memmap, 100_000_000).is_none());
        assert!(not_planned(Kind::Npy, 100_000_000).unwrap().contains("memmap and arrow only"));
        assert!(not_planned(Kind::Hdf5, 10_000_001).is_some());
    }
}
