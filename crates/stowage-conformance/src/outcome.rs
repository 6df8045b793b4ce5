//! What one case concluded, and the report of a whole run.

use crate::Failure;
use std::fmt;

/// The result of one conformance case.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Every assertion held.
    Passed,
    /// The case does not apply, or cannot run here; the reason names the capability, or starts
    /// with `needs ` and names the missing prerequisite (a child process, a fault injector).
    /// Printed, never counted as a pass.
    Skipped(String),
    /// A check failed or the backend panicked: which case, which clause, expected and got.
    Failed(Failure),
}

/// What a case body returns: `Ok(Outcome::Passed | Outcome::Skipped)` or `Err(failure)`.
pub type CaseResult = Result<Outcome, Failure>;

/// The outcomes of [`crate::run_all`], in case order.
#[derive(Debug, Clone, Default)]
pub struct Report {
    /// `(case name, outcome)` for every case run.
    pub results: Vec<(&'static str, Outcome)>,
}

impl Report {
    /// Whether no case failed.
    pub fn is_success(&self) -> bool {
        !self.results.iter().any(|(_, o)| matches!(o, Outcome::Failed(_)))
    }

    /// The failures, in case order.
    pub fn failures(&self) -> Vec<&Failure> {
        self.results
            .iter()
            .filter_map(|(_, o)| match o {
                Outcome::Failed(failure) => Some(failure),
                _ => None,
            })
            .collect()
    }

    /// The outcome of the case called `name`.
    pub fn outcome(&self, name: &str) -> Option<&Outcome> {
        self.results.iter().find(|(n, _)| *n == name).map(|(_, o)| o)
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (name, outcome) in &self.results {
            match outcome {
                Outcome::Passed => writeln!(f, "PASSED  {name}")?,
                Outcome::Skipped(why) => writeln!(f, "SKIPPED {name}: {why}")?,
                Outcome::Failed(failure) => writeln!(f, "FAILED  {name}: {failure}")?,
            }
        }
        let count = |p: fn(&Outcome) -> bool| self.results.iter().filter(|(_, o)| p(o)).count();
        write!(
            f,
            "{} passed, {} failed, {} skipped",
            count(|o| matches!(o, Outcome::Passed)),
            count(|o| matches!(o, Outcome::Failed(_))),
            count(|o| matches!(o, Outcome::Skipped(_)))
        )
    }
}
