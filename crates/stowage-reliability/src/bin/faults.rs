//! `faults`: the resource-fault campaign of issue 7 over every backend (or those chosen): ENOSPC,
//! EIO and EMFILE on writes, fsyncs, ftruncates, fallocates, renames, mkdirs and creating opens,
//! injected into a writer child process by an `LD_PRELOAD` interposer, under the power-loss model
//! (a failed fsync drops the pages it could not write). Prints one table and every failure; exits
//! 1 if anything failed (an unreached fault point included), 2 if the campaign could not run (no
//! interposer). `--realistic` runs the backends at their default options, each trial starting
//! from a cache of 100,000 samples (some 3,000 files on Arrow, 400 on npy), recorded as
//! `<backend>@defaults`.
//!
//! ```text
//! faults [--seed N] [--points P] [--backends a,b] [--markdown] [--realistic]
//! ```

use clap::Parser;
use std::path::PathBuf;
use std::process::ExitCode;
use stowage_conformance::injector;
use stowage_reliability::backends::{all, defaults, select, select_defaults};
use stowage_reliability::cli::{CommonArgs, command_line, exit_code};
use stowage_reliability::faults::{Config, report, run_backend, trial};
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
    /// Default options and a realistic base cache (100,000 samples) per backend.
    #[arg(long)]
    realistic: bool,
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
    /// Internal (child): the samples the cache holds when the child starts.
    #[arg(long, hide = true, default_value_t = trial::BASE)]
    base: usize,
    /// Internal: run the failed-fsync demonstration of the power-loss model in this directory
    /// (see `faults::fsync_demo`).
    #[arg(long, hide = true)]
    fsync_demo: Option<PathBuf>,
}

fn main() -> ExitCode {
    exit_code("faults", run(&Arguments::parse()))
}

fn run(args: &Arguments) -> Result<bool, String> {
    if let Some(dir) = &args.fsync_demo {
        stowage_reliability::faults::fsync_demo(dir).map_err(|e| format!("fsync demo: {e}"))?;
        return Ok(true);
    }
    if args.child {
        // The parent names the subject: `npy`, or `npy@defaults` in a realistic run.
        let [name] = &args.common.backends[..] else {
            return Err("a child runs exactly one backend".into());
        };
        let subject = all()
            .into_iter()
            .chain(defaults())
            .find(|s| s.name == name.as_str())
            .ok_or_else(|| format!("no backend is called {name:?}"))?;
        let dir = args.dir.as_deref().ok_or("a child needs --dir")?;
        let stop = args.stop.as_deref().ok_or("a child needs --stop")?;
        trial::child(&*subject.factory, dir, stop, args.base, &mut std::io::stdout().lock())?;
        return Ok(true);
    }
    let subjects = match args.realistic {
        true => select_defaults(&args.common.backends)?,
        false => select(&args.common.backends)?,
    };
    let library = injector::library()
        .ok_or("the fault interposer (faultinject/faultinject.c) was not built: see build.rs")?;
    let config = Config { seed: args.seed, points: args.points, realistic: args.realistic };
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
