//! `convert`: the convert crash campaign — `stowage convert` killed with SIGKILL inside create,
//! copy, flush and finalize, then run again; prints a table per target and exits 1 if a rerun
//! did not give what an uninterrupted run gives.
//!
//! ```text
//! convert [--trials N] [--samples S] [--flush-every F] [--seed X] [--backends memmap,arrow] [--markdown]
//! ```

use clap::Parser;
use std::process::ExitCode;
use std::time::Instant;
use stowage_reliability::cli::{CommonArgs, command_line, exit_code};
use stowage_reliability::convert::{Config, TARGETS, report::summary, run};
use stowage_reliability::work_dir::WorkDir;

/// Kill `stowage convert` at random points of each step, rerun it, and check the target.
#[derive(Parser, Debug)]
#[command(version)]
struct Arguments {
    /// Trials per target backend.
    #[arg(long, default_value_t = 40)]
    trials: u64,
    /// Samples in the source cache.
    #[arg(long, default_value_t = 20_000)]
    samples: usize,
    /// `--flush-every` of the command (default: the command's own default).
    #[arg(long)]
    flush_every: Option<usize>,
    /// Seed of the kill points.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    #[command(flatten)]
    common: CommonArgs,
}

fn main() -> ExitCode {
    exit_code("convert", campaign(&Arguments::parse()))
}

fn campaign(args: &Arguments) -> Result<bool, String> {
    let targets: Vec<&'static str> = match args.common.backends.is_empty() {
        true => TARGETS.to_vec(),
        false => args
            .common
            .backends
            .iter()
            .map(|name| {
                TARGETS.iter().copied().find(|t| t == name).ok_or_else(|| {
                    format!("unknown target {name:?}; convert writes {}", TARGETS.join(", "))
                })
            })
            .collect::<Result<_, _>>()?,
    };
    let config = Config {
        trials: args.trials,
        samples: args.samples,
        flush_every: args.flush_every,
        seed: args.seed,
    };
    let work = WorkDir::new(args.common.work_dir.as_deref())?;
    let started = Instant::now();
    let reports = run(&config, &targets, &work.fresh("convert")?)?;
    println!("{}", summary(&reports, args.common.markdown));
    println!(
        "{} in {:.0} s: {}",
        command_line(),
        started.elapsed().as_secs_f64(),
        match reports.iter().all(|r| r.failures().is_empty()) {
            true => "every rerun gave the uninterrupted result",
            false => "FAILED",
        }
    );
    Ok(reports.iter().all(|r| r.failures().is_empty()))
}
