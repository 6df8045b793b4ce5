//! The power-loss cases: the writer child processes of the crash cases ([`crate::crash`]) run
//! under the `faultfs` interposer, which records what each `fsync` made durable
//! ([`crate::durable_image`]). After the kill the cache is cut back to that durable image, the
//! unsynced writes torn at block boundaries ([`Tearing`]), and the cache rebuilt from it must
//! still keep every flushed sample (or every finalized one). A kill alone leaves the page cache
//! intact, so only these cases catch a backend that acknowledges a flush it never fsynced, or
//! that fsyncs a commit point before the data it names.
//!
//! Both need a child process and the interposer (Linux only); without either they report
//! SKIPPED, never a pass.

use crate::check::ok;
use crate::crash::{
    FinalizeKill, KillPoint, check_after_crash, finalize_crash_trial, finish_by_next_writer,
    kill_finalize_writer, kill_flush_writer,
};
use crate::durable_image::{self, DurableImage, Rebuilt, Tearing};
use crate::generate::basic_schema;
use crate::injector::{canonical, preload_env};
use crate::{CaseContext, CaseResult, ChildLauncher, Failure, Outcome, ensure};
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use stowage_core::{OpenMode, ValidationLevel};

/// Where the flush case kills its writers: right after a flush returned (the most telling
/// moment: everything acknowledged must be on disk), a little later (inside a put), and inside
/// a flush, always after at least one flush returned, so that the cache itself must survive.
const FLUSH_KILLS: [KillPoint; 4] = [
    KillPoint::AfterFlush { flush: 2, delay_us: 0 },
    KillPoint::InsideFlush { flush: 3, delay_us: 150 },
    KillPoint::AfterFlush { flush: 4, delay_us: 1_500 },
    KillPoint::InsideFlush { flush: 5, delay_us: 2_000 },
];

/// Where the finalize case kills its writers: at the start of finalize, inside it, and after it
/// returned (then the cache must be finalized and complete after the power cut too).
const FINALIZE_KILLS: [FinalizeKill; 4] = [
    FinalizeKill::During { delay_us: 0 },
    FinalizeKill::During { delay_us: 400 },
    FinalizeKill::During { delay_us: 3_000 },
    FinalizeKill::After,
];

/// One power-loss trial's directories: the modelled tree (the cache at `fs/cache`) and the
/// child's stderr beside it.
struct Trial {
    image: DurableImage,
    cache: PathBuf,
    stderr: PathBuf,
    env: Vec<(OsString, OsString)>,
}

impl Trial {
    /// Prepares `<case dir>/<name>`, canonical (the interposer compares kernel names).
    fn prepare(ctx: &CaseContext<'_>, name: &str) -> Result<Trial, Failure> {
        let base = canonical(ctx.dir).join(name);
        let image = DurableImage::prepare(&base).map_err(|e| {
            Failure::new(format!("preparing the durable image in {}", base.display()), "success", e)
        })?;
        let env = image
            .env("")
            .map_err(|e| Failure::new("loading the faultfs interposer", "its library", e))?;
        let cache = image.root().join("cache");
        let stderr = base.join("child.stderr");
        Ok(Trial { image, cache, stderr, env: preload_env(env) })
    }

    /// After the kill: whether the model ran (`Some(reason)` to skip if not), then the power
    /// cut, torn as `seed` says.
    fn cut_power(&self, seed: u64) -> Result<Result<Rebuilt, String>, Failure> {
        if !self.image.was_loaded() {
            return Ok(Err("needs the faultfs interposer loaded into the writer child, but \
                           LD_PRELOAD had no effect (a statically linked test binary?)"
                .into()));
        }
        let unmodeled = self.image.unmodeled();
        if !unmodeled.is_empty() {
            return Ok(Err(format!(
                "needs writes the power-loss model can follow (write/pwrite and fsync); the \
                 backend also did {unmodeled:?}"
            )));
        }
        let rebuilt = self.image.cut_power_torn(Some(Tearing::for_trial(seed))).map_err(|e| {
            Failure::new("rebuilding the cache from its durable image", "success", e)
        })?;
        Ok(Ok(rebuilt))
    }
}

/// Why the finalize power-loss case (and the I/O-error case) do not apply to a backend without
/// `durable_flush`: its `Ok` only promises that the data reached the operating system.
pub(crate) const NOT_DURABLE: &str = "durable_flush not declared (a power cut may lose what \
    flush acknowledged; kill -9 is checked by the crash cases)";

/// Kills a writer child, under the `faultfs` power-loss model, right after a flush returned,
/// inside a put and inside a flush; then cuts the power (only what was fsynced survives, and
/// of each file's unsynced bytes a random number of whole 512- or 4096-byte blocks). The cache
/// rebuilt from the durable image must open; every sample a completed flush acknowledged is
/// present and byte-identical (with `durable_flush`: without it, any may be lost), every other
/// visible key holds exactly its sample (never a partial one), `validate(Full)` is clean and
/// (with `resume`) the next writer can finish it.
///
/// Needs a child process, the interposer (Linux) and caches that are local files; SKIPPED
/// without any of them.
pub fn power_loss_keeps_every_flushed_sample(ctx: &CaseContext<'_>) -> CaseResult {
    if let Some(why) = crate::crash::not_local_files(ctx) {
        return Ok(Outcome::Skipped(why));
    }
    let launcher = match launcher(ctx) {
        Ok(launcher) => launcher,
        Err(skipped) => return Ok(skipped),
    };
    let durable = ctx.caps().durable_flush;
    let clause = if durable { "flush.crash-keeps-flushed" } else { "flush.power-loss-never-torn" };
    for (trial, point) in FLUSH_KILLS.into_iter().enumerate() {
        let seed = 0x504f_5745 + trial as u64;
        let t = Trial::prepare(ctx, &format!("power-loss{trial}"))?;
        let flushed = kill_flush_writer(launcher, &t.cache, &t.stderr, &t.env, seed, point)?;
        // Without `durable_flush` a flush promises nothing against a power cut.
        let acknowledged = if durable { flushed } else { 0 };
        let rebuilt = match t.cut_power(seed)? {
            Ok(rebuilt) => rebuilt,
            Err(why) => return Ok(Outcome::Skipped(why)),
        };
        let what = format!(
            "power cut {trial} (killed {point:?}, {flushed} samples flushed, durable_flush \
             {durable}; the cut lost {} changed files, tore {})",
            rebuilt.lost, rebuilt.torn
        );
        check_flushed(ctx, &t.cache, acknowledged).map_err(|f| f.within(&what).clause(clause))?;
    }
    Ok(Outcome::Passed)
}

/// The checks of one flush trial after the power cut.
fn check_flushed(ctx: &CaseContext<'_>, dir: &Path, acknowledged: usize) -> Result<(), Failure> {
    let schema = basic_schema(ctx.caps());
    let reader = ok("reopen after the power cut", ctx.factory.open(dir, OpenMode::ReadOnly))?;
    let visible =
        check_after_crash(&*reader, &schema, acknowledged, "flushed before the power cut")?;
    let report = ok("validate(Full) after the power cut", reader.validate(ValidationLevel::Full))?;
    ensure!(
        report.is_clean(),
        "validate(Full) after the power cut",
        expected: "no problem",
        got: format!("{:?}", report.problems)
    );
    drop(reader);
    if ctx.caps().resume {
        finish_by_next_writer(ctx, dir, &schema, visible)?;
    }
    Ok(())
}

/// Kills a writer child, under the `faultfs` power-loss model, at the start of its `finalize`,
/// inside it and after it returned, then cuts the power (torn as in
/// [`power_loss_keeps_every_flushed_sample`]). The cache rebuilt from the durable image must be
/// complete (finalized, every sample put, `validate(Full)` clean; always so once finalize had
/// returned) or resumable (every flushed sample exact, and the next writer finishes it), as
/// after a kill ([`crate::crash::crash_during_finalize_leaves_resumable_or_complete`]).
///
/// Needs a child process, the interposer (Linux) and caches that are local files; SKIPPED
/// without any of them.
pub fn power_loss_during_finalize_leaves_resumable_or_complete(
    ctx: &CaseContext<'_>,
) -> CaseResult {
    if let Some(why) = crate::crash::not_local_files(ctx) {
        return Ok(Outcome::Skipped(why));
    }
    if !ctx.caps().durable_flush {
        return Ok(Outcome::Skipped(NOT_DURABLE.into()));
    }
    let launcher = match launcher(ctx) {
        Ok(launcher) => launcher,
        Err(skipped) => return Ok(skipped),
    };
    let schema = basic_schema(ctx.caps());
    for (trial, kill) in FINALIZE_KILLS.into_iter().enumerate() {
        let seed = 0x4649_4e41 + trial as u64;
        let t = Trial::prepare(ctx, &format!("power-loss-finalize{trial}"))?;
        let returned = kill_finalize_writer(launcher, &t.cache, &t.stderr, &t.env, kill)?;
        let rebuilt = match t.cut_power(seed)? {
            Ok(rebuilt) => rebuilt,
            Err(why) => return Ok(Outcome::Skipped(why)),
        };
        let what = format!(
            "power cut {trial} (killed {kill:?}, finalize returned: {returned}; the cut lost {} \
             changed files, tore {})",
            rebuilt.lost, rebuilt.torn
        );
        finalize_crash_trial(ctx, &t.cache, &schema, returned).map_err(|f| f.within(what))?;
    }
    Ok(Outcome::Passed)
}

/// The child launcher the power-loss cases run their writer with, or why they are skipped:
/// there is no child process, or no interposer.
fn launcher<'a>(ctx: &'a CaseContext<'_>) -> Result<&'a ChildLauncher, Outcome> {
    match (&ctx.child, durable_image::library()) {
        (None, _) => Err(needs_child()),
        (Some(_), None) => Err(Outcome::Skipped(format!("needs {}", durable_image::UNAVAILABLE))),
        (Some(launcher), Some(_)) => Ok(launcher),
    }
}

fn needs_child() -> Outcome {
    Outcome::Skipped("needs a child process: runs under backend_conformance!, not run_all".into())
}
