//! `stowage bench`: the same generated workload written into every backend, verified, and
//! measured beside the machine's physical limits, so each backend's figures read both as rates
//! and as a fraction of what the machine can do.
//!
//! One concept per module: [`workload`] the generated samples, [`subject`] the backends behind
//! one type, [`measure`] one backend through one workload, [`mod@reference`] the physical
//! references, [`peers`] the original tools' read paths in Python, [`rss`] peak memory,
//! [`report`] the result and its renderings; [`scale`] the `--scale` mode (every backend at 100
//! thousand to 100 million keys). This file is the run loop.

pub mod measure;
pub mod peers;
pub mod reference;
pub mod report;
pub mod rss;
pub mod scale;
pub mod subject;
pub mod workload;

use std::path::{Path, PathBuf};

use self::report::{BackendReport, Outcome, Report, WorkloadReport};
use self::subject::{Kind, Subject};
use self::workload::Workload;

/// Rows between durable flushes while writing (torchcachex's `flush_every`).
pub const FLUSH_EVERY: usize = 2048;
/// Most random reads per measurement (a shuffled epoch over the rows, cut here).
pub const MAX_READS: usize = 200_000;

/// What to run.
#[derive(Debug, Clone)]
pub struct BenchPlan {
    /// The workloads, in order.
    pub workloads: Vec<Workload>,
    /// The backends, in order.
    pub backends: Vec<Kind>,
    /// Run the Python peers too.
    pub peers: bool,
    /// Where the caches are written (one subdirectory per workload and backend).
    pub dir: PathBuf,
    /// Keep the caches afterwards (else each workload's are removed once it is measured).
    pub keep: bool,
}

/// Runs `plan`, calling `progress` with one line before each step; returns the report (whose
/// [`Report::all_verified`] says whether every backend that could hold its workload passed).
///
/// Errors: `plan.dir` cannot be created, as text naming it.
pub fn run(plan: &BenchPlan, progress: &mut dyn FnMut(&str)) -> Result<Report, String> {
    std::fs::create_dir_all(&plan.dir)
        .map_err(|e| format!("cannot create {}: {e}", plan.dir.display()))?;
    let mut workloads = Vec::new();
    for workload in &plan.workloads {
        workloads.push(run_workload(plan, workload, progress));
    }
    Ok(Report { workloads })
}

fn run_workload(
    plan: &BenchPlan,
    workload: &Workload,
    progress: &mut dyn FnMut(&str),
) -> WorkloadReport {
    let order = read_order(workload.rows);
    let schema = workload.schema();
    progress(&format!("{}: physical references", workload.name));
    let reference = reference::measure(workload, &plan.dir, FLUSH_EVERY, &order);
    let mut backends = Vec::new();
    let mut peer_plans = Vec::new();
    for &kind in &plan.backends {
        let dir = cache_dir(plan, workload, kind);
        let outcome = match kind.refusal(&schema) {
            Some(why) => Outcome::Refused(why),
            None => {
                progress(&format!("{}: {}: write, verify, read", workload.name, kind.name()));
                match measure::measure(kind, workload, &dir, FLUSH_EVERY, &order) {
                    Ok(measured) => {
                        if plan.peers
                            && let Some(p) = peer_plan(kind, &dir, workload, &order)
                        {
                            peer_plans.push(p);
                        }
                        Outcome::Measured(measured)
                    }
                    Err(why) => Outcome::Failed(why),
                }
            }
        };
        backends.push(BackendReport { backend: kind.name(), outcome });
    }
    let peers = if peer_plans.is_empty() {
        Vec::new()
    } else {
        progress(&format!("{}: Python peers", workload.name));
        peers::run(peer_plans)
    };
    if !plan.keep {
        for &kind in &plan.backends {
            let _ = std::fs::remove_dir_all(cache_dir(plan, workload, kind));
        }
    }
    WorkloadReport {
        name: workload.name.clone(),
        rows: workload.rows,
        reads: order.len(),
        reference,
        backends,
        peers,
    }
}

/// Where `kind`'s cache of `workload` is written: `<dir>/<workload>-<backend>`.
fn cache_dir(plan: &BenchPlan, workload: &Workload, kind: Kind) -> PathBuf {
    plan.dir.join(format!("{}-{}", workload.name, kind.name()))
}

/// One shuffled epoch over `rows` (fixed seed: the same order for every backend, the reference
/// and the peers), so no read finds its row already in the CPU cache; cut at [`MAX_READS`] to
/// bound the run's time.
fn read_order(rows: usize) -> Vec<usize> {
    use rand::SeedableRng;
    use rand::seq::SliceRandom;
    let mut order: Vec<usize> = (0..rows).collect();
    order.shuffle(&mut rand::rngs::StdRng::seed_from_u64(17));
    order.truncate(MAX_READS);
    order
}

/// The peer plan for `kind`'s cache in `dir`; a NUMPY_10 cache's record strings are read from
/// the cache itself.
fn peer_plan(
    kind: Kind,
    dir: &Path,
    workload: &Workload,
    order: &[usize],
) -> Option<serde_json::Value> {
    let records = match kind {
        Kind::Npy => {
            let Ok(Some(Subject::Npy(cache))) = Subject::open(kind, dir, true) else { return None };
            let fields: Vec<String> =
                workload.schema().fields.iter().map(|f| f.name.clone()).collect();
            let records: Vec<Vec<(String, String)>> = (0..workload.rows)
                .map(|i| {
                    let key = workload.key(i);
                    fields
                        .iter()
                        .filter_map(|field| {
                            Some((cache.record(&key, field)?.to_string(), field.clone()))
                        })
                        .collect()
                })
                .collect();
            Some(records)
        }
        _ => None,
    };
    peers::plan(kind, dir, workload, order, records.as_deref())
}
