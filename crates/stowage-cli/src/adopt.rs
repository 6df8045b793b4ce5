//! `stowage adopt PATH`: checksums the data another writer (the original tool) added to a cache,
//! so that `verify` checks it from then on.
//!
//! Caches are shared with the original tools: torchcachex appends segments, DNANet resumes and
//! finalizes, aenet appends rows. stowage reads such data but its checksums do not cover it, so
//! `verify` lists it as unchecked. Adopting is the explicit step that computes those checksums
//! from the bytes as they are now (it cannot know whether they were written correctly, only that
//! they do not change afterwards). It takes the cache's writer lock and changes only stowage's own
//! files: the other writer's files stay byte for byte as they were. A cache torchcachex wrote
//! alone gets stowage's commit log first; from then on it is a stowage Arrow cache.

use std::io::Write;
use std::path::Path;

use stowage_core::{Adoption, OpenMode, Registry};

use crate::builtin::Builtin;
use crate::error::{CliError, Status};
use crate::locate::{DIRECTORY, Located, locate};
use crate::out::count;

/// Adopts what can be adopted in the cache at `path`, recognized through `registry`, and prints
/// what was checksummed.
///
/// Errors: a URL (only local caches have other writers' files to adopt); a format whose other
/// writers' data stowage cannot checksum (the message says why and what to do instead), or one
/// that has no other writer (any format but the built-in ones); a cache another writer holds
/// (`Locked`); damage found while adopting (nothing is adopted then).
pub fn run(registry: &Registry, path: &Path, out: &mut dyn Write) -> Result<Status, CliError> {
    let why = "checksums the files another writer (the original tool) added to a local cache";
    crate::locate::local_only(path, "adopt", why)?;
    let format = match locate(registry, path)? {
        Located::Cache(recognized) => recognized.format,
        Located::Directory(_) => &DIRECTORY,
    };
    let adoption = match Builtin::of(format) {
        Some(Builtin::StowageMemmap | Builtin::DnanetMemmap) => {
            let options = stowage_memmap::MemmapOptions::default();
            stowage_memmap::MemmapBackend::open_append(path, options)?.adopt()?
        }
        Some(Builtin::AenetHdf5) => stowage_hdf5::TorchCacheWriter::adopt(path)?,
        Some(Builtin::StowageNpy | Builtin::HangarNumpy10) => {
            return Err(CliError::new(format!(
                "{}: hangar's collection files cannot be adopted: the records that say which \
                 slots hold samples, and their xxh64 checksums, are in hangar's own database, not \
                 in the cache; read and check each sample through its record with `stowage get {} \
                 --record REC`",
                path.display(),
                path.display()
            )));
        }
        Some(Builtin::StowageArrow) => {
            let options = stowage_arrow::ArrowOptions::default();
            stowage_arrow::ArrowBackend::open(path, OpenMode::Append, options)?.adopt()?
        }
        Some(Builtin::Torchcachex) => {
            // stowage's log starts beside torchcachex's files, which stay as they are: from then
            // on the cache is one stowage appends to and checks, and torchcachex still reads.
            let options = stowage_arrow::ArrowOptions::default();
            let adoption = stowage_arrow::ArrowBackend::attach(path, options)?.adopt()?;
            say!(
                out,
                "started stowage's commit log in {} (torchcachex's files are not changed)",
                path.display()
            );
            adoption
        }
        Some(Builtin::StowageHdf5) | None => {
            return Err(CliError::new(format!(
                "{}: a {} has nothing another writer could add that stowage can adopt",
                path.display(),
                format.description
            )));
        }
    };
    report(path, &adoption, out)
}

/// `adopted N samples in M files: a, b` or `nothing to adopt: ...`.
fn report(path: &Path, adoption: &Adoption, out: &mut dyn Write) -> Result<Status, CliError> {
    if adoption.is_empty() {
        say!(out, "nothing to adopt in {}: stowage's checksums cover every sample", path.display());
        return Ok(Status::Success);
    }
    let files: Vec<String> = adoption.files.iter().map(|f| f.display().to_string()).collect();
    say!(
        out,
        "adopted {} in {}: {}",
        count(adoption.samples, "sample"),
        count(files.len() as u64, "file"),
        crate::error::escape_control(&files.join(", "))
    );
    say!(
        out,
        "their checksums vouch for the bytes as they are now; `stowage verify {}` checks them \
         from here on",
        path.display()
    );
    Ok(Status::Success)
}
