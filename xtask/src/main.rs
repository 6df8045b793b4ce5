//! Project tasks for the stowage workspace, run as `cargo xtask <command>`.
//!
//! - `cargo xtask test`: checks the dependency rules between the workspace crates, checks and
//!   installs what the tests need, then runs every check the project has (format, clippy, tests,
//!   the Python package's pytest suite, docs), stopping at the first failure.
//! - `cargo xtask architecture`: only the dependency rules (see `architecture.rs`).
//! - `cargo xtask reliability`: runs the long reliability campaigns and records them in
//!   `docs/reliability.md`.
//! - `cargo xtask bench`: runs every benchmark suite (numpy10, memmap, arrow, hdf5, remote, python) and
//!   its Python peer, prints each comparison table and records it in the suite's section of
//!   `docs/benchmarks.md`.

mod architecture;
mod bench;
mod hangar_venv;
mod machine;
mod prerequisites;
mod python_package;
mod reliability;
mod sections;
mod test;

use std::ffi::OsString;
use std::path::PathBuf;
use std::process::{Command, ExitCode};

const HELP: &str = "\
cargo xtask <command> [flag]

Commands:
  test            Run every test of the project, stopping at the first failure:
                    0. architecture: the dependency rules between workspace crates, as
                       `cargo xtask architecture`
                    1. prerequisites: libhdf5-dev and pkg-config for stowage-hdf5 (apt-get
                       install -y when missing; the error names them when apt-get fails),
                       python3 with numpy, xxhash, pyarrow, tables, h5py and moto[server]
                       (installed with pip when missing), a venv with hangar 0.5.2 for the NUMPY_10
                       mixed-writer tests (target/hangar-venv, made when missing; the tests
                       get its python in STOWAGE_HANGAR_PYTHON), a venv for the Python
                       package (target/py-venv, python3 -m venv --system-site-packages, so it
                       sees the packages above; maturin==1.16.0 and pytest pip-installed into
                       it when missing), rustfmt and clippy (rustup component add when
                       missing), the reference caches (required when CI is set)
                    2. cargo fmt --all -- --check
                    3. cargo clippy --workspace --all-targets -- -D warnings
                    4. cargo test --workspace   (STOWAGE_REQUIRE_PYTHON=1; STOWAGE_REQUIRE_REFERENCE=1
                       when CI is set or the reference caches exist)
                    5. the Python package stowage (crates/stowage-py), in target/py-venv:
                         cd crates/stowage-py && VIRTUAL_ENV=target/py-venv
                           target/py-venv/bin/maturin develop   (PATH starting with the venv's
                           bin; the debug build, in the target directory)
                         target/py-venv/bin/python -m pytest crates/stowage-py/tests -q -rfEs
                           -p no:cacheprovider -o faulthandler_timeout=300
                           (a test running 300 s prints its threads' stacks;
                           PYTHONDONTWRITEBYTECODE=1;
                           STOWAGE_REFERENCE_DIR and STOWAGE_REQUIRE_REFERENCE as in step 4;
                           test files that yield no test are a failure; without any test_*.py
                           there, only the build is checked)
                    6. cargo doc --workspace --no-deps   (RUSTDOCFLAGS=\"-D warnings\")
                  The summary adds up the Rust and the Python tests. It counts as skipped the
                  #[ignore]d tests, the tests that reported a skip (a line `SKIPPED test=...
                  kind=... reason=...`: a missing optional prerequisite, or a conformance case
                  that does not apply: the backend's capabilities rule it out or the cache
                  storage cannot run it, as the reason says), collected through the file
                  STOWAGE_SKIP_LOG names, and the tests pytest skipped or expected to fail; it
                  lists the skips by reason (pytest's from its `SKIPPED [n] file:line: reason`
                  lines). A skip is never counted as a pass.
    --quick       only steps 0, 1, 4 and 5

  architecture    Check that every workspace crate declares its role
                  ([package.metadata.stowage] role = core, backend, conformance, frontend,
                  test-support or tooling) and that no dependency between workspace crates
                  (normal, build or dev) breaks the rules: core depends on no workspace crate;
                  backends depend on no other backend, nor on the frontend or tooling crates;
                  conformance depends only on core. Reads cargo metadata --no-deps.

  bench           First the overview: `stowage bench` writes the same generated workloads
                  (100,000 float32[512] samples, 5,000 DNANet-shaped rows, 10,000 ragged
                  aenet-shaped entries) into every backend, verifies them and prints one table
                  per workload beside the physical references, with the Python peers when
                  python3 and their packages are there:
                    overview cargo run --release -p stowage-cli --bin stowage -- bench
                               --workload flat --workload dnanet --workload aenet
                               --format markdown --dir <target>/bench-data/overview [--peers]
                  Then every benchmark suite in order, each printing its comparison table:
                    numpy10  cargo bench -p stowage-npy --bench numpy10 -- --noplot
                             python3 xtask/py/numpy10_peer.py <target>/bench-data
                    memmap   cargo bench -p stowage-memmap --bench memmap_rows -- --noplot
                             python3 xtask/py/memmap_peer.py <target>/bench-data/memmap
                    arrow    cargo bench -p stowage-arrow --bench arrow_segments -- --noplot
                             python3 xtask/py/arrow_peer.py <target>/bench-data/arrow
                             (its index-at-scale part builds a 10-million-key cache once,
                             about 2 GB, kept for later runs)
                    hdf5     cargo bench -p stowage-hdf5 --bench hdf5_cache -- --noplot
                             python3 xtask/py/hdf5_peer.py <target>/bench-data/hdf5
                    remote   cargo bench -p stowage-remote --bench remote -- --noplot
                             python3 xtask/py/remote_peer.py <target>/bench-data/remote
                             (both against one moto S3 server on 127.0.0.1 that xtask starts
                             and stops, its endpoint in STOWAGE_BENCH_S3_ENDPOINT; the
                             10-million-key file:// cache is built once and kept)
                    python   cd crates/stowage-py && VIRTUAL_ENV=target/py-venv
                               target/py-venv/bin/maturin develop --release  (package stowage-py;
                               the release module is copied to <target>/bench-data/python/package)
                             PYTHONPATH=<target>/bench-data/python/package target/py-venv/bin/python
                               xtask/py/python_bench.py <target>/bench-data/python
                             (no criterion bench: the script builds four caches with
                             stowage.create and measures the package against its own Rust
                             reads and the original tools' read paths; --report-only reads the
                             line it kept in <target>/bench-data/python/peer-output.json)
                  then write the table, the machine and the command to the suite's section of
                  docs/benchmarks.md. A suite that fails is reported and the others still run;
                  the command then exits non-zero.
                  Opt-in, never in the default run: --suite scale runs
                    scale    cargo run --release -p stowage-cli --bin stowage -- bench --scale
                               [--sizes LIST] [--backends LIST] --format markdown
                               --dir <target>/bench-data/scale
                  (every backend at 100k, 1m and 10m keys of a 16-byte row, memmap and arrow
                  also at 100m: open time and memory, write rate, warm and cold random gets
                  beside the physical references, issue 17's targets as PASS or FAIL; it
                  refuses to start when the disk cannot hold its largest cache plus 15 GB)
    --suite NAME  run only this step (overview, numpy10, memmap, arrow, hdf5, remote, python
                  or scale); may be given more than once
    --sizes LIST  with --suite scale: the key counts, e.g. 100k,1m (default 100k,1m,10m,100m)
    --backends LIST  with --suite scale: the backends, e.g. memmap,arrow (default: all four)
    --report-only do not run the benchmarks; report the last criterion results
                  (the Python peers still run when the bench data exists; the overview,
                  which keeps no results, is skipped)

  reliability     Run the long reliability campaigns of stowage-reliability (their quick forms
                  are tests under `test`), each recorded in its section of docs/reliability.md;
                  a campaign with a realistic form (default options, >= 100,000 samples) runs it
                  next and records it in a section of its own (<name>-realistic):
                    crash        cargo run --release -p stowage-reliability --bin crash --
                                 --trials 200 --markdown; realistic: --realistic --trials 2
                    crash-mixed  ... --bin crash -- --mixed --trials 50 --markdown (stowage and
                                 the original tools' peers sharing caches; hangar 0.5.2's venv
                                 made as for `test`)
                    crash-convert  ... --bin convert -- --trials 40 --samples 20000
                                 --flush-every 256 --markdown (the stowage command killed and
                                 rerun); realistic: --trials 8 --samples 100000
                    corruption   ... --bin corruption -- --flips 1000 --truncations 100
                                 --cli-gets 8 --markdown (the stowage command scored too);
                                 realistic: --realistic --flips 40 --truncations 10
                    corruption-asan  the same, built as cargo-fuzz builds (nightly,
                                 AddressSanitizer, debug assertions) in target/asan
                    concurrency  ... --bin concurrency -- --seconds 60 --markdown; realistic:
                                 --realistic --seconds 60
                    faults       ... --bin faults -- --markdown; realistic: --realistic
                                 --points 2
                    remote       ... --bin remote -- --rounds 100 --s3 --markdown (object
                                 stores: faults, killed uploads, 8 writers with kill -9 on
                                 file:// and on S3 served by moto; python3 with moto[server]
                                 and boto3 needed)
                    fuzz         cargo +nightly fuzz run <target> -- -max_total_time=600, for
                                 every target of fuzz/, as many at once as there are cores,
                                 after writing the seed corpus (cargo-fuzz installed when
                                 missing)
                  The campaigns that run the stowage command get it built in release
                  (STOWAGE_BIN).
    --campaign NAME  run only this campaign; may be given more than once

  help, --help, -h  Print this text.

Environment:
  STOWAGE_REFERENCE_DIR  reference caches (default: <workspace>/../shared/reference); passed to
                         the tests as an absolute path
  CI                     when set, missing reference caches are a failure
  CARGO_TARGET_DIR       build directory (default: <workspace>/target); the bench data goes to
                         <target>/bench-data (memmap's to its memmap/ subdirectory) and
                         criterion's output to <target>/criterion (or $CRITERION_HOME, relative
                         to the workspace)
";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        None | Some("help" | "--help" | "-h") => {
            print!("{HELP}");
            return ExitCode::SUCCESS;
        }
        Some("test") => parse_flag(&args[1..], "--quick").and_then(test::run),
        Some("architecture") => match &args[1..] {
            [] => architecture::run(),
            rest => Err(format!("`architecture` takes no argument, not `{}`", rest.join(" "))),
        },
        Some("bench") => bench::Options::parse(&args[1..]).and_then(bench::run),
        Some("reliability") => reliability::run(&args[1..]),
        Some(other) => Err(format!("unknown command `{other}`; run `cargo xtask --help`")),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("xtask: error: {message}");
            ExitCode::FAILURE
        }
    }
}

/// Accepts no argument or exactly `flag`; returns whether `flag` was given.
fn parse_flag(rest: &[String], flag: &str) -> Result<bool, String> {
    match rest {
        [] => Ok(false),
        [only] if only == flag => Ok(true),
        _ => Err(format!(
            "unexpected argument(s) `{}`; the only flag here is `{flag}` (see `cargo xtask --help`)",
            rest.join(" ")
        )),
    }
}

/// The workspace root: the parent of this crate's directory.
fn workspace_root() -> PathBuf {
    let manifest_dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    manifest_dir.parent().map(PathBuf::from).unwrap_or(manifest_dir)
}

/// The cargo directory for build output: `$CARGO_TARGET_DIR` or `<workspace>/target`.
fn target_dir() -> PathBuf {
    let root = workspace_root();
    match std::env::var_os("CARGO_TARGET_DIR").filter(|value| !value.is_empty()) {
        Some(dir) => root.join(dir),
        None => root.join("target"),
    }
}

/// A `cargo` command run from the workspace root, using the cargo that started xtask.
fn cargo() -> Command {
    let program = std::env::var_os("CARGO").unwrap_or_else(|| OsString::from("cargo"));
    let mut command = Command::new(program);
    command.current_dir(workspace_root());
    command
}

/// Whether this is a CI run: `CI` is set to anything but an empty string, `0` or `false`.
fn is_ci() -> bool {
    std::env::var("CI").is_ok_and(|value| !matches!(value.trim(), "" | "0" | "false" | "FALSE"))
}

/// A command line as the user would type it, for messages.
fn display_command(command: &Command) -> String {
    let mut words = vec![command.get_program().to_string_lossy().into_owned()];
    words.extend(command.get_args().map(|arg| arg.to_string_lossy().into_owned()));
    if words[0].ends_with("/cargo") {
        words[0] = "cargo".to_owned();
    }
    words.join(" ")
}

/// Runs `command` with its stderr shown, echoing and returning its stdout (a markdown section)
/// with its exit status and its command line.
///
/// Errors: the command could not start.
fn run_for_markdown(
    command: &mut Command,
) -> Result<(String, std::process::ExitStatus, String), String> {
    let line = display_command(command);
    println!("xtask: ==> {line}");
    let output = command
        .stderr(std::process::Stdio::inherit())
        .output()
        .map_err(|e| format!("could not start `{line}`: {e}"))?;
    let markdown = String::from_utf8_lossy(&output.stdout).into_owned();
    print!("{markdown}");
    Ok((markdown, output.status, line))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_flag_accepts_nothing_or_the_flag() {
        assert_eq!(parse_flag(&[], "--quick"), Ok(false));
        assert_eq!(parse_flag(&["--quick".to_owned()], "--quick"), Ok(true));
        assert!(parse_flag(&["--fast".to_owned()], "--quick").is_err());
        assert!(parse_flag(&["--quick".to_owned(), "x".to_owned()], "--quick").is_err());
    }

    /// The help text names every benchmark suite, its package and its peer.
    #[test]
    fn help_names_every_suite() {
        for suite in bench::SUITES {
            for word in [suite.name, suite.package, suite.bench_target, suite.peer.script] {
                assert!(HELP.contains(word), "{word} is not in the help text");
            }
        }
    }

    #[test]
    fn workspace_root_holds_the_workspace_manifest() {
        assert!(workspace_root().join("Cargo.toml").is_file());
        assert!(workspace_root().join("xtask").is_dir());
    }
}
