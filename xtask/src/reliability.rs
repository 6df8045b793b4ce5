//! `cargo xtask reliability`: the long reliability campaigns of stowage-reliability, each a binary
//! run with the trial counts, and the fuzz targets for their full duration; each result is
//! recorded in its own section of `docs/reliability.md` with the machine and the command that
//! reproduces it. The quick forms of the campaigns run in `cargo xtask test` as that crate's
//! tests.

use std::fmt::Write as _;
use std::path::Path;
use std::process::Command;

use crate::machine::Machine;
use crate::sections::Page;
use crate::test::ReferenceDir;
use crate::{cargo, display_command, run_for_markdown, workspace_root};

/// One campaign: a binary of stowage-reliability and its long-form arguments.
#[derive(Debug)]
pub struct Campaign {
    /// The name `--campaign` selects and the section's marker name.
    pub name: &'static str,
    /// The binary of stowage-reliability that runs it.
    pub binary: &'static str,
    /// The section's heading (after `## `).
    pub heading: &'static str,
    /// The arguments of the long form (`--markdown` is added).
    pub args: &'static [&'static str],
    /// The arguments of its realistic form (default options, realistic sizes), run after the
    /// long form and recorded in a section of its own, `<name>-realistic`; empty when the
    /// campaign has none.
    pub realistic: &'static [&'static str],
    /// Whether the binary is built as cargo-fuzz builds its targets: nightly, AddressSanitizer,
    /// debug assertions and overflow checks, in its own target directory.
    pub sanitized: bool,
    /// Whether it runs hangar 0.5.2 itself (its venv is made as for the tests and its python
    /// passed in `STOWAGE_HANGAR_PYTHON`).
    pub hangar: bool,
}

/// Every campaign, in the order they run and their sections appear.
pub const CAMPAIGNS: &[Campaign] = &[
    Campaign {
        name: "crash",
        binary: "crash",
        heading: "Crash: SIGKILL at random moments, and simulated power loss",
        args: &["--trials", "200"],
        realistic: &["--realistic", "--trials", "2"],
        sanitized: false,
        hangar: false,
    },
    Campaign {
        name: "crash-mixed",
        binary: "crash",
        heading: "Crash in mixed sequences: stowage and the original tools sharing a cache",
        args: &["--mixed", "--trials", "50"],
        realistic: &[],
        sanitized: false,
        hangar: true,
    },
    Campaign {
        name: "crash-convert",
        binary: "convert",
        heading: "Crash in `stowage convert`: SIGKILL in create, copy, flush and finalize, then the same command again",
        args: &["--trials", "40", "--samples", "20000", "--flush-every", "256"],
        realistic: &["--trials", "8", "--samples", "100000"],
        sanitized: false,
        hangar: false,
    },
    Campaign {
        name: "corruption",
        binary: "corruption",
        heading: "Corruption: single-byte flips and truncations of finalized caches",
        args: &["--flips", "1000", "--truncations", "100", "--cli-gets", "8"],
        realistic: &["--realistic", "--flips", "40", "--truncations", "10"],
        sanitized: false,
        hangar: false,
    },
    Campaign {
        name: "corruption-asan",
        binary: "corruption",
        heading: "Corruption under AddressSanitizer",
        args: &["--flips", "1000", "--truncations", "100", "--cli-gets", "8"],
        realistic: &[],
        sanitized: true,
        hangar: false,
    },
    Campaign {
        name: "concurrency",
        binary: "concurrency",
        heading: "Concurrency: a writer process, reader threads and processes, competing writers",
        args: &["--seconds", "60"],
        realistic: &["--realistic", "--seconds", "60"],
        sanitized: false,
        hangar: false,
    },
    Campaign {
        name: "faults",
        binary: "faults",
        heading: "Resource faults: disk full and I/O errors",
        args: &[],
        realistic: &["--realistic", "--points", "2"],
        sanitized: false,
        hangar: false,
    },
    Campaign {
        name: "remote",
        binary: "remote",
        heading: "Object storage: faults, killed uploads and 8 writers with kill -9 (file:// and S3 on moto)",
        args: &["--rounds", "100", "--s3"],
        realistic: &[],
        sanitized: false,
        hangar: false,
    },
];

/// The fuzz step's name (runs every cargo-fuzz target of `fuzz/`).
pub const FUZZ: &str = "fuzz";
/// Seconds each fuzz target runs in the long form.
const FUZZ_SECONDS: u32 = 600;

const PAGE: Page = Page { prefix: "xtask-reliability", legacy: None };

/// Runs the campaigns named in `args` (`--campaign NAME`, repeatable; none: all, then the fuzz
/// targets) and records each section; a campaign that fails is recorded and reported, and the
/// others still run.
///
/// Errors: bad arguments; the names of the campaigns that failed or could not run.
pub fn run(args: &[String]) -> Result<(), String> {
    let chosen = parse(args)?;
    let root = workspace_root();
    let docs = root.join("docs/reliability.md");
    let mut failed = Vec::new();
    for name in &chosen {
        println!("xtask: ==> reliability: {name}");
        let outcome = match CAMPAIGNS.iter().find(|c| c.name == *name) {
            Some(campaign) => run_campaign(&root, &docs, campaign),
            None => run_fuzz(&root, &docs),
        };
        if let Err(message) = outcome {
            eprintln!("xtask: error: {name}: {message}");
            failed.push(*name);
        }
    }
    if failed.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "{} of {} failed: {} (see above)",
            failed.len(),
            chosen.len(),
            failed.join(", ")
        ))
    }
}

/// The steps `args` name, in run order.
fn parse(args: &[String]) -> Result<Vec<&'static str>, String> {
    let names: Vec<&'static str> =
        CAMPAIGNS.iter().map(|c| c.name).chain(std::iter::once(FUZZ)).collect();
    let mut chosen = Vec::new();
    let mut args = args.iter();
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--campaign" => {
                let name = args.next().ok_or("`--campaign` needs a name")?;
                let found = names.iter().find(|n| **n == name.as_str()).ok_or_else(|| {
                    format!("unknown campaign `{name}`; the campaigns are {}", names.join(", "))
                })?;
                chosen.push(*found);
            }
            other => {
                return Err(format!(
                    "unexpected argument `{other}`; the flag here is `--campaign NAME` (see \
                     `cargo xtask --help`)"
                ));
            }
        }
    }
    Ok(names.into_iter().filter(|n| chosen.is_empty() || chosen.contains(n)).collect())
}

/// Every section name in page order: each campaign's, then its realistic form's, then the fuzz
/// step's.
fn section_names() -> Vec<String> {
    let mut names = Vec::new();
    for campaign in CAMPAIGNS {
        names.push(campaign.name.to_string());
        if !campaign.realistic.is_empty() {
            names.push(format!("{}-realistic", campaign.name));
        }
    }
    names.push(FUZZ.to_string());
    names
}

/// Runs one campaign's long form, then its realistic form when it has one, recording each.
fn run_campaign(root: &Path, docs: &Path, campaign: &Campaign) -> Result<(), String> {
    let long = run_form(root, docs, campaign, campaign.name, campaign.heading, campaign.args);
    if campaign.realistic.is_empty() {
        return long;
    }
    let name = format!("{}-realistic", campaign.name);
    let heading =
        format!("{}, realistic form: default options and realistic sizes", campaign.heading);
    let realistic = run_form(root, docs, campaign, &name, &heading, campaign.realistic);
    match (long, realistic) {
        (Ok(()), Ok(())) => Ok(()),
        (Err(e), Ok(())) | (Ok(()), Err(e)) => Err(e),
        (Err(a), Err(b)) => Err(format!("{a}; {b}")),
    }
}

/// Builds the `stowage` command in release (with the stable toolchain, also for the sanitized
/// campaigns: the command is scored, not instrumented) and returns its path, for `STOWAGE_BIN`.
fn stowage_bin() -> Result<std::path::PathBuf, String> {
    let mut command = cargo();
    command.args(["build", "--release", "--quiet", "-p", "stowage-cli", "--bin", "stowage"]);
    let line = display_command(&command);
    println!("xtask: ==> {line}");
    let status = command.status().map_err(|e| format!("could not start `{line}`: {e}"))?;
    if !status.success() {
        return Err(format!("`{line}` failed ({status})"));
    }
    Ok(crate::target_dir().join("release/stowage"))
}

/// Builds and runs one form of a campaign binary with `args`, records its markdown as `name`.
fn run_form(
    root: &Path,
    docs: &Path,
    campaign: &Campaign,
    name: &str,
    heading: &str,
    args: &[&str],
) -> Result<(), String> {
    let binary = campaign.binary;
    let source = root.join(format!("crates/stowage-reliability/src/bin/{binary}.rs"));
    if !source.is_file() {
        return Err(format!("not runnable yet: {} does not exist", source.display()));
    }
    let mut command = match campaign.sanitized {
        false => cargo(),
        true => {
            require_nightly(root)?;
            sanitized_cargo(root)
        }
    };
    if campaign.hangar {
        let python = crate::hangar_venv::ensure(&crate::target_dir())?;
        command.env(crate::hangar_venv::HANGAR_PYTHON_ENV, python);
    }
    if args.contains(&"--s3") {
        require_moto()?;
    }
    if matches!(binary, "corruption" | "convert") {
        // These campaigns run the `stowage` command: scored on every damaged copy, or killed.
        command.env("STOWAGE_BIN", stowage_bin()?);
    }
    command.args(["run", "--release", "--quiet", "-p", "stowage-reliability", "--bin"]);
    command.arg(binary).arg("--").args(args).arg("--markdown");
    let (markdown, status, line) = run_for_markdown(&mut command)?;
    let verdict = if status.success() { "passed" } else { "FAILED" };
    record(docs, name, heading, &line, verdict, &markdown)?;
    match status.success() {
        true => Ok(()),
        false => Err(format!("`{line}` failed ({status}); its section says what")),
    }
}

/// `cargo +nightly` building as cargo-fuzz builds a target (its RUSTFLAGS less the coverage
/// instrumentation libFuzzer needs): AddressSanitizer, debug assertions and overflow checks, for
/// the host target given explicitly (so build scripts and proc macros stay uninstrumented), in
/// `target/asan`.
fn sanitized_cargo(root: &Path) -> Command {
    let mut command = Command::new("cargo");
    command.current_dir(root).args(["+nightly", "--config"]);
    command.arg("build.rustflags=['-Zsanitizer=address','-Cdebug-assertions','-Coverflow-checks']");
    command.env("CARGO_TARGET_DIR", root.join("target/asan"));
    command.env("CARGO_BUILD_TARGET", host_triple());
    command
}

/// Whether the nightly toolchain is installed; the command that installs it when it is not.
fn require_nightly(root: &Path) -> Result<(), String> {
    let output = Command::new("cargo").current_dir(root).args(["+nightly", "--version"]).output();
    match output {
        Ok(o) if o.status.success() => Ok(()),
        _ => Err("the nightly toolchain is needed for AddressSanitizer (-Zsanitizer=address): \
                  `rustup toolchain install nightly`"
            .into()),
    }
}

/// Whether python3 imports moto's server and boto3, which `--s3` runs (an S3 server on
/// 127.0.0.1); the command that installs them when it does not.
fn require_moto() -> Result<(), String> {
    let output = Command::new("python3").args(["-c", "import moto.server, boto3"]).output();
    match output {
        Ok(o) if o.status.success() => Ok(()),
        _ => Err("`--s3` runs moto's S3 server: python3 with moto[server] and boto3 is needed \
                  (`pip install 'moto[server]' boto3`)"
            .into()),
    }
}

/// The host's target triple, as rustc reports it (`x86_64-unknown-linux-gnu` when it cannot).
fn host_triple() -> String {
    let output = Command::new("rustc").arg("-vV").output();
    let text = output.map(|o| String::from_utf8_lossy(&o.stdout).into_owned()).unwrap_or_default();
    text.lines()
        .find_map(|l| l.strip_prefix("host: "))
        .unwrap_or("x86_64-unknown-linux-gnu")
        .to_owned()
}

/// Runs every cargo-fuzz target of `fuzz/` for [`FUZZ_SECONDS`] (nightly and cargo-fuzz needed;
/// cargo-fuzz is installed when missing) and records one line per target.
fn run_fuzz(root: &Path, docs: &Path) -> Result<(), String> {
    if !root.join("fuzz/Cargo.toml").is_file() {
        return Err("not runnable yet: fuzz/Cargo.toml does not exist".into());
    }
    let has_fuzz = Command::new("cargo").args(["fuzz", "--version"]).output();
    if !has_fuzz.is_ok_and(|o| o.status.success()) {
        println!("xtask: installing cargo-fuzz for the fuzz targets (cargo install cargo-fuzz)");
        let status = Command::new("cargo")
            .args(["install", "--locked", "cargo-fuzz"])
            .status()
            .map_err(|e| format!("could not start `cargo install cargo-fuzz`: {e}"))?;
        if !status.success() {
            return Err("`cargo install cargo-fuzz` failed: install it by hand".into());
        }
    }
    let fuzz = |args: &[&str]| {
        let mut command = Command::new("cargo");
        command.arg("+nightly").arg("fuzz").args(args).current_dir(root);
        command
    };
    let listed = fuzz(&["list"]).output().map_err(|e| format!("cargo fuzz list: {e}"))?;
    if !listed.status.success() {
        return Err(format!(
            "`cargo +nightly fuzz list` failed (the nightly toolchain is needed: `rustup toolchain \
             install nightly`): {}",
            String::from_utf8_lossy(&listed.stderr).trim()
        ));
    }
    let targets: Vec<String> =
        String::from_utf8_lossy(&listed.stdout).lines().map(str::to_owned).collect();
    seed_corpus(root)?;
    // Each target is one libFuzzer process on one core: run as many at once as there are cores.
    let jobs = std::thread::available_parallelism().map_or(1, |n| n.get()).min(targets.len());
    println!("xtask: {} fuzz targets, {FUZZ_SECONDS} s each, {jobs} at a time", targets.len());
    let next = std::sync::atomic::AtomicUsize::new(0);
    let outcomes = std::sync::Mutex::new(vec![None; targets.len()]);
    std::thread::scope(|scope| {
        for _ in 0..jobs {
            scope.spawn(|| {
                loop {
                    let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    let Some(target) = targets.get(i) else { break };
                    let outcome = fuzz_one(&fuzz, target);
                    outcomes.lock().expect("no thread panics holding it")[i] = Some(outcome);
                }
            });
        }
    });
    let mut table = String::from("| target | runs | seconds | result |\n|---|---|---|---|\n");
    let mut crashed = Vec::new();
    for (target, outcome) in targets.iter().zip(outcomes.into_inner().expect("threads joined")) {
        let FuzzOutcome { runs, seconds, clean } = outcome.expect("every target ran")?;
        let result = if clean { "no crash" } else { "CRASH (see fuzz/artifacts)" };
        if !clean {
            crashed.push(target.clone());
        }
        let _ = writeln!(table, "| {target} | {runs} | {seconds} | {result} |");
    }
    let line = format!("cargo +nightly fuzz run <target> -- -max_total_time={FUZZ_SECONDS}");
    let verdict = if crashed.is_empty() { "passed" } else { "FAILED" };
    record(docs, FUZZ, "Hostile input: the fuzz targets", &line, verdict, &table)?;
    match crashed.is_empty() {
        true => Ok(()),
        false => Err(format!("fuzz targets crashed: {}", crashed.join(", "))),
    }
}

/// What one fuzz target's run came to.
#[derive(Clone, Debug)]
struct FuzzOutcome {
    /// Inputs run, as libFuzzer counted them ("?" when its log had no final line).
    runs: String,
    /// Seconds it ran, as libFuzzer counted them.
    seconds: String,
    /// Whether it ended without a crash.
    clean: bool,
}

/// Runs one fuzz target for [`FUZZ_SECONDS`] with `fuzz` (a `cargo +nightly fuzz` command maker).
fn fuzz_one(fuzz: &dyn Fn(&[&str]) -> Command, target: &str) -> Result<FuzzOutcome, String> {
    let max_time = format!("-max_total_time={FUZZ_SECONDS}");
    let mut command = fuzz(&["run", target, "--", &max_time]);
    println!("xtask: ==> {}", display_command(&command));
    let output = command.output().map_err(|e| format!("cargo fuzz run {target}: {e}"))?;
    let log = String::from_utf8_lossy(&output.stderr);
    // libFuzzer ends with "Done N runs in S second(s)".
    let done = log.lines().rev().find_map(|l| l.split_once("Done ").map(|(_, rest)| rest));
    let (runs, seconds) = done
        .and_then(|rest| {
            let words: Vec<&str> = rest.split_whitespace().collect();
            Some((words.first()?.to_string(), words.get(3)?.to_string()))
        })
        .unwrap_or_else(|| ("?".into(), "?".into()));
    if !output.status.success() {
        eprintln!("xtask: fuzz target {target} failed; the end of its log:");
        let lines: Vec<&str> = log.lines().collect();
        for line in &lines[lines.len().saturating_sub(40)..] {
            eprintln!("  {line}");
        }
    }
    Ok(FuzzOutcome { runs, seconds, clean: output.status.success() })
}

/// Writes the seed corpus of every target (`fuzz/seed-corpus`): the corpus is generated, never
/// committed. The reference caches seed it too when they are found (as `cargo xtask test` finds
/// them).
fn seed_corpus(root: &Path) -> Result<(), String> {
    let mut command = Command::new("cargo");
    command.args(["run", "--release", "--quiet", "--manifest-path", "fuzz/Cargo.toml"]);
    command.args(["-p", "stowage-fuzz-seed-corpus"]).current_dir(root);
    let reference = ReferenceDir::find(root, std::env::var_os("STOWAGE_REFERENCE_DIR"));
    match reference.path.is_dir() {
        true => command.env("STOWAGE_REFERENCE_DIR", &reference.path),
        false => command.env_remove("STOWAGE_REFERENCE_DIR"),
    };
    let line = display_command(&command);
    println!("xtask: ==> {line}");
    let status = command.status().map_err(|e| format!("could not start `{line}`: {e}"))?;
    match status.success() {
        true => Ok(()),
        false => Err(format!("`{line}` failed ({status}): the seed corpus could not be written")),
    }
}

/// Writes `name`'s section of the page at `docs`.
fn record(
    docs: &Path,
    name: &str,
    heading: &str,
    command: &str,
    verdict: &str,
    body: &str,
) -> Result<(), String> {
    let machine = Machine::detect(None);
    let mut section = format!("## {heading}\n\n");
    let _ = writeln!(
        section,
        "Measured {} on {} ({} cores available, {} memory), {}: {verdict}.\n",
        machine.date, machine.cpu, machine.cores, machine.memory, machine.rustc
    );
    let _ = writeln!(section, "Command: `{command}` (from `cargo xtask reliability`).\n");
    section.push_str(body.trim_end());
    let old = std::fs::read_to_string(docs).unwrap_or_else(|_| "# Reliability\n".to_owned());
    let names = section_names();
    let later: Vec<&str> =
        names.iter().skip_while(|n| *n != name).skip(1).map(String::as_str).collect();
    std::fs::write(docs, PAGE.replace(&old, name, &later, &section))
        .map_err(|e| format!("cannot write {}: {e}", docs.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_args(args: &[&str]) -> Result<Vec<&'static str>, String> {
        parse(&args.iter().map(|a| a.to_string()).collect::<Vec<_>>())
    }

    #[test]
    fn campaigns_are_chosen_in_run_order_and_unknown_ones_refused() {
        assert_eq!(
            parse_args(&[]).unwrap(),
            [
                "crash",
                "crash-mixed",
                "crash-convert",
                "corruption",
                "corruption-asan",
                "concurrency",
                "faults",
                "remote",
                "fuzz"
            ]
        );
        assert_eq!(
            parse_args(&["--campaign", "fuzz", "--campaign", "crash"]).unwrap(),
            ["crash", "fuzz"]
        );
        let err = parse_args(&["--campaign", "chaos"]).unwrap_err();
        assert_eq!(
            err,
            "unknown campaign `chaos`; the campaigns are crash, crash-mixed, crash-convert, corruption, \
             corruption-asan, concurrency, faults, remote, fuzz"
        );
        assert!(parse_args(&["--campaign"]).is_err());
        assert!(parse_args(&["--quick"]).unwrap_err().contains("--campaign NAME"));
    }

    #[test]
    fn a_realistic_form_has_its_own_section_after_its_campaign() {
        let names = section_names();
        let at = |n: &str| names.iter().position(|x| x == n).unwrap();
        assert_eq!(at("corruption-realistic"), at("corruption") + 1);
        assert_eq!(names.last().map(String::as_str), Some(FUZZ));
    }

    #[test]
    fn every_campaign_has_its_binary_and_the_remote_one_runs_on_s3() {
        let bins = workspace_root().join("crates/stowage-reliability/src/bin");
        for campaign in CAMPAIGNS {
            let source = bins.join(format!("{}.rs", campaign.binary));
            assert!(source.is_file(), "{}: {} is missing", campaign.name, source.display());
        }
        let remote = CAMPAIGNS.iter().find(|c| c.name == "remote").unwrap();
        assert_eq!(remote.args, ["--rounds", "100", "--s3"]);
        let names = section_names();
        let at = |n: &str| names.iter().position(|x| x == n).unwrap();
        assert_eq!(at("fuzz"), at("remote") + 1);
    }

    #[test]
    fn a_section_records_the_verdict_and_the_command() {
        let dir = tempfile::tempdir().unwrap();
        let docs = dir.path().join("reliability.md");
        std::fs::write(&docs, "# Reliability\n\nintro\n").unwrap();
        record(&docs, "faults", "Faults", "cmd --x", "passed", "| table |\n").unwrap();
        record(&docs, "crash", "Crash", "cmd --y", "FAILED", "| crash |").unwrap();
        let doc = std::fs::read_to_string(&docs).unwrap();
        let crash = doc.find("<!-- xtask-reliability:crash:begin -->").unwrap();
        let faults = doc.find("<!-- xtask-reliability:faults:begin -->").unwrap();
        assert!(doc.starts_with("# Reliability\n\nintro\n") && crash < faults, "{doc}");
        assert!(doc.contains(
            ": FAILED.\n\nCommand: `cmd --y` (from `cargo xtask reliability`).\n\n| crash |"
        ));
    }
}
