//! When to kill: the steps of an uninterrupted conversion, read from its step trace, and a
//! random point inside one of them.

use rand::{Rng, rngs::StdRng};
use std::path::Path;
use std::time::Duration;

use super::Config;

/// The steps a kill is aimed at, with their weights: create (or, on a rerun, open) is short and
/// happens once, so it is drawn less often than the copy, the flushes and finalize.
const AIMS: [(&str, u32); 4] = [("create", 1), ("copy", 2), ("flush", 2), ("finalize", 2)];

/// One traced step: its name and how long it took.
#[derive(Debug, Clone, PartialEq)]
pub struct Step {
    /// `create`, `open`, `copy`, `flush`, `finalize` or `done`.
    pub name: String,
    /// Microseconds from the command's start to the step's.
    pub start_us: u64,
    /// Microseconds until the next step started (0 for the last).
    pub duration_us: u64,
}

/// Where to kill: once the trace shows the `occurrence`-th start (from 1) of step `step`,
/// after `delay`.
#[derive(Debug, Clone, PartialEq)]
pub struct KillPlan {
    /// The step aimed at.
    pub step: &'static str,
    /// Which start of that step (from 1).
    pub occurrence: usize,
    /// How long after that start.
    pub delay: Duration,
}

/// The steps of one uninterrupted run.
#[derive(Debug, Clone)]
pub struct Timeline {
    steps: Vec<Step>,
}

/// Parses a step trace (`<microseconds> <step>` per line); a torn last line is ignored.
pub fn parse(trace: &str) -> Vec<Step> {
    let mut steps: Vec<Step> = trace
        .lines()
        .filter_map(|line| {
            let (us, name) = line.split_once(' ')?;
            Some(Step { name: name.to_owned(), start_us: us.parse().ok()?, duration_us: 0 })
        })
        .collect();
    for i in 1..steps.len() {
        steps[i - 1].duration_us = steps[i].start_us.saturating_sub(steps[i - 1].start_us);
    }
    steps
}

impl Timeline {
    /// Runs the conversion of `source` into `dst` once, uninterrupted, with its trace.
    ///
    /// Errors: the command fails, or its trace does not end with `done`.
    pub fn measure(
        source: &Path,
        dst: &Path,
        target: &str,
        config: &Config,
    ) -> Result<Timeline, String> {
        let _ = std::fs::remove_dir_all(dst);
        let trace = dst.with_extension("trace");
        let _ = std::fs::remove_file(&trace);
        let output = super::trial::command(source, dst, target, config, Some(&trace))?
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .output()
            .map_err(|e| format!("running stowage convert: {e}"))?;
        if !output.status.success() {
            return Err(format!(
                "the uninterrupted conversion to {target} failed ({}): {}",
                output.status,
                String::from_utf8_lossy(&output.stderr).trim()
            ));
        }
        let steps = parse(&std::fs::read_to_string(&trace).unwrap_or_default());
        if steps.last().is_none_or(|s| s.name != "done") {
            return Err(format!("the trace {} does not end with done: {steps:?}", trace.display()));
        }
        Ok(Timeline { steps })
    }

    /// A random kill point: a step drawn by weight among those the run had, one of its starts,
    /// and a delay up to 1.1 times what that start's step took (a little past its end, so a kill
    /// also lands just after a step completes).
    pub fn plan(&self, rng: &mut StdRng) -> KillPlan {
        let present: Vec<(&'static str, u32)> = AIMS
            .iter()
            .copied()
            .filter(|(name, _)| self.steps.iter().any(|s| s.name == *name))
            .collect();
        let mut pick = rng.random_range(0..present.iter().map(|(_, w)| w).sum::<u32>());
        let step = present
            .iter()
            .find(|(_, weight)| {
                let hit = pick < *weight;
                pick = pick.saturating_sub(*weight);
                hit
            })
            .map_or("copy", |(name, _)| name);
        let starts: Vec<&Step> = self.steps.iter().filter(|s| s.name == step).collect();
        let occurrence = rng.random_range(0..starts.len());
        let fraction: f64 = rng.random_range(0.0..1.1);
        let delay_us = (starts[occurrence].duration_us as f64 * fraction) as u64;
        KillPlan { step, occurrence: occurrence + 1, delay: Duration::from_micros(delay_us) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    #[test]
    fn a_trace_becomes_steps_and_every_aimed_step_is_drawn() {
        let steps =
            parse("10 create\n900 copy\n5000 flush\n5400 copy\n8000 finalize\n9000 done\n12");
        assert_eq!(steps.len(), 6, "the torn line is dropped");
        assert_eq!((steps[0].name.as_str(), steps[0].duration_us), ("create", 890));
        assert_eq!(steps[4].duration_us, 1000);
        let timeline = Timeline { steps };
        let mut rng = StdRng::seed_from_u64(3);
        let mut seen = std::collections::BTreeSet::new();
        for _ in 0..200 {
            let plan = timeline.plan(&mut rng);
            assert!(plan.delay <= Duration::from_micros(5000));
            seen.insert((plan.step, plan.occurrence));
        }
        let want = [("copy", 1), ("copy", 2), ("create", 1), ("finalize", 1), ("flush", 1)];
        assert_eq!(seen.into_iter().collect::<Vec<_>>(), want);
    }
}
