//! `cargo xtask bench`: every benchmark suite of [`suite::SUITES`] in order, each its criterion
//! bench, its Python peer (the original tool's read path on the same data) and the table of rates
//! and target ratios that its own section of `docs/benchmarks.md` records.
//!
//! The modules, one concept each: [`overview`] the first step (`stowage bench` over every
//! backend), [`scale`] the opt-in last step (`stowage bench --scale`, every backend from 100
//! thousand to 100 million keys), [`suite`] what the suites are (data only), [`criterion`] reading criterion's
//! results, [`levels`] the bench's other measurements, [`peer`] running a Python peer, [`rate`]
//! the measured rates all become, [`table`] the table and its verdicts, [`doc`] a suite's section
//! and its place in `docs/benchmarks.md`, [`s3`] the S3 server of the suites that read object
//! storage, [`python_package`] the release build of the Python package the python suite
//! measures (its script measures everything; no criterion bench). This file is the run loop.

mod criterion;
mod doc;
mod levels;
mod overview;
mod peer;
mod python_package;
mod rate;
mod s3;
mod scale;
mod suite;
mod table;

use std::path::{Path, PathBuf};

use self::doc::{Section, replace_section};
pub use self::suite::SUITES;
use self::suite::{Runner, Suite};
use crate::machine::Machine;
use crate::{cargo, display_command, target_dir, workspace_root};

/// What `cargo xtask bench` was asked to do.
#[derive(Debug)]
pub struct Options {
    /// Run the overview (`stowage bench` over every backend) first.
    overview: bool,
    /// The suites to run, in [`SUITES`] order.
    suites: Vec<&'static Suite>,
    /// Report the last criterion results instead of running the benches.
    report_only: bool,
    /// Run the opt-in scale suite last (only when `--suite scale` names it).
    scale: bool,
    /// The scale suite's `--sizes`, as given.
    sizes: Option<String>,
    /// The scale suite's `--backends`, as given.
    backends: Option<String>,
}

impl Options {
    /// Parses `[--suite NAME]... [--report-only] [--sizes LIST]` in any order; no `--suite`
    /// means the overview and every suite of [`SUITES`] (`--suite overview` names the overview;
    /// the scale suite runs only when `--suite scale` names it, `--sizes` only with it).
    pub fn parse(args: &[String]) -> Result<Options, String> {
        let mut report_only = false;
        let mut chosen: Vec<&str> = Vec::new();
        let mut sizes = None;
        let mut backends = None;
        let mut args = args.iter();
        while let Some(arg) = args.next() {
            match arg.as_str() {
                "--report-only" => report_only = true,
                "--sizes" => {
                    let list = args.next().ok_or("`--sizes` needs a list, e.g. 100k,1m")?;
                    sizes = Some(list.clone());
                }
                "--backends" => {
                    let list = args.next().ok_or("`--backends` needs a list, e.g. memmap,arrow")?;
                    backends = Some(list.clone());
                }
                "--suite" => {
                    let name = args.next().ok_or_else(|| {
                        format!("`--suite` needs a suite name: {}", suite::names())
                    })?;
                    if name == overview::NAME || name == scale::NAME {
                        chosen.push(if name == scale::NAME { scale::NAME } else { overview::NAME });
                    } else {
                        chosen.push(suite::find(name)?.name);
                    }
                }
                other => {
                    return Err(format!(
                        "unexpected argument `{other}`; the flags here are `--suite NAME`, \
                         `--report-only` and `--sizes LIST` (see `cargo xtask --help`)"
                    ));
                }
            }
        }
        let scale = chosen.contains(&scale::NAME);
        if (sizes.is_some() || backends.is_some()) && !scale {
            return Err(
                "`--sizes` and `--backends` are for the scale suite: add `--suite scale`".into()
            );
        }
        let suites = SUITES
            .iter()
            .filter(|suite| chosen.is_empty() || chosen.contains(&suite.name))
            .collect();
        let overview = chosen.is_empty() || chosen.contains(&overview::NAME);
        Ok(Options { overview, suites, report_only, scale, sizes, backends })
    }

    /// The command as the docs record it: `cargo xtask bench`, with `--suite` for each suite when
    /// not all run (and for the scale suite, with its `--sizes`), and `--report-only`.
    fn command_line(&self) -> String {
        let mut line = "cargo xtask bench".to_owned();
        if !self.overview || self.suites.len() != SUITES.len() || self.scale {
            let overview = self.overview.then_some(overview::NAME);
            let scale = self.scale.then_some(scale::NAME);
            for name in overview.into_iter().chain(self.suites.iter().map(|s| s.name)).chain(scale)
            {
                line.push_str(" --suite ");
                line.push_str(name);
            }
        }
        if let Some(sizes) = &self.sizes {
            line.push_str(" --sizes ");
            line.push_str(sizes);
        }
        if let Some(backends) = &self.backends {
            line.push_str(" --backends ");
            line.push_str(backends);
        }
        if self.report_only {
            line.push_str(" --report-only");
        }
        line
    }
}

/// Where a run reads and writes.
#[derive(Debug)]
struct Paths {
    /// The workspace root: bench sources and peer scripts are relative to it, and paths below it
    /// are shown relative to it.
    root: PathBuf,
    /// Criterion's output: `$CRITERION_HOME` (relative to the root) or `<target>/criterion`.
    criterion_home: PathBuf,
    /// `<target>/bench-data`; each suite's bench data is it or a subdirectory of it.
    bench_data_root: PathBuf,
    /// `docs/benchmarks.md`.
    docs: PathBuf,
    /// The target directory: the Python package's venv is `<target>/py-venv`.
    target: PathBuf,
}

impl Paths {
    /// The paths of this workspace, from `CARGO_TARGET_DIR` and `CRITERION_HOME`.
    fn from_env() -> Paths {
        let root = workspace_root();
        let target = target_dir();
        let criterion_home = std::env::var_os("CRITERION_HOME")
            .filter(|value| !value.is_empty())
            .map(|value| root.join(value))
            .unwrap_or_else(|| target.join("criterion"));
        Paths {
            criterion_home,
            bench_data_root: target.join("bench-data"),
            docs: root.join("docs/benchmarks.md"),
            target,
            root,
        }
    }
}

/// Runs the chosen suites in order; a suite that fails does not stop the others, and the result
/// is an error naming every failed suite.
pub fn run(options: Options) -> Result<(), String> {
    run_suites(&options, &Paths::from_env())
}

/// [`run`] with the paths given, so tests can point it at temporary directories.
fn run_suites(options: &Options, paths: &Paths) -> Result<(), String> {
    let mut failed: Vec<&str> = Vec::new();
    let steps = options.suites.len() + usize::from(options.overview) + usize::from(options.scale);
    if options.overview {
        println!("xtask: ==> {} (1 of {steps})", overview::NAME);
        let data = paths.bench_data_root.join(overview::NAME);
        if let Err(message) = overview::run(&paths.root, &data, &paths.docs, options.report_only) {
            eprintln!("xtask: error: {}: {message}", overview::NAME);
            failed.push(overview::NAME);
        }
    }
    for (number, suite) in options.suites.iter().enumerate() {
        let step = number + 1 + usize::from(options.overview);
        println!("xtask: ==> suite {} ({step} of {steps})", suite.name);
        if let Err(message) = run_suite(suite, options, paths) {
            eprintln!("xtask: error: suite {}: {message}", suite.name);
            failed.push(suite.name);
        }
    }
    if options.scale {
        println!("xtask: ==> suite {} ({steps} of {steps})", scale::NAME);
        let data = paths.bench_data_root.join(scale::NAME);
        let chosen = scale::Chosen {
            sizes: options.sizes.as_deref(),
            backends: options.backends.as_deref(),
        };
        if let Err(message) = scale::run(
            &paths.root,
            &data,
            &paths.docs,
            &chosen,
            &options.command_line(),
            options.report_only,
        ) {
            eprintln!("xtask: error: suite {}: {message}", scale::NAME);
            failed.push(scale::NAME);
        }
    }
    if failed.is_empty() {
        Ok(())
    } else {
        Err(format!("{} of {steps} steps failed: {} (see above)", failed.len(), failed.join(", ")))
    }
}

/// One suite: its bench (unless report-only), its criterion results, its peer, the table printed
/// and written to the suite's section of the docs.
fn run_suite(suite: &Suite, options: &Options, paths: &Paths) -> Result<(), String> {
    if suite.runner == Runner::PythonPackage {
        return run_python_package_suite(suite, options, paths);
    }
    let root = &paths.root;
    let bench_data = suite.bench_data(&paths.bench_data_root);
    let mut bench = cargo();
    bench
        .args(["bench", "-p", suite.package, "--bench", suite.bench_target, "--", "--noplot"])
        .env("STOWAGE_BENCH_DIR", &bench_data)
        .env("CRITERION_HOME", &paths.criterion_home);
    let bench_line =
        format!("STOWAGE_BENCH_DIR={} {}", shown_path(root, &bench_data), display_command(&bench));
    // Started before the bench and dropped (stopped) when the suite is done, after its peer.
    let mut s3_server = None;
    if options.report_only {
        println!(
            "xtask: --report-only: reading the criterion results of an earlier `{bench_line}`"
        );
    } else {
        let bench_source = root.join(suite.bench_source);
        if !bench_source.is_file() {
            return Err(format!(
                "the {} benchmark is not runnable yet: {} does not exist (cargo xtask bench runs \
                 `{bench_line}`)",
                suite.name,
                shown_path(root, &bench_source)
            ));
        }
        std::fs::create_dir_all(&bench_data)
            .map_err(|error| format!("cannot create {}: {error}", bench_data.display()))?;
        if suite.s3_server {
            let server = s3::S3Server::start()?;
            bench.env(s3::ENDPOINT_VAR, &server.endpoint);
            s3_server = Some(server);
        }
        println!("xtask: ==> {bench_line}");
        let status =
            bench.status().map_err(|error| format!("could not start `{bench_line}`: {error}"))?;
        if !status.success() {
            return Err(format!("`{bench_line}` failed ({status})"));
        }
    }

    let mut rows =
        criterion::read_criterion(&paths.criterion_home, suite.group, suite.benchmark_ids);
    rows.extend(levels::read_levels(&bench_data, suite.levels));
    for row in &rows {
        if let Err(reason) = &row.measured {
            println!("xtask: {} is missing: {reason}", row.name);
        }
    }
    let benchmark_count = rows.len();

    let peer_line = peer::command_line(root, &suite.peer, &bench_data);
    let peer_output = peer::run(root, &suite.peer, &bench_data, &peer_line);
    if let Err(reason) = &peer_output {
        println!("xtask: the Python peer did not run: {reason}");
    }
    rows.extend(peer::rows(&suite.peer, &peer_output));
    drop(s3_server);
    record(suite, options, paths, &bench_line, &peer_line, &rows, benchmark_count, &peer_output)
}

/// A suite whose peer script measures everything ([`Runner::PythonPackage`]): the release build
/// of the Python package into its venv, then the script with the venv's interpreter (or, with
/// `--report-only`, the line its last run kept), its levels from its JSON line.
fn run_python_package_suite(suite: &Suite, options: &Options, paths: &Paths) -> Result<(), String> {
    let root = &paths.root;
    let target = &paths.target;
    let bench_data = suite.bench_data(&paths.bench_data_root);
    let build_line = python_package::build_line(root, target);
    let python = python_package::interpreter(target);
    let snapshot = bench_data.join("package");
    let peer_line = format!(
        "PYTHONPATH={} {}",
        shown_path(root, &snapshot),
        peer::command_line_with(root, &python, &suite.peer, &bench_data)
    );
    let peer_output = if options.report_only {
        println!("xtask: --report-only: reading what an earlier `{peer_line}` printed");
        peer::read_saved(root, &suite.peer, &bench_data)
    } else {
        let source = root.join(suite.bench_source);
        if !source.is_file() {
            return Err(format!(
                "the {} suite is not runnable yet: {} does not exist",
                suite.name,
                shown_path(root, &source)
            ));
        }
        std::fs::create_dir_all(&bench_data)
            .map_err(|error| format!("cannot create {}: {error}", bench_data.display()))?;
        // The script imports a copy of the release build, which no `maturin develop` rewrites.
        python_package::build(root, target, &snapshot)?;
        let env = [("PYTHONPATH", snapshot.as_os_str())];
        let output = peer::run_with(root, &python, &env, &suite.peer, &bench_data, &peer_line);
        if let Ok(output) = &output {
            peer::save(&bench_data, output)?;
        }
        output
    };
    if let Err(reason) = &peer_output {
        println!("xtask: the Python script did not run: {reason}");
    }
    let mut rows = peer::rows(&suite.peer, &peer_output);
    let levels = peer_output.as_ref().map_err(Clone::clone).and_then(|output| {
        output
            .json
            .get("levels")
            .cloned()
            .ok_or_else(|| format!("`{peer_line}` printed no \"levels\""))
    });
    rows.extend(levels::levels_in(&levels, suite.levels, "the script's \"levels\""));
    let count = rows.len();
    record(suite, options, paths, &build_line, &peer_line, &rows, count, &peer_output)
}

/// Prints the suite's table and writes its section of the docs; `rows[..benchmark_count]` are
/// the rows the suite measured itself (criterion's and the levels; every row for a suite whose
/// peer measures everything).
#[allow(clippy::too_many_arguments)]
fn record(
    suite: &Suite,
    options: &Options,
    paths: &Paths,
    bench_line: &str,
    peer_line: &str,
    rows: &[rate::Row],
    benchmark_count: usize,
    peer_output: &Result<peer::PeerOutput, String>,
) -> Result<(), String> {
    let table = table::render_table(rows, suite.targets);
    println!();
    print!("{table}");
    println!();

    let machine =
        Machine::detect(peer_output.as_ref().ok().and_then(|output| output.versions.clone()));
    let command = options.command_line();
    let section = Section {
        suite,
        machine: &machine,
        command: &command,
        report_only: options.report_only,
        bench_line,
        peer_line,
        benchmarks: &rows[..benchmark_count],
        table: &table,
        peer: peer_output,
    }
    .render();
    let old = std::fs::read_to_string(&paths.docs).unwrap_or_else(|_| "# Benchmarks\n".to_owned());
    std::fs::write(&paths.docs, replace_section(&old, suite, &section))
        .map_err(|error| format!("cannot write {}: {error}", paths.docs.display()))?;
    println!(
        "xtask: {}: {} of {} targets pass; wrote its section of {}",
        suite.name,
        table::passing(rows, suite.targets),
        suite.goal_count(),
        shown_path(&paths.root, &paths.docs)
    );
    Ok(())
}

/// `path` relative to the workspace root when inside it, for messages and the docs.
fn shown_path(root: &Path, path: &Path) -> String {
    path.strip_prefix(root).unwrap_or(path).display().to_string()
}

#[cfg(test)]
mod tests {
    use super::criterion::fake::write_result;
    use super::suite::{MEMMAP, NUMPY10};
    use super::*;

    /// `args` as the command line gives them.
    fn parse(args: &[&str]) -> Result<Options, String> {
        Options::parse(&args.iter().map(|arg| arg.to_string()).collect::<Vec<_>>())
    }

    /// The names of the suites `options` runs.
    fn names(options: &Options) -> Vec<&str> {
        options.suites.iter().map(|suite| suite.name).collect()
    }

    /// No flag runs every suite; `--suite` picks, in suite order whatever the argument order.
    #[test]
    fn options_choose_suites_and_report_only_in_any_order() {
        let all = parse(&[]).unwrap();
        assert_eq!(
            (all.overview, names(&all), all.report_only),
            (true, vec!["numpy10", "memmap", "arrow", "hdf5", "remote", "python"], false)
        );
        assert_eq!(all.command_line(), "cargo xtask bench");

        let memmap = parse(&["--report-only", "--suite", "memmap"]).unwrap();
        assert_eq!(
            (memmap.overview, names(&memmap), memmap.report_only),
            (false, vec!["memmap"], true)
        );
        assert_eq!(memmap.command_line(), "cargo xtask bench --suite memmap --report-only");

        let numpy10 = parse(&["--suite", "numpy10", "--report-only"]).unwrap();
        assert_eq!(names(&numpy10), ["numpy10"]);
        assert_eq!(numpy10.command_line(), "cargo xtask bench --suite numpy10 --report-only");

        let both = parse(&["--suite", "memmap", "--suite", "numpy10"]).unwrap();
        assert_eq!(names(&both), ["numpy10", "memmap"]);
        assert_eq!(both.command_line(), "cargo xtask bench --suite numpy10 --suite memmap");
        let suites = ["python", "remote", "hdf5", "arrow", "memmap", "numpy10"]
            .map(|name| ["--suite", name])
            .concat();
        assert_eq!(
            parse(&suites).unwrap().command_line(),
            "cargo xtask bench --suite numpy10 --suite memmap --suite arrow --suite hdf5 \
             --suite remote --suite python"
        );
        let python = parse(&["--suite", "python"]).unwrap();
        assert_eq!(python.command_line(), "cargo xtask bench --suite python");
        let every = [&["--suite", "overview"][..], &suites].concat();
        assert_eq!(parse(&every).unwrap().command_line(), "cargo xtask bench");
        let overview = parse(&["--suite", "overview"]).unwrap();
        assert!(overview.overview && overview.suites.is_empty());
        assert_eq!(overview.command_line(), "cargo xtask bench --suite overview");
    }

    /// The scale suite is opt-in: never in the default run, only when named, last, with its
    /// sizes.
    #[test]
    fn the_scale_suite_runs_only_when_named() {
        let all = parse(&[]).unwrap();
        assert!(!all.scale && all.sizes.is_none());
        let scale = parse(&["--suite", "scale", "--sizes", "100k,1m"]).unwrap();
        assert!(scale.scale && !scale.overview && scale.suites.is_empty());
        assert_eq!(scale.sizes.as_deref(), Some("100k,1m"));
        assert_eq!(scale.command_line(), "cargo xtask bench --suite scale --sizes 100k,1m");
        let some = parse(&["--backends", "arrow", "--suite", "scale"]).unwrap();
        assert_eq!(some.command_line(), "cargo xtask bench --suite scale --backends arrow");
        let with_memmap = parse(&["--suite", "scale", "--suite", "memmap"]).unwrap();
        assert_eq!(names(&with_memmap), ["memmap"]);
        assert_eq!(with_memmap.command_line(), "cargo xtask bench --suite memmap --suite scale");
    }

    /// Unknown suites, a `--suite` without a name and stray arguments are errors that say what
    /// would be right.
    #[test]
    fn options_reject_what_they_do_not_know() {
        assert_eq!(
            parse(&["--suite", "zarr"]).unwrap_err(),
            "unknown suite `zarr`; the suites are numpy10, memmap, arrow, hdf5, remote, python"
        );
        assert_eq!(
            parse(&["--suite"]).unwrap_err(),
            "`--suite` needs a suite name: numpy10, memmap, arrow, hdf5, remote, python"
        );
        assert!(parse(&["--quick"]).unwrap_err().contains("`--suite NAME`, `--report-only`"));
        assert_eq!(
            parse(&["--sizes", "100k"]).unwrap_err(),
            "`--sizes` and `--backends` are for the scale suite: add `--suite scale`"
        );
        assert!(parse(&["--suite", "scale", "--sizes"]).unwrap_err().contains("needs a list"));
    }

    /// Temporary criterion, bench-data and docs paths under `dir`; scripts from this workspace.
    fn temporary_paths(dir: &Path) -> Paths {
        Paths {
            root: workspace_root(),
            criterion_home: dir.join("criterion"),
            bench_data_root: dir.join("bench-data"),
            docs: dir.join("benchmarks.md"),
            target: dir.join("target"),
        }
    }

    /// Report-only over both suites: each writes its own section, numpy10 in place of the unnamed
    /// markers, memmap after numpy10's hand-written text; peers without bench data are missing.
    #[test]
    fn report_only_writes_one_section_per_suite() {
        let dir = tempfile::tempdir().unwrap();
        let paths = temporary_paths(dir.path());
        let home = &paths.criterion_home;
        for (id, mean_ns) in [("get_checksum", 1e6), ("reference_copy_xxh64", 8e5)] {
            let full_id = format!("numpy10/{id}");
            write_result(home, &full_id, &full_id, r#"{"Elements":1000}"#, mean_ns);
        }
        for (id, mean_ns) in [("open", 2e4), ("open_1k_rows", 1e4), ("first_get_after_open", 3e4)] {
            let full_id = format!("memmap/{id}");
            write_result(home, &full_id, &full_id, r#"{"Elements":1}"#, mean_ns);
        }
        std::fs::write(
            &paths.docs,
            "# Benchmarks\n\n<!-- xtask-bench:begin -->\nold\n<!-- xtask-bench:end -->\n\n\
             ### Reading the numbers\n\n- notes\n",
        )
        .unwrap();

        run_suites(&parse(&["--report-only"]).unwrap(), &paths).unwrap();

        let doc = std::fs::read_to_string(&paths.docs).unwrap();
        assert!(!doc.contains("<!-- xtask-bench:begin -->") && !doc.contains("\nold\n"), "{doc}");
        let position = |text: &str| doc.find(text).unwrap_or_else(|| panic!("{text} in\n{doc}"));
        assert!(position("# Benchmarks\n\n<!-- xtask-bench:numpy10:begin -->\n## numpy10: ") == 0);
        assert!(position("<!-- xtask-bench:numpy10:end -->") < position("### Reading the numbers"));
        assert!(position("- notes\n\n<!-- xtask-bench:memmap:begin -->\n## memmap: ") > 0);
        assert!(position("<!-- xtask-bench:memmap:end -->") < position("xtask-bench:arrow:begin"));
        assert!(position("<!-- xtask-bench:hdf5:end -->") < position("xtask-bench:remote:begin"));
        assert!(position("<!-- xtask-bench:remote:end -->") < position("xtask-bench:python:begin"));
        assert!(doc.ends_with("<!-- xtask-bench:python:end -->\n"));
        // The python suite has no criterion results: report-only reads its script's kept line,
        // which this run has not got, and builds nothing.
        assert!(doc.contains(
            "Not measured yet: there is no result of the Python script kept from an earlier run"
        ));
        assert!(doc.contains("python/peer-output.json does not exist"), "{doc}");
        assert!(!paths.target.exists());
        assert!(
            doc.contains("| get_checksum / reference_copy_xxh64 |  | 0.80x | >= 0.70x | PASS |")
        );
        assert!(doc.contains("| open / open_1k_rows |  | 0.50x | >= 0.50x | PASS |"));
        assert!(doc.contains("| first_get_after_open / open |  | 0.67x |  | report |"));
        assert!(doc.contains("Command: `cargo xtask bench --report-only`, which reads"));
        assert!(doc.contains("`python_slice_xxhash` is missing: "));
        assert!(doc.contains("`python_memmap_copy` and `python_memmap_copy_dnanet` are missing: "));
        assert!(doc.contains("memmap/f32x512/shapes.json does not exist"));

        // A second run rewrites the sections in place and leaves the rest alone.
        let notes = doc.find("### Reading the numbers").unwrap();
        run_suites(&parse(&["--report-only", "--suite", "memmap"]).unwrap(), &paths).unwrap();
        let again = std::fs::read_to_string(&paths.docs).unwrap();
        assert_eq!(again[..notes], doc[..notes]);
        assert_eq!(again.matches("<!-- xtask-bench:memmap:begin -->").count(), 1);
        assert!(again.contains("Command: `cargo xtask bench --suite memmap --report-only`"));
    }

    /// A suite whose bench cannot run is reported and the next suite still runs; the result is an
    /// error naming both, and no section is written for either.
    #[test]
    fn a_failing_suite_does_not_stop_the_others() {
        const BROKEN_NPY: Suite =
            Suite { name: "broken_npy", bench_source: "crates/absent/benches/a.rs", ..NUMPY10 };
        const BROKEN_MEMMAP: Suite =
            Suite { name: "broken_memmap", bench_source: "crates/absent/benches/b.rs", ..MEMMAP };
        let dir = tempfile::tempdir().unwrap();
        let paths = temporary_paths(dir.path());
        let options = Options {
            overview: false,
            suites: vec![&BROKEN_NPY, &BROKEN_MEMMAP],
            report_only: false,
            scale: false,
            sizes: None,
            backends: None,
        };
        let error = run_suites(&options, &paths).unwrap_err();
        assert_eq!(error, "2 of 2 steps failed: broken_npy, broken_memmap (see above)");
        assert!(!paths.docs.exists());
        assert!(!paths.bench_data_root.exists());
    }

    /// Paths below the root are shown relative to it, others as they are.
    #[test]
    fn paths_are_shown_relative_to_the_root() {
        let root = Path::new("/work/main");
        assert_eq!(
            shown_path(root, Path::new("/work/main/target/bench-data")),
            "target/bench-data"
        );
        assert_eq!(shown_path(root, Path::new("/tmp/x")), "/tmp/x");
    }
}
