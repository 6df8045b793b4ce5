#![doc = include_str!("../README.md")]
//! ## Code layout
//!
//! The crate is a library and a thin binary (`src/main.rs`): [`run`] parses the arguments
//! (`command_line`, clap), dispatches to one module per subcommand (`inspect`, `verify`,
//! `adopt`, `keys`, `get`, `convert`, `bench`, `explain`) and turns the outcome into an exit
//! status: 0 success, 1 problems found, 2 any error, 3 cannot tell (`explain`: no fingerprint;
//! `verify`: data no checksum covers). Every cache is recognized and opened through the
//! [`Registry`] it is given ([`default_registry`] in the `stowage` binary): `locate` finds out
//! what a path is (a registered format, or a directory of caches; a URL is asked only of the
//! backends serving its scheme and never touches the local file system), `walk` finds the caches
//! below a directory, `open` opens one read-only; `builtin` names the four built-in backends' formats,
//! for the commands about one original tool's format (`adopt`, `explain`, `convert`'s carried
//! options); `inspect` renders what every format describes of itself and `verify` runs the checks
//! every format plans for its own caches.
//! `npy_out` writes tensors as `.npy` files and `out` holds the shared output helpers; `bench` is
//! a module tree of its own.
#![deny(missing_docs)]

use std::ffi::OsString;
use std::io::Write;

use clap::FromArgMatches;
use stowage_core::Registry;

/// `say!(out, "...", args)`: one line to the command's output; a write error becomes a
/// [`error::CliError`] returned from the enclosing function.
macro_rules! say {
    ($out:expr, $($arg:tt)*) => {
        writeln!($out, $($arg)*).map_err($crate::error::CliError::stdout)?
    };
}

mod adopt;
mod bench;
mod builtin;
mod command_line;
mod compact;
mod convert;
mod convert_record;
mod error;
mod explain;
mod get;
mod inspect;
mod keys;
mod locate;
mod npy_out;
mod open;
mod out;
mod phase_trace;
mod verify;
mod walk;

use command_line::{BenchArgs, BenchFormat, Cli, Command, WorkloadName};
use error::{CliError, Status};

pub use error::{EXIT_CANNOT_TELL, EXIT_ERROR, EXIT_PROBLEMS};

/// The backends the `stowage` command is built with: NUMPY_10 (`npy`), memmap rows (`memmap`),
/// Arrow segments (`arrow`) and HDF5 (`hdf5`), each reading its own caches and its original
/// tool's; and caches on object storage (`remote`: `s3://`, `gs://`, `az://`, `file://`,
/// `memory://` URLs, and local directories written in that layout).
///
/// They are asked in this order. A stowage cache names its format in its marker, so the order
/// only matters for the original tools' layouts, which are probed in the order the command always
/// probed them: DNANet's memmap files, then torchcachex's segments, then hangar's `data/10`, then
/// aenet's HDF5 files. A third party's `stowage` adds its own factory after them
/// ([`Registry::with`]).
///
/// ```
/// let registry = stowage_cli::default_registry();
/// let names: Vec<&str> = registry.factories().map(|f| f.name()).collect();
/// assert_eq!(names, ["memmap", "arrow", "npy", "hdf5", "remote"]);
/// ```
pub fn default_registry() -> Registry {
    registry_checking_reads(true)
}

/// [`default_registry`], with the per-read checksum checks of the backends that can skip them
/// (memmap, arrow, npy) on or off: `false` is for a reader that trusts its files and wants the
/// last few percent (the Python package's `checks=False`). `validate` always checks; hdf5 and
/// remote caches always check their reads.
///
/// ```
/// let registry = stowage_cli::registry_checking_reads(false);
/// let names: Vec<&str> = registry.factories().map(|f| f.name()).collect();
/// assert_eq!(names, ["memmap", "arrow", "npy", "hdf5", "remote"]);
/// ```
pub fn registry_checking_reads(verify_checksums: bool) -> Registry {
    use stowage_arrow::{ArrowFactory, ArrowOptions};
    use stowage_memmap::{MemmapFactory, MemmapOptions};
    use stowage_npy::{NpyFactory, NpyOptions};
    Registry::new()
        .with(MemmapFactory { options: MemmapOptions { verify_checksums, ..Default::default() } })
        .with(ArrowFactory { options: ArrowOptions { verify_checksums, ..Default::default() } })
        .with(NpyFactory { options: NpyOptions { verify_checksums, ..Default::default() } })
        .with(stowage_hdf5::Hdf5Factory)
        .with(stowage_remote::RemoteFactory::default())
}

/// Runs the `stowage` command line `args` (the program name first, as
/// [`std::env::args_os`] gives it) on the caches `registry` reads, writing results to `stdout`
/// and errors and notes to `stderr`, and returns the exit status: 0 success, 1 problems found
/// ([`EXIT_PROBLEMS`]), 2 an error ([`EXIT_ERROR`]), 3 cannot tell ([`EXIT_CANNOT_TELL`]).
///
/// Every error is one line, `stowage: error: <what>`, on `stderr`. A `stdout` that goes away
/// (a closed pipe) is not an error: the rest of the output is dropped. Progress bars are drawn
/// on the process's standard error only when it is a terminal.
///
/// ```
/// let (mut out, mut err) = (Vec::new(), Vec::new());
/// let args = ["stowage", "keys", "/definitely/not/here"].map(std::ffi::OsString::from).to_vec();
/// let status = stowage_cli::run(&stowage_cli::default_registry(), args, &mut out, &mut err);
/// assert_eq!(status, stowage_cli::EXIT_ERROR);
/// assert!(String::from_utf8(err)?.starts_with("stowage: error: /definitely/not/here"));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub fn run(
    registry: &Registry,
    args: Vec<OsString>,
    stdout: &mut dyn Write,
    stderr: &mut dyn Write,
) -> u8 {
    let parsed = command_line::command(registry)
        .try_get_matches_from(args)
        .and_then(|matches| Cli::from_arg_matches(&matches));
    let cli = match parsed {
        Ok(cli) => cli,
        Err(e) => return argument_error(&e, stdout, stderr),
    };
    let mut out = out::Output::new(stdout);
    let result = dispatch(registry, cli.command, &mut out, stderr);
    // Whatever was printed goes out before an error line, so the two never interleave.
    let flushed = out.flush().map_err(CliError::stdout);
    match result.and_then(|status| flushed.map(|()| status)) {
        Ok(status) => status.code(),
        Err(e) => fail(stderr, &e.one_line()),
    }
}

/// Runs one subcommand.
fn dispatch(
    registry: &Registry,
    command: Command,
    out: &mut dyn Write,
    notes: &mut dyn Write,
) -> Result<Status, CliError> {
    match command {
        Command::Inspect { path, json } => inspect::run(registry, &path, json, out),
        Command::Verify { path, sample, seed, jobs } => {
            let jobs = jobs.map_or_else(command_line::available_cores, |n| n as usize);
            let options = verify::VerifyOptions { sample, seed, jobs };
            verify::run(registry, &path, options, out, notes)
        }
        Command::Adopt { path } => adopt::run(registry, &path, out),
        Command::Compact { path, below } => compact::run(registry, &path, below, out),
        Command::Keys { path } => keys::run(registry, &path, out),
        Command::Get(args) => match (&args.key, &args.record) {
            (Some(key), None) => get::by_key(registry, &args.path, key, &args.out, out, notes),
            (None, Some(record)) => get::by_record(&args.path, record, &args.out, out),
            // clap's argument group enforces exactly one.
            _ => Err(CliError::new("get needs either KEY or --record RECORD, not both")),
        },
        Command::Convert { src, dst, to, verify, merge, flush_every } => {
            let flush_every = flush_every as usize;
            let options = convert::ConvertOptions { target: to, verify, flush_every, merge };
            convert::run(registry, &src, &dst, &options, out, notes)
        }
        Command::Bench(args) => run_bench(args, out, notes),
        Command::Explain { path, config, sources, root } => {
            explain::run(registry, &path, &config, sources.as_deref(), root.as_deref(), out, notes)
        }
    }
}

/// `stowage bench`: builds the plan, runs it with progress lines on `progress_out`, prints the
/// report. It measures the four built-in backends, each created with its own options.
fn run_bench(
    args: BenchArgs,
    out: &mut dyn Write,
    progress_out: &mut dyn Write,
) -> Result<Status, CliError> {
    use bench::workload::Workload;
    if args.scale {
        let (text, all_ran) = bench::scale::run_command(&args, &mut |line: &str| {
            let _ = writeln!(progress_out, "stowage bench: {line}");
        })
        .map_err(CliError::new)?;
        say!(out, "{}", text.trim_end());
        return Ok(if all_ran { Status::Success } else { Status::ProblemsFound });
    }
    let rows = |default: usize| args.rows.map_or(default, |n| n as usize);
    let names = if args.workload.is_empty() { vec![WorkloadName::Flat] } else { args.workload };
    let workloads = names
        .into_iter()
        .map(|name| match name {
            WorkloadName::Flat => Workload::flat(rows(100_000), args.dtype, args.shape.clone()),
            WorkloadName::Dnanet => Workload::dnanet(rows(5_000)),
            WorkloadName::Aenet => Workload::aenet(rows(10_000)),
        })
        .collect();
    let backends =
        if args.backends.is_empty() { bench::subject::Kind::ALL.to_vec() } else { args.backends };
    let (dir, temporary) = match args.dir {
        Some(dir) => (dir, false),
        None => (std::env::temp_dir().join(format!("stowage-bench-{}", std::process::id())), true),
    };
    let plan = bench::BenchPlan {
        workloads,
        backends,
        peers: args.peers,
        dir: dir.clone(),
        keep: args.keep,
    };
    let mut progress = |line: &str| {
        let _ = writeln!(progress_out, "stowage bench: {line}");
    };
    let report = bench::run(&plan, &mut progress).map_err(CliError::new);
    if temporary && !args.keep {
        let _ = std::fs::remove_dir_all(&dir);
    }
    let report = report?;
    let text = match args.format {
        BenchFormat::Table => report.to_table(),
        BenchFormat::Markdown => report.to_markdown(),
        BenchFormat::Json => report.to_json(),
    };
    say!(out, "{}", text.trim_end());
    Ok(if report.all_verified() { Status::Success } else { Status::ProblemsFound })
}

/// Writes `stowage: error: <line>` to `stderr` and returns exit status 2.
fn fail(stderr: &mut dyn Write, line: &str) -> u8 {
    let _ = stderr.write_all(format!("stowage: error: {line}\n").as_bytes());
    let _ = stderr.flush();
    EXIT_ERROR
}

/// `--help` and `--version` print to `stdout` and succeed; every other clap error becomes one
/// line on `stderr`.
fn argument_error(e: &clap::Error, stdout: &mut dyn Write, stderr: &mut dyn Write) -> u8 {
    use clap::error::ErrorKind;
    match e.kind() {
        ErrorKind::DisplayHelp | ErrorKind::DisplayVersion => {
            let text = e.render().to_string();
            let _ = writeln!(stdout, "{}", text.trim_end());
            let _ = stdout.flush();
            0
        }
        ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand | ErrorKind::MissingSubcommand => fail(
            stderr,
            "no command given: use one of inspect, verify, adopt, keys, get, convert, bench, explain (see `stowage --help`)",
        ),
        _ => fail(stderr, &error::escape_control(&command_line::clap_error_line(&e.to_string()))),
    }
}
