//! What every test file shares: running the real binary and reading what it wrote.
#![allow(dead_code)] // Each test file uses its own part.

use std::ffi::{OsStr, OsString};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use stowage_core::npy_header;
use stowage_core::{DType, Sample, Schema, ShapeRule, Tensor, Value};

pub const BIN: &str = env!("CARGO_BIN_EXE_stowage");

/// What one run of the binary did.
pub struct Run {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl std::fmt::Debug for Run {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "exit {}\n--- stdout\n{}--- stderr\n{}", self.code, self.stdout, self.stderr)
    }
}

/// How long one run may take before it counts as hung (and is killed).
const RUN_TIMEOUT: Duration = Duration::from_secs(120);

pub fn stowage<I, S>(args: I) -> Run
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    stowage_with_env(args, &[])
}

/// [`stowage`] with `env` added to the binary's environment.
pub fn stowage_with_env<I, S>(args: I, env: &[(&str, &str)]) -> Run
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    let args: Vec<OsString> = args.into_iter().map(|a| a.as_ref().to_os_string()).collect();
    let mut child = Command::new(BIN)
        .args(&args)
        .envs(env.iter().copied())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the stowage binary runs");
    let drain = |mut pipe: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut bytes = Vec::new();
            pipe.read_to_end(&mut bytes).map(|_| bytes)
        })
    };
    let stdout = drain(Box::new(child.stdout.take().unwrap()));
    let stderr = drain(Box::new(child.stderr.take().unwrap()));
    let deadline = Instant::now() + RUN_TIMEOUT;
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("stowage {args:?} did not finish within {RUN_TIMEOUT:?}");
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    let run = Run {
        code: status.code().expect("stowage exited normally, not by a signal"),
        stdout: String::from_utf8(stdout.join().unwrap().unwrap()).expect("stdout is UTF-8"),
        stderr: String::from_utf8(stderr.join().unwrap().unwrap()).expect("stderr is UTF-8"),
    };
    assert!(!run.stderr.contains("panicked"), "the binary panicked: {run:?}");
    run
}

/// Arguments mixing literal words and paths.
pub fn args(parts: &[&dyn AsRef<OsStr>]) -> Vec<OsString> {
    parts.iter().map(|p| p.as_ref().to_os_string()).collect()
}

/// Asserts exit status 2 with exactly one line on stderr, `stowage: error: ...` containing every
/// one of `needles`.
pub fn assert_error_line(run: &Run, needles: &[&str]) {
    assert_eq!(run.code, 2, "{run:?}");
    assert_eq!(run.stderr.lines().count(), 1, "one error line: {run:?}");
    assert!(run.stderr.starts_with("stowage: error: "), "{run:?}");
    for needle in needles {
        assert!(run.stderr.contains(needle), "stderr lacks {needle:?}: {run:?}");
    }
}

/// Writes a file of `len` deterministic pseudo-random bytes.
pub fn random_bytes(len: usize, seed: u64) -> Vec<u8> {
    let mut state = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..len)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state >> 24) as u8
        })
        .collect()
}

/// dtype, shape and data bytes of a `.npy` file, read with the workspace's own header parser.
pub fn read_npy(path: &Path) -> (DType, Vec<usize>, String, Vec<u8>) {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let h = npy_header::parse(&bytes).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    assert!(!h.fortran_order, "{}", path.display());
    assert_eq!(bytes.len(), h.data_offset + h.data_len().unwrap(), "{}", path.display());
    (h.dtype, h.shape, h.descr, bytes[h.data_offset..].to_vec())
}

/// `1 sample`, `2 samples`: the CLI's counted nouns.
pub fn count(n: u64, noun: &str) -> String {
    if n == 1 { format!("1 {noun}") } else { format!("{n} {noun}s") }
}

/// A schema with every kind of field: a fixed tensor, a nullable ragged tensor, bytes and JSON.
pub fn mixed_schema() -> Schema {
    Schema::new()
        .tensor("x", DType::F32, ShapeRule::Fixed(vec![4]))
        .nullable_tensor("ragged", DType::I16, ShapeRule::RaggedLeading(vec![2]))
        .bytes("raw")
        .json("meta", false)
}

/// Sample `i` of [`mixed_schema`]: every fourth one has a null ragged field, the others 0 to 2
/// rows.
pub fn mixed_sample(i: usize) -> Sample {
    let rows = i % 3;
    let mut sample = Sample::new()
        .with("x", Tensor::from_slice(&[4], &[i as f32, 1.5, -2.0, 0.25]).unwrap())
        .with("raw", Value::Bytes(vec![i as u8; i % 5].into()))
        .with("meta", Value::Json(format!("{{\"i\": {i}}}")));
    if i % 4 == 3 {
        sample.insert("ragged", Value::Null);
    } else {
        let values: Vec<i16> = (0..rows * 2).map(|v| v as i16 - i as i16).collect();
        sample.insert("ragged", Tensor::from_slice(&[rows, 2], &values).unwrap());
    }
    sample
}

/// A stowage Arrow cache of 40 keys of [`mixed_sample`] (`k00` to `k39`) in 4 segments (a flush
/// every 10 puts) in `dir/arrow`, finalized or only flushed.
pub fn build_arrow(dir: &Path, finalize: bool) -> PathBuf {
    let path = dir.join("arrow");
    let options = stowage_arrow::ArrowOptions { flush_every: 10, ..Default::default() };
    let mut cache = stowage_arrow::ArrowBackend::create(&path, &mixed_schema(), options).unwrap();
    for i in 0..40 {
        stowage_core::Backend::put(&mut cache, &format!("k{i:02}"), &mixed_sample(i)).unwrap();
    }
    if finalize {
        stowage_core::Backend::finalize(&mut cache).unwrap();
    } else {
        stowage_core::Backend::flush(&mut cache).unwrap();
    }
    path
}

/// Runs `stowage ARGV` (the program name first) in this process on `registry`, capturing both
/// outputs: for tests that register backends of their own.
pub fn stowage_in(registry: &stowage_core::Registry, argv: Vec<OsString>) -> Run {
    let (mut stdout, mut stderr) = (Vec::new(), Vec::new());
    let code = stowage_cli::run(registry, argv, &mut stdout, &mut stderr);
    Run {
        code: i32::from(code),
        stdout: String::from_utf8(stdout).expect("stdout is UTF-8"),
        stderr: String::from_utf8(stderr).expect("stderr is UTF-8"),
    }
}

/// The keys of [`build_journal`]'s cache.
pub const JOURNAL_KEYS: usize = 12;

/// Key `i` of [`build_journal`]'s cache.
pub fn journal_key(i: usize) -> String {
    format!("k{i:02}")
}

/// A finalized stowage-example journal cache of [`JOURNAL_KEYS`] [`mixed_sample`]s in
/// `dir/journal`, written with the example crate alone.
pub fn build_journal(dir: &Path) -> PathBuf {
    use stowage_core::{Backend, BackendFactory};
    let path = dir.join("journal");
    let mut cache = stowage_example::JournalFactory.create(&path, &mixed_schema()).unwrap();
    for i in 0..JOURNAL_KEYS {
        cache.put(&journal_key(i), &mixed_sample(i)).unwrap();
    }
    cache.finalize().unwrap();
    path
}

/// Every key of the cache at `path` (read with `factory`) holds its [`mixed_sample`], field by
/// field (dtype, shape and bytes; a null stays null), and there is no other key.
pub fn assert_holds_every_sample(factory: &dyn stowage_core::BackendFactory, path: &Path) {
    use stowage_core::Reader;
    let reader = factory.open_reader(path).unwrap();
    let expected: Vec<String> = (0..JOURNAL_KEYS).map(journal_key).collect();
    assert_eq!(reader.keys().unwrap(), expected);
    for (i, key) in expected.iter().enumerate() {
        let got = reader.get(key).unwrap().unwrap_or_else(|| panic!("key {key}"));
        let want = mixed_sample(i);
        assert_eq!(got.len(), want.len(), "key {key}: {got:?}");
        for (name, value) in want.fields() {
            assert_eq!(got.get(name), Some(value), "key {key} field {name:?}");
        }
    }
}
