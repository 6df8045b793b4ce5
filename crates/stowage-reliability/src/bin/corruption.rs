//! `corruption`: the corruption campaign of issue 7 over every backend (or those chosen), each
//! trial in a supervised worker process; prints a table per backend and exits 1 if any trial broke
//! a rule (wrong data, a validate miss, an unreported truncation, a panic, abort or hang).
//!
//! ```text
//! corruption [--flips N] [--truncations M] [--seed S] [--backends a,b] [--markdown]
//! corruption --seed S --backends npy --replay flip:17
//! ```

use clap::Parser;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;
use stowage_reliability::backends::select;
use stowage_reliability::cli::{CommonArgs, exit_code};
use stowage_reliability::corruption::Config;
use stowage_reliability::corruption::report::summary;
use stowage_reliability::corruption::supervise::{Supervisor, supervise, worker};
use stowage_reliability::corruption::trial::TrialId;
use stowage_reliability::work_dir::WorkDir;

/// Single-byte flips and truncations of finalized caches: get must never return wrong data,
/// validate(Full) must report what get suffers from, nothing may panic.
#[derive(Parser, Debug)]
#[command(version)]
struct Arguments {
    /// Flip trials per backend.
    #[arg(long, default_value_t = 1000)]
    flips: u64,
    /// Truncation trials per backend.
    #[arg(long, default_value_t = 100)]
    truncations: u64,
    /// Campaign seed (each trial's seed derives from it and the trial id).
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Run only this trial (`flip:17`, `truncation:3`), as a failure line's replay command says.
    #[arg(long)]
    replay: Option<TrialId>,
    /// Seconds a trial may run before its worker is killed and the trial counted as hung.
    #[arg(long, default_value_t = 120)]
    trial_timeout: u64,
    #[command(flatten)]
    common: CommonArgs,
    /// Internal: run as a worker of the supervising process.
    #[arg(long, hide = true)]
    worker: bool,
    /// Internal (worker): the pristine cache.
    #[arg(long, hide = true)]
    pristine: Option<PathBuf>,
    /// Internal (worker): where to copy the cache for each trial.
    #[arg(long, hide = true)]
    scratch: Option<PathBuf>,
    /// Internal (worker): index of the first trial to run.
    #[arg(long, hide = true, default_value_t = 0)]
    start: usize,
}

fn main() -> ExitCode {
    exit_code("corruption", run(&Arguments::parse()))
}

/// Runs the campaign (or the worker); `Ok(false)` when some trial failed.
fn run(args: &Arguments) -> Result<bool, String> {
    let config = Config {
        flips: args.flips,
        truncations: args.truncations,
        seed: args.seed,
        replay: args.replay,
    };
    let subjects = select(&args.common.backends)?;
    if args.worker {
        let [subject] = &subjects[..] else {
            return Err("a worker runs exactly one backend".into());
        };
        let pristine = args.pristine.as_deref().ok_or("a worker needs --pristine")?;
        let scratch = args.scratch.as_deref().ok_or("a worker needs --scratch")?;
        worker(subject, &config, pristine, scratch, args.start, &mut std::io::stdout().lock())?;
        return Ok(true);
    }
    let work = WorkDir::new(args.common.work_dir.as_deref())?;
    let supervisor = Supervisor {
        exe: std::env::current_exe().map_err(|e| format!("finding this executable: {e}"))?,
        trial_timeout: Duration::from_secs(args.trial_timeout),
    };
    let mut reports = Vec::new();
    for subject in &subjects {
        let dir = work.fresh(subject.name)?;
        eprintln!("corruption: {} ...", subject.name);
        let report = supervise(&supervisor, subject, &config, &dir)?;
        println!("{}", report.render(args.common.markdown));
        if let (Some(_), Some(failure)) = (args.replay, report.failures.first()) {
            println!("{:#?}", failure.verdict);
        }
        reports.push(report);
    }
    if reports.len() > 1 {
        let heading = if args.common.markdown { "### Every backend\n" } else { "Every backend" };
        println!("{heading}\n{}", summary(&reports, args.common.markdown));
    }
    Ok(reports.iter().all(|r| r.is_success()))
}
