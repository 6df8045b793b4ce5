//! `crash`: the crash campaign of issue 7 (see `stowage_reliability::crash`).
//!
//! ```text
//! crash [--trials N] [--seed S] [--backends a,b] [--models kill,power-loss] [--markdown]
//!       [--keep-failed DIR]
//! ```
//!
//! Prints one table row per backend and failure model, then each failing trial with its seed;
//! exits with status 1 when any trial failed. The same binary is the trials' child process
//! (`--child <label> <dir> <seed>`, not for direct use).

use std::path::{Path, PathBuf};
use stowage_reliability::crash::{
    CampaignOptions, CrashSubject, FailureModel, child::child_main, durable_image::demo_writes,
    run_campaign,
};

const USAGE: &str = "usage: crash [--trials N] [--seed S] [--backends a,b] \
                     [--models kill,power-loss] [--markdown] [--keep-failed DIR]";

struct Args {
    trials: u64,
    seed: u64,
    backends: Vec<String>,
    models: Vec<FailureModel>,
    markdown: bool,
    keep_failed: Option<PathBuf>,
}

fn parse(mut args: impl Iterator<Item = String>) -> Result<Args, String> {
    let mut parsed = Args {
        trials: 200,
        seed: 1,
        backends: Vec::new(),
        models: FailureModel::ALL.to_vec(),
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
            "--models" => {
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
    std::process::exit(match run(args) {
        Ok(true) => 0,
        Ok(false) => 1,
        Err(e) => {
            eprintln!("crash: {e}");
            2
        }
    })
}

/// Runs the campaign and prints its table; whether every trial passed.
fn run(args: Args) -> Result<bool, String> {
    let subjects = CrashSubject::select(&args.backends)?;
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
        } else if trial.seed.wrapping_sub(args.seed) % 50 == 49 {
            eprintln!("{} {}: {} trials", subject.label, model.name(), trial.seed - args.seed + 1);
        }
    });
    let models: Vec<&str> = args.models.iter().map(|m| m.name()).collect();
    let names: Vec<&str> = subjects.iter().map(|s| s.label).collect();
    let command = format!(
        "crash --trials {} --seed {} --backends {} --models {}",
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
