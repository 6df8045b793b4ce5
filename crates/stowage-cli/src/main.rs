#![doc = include_str!("../README.md")]
//! ## Code layout
//!
//! `main` parses the arguments (clap), dispatches to one module per subcommand (`inspect`,
//! `verify`, `keys`, `get`) and turns the outcome into an exit status: 0 success, 1 problems found
//! by `verify`, 2 any error. `detect` finds out what kind of cache a path is, `hangar` scans bare
//! hangar data directories, `npy_out` writes tensors as `.npy` files and `out` holds the shared
//! output helpers.
#![deny(missing_docs)]

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{ArgGroup, Args, Parser, Subcommand};

/// `say!(out, "...", args)`: one line to the command's output; a write error becomes a
/// [`error::CliError`] returned from the enclosing function.
macro_rules! say {
    ($out:expr, $($arg:tt)*) => {
        writeln!($out, $($arg)*).map_err($crate::error::CliError::stdout)?
    };
}

mod detect;
mod error;
mod get;
mod hangar;
mod inspect;
mod keys;
mod npy_out;
mod out;
mod verify;

use error::{CliError, EXIT_ERROR, Status};

const EXIT_STATUS: &str = "\
Exit status:
  0  success
  1  verify found problems
  2  error: bad arguments, a path that cannot be read or is not a cache, a missing key,
     corrupted data that get refuses to return";

const MAIN_EXAMPLES: &str = "\
Examples:
  stowage inspect ./cache
  stowage verify ./cache
  stowage keys ./cache | head
  stowage get ./cache sample-0 --out ./sample-0
  stowage get ./hangar-repo --record '10:4ujrcb35:fd40def8890c87db:3:10 10' --out fx013.npy

Caches it reads: stowage NUMPY_10 caches (a directory with stowage.json, format stowage-npy),
bare hangar NUMPY_10 data directories (data/10/*.npy, records kept in hangar's LMDB), memmap
row caches written by stowage (stowage.json, format dnanet-memmap-row) or by DNANet (finished
or half-built), and DNANet cache roots (a directory of memmap caches; inspect only).";

/// The parsed command line.
#[derive(Debug, Parser)]
#[command(
    name = "stowage",
    version,
    about = "Inspect, verify, list and extract samples of ML sample caches",
    after_help = format!("{MAIN_EXAMPLES}\n\n{EXIT_STATUS}"),
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

const INSPECT_HELP: &str = "\
Examples:
  stowage inspect ./cache
  stowage inspect ./cache_root        (every memmap cache in it)

Prints the cache's format and version, whether it is finalized, the number of keys, the schema
(each field's name, dtype and shape rule), the size of every file and the total, and the result
of a structure check: clean, or N problems. For a bare hangar data directory it lists each
collection file with its dtype, shape, marker state (committed, staged, unmarked) and size.
Exits 0 whenever the cache could be read, even when it has problems: judging is verify's job.

For a memmap row cache (stowage's or DNANet's) it prints what DNANet's own inspection tool
prints (complete marker, rows, file sizes in MB, index columns and their string RAM, sidecar
sizes, projected in-memory realization), then stowage's lines: other files, an unfinished
cache's committed rows and torn tail, and the integrity check. For a directory of memmap
caches it reports each key directory. When a file cannot be read, the report is printed and
the command fails with one line naming the file.";

const VERIFY_HELP: &str = "\
Example:
  stowage verify ./cache && echo intact

Opens the cache read-only, checks its structure and recomputes every sample's checksum. Prints
each problem on its own line (file: key: detail), then a summary line:
  N samples, M files checked: clean        (exit 0)
  N samples, M files checked: K problems   (exit 1)
A cache that cannot be opened at all is an error (exit 2) naming the file. For a bare hangar
data directory it checks each collection file's header and size, and that every marker has
its data file (without records there are no checksums to check).";

const KEYS_HELP: &str = "\
Example:
  stowage keys ./cache > keys.txt

Keys are printed in the order they were first stored. A key is printed as it is, unless it
contains a control character (newline, tab, escape...) or starts with a double quote: then it
is printed escaped and quoted as Rust's {:?} prints a string (\"line\\nbreak\"). So every key
is exactly one line, and a line starting with \" is always an escaped key.";

const GET_HELP: &str = "\
Examples:
  stowage get ./cache sample-0 --out ./sample-0
  stowage get --out ./odd ./cache -- -key-starting-with-a-dash
  stowage get ./hangar-repo --record '10:4ujrcb35:fd40def8890c87db:3:10 10' --out fx013.npy

With KEY, creates DIR if needed and writes each field of the sample:
  tensor fields  DIR/FIELD.npy   numpy format 1.0, C order, the tensor's own shape
                                 (bfloat16, which numpy lacks, as <u2, with a note)
  bytes fields   DIR/FIELD.bin
  JSON fields    DIR/FIELD.json
  null fields    skipped, with a note
Files already there are replaced. A field name that is not a safe file name (empty, . or ..,
a path separator or a control character) is refused, and then nothing is written.

With --record, reads the sample a NUMPY_10 record string addresses in PATH/data/10/UID.npy
(PATH is a hangar data directory, or a stowage NUMPY_10 cache), verifies its xxh64 checksum
and writes it to FILE.npy. A corrupted sample is an error naming the file, the record and both
digests, and nothing is written.";

/// The subcommands.
#[derive(Debug, Subcommand)]
enum Command {
    /// Show what kind of cache PATH is: format, state, keys, schema, files and sizes, integrity
    #[command(after_help = format!("{INSPECT_HELP}\n\n{EXIT_STATUS}"))]
    Inspect {
        /// The cache directory, or a directory of memmap row caches
        path: PathBuf,
    },

    /// Check every file and every sample checksum; list each problem
    #[command(after_help = format!("{VERIFY_HELP}\n\n{EXIT_STATUS}"))]
    Verify {
        /// The cache directory
        path: PathBuf,
    },

    /// Print every key, one per line
    #[command(after_help = format!("{KEYS_HELP}\n\n{EXIT_STATUS}"))]
    Keys {
        /// The cache directory
        path: PathBuf,
    },

    /// Write one sample as .npy files (by key from a cache, or by NUMPY_10 record)
    Get(GetArgs),
}

/// Arguments of `stowage get`.
#[derive(Debug, Args)]
#[command(
    group(ArgGroup::new("sample").required(true).args(["key", "record"])),
    override_usage = "stowage get PATH KEY --out DIR\n       stowage get PATH --record RECORD --out FILE.npy",
    after_help = format!("{GET_HELP}\n\n{EXIT_STATUS}"),
)]
struct GetArgs {
    /// The cache directory (with KEY), or a directory holding data/10/UID.npy (with --record)
    path: PathBuf,

    /// The key of the sample to write
    key: Option<String>,

    /// A NUMPY_10 record string, 10:UID:XXH64:SLOT:SHAPE, instead of a key
    #[arg(long, value_name = "RECORD", conflicts_with = "key")]
    record: Option<String>,

    /// Where to write: a directory (with KEY) or the .npy file (with --record)
    #[arg(long, short, value_name = "DIR|FILE.npy")]
    out: PathBuf,
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => return argument_error(&e),
    };
    let mut out = out::Output::stdout();
    let result = run(cli.command, &mut out);
    // Whatever was printed goes out before an error line, so the two never interleave.
    let flushed = out.flush().map_err(CliError::stdout);
    match result.and_then(|status| flushed.map(|()| status)) {
        Ok(status) => status.exit_code(),
        Err(e) => fail(&e.one_line()),
    }
}

fn run(command: Command, out: &mut dyn Write) -> Result<Status, CliError> {
    match command {
        Command::Inspect { path } => inspect::run(&path, out),
        Command::Verify { path } => verify::run(&path, out),
        Command::Keys { path } => keys::run(&path, out),
        Command::Get(args) => match (&args.key, &args.record) {
            (Some(key), None) => get::by_key(&args.path, key, &args.out, out),
            (None, Some(record)) => get::by_record(&args.path, record, &args.out, out),
            // clap's argument group enforces exactly one.
            _ => Err(CliError::new("get needs either KEY or --record RECORD, not both")),
        },
    }
}

/// Prints `stowage: error: <line>` and returns exit status 2.
fn fail(line: &str) -> ExitCode {
    let _ = std::io::stderr().lock().write_all(format!("stowage: error: {line}\n").as_bytes());
    ExitCode::from(EXIT_ERROR)
}

/// `--help` and `--version` print and succeed; every other clap error becomes one line.
fn argument_error(e: &clap::Error) -> ExitCode {
    use clap::error::ErrorKind;
    match e.kind() {
        ErrorKind::DisplayHelp | ErrorKind::DisplayVersion => {
            let _ = e.print();
            ExitCode::SUCCESS
        }
        ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand | ErrorKind::MissingSubcommand => {
            fail("no command given: use one of inspect, verify, keys, get (see `stowage --help`)")
        }
        _ => fail(&error::escape_control(&clap_error_line(&e.to_string()))),
    }
}

/// clap's multi-line error text as one line: the message, its continuation lines (such as the
/// missing argument names) and any tip, then the usage.
fn clap_error_line(text: &str) -> String {
    let mut message = Vec::new();
    let mut usage: Vec<&str> = Vec::new();
    for line in text.lines().map(str::trim).filter(|l| !l.is_empty()) {
        if let Some(u) = line.strip_prefix("Usage:") {
            usage.push(u.trim());
        } else if line.starts_with("For more information") {
            break;
        } else if !usage.is_empty() {
            usage.push(line); // a second usage form
        } else if let Some(tip) = line.strip_prefix("tip:") {
            message.push(format!("(tip: {})", tip.trim()));
        } else {
            message.push(line.strip_prefix("error:").unwrap_or(line).trim().to_owned());
        }
    }
    let mut line = message.join(" ");
    if !usage.is_empty() {
        line.push_str(&format!(" (usage: {}; see --help)", usage.join(" | ")));
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clap_errors_become_one_line() {
        let text = "error: the following required arguments were not provided:\n  <PATH>\n\n\
                    Usage: stowage inspect <PATH>\n\nFor more information, try '--help'.\n";
        assert_eq!(
            clap_error_line(text),
            "the following required arguments were not provided: <PATH> (usage: stowage inspect \
             <PATH>; see --help)"
        );
        let two_forms = "error: the following required arguments were not provided:\n  --out <DIR>\n\n\
                         Usage: stowage get PATH KEY --out DIR\n       stowage get PATH --record R\n\n\
                         For more information, try '--help'.\n";
        assert_eq!(
            clap_error_line(two_forms),
            "the following required arguments were not provided: --out <DIR> (usage: stowage get \
             PATH KEY --out DIR | stowage get PATH --record R; see --help)"
        );
    }

    #[test]
    fn the_command_line_definition_is_consistent() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
    }
}
