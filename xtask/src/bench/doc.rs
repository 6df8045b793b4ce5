//! A suite's section of `docs/benchmarks.md`: its text, and where it goes between the hand-written
//! parts of the page. Each suite owns the text between `<!-- xtask-bench:<suite>:begin -->` and
//! `<!-- xtask-bench:<suite>:end -->`; everything outside the markers is left as it is.

use std::fmt::Write as _;

use super::peer::PeerOutput;
use super::rate::Row;
use super::suite::{Runner, SUITES, Suite};
use crate::machine::Machine;
use crate::sections::Page;

/// The markers of the time there was one suite; [`Suite::owns_unnamed_markers`] says whose they
/// are.
const UNNAMED_MARKERS: (&str, &str) = ("<!-- xtask-bench:begin -->", "<!-- xtask-bench:end -->");

/// Everything one suite's section says.
#[derive(Debug)]
pub struct Section<'a> {
    /// The suite.
    pub suite: &'a Suite,
    /// Where and when.
    pub machine: &'a Machine,
    /// The `cargo xtask bench ...` command that wrote the section.
    pub command: &'a str,
    /// Whether the command only read earlier criterion results.
    pub report_only: bool,
    /// The criterion bench's command line, with its `STOWAGE_BENCH_DIR`.
    pub bench_line: &'a str,
    /// The peer's command line.
    pub peer_line: &'a str,
    /// The criterion rows (to say "not measured yet" when none has a result).
    pub benchmarks: &'a [Row],
    /// The rendered table.
    pub table: &'a str,
    /// What the peer printed, or why it did not run.
    pub peer: &'a Result<PeerOutput, String>,
}

impl Section<'_> {
    /// The markdown between the suite's markers: heading, machine, command, what the numbers
    /// measure, the table, and one line per peer rate.
    pub fn render(&self) -> String {
        let Section { suite, machine, .. } = self;
        let mut text = String::new();
        let _ = writeln!(text, "## {}\n", suite.heading);
        let python =
            machine.python.as_ref().map(|python| format!(", {python}")).unwrap_or_default();
        let script_only = suite.runner == Runner::PythonPackage;
        if self.benchmarks.iter().all(|row| row.measured.is_err()) {
            let what = if script_only {
                "there is no result of the Python script kept from an earlier run"
            } else {
                "there is no criterion result for any benchmark below"
            };
            let _ = writeln!(
                text,
                "Not measured yet: {what}; `cargo xtask bench` without `--report-only` measures \
                 them.\n"
            );
        } else {
            let _ = writeln!(
                text,
                "Measured {} on {} ({} cores available, {} memory), {}{python}.\n",
                machine.date, machine.cpu, machine.cores, machine.memory, machine.rustc
            );
        }
        if script_only && self.report_only {
            let _ = writeln!(
                text,
                "Command: `{}`, which reads what `{}` printed in an earlier run (after `{}`).\n",
                self.command, self.peer_line, self.bench_line
            );
        } else {
            let (bench_verb, peer_verb) = if self.report_only {
                ("reads the criterion results of an earlier", "runs")
            } else {
                ("runs", "then")
            };
            let _ = writeln!(
                text,
                "Command: `{}`, which {bench_verb} `{}` and {peer_verb} `{}`.\n",
                self.command, self.bench_line, self.peer_line
            );
        }
        let _ = writeln!(text, "{}\n", suite.description);
        text.push_str(self.table);
        for level in suite.levels {
            if let Some(Row { measured: Ok(_), .. }) =
                self.benchmarks.iter().find(|row| row.name == level.name)
            {
                let _ = writeln!(text, "\n`{}`: {}.", level.name, level.description);
            }
        }
        match self.peer {
            Ok(output) => {
                for (rate, measured) in suite.peer.rates.iter().zip(&output.rates) {
                    match (&measured.row.measured, measured.rows, measured.seconds) {
                        (Ok(_), Some(rows), Some(seconds)) => {
                            let _ = writeln!(
                                text,
                                "\n`{}`: {}, {rows} reads in {seconds:.2} s.",
                                rate.name, rate.description
                            );
                        }
                        (Ok(_), _, _) => {}
                        (Err(reason), _, _) => {
                            let _ = writeln!(text, "\n`{}` is missing: {reason}", rate.name);
                        }
                    }
                }
            }
            Err(reason) => {
                let names: Vec<String> =
                    suite.peer.rates.iter().map(|rate| format!("`{}`", rate.name)).collect();
                let verb = if names.len() == 1 { "is" } else { "are" };
                let _ = writeln!(text, "\n{} {verb} missing: {reason}", names.join(" and "));
            }
        }
        text
    }
}

/// The page's sections: `<!-- xtask-bench:<name>:begin -->`, numpy10 owning the unnamed markers.
fn page() -> Page<'static> {
    let owner = SUITES.iter().find(|suite| suite.owns_unnamed_markers).map(|suite| suite.name);
    Page { prefix: "xtask-bench", legacy: owner.map(|owner| (owner, UNNAMED_MARKERS)) }
}

/// `doc` with `suite`'s section replaced by `section`, between the suite's own markers (which
/// replace the unnamed ones it owns). A section not yet in `doc` goes before the first later suite's
/// section (in [`SUITES`] order), else at the end, after the hand-written text of the suites before
/// it.
pub fn replace_section(doc: &str, suite: &Suite, section: &str) -> String {
    let later: Vec<&str> = SUITES
        .iter()
        .skip_while(|other| other.name != suite.name)
        .skip(1)
        .map(|s| s.name)
        .collect();
    page().replace(doc, suite.name, &later, section)
}

/// `doc` with the section `name` replaced by `section` between its markers; a section not yet in
/// `doc` goes before the first section of `later` there is, else at the end.
pub fn replace_named_section(doc: &str, name: &str, later: &[&str], section: &str) -> String {
    page().replace(doc, name, later, section)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::peer::parse_output;
    use crate::bench::suite::{MEMMAP, NUMPY10, PYTHON};
    use crate::bench::table::fake::{missing, rows_per_second};
    use crate::bench::table::render_table;

    /// A machine with fixed facts, so the text can be compared whole.
    fn machine(python: Option<&str>) -> Machine {
        Machine {
            cpu: "Intel(R) Xeon(R) Processor".to_owned(),
            cores: 2,
            memory: "23.5 GiB".to_owned(),
            rustc: "rustc 1.95.0 (59807616e 2026-04-14)".to_owned(),
            python: python.map(str::to_owned),
            date: "2026-11-22 04:58 UTC".to_owned(),
        }
    }

    /// numpy10's section reads as it did when it was the only suite, word for word.
    #[test]
    fn numpy10_section_keeps_its_text() {
        let machine = machine(Some("Python 3.11.7, numpy 2.4.6, xxhash 4.1.0"));
        let peer = parse_output(
            &NUMPY10.peer,
            r#"{"python_slice_xxhash_rows_per_s": 325950.0, "rows": 200000, "seconds": 0.6136, "python": "3.11.7", "numpy": "2.4.6", "xxhash": "4.1.0"}"#,
        )
        .ok_or_else(String::new);
        let benchmarks = vec![rows_per_second("get_checksum", 1.11e6)];
        let section = Section {
            suite: &NUMPY10,
            machine: &machine,
            command: "cargo xtask bench",
            report_only: false,
            bench_line: "STOWAGE_BENCH_DIR=target/bench-data cargo bench -p stowage-npy --bench numpy10 -- --noplot",
            peer_line: "python3 xtask/py/numpy10_peer.py target/bench-data",
            benchmarks: &benchmarks,
            table: "| table |\n",
            peer: &peer,
        };
        assert_eq!(
            section.render(),
            "## numpy10: stowage-npy against the reference loops and hangar's read path\n\n\
             Measured 2026-11-22 04:58 UTC on Intel(R) Xeon(R) Processor (2 cores available, 23.5 GiB memory), rustc 1.95.0 (59807616e 2026-04-14), Python 3.11.7, numpy 2.4.6, xxhash 4.1.0.\n\n\
             Command: `cargo xtask bench`, which runs `STOWAGE_BENCH_DIR=target/bench-data cargo bench -p stowage-npy --bench numpy10 -- --noplot` and then `python3 xtask/py/numpy10_peer.py target/bench-data`.\n\n\
             Maps warm: the bench touches every page before timing. Rows not in the CPU cache: every read benchmark walks the same shuffled epoch over all rows, 1000 new rows per iteration.\n\n\
             | table |\n\
             \n`python_slice_xxhash`: hangar's read of one random record, `np.ascontiguousarray(mm[idx, :d0, ...])` then `xxhash.xxh64_hexdigest(a.tobytes())`, 200000 reads in 0.61 s.\n"
        );
    }

    /// memmap's section: machine, command, warm maps, the shuffled epoch, one line per peer rate,
    /// report-only ratios in its table.
    #[test]
    fn memmap_section_says_how_it_was_measured_and_describes_both_peer_rates() {
        let machine = machine(Some("Python 3.11.7, numpy 2.4.6"));
        let peer = parse_output(
            &MEMMAP.peer,
            r#"{"python_memmap_copy_rows_per_s": 4e5, "python_memmap_copy_dnanet_rows_per_s": 2e4, "rows": {"f32x512": 200000, "dnanet": 40000}, "seconds": {"f32x512": 0.5, "dnanet": 2.0}, "python": "3.11.7", "numpy": "2.4.6"}"#,
        )
        .ok_or_else(String::new);
        let benchmarks = vec![rows_per_second("get_checksum_dnanet", 3e4), missing("open")];
        let table = render_table(&benchmarks, MEMMAP.targets);
        let section = Section {
            suite: &MEMMAP,
            machine: &machine,
            command: "cargo xtask bench --suite memmap --report-only",
            report_only: true,
            bench_line: "STOWAGE_BENCH_DIR=target/bench-data/memmap cargo bench -p stowage-memmap --bench memmap_rows -- --noplot",
            peer_line: "python3 xtask/py/memmap_peer.py target/bench-data/memmap",
            benchmarks: &benchmarks,
            table: &table,
            peer: &peer,
        }
        .render();
        assert!(section.starts_with(
            "## memmap: stowage-memmap against the reference loops and DNANet's read path\n\n\
             Measured 2026-11-22 04:58 UTC on Intel(R) Xeon(R) Processor (2 cores available, 23.5 GiB memory), rustc 1.95.0 (59807616e 2026-04-14), Python 3.11.7, numpy 2.4.6.\n\n\
             Command: `cargo xtask bench --suite memmap --report-only`, which reads the criterion results of an earlier `STOWAGE_BENCH_DIR=target/bench-data/memmap cargo bench -p stowage-memmap --bench memmap_rows -- --noplot` and runs `python3 xtask/py/memmap_peer.py target/bench-data/memmap`.\n\n"
        ), "{section}");
        assert!(section.contains("Maps warm: the bench and the Python peer touch every page"));
        assert!(section.contains("walks a shuffled epoch over all rows"));
        assert!(section.contains("| first_get_after_open / open |  | missing |  | n/a |"));
        assert!(section.contains(
            "\n\n`python_memmap_copy`: DNANet's read of one row of `f32x512/` in shuffled order, \
             `np.array(mm[i])` for the `np.memmap` of every field's `.bin`, 200000 reads in 0.50 s.\n"
        ));
        assert!(section.ends_with(
            "\n\n`python_memmap_copy_dnanet`: the same read of one row of `dnanet/` (three \
             fields), 40000 reads in 2.00 s.\n"
        ));
    }

    /// No criterion result at all: the section does not claim a measurement; a peer that did not
    /// run names every rate it would have given.
    #[test]
    fn a_suite_without_results_says_so() {
        let machine = machine(None);
        let benchmarks = vec![missing("open"), missing("get_checksum")];
        let peer = Err("target/bench-data/memmap/f32x512/shapes.json does not exist".to_owned());
        let section = Section {
            suite: &MEMMAP,
            machine: &machine,
            command: "cargo xtask bench --report-only",
            report_only: true,
            bench_line: "bench",
            peer_line: "peer",
            benchmarks: &benchmarks,
            table: "| table |\n",
            peer: &peer,
        }
        .render();
        assert!(section.contains(
            "\n\nNot measured yet: there is no criterion result for any benchmark below; \
             `cargo xtask bench` without `--report-only` measures them.\n\n"
        ));
        assert!(!section.contains("Measured"));
        assert!(section.ends_with(
            "\n`python_memmap_copy` and `python_memmap_copy_dnanet` are missing: \
             target/bench-data/memmap/f32x512/shapes.json does not exist\n"
        ));
    }

    /// The text between a suite's markers is replaced and the rest kept; writing twice changes
    /// nothing more.
    #[test]
    fn section_between_markers_is_replaced_and_the_rest_kept() {
        let doc = "# Benchmarks\n\nintro\n\n<!-- xtask-bench:numpy10:begin -->\nold table\n\
                   <!-- xtask-bench:numpy10:end -->\n\nafter\n";
        let replaced = replace_section(doc, &NUMPY10, "new table\n");
        assert_eq!(
            replaced,
            "# Benchmarks\n\nintro\n\n<!-- xtask-bench:numpy10:begin -->\nnew table\n\
             <!-- xtask-bench:numpy10:end -->\n\nafter\n"
        );
        assert_eq!(replace_section(&replaced, &NUMPY10, "new table\n"), replaced);

        let appended = replace_section("# Benchmarks\n", &NUMPY10, "table");
        assert_eq!(
            appended,
            "# Benchmarks\n\n<!-- xtask-bench:numpy10:begin -->\ntable\n\
             <!-- xtask-bench:numpy10:end -->\n"
        );
    }

    /// The page as it was with one suite: numpy10 takes over the unnamed markers in place; memmap
    /// does not touch them and goes after numpy10's hand-written text.
    #[test]
    fn unnamed_markers_become_numpy10_markers_and_memmap_goes_after_its_text() {
        let doc = "# Benchmarks\n\nintro\n\n<!-- xtask-bench:begin -->\nold\n\
                   <!-- xtask-bench:end -->\n\n### Reading the numbers\n\n- notes\n";
        let memmap_first = replace_section(doc, &MEMMAP, "## memmap\n\nmemmap table\n");
        assert_eq!(
            memmap_first,
            "# Benchmarks\n\nintro\n\n<!-- xtask-bench:begin -->\nold\n\
             <!-- xtask-bench:end -->\n\n### Reading the numbers\n\n- notes\n\n\
             <!-- xtask-bench:memmap:begin -->\n## memmap\n\nmemmap table\n\
             <!-- xtask-bench:memmap:end -->\n"
        );
        let both = replace_section(&memmap_first, &NUMPY10, "## numpy10\n\nnew\n");
        assert_eq!(
            both,
            "# Benchmarks\n\nintro\n\n<!-- xtask-bench:numpy10:begin -->\n## numpy10\n\nnew\n\
             <!-- xtask-bench:numpy10:end -->\n\n### Reading the numbers\n\n- notes\n\n\
             <!-- xtask-bench:memmap:begin -->\n## memmap\n\nmemmap table\n\
             <!-- xtask-bench:memmap:end -->\n"
        );
        assert_eq!(replace_section(&both, &MEMMAP, "## memmap\n\nmemmap table\n"), both);
    }

    /// The overview's section goes before every suite's, including numpy10's unnamed markers,
    /// and is replaced in place afterwards.
    #[test]
    fn the_overview_goes_first_and_is_replaced_in_place() {
        let later: Vec<&str> = SUITES.iter().map(|suite| suite.name).collect();
        let doc = "# Benchmarks\n\nintro\n\n<!-- xtask-bench:begin -->\nold\n\
                   <!-- xtask-bench:end -->\n";
        let first = replace_named_section(doc, "overview", &later, "o1");
        assert_eq!(
            first,
            "# Benchmarks\n\nintro\n\n<!-- xtask-bench:overview:begin -->\no1\n\
             <!-- xtask-bench:overview:end -->\n\n<!-- xtask-bench:begin -->\nold\n\
             <!-- xtask-bench:end -->\n"
        );
        let again = replace_named_section(&first, "overview", &later, "o2");
        assert_eq!(again, first.replace("o1", "o2"));
    }

    /// A suite written before a later suite's section exists goes in front of it, so sections
    /// keep the order of the suites.
    #[test]
    fn a_new_section_goes_before_later_suites() {
        let doc = "# Benchmarks\n\n<!-- xtask-bench:memmap:begin -->\nm\n\
                   <!-- xtask-bench:memmap:end -->\n";
        assert_eq!(
            replace_section(doc, &NUMPY10, "n"),
            "# Benchmarks\n\n<!-- xtask-bench:numpy10:begin -->\nn\n\
             <!-- xtask-bench:numpy10:end -->\n\n<!-- xtask-bench:memmap:begin -->\nm\n\
             <!-- xtask-bench:memmap:end -->\n"
        );
    }

    /// The python suite's section: the build and the script on a real run, the kept line with
    /// `--report-only`, and its levels described under the table.
    #[test]
    fn python_section_names_the_build_and_the_script() {
        let machine = machine(Some("Python 3.11.7, numpy 2.4.6, stowage 0.1.0"));
        let peer = parse_output(
            &PYTHON.peer,
            r#"{"memmap_py_get_rows_per_s": 4e5, "rows": {"memmap_py_get": 10240}, "seconds": {"memmap_py_get": 0.0256}}"#,
        )
        .ok_or_else(String::new);
        let mut rows = vec![rows_per_second("memmap_py_get", 4e5)];
        rows.push(crate::bench::rate::Row {
            name: "memmap_get_overhead".to_owned(),
            measured: Ok(crate::bench::rate::Measured::level(
                0.5,
                crate::bench::rate::Unit::Microseconds,
            )),
        });
        let build = "VIRTUAL_ENV=target/py-venv target/py-venv/bin/maturin develop --release \
                     --manifest-path crates/stowage-py/Cargo.toml";
        let script = "target/py-venv/bin/python xtask/py/python_bench.py target/bench-data/python";
        let render = |report_only: bool, command: &str| {
            Section {
                suite: &PYTHON,
                machine: &machine,
                command,
                report_only,
                bench_line: build,
                peer_line: script,
                benchmarks: &rows,
                table: "| table |\n",
                peer: &peer,
            }
            .render()
        };
        let run = render(false, "cargo xtask bench --suite python");
        assert!(run.contains(&format!(
            "Command: `cargo xtask bench --suite python`, which runs `{build}` and then `{script}`."
        )));
        assert!(run.contains("Measured 2026-11-22 04:58 UTC on "));
        assert!(run.contains(
            "\n`memmap_get_overhead`: Python overhead per `get`: the median over get rounds"
        ));
        assert!(run.contains("\n`memmap_py_get`: a Python `for` loop of `cache.get(key)`"));
        assert!(run.contains(", 10240 reads in 0.03 s.\n"));
        let kept = render(true, "cargo xtask bench --suite python --report-only");
        assert!(kept.contains(&format!(
            "Command: `cargo xtask bench --suite python --report-only`, which reads what \
             `{script}` printed in an earlier run (after `{build}`)."
        )));
    }
}
