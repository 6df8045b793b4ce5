//! One trial: damage one file of a fresh copy of the pristine cache, then open it, `get` every
//! key, compare `keys()` and `len()` with what was written, `validate(Full)`, and classify what
//! the backend did; then score the `stowage` command on the same copy.

use super::cli_check::{CLI_BACKENDS, CliConfig, CliVerdict, keys_to_get, output_dir, score};
use super::pristine::Pristine;
use rand::{Rng, SeedableRng, rngs::StdRng};
use std::fmt;
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use stowage_conformance::corrupt::truncate;
use stowage_conformance::generate::compare;
use stowage_core::{BackendFactory, OpenMode, ValidationLevel};

/// The two kinds of damage.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum DamageKind {
    /// One byte XORed with a random non-zero mask.
    Flip,
    /// The file cut to a random shorter length.
    Truncation,
}

impl DamageKind {
    /// The name used in trial ids (`flip:17`).
    pub fn name(self) -> &'static str {
        match self {
            DamageKind::Flip => "flip",
            DamageKind::Truncation => "truncation",
        }
    }
}

/// Which trial of a campaign: its kind and number. With the campaign seed it fixes the file, the
/// offset and the mask, whatever the other trials are, so one trial can be replayed alone.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TrialId {
    /// Flip or truncation.
    pub kind: DamageKind,
    /// The trial's number among those of its kind, from 0.
    pub number: u64,
}

impl fmt::Display for TrialId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.kind.name(), self.number)
    }
}

impl std::str::FromStr for TrialId {
    type Err = String;

    /// Parses `flip:17` or `truncation:3`.
    fn from_str(text: &str) -> Result<TrialId, String> {
        let bad = || format!("trial id {text:?} is not flip:N or truncation:N");
        let (kind, number) = text.split_once(':').ok_or_else(bad)?;
        let kind = match kind {
            "flip" => DamageKind::Flip,
            "truncation" => DamageKind::Truncation,
            _ => return Err(bad()),
        };
        Ok(TrialId { kind, number: number.parse().map_err(|_| bad())? })
    }
}

/// One planned trial: what to damage, where and how.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Trial {
    /// Which trial this is.
    pub id: TrialId,
    /// The seed its choices were drawn from (derived from the campaign seed and the id).
    pub seed: u64,
    /// The damaged file, relative to the cache directory.
    pub file: PathBuf,
    /// The flipped byte's offset, or the truncated file's new length.
    pub offset: u64,
    /// The XOR mask of a flip (unused by a truncation).
    pub mask: u8,
}

impl fmt::Display for Trial {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.id.kind {
            DamageKind::Flip => write!(
                f,
                "{} (seed {:#x}): byte {} of {} XOR {:#04x}",
                self.id,
                self.seed,
                self.offset,
                self.file.display(),
                self.mask
            ),
            DamageKind::Truncation => write!(
                f,
                "{} (seed {:#x}): {} cut to {} bytes",
                self.id,
                self.seed,
                self.file.display(),
                self.offset
            ),
        }
    }
}

/// SplitMix64's finalizer: spreads nearby inputs (campaign seed, trial number) over all 64 bits.
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

impl Trial {
    /// Plans trial `id` of the campaign with `seed` over `pristine`'s files: a uniformly random
    /// file, then a uniformly random offset in it (a flip's byte, or a truncation's new length,
    /// always shorter than the file) and a non-zero mask.
    pub fn plan(seed: u64, id: TrialId, pristine: &Pristine) -> Trial {
        let kind_salt = match id.kind {
            DamageKind::Flip => 0x666c_6970,
            DamageKind::Truncation => 0x7472_756e,
        };
        let trial_seed = mix(mix(seed ^ kind_salt).wrapping_add(id.number));
        let mut rng = StdRng::seed_from_u64(trial_seed);
        let (file, len) = &pristine.files[rng.random_range(0..pristine.files.len())];
        Trial {
            id,
            seed: trial_seed,
            file: file.clone(),
            offset: rng.random_range(0..*len),
            mask: rng.random_range(1..=u8::MAX),
        }
    }

    /// Applies the damage to the copy of the cache at `copy`.
    pub fn apply(&self, copy: &Path) -> std::io::Result<()> {
        let path = copy.join(&self.file);
        match self.id.kind {
            DamageKind::Flip => xor_byte(&path, self.offset, self.mask),
            DamageKind::Truncation => truncate(&path, self.offset),
        }
    }
}

/// XORs the byte at `offset` of `path` with `mask`, in place.
fn xor_byte(path: &Path, offset: u64, mask: u8) -> std::io::Result<()> {
    let mut file = std::fs::OpenOptions::new().read(true).write(true).open(path)?;
    let mut byte = [0u8];
    file.seek(SeekFrom::Start(offset))?;
    file.read_exact(&mut byte)?;
    byte[0] ^= mask;
    file.seek(SeekFrom::Start(offset))?;
    file.write_all(&byte)
}

/// What the backend did with one damaged copy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Open refused the cache. `names_file` says whether the error named the damaged file.
    DetectedAtOpen {
        /// The error text names the damaged file.
        names_file: bool,
    },
    /// `validate(Full)` listed a problem (or failed with an error: `by_error`).
    DetectedByValidate {
        /// Validate returned an error instead of a report listing the problem.
        by_error: bool,
    },
    /// Every `get` returned the written sample and validate was clean: the damage landed in bytes
    /// nothing reads (padding, unused slots). A failure for a truncation.
    Undetected,
    /// A `get` failed or lost its key, or `keys()` failed or lost or gained a key, but validate
    /// reported a clean cache: a failure.
    Missed {
        /// What get saw.
        detail: String,
    },
    /// A `get` returned bytes other than those written: a failure.
    WrongData {
        /// The key, field and both sides.
        detail: String,
    },
    /// `len()` disagreed with the number of keys `keys()` listed: a failure, whatever validate
    /// said.
    Inconsistent {
        /// Both numbers.
        detail: String,
    },
    /// The trial panicked (or, seen from a supervising process, aborted or hung): a failure.
    Panicked {
        /// The panic message and location.
        detail: String,
    },
}

impl Verdict {
    /// Whether this outcome breaks the campaign's rules for a trial of `kind`.
    pub fn is_failure(&self, kind: DamageKind) -> bool {
        match self {
            Verdict::DetectedAtOpen { .. } | Verdict::DetectedByValidate { .. } => false,
            Verdict::Undetected => kind == DamageKind::Truncation,
            Verdict::Missed { .. }
            | Verdict::WrongData { .. }
            | Verdict::Inconsistent { .. }
            | Verdict::Panicked { .. } => true,
        }
    }
}

/// What one trial came to: the backend's own verdict and the `stowage` command's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    /// What the backend (open, get, keys, len, validate) did.
    pub verdict: Verdict,
    /// What the command (`verify`, `get`) did.
    pub cli: CliVerdict,
}

impl Outcome {
    /// Whether either breaks a rule for a trial of `kind`.
    pub fn is_failure(&self, kind: DamageKind) -> bool {
        self.verdict.is_failure(kind) || self.cli.is_failure()
    }
}

/// Runs `trial` on a fresh copy of `pristine` made at `scratch` (replaced if present, removed
/// afterwards), catching any panic of the backend as [`Verdict::Panicked`], then, when `cli` is
/// given and the command reads the backend's caches, scores the command on the same copy
/// ([`super::cli_check`]).
///
/// The copy hard-links every file but the damaged one ([`Pristine::link_copy`]); after the trial
/// the pristine cache is checked unchanged ([`Pristine::check_untouched`]).
///
/// Errors: the copy or the damage could not be made, the command could not be started, or the
/// pristine cache changed (the harness's failures, not the backend's).
pub fn run(
    factory: &dyn BackendFactory,
    pristine: &Pristine,
    trial: &Trial,
    scratch: &Path,
    cli: Option<&CliConfig>,
) -> Result<Outcome, String> {
    if scratch.exists() {
        std::fs::remove_dir_all(scratch)
            .map_err(|e| format!("clearing {}: {e}", scratch.display()))?;
    }
    let copy = scratch.join("cache");
    pristine
        .link_copy(&copy, &trial.file)
        .map_err(|e| format!("copying {} to {}: {e}", pristine.path.display(), copy.display()))?;
    trial.apply(&copy).map_err(|e| format!("{trial}: applying the damage: {e}"))?;
    let outcome = judge(factory, pristine, &trial.file, trial.seed, scratch, cli)
        .map_err(|e| format!("{trial}: {e}"))?;
    let _ = std::fs::remove_dir_all(scratch);
    pristine.check_untouched()?;
    Ok(outcome)
}

/// Judges the damaged copy at `scratch/cache` (whose file `damaged`, relative, was damaged): the
/// backend's verdict (panics caught), then the command's when `cli` is given and it reads the
/// backend's caches. `seed` draws the keys `get` samples. For damage other than a trial's
/// (a deleted file, say), make the copy with [`Pristine::link_copy`] and damage it first.
///
/// Errors: the command could not be started or its output read.
pub fn judge(
    factory: &dyn BackendFactory,
    pristine: &Pristine,
    damaged: &Path,
    seed: u64,
    scratch: &Path,
    cli: Option<&CliConfig>,
) -> Result<Outcome, String> {
    let copy = scratch.join("cache");
    let (verdict, suspicious) =
        super::panic_capture::catching(|| examine(factory, pristine, damaged, &copy))
            .unwrap_or_else(|detail| (Verdict::Panicked { detail }, Vec::new()));
    let backend = factory.name();
    let cli = match cli {
        None => CliVerdict::NotRun { why: "no stowage binary given".into() },
        Some(_) if !CLI_BACKENDS.contains(&backend) => CliVerdict::NotRun {
            why: format!("the stowage command does not read {backend} caches"),
        },
        Some(config) => {
            let keys = keys_to_get(config.gets, &pristine.written, &suspicious, seed);
            let output = output_dir(scratch);
            let scored = score(config, &copy, &pristine.written, &keys, &verdict, &output);
            let _ = std::fs::remove_dir_all(&output);
            scored.map_err(|e| format!("running the stowage command: {e}"))?
        }
    };
    Ok(Outcome { verdict, cli })
}

/// Opens the damaged copy at `copy`, gets every written key, compares `keys()` and `len()`,
/// validates, and classifies; also returns the keys whose `get` failed or lost the key.
fn examine(
    factory: &dyn BackendFactory,
    pristine: &Pristine,
    damaged: &Path,
    copy: &Path,
) -> (Verdict, Vec<String>) {
    let reader = match factory.open(copy, OpenMode::ReadOnly) {
        Ok(reader) => reader,
        Err(e) => {
            let text = e.to_string();
            let name = damaged.file_name().map(|n| n.to_string_lossy().into_owned());
            let names_file = name.is_some_and(|n| text.contains(&n));
            return (Verdict::DetectedAtOpen { names_file }, Vec::new());
        }
    };
    let mut noticed = None;
    let mut suspicious = Vec::new();
    for (key, want) in &pristine.written {
        match reader.get(key) {
            Ok(Some(got)) => {
                if let Err(detail) = compare(key, want, Some(&got)) {
                    return (Verdict::WrongData { detail }, vec![key.clone()]);
                }
            }
            Ok(None) => {
                noticed = Some(format!("get({key:?}) returned None (key lost)"));
                suspicious.push(key.clone());
            }
            Err(e) => {
                noticed = Some(format!("get({key:?}) failed: {e}"));
                suspicious.push(key.clone());
            }
        }
    }
    // keys() and len() of the damaged copy against what was written: a key that vanished or
    // appeared is damage validate must report, and len() must always agree with keys().
    match reader.keys() {
        Ok(keys) => {
            if keys.len() != reader.len() {
                let detail =
                    format!("len() is {} but keys() lists {} keys", reader.len(), keys.len());
                return (Verdict::Inconsistent { detail }, suspicious);
            }
            let listed: std::collections::HashSet<&str> = keys.iter().map(String::as_str).collect();
            let lost = pristine.written.iter().find(|(k, _)| !listed.contains(k.as_str()));
            let written: std::collections::HashSet<&str> =
                pristine.written.iter().map(|(k, _)| k.as_str()).collect();
            let extra = keys.iter().find(|k| !written.contains(k.as_str()));
            if let Some((key, _)) = lost {
                noticed = Some(format!("keys() no longer lists {key:?}"));
            } else if let Some(key) = extra {
                noticed = Some(format!("keys() lists {key:?}, which was never written"));
            } else if keys.len() != written.len() {
                noticed =
                    Some(format!("keys() lists {} keys, {} written", keys.len(), written.len()));
            }
        }
        Err(e) => noticed = Some(format!("keys() failed: {e}")),
    }
    let verdict = match reader.validate(ValidationLevel::Full) {
        Err(_) => Verdict::DetectedByValidate { by_error: true },
        Ok(report) if !report.is_clean() => Verdict::DetectedByValidate { by_error: false },
        Ok(_) => match noticed {
            Some(seen) => Verdict::Missed {
                detail: format!("{seen}, but validate(Full) reported a clean cache"),
            },
            None => Verdict::Undetected,
        },
    };
    (verdict, suspicious)
}
