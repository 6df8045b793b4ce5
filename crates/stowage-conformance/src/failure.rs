//! [`Failure`]: what a failed case found, as a value (which case, which contract clause, what was
//! expected, what happened, while doing what), rendered to text only when printed.

use std::fmt;

/// One failed check of a conformance case.
///
/// The suite builds it where the check fails ([`crate::ensure!`], [`crate::check`]); the runner
/// fills in [`Failure::case`], and the clause when the case checks only one.
///
/// ```
/// use stowage_conformance::Failure;
/// let failure = Failure::new("len() after 3 puts of distinct keys", 3, 2)
///     .clause("len.counts-distinct-keys");
/// assert_eq!(
///     failure.to_string(),
///     "len() after 3 puts of distinct keys: expected 3, got 2 [clause len.counts-distinct-keys]"
/// );
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    /// The case that failed (its `#[test]` name); empty until the runner fills it in.
    pub case: &'static str,
    /// The contract clause ([`stowage_core::contract`]) the failed check belongs to, when known.
    pub clause: Option<&'static str>,
    /// What the case was doing: the operation, the key, the cache, the trial.
    pub context: String,
    /// What the contract requires.
    pub expected: String,
    /// What the backend did instead.
    pub got: String,
}

impl Failure {
    /// A failure while doing `context`: `expected` was required, `got` happened.
    pub fn new(
        context: impl fmt::Display,
        expected: impl fmt::Display,
        got: impl fmt::Display,
    ) -> Failure {
        Failure {
            case: "",
            clause: None,
            context: context.to_string(),
            expected: expected.to_string(),
            got: got.to_string(),
        }
    }

    /// Names the contract clause the failed check belongs to (an id of
    /// [`stowage_core::contract::CLAUSES`]); the first clause named is kept.
    pub fn clause(mut self, id: &'static str) -> Failure {
        self.clause.get_or_insert(id);
        self
    }

    /// Puts `outer` in front of the context: `trial 3: get "k"`.
    pub fn within(mut self, outer: impl fmt::Display) -> Failure {
        self.context = if self.context.is_empty() {
            outer.to_string()
        } else {
            format!("{outer}: {}", self.context)
        };
        self
    }

    /// A case body that panicked (inside the backend or the case).
    pub fn panicked(message: impl fmt::Display) -> Failure {
        Failure::new("running the case", "no panic", format!("a panic: {message}"))
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: expected {}, got {}", self.context, self.expected, self.got)?;
        if let Some(clause) = self.clause {
            write!(f, " [clause {clause}]")?;
        }
        Ok(())
    }
}

impl std::error::Error for Failure {}

/// The text of a failure, for callers that collect messages (`Result<_, String>`).
impl From<Failure> for String {
    fn from(failure: Failure) -> String {
        failure.to_string()
    }
}
