//! The quick form of the concurrency campaign: a short live trial (1 writer process, 8 reader
//! threads, 2 reader processes), a few two-writer races, a few killed writers and a few rounds of
//! readers opening while the writer finalizes, on every backend; and a control showing that the
//! readers' checks catch a backend returning wrong bytes. The long form is the `concurrency`
//! binary (`--seconds 60`).

use std::path::Path;
use stowage_core::{
    Backend, BackendFactory, Capabilities, DynBackend, OpenMode, Reader, Result, Sample, Schema,
};
use stowage_reliability::backends::all;
use stowage_reliability::concurrency::{
    finalize_race, killed_writer, live, lock_race, reader, writer,
};

const EXE: &str = env!("CARGO_BIN_EXE_concurrency");
const SEED: u64 = 7;

#[test]
fn readers_see_only_committed_intact_samples_while_a_writer_writes() {
    for subject in all() {
        assert!(subject.factory.capabilities().concurrent_readers, "{}", subject.name);
        let work = tempfile::tempdir().unwrap();
        let report = live::run(Path::new(EXE), &subject, work.path(), SEED, 2.0, 0)
            .unwrap_or_else(|e| panic!("{e}"));
        let readers = report.readers();
        assert_eq!(readers.failures, 0, "{}: {:#?}", subject.name, readers.messages);
        assert_eq!(readers.finished, 10, "{}: every reader makes its final check", subject.name);
        assert!(
            report.threads.opens > 8 && report.processes.opens > 2,
            "{}: {report:?}",
            subject.name
        );
        assert!(
            readers.samples_checked > 0 && report.writer.flushes > 1,
            "{}: {report:?}",
            subject.name
        );
        assert_eq!(readers.views_grew, 0, "{}: a read-only handle is a snapshot", subject.name);
    }
}

#[test]
fn two_writers_racing_for_one_cache_get_one_lock() {
    for subject in all() {
        let work = tempfile::tempdir().unwrap();
        for trial in 0..3 {
            lock_race::trial(Path::new(EXE), &subject, work.path(), trial)
                .unwrap_or_else(|e| panic!("{e}"));
        }
    }
}

#[test]
fn a_writer_killed_holding_the_lock_does_not_block_the_next() {
    for subject in all() {
        let work = tempfile::tempdir().unwrap();
        for trial in 0..3 {
            let outcome = killed_writer::trial(Path::new(EXE), &subject, work.path(), SEED, trial)
                .unwrap_or_else(|e| panic!("{e}"));
            // The lock dies with its process: the first attempt after the kill gets it.
            assert_eq!(outcome.attempts, 1, "{} trial {trial}: {outcome:?}", subject.name);
        }
    }
}

#[test]
fn readers_opening_while_the_writer_finalizes_see_one_state_or_the_other() {
    for subject in all() {
        let work = tempfile::tempdir().unwrap();
        for round in 0..5 {
            let opens = finalize_race::round(&subject, work.path(), round)
                .unwrap_or_else(|e| panic!("{e}"));
            assert!(opens >= 2, "{} round {round}: {opens} opens", subject.name);
        }
    }
}

/// A factory whose read-only handles return one key's sample with a byte changed.
struct Lying(Box<dyn BackendFactory>);

struct LyingHandle(Box<DynBackend>);

impl BackendFactory for Lying {
    fn name(&self) -> &'static str {
        self.0.name()
    }
    fn capabilities(&self) -> Capabilities {
        self.0.capabilities()
    }
    fn formats(&self) -> &'static [stowage_core::Format] {
        self.0.formats()
    }
    fn recognize(&self, path: &Path) -> Result<Option<&'static stowage_core::Format>> {
        self.0.recognize(path)
    }
    fn create(&self, dir: &Path, schema: &Schema) -> Result<Box<DynBackend>> {
        self.0.create(dir, schema)
    }
    fn open(&self, dir: &Path, mode: OpenMode) -> Result<Box<DynBackend>> {
        Ok(Box::new(LyingHandle(self.0.open(dir, mode)?)))
    }
}

impl Reader for LyingHandle {
    fn format(&self) -> &'static stowage_core::Format {
        self.0.format()
    }
    fn name(&self) -> &'static str {
        self.0.name()
    }
    fn capabilities(&self) -> &Capabilities {
        self.0.capabilities()
    }
    fn schema(&self) -> &Schema {
        self.0.schema()
    }
    fn path(&self) -> &Path {
        self.0.path()
    }
    fn get(&self, key: &str) -> Result<Option<Sample>> {
        let got = self.0.get(key)?;
        if key != "key-0000003" {
            return Ok(got);
        }
        Ok(got.map(|sample| {
            let x = sample.tensor("x").unwrap();
            let mut bytes = x.bytes().to_vec();
            bytes[0] ^= 1;
            let wrong = stowage_core::Tensor::new(x.dtype(), x.shape().to_vec(), bytes).unwrap();
            let mut out = sample.clone();
            out.insert("x", wrong);
            out
        }))
    }
    fn contains(&self, key: &str) -> Result<bool> {
        self.0.contains(key)
    }
    fn len(&self) -> usize {
        self.0.len()
    }
    fn keys(&self) -> Result<Vec<String>> {
        self.0.keys()
    }
    fn is_finalized(&self) -> bool {
        self.0.is_finalized()
    }
    fn validate(
        &self,
        level: stowage_core::ValidationLevel,
    ) -> Result<stowage_core::ValidationReport> {
        self.0.validate(level)
    }
}

impl Backend for LyingHandle {
    fn put(&mut self, key: &str, sample: &Sample) -> Result<()> {
        self.0.put(key, sample)
    }
    fn flush(&mut self) -> Result<()> {
        self.0.flush()
    }
    fn finalize(&mut self) -> Result<()> {
        self.0.finalize()
    }
}

#[test]
fn a_reader_catches_a_backend_that_returns_wrong_bytes() {
    let subject = all().into_iter().find(|s| s.name == "npy").unwrap();
    let work = tempfile::tempdir().unwrap();
    let (dir, progress) = (work.path().join("cache"), work.path().join("progress"));
    writer::run(
        &*subject.factory,
        &dir,
        &progress,
        SEED,
        writer::Pace { seconds: 0.05, preload: 0 },
        &mut Vec::new(),
    )
    .unwrap();
    let lying = Lying(subject.factory);
    let setup = reader::ReaderSetup {
        factory: &lying,
        dir: &dir,
        progress: &progress,
        seed: SEED,
        name: "control".into(),
        deadline: std::time::Instant::now() + std::time::Duration::from_secs(60),
    };
    let stats = reader::read_until_done(&setup);
    assert_eq!((stats.failures, stats.finished), (1, 1), "{stats:?}");
    assert!(stats.messages[0].contains("key-0000003"), "{:?}", stats.messages);
}

/// The realistic form's writer first writes its preload at full speed, one flush per
/// `realistic_flush_every` samples (Arrow: 50, so 100,000 keys make 2,000 segments), at the
/// backend's default options; here 200 keys.
#[test]
fn the_realistic_writer_preloads_in_flushed_batches_at_default_options() {
    use stowage_reliability::corruption::scale::{Scale, select};
    let subject = select(Scale::Realistic, &["arrow".to_string()]).unwrap().remove(0);
    let work = tempfile::tempdir().unwrap();
    let (dir, progress) = (work.path().join("cache"), work.path().join("progress"));
    let mut out = Vec::new();
    let pace = writer::Pace { seconds: 0.0, preload: 200 };
    writer::run(&*subject.factory, &dir, &progress, SEED, pace, &mut out).unwrap();
    let out = String::from_utf8(out).unwrap();
    let summary = out.lines().find_map(|l| l.strip_prefix("summary ")).unwrap();
    let summary = writer::WriterSummary::parse(summary).unwrap();
    assert!(summary.keys >= 200, "{summary:?}");
    // Preload batches of 50 (each flushed), the finalize's flush; no steady phase.
    assert_eq!(summary.flushes, summary.puts / 50 + 1, "{summary:?}");
    let segments = std::fs::read_dir(dir.join("segments"))
        .unwrap()
        .filter(|e| e.as_ref().unwrap().path().extension().is_some_and(|x| x == "arrow"))
        .count() as u64;
    assert_eq!(segments, summary.puts / 50, "{summary:?}");
}
