//! The quick form of the convert crash campaign: `stowage convert` killed inside each step it
//! has, for every target backend, then run again; every rerun must give the uninterrupted
//! result (`cargo xtask reliability --campaign crash-convert` runs the long form).

use stowage_reliability::convert::{Config, TARGETS, run, trial::Verdict};

#[test]
fn every_rerun_of_a_killed_convert_gives_the_uninterrupted_result() {
    let work = tempfile::tempdir().unwrap();
    let config = Config { trials: 6, samples: 3000, flush_every: Some(250), seed: 7 };
    let reports = run(&config, &TARGETS, work.path()).unwrap();
    let mut landed = std::collections::BTreeSet::new();
    for report in &reports {
        assert_eq!(report.trials.len(), 6, "{}", report.target);
        assert!(report.failures().is_empty(), "{}: {:#?}", report.target, report.failures());
        for (_, verdict) in &report.trials {
            if let Verdict::Passed { landed: step } = verdict {
                landed.insert(step.clone());
            }
        }
    }
    // Over 24 trials the kills reach the copy, a flush and finalize at least.
    for step in ["copy", "flush", "finalize"] {
        assert!(landed.contains(step), "no kill landed in {step}: {landed:?}");
    }
}
