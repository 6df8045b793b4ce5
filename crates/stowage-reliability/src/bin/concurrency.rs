//! `concurrency`: the concurrency campaign of issue 7 over every backend (or those chosen):
//! readers while a writer writes, two writers racing for the lock, a writer killed holding it,
//! readers opening while the writer finalizes.
//! Prints one table and every failure; exits 1 if anything failed.
//!
//! ```text
//! concurrency [--seconds S] [--seed N] [--races R] [--kills K] [--finalize-rounds F]
//!             [--backends a,b] [--markdown] [--realistic]
//! ```
//!
//! `--realistic` runs every backend at its default options, and the live writer first writes
//! 100,000 distinct keys at full speed (Arrow flushing every 50: 2,000 segments) while the
//! readers read, then goes on at its steady pace.

use clap::Parser;
use std::path::PathBuf;
use std::process::ExitCode;
use stowage_reliability::cli::{CommonArgs, command_line, exit_code};
use stowage_reliability::concurrency::child::{ChildArgs, Role, child_main};
use stowage_reliability::concurrency::{Config, report, run_backend};
use stowage_reliability::corruption::scale::{REALISTIC_SAMPLES, Scale, select};
use stowage_reliability::work_dir::WorkDir;

/// Readers while a writer writes, two writers, and a killed writer, per backend.
#[derive(Parser, Debug)]
#[command(version)]
struct Arguments {
    /// Length of each backend's live trial (writer process + 8 reader threads + 2 reader
    /// processes), in seconds.
    #[arg(long, default_value_t = 60.0)]
    seconds: f64,
    /// Campaign seed.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Two-writer races per backend.
    #[arg(long, default_value_t = 20)]
    races: u32,
    /// Killed-writer trials per backend.
    #[arg(long, default_value_t = 20)]
    kills: u32,
    /// Readers-during-finalize rounds per backend.
    #[arg(long, default_value_t = 20)]
    finalize_rounds: u32,
    #[command(flatten)]
    common: CommonArgs,
    /// The realistic form: default options, and a live writer that first writes 100,000 keys.
    #[arg(long)]
    realistic: bool,
    /// Internal (child): the live writer's preload (implies the default options).
    #[arg(long, hide = true, default_value_t = 0)]
    preload: u64,
    /// Internal: run as a child process of this role.
    #[arg(long, hide = true)]
    child: Option<String>,
    /// Internal (child): the cache.
    #[arg(long, hide = true)]
    dir: Option<PathBuf>,
    /// Internal (child): the live trial's progress file.
    #[arg(long, hide = true)]
    progress: Option<PathBuf>,
    /// Internal (child): the child's number.
    #[arg(long, hide = true, default_value_t = 0)]
    id: u32,
}

fn main() -> ExitCode {
    exit_code("concurrency", run(&Arguments::parse()))
}

fn run(args: &Arguments) -> Result<bool, String> {
    let preload = if args.realistic { REALISTIC_SAMPLES as u64 } else { args.preload };
    let scale = if preload > 0 { Scale::Realistic } else { Scale::Quick };
    let subjects = select(scale, &args.common.backends)?;
    if let Some(role) = &args.child {
        let [subject] = &subjects[..] else {
            return Err("a child runs exactly one backend".into());
        };
        let child = ChildArgs {
            role: Role::parse(role)?,
            backend: subject.name.into(),
            dir: args.dir.clone().ok_or("a child needs --dir")?,
            progress: args.progress.clone().ok_or("a child needs --progress")?,
            seed: args.seed,
            seconds: args.seconds,
            id: args.id,
            preload,
        };
        child_main(subject, &child, &mut std::io::stdout().lock())?;
        return Ok(true);
    }
    let config = Config {
        seconds: args.seconds,
        seed: args.seed,
        races: args.races,
        kills: args.kills,
        finalize_rounds: args.finalize_rounds,
        preload,
    };
    let work = WorkDir::new(args.common.work_dir.as_deref())?;
    let exe = std::env::current_exe().map_err(|e| format!("finding this executable: {e}"))?;
    let mut reports = Vec::new();
    for subject in &subjects {
        let dir = work.fresh(subject.name)?;
        eprintln!("concurrency: {} ...", subject.name);
        reports.push(run_backend(&exe, subject, &config, &dir));
    }
    println!("{}", report::render(&reports, &config, &command_line(), args.common.markdown));
    Ok(reports.iter().all(|r| r.failures().is_empty()))
}
