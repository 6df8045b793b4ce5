//! `faults`: the resource-fault campaign of issue 7 over every backend (or those chosen): ENOSPC
//! and EIO on writes and fsyncs, injected into a writer child process by an `LD_PRELOAD`
//! interposer. Prints one table and every failure; exits 1 if anything failed (an unreached
//! fault point included), 2 if the campaign could not run (no interposer).
//!
//! ```text
//! faults [--seed N] [--points P] [--backends a,b] [--markdown]
//! ```

use clap::Parser;
use std::path::PathBuf;
use std::process::ExitCode;
use stowage_reliability::backends::select;
use stowage_reliability::cli::{CommonArgs, command_line, exit_code};
use stowage_reliability::faults::{Config, injector, report, run_backend, trial};
use stowage_reliability::work_dir::WorkDir;

/// Disk full and EIO on write and fsync, per backend.
#[derive(Parser, Debug)]
#[command(version)]
struct Arguments {
    /// Seed of the fault points chosen between the evenly spread ones.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Fault points per backend and fault kind (every call when there are fewer).
    #[arg(long, default_value_t = 40, value_parser = clap::value_parser!(u64).range(1..))]
    points: u64,
    #[command(flatten)]
    common: CommonArgs,
    /// Internal: run as the writer child of a trial.
    #[arg(long, hide = true)]
    child: bool,
    /// Internal (child): the cache.
    #[arg(long, hide = true)]
    dir: Option<PathBuf>,
    /// Internal (child): the file that ends the fault.
    #[arg(long, hide = true)]
    stop: Option<PathBuf>,
}

fn main() -> ExitCode {
    exit_code("faults", run(&Arguments::parse()))
}

fn run(args: &Arguments) -> Result<bool, String> {
    let subjects = select(&args.common.backends)?;
    if args.child {
        let [subject] = &subjects[..] else {
            return Err("a child runs exactly one backend".into());
        };
        let dir = args.dir.as_deref().ok_or("a child needs --dir")?;
        let stop = args.stop.as_deref().ok_or("a child needs --stop")?;
        trial::child(&*subject.factory, dir, stop, &mut std::io::stdout().lock())?;
        return Ok(true);
    }
    let library = injector::library()
        .ok_or("the fault interposer (faultinject/faultinject.c) was not built: see build.rs")?;
    let config = Config { seed: args.seed, points: args.points };
    let work = WorkDir::new(args.common.work_dir.as_deref())?;
    let exe = std::env::current_exe().map_err(|e| format!("finding this executable: {e}"))?;
    let mut reports = Vec::new();
    for subject in &subjects {
        let dir = work.fresh(subject.name)?;
        eprintln!("faults: {} ...", subject.name);
        reports.push(run_backend(&exe, &library, subject, &config, &dir));
    }
    println!("{}", report::render(&reports, &config, &command_line(), args.common.markdown));
    Ok(reports.iter().all(|r| r.failures().is_empty()))
}
