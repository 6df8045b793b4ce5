//! The checks after a crash: what each key may hold given what the child acknowledged, every
//! key read and compared, `validate(Full)`, and a resumed write read back.

use crate::crash::kill::Killed;
use crate::crash::workload::{Op, Workload, key};
use std::collections::BTreeMap;
use std::path::Path;
use stowage_conformance::generate::compare;
use stowage_core::{Backend, BackendFactory, Error, OpenMode, Sample, ValidationLevel};

/// What each key may hold after the crash, by put number (see [`Workload::value`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Allowed {
    /// The last put before the last acknowledged flush: it must be there, unless a later put
    /// replaced it.
    pub acknowledged: Option<usize>,
    /// Puts the child may have made after that flush (it may have been killed in their batch).
    pub later: Vec<usize>,
}

impl Allowed {
    /// The put a mismatch is reported against: the acknowledged one, else the latest.
    fn candidate(&self) -> Option<usize> {
        self.acknowledged.or(self.later.last().copied())
    }
}

/// What the reopened cache may hold, from the workload and what the killed child announced.
#[derive(Debug, Clone)]
pub struct Expectations {
    /// Every key the workload puts, with what it may hold (nothing, for keys never reached).
    pub keys: BTreeMap<String, Allowed>,
    /// Each key's last put before finalize: a cache that reads as finalized must hold these.
    pub finals: BTreeMap<String, usize>,
    /// Whether the child had started `finalize` (a finalized cache is wrong otherwise).
    pub finalize_begun: bool,
}

impl Expectations {
    /// The expectations after `killed` ran part of `workload`.
    pub fn new(workload: &Workload, killed: &Killed) -> Expectations {
        let mut keys: BTreeMap<String, Allowed> = BTreeMap::new();
        let mut finals = BTreeMap::new();
        for put in workload.puts_before(usize::MAX) {
            keys.entry(put.key.clone()).or_default();
            finals.insert(put.key.clone(), put.number);
        }
        let durable_end = killed.acknowledged.unwrap_or(0);
        for put in workload.puts_before(durable_end) {
            keys.get_mut(&put.key).expect("listed above").acknowledged = Some(put.number);
        }
        let begun_end = killed.last_begun.map_or(0, |n| n + 1);
        for op in &workload.ops[durable_end.min(begun_end)..begun_end] {
            if let Op::Put(batch) = op {
                for put in batch {
                    keys.get_mut(&put.key).expect("listed above").later.push(put.number);
                }
            }
        }
        let finalize_begun = workload.ops[..begun_end].contains(&Op::Finalize);
        Expectations { keys, finals, finalize_begun }
    }

    /// Samples acknowledged by a completed flush (each must be readable after the crash).
    pub fn acknowledged(&self) -> usize {
        self.keys.values().filter(|a| a.acknowledged.is_some()).count()
    }
}

/// Which put number each key holds.
pub type Holdings = BTreeMap<String, usize>;

/// Counts of a verification.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Verified {
    /// Samples read and compared (every phase).
    pub samples_checked: u64,
    /// What the cache was after the crash.
    pub state: RecoveredState,
}

/// What the crash left, as far as writing on goes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum RecoveredState {
    /// Unfinished (or appendable): it was resumed, written, finalized and read back.
    #[default]
    Resumed,
    /// Finalized, on a backend that cannot append after finalize: `put` is refused.
    Complete,
    /// No cache (the kill came before any flush was acknowledged): created again and written.
    Absent,
}

/// Samples put when resuming, numbered after the workload's.
const RESUME_PUTS: usize = 6;
/// The key number of the first sample put when resuming: above any workload's keys (a realistic
/// one has over 100,000).
const RESUMED_KEYS: usize = 10_000_000;

/// Every check of a crashed cache at `dir`: read-only, then in append mode (recovery), then
/// resumed. The error names the phase, the key and both sides of a mismatch.
pub fn verify(
    factory: &dyn BackendFactory,
    dir: &Path,
    workload: &Workload,
    expect: &Expectations,
) -> Result<Verified, String> {
    let mut verified = Verified::default();
    let reader = match factory.open(dir, OpenMode::ReadOnly) {
        Err(Error::NotFound { .. }) if expect.acknowledged() == 0 => {
            verified.state = RecoveredState::Absent;
            verified.samples_checked = write_and_read_back(factory, dir, workload, None)?;
            return Ok(verified);
        }
        Err(e) => return Err(format!("reopening read-only: {e}")),
        Ok(reader) => reader,
    };
    check_holdings(&*reader, workload, expect, &mut verified.samples_checked)
        .map_err(|e| format!("read-only, before recovery: {e}"))?;
    drop(reader);
    let mut writer =
        factory.open(dir, OpenMode::Append).map_err(|e| format!("reopening to append: {e}"))?;
    let holdings = check_holdings(&*writer, workload, expect, &mut verified.samples_checked)
        .map_err(|e| format!("in append mode, after recovery: {e}"))?;
    check_validate(&*writer).map_err(|e| format!("in append mode, after recovery: {e}"))?;
    if writer.is_finalized() && !writer.capabilities().append_after_finalize {
        let (k, number) = (key(RESUMED_KEYS - 1), workload.ops.len());
        return match writer.put(&k, &workload.value(number)) {
            Err(Error::Finalized { .. }) => {
                verified.state = RecoveredState::Complete;
                Ok(verified)
            }
            other => Err(format!("put into the finalized cache returned {other:?}, not Finalized")),
        };
    }
    drop(writer);
    verified.samples_checked += write_and_read_back(factory, dir, workload, Some(holdings))?;
    Ok(verified)
}

/// Reads every key of the workload from `cache` and checks each against what it may hold.
fn check_holdings(
    cache: &dyn Backend,
    workload: &Workload,
    expect: &Expectations,
    checked: &mut u64,
) -> Result<Holdings, String> {
    let finalized = cache.is_finalized();
    if finalized && !expect.finalize_begun {
        return Err("the cache reads as finalized, but finalize was never called".into());
    }
    let listed = cache.keys().map_err(|e| format!("keys(): {e}"))?;
    if let Some(stranger) = listed.iter().find(|k| !expect.keys.contains_key(*k)) {
        return Err(format!("keys() lists {stranger:?}, which was never put"));
    }
    let mut holdings = Holdings::new();
    for (k, allowed) in &expect.keys {
        let got = cache.get(k).map_err(|e| format!("get({k:?}): {e}"))?;
        *checked += 1;
        let Some(got) = got else {
            if finalized {
                return Err(format!("key {k:?} is missing from a finalized cache"));
            }
            if let Some(number) = allowed.acknowledged {
                return Err(format!(
                    "key {k:?} is missing: put #{number} was acknowledged by a completed flush"
                ));
            }
            continue;
        };
        let matches = |number: usize| compare(k, &workload.value(number), Some(&got)).is_ok();
        let number = if finalized {
            let last = expect.finals[k];
            matches(last)
                .then_some(last)
                .ok_or_else(|| mismatch(workload, k, &got, last, "the last put before finalize"))?
        } else {
            let candidates: Vec<usize> =
                allowed.acknowledged.into_iter().chain(allowed.later.iter().copied()).collect();
            match (candidates.iter().rev().find(|&&n| matches(n)), allowed.candidate()) {
                (Some(&n), _) => n,
                (None, Some(n)) => {
                    let what = format!("the puts it may hold {candidates:?}");
                    return Err(mismatch(workload, k, &got, n, &what));
                }
                (None, None) => {
                    return Err(format!(
                        "key {k:?} holds a sample but was not put before the kill"
                    ));
                }
            }
        };
        holdings.insert(k.clone(), number);
    }
    if listed.len() != holdings.len() || cache.len() != holdings.len() {
        return Err(format!(
            "keys() lists {} keys and len() is {}, but get finds {}",
            listed.len(),
            cache.len(),
            holdings.len()
        ));
    }
    Ok(holdings)
}

fn mismatch(workload: &Workload, k: &str, got: &Sample, number: usize, what: &str) -> String {
    let detail = compare(k, &workload.value(number), Some(got)).err().unwrap_or_default();
    format!("key {k:?} matches none of {what}; against put #{number}: {detail}")
}

fn check_validate(cache: &dyn Backend) -> Result<(), String> {
    let report = cache.validate(ValidationLevel::Full).map_err(|e| format!("validate: {e}"))?;
    if report.is_clean() {
        return Ok(());
    }
    let problems: Vec<String> = report.problems.iter().map(|p| p.to_string()).collect();
    Err(format!("validate(Full) reports: {}", problems.join("; ")))
}

/// Writes on: opens `dir` to append (or creates it again when `holdings` is `None`), puts
/// [`RESUME_PUTS`] new samples (and replaces one recovered key when the backend can), flushes,
/// finalizes, reopens read-only and checks that exactly the recovered and new samples are
/// there and `validate(Full)` is clean. Returns the samples compared.
fn write_and_read_back(
    factory: &dyn BackendFactory,
    dir: &Path,
    workload: &Workload,
    holdings: Option<Holdings>,
) -> Result<u64, String> {
    let mut cache = match &holdings {
        Some(_) => factory.open(dir, OpenMode::Append),
        None => factory.create(dir, &workload.schema),
    }
    .map_err(|e| format!("resuming: {e}"))?;
    let mut expected = holdings.unwrap_or_default();
    let first = workload.puts_before(usize::MAX).count();
    let mut puts: Vec<(String, usize)> =
        (0..RESUME_PUTS).map(|i| (key(RESUMED_KEYS + i), first + i)).collect();
    if cache.capabilities().overwrite
        && let Some(k) = expected.keys().next()
    {
        puts.push((k.clone(), first + RESUME_PUTS));
    }
    for (k, number) in &puts {
        cache.put(k, &workload.value(*number)).map_err(|e| format!("resumed put({k:?}): {e}"))?;
        expected.insert(k.clone(), *number);
    }
    cache.flush().map_err(|e| format!("resumed flush: {e}"))?;
    cache.finalize().map_err(|e| format!("resumed finalize: {e}"))?;
    drop(cache);
    let reader = factory
        .open(dir, OpenMode::ReadOnly)
        .map_err(|e| format!("reopening after resuming: {e}"))?;
    for (k, number) in &expected {
        let got = reader.get(k).map_err(|e| format!("after resuming, get({k:?}): {e}"))?;
        compare(k, &workload.value(*number), got.as_ref())
            .map_err(|e| format!("after resuming, put #{number}: {e}"))?;
    }
    if reader.len() != expected.len() {
        return Err(format!(
            "after resuming, len() is {}, expected {}",
            reader.len(),
            expected.len()
        ));
    }
    check_validate(&*reader).map_err(|e| format!("after resuming: {e}"))?;
    Ok(expected.len() as u64)
}
