//! The corruption campaign's quick form: 48 flips and 16 truncations per backend (seeded, so the
//! same trials every run), in this process with panics caught. Each backend must pass every rule;
//! a backend made to hide damage must fail them, so the assertions can fail.

use std::path::Path;
use stowage_core::{
    Backend, BackendFactory, Capabilities, DynBackend, OpenMode, Result, Sample, Schema,
    ValidationLevel, ValidationReport,
};
use stowage_reliability::backends::{Subject, select};
use stowage_reliability::corruption::pristine::Pristine;
use stowage_reliability::corruption::report::BackendReport;
use stowage_reliability::corruption::trial::{DamageKind, Trial, TrialId};
use stowage_reliability::corruption::{Config, run_in_process};

const QUICK: Config = Config { flips: 48, truncations: 16, seed: 7, replay: None };

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
    assert_eq!((total.wrong_data, total.panics), (0, 0));
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
    fn create(&self, dir: &Path, schema: &Schema) -> Result<Box<DynBackend>> {
        let options = stowage_npy::NpyOptions { collection_size: 8, ..Default::default() };
        stowage_npy::NpyFactory { options }.create(dir, schema)
    }
    fn open(&self, dir: &Path, mode: OpenMode) -> Result<Box<DynBackend>> {
        let inner = stowage_npy::NpyFactory::default().open(dir, mode)?;
        Ok(Box::new(BrokenBackend { inner, lie: self.lie }))
    }
}

impl Backend for BrokenBackend {
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
    fn put(&mut self, key: &str, sample: &Sample) -> Result<()> {
        self.inner.put(key, sample)
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
    fn flush(&mut self) -> Result<()> {
        self.inner.flush()
    }
    fn finalize(&mut self) -> Result<()> {
        self.inner.finalize()
    }
    fn is_finalized(&self) -> bool {
        self.inner.is_finalized()
    }
    fn validate(&self, _level: ValidationLevel) -> Result<ValidationReport> {
        Ok(ValidationReport::default())
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
         i=$start\nwhile [ $i -lt 3 ]; do echo \"begin $i\"; echo \"verdict $i {{\\\"undetected\\\": true}}\"; i=$((i+1)); done\n"
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
    let config = Config { flips: 3, truncations: 0, seed: 1, replay: None };
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
        assert!(format!("{:?}", failure.verdict).contains(what), "{:?}", failure.verdict);
    }
}
