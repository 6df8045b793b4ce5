//! The **mixed-sequence crash** campaign (issue 14): stowage and an original tool write the
//! same cache in turn, a stowage writer is SIGKILLed at a random moment, and nothing either
//! tool acknowledged is lost. One subject per format pair ([`pair::Pair`]): arrow+torchcachex,
//! memmap+DNANet, npy+hangar, hdf5+aenet.
//!
//! A trial, all decided by its seed ([`trial::run_trial`]):
//!
//! 1. The tool writes a first batch through its peer ([`peer`]): into a new cache where the
//!    tool can start one (torchcachex, DNANet, aenet's dataset file), or into a cache stowage
//!    created and wrote a first batch to (always for hangar; by seed for the others).
//! 2. A stowage child ([`child`]) opens the cache for writing the way a user would and runs a
//!    generated session ([`session`]): puts, flushes, maybe an adopt, maybe a finalize. It is
//!    killed with SIGKILL at a moment aimed inside the open (recovery), a put batch, a flush, the
//!    adopt or the finalize, following the crash campaign's begin/end protocol
//!    ([`crate::crash::kill`]).
//! 3. The tool appends another batch to what the kill left: it must succeed.
//! 4. For some seeds stowage resumes once more, appends, maybe adopts, and finalizes.
//! 5. The checks ([`check`]), then both tools write once more (where the format lets them) and
//!    the checks run again.
//!
//! The checks: every sample either tool acknowledged ([`ledger::Written::Acknowledged`]:
//! stowage's puts before a flush, adopt or finalize that returned; the tool's when its call
//! returned) is present and byte-identical when read through stowage and through the tool's
//! peer; every present sample is the value put for its key (nothing partial, nothing put by
//! no one); after recovery (a stowage writer opened and closed, as the crash campaign
//! validates), stowage's `validate(Full)` reports no problem and lists as unchecked exactly the
//! tool's data that no adopt covers (nothing of stowage's own); the files the tool wrote are
//! byte-identical to what it left (torchcachex's segments and `schema.json`, hangar's
//! collection files and markers, DNANet's rows and manifest; aenet's rows, which stowage
//! rebuilds, by value, and its dataset's own rows); and the cache takes more writes from both.
//! A failing trial is replayed with `crash --mixed --backends <backend> --seed <seed> --trials
//! 1` (the kill lands at a slightly different instant).
//!
//! Failure model: SIGKILL only. The original tools do not make their writes durable (no fsync of
//! torchcachex's segments, DNANet's rows or aenet's file; hangar syncs no directory or marker),
//! so a power cut may lose what they acknowledged by their own design; the crash campaign's
//! power-loss model stays for stowage's own caches ([`crate::crash`]).

pub mod check;
pub mod child;
pub mod formats;
pub mod ledger;
pub mod pair;
pub mod peer;
pub mod report;
pub mod session;
pub mod trial;

pub use report::{CampaignReport, Tally};
pub use trial::{Sabotage, TrialReport, TrialSetup, run_trial};

use pair::Pair;
use peer::ToolPeer;
use std::path::PathBuf;

/// How a campaign runs.
#[derive(Debug, Clone)]
pub struct CampaignOptions {
    /// Trials per pair.
    pub trials: u64,
    /// The first trial's seed; trial `i` uses `seed + i`.
    pub seed: u64,
    /// The executable that runs the child (`--mixed-child <pair> <cache> <seed>`, see
    /// [`child::child_main`]): the `crash` binary.
    pub exe: PathBuf,
    /// Where trial directories go (each removed after its trial).
    pub scratch: PathBuf,
    /// Keep failing trials' directories under `scratch`.
    pub keep_failed: bool,
}

/// Runs every trial of every pair (with its tool's peer), calling `progress` after each.
///
/// ```no_run
/// use stowage_reliability::mixed::{CampaignOptions, pair::Pair, peer::ToolPeer, run_campaign};
/// // torchcachex's peer needs python3 with numpy and pyarrow.
/// let pairs = vec![(Pair::Arrow, ToolPeer::find(Pair::Arrow)?)];
/// let scratch = tempfile::tempdir().map_err(|e| e.to_string())?;
/// let options = CampaignOptions {
///     trials: 3,
///     seed: 1,
///     exe: "target/release/crash".into(), // runs `--mixed-child`
///     scratch: scratch.path().to_path_buf(),
///     keep_failed: false,
/// };
/// let report = run_campaign(&pairs, &options, |trial| println!("{:?}", trial.failure));
/// print!("{}", report.render(true));
/// assert_eq!(report.failures().count(), 0);
/// # Ok::<(), String>(())
/// ```
pub fn run_campaign(
    pairs: &[(Pair, ToolPeer)],
    options: &CampaignOptions,
    mut progress: impl FnMut(&TrialReport),
) -> CampaignReport {
    let mut report = CampaignReport::default();
    let setup = TrialSetup {
        exe: &options.exe,
        scratch: &options.scratch,
        keep_failed: options.keep_failed,
    };
    for (pair, tool) in pairs {
        for i in 0..options.trials {
            let seed = options.seed.wrapping_add(i);
            let trial = run_trial(*pair, tool, seed, setup, None, Sabotage::None);
            progress(&trial);
            report.tally(*pair).add(&trial);
        }
    }
    report
}
