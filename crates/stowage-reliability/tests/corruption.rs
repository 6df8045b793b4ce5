//! The corruption campaign's quick form: 48 flips and 16 truncations per backend (seeded, so the
//! same trials every run), in this process with panics caught. Each backend must pass every rule;
//! a backend made to hide damage must fail them, so the assertions can fail.
//!
//! Then the `stowage` command scored on damaged copies (`cli_*` tests): a few seeded trials per
//! backend the command reads, and deterministic damage the issue found `verify` calling clean
//! (a deleted Arrow `.sums` sidecar, emptied `schema.json`, `stowage.complete` and index run,
//! a truncated `stowage.log`). The binary is `STOWAGE_BIN`, or built with cargo (dev profile).

use std::path::Path;
use stowage_core::{
    Backend, BackendFactory, Capabilities, DynBackend, OpenMode, Reader, Result, Sample, Schema,
    ValidationLevel, ValidationReport,
};
use stowage_reliability::backends::{Subject, select};
use stowage_reliability::corruption::cli_check::{CliConfig, CliVerdict, GetKeys};
use stowage_reliability::corruption::pristine::Pristine;
use stowage_reliability::corruption::report::{BackendReport, describe};
use stowage_reliability::corruption::scale::Scale;
use stowage_reliability::corruption::trial::{DamageKind, Trial, TrialId, Verdict, judge};
use stowage_reliability::corruption::{Config, run_in_process};
use stowage_reliability::stowage_bin::stowage_bin;

const QUICK: Config =
    Config { flips: 48, truncations: 16, seed: 7, replay: None, scale: Scale::Quick, cli: None };

fn campaign(subject: &Subject) -> BackendReport {
    let dir = tempfile::tempdir().unwrap();
    run_in_process(subject, &QUICK, dir.path()).unwrap()
}

/// Runs the quick campaign on `name` and checks every rule, and that the trials reached the
/// backend's files (something was detected, every truncation was).
fn backend_passes(name: &str) {
    let subject = select(&[name.to_string()]).unwrap().remove(0);
    let report = campaign(&subject);
    let total = report.total();
    assert!(report.is_success(), "{}", report.render(false));
    assert_eq!((total.flips, total.truncations), (QUICK.flips, QUICK.truncations));
    assert_eq!(total.truncations_detected, QUICK.truncations, "{}", report.render(false));
    assert!(
        total.flips_detected_at_open + total.flips_detected_by_validate > 0,
        "no flip was detected: {}",
        report.render(false)
    );
    assert_eq!((total.wrong_data, total.panics, total.inconsistent), (0, 0, 0));
    // Without a binary the command's column counts every trial as not run, never as passed.
    assert_eq!(total.cli.not_run, QUICK.flips + QUICK.truncations);
}

#[test]
fn npy_passes_the_quick_corruption_campaign() {
    backend_passes("npy");
}

#[test]
fn memmap_passes_the_quick_corruption_campaign() {
    backend_passes("memmap");
}

#[test]
fn arrow_passes_the_quick_corruption_campaign() {
    backend_passes("arrow");
}

#[test]
fn hdf5_passes_the_quick_corruption_campaign() {
    backend_passes("hdf5");
}

#[test]
fn example_journal_passes_the_quick_corruption_campaign() {
    backend_passes("example-journal");
}

#[test]
fn a_trial_is_fixed_by_the_seed_and_its_id_alone() {
    let subject = select(&["example-journal".to_string()]).unwrap().remove(0);
    let dir = tempfile::tempdir().unwrap();
    let pristine = Pristine::build(&*subject.factory, &dir.path().join("p")).unwrap();
    let id = TrialId { kind: DamageKind::Flip, number: 5 };
    let trial = Trial::plan(7, id, &pristine);
    assert_eq!(trial, Trial::plan(7, id, &pristine));
    assert_ne!(trial.seed, Trial::plan(8, id, &pristine).seed);
    assert_eq!("flip:5".parse::<TrialId>().unwrap(), id);
    let replay = Config { replay: Some(id), ..QUICK };
    assert_eq!(replay.trial_ids(), [id]);
}

/// The npy backend with one rule broken on purpose: validate never reports, and (when `lie`)
/// a `get` that fails returns an all-zero sample instead.
struct Broken {
    lie: bool,
}

struct BrokenBackend {
    inner: Box<DynBackend>,
    lie: bool,
}

impl BackendFactory for Broken {
    fn name(&self) -> &'static str {
        "npy"
    }
    fn capabilities(&self) -> Capabilities {
        stowage_npy::capabilities()
    }
    fn formats(&self) -> &'static [stowage_core::Format] {
        stowage_npy::NpyFactory::default().formats()
    }
    fn recognize(&self, path: &Path) -> Result<Option<&'static stowage_core::Format>> {
        stowage_npy::NpyFactory::default().recognize(path)
    }
    fn create(&self, dir: &Path, schema: &Schema) -> Result<Box<DynBackend>> {
        let options = stowage_npy::NpyOptions { collection_size: 8, ..Default::default() };
        stowage_npy::NpyFactory { options }.create(dir, schema)
    }
    fn open(&self, dir: &Path, mode: OpenMode) -> Result<Box<DynBackend>> {
        let inner = stowage_npy::NpyFactory::default().open(dir, mode)?;
        Ok(Box::new(BrokenBackend { inner, lie: self.lie }))
    }
}

impl Reader for BrokenBackend {
    fn format(&self) -> &'static stowage_core::Format {
        self.inner.format()
    }
    fn name(&self) -> &'static str {
        self.inner.name()
    }
    fn capabilities(&self) -> &Capabilities {
        self.inner.capabilities()
    }
    fn schema(&self) -> &Schema {
        self.inner.schema()
    }
    fn path(&self) -> &Path {
        self.inner.path()
    }
    fn get(&self, key: &str) -> Result<Option<Sample>> {
        match self.inner.get(key) {
            Err(_) if self.lie => {
                let zeros = stowage_core::Tensor::zeros(stowage_core::DType::F32, &[4, 3])?;
                Ok(Some(Sample::new().with("image", zeros)))
            }
            other => other,
        }
    }
    fn contains(&self, key: &str) -> Result<bool> {
        self.inner.contains(key)
    }
    fn len(&self) -> usize {
        self.inner.len()
    }
    fn keys(&self) -> Result<Vec<String>> {
        self.inner.keys()
    }
    fn is_finalized(&self) -> bool {
        self.inner.is_finalized()
    }
    fn validate(&self, _level: ValidationLevel) -> Result<ValidationReport> {
        Ok(ValidationReport::default())
    }
}

impl Backend for BrokenBackend {
    fn put(&mut self, key: &str, sample: &Sample) -> Result<()> {
        self.inner.put(key, sample)
    }
    fn flush(&mut self) -> Result<()> {
        self.inner.flush()
    }
    fn finalize(&mut self) -> Result<()> {
        self.inner.finalize()
    }
}

#[test]
fn a_backend_that_hides_damage_fails_the_campaign() {
    for lie in [false, true] {
        let subject = Subject { name: "npy", factory: Box::new(Broken { lie }) };
        let report = campaign(&subject);
        let total = report.total();
        assert!(!report.is_success(), "lie: {lie}: {}", report.render(false));
        if lie {
            assert!(total.wrong_data > 0, "{}", report.render(false));
        } else {
            assert!(total.flips_missed > 0, "{}", report.render(false));
        }
        let rendered = report.render(true);
        assert!(rendered.contains("replay: `corruption --seed 7 --backends npy --replay "));
    }
}

/// A stand-in worker (a shell script speaking the supervisor's line protocol): trial 0 dies by
/// `signal` (or hangs when `None`), later trials report harmless flips.
fn fake_worker(dir: &Path, signal: Option<&str>) -> std::path::PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let first = match signal {
        Some(signal) => format!("kill -{signal} $$"),
        None => "exec sleep 600".into(),
    };
    let script = format!(
        "#!/bin/sh\nstart=0\nwhile [ $# -gt 0 ]; do [ \"$1\" = --start ] && start=$2; shift; done\n\
         if [ \"$start\" = 0 ]; then echo 'begin 0'; {first}; fi\n\
         i=$start\nwhile [ $i -lt 3 ]; do echo \"begin $i\"; echo \"verdict $i {{\\\"library\\\": {{\\\"undetected\\\": true}}, \\\"cli\\\": {{\\\"not_run\\\": \\\"fake\\\"}}}}\"; i=$((i+1)); done\n"
    );
    let path = dir.join("worker.sh");
    std::fs::write(&path, script).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}

#[test]
fn a_trial_that_kills_or_hangs_its_worker_is_a_failure_and_the_campaign_goes_on() {
    use stowage_reliability::corruption::supervise::{Supervisor, supervise};
    let subject = select(&["example-journal".to_string()]).unwrap().remove(0);
    let config = Config { flips: 3, truncations: 0, seed: 1, ..Config::default() };
    for (signal, what) in
        [(Some("ABRT"), "worker died"), (Some("SEGV"), "worker died"), (None, "hung")]
    {
        let dir = tempfile::tempdir().unwrap();
        let supervisor = Supervisor {
            exe: fake_worker(dir.path(), signal),
            trial_timeout: std::time::Duration::from_secs(if signal.is_some() { 600 } else { 1 }),
        };
        let report = supervise(&supervisor, &subject, &config, dir.path()).unwrap();
        let total = report.total();
        assert_eq!((total.flips, total.panics, total.flips_harmless), (3, 1, 2), "{signal:?}");
        let failure = &report.failures[0];
        assert_eq!(failure.trial.id.to_string(), "flip:0");
        assert!(format!("{:?}", failure.outcome).contains(what), "{:?}", failure.outcome);
    }
}

/// The `stowage` binary, located (or built) once for every test of this file.
fn cli() -> CliConfig {
    static BIN: std::sync::OnceLock<std::path::PathBuf> = std::sync::OnceLock::new();
    let bin = BIN.get_or_init(|| stowage_bin().expect("the stowage binary"));
    CliConfig { bin: bin.clone(), gets: GetKeys::All, timeout: std::time::Duration::from_secs(120) }
}

/// A few seeded trials on `name` with the command scored, `get` run for every key: every rule
/// must hold, the command must have run on every trial and detected something.
fn cli_passes(name: &str) {
    let subject = select(&[name.to_string()]).unwrap().remove(0);
    let config = Config { flips: 6, truncations: 3, seed: 11, cli: Some(cli()), ..QUICK };
    let report = campaign_with(&subject, &config);
    let total = report.total();
    assert!(report.is_success(), "{}", report.render(false));
    assert_eq!(total.cli.not_run, 0, "{}", report.render(false));
    assert!(total.cli.detected > 0, "{}", report.render(false));
    // Every trial ran `get` for all 48 keys.
    assert_eq!(total.cli.gets, 48 * (config.flips + config.truncations));
}

fn campaign_with(subject: &Subject, config: &Config) -> BackendReport {
    let dir = tempfile::tempdir().unwrap();
    run_in_process(subject, config, dir.path()).unwrap()
}

#[test]
fn cli_npy_passes_a_few_scored_trials() {
    cli_passes("npy");
}

#[test]
fn cli_memmap_passes_a_few_scored_trials() {
    cli_passes("memmap");
}

#[test]
fn cli_arrow_passes_a_few_scored_trials() {
    cli_passes("arrow");
}

#[test]
fn cli_hdf5_passes_a_few_scored_trials() {
    cli_passes("hdf5");
}

#[test]
fn cli_is_not_run_on_a_backend_it_does_not_read_and_that_is_no_pass() {
    let subject = select(&["example-journal".to_string()]).unwrap().remove(0);
    let config = Config { flips: 2, truncations: 1, cli: Some(cli()), ..QUICK };
    let total = campaign_with(&subject, &config).total();
    assert_eq!((total.cli.not_run, total.cli.detected + total.cli.clean), (3, 0));
}

/// Builds `name`'s quick pristine cache, applies `damage` to `file` (relative) of a linked copy,
/// and judges it with the command; the damage must be seen by the library and by the command.
fn cli_detects(name: &str, file: &str, damage: fn(&Path) -> std::io::Result<()>) {
    let subject = select(&[name.to_string()]).unwrap().remove(0);
    let dir = tempfile::tempdir().unwrap();
    let pristine = Pristine::build(&*subject.factory, &dir.path().join("pristine")).unwrap();
    let scratch = dir.path().join("scratch");
    let file = Path::new(file);
    assert!(pristine.files.iter().any(|(f, _)| f == file), "{name} has no {}", file.display());
    pristine.link_copy(&scratch.join("cache"), file).unwrap();
    damage(&scratch.join("cache").join(file)).unwrap();
    let outcome = judge(&*subject.factory, &pristine, file, 1, &scratch, Some(&cli())).unwrap();
    pristine.check_untouched().unwrap();
    assert!(
        matches!(
            outcome.verdict,
            Verdict::DetectedAtOpen { .. } | Verdict::DetectedByValidate { .. }
        ),
        "the library did not see the damage: {:?}",
        outcome.verdict
    );
    assert!(
        matches!(outcome.cli, CliVerdict::Passed { damage: true, .. }),
        "{} of {name}: {}",
        file.display(),
        describe(&outcome, DamageKind::Truncation)
    );
}

fn delete(path: &Path) -> std::io::Result<()> {
    std::fs::remove_file(path)
}

fn empty(path: &Path) -> std::io::Result<()> {
    std::fs::OpenOptions::new().write(true).open(path)?.set_len(0)
}

fn halve(path: &Path) -> std::io::Result<()> {
    let file = std::fs::OpenOptions::new().write(true).open(path)?;
    file.set_len(file.metadata()?.len() / 2)
}

/// Issue 15: `stowage verify` said `clean` (exit 0) about this. Fails until verify reports
/// every problem validate(Full) finds.
#[test]
fn cli_arrow_verify_detects_a_deleted_sums_sidecar() {
    cli_detects("arrow", "segments/segment_000000.sums", delete);
}

/// Issue 15, as above.
#[test]
fn cli_arrow_verify_detects_an_emptied_schema_json() {
    cli_detects("arrow", "schema.json", empty);
}

/// Issue 15, as above.
#[test]
fn cli_arrow_verify_detects_an_emptied_complete_marker() {
    cli_detects("arrow", "stowage.complete", empty);
}

/// Issue 15, as above.
#[test]
fn cli_arrow_verify_detects_a_halved_commit_log() {
    cli_detects("arrow", "stowage.log", halve);
}

/// Issue 15, as above: the index run file (its name carries the run's numbers).
#[test]
fn cli_arrow_verify_detects_an_emptied_index_run() {
    let subject = select(&["arrow".to_string()]).unwrap().remove(0);
    let dir = tempfile::tempdir().unwrap();
    let pristine = Pristine::build(&*subject.factory, &dir.path().join("p")).unwrap();
    let run = pristine
        .files
        .iter()
        .map(|(f, _)| f.to_string_lossy().into_owned())
        .find(|f| f.starts_with("stowage_index_") && f.ends_with(".bin"))
        .expect("the quick arrow cache has an index run");
    cli_detects("arrow", &run, empty);
}

/// A stand-in `stowage` (a shell script): `verify` prints `verify_line` and exits
/// `verify_exit`; `get` exits `get_exit` having written nothing.
fn fake_cli(dir: &Path, verify_line: &str, verify_exit: i32, get_exit: &str) -> CliConfig {
    use std::os::unix::fs::PermissionsExt;
    let script = format!(
        "#!/bin/sh\nif [ \"$1\" = verify ]; then echo '{verify_line}'; exit {verify_exit}; fi\n\
         {get_exit}\n"
    );
    let path = dir.join("fake-stowage");
    std::fs::write(&path, script).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    CliConfig { bin: path, gets: GetKeys::Sample(2), timeout: std::time::Duration::from_secs(5) }
}

/// The scoring can fail: a command that calls a damaged cache clean, one whose `get` exits 0
/// without the sample, one killed by a signal, one that refuses an undamaged cache.
#[test]
fn a_command_that_hides_damage_or_loses_data_fails_the_trial() {
    let subject = select(&["arrow".to_string()]).unwrap().remove(0);
    let dir = tempfile::tempdir().unwrap();
    let pristine = Pristine::build(&*subject.factory, &dir.path().join("pristine")).unwrap();
    let sums = Path::new("segments/segment_000000.sums");
    let judged = |cli: &CliConfig, damaged: bool| {
        let scratch = dir.path().join("scratch");
        let _ = std::fs::remove_dir_all(&scratch);
        pristine.link_copy(&scratch.join("cache"), sums).unwrap();
        if damaged {
            delete(&scratch.join("cache").join(sums)).unwrap();
        }
        judge(&*subject.factory, &pristine, sums, 3, &scratch, Some(cli)).unwrap().cli
    };
    let clean = "48 samples, 2 files checked: clean";
    let cli = fake_cli(dir.path(), clean, 0, "exit 2");
    assert!(matches!(judged(&cli, true), CliVerdict::SaidClean { .. }));
    let cli = fake_cli(dir.path(), "0 samples: no problem, 48 samples unchecked", 3, "exit 2");
    assert!(matches!(judged(&cli, true), CliVerdict::SaidClean { .. }));
    let cli = fake_cli(dir.path(), "1 problems", 1, "exit 0");
    assert!(matches!(judged(&cli, true), CliVerdict::WrongData { .. }));
    let cli = fake_cli(dir.path(), "1 problems", 1, "kill -SEGV $$");
    assert!(matches!(judged(&cli, true), CliVerdict::Crashed { .. }));
    let cli = fake_cli(dir.path(), "cannot open", 2, "exit 2");
    assert!(matches!(judged(&cli, false), CliVerdict::Refused { .. }));
    // And the honest answers pass: problems found on the damaged copy, clean on an undamaged one.
    let cli = fake_cli(dir.path(), "1 problems", 1, "exit 2");
    assert!(matches!(judged(&cli, true), CliVerdict::Passed { damage: true, .. }));
    let cli = fake_cli(dir.path(), clean, 0, "exit 2");
    assert!(matches!(judged(&cli, false), CliVerdict::Refused { .. }), "get refused, nothing seen");
}
