//! What the campaign binaries share on their command line (which backends, markdown or plain
//! output, where the caches go) and how they exit: 0 when every trial passed, 1 when one
//! failed, 2 when the campaign could not run.

use std::path::PathBuf;
use std::process::ExitCode;

/// The options every campaign binary has; `#[command(flatten)]` them into its own.
#[derive(clap::Args, Debug, Clone)]
pub struct CommonArgs {
    /// Backends to run, comma separated (default: all).
    #[arg(long, value_delimiter = ',')]
    pub backends: Vec<String>,
    /// Print markdown tables.
    #[arg(long)]
    pub markdown: bool,
    /// Directory for the caches (default: a temporary directory, removed afterwards).
    #[arg(long)]
    pub work_dir: Option<PathBuf>,
}

/// How the campaign was started, for its report: the program's file name and its arguments (the
/// hidden ones of a child never reach a report).
pub fn command_line() -> String {
    let mut args = std::env::args();
    let program = args.next().map(PathBuf::from);
    let name = program
        .as_ref()
        .and_then(|p| p.file_name())
        .map_or_else(String::new, |n| n.to_string_lossy().into_owned());
    std::iter::once(name).chain(args).collect::<Vec<_>>().join(" ")
}

/// The exit code of a campaign's outcome: `Ok(true)` 0, `Ok(false)` 1, an error (printed after
/// `program: `) 2.
pub fn exit_code(program: &str, outcome: Result<bool, String>) -> ExitCode {
    match outcome {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::from(1),
        Err(e) => {
            eprintln!("{program}: {e}");
            ExitCode::from(2)
        }
    }
}
