//! `stowage compact PATH`: rewrites a stowage Arrow cache's small segments into few large ones.
//!
//! Every flush of an Arrow cache commits a segment, so a cache written in small flushes holds
//! many small segments: at 10 million keys with the default flushes, 4,883 of them. Gets then
//! reopen segments beyond the bounded set kept open, and a cold get reads a whole small segment.
//! Compacting keeps each key's winning row in segments of up to `max_segment_bytes` and drops
//! shadowed rows. It takes the writer lock; readers in other processes go on reading (replaced
//! segments' files stay until the next compaction). Only stowage's own segments are rewritten:
//! segments torchcachex added are left as they are.

use std::io::Write;
use std::path::Path;

use stowage_core::{Error, OpenMode, Registry};

use crate::builtin::Builtin;
use crate::error::{CliError, Status};
use crate::locate::{Located, locate};

/// Compacts the stowage Arrow cache at `path`, recognized through `registry`: every segment
/// smaller than `below` bytes (at least two of them) is rewritten; prints what changed.
///
/// Errors: a URL (segment files are rewritten in a local directory); `Unsupported` naming the
/// format for any other kind of cache; a cache another writer holds (`Locked`); damage in a row
/// to keep (nothing is committed then).
pub fn run(
    registry: &Registry,
    path: &Path,
    below: u64,
    out: &mut dyn Write,
) -> Result<Status, CliError> {
    let why = "rewrites the segment files of a stowage Arrow cache in a local directory";
    crate::locate::local_only(path, "compact", why)?;
    let format = match locate(registry, path)? {
        Located::Cache(recognized) => recognized.format,
        Located::Directory(_) => {
            return Err(CliError::new(format!(
                "{}: not a cache (a directory holding caches?): give one stowage Arrow cache",
                path.display()
            )));
        }
    };
    if Builtin::of(format) != Some(Builtin::StowageArrow) {
        return Err(Error::unsupported(
            format.id,
            format!(
                "compacting {} (a {}): only stowage Arrow caches are written in segments that \
                 compaction rewrites",
                path.display(),
                format.description
            ),
        )
        .into());
    }
    let options = stowage_arrow::ArrowOptions::default();
    let mut cache = stowage_arrow::ArrowBackend::open(path, OpenMode::Append, options)?;
    let report = cache.compact(below)?;
    drop(cache);
    if report.removed.is_empty() {
        say!(
            out,
            "nothing to compact in {}: fewer than two stowage segments are smaller than {below} \
             bytes",
            path.display()
        );
    } else {
        say!(
            out,
            "compacted {} segments of {} into {}: {} rows kept, {} shadowed rows dropped",
            report.removed.len(),
            path.display(),
            report.written.len(),
            report.rows_kept,
            report.rows_dropped
        );
    }
    if report.files_deleted > 0 {
        say!(
            out,
            "deleted {} files of the segments an earlier compaction replaced",
            report.files_deleted
        );
    }
    Ok(Status::Success)
}
