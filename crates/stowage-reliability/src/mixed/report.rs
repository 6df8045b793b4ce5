//! The mixed campaign's tallies per pair, as a text or markdown table.

use crate::mixed::pair::Pair;
use crate::mixed::trial::TrialReport;
use crate::tables::table;

/// The counts of one pair.
#[derive(Debug, Clone, Default)]
pub struct Tally {
    /// Trials run.
    pub trials: u64,
    /// Trials where the tool wrote first (the others: stowage created the cache).
    pub tool_first: u64,
    /// Kills inside each kind of step: open, put, flush, adopt, finalize.
    pub inside: [u64; 5],
    /// Kills between steps or after the last.
    pub between: u64,
    /// stowage's samples acknowledged (each had to be there for both readers).
    pub stowage_acknowledged: u64,
    /// The tool's samples acknowledged.
    pub tool_acknowledged: u64,
    /// Samples compared with the value put, by both readers.
    pub compared: u64,
    /// Trials where stowage reopened the cache to resume after the tool's batch (a finalized
    /// cache that takes no more puts is reopened, and refuses them as declared).
    pub resumed: u64,
    /// stowage's temporary files left in the trials' directories after the closing writes.
    pub temporaries_left: u64,
    /// Trials where a read-only `validate` reported problems that recovery cleared.
    pub cleared_by_recovery: u64,
    /// Each failing trial's message (it names the seed).
    pub failures: Vec<String>,
}

/// The step kinds of [`Tally::inside`], in order.
pub const STEP_KINDS: [&str; 5] = ["open", "put", "flush", "adopt", "finalize"];

impl Tally {
    /// Adds one trial.
    pub fn add(&mut self, trial: &TrialReport) {
        self.trials += 1;
        self.tool_first += u64::from(trial.tool_first);
        match trial.inside.and_then(|s| STEP_KINDS.iter().position(|k| *k == s)) {
            Some(kind) => self.inside[kind] += 1,
            None => self.between += 1,
        }
        self.stowage_acknowledged += trial.stowage_acknowledged as u64;
        self.tool_acknowledged += trial.tool_acknowledged as u64;
        self.compared += trial.compared;
        self.resumed += u64::from(trial.resumed);
        self.temporaries_left += trial.temporaries_left as u64;
        self.cleared_by_recovery += u64::from(trial.cleared_by_recovery.is_some());
        self.failures.extend(trial.failure.clone());
    }
}

/// Every pair's tallies, in the order they ran.
#[derive(Debug, Clone, Default)]
pub struct CampaignReport {
    /// `(pair, tally)`.
    pub rows: Vec<(Pair, Tally)>,
}

impl CampaignReport {
    /// The tally of `pair`, created empty on first use.
    pub fn tally(&mut self, pair: Pair) -> &mut Tally {
        let at = match self.rows.iter().position(|(p, _)| *p == pair) {
            Some(at) => at,
            None => {
                self.rows.push((pair, Tally::default()));
                self.rows.len() - 1
            }
        };
        &mut self.rows[at].1
    }

    /// Every failure message.
    pub fn failures(&self) -> impl Iterator<Item = &str> {
        self.rows.iter().flat_map(|(_, t)| t.failures.iter().map(String::as_str))
    }

    /// The table, as markdown or as aligned text, then the failures (each with its seed).
    ///
    /// ```
    /// use stowage_reliability::mixed::{pair::Pair, report::CampaignReport};
    /// let mut report = CampaignReport::default();
    /// report.tally(Pair::Arrow).trials = 2;
    /// let text = report.render(true);
    /// assert!(text.starts_with("| pair | trials |"), "{text}");
    /// assert!(text.contains("| arrow+torchcachex | 2 |"), "{text}");
    /// ```
    pub fn render(&self, markdown: bool) -> String {
        let header = [
            "pair",
            "trials",
            "tool first / stowage first",
            "killed in open",
            "in put",
            "in flush",
            "in adopt",
            "in finalize",
            "between steps",
            "acknowledged by stowage",
            "acknowledged by the tool",
            "samples compared",
            "resumed",
            "validate problems recovery cleared",
            "stowage temporaries left",
            "failures",
        ];
        let rows: Vec<Vec<String>> = self
            .rows
            .iter()
            .map(|(pair, t)| {
                let mut row = vec![
                    pair.label(),
                    t.trials.to_string(),
                    format!("{} / {}", t.tool_first, t.trials - t.tool_first),
                ];
                row.extend(t.inside.iter().map(u64::to_string));
                row.extend([
                    t.between.to_string(),
                    t.stowage_acknowledged.to_string(),
                    t.tool_acknowledged.to_string(),
                    t.compared.to_string(),
                    t.resumed.to_string(),
                    t.cleared_by_recovery.to_string(),
                    t.temporaries_left.to_string(),
                    t.failures.len().to_string(),
                ]);
                row
            })
            .collect();
        let mut out = table(&header, &rows, markdown);
        let failures: Vec<&str> = self.failures().collect();
        if !failures.is_empty() {
            out.push_str(if markdown { "\nFailing trials:\n\n" } else { "\nfailing trials:\n" });
            for failure in failures {
                out.push_str(&format!("- {failure}\n"));
            }
        }
        out
    }
}
