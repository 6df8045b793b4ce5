//! The fault campaign: a writer puts and flushes in rounds, then finalizes, while one network
//! fault ([`Fault`]) is aimed at one kind of request ([`Operation`]) on one kind of object
//! ([`TARGETS`]), once, once later in the run, or on every matching request until the writer
//! reports an error (an outage, which then ends).
//!
//! Checked for every scenario:
//! - every key of a flush that returned `Ok` reads back exactly, for a reader opened right then
//!   (through the faulty store: it may get an error naming the object, never `None` or other
//!   bytes) and at the end for the writer and a fresh reader with an empty node cache;
//! - no torn version: every version 1 to the newest opens and reads every key it lists exactly,
//!   and `validate(Full)` of the final cache is clean;
//! - a failed flush poisons the handle, every error the writer sees names an object of the
//!   cache, and a writer reopened after the outage (with the same rank, or a new one in every
//!   other scenario) finishes the cache; a round is then all there or not at all (one flush is
//!   one part), and nothing fails once the outage is over.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use stowage_core::{Backend, Error, Reader, ValidationLevel};
use stowage_remote::RemoteCache;
use stowage_remote::RemoteStore;
use stowage_remote::faults::{Fault, FaultyStore, Operation, Rule};

use super::{check_every_version, names_the_store, options, sample_of, schema};

/// A kind of object: its name in reports, and the path substring a rule matches.
pub type Target = (&'static str, &'static str);

/// The kinds of object a writer touches.
pub const TARGETS: &[Target] = &[
    ("rows", ".rows"),
    ("table", ".table"),
    ("keys", ".keys"),
    ("commit", "commits"),
    ("version", "versions"),
    ("latest", "latest"),
    ("identity", "stowage.json"),
];

/// Rounds of puts and a flush per scenario, before the finalize.
pub const ROUNDS: usize = 3;
/// Keys per round.
pub const KEYS_PER_ROUND: usize = 12;

/// When a scenario's fault strikes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// The first matching request, once.
    Once,
    /// One matching request, after `LATER_SKIP` passed (mid-run rather than at creation).
    Later,
    /// Every matching request until the writer reports an error; then the outage ends.
    Outage,
}

/// Matching requests a [`Mode::Later`] fault lets pass (the writer puts each part object once
/// per flush: three flushes and the finalize's merge).
pub const LATER_SKIP: usize = 1;

/// One fault aimed at one kind of request on one kind of object.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Scenario {
    /// The request kind.
    pub operation: Operation,
    /// The object kind: an entry of [`TARGETS`].
    pub target: Target,
    /// The fault.
    pub fault: Fault,
    /// When it strikes.
    pub mode: Mode,
}

impl Scenario {
    /// The rule that injects it.
    pub fn rule(&self) -> Rule {
        let rule = Rule::once(self.operation, self.target.1, self.fault);
        match self.mode {
            Mode::Once => rule,
            Mode::Later => rule.after(LATER_SKIP),
            Mode::Outage => rule.times(usize::MAX),
        }
    }

    /// Its name in reports, e.g. `put commit LoseResponse outage`.
    pub fn name(&self) -> String {
        format!("{:?} {} {:?} {:?}", self.operation, self.target.0, self.fault, self.mode)
            .to_lowercase()
    }
}

/// A slow request's delay: long beside a request to a local store, short enough for hundreds
/// of scenarios.
pub const SLOW: Duration = Duration::from_millis(5);

/// Every scenario: puts (lost answer, 503, 409, slow) and gets (lost answer, 503, truncated
/// body, slow) on every object kind, listings (503, slow) of commits and versions, each in the
/// three modes.
pub fn all() -> Vec<Scenario> {
    let mut kinds: Vec<(Operation, Fault, &[Target])> = Vec::new();
    for fault in [Fault::LoseResponse, Fault::Unavailable, Fault::Conflict, Fault::Slow(SLOW)] {
        kinds.push((Operation::Put, fault, TARGETS));
    }
    for fault in [
        Fault::LoseResponse,
        Fault::Unavailable,
        Fault::TruncateBody { keep: 7 },
        Fault::Slow(SLOW),
    ] {
        kinds.push((Operation::Get, fault, TARGETS));
    }
    for fault in [Fault::Unavailable, Fault::Slow(SLOW)] {
        kinds.push((Operation::List, fault, &TARGETS[3..5]));
    }
    let mut scenarios = Vec::new();
    for (operation, fault, targets) in kinds {
        for target in targets {
            for mode in [Mode::Once, Mode::Later, Mode::Outage] {
                scenarios.push(Scenario { operation, target: *target, fault, mode });
            }
        }
    }
    scenarios
}

/// What one scenario did and found.
#[derive(Clone, Debug, Default)]
pub struct Outcome {
    /// The scenario's name.
    pub name: String,
    /// Requests the fault struck.
    pub fired: usize,
    /// Flushes that returned `Ok` (their keys acknowledged).
    pub acked_flushes: usize,
    /// The errors the writer saw (each then resumed from), by text.
    pub writer_errors: Vec<String>,
    /// Times the writer was reopened after an error.
    pub resumes: usize,
    /// Errors readers opened mid-run got (each naming an object; never wrong data).
    pub reader_errors: usize,
    /// Whether the final cache lacks its advisory `latest` pointer (an outage of its puts
    /// outlasted the run: `validate` names it, readers do not need it).
    pub pointer_missing: bool,
    /// Everything that broke a promise; empty when the scenario passed.
    pub problems: Vec<String>,
}

/// Makes the store of scenario `index`: the [`RemoteStore`] through a fresh [`FaultyStore`],
/// and the cache's URL as errors name it.
pub type MakeStore<'a> = dyn Fn(usize) -> (RemoteStore, Arc<FaultyStore>, String) + 'a;

/// A fresh in-memory store per scenario.
pub fn memory_store(index: usize) -> (RemoteStore, Arc<FaultyStore>, String) {
    let faulty = FaultyStore::new(Arc::new(object_store::memory::InMemory::new()));
    let url = format!("memory://remote-faults-{index}/cache");
    let remote = stowage_remote::RemoteUrl::parse(&url).expect("a memory URL");
    (faulty.store(remote), faulty, url)
}

/// A store per scenario under `s3://<bucket>/s<index>/cache`, on the S3 server `options` reach.
///
/// # Panics
/// When the options are not an S3 store's.
pub fn s3_store(
    options: &[(String, String)],
    bucket: &str,
    index: usize,
) -> (RemoteStore, Arc<FaultyStore>, String) {
    let url = format!("s3://{bucket}/s{index}/cache");
    let pairs: Vec<(&str, &str)> = options.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let (store, faulty) = FaultyStore::wrap(&url, &pairs).expect("an S3 store");
    (store, faulty, url)
}

/// The scenarios whose outcome depends on the store answering over a network (a lost answer,
/// a 503 or 409 on a put, a body cut short), once and as an outage, on every object kind: the
/// subset run on S3.
pub fn network_subset() -> Vec<Scenario> {
    all()
        .into_iter()
        .filter(|s| s.mode != Mode::Later && !matches!(s.fault, Fault::Slow(_)))
        .filter(|s| s.operation == Operation::Put || matches!(s.fault, Fault::TruncateBody { .. }))
        .collect()
}

/// The writer of one scenario and what it has seen.
struct Run<'a> {
    store: RemoteStore,
    faulty: Arc<FaultyStore>,
    url: String,
    node: PathBuf,
    rank: String,
    new_rank_on_resume: bool,
    outage_over: bool,
    outcome: &'a mut Outcome,
}

impl Run<'_> {
    fn writer_options(&self) -> stowage_remote::RemoteOptions {
        options(&self.node, Some(&self.rank), &[])
    }

    /// Notes an error the writer got from `what`: it must name the cache's object and come
    /// before the outage ended; then the outage ends.
    fn failed(&mut self, what: &str, error: &Error) {
        self.outcome.writer_errors.push(format!("{what}: {error}"));
        if let Some(complaint) = names_the_store(error, &self.url) {
            self.outcome.problems.push(format!("{what}: {complaint}"));
        }
        if self.outage_over {
            self.outcome.problems.push(format!("{what} failed after the outage ended: {error}"));
        }
        self.faulty.clear_rules();
        self.outage_over = true;
    }

    /// A failed flush or finalize must leave the handle refusing writes.
    fn expect_poisoned(&mut self, cache: &mut RemoteCache) {
        match cache.put("probe-after-failure", &sample_of("probe")) {
            Err(Error::Poisoned { .. }) => {}
            other => self
                .outcome
                .problems
                .push(format!("a put after a failed flush was not refused as poisoned: {other:?}")),
        }
    }

    /// The writer reopened after an error (the outage is over: it must succeed), creating the
    /// cache when its creation never took effect.
    fn reopen(&mut self) -> Option<RemoteCache> {
        self.outcome.resumes += 1;
        if self.new_rank_on_resume {
            self.rank = format!("w{}", self.outcome.resumes);
        }
        let opened = match RemoteCache::open_in(self.store.clone(), &self.writer_options(), true) {
            Err(Error::NotFound { .. }) => {
                RemoteCache::create_in(self.store.clone(), &schema(), &self.writer_options())
            }
            other => other,
        };
        match opened {
            Ok(cache) => Some(cache),
            Err(e) => {
                self.outcome.problems.push(format!("reopening after the outage: {e}"));
                None
            }
        }
    }

    /// A reader opened now, through the faulty store, reads every acknowledged key exactly, or
    /// gets errors naming the object.
    fn check_reader_now(&mut self, acked: &BTreeSet<String>) {
        let reader = match RemoteCache::open_in(
            self.store.clone(),
            &options(&self.node, None, &[]),
            false,
        ) {
            Ok(reader) => reader,
            Err(e) => {
                self.reader_error(&e);
                return;
            }
        };
        match reader.keys() {
            Ok(listed) => {
                let distinct: BTreeSet<&String> = listed.iter().collect();
                if distinct.len() != listed.len() || !acked.iter().all(|k| distinct.contains(k)) {
                    self.outcome.problems.push(format!(
                        "a reader lists {} keys ({} distinct) without every acknowledged one",
                        listed.len(),
                        distinct.len()
                    ));
                }
            }
            Err(e) => self.reader_error(&e),
        }
        for key in acked {
            match reader.get(key) {
                Ok(Some(sample)) if sample == sample_of(key) => {}
                Ok(Some(_)) => {
                    self.outcome.problems.push(format!("a reader read other bytes for {key}"));
                }
                Ok(None) => self
                    .outcome
                    .problems
                    .push(format!("acknowledged key {key} missing for a reader opened then")),
                Err(e) => {
                    self.reader_error(&e);
                    return;
                }
            }
        }
    }

    fn reader_error(&mut self, error: &Error) {
        self.outcome.reader_errors += 1;
        if let Some(complaint) = names_the_store(error, &self.url) {
            self.outcome.problems.push(format!("a reader: {complaint}"));
        }
    }

    /// Puts the round's keys the cache lacks and flushes: whether the flush returned `Ok` (a
    /// failure is noted, and ends the outage).
    fn round(&mut self, cache: &mut RemoteCache, keys: &[String]) -> bool {
        for key in keys {
            let put = cache
                .contains(key)
                .and_then(|there| if there { Ok(()) } else { cache.put(key, &sample_of(key)) });
            if let Err(e) = put {
                self.failed(&format!("put {key}"), &e);
                return false;
            }
        }
        match cache.flush() {
            Ok(()) => true,
            Err(e) => {
                self.failed("flush", &e);
                self.expect_poisoned(cache);
                false
            }
        }
    }
}

/// Runs `scenario` as number `index` on the store `make` gives, with node caches under `work`.
pub fn run_scenario(
    scenario: &Scenario,
    index: usize,
    work: &Path,
    make: &MakeStore<'_>,
) -> Outcome {
    let (store, faulty, url) = make(index);
    let mut outcome = Outcome { name: scenario.name(), ..Outcome::default() };
    faulty.inject(scenario.rule());
    let mut run = Run {
        store: store.clone(),
        faulty: Arc::clone(&faulty),
        url,
        node: work.join(format!("node-{index}")),
        rank: "w0".to_owned(),
        new_rank_on_resume: index % 2 == 1,
        outage_over: false,
        outcome: &mut outcome,
    };
    let all_keys = write(&mut run);
    drop(run);
    faulty.clear_rules();
    outcome.fired = faulty.requests().iter().filter(|r| r.fault.is_some()).count();
    if let Some(all_keys) = all_keys {
        let pointer_outage = scenario.operation == Operation::Put
            && scenario.target.0 == "latest"
            && scenario.mode == Mode::Outage;
        let node = work.join(format!("fresh-{index}"));
        check_final(&store, &node, &all_keys, pointer_outage, &mut outcome);
    }
    outcome
}

/// The writer's whole run; the keys it wrote, or `None` when it could not finish.
fn write(run: &mut Run<'_>) -> Option<Vec<String>> {
    let created = RemoteCache::create_in(run.store.clone(), &schema(), &run.writer_options());
    let mut cache = match created {
        Ok(cache) => cache,
        Err(e) => {
            run.failed("create", &e);
            run.reopen()?
        }
    };
    let mut acked = BTreeSet::new();
    let mut all_keys = Vec::new();
    for round in 0..ROUNDS {
        let keys: Vec<String> = (0..KEYS_PER_ROUND).map(|i| format!("r{round}-{i:02}")).collect();
        all_keys.extend(keys.iter().cloned());
        let mut attempts = 0;
        loop {
            attempts += 1;
            if run.round(&mut cache, &keys) {
                run.outcome.acked_flushes += 1;
                acked.extend(keys.iter().cloned());
                run.check_reader_now(&acked);
                break;
            }
            if attempts > 2 {
                run.outcome.problems.push(format!("round {round} failed {attempts} times"));
                return None;
            }
            cache = run.reopen()?;
            // One flush is one part: after a failure its keys are all there or none.
            let present = keys.iter().filter(|k| cache.contains(k).unwrap_or(false)).count();
            if present == keys.len() {
                break;
            }
            if present != 0 {
                run.outcome.problems.push(format!(
                    "round {round}: {present} of {} keys visible after a failed flush",
                    keys.len()
                ));
            }
        }
        // The writer reads its acknowledged keys back: exactly, or an error naming the object
        // while the outage lasts.
        for key in &acked {
            match cache.get(key) {
                Ok(Some(s)) if s == sample_of(key) => {}
                Err(e) if !run.outage_over => {
                    run.reader_error(&e);
                    break;
                }
                other => run
                    .outcome
                    .problems
                    .push(format!("the writer reads acknowledged key {key} as {other:?}")),
            }
        }
    }
    let mut attempts = 0;
    loop {
        attempts += 1;
        match cache.finalize() {
            Ok(()) => break,
            Err(e) => {
                run.failed("finalize", &e);
                run.expect_poisoned(&mut cache);
                if attempts > 2 {
                    return None;
                }
                cache = run.reopen()?;
            }
        }
    }
    // The outage ends with the run (a fault that struck only reads never failed the writer).
    run.faulty.clear_rules();
    for key in &all_keys {
        if !matches!(cache.get(key), Ok(Some(s)) if s == sample_of(key)) {
            run.outcome.problems.push(format!("the writer cannot read back {key}"));
        }
    }
    Some(all_keys)
}

/// The end state, with the outage over: a fresh reader (empty node cache) finds every key once
/// and exactly, the cache is finalized and validates clean, and every version is whole.
fn check_final(
    store: &RemoteStore,
    node: &Path,
    all_keys: &[String],
    pointer_outage: bool,
    outcome: &mut Outcome,
) {
    let reader = match RemoteCache::open_in(store.clone(), &options(node, None, &[]), false) {
        Ok(reader) => reader,
        Err(e) => {
            outcome.problems.push(format!("a fresh reader cannot open the cache: {e}"));
            return;
        }
    };
    let listed = reader.keys().unwrap_or_default();
    let distinct: BTreeSet<&String> = listed.iter().collect();
    if reader.len() != all_keys.len()
        || listed.len() != all_keys.len()
        || distinct.len() != listed.len()
    {
        outcome.problems.push(format!(
            "{} keys written; the reader counts {}, lists {} ({} distinct)",
            all_keys.len(),
            reader.len(),
            listed.len(),
            distinct.len()
        ));
    }
    for key in all_keys {
        match reader.get(key) {
            Ok(Some(sample)) if sample == sample_of(key) => {}
            other => outcome.problems.push(format!("fresh reader, key {key}: {other:?}")),
        }
    }
    if !reader.is_finalized() {
        outcome.problems.push("the cache is not finalized".into());
    }
    match reader.validate(ValidationLevel::Full) {
        Ok(report) if report.is_clean() => {}
        // The advisory `latest` pointer is written best effort: after an outage of its puts
        // that the finalize's merge also met, validate names it, and only it.
        Ok(report)
            if pointer_outage
                && report.problems.iter().all(|p| {
                    p.path.as_deref() == Some(Path::new(&store.url().object_url("latest")))
                }) =>
        {
            outcome.pointer_missing = true;
        }
        other => outcome.problems.push(format!("validate(Full): {other:?}")),
    }
    if let Err(torn) = check_every_version(store, node, 1) {
        outcome.problems.push(format!("versions: {torn}"));
    }
}

/// Runs `scenarios` (numbered from `first`), calling `progress` after each.
pub fn run_all(
    scenarios: &[Scenario],
    first: usize,
    work: &Path,
    make: &MakeStore<'_>,
    progress: &mut dyn FnMut(&Outcome),
) -> Vec<Outcome> {
    let mut outcomes = Vec::new();
    for (i, scenario) in scenarios.iter().enumerate() {
        let outcome = run_scenario(scenario, first + i, work, make);
        progress(&outcome);
        outcomes.push(outcome);
    }
    outcomes
}

/// Totals over a campaign's outcomes, for its report.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Totals {
    /// Scenarios run.
    pub scenarios: usize,
    /// Requests struck by a fault.
    pub fired: usize,
    /// Scenarios whose fault never struck (a request kind the run never made of that object).
    pub unreached: usize,
    /// Flushes acknowledged.
    pub acked_flushes: usize,
    /// Errors the writers saw, each followed by a resume.
    pub writer_errors: usize,
    /// Reopenings after an error.
    pub resumes: usize,
    /// Errors readers got mid-run.
    pub reader_errors: usize,
    /// Scenarios with a problem.
    pub failed: usize,
}

/// The totals of `outcomes`.
pub fn totals(outcomes: &[Outcome]) -> Totals {
    let mut t = Totals { scenarios: outcomes.len(), ..Totals::default() };
    for o in outcomes {
        t.fired += o.fired;
        t.unreached += usize::from(o.fired == 0);
        t.acked_flushes += o.acked_flushes;
        t.writer_errors += o.writer_errors.len();
        t.resumes += o.resumes;
        t.reader_errors += o.reader_errors;
        t.failed += usize::from(!o.problems.is_empty());
    }
    t
}
