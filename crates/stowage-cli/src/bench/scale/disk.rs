//! The disk check before a scale run: each backend writes a probe cache of [`PROBE_KEYS`] keys,
//! its bytes per key times the largest size it will write (with [`MARGIN`]) is what its largest
//! cache needs (caches are removed as soon as they are measured, so only one exists at a time),
//! and the run refuses to start when `df` reports less than that plus the space to keep free.

use std::path::Path;
use std::process::Command;

use serde::Serialize;

use super::report::{bytes, count};
use super::{ScalePlan, not_planned, workload};
use crate::bench::FLUSH_EVERY;
use crate::bench::measure::directory_bytes;
use crate::bench::subject::{Kind, Subject};

/// Keys of the probe cache each backend writes.
pub const PROBE_KEYS: usize = 20_000;
/// The estimate is the probe's bytes per key times this.
pub const MARGIN: f64 = 1.5;

/// What the check measured and decided.
#[derive(Debug, Clone, Serialize)]
pub struct DiskCheck {
    /// Each backend's bytes per key in its probe cache.
    pub bytes_per_key: Vec<(String, f64)>,
    /// The largest single cache of the run, with margin (or the raw-copy file, if larger).
    pub needed_bytes: u64,
    /// What needs it: `<backend> at <keys> keys`.
    pub needed_for: String,
    /// Bytes `df` reports available on the file system of the run's directory.
    pub available_bytes: u64,
    /// Bytes to keep free beyond the need.
    pub keep_free_bytes: u64,
}

impl DiskCheck {
    /// One line for the progress output and the report.
    pub fn summary(&self) -> String {
        let per_key: Vec<String> =
            self.bytes_per_key.iter().map(|(name, b)| format!("{name} {b:.1}")).collect();
        format!(
            "scale: disk: bytes per key at {} keys: {}; the largest cache ({}) needs {} with \
             x{MARGIN} margin, {} kept free, {} available",
            count(PROBE_KEYS),
            per_key.join(", "),
            self.needed_for,
            bytes(self.needed_bytes as f64),
            bytes(self.keep_free_bytes as f64),
            bytes(self.available_bytes as f64)
        )
    }
}

/// Probes each backend of `plan` that runs at some size of `sizes`, then compares the need with
/// `df`.
///
/// Errors: a probe fails, `df` cannot tell, or the disk has too little, as text naming what the
/// run needs and what `df` reports.
pub fn check(plan: &ScalePlan, sizes: &[usize]) -> Result<DiskCheck, String> {
    let row_bytes = 16.0;
    let largest = sizes.iter().copied().max().unwrap_or(0);
    let mut needed = (
        largest as f64 * row_bytes * MARGIN,
        format!("the raw-copy file at {} keys", count(largest)),
    );
    let mut bytes_per_key = Vec::new();
    for &kind in &plan.backends {
        let Some(size) = sizes.iter().copied().filter(|&s| not_planned(kind, s).is_none()).max()
        else {
            continue;
        };
        let per_key = probe(kind, &plan.dir.join(format!("probe-{}", kind.name())))?;
        bytes_per_key.push((kind.name().to_owned(), per_key));
        let need = per_key * size as f64 * MARGIN;
        if need > needed.0 {
            needed = (need, format!("{} at {} keys", kind.name(), count(size)));
        }
    }
    let available = available_bytes(&plan.dir)?;
    let check = DiskCheck {
        bytes_per_key,
        needed_bytes: needed.0 as u64,
        needed_for: needed.1,
        available_bytes: available,
        keep_free_bytes: plan.keep_free_bytes,
    };
    if (available as f64) < needed.0 + plan.keep_free_bytes as f64 {
        return Err(format!(
            "not enough disk for this scale run in {}: its largest cache ({}) needs about {} \
             (bytes per key measured on {}-key probe caches, x{MARGIN}), and {} must stay free, \
             but df reports {} available; choose fewer or smaller sizes with --sizes (e.g. \
             --sizes 100k,1m), fewer backends, or a --dir on a larger disk",
            plan.dir.display(),
            check.needed_for,
            bytes(needed.0),
            count(PROBE_KEYS),
            bytes(plan.keep_free_bytes as f64),
            bytes(available as f64)
        ));
    }
    Ok(check)
}

/// Bytes per key of a [`PROBE_KEYS`]-key cache of `kind` written and finalized in `dir` (then
/// removed).
fn probe(kind: Kind, dir: &Path) -> Result<f64, String> {
    let _ = std::fs::remove_dir_all(dir);
    let work = workload(PROBE_KEYS);
    let fail = |e: stowage_core::Error| {
        format!("{}: the disk probe in {}: {e}", kind.name(), dir.display())
    };
    let result = (|| {
        let mut cache = Subject::create(kind, dir, &work.schema()).map_err(fail)?;
        let writer = cache.backend();
        for i in 0..PROBE_KEYS {
            writer.put(&work.key(i), &work.sample(i)).map_err(fail)?;
            if (i + 1) % FLUSH_EVERY == 0 {
                writer.flush().map_err(fail)?;
            }
        }
        writer.finalize().map_err(fail)?;
        drop(cache);
        Ok(directory_bytes(dir) as f64 / PROBE_KEYS as f64)
    })();
    let _ = std::fs::remove_dir_all(dir);
    result
}

/// Bytes available on the file system of `dir`, as `df -P -B1` reports them.
fn available_bytes(dir: &Path) -> Result<u64, String> {
    let output = Command::new("df").args(["-P", "-B1"]).arg(dir).output().map_err(|e| {
        format!("cannot run `df` to check the free disk space of {}: {e}", dir.display())
    })?;
    let text = String::from_utf8_lossy(&output.stdout);
    parse_df(&text).ok_or_else(|| {
        format!(
            "cannot read the free disk space of {} from `df -P -B1`: {:?}{}",
            dir.display(),
            text.trim(),
            String::from_utf8_lossy(&output.stderr).trim()
        )
    })
}

/// The `Available` column of `df -P`'s second line.
fn parse_df(text: &str) -> Option<u64> {
    text.lines().nth(1)?.split_whitespace().nth(3)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn df_output_is_read_or_refused() {
        let text = "Filesystem 1-blocks Used Available Capacity Mounted on\n\
                    /dev/vda 270000000000 40000000000 58000000000 42% /\n";
        assert_eq!(parse_df(text), Some(58_000_000_000));
        assert_eq!(parse_df("Filesystem\n"), None);
        assert_eq!(parse_df("a b c d\n/dev/x 1 2 many 4 /\n"), None);
        assert!(available_bytes(Path::new(".")).unwrap() > 0);
    }
}
