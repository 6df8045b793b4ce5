//! `crash`: the crash campaign of issue 7 (see `stowage_reliability::crash`), and with `--mixed`
//! the mixed-sequence crash campaign of issue 14 (see `stowage_reliability::mixed`).
//!
//! ```text
//! crash [--trials N] [--seed S] [--backends a,b] [--models kill,power-loss] [--markdown]
//!       [--keep-failed DIR] [--realistic]
//! crash --mixed [--trials N] [--seed S] [--backends npy,memmap,arrow,hdf5] [--markdown]
//!       [--keep-failed DIR]
//! ```
//!
//! Prints one table row per backend and failure model (with `--mixed`: per format pair, under
//! SIGKILL only), then each failing trial with its seed. `--realistic` runs the backends at their
//! default options with realistic workloads (over 100,000 samples, and some 3,000 files on
//! Arrow, 400 on npy; see `CrashSubject::workload`), recorded as `<backend>@defaults`. Exits
//! with status 1 when any trial failed, 2 when the campaign could not run (a tool's peer missing). The mixed campaign needs
//! `python3` with numpy, pyarrow and tables, and `STOWAGE_HANGAR_PYTHON` naming the Python of a
//! venv with hangar 0.5.2. The same binary is the trials' child process (`--child <label> <dir>
//! <seed>`, `--mixed-child <pair> <cache> <seed>`, not for direct use).

use std::path::{Path, PathBuf};
use stowage_conformance::durable_image::demo_writes;
use stowage_reliability::crash::{
    CampaignOptions, CrashSubject, FailureModel, child::child_main, run_campaign,
};
use stowage_reliability::mixed::{self, pair::Pair, peer::ToolPeer};

const USAGE: &str = "usage: crash [--mixed] [--trials N] [--seed S] [--backends a,b] \
                     [--models kill,power-loss] [--markdown] [--keep-failed DIR] [--realistic]";

struct Args {
    trials: u64,
    seed: u64,
    backends: Vec<String>,
    models: Vec<FailureModel>,
    /// `--models` given (the mixed campaign refuses anything but kill).
    models_given: bool,
    mixed: bool,
    realistic: bool,
    markdown: bool,
    keep_failed: Option<PathBuf>,
}

fn parse(mut args: impl Iterator<Item = String>) -> Result<Args, String> {
    let mut parsed = Args {
        trials: 200,
        seed: 1,
        backends: Vec::new(),
        models: FailureModel::ALL.to_vec(),
        models_given: false,
        mixed: false,
        realistic: false,
        markdown: false,
        keep_failed: None,
    };
    let list = |text: String| -> Vec<String> {
        text.split(',').map(str::trim).filter(|s| !s.is_empty()).map(str::to_owned).collect()
    };
    while let Some(arg) = args.next() {
        let mut value = || args.next().ok_or_else(|| format!("{arg} needs a value\n{USAGE}"));
        match arg.as_str() {
            "--trials" => parsed.trials = value()?.parse().map_err(|e| format!("--trials: {e}"))?,
            "--seed" => parsed.seed = value()?.parse().map_err(|e| format!("--seed: {e}"))?,
            "--backends" => parsed.backends = list(value()?),
            "--mixed" => parsed.mixed = true,
            "--realistic" => parsed.realistic = true,
            "--models" => {
                parsed.models_given = true;
                parsed.models = list(value()?)
                    .iter()
                    .map(|m| {
                        FailureModel::named(m)
                            .ok_or_else(|| format!("unknown model {m:?}: kill or power-loss"))
                    })
                    .collect::<Result<_, _>>()?
            }
            "--markdown" => parsed.markdown = true,
            "--keep-failed" => parsed.keep_failed = Some(PathBuf::from(value()?)),
            "-h" | "--help" => return Err(USAGE.into()),
            other => return Err(format!("unknown argument {other:?}\n{USAGE}")),
        }
    }
    Ok(parsed)
}

fn main() {
    let mut args = std::env::args().skip(1).peekable();
    match args.peek().map(String::as_str) {
        Some("--child") => {
            let rest: Vec<String> = args.skip(1).collect();
            let [label, dir, seed] = rest.as_slice() else {
                eprintln!("crash --child needs <label> <dir> <seed>");
                std::process::exit(2)
            };
            child_main(label, Path::new(dir), seed.parse().unwrap_or(0))
        }
        Some("--mixed-child") => {
            let rest: Vec<String> = args.skip(1).collect();
            let [pair, cache, seed] = rest.as_slice() else {
                eprintln!("crash --mixed-child needs <pair> <cache> <seed>");
                std::process::exit(2)
            };
            mixed::child::child_main(pair, Path::new(cache), seed.parse().unwrap_or(0))
        }
        Some("--faultfs-demo") => {
            let root = args.nth(1).expect("crash --faultfs-demo needs a directory");
            if let Err(e) = demo_writes(Path::new(&root)) {
                eprintln!("faultfs demo: {e}");
                std::process::exit(1)
            }
            return;
        }
        _ => {}
    }
    let args = parse(args).unwrap_or_else(|e| {
        eprintln!("{e}");
        std::process::exit(2)
    });
    let outcome = if args.mixed { run_mixed(args) } else { run(args) };
    std::process::exit(match outcome {
        Ok(true) => 0,
        Ok(false) => 1,
        Err(e) => {
            eprintln!("crash: {e}");
            2
        }
    })
}

/// The directory trials go to: `--keep-failed`'s, or a temporary one (kept alive by the
/// returned handle).
fn scratch(args: &Args) -> Result<(PathBuf, tempfile::TempDir), String> {
    let temporary = tempfile::Builder::new()
        .prefix("stowage-crash-")
        .tempdir()
        .map_err(|e| format!("creating a scratch directory: {e}"))?;
    let scratch = match &args.keep_failed {
        Some(dir) => {
            std::fs::create_dir_all(dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
            dir.clone()
        }
        None => temporary.path().to_path_buf(),
    };
    Ok((scratch, temporary))
}

/// Runs the campaign and prints its table; whether every trial passed.
fn run(args: Args) -> Result<bool, String> {
    let subjects = match args.realistic {
        true => CrashSubject::select_realistic(&args.backends)?,
        false => CrashSubject::select(&args.backends)?,
    };
    let (scratch, _temporary) = scratch(&args)?;
    let exe = std::env::current_exe().map_err(|e| format!("finding this executable: {e}"))?;
    let options = CampaignOptions {
        trials: args.trials,
        seed: args.seed,
        models: args.models.clone(),
        exe,
        scratch,
        keep_failed: args.keep_failed.is_some(),
    };
    let started = std::time::Instant::now();
    let report = run_campaign(&subjects, &options, |subject, model, trial| {
        if let Some(failure) = &trial.failure {
            eprintln!("FAILED {failure}");
        } else if args.realistic || trial.seed.wrapping_sub(args.seed) % 50 == 49 {
            eprintln!("{} {}: {} trials", subject.label, model.name(), trial.seed - args.seed + 1);
        }
    });
    let models: Vec<&str> = args.models.iter().map(|m| m.name()).collect();
    let names: Vec<&str> =
        subjects.iter().map(|s| stowage_reliability::backends::backend_of(s.label)).collect();
    let command = format!(
        "crash {}--trials {} --seed {} --backends {} --models {}",
        if args.realistic { "--realistic " } else { "" },
        args.trials,
        args.seed,
        names.join(","),
        models.join(",")
    );
    if args.markdown {
        println!("Command: `{command}` ({:.0} s)\n", started.elapsed().as_secs_f64());
    } else {
        println!("{command} ({:.0} s)\n", started.elapsed().as_secs_f64());
    }
    print!("{}", report.render(args.markdown));
    Ok(report.failures().next().is_none())
}

/// Runs the mixed campaign and prints its table; whether every trial passed.
fn run_mixed(args: Args) -> Result<bool, String> {
    if args.realistic {
        return Err("--realistic is for the crash campaign, not --mixed".into());
    }
    if args.models_given && args.models != [FailureModel::Kill] {
        return Err("--mixed runs under SIGKILL only (--models kill): the original tools fsync \
                    nothing, so a power cut may lose their data by their own design"
            .into());
    }
    let pairs = Pair::select(&args.backends)?;
    // Every peer is found before the first trial: a missing one stops the campaign (exit 2).
    let peers: Vec<(Pair, ToolPeer)> = pairs
        .iter()
        .map(|&pair| ToolPeer::find(pair).map(|peer| (pair, peer)))
        .collect::<Result<_, _>>()?;
    let (scratch, _temporary) = scratch(&args)?;
    let exe = std::env::current_exe().map_err(|e| format!("finding this executable: {e}"))?;
    let options = mixed::CampaignOptions {
        trials: args.trials,
        seed: args.seed,
        exe,
        scratch,
        keep_failed: args.keep_failed.is_some(),
    };
    let started = std::time::Instant::now();
    let report = mixed::run_campaign(&peers, &options, |trial| {
        if let Some(failure) = &trial.failure {
            eprintln!("FAILED {failure}");
        } else if trial.seed.wrapping_sub(args.seed) % 25 == 24 {
            eprintln!("{}: {} trials", trial.pair.label(), trial.seed - args.seed + 1);
        }
    });
    let names: Vec<&str> = pairs.iter().map(|p| p.backend()).collect();
    let command = format!(
        "crash --mixed --trials {} --seed {} --backends {}",
        args.trials,
        args.seed,
        names.join(",")
    );
    let seconds = started.elapsed().as_secs_f64();
    match args.markdown {
        true => println!("Command: `{command}` ({seconds:.0} s)\n"),
        false => println!("{command} ({seconds:.0} s)\n"),
    }
    print!("{}", report.render(args.markdown));
    Ok(report.failures().next().is_none())
}
