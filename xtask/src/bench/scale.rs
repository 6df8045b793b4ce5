//! The opt-in `scale` suite (`cargo xtask bench --suite scale`): `stowage bench --scale` over
//! every backend at 100 thousand to 100 million keys of a 16-byte row, recorded in its own
//! section at the end of `docs/benchmarks.md`. Not part of the default `cargo xtask bench`: the
//! full run writes caches of up to 100 million keys (about 19 GB for arrow's). It is not a
//! [`Suite`](super::suite::Suite): it has no criterion bench and no Python peer; its tables and
//! PASS/FAIL verdicts come from `stowage bench --scale` itself.

use std::fmt::Write as _;
use std::path::Path;

use super::doc::replace_named_section;
use super::shown_path;
use crate::machine::Machine;
use crate::{cargo, run_for_markdown};

/// The name `--suite` selects and the section's markers carry.
pub const NAME: &str = "scale";

/// What `cargo xtask bench --suite scale` passes on to `stowage bench --scale`, as given.
#[derive(Debug, Default)]
pub struct Chosen<'a> {
    /// `--sizes`.
    pub sizes: Option<&'a str>,
    /// `--backends`.
    pub backends: Option<&'a str>,
}

/// Builds and runs `stowage bench --scale` into `bench_data` (with `chosen`'s `--sizes` and
/// `--backends` when given), writes its section of `docs` recording `command` as what ran, then
/// removes `bench_data`. With `report_only` it is skipped
/// (saying so): it keeps no results between runs.
///
/// Errors: the command could not run or exited other than 0 or 1 (nothing is written), or a
/// backend failed at some size (the section is written, then the error says so).
pub fn run(
    root: &Path,
    bench_data: &Path,
    docs: &Path,
    chosen: &Chosen,
    command_line: &str,
    report_only: bool,
) -> Result<(), String> {
    if report_only {
        println!("xtask: scale: skipped with --report-only (it keeps no results between runs)");
        return Ok(());
    }
    let mut command = cargo();
    command.args(["run", "--release", "--quiet", "-p", "stowage-cli", "--bin", "stowage", "--"]);
    // The whole machine's page cache too (as root): the bench owns the machine while it runs.
    command.args(["bench", "--scale", "--drop-caches"]);
    if let Some(sizes) = chosen.sizes {
        command.args(["--sizes", sizes]);
    }
    if let Some(backends) = chosen.backends {
        command.args(["--backends", backends]);
    }
    command.args(["--format", "markdown", "--dir"]).arg(bench_data);
    let outcome = run_for_markdown(&mut command);
    let _ = std::fs::remove_dir_all(bench_data);
    let (markdown, exit, line) = outcome?;
    let status = exit.code();
    if !matches!(status, Some(0 | 1)) {
        return Err(format!("`{line}` failed ({exit})"));
    }
    let machine = Machine::detect(None);
    let shown = line.replace(&bench_data.display().to_string(), &shown_path(root, bench_data));
    let section = render(&machine, command_line, &shown, &markdown);
    let old = std::fs::read_to_string(docs).unwrap_or_else(|_| "# Benchmarks\n".to_owned());
    std::fs::write(docs, replace_named_section(&old, NAME, &[], &section))
        .map_err(|e| format!("cannot write {}: {e}", docs.display()))?;
    println!("xtask: scale: wrote its section of {}", shown_path(root, docs));
    match status {
        Some(0) => Ok(()),
        _ => Err("a backend failed at some size (see FAILED in the section)".into()),
    }
}

/// The section: heading, machine, command, what the run needs, then `stowage bench --scale`'s
/// text and tables.
fn render(machine: &Machine, command: &str, stowage_line: &str, tables: &str) -> String {
    let mut text = String::from(
        "## scale: every backend from 100 thousand to 100 million keys (`stowage bench --scale`)\n\n",
    );
    let _ = writeln!(
        text,
        "Measured {} on {} ({} cores available, {} memory), {}.\n",
        machine.date, machine.cpu, machine.cores, machine.memory, machine.rustc
    );
    let _ = writeln!(text, "Command: `{command}`, which runs `{stowage_line}`.\n");
    text.push_str(
        "Opt-in: the default `cargo xtask bench` does not run it. Without `--sizes` it runs \
         100k, 1m and 10m keys for every backend and 100m for memmap and arrow; before it starts \
         it writes a 20,000-key probe cache per backend and refuses when the largest cache \
         (bytes per key x 1.5) plus 15 GB to keep free do not fit on the disk. Each cache is \
         removed as soon as it is measured, and the bench data directory after the run. Maps \
         are warm for the warm reads and the raw copy, cold (page cache dropped, as said below) \
         for the cold reads and the pread references.\n\n",
    );
    text.push_str(tables.trim_end());
    text.push('\n');
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The section says it is opt-in, names the commands and keeps the tables.
    #[test]
    fn the_section_names_the_commands_and_keeps_the_tables() {
        let machine = Machine {
            cpu: "cpu".into(),
            cores: 2,
            memory: "1 GiB".into(),
            rustc: "rustc".into(),
            python: None,
            date: "today".into(),
        };
        let text = render(
            &machine,
            "cargo xtask bench --suite scale",
            "stowage bench --scale",
            "| a |\n\n",
        );
        assert!(text.starts_with("## scale: "));
        assert!(text.contains(
            "Command: `cargo xtask bench --suite scale`, which runs `stowage bench --scale`."
        ));
        assert!(text.contains("Opt-in: the default `cargo xtask bench` does not run it."));
        assert!(text.ends_with("| a |\n"));
    }

    /// Report-only writes nothing and runs nothing.
    #[test]
    fn report_only_skips_it() {
        let dir = tempfile::tempdir().unwrap();
        let docs = dir.path().join("benchmarks.md");
        let chosen = Chosen::default();
        run(dir.path(), &dir.path().join("data"), &docs, &chosen, "cargo xtask bench", true)
            .unwrap();
        assert!(!docs.exists());
    }
}
