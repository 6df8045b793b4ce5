//! The overview `cargo xtask bench` runs first: `stowage bench` with the default workloads
//! (100,000 `float32[512]` samples, a DNANet-shaped and a ragged aenet-shaped one) through every
//! backend, with the Python peers when Python and their packages are there, recorded in its own
//! section at the top of `docs/benchmarks.md`. It answers "which backend fits my workload?"; the
//! suites after it hold each backend to its own targets.

use std::fmt::Write as _;
use std::path::Path;

use super::doc::replace_named_section;
use super::shown_path;
use super::suite::SUITES;
use crate::machine::Machine;
use crate::prerequisites::{self, PREREQUISITES, Prerequisite};
use crate::{cargo, run_for_markdown};

/// The name `--suite` selects and the section's markers carry.
pub const NAME: &str = "overview";

/// The workloads, in `stowage bench`'s `--workload` spelling.
const WORKLOADS: [&str; 3] = ["flat", "dnanet", "aenet"];

/// The Python packages the peers import.
const PEER_PACKAGES: [&str; 5] = ["numpy", "xxhash", "pyarrow", "h5py", "tables"];

/// Builds and runs `stowage bench` into `bench_data`, then writes its section of the docs at
/// `docs`. With `report_only` it is skipped (saying so): it keeps no results between runs.
pub fn run(root: &Path, bench_data: &Path, docs: &Path, report_only: bool) -> Result<(), String> {
    if report_only {
        println!("xtask: overview: skipped with --report-only (it keeps no results between runs)");
        return Ok(());
    }
    let peers = peer_packages();
    let mut command = cargo();
    command.args(["run", "--release", "--quiet", "-p", "stowage-cli", "--bin", "stowage", "--"]);
    command.arg("bench");
    for workload in WORKLOADS {
        command.args(["--workload", workload]);
    }
    command.args(["--format", "markdown", "--dir"]).arg(bench_data);
    if peers.is_ok() {
        command.arg("--peers");
    }
    let (markdown, exit, line) = run_for_markdown(&mut command)?;
    // Exit 1 is a backend that failed its verification: still recorded, then reported.
    let status = exit.code();
    if !matches!(status, Some(0 | 1)) {
        return Err(format!("`{line}` failed ({exit})"));
    }
    let machine = Machine::detect(prerequisites::python_version().ok());
    let shown = line.replace(&bench_data.display().to_string(), &shown_path(root, bench_data));
    let section = render(&machine, &shown, &markdown, peers.err());
    let old = std::fs::read_to_string(docs).unwrap_or_else(|_| "# Benchmarks\n".to_owned());
    let later: Vec<&str> = SUITES.iter().map(|suite| suite.name).collect();
    std::fs::write(docs, replace_named_section(&old, NAME, &later, &section))
        .map_err(|e| format!("cannot write {}: {e}", docs.display()))?;
    println!("xtask: overview: wrote its section of {}", shown_path(root, docs));
    match status {
        Some(0) => Ok(()),
        _ => Err("a backend failed its verification (see FAILED in the table)".into()),
    }
}

/// The peers' packages, installed when missing; the reason when they cannot be.
fn peer_packages() -> Result<(), String> {
    let wanted: Vec<Prerequisite> = PREREQUISITES
        .iter()
        .filter(|p| PEER_PACKAGES.contains(&p.package))
        .map(|p| Prerequisite { needed_for: "the benchmark's Python peers", ..*p })
        .collect();
    prerequisites::ensure(&wanted)
}

/// The section: heading, machine, command, what the columns mean, `stowage bench`'s tables.
fn render(machine: &Machine, command: &str, tables: &str, no_peers: Option<String>) -> String {
    let mut text =
        String::from("## overview: every backend on the same workloads (`stowage bench`)\n\n");
    let python = machine.python.as_ref().map(|p| format!(", {p}")).unwrap_or_default();
    let _ = writeln!(
        text,
        "Measured {} on {} ({} cores available, {} memory), {}{python}.\n",
        machine.date, machine.cpu, machine.cores, machine.memory, machine.rustc
    );
    let _ =
        writeln!(text, "Command: `cargo xtask bench` (its first step), which runs `{command}`.\n");
    text.push_str(
        "Each backend gets the same generated samples: writes put every sample with a durable \
         flush every 2,048 and finalize; the cache is then checked (`validate` at full level and \
         every sample read back equal) before anything is timed, which also warms its maps. Reads \
         walk one shuffled epoch over the samples (at most 200,000), the same order for every \
         backend, the physical reference and the peers. In parentheses: the fraction of the \
         physical reference on the same bytes in the same run (writes against writing them to \
         one file with an fdatasync every 2,048 rows; reads against copying them out of a warm \
         map in the same order). A backend that cannot hold a workload's schema says why under \
         its table.\n\n",
    );
    if let Some(why) = no_peers {
        let _ = writeln!(text, "The Python peers did not run: {why}\n");
    }
    text.push_str(tables.trim_end());
    text.push('\n');
    text
}
