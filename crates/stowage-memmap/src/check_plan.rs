//! How a memmap cache is checked from end to end ([`stowage_core::Reader::check_plan`]): a row is
//! spread over every field's file, so no file can be checked on its own; the structure check
//! (sizes, index, sidecars) runs once, then every selected row is read in runs of keys, its
//! checksums checked where stowage wrote them.

use stowage_core::check_plan::{self, CheckPlan, NoChecksums, Selection};
use stowage_core::{Reader, Result};

use crate::MemmapBackend;

/// How a damaged row of a cache DNANet wrote is repaired.
const DNANET_REPAIR: &str = "rows cannot be replaced in a memmap cache: rebuild it with DNANet \
    (delete its directory; the next run writes it again)";

/// How a damaged row of stowage's memmap cache is repaired.
const STOWAGE_REPAIR: &str = "rows cannot be replaced in a memmap cache: rebuild it (delete its \
    directory and write it again, or `stowage convert` from an intact copy)";

/// What is checked of a cache DNANet wrote, which has no checksums.
const DNANET_NO_CHECKSUMS: &str = "DNANet writes no checksums: verify checked file sizes, the \
    index, the sidecars, every row's readability and JSON texts, not the bytes' integrity; \
    `stowage adopt` adds stowage's checksums of every row beside DNANet's files";

/// The plan of `cache`: [`check_plan::every_key`]; a cache DNANet wrote alone (no checksums) has
/// its rows reported as unchecked.
pub(crate) fn plan<'a>(cache: &'a MemmapBackend, selection: &Selection) -> Result<CheckPlan<'a>> {
    let dnanet = cache.format().id == crate::DNANET_MEMMAP.id;
    let repair = if dnanet { DNANET_REPAIR } else { STOWAGE_REPAIR };
    let mut plan = check_plan::every_key(cache, selection, repair)?;
    if dnanet {
        // The structure check lists DNANet's rows as unchecked; `no_checksums` says so for the
        // whole cache, once.
        plan.structure.unchecked.clear();
    }
    let no_checksums = dnanet.then(|| NoChecksums {
        path: cache.path().to_path_buf(),
        writer: "DNANet",
        next_step: DNANET_NO_CHECKSUMS,
    });
    Ok(CheckPlan { no_checksums, ..plan })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::MemmapOptions;
    use crate::unit_fixtures::write_dnanet_cache;
    use stowage_core::{DType, Sample, Schema, ShapeRule, Tensor};

    fn run(plan: &CheckPlan<'_>) -> Vec<stowage_core::ValidationReport> {
        plan.units.iter().map(|unit| (unit.check)(&|_| {})).collect()
    }

    #[test]
    fn a_dnanet_cache_reads_every_row_and_reports_them_unchecked() {
        let dir = tempfile::tempdir().unwrap();
        write_dnanet_cache(dir.path());
        let cache = MemmapBackend::open_read_only(dir.path(), MemmapOptions::default()).unwrap();
        let plan = plan(&cache, &Selection::all()).unwrap();
        assert_eq!((plan.keys, plan.selected), (3, 3));
        assert_eq!(plan.repair, DNANET_REPAIR);
        assert_eq!(plan.no_checksums.as_ref().unwrap().writer, "DNANet");
        let reports = run(&plan);
        assert_eq!(reports.iter().map(|r| r.samples_checked).sum::<u64>(), 3);
        assert!(reports.iter().all(|r| r.problems.is_empty()), "{reports:?}");
    }

    #[test]
    fn a_sample_of_a_stowage_cache_reads_the_selected_rows() {
        let dir = tempfile::tempdir().unwrap();
        let schema = Schema::new().tensor("x", DType::U8, ShapeRule::Fixed(vec![2]));
        let mut cache =
            MemmapBackend::create(dir.path(), &schema, MemmapOptions::default()).unwrap();
        for i in 0..10u8 {
            let sample = Sample::new().with("x", Tensor::from_slice(&[2], &[i, i]).unwrap());
            stowage_core::Backend::put(&mut cache, &format!("k{i}"), &sample).unwrap();
        }
        stowage_core::Backend::finalize(&mut cache).unwrap();
        let cache = MemmapBackend::open_read_only(dir.path(), MemmapOptions::default()).unwrap();
        let plan = plan(&cache, &Selection { fraction: Some(0.3), seed: 1 }).unwrap();
        assert_eq!((plan.keys, plan.selected), (10, 3));
        assert_eq!(plan.repair, STOWAGE_REPAIR);
        assert!(plan.no_checksums.is_none());
        let reports = run(&plan);
        assert_eq!(reports.iter().map(|r| r.samples_checked).sum::<u64>(), 3);
    }
}
