//! `corruption`: the corruption campaign of issue 7 over every backend (or those chosen), each
//! trial in a supervised worker process; prints a table per backend and exits 1 if any trial broke
//! a rule (wrong data, a validate miss, an unreported truncation, a panic, abort or hang).
//!
//! Each damaged copy is also given to the `stowage` command (`verify`, `get`), scored as
//! [`stowage_reliability::corruption::cli_check`] says; the binary is `--stowage-bin`, else
//! `STOWAGE_BIN`, else built with cargo from this workspace.
//!
//! ```text
//! corruption [--flips N] [--truncations M] [--seed S] [--backends a,b] [--markdown]
//! corruption --realistic [--flips N] [--truncations M] ...
//! corruption --seed S --backends npy --replay flip:17
//! ```

use clap::Parser;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;
use stowage_reliability::cli::{CommonArgs, exit_code};
use stowage_reliability::corruption::Config;
use stowage_reliability::corruption::cli_check::{CliConfig, GetKeys};
use stowage_reliability::corruption::report::summary;
use stowage_reliability::corruption::scale::{
    REALISTIC_MIN_FILES, REALISTIC_SAMPLES, Scale, select,
};
use stowage_reliability::corruption::supervise::{Supervisor, supervise, worker};
use stowage_reliability::corruption::trial::TrialId;
use stowage_reliability::stowage_bin::stowage_bin;
use stowage_reliability::work_dir::WorkDir;

/// Single-byte flips and truncations of finalized caches: get must never return wrong data,
/// validate(Full) must report what get suffers from, nothing may panic.
#[derive(Parser, Debug)]
#[command(version)]
struct Arguments {
    /// Flip trials per backend (default 1000; 40 with --realistic).
    #[arg(long)]
    flips: Option<u64>,
    /// Truncation trials per backend (default 100; 10 with --realistic).
    #[arg(long)]
    truncations: Option<u64>,
    /// The realistic form: every backend at its default options, 100,000 small samples, at
    /// least 2,000 files for arrow and npy (the hard-linked copies keep each trial fast).
    #[arg(long)]
    realistic: bool,
    /// The `stowage` binary scored on every damaged copy (default: $STOWAGE_BIN, else built
    /// with `cargo build --release --bin stowage`).
    #[arg(long)]
    stowage_bin: Option<PathBuf>,
    /// Keys `stowage get` runs for per trial: `all`, or N drawn from the trial's seed besides
    /// the first 4 keys the library failed to get (default: all; 2 with --realistic).
    #[arg(long)]
    cli_gets: Option<GetKeys>,
    /// Seconds a run of the `stowage` command may take before it is killed (a failure).
    #[arg(long, default_value_t = 300)]
    cli_timeout: u64,
    /// Do not run the `stowage` command (its table then counts every trial as not run).
    #[arg(long)]
    no_cli: bool,
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
    let scale = if args.realistic { Scale::Realistic } else { Scale::Quick };
    let realistic = scale == Scale::Realistic;
    let cli = match (args.no_cli, &args.stowage_bin) {
        (true, _) => None,
        (false, Some(bin)) => Some(bin.clone()),
        // A worker is always told the binary (or --no-cli) by its supervisor.
        (false, None) if args.worker => return Err("a worker needs --stowage-bin".into()),
        (false, None) => Some(stowage_bin()?),
    };
    let default_gets = if realistic { GetKeys::Sample(2) } else { GetKeys::All };
    let config = Config {
        flips: args.flips.unwrap_or(if realistic { 40 } else { 1000 }),
        truncations: args.truncations.unwrap_or(if realistic { 10 } else { 100 }),
        seed: args.seed,
        replay: args.replay,
        scale,
        cli: cli.map(|bin| CliConfig {
            bin,
            gets: args.cli_gets.unwrap_or(default_gets),
            timeout: Duration::from_secs(args.cli_timeout),
        }),
    };
    let subjects = select(scale, &args.common.backends)?;
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
    let mut not_run = Vec::new();
    if realistic {
        let heading = if args.common.markdown { "### Realistic form\n" } else { "Realistic form" };
        println!(
            "{heading}\nEvery backend at its default options, {REALISTIC_SAMPLES} samples, at \
             least {REALISTIC_MIN_FILES} files for arrow and npy; each trial's copy hard-links \
             every file but the damaged one.\n"
        );
    }
    if let Some(cli) = &config.cli {
        println!(
            "The stowage command: {} (`verify`, and `get` of {} keys per trial).\n",
            cli.bin.display(),
            match cli.gets {
                GetKeys::All => "all".to_string(),
                GetKeys::Sample(n) => format!("the library's failed keys and {n} seeded"),
            }
        );
    }
    for subject in &subjects {
        let dir = work.fresh(subject.name)?;
        eprintln!("corruption: {} ...", subject.name);
        // A backend that cannot even build its pristine cache is reported, and the others run.
        let report = match supervise(&supervisor, subject, &config, &dir) {
            Ok(report) => report,
            Err(e) => {
                println!("{}: COULD NOT RUN: {e}\n", subject.name);
                not_run.push(format!("{}: {e}", subject.name));
                continue;
            }
        };
        println!("{}", report.render(args.common.markdown));
        if let (Some(_), Some(failure)) = (args.replay, report.failures.first()) {
            println!("{:#?}", failure.outcome);
        }
        reports.push(report);
    }
    if reports.len() > 1 {
        let heading = if args.common.markdown { "### Every backend\n" } else { "Every backend" };
        println!("{heading}\n{}", summary(&reports, args.common.markdown));
    }
    if !not_run.is_empty() {
        return Err(format!("could not run: {}", not_run.join("; ")));
    }
    Ok(reports.iter().all(|r| r.is_success()))
}
