//! Scoring the `stowage` command on each damaged copy: what users run is the binary, so each
//! trial also runs `stowage verify COPY` and `stowage get COPY KEY` (the command has no form that
//! gets every key in one run) and holds their exit statuses and output to these rules:
//!
//! - `verify` must not call a cache clean (exit 0, or a summary ending in `: clean`) nor say
//!   `no problem` (exit 3) when the library sees damage: open refused the copy, `validate(Full)`
//!   reported it, or a library `get` suffered from it ([`CliVerdict::SaidClean`]). Exit 1 (problems
//!   listed) and 2 (the cache cannot be opened) are detections.
//! - `verify` exiting 2 on a copy the library opens and validates clean, and a `get` that fails
//!   (exit 2) when neither `validate(Full)` nor `verify` reported anything, are
//!   [`CliVerdict::Refused`]: the command loses data nobody reported damaged.
//! - `get` exiting 0 must have written exactly the pristine sample: each tensor field as a `.npy`
//!   of the same dtype, shape and bytes, bytes fields as `.bin`, JSON as `.json`, nothing for a
//!   null field and no other file ([`CliVerdict::WrongData`] otherwise).
//! - Any other exit status, a signal or a run past the timeout is [`CliVerdict::Crashed`].
//!
//! The command reads the four stowage formats; the example journal backend is not one of them,
//! so its trials are [`CliVerdict::NotRun`] and counted in a column of their own, never as passes.
//!
//! The binary is [`crate::stowage_bin::stowage_bin`]: `STOWAGE_BIN` when that is set, or else
//! built with cargo (the profile of the running code: `--release` for the campaign binary, the
//! dev profile under `cargo test`) and found from cargo's own artifact messages.

use super::trial::Verdict;
use rand::{SeedableRng, rngs::StdRng, seq::IndexedRandom};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use stowage_core::{Sample, Value};

/// The backends whose caches the `stowage` command reads.
pub const CLI_BACKENDS: [&str; 4] = ["npy", "memmap", "arrow", "hdf5"];

/// The most keys the library failed to get that [`GetKeys::Sample`] runs `stowage get` for.
pub const SUSPICIOUS_GETS: usize = 4;

/// Which keys a trial runs `stowage get` for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GetKeys {
    /// Every written key.
    All,
    /// The first [`SUSPICIOUS_GETS`] keys whose library `get` failed, lost the key or returned
    /// other bytes, and this many more, drawn from the trial's seed: one process per key, each
    /// opening the whole cache (about a second on a realistic one), makes every key of a
    /// 100,000-sample cache too slow for every trial.
    Sample(usize),
}

impl std::str::FromStr for GetKeys {
    type Err = String;

    /// `all` or a number.
    fn from_str(text: &str) -> Result<GetKeys, String> {
        match text {
            "all" => Ok(GetKeys::All),
            n => n.parse().map(GetKeys::Sample).map_err(|_| format!("{n:?} is not `all` or N")),
        }
    }
}

impl std::fmt::Display for GetKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            GetKeys::All => f.write_str("all"),
            GetKeys::Sample(n) => write!(f, "{n}"),
        }
    }
}

/// How trials run the command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CliConfig {
    /// The `stowage` binary.
    pub bin: PathBuf,
    /// The keys `get` is run for.
    pub gets: GetKeys,
    /// A run past this is killed and counts as [`CliVerdict::Crashed`].
    pub timeout: Duration,
}

/// What the command did with one damaged copy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CliVerdict {
    /// Not run (the command does not read this backend's caches, or no binary was given): shown
    /// in its own column, neither a pass nor a failure.
    NotRun {
        /// Why.
        why: String,
    },
    /// Every rule held.
    Passed {
        /// `verify`'s exit status.
        verify_exit: i32,
        /// Whether the library saw damage (so `verify` exiting 1 or 2 was a detection).
        damage: bool,
        /// `get` runs made.
        gets: u64,
    },
    /// `verify` said clean or `no problem` about damage the library sees: a failure.
    SaidClean {
        /// The exit status and what the command printed.
        detail: String,
    },
    /// `verify` could not open, or a `get` failed, where nothing reported damage: a failure.
    Refused {
        /// The command line, its exit status and what it printed.
        detail: String,
    },
    /// `get` exited 0 having written other bytes than the pristine sample's: a failure.
    WrongData {
        /// The key, the field and the difference.
        detail: String,
    },
    /// A signal, an exit status outside 0-3, or a timeout: a failure.
    Crashed {
        /// The command line and what happened.
        detail: String,
    },
}

impl CliVerdict {
    /// Whether this breaks a rule.
    pub fn is_failure(&self) -> bool {
        !matches!(self, CliVerdict::NotRun { .. } | CliVerdict::Passed { .. })
    }
}

/// How a run of the command ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Exit {
    /// It exited with this status.
    Code(i32),
    /// A signal killed it.
    Signal(i32),
    /// It ran past the timeout and was killed.
    TimedOut,
}

/// One run of the command.
#[derive(Debug, Clone)]
pub struct Run {
    /// The arguments after the binary.
    pub args: Vec<String>,
    /// How it ended.
    pub exit: Exit,
    /// Its standard output.
    pub stdout: String,
    /// Its standard error.
    pub stderr: String,
}

impl Run {
    /// `stowage ARGS: exit N: <the last lines it printed>`, on one line, for a report.
    pub fn describe(&self) -> String {
        let ended = match self.exit {
            Exit::Code(code) => format!("exit {code}"),
            Exit::Signal(signal) => format!("killed by signal {signal}"),
            Exit::TimedOut => "timed out".into(),
        };
        let printed = format!("{}\n{}", self.stdout.trim(), self.stderr.trim());
        let lines: Vec<&str> = printed.lines().filter(|l| !l.trim().is_empty()).collect();
        let tail = lines[lines.len().saturating_sub(3)..].join(" | ");
        let tail: String = tail.chars().take(400).collect();
        format!("`stowage {}`: {ended}: {tail}", self.args.join(" "))
    }

    /// The summary line says `clean` (verify's last line, `N samples, M files checked: clean`).
    fn says_clean(&self) -> bool {
        self.stdout
            .lines()
            .rev()
            .find(|l| !l.trim().is_empty())
            .is_some_and(|l| l.ends_with(": clean"))
    }
}

/// Runs `bin` with `args`, its output captured in files under `capture` (created), killed after
/// `timeout`.
///
/// Errors: the process could not be started or its output read (the harness's failure).
pub fn run(bin: &Path, args: &[String], timeout: Duration, capture: &Path) -> Result<Run, String> {
    std::fs::create_dir_all(capture).map_err(|e| format!("{}: {e}", capture.display()))?;
    let (out_path, err_path) = (capture.join("stdout"), capture.join("stderr"));
    let file = |p: &Path| std::fs::File::create(p).map_err(|e| format!("{}: {e}", p.display()));
    let mut child = Command::new(bin)
        .args(args)
        .stdin(Stdio::null())
        .stdout(file(&out_path)?)
        .stderr(file(&err_path)?)
        .spawn()
        .map_err(|e| format!("starting {}: {e}", bin.display()))?;
    let started = Instant::now();
    // Most runs take milliseconds: poll often at first, then back off.
    let mut pause = Duration::from_micros(200);
    let exit = loop {
        match child.try_wait().map_err(|e| format!("waiting for {}: {e}", bin.display()))? {
            Some(status) => {
                use std::os::unix::process::ExitStatusExt;
                break match (status.code(), status.signal()) {
                    (Some(code), _) => Exit::Code(code),
                    (None, Some(signal)) => Exit::Signal(signal),
                    (None, None) => Exit::Signal(0),
                };
            }
            None if started.elapsed() > timeout => {
                let _ = child.kill();
                let _ = child.wait();
                break Exit::TimedOut;
            }
            None => {
                std::thread::sleep(pause);
                pause = (pause * 2).min(Duration::from_millis(10));
            }
        }
    };
    let read = |p: &Path| {
        std::fs::read(p)
            .map(|b| String::from_utf8_lossy(&b).into_owned())
            .map_err(|e| format!("{}: {e}", p.display()))
    };
    Ok(Run { args: args.to_vec(), exit, stdout: read(&out_path)?, stderr: read(&err_path)? })
}

/// Where the command's output goes during a trial: a directory of this process in `/dev/shm`
/// when there is one, else `scratch/cli`. `stowage get` makes each file it writes durable
/// (fsync), which on a disk costs milliseconds per file and dominates a trial of 48 gets; on
/// tmpfs it costs nothing, and what is checked (the bytes written) is the same.
pub fn output_dir(scratch: &Path) -> PathBuf {
    use std::hash::{Hash, Hasher};
    let shm = Path::new("/dev/shm");
    // Named after the process and the scratch directory: tests run campaigns on several threads.
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    scratch.hash(&mut hasher);
    match shm.is_dir() {
        true => {
            shm.join(format!("stowage-corruption-{}-{:x}", std::process::id(), hasher.finish()))
        }
        false => scratch.join("cli"),
    }
}

/// The keys a trial gets: see [`GetKeys`]. `suspicious` are those the library's `get` did not
/// return intact, in put order.
pub fn keys_to_get(
    gets: GetKeys,
    written: &[(String, Sample)],
    suspicious: &[String],
    seed: u64,
) -> Vec<usize> {
    let index: std::collections::HashMap<&str, usize> =
        written.iter().enumerate().map(|(i, (k, _))| (k.as_str(), i)).collect();
    match gets {
        GetKeys::All => (0..written.len()).collect(),
        GetKeys::Sample(n) => {
            let mut chosen: Vec<usize> = suspicious
                .iter()
                .filter_map(|k| index.get(k.as_str()).copied())
                .take(SUSPICIOUS_GETS)
                .collect();
            let mut rng = StdRng::seed_from_u64(seed ^ 0x636c_6967_6574);
            let all: Vec<usize> = (0..written.len()).collect();
            chosen.extend(all.choose_multiple(&mut rng, n.min(written.len())).copied());
            chosen.sort_unstable();
            chosen.dedup();
            chosen
        }
    }
}

/// Runs `verify` and `get` on the damaged `copy` and scores them against `library` (what the
/// backend itself did with the copy). `work` is a scratch directory for output (outside `copy`).
///
/// Errors: the harness could not run the command or read what it wrote.
pub fn score(
    config: &CliConfig,
    copy: &Path,
    written: &[(String, Sample)],
    keys: &[usize],
    library: &Verdict,
    work: &Path,
) -> Result<CliVerdict, String> {
    let damage = matches!(
        library,
        Verdict::DetectedAtOpen { .. }
            | Verdict::DetectedByValidate { .. }
            | Verdict::Missed { .. }
    );
    let capture = work.join("capture");
    let verify_args = vec!["verify".to_string(), copy.display().to_string()];
    let verify = run(&config.bin, &verify_args, config.timeout, &capture)?;
    let verify_exit = match verify.exit {
        Exit::Code(code @ 0..=3) => code,
        _ => return Ok(CliVerdict::Crashed { detail: verify.describe() }),
    };
    let mut refused = None;
    let mut said_clean = None;
    if damage && (verify_exit == 0 || verify_exit == 3 || verify.says_clean()) {
        said_clean = Some(format!("{}; the library: {}", verify.describe(), library_saw(library)));
    }
    if !damage && verify_exit == 2 {
        refused = Some(format!(
            "{}, but the library opens the copy and validate(Full) reports nothing",
            verify.describe()
        ));
    }
    let verify_detected = verify_exit == 1 || verify_exit == 2;
    let out_dir = work.join("get-out");
    for &i in keys {
        let (key, want) = &written[i];
        let _ = std::fs::remove_dir_all(&out_dir);
        let args = vec![
            "get".to_string(),
            "--out".into(),
            out_dir.display().to_string(),
            copy.display().to_string(),
            "--".into(),
            key.clone(),
        ];
        let got = run(&config.bin, &args, config.timeout, &capture)?;
        match got.exit {
            Exit::Code(0) => {
                if let Err(difference) = compare_written(&out_dir, want) {
                    let detail = format!("key {key:?}: {difference} ({})", got.describe());
                    return Ok(CliVerdict::WrongData { detail });
                }
            }
            Exit::Code(2) => {
                if !damage && !verify_detected && refused.is_none() {
                    refused = Some(format!(
                        "{}, but neither validate(Full) nor `stowage verify` (exit {verify_exit}) \
                         reported damage",
                        got.describe()
                    ));
                }
            }
            _ => return Ok(CliVerdict::Crashed { detail: got.describe() }),
        }
    }
    let _ = std::fs::remove_dir_all(&out_dir);
    Ok(match (said_clean, refused) {
        (Some(detail), _) => CliVerdict::SaidClean { detail },
        (None, Some(detail)) => CliVerdict::Refused { detail },
        (None, None) => CliVerdict::Passed { verify_exit, damage, gets: keys.len() as u64 },
    })
}

/// What the library saw, for a failure line.
fn library_saw(library: &Verdict) -> String {
    match library {
        Verdict::DetectedAtOpen { .. } => "open refused the copy".into(),
        Verdict::DetectedByValidate { .. } => "validate(Full) reported damage".into(),
        Verdict::Missed { detail } => format!("a get suffered: {detail}"),
        other => format!("{other:?}"),
    }
}

/// Runs `verify` on the undamaged cache (it must exit 0 and say clean) and `get` of its first
/// key (it must write that sample): a command that fails on the pristine cache would make every
/// trial's score meaningless.
///
/// Errors: what the command did instead, or why it could not be run.
pub fn check_pristine(
    config: &CliConfig,
    pristine: &Path,
    written: &[(String, Sample)],
    work: &Path,
) -> Result<(), String> {
    let verify_args = vec!["verify".to_string(), pristine.display().to_string()];
    let verify = run(&config.bin, &verify_args, config.timeout, &work.join("capture"))?;
    if verify.exit != Exit::Code(0) || !verify.says_clean() {
        return Err(format!("on the undamaged cache: {}", verify.describe()));
    }
    let Some((key, want)) = written.first() else { return Ok(()) };
    let out_dir = work.join("get-out");
    let _ = std::fs::remove_dir_all(&out_dir);
    let args = vec![
        "get".to_string(),
        "--out".into(),
        out_dir.display().to_string(),
        pristine.display().to_string(),
        "--".into(),
        key.clone(),
    ];
    let got = run(&config.bin, &args, config.timeout, &work.join("capture"))?;
    if got.exit != Exit::Code(0) {
        return Err(format!("on the undamaged cache: {}", got.describe()));
    }
    compare_written(&out_dir, want).map_err(|e| format!("on the undamaged cache: key {key:?}: {e}"))
}

/// Whether `dir` holds exactly what `stowage get` writes for `want`: `FIELD.npy` (numpy's
/// header for the tensor's storage dtype and shape, then its bytes) per tensor, `FIELD.bin` per
/// bytes field, `FIELD.json` per JSON field, nothing for a null, and no other file.
///
/// Errors: the first difference.
pub fn compare_written(dir: &Path, want: &Sample) -> Result<(), String> {
    use stowage_core::npy_header::{parse, storage_descr};
    let mut expected = std::collections::BTreeSet::new();
    for (name, value) in want.fields() {
        let read = |file: &str| std::fs::read(dir.join(file)).map_err(|e| format!("{file}: {e}"));
        match value {
            Value::Tensor(tensor) => {
                let file = format!("{name}.npy");
                let bytes = read(&file)?;
                let header = parse(&bytes).map_err(|e| format!("{file}: {e}"))?;
                let want_descr = storage_descr(tensor.dtype());
                if header.descr != want_descr || header.shape != tensor.shape() {
                    return Err(format!(
                        "{file}: {} {:?}, expected {want_descr} {:?}",
                        header.descr,
                        header.shape,
                        tensor.shape()
                    ));
                }
                if bytes.get(header.data_offset..) != Some(tensor.bytes()) {
                    return Err(format!("{file}: other bytes than the pristine sample's"));
                }
                expected.insert(file);
            }
            Value::Bytes(want_bytes) => {
                let file = format!("{name}.bin");
                if read(&file)? != want_bytes[..] {
                    return Err(format!("{file}: other bytes than the pristine sample's"));
                }
                expected.insert(file);
            }
            Value::Json(text) => {
                let file = format!("{name}.json");
                if read(&file)? != text.as_bytes() {
                    return Err(format!("{file}: other text than the pristine sample's"));
                }
                expected.insert(file);
            }
            Value::Null => {}
        }
    }
    let entries = std::fs::read_dir(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    for entry in entries {
        let name = entry.map_err(|e| e.to_string())?.file_name().to_string_lossy().into_owned();
        if !expected.contains(&name) {
            return Err(format!("wrote {name}, which the pristine sample has no field for"));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use stowage_core::Tensor;

    #[test]
    fn a_written_sample_must_match_exactly() {
        let dir = tempfile::tempdir().unwrap();
        let tensor = Tensor::from_slice(&[2], &[1i32, 2]).unwrap();
        let header = stowage_core::npy_header::write_header(tensor.dtype(), tensor.shape());
        let npy = [header.clone(), tensor.bytes().to_vec()].concat();
        std::fs::write(dir.path().join("t.npy"), &npy).unwrap();
        std::fs::write(dir.path().join("m.json"), "{}").unwrap();
        let want = Sample::new()
            .with("t", tensor.clone())
            .with("m", Value::Json("{}".into()))
            .with("n", Value::Null);
        compare_written(dir.path(), &want).unwrap();
        let other = Sample::new()
            .with("t", Tensor::from_slice(&[2], &[1i32, 3]).unwrap())
            .with("m", Value::Json("{}".into()));
        assert!(compare_written(dir.path(), &other).unwrap_err().contains("other bytes"));
        std::fs::write(dir.path().join("n.npy"), &npy).unwrap();
        assert!(compare_written(dir.path(), &want).unwrap_err().contains("wrote n.npy"));
    }

    #[test]
    fn sampled_keys_include_the_suspicious_ones_and_are_seeded() {
        let written: Vec<(String, Sample)> =
            (0..100).map(|i| (format!("k{i}"), Sample::new())).collect();
        let picked = keys_to_get(GetKeys::Sample(5), &written, &["k42".into()], 9);
        assert!(picked.contains(&42) && picked.len() <= 6 && picked.len() >= 5, "{picked:?}");
        assert_eq!(picked, keys_to_get(GetKeys::Sample(5), &written, &["k42".into()], 9));
        assert_eq!(keys_to_get(GetKeys::All, &written, &[], 9).len(), 100);
        assert_eq!("all".parse::<GetKeys>(), Ok(GetKeys::All));
        assert_eq!("8".parse::<GetKeys>(), Ok(GetKeys::Sample(8)));
    }
}
