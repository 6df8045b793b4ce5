//! One trial: damage one file of a fresh copy of the pristine cache, then open it, `get` every
//! key and `validate(Full)`, and classify what the backend did.

use super::pristine::Pristine;
use rand::{Rng, SeedableRng, rngs::StdRng};
use std::fmt;
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use stowage_conformance::corrupt::{copy_tree, truncate};
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
    /// A `get` failed or lost its key but validate reported a clean cache: a failure.
    Missed {
        /// What get saw.
        detail: String,
    },
    /// A `get` returned bytes other than those written: a failure.
    WrongData {
        /// The key, field and both sides.
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
            Verdict::Missed { .. } | Verdict::WrongData { .. } | Verdict::Panicked { .. } => true,
        }
    }
}

/// Runs `trial` on a fresh copy of `pristine` made at `scratch` (replaced if present, removed
/// afterwards), catching any panic of the backend as [`Verdict::Panicked`].
///
/// Errors: the copy or the damage could not be made (the harness's failure, not the backend's).
pub fn run(
    factory: &dyn BackendFactory,
    pristine: &Pristine,
    trial: &Trial,
    scratch: &Path,
) -> Result<Verdict, String> {
    if scratch.exists() {
        std::fs::remove_dir_all(scratch)
            .map_err(|e| format!("clearing {}: {e}", scratch.display()))?;
    }
    copy_tree(&pristine.path, scratch).map_err(|e| {
        format!("copying {} to {}: {e}", pristine.path.display(), scratch.display())
    })?;
    trial.apply(scratch).map_err(|e| format!("{trial}: applying the damage: {e}"))?;
    let verdict = super::panic_capture::catching(|| examine(factory, pristine, trial, scratch))
        .unwrap_or_else(|detail| Verdict::Panicked { detail });
    let _ = std::fs::remove_dir_all(scratch);
    Ok(verdict)
}

/// Opens the damaged copy at `copy`, gets every written key, validates, and classifies.
fn examine(
    factory: &dyn BackendFactory,
    pristine: &Pristine,
    trial: &Trial,
    copy: &Path,
) -> Verdict {
    let reader = match factory.open(copy, OpenMode::ReadOnly) {
        Ok(reader) => reader,
        Err(e) => {
            let text = e.to_string();
            let name = trial.file.file_name().map(|n| n.to_string_lossy().into_owned());
            return Verdict::DetectedAtOpen { names_file: name.is_some_and(|n| text.contains(&n)) };
        }
    };
    let mut get_noticed = None;
    for (key, want) in &pristine.written {
        match reader.get(key) {
            Ok(Some(got)) => {
                if let Err(detail) = compare(key, want, Some(&got)) {
                    return Verdict::WrongData { detail };
                }
            }
            Ok(None) => get_noticed = Some(format!("get({key:?}) returned None (key lost)")),
            Err(e) => get_noticed = Some(format!("get({key:?}) failed: {e}")),
        }
    }
    match reader.validate(ValidationLevel::Full) {
        Err(_) => Verdict::DetectedByValidate { by_error: true },
        Ok(report) if !report.is_clean() => Verdict::DetectedByValidate { by_error: false },
        Ok(_) => match get_noticed {
            Some(seen) => Verdict::Missed {
                detail: format!("{seen}, but validate(Full) reported a clean cache"),
            },
            None => Verdict::Undetected,
        },
    }
}
