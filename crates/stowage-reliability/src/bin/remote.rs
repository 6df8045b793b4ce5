//! `remote`: the campaigns of issue 18 over caches on object stores, in their long form: the
//! fault campaign (every fault kind on every kind of object, on an in-memory store), a writer
//! killed mid-upload at each stall, and writer processes on one `file://` cache with random
//! `kill -9` (`--rounds 100` rounds each). With `--s3`, the faults that matter on a network
//! store and the writers again on S3 (moto's server on 127.0.0.1: python3 with `moto[server]`
//! and boto3). Prints one line per campaign and every problem; exits 1 if anything failed, 2 if
//! a campaign could not run.
//!
//! ```text
//! remote [--rounds R] [--writers W] [--keys K] [--kills N] [--seed S] [--s3] [--work-dir D]
//!        [--markdown]
//! ```

use std::path::Path;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::Parser;
use stowage_reliability::cli::{command_line, exit_code};
use stowage_reliability::remote::{faults, killed_upload, writers};
use stowage_reliability::work_dir::WorkDir;

/// Faults, a killed upload, and killed writers on caches on object stores.
#[derive(Parser, Debug)]
#[command(version)]
struct Arguments {
    /// Rounds (puts and a flush) each writer process completes.
    #[arg(long, default_value_t = 100)]
    rounds: usize,
    /// Writer processes on the cache.
    #[arg(long, default_value_t = 8)]
    writers: usize,
    /// Keys per round.
    #[arg(long, default_value_t = 20)]
    keys: usize,
    /// `kill -9`s sent to random writers (default: one per two rounds).
    #[arg(long)]
    kills: Option<usize>,
    /// Seed of the kill schedule.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Also on S3 (moto's server).
    #[arg(long)]
    s3: bool,
    /// Directory for the caches (default: a temporary directory, removed afterwards).
    #[arg(long)]
    work_dir: Option<std::path::PathBuf>,
    /// Print the results as a markdown list (for `docs/reliability.md`).
    #[arg(long)]
    markdown: bool,
}

fn main() -> ExitCode {
    exit_code("remote", run(&Arguments::parse()))
}

/// Prints one result line, as a list item with `--markdown`.
fn line(args: &Arguments, text: &str) {
    if args.markdown {
        println!("- {text}");
    } else {
        println!("{text}");
    }
}

fn run(args: &Arguments) -> Result<bool, String> {
    if args.markdown {
        println!("`{}`\n", command_line());
    } else {
        println!("# {}", command_line());
    }
    let work = WorkDir::new(args.work_dir.as_deref())?;
    let mut ok = true;

    // Forking campaigns first, while this process has made no store and so no runtime thread.
    let started = Instant::now();
    let mut killed_problems = Vec::new();
    let killed = work.fresh("killed")?;
    for stall in killed_upload::STALLS {
        let outcome = killed_upload::run(&killed, *stall);
        killed_problems.extend(outcome.problems.iter().map(|p| format!("{}: {p}", outcome.stall)));
    }
    let summary = format!(
        "killed mid-upload: {} stalls, {} problems ({:.1} s)",
        killed_upload::STALLS.len(),
        killed_problems.len(),
        started.elapsed().as_secs_f64()
    );
    line(args, &summary);
    ok &= print_problems(&killed_problems);

    let file = work.fresh("writers-file")?;
    ok &= run_writers(args, "file", writers::file_url(&file), Vec::new(), &file)?;

    let moto = if args.s3 {
        let moto = stowage_test_support::moto::MotoServer::start("remote campaign")
            .ok_or("--s3: python3 cannot run moto's server (pip install 'moto[server]' boto3)")?;
        moto.create_bucket("remote-writers");
        moto.create_bucket("remote-faults");
        Some(moto)
    } else {
        None
    };
    if let Some(moto) = &moto {
        let options: Vec<(String, String)> =
            moto.s3_options().into_iter().map(|(k, v)| (k.to_owned(), v)).collect();
        let dir = work.fresh("writers-s3")?;
        ok &= run_writers(args, "s3", "s3://remote-writers/cache".into(), options, &dir)?;
    }

    let dir = work.fresh("faults-memory")?;
    ok &= run_faults(args, "memory", &faults::all(), &dir, &faults::memory_store);
    if let Some(moto) = &moto {
        let options: Vec<(String, String)> =
            moto.s3_options().into_iter().map(|(k, v)| (k.to_owned(), v)).collect();
        let make = move |i: usize| faults::s3_store(&options, "remote-faults", i);
        let dir = work.fresh("faults-s3")?;
        ok &= run_faults(args, "s3", &faults::network_subset(), &dir, &make);
    }
    Ok(ok)
}

fn run_writers(
    args: &Arguments,
    store: &str,
    url: String,
    store_options: Vec<(String, String)>,
    work: &Path,
) -> Result<bool, String> {
    let config = writers::Config {
        url,
        store_options,
        writers: args.writers,
        rounds: args.rounds,
        keys_per_round: args.keys,
        kills: args.kills.unwrap_or(args.rounds / 2),
        kill_gap: Duration::from_millis(300),
        pause: Duration::from_millis(30),
        seed: args.seed,
        work: work.to_path_buf(),
        timeout_secs: 3600,
    };
    let started = Instant::now();
    let report = writers::run(&config)?;
    let summary = format!(
        "writers on {store}: {} writers x {} rounds x {} keys, {} kills ({} missed), {} \
         acknowledged flushes, {} keys, {} versions ({} read whole), conditional puts per flush \
         mean {:.2} max {} (bound {}), {} merge races lost, {} commits merged by another \
         writer, {} problems ({:.1} s)",
        config.writers,
        config.rounds,
        config.keys_per_round,
        report.kills,
        report.kills_missed,
        report.acked_flushes,
        report.keys,
        report.versions,
        report.versions_read_whole,
        report.mean_puts_per_flush,
        report.max_puts_per_flush,
        writers::MAX_PUTS_PER_FLUSH,
        report.lost_races,
        report.merged_by_others,
        report.problems.len(),
        started.elapsed().as_secs_f64()
    );
    line(args, &summary);
    Ok(print_problems(&report.problems))
}

fn run_faults(
    args: &Arguments,
    store: &str,
    scenarios: &[faults::Scenario],
    work: &Path,
    make: &faults::MakeStore<'_>,
) -> bool {
    let started = Instant::now();
    let outcomes = faults::run_all(scenarios, 0, work, make, &mut |_| {});
    let t = faults::totals(&outcomes);
    let summary = format!(
        "faults on {store}: {} scenarios, {} faults injected ({} scenarios never struck), {} \
         acknowledged flushes, {} writer errors and {} resumes, {} reader errors, {} failed \
         ({:.1} s)",
        t.scenarios,
        t.fired,
        t.unreached,
        t.acked_flushes,
        t.writer_errors,
        t.resumes,
        t.reader_errors,
        t.failed,
        started.elapsed().as_secs_f64()
    );
    line(args, &summary);
    let problems: Vec<String> = outcomes
        .iter()
        .flat_map(|o| o.problems.iter().map(move |p| format!("{}: {p}", o.name)))
        .collect();
    print_problems(&problems)
}

fn print_problems(problems: &[String]) -> bool {
    for p in problems {
        println!("  FAIL {p}");
    }
    problems.is_empty()
}
