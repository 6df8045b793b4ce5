//! The killed stowage session of a mixed trial, generated from the trial's seed: the child and
//! the parent generate the same steps, so the parent knows which keys each step puts. Also where
//! the kill is aimed.

use crate::crash::kill::{ChildOp, KillPlan};
use crate::mixed::pair::Pair;
use rand::{Rng, SeedableRng, rngs::StdRng};
use std::time::Duration;

/// One step of the session. The child announces each before it starts and after it returns
/// (the crash campaign's protocol, [`crate::crash::child::Line`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// Open the cache for writing the way a user would (recovery runs here): the pair's
    /// [`crate::mixed::formats::Format::open_writer`].
    Open,
    /// Put the keys numbered so of the killed session's phase, in order.
    Put(Vec<u32>),
    /// `flush` (aenet files: `TorchCacheWriter::finish`, which closes the writer).
    Flush,
    /// Adopt the tool's data (not hangar's: it cannot be adopted).
    Adopt,
    /// `finalize`.
    Finalize,
}

impl ChildOp for Step {
    fn name(&self) -> &'static str {
        match self {
            Step::Open => "open",
            Step::Put(_) => "put",
            Step::Flush => "flush",
            Step::Adopt => "adopt",
            Step::Finalize => "finalize",
        }
    }

    /// Flush, adopt (which flushes first) and finalize make every earlier put durable.
    fn acknowledges(&self) -> bool {
        matches!(self, Step::Flush | Step::Adopt | Step::Finalize)
    }

    /// Below what the steps take in release builds on ext4 (an open with its recovery and
    /// fsyncs 0.7 to 16 ms, a flush 0.3 to 7, an adopt 0.5 to 20, a finalize about 3, a batch
    /// of puts microseconds, hundreds on aenet files), so that a kill aimed at a fraction below
    /// 1 of it lands inside the step more often than after it. Later steps of a kind are timed
    /// by the ones before.
    fn first_guess(&self) -> Duration {
        Duration::from_micros(match self {
            Step::Open => 1_000,
            Step::Adopt | Step::Flush => 500,
            Step::Put(_) => 50,
            Step::Finalize => 1_500,
        })
    }
}

/// Salt of the session's generator, so that it is independent of the trial's other choices.
const SESSION_SALT: u64 = 0x7365_7373_696F_6E21;
/// Salt of the kill plan's generator.
const PLAN_SALT: u64 = 0x6D69_7865_646B_696C;

/// The steps of a killed session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Session {
    /// Open first; then batches of puts with flushes between them, an adopt at most once
    /// where the pair adopts, and a closing flush or finalize.
    pub steps: Vec<Step>,
}

impl Session {
    /// The session of `seed` for `pair`: 8 to 40 puts in batches of up to 1 to 8, a flush after
    /// a batch with probability 0.4, and at the end finalize (where the pair finalizes in the
    /// killed session: Arrow and NUMPY_10) or a flush. Where the pair adopts, one adopt with
    /// probability 0.6: right after the open, or after a flush. On aenet files a flush
    /// (`finish`) closes the writer, so the next batch opens it again, and an adopt (which
    /// rebuilds the file) comes only after a flush, the last one included.
    ///
    /// ```
    /// use stowage_reliability::mixed::{pair::Pair, session::{Session, Step}};
    /// let session = Session::generate(Pair::Hdf5, 3);
    /// assert_eq!(session.steps.first(), Some(&Step::Open));
    /// assert_eq!(session.steps.last(), Some(&Step::Flush));
    /// assert_eq!(session, Session::generate(Pair::Hdf5, 3));
    /// ```
    pub fn generate(pair: Pair, seed: u64) -> Session {
        let mut rng = StdRng::seed_from_u64(seed ^ SESSION_SALT);
        let total: u32 = rng.random_range(8..=40);
        let max_batch: u32 = rng.random_range(1..=8);
        let adopt_at_open = pair.adopts() && !pair.flush_closes() && rng.random_bool(0.25);
        let mut adopt_later = pair.adopts() && !adopt_at_open && rng.random_bool(0.45);
        let mut steps = vec![Step::Open];
        if adopt_at_open {
            steps.push(Step::Adopt);
        }
        let (mut n, mut open) = (0, true);
        while n < total {
            if !open {
                steps.push(Step::Open);
                open = true;
            }
            let size = rng.random_range(1..=max_batch).min(total - n);
            steps.push(Step::Put((n..n + size).collect()));
            n += size;
            if n < total && rng.random_bool(0.4) {
                steps.push(Step::Flush);
                open = !pair.flush_closes();
                if adopt_later && rng.random_bool(0.5) {
                    steps.push(Step::Adopt);
                    adopt_later = false;
                }
            }
        }
        let finalize = pair.finalizes_in_session() && rng.random_bool(0.5);
        steps.push(if finalize { Step::Finalize } else { Step::Flush });
        if adopt_later && pair.flush_closes() && rng.random_bool(0.5) {
            steps.push(Step::Adopt);
        }
        Session { steps }
    }

    /// The indexes of the steps named `name`.
    pub fn indexes_of(&self, name: &str) -> Vec<usize> {
        self.steps.iter().enumerate().filter(|(_, s)| s.name() == name).map(|(i, _)| i).collect()
    }

    /// A kill plan for the session of `seed`: aimed inside an open, a put batch, a flush, an
    /// adopt or a finalize (weighted 3:4:4:3:3 among the kinds the session has), at a random
    /// fraction of the step's expected time (above 1, it may land just after the step).
    pub fn kill_plan(&self, seed: u64) -> KillPlan {
        let mut rng = StdRng::seed_from_u64(seed ^ PLAN_SALT);
        let kinds = [("open", 3), ("put", 4), ("flush", 4), ("adopt", 3), ("finalize", 3)]
            .into_iter()
            .map(|(name, weight)| (self.indexes_of(name), weight));
        KillPlan::weighted(kinds, &mut rng)
    }

    /// A plan aimed at the start of the first step named `name`, when the session has one:
    /// the quick tests aim one kill at each kind.
    pub fn aimed_at(&self, name: &str, fraction: f64) -> Option<KillPlan> {
        self.indexes_of(name).first().map(|&op| KillPlan { op, fraction })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sessions_follow_each_pairs_rules() {
        for pair in Pair::ALL {
            let sessions: Vec<Session> = (0..200).map(|s| Session::generate(pair, s)).collect();
            for session in &sessions {
                let steps = &session.steps;
                assert_eq!(steps[0], Step::Open, "{pair:?}");
                let last = steps.iter().rev().find(|s| **s != Step::Adopt);
                assert!(matches!(last, Some(Step::Flush | Step::Finalize)), "{steps:?}");
                let adopts = session.indexes_of("adopt");
                assert!(adopts.len() <= 1 && (pair.adopts() || adopts.is_empty()), "{steps:?}");
                if !pair.finalizes_in_session() {
                    assert!(session.indexes_of("finalize").is_empty(), "{pair:?}");
                }
                let mut open = false;
                for step in steps {
                    match step {
                        Step::Open => open = true,
                        Step::Put(_) => assert!(open, "{pair:?}: a put without an open writer"),
                        Step::Flush if pair.flush_closes() => open = false,
                        // aenet's adopt rebuilds the file: no writer may have it open.
                        Step::Adopt if pair.flush_closes() => assert!(!open, "{steps:?}"),
                        _ => {}
                    }
                }
            }
            let has = |name| sessions.iter().any(|s| !s.indexes_of(name).is_empty());
            assert_eq!(has("adopt"), pair.adopts(), "{pair:?}");
            assert_eq!(has("finalize"), pair.finalizes_in_session(), "{pair:?}");
        }
    }
}
