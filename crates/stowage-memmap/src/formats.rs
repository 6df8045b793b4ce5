//! The two kinds of memmap row cache this crate reads, and how a directory is recognized as one.
//!
//! Both have DNANet's layout ([`crate::layout`]); a cache stowage wrote (or resumed) also has
//! `stowage.json`, naming [`crate::row_format::FORMAT_NAME`], and `stowage_checksums.bin`.

use std::path::Path;

use stowage_core::recognize::{self, Marker};
use stowage_core::{Format, Result};

use crate::layout::Layout;
use crate::row_format::FORMAT_NAME;

/// A memmap row cache stowage wrote: DNANet's layout plus `stowage.json` and per-row checksums.
pub const STOWAGE_MEMMAP: Format = Format {
    id: "stowage-memmap",
    description: "stowage memmap row cache",
    signature: "stowage.json with format \"dnanet-memmap-row\"",
};

/// A memmap row cache DNANet wrote, finalized or not (no `stowage.json`).
pub const DNANET_MEMMAP: Format = Format {
    id: "dnanet-memmap",
    description: "DNANet memmap row cache",
    signature: "_COMPLETE, index.parquet, shapes.json, fingerprint.json or manifest.jsonl",
};

/// Both formats, stowage's first ([`stowage_core::BackendFactory::formats`]).
pub(crate) const FORMATS: &[Format] = &[STOWAGE_MEMMAP, DNANET_MEMMAP];

/// Which of [`FORMATS`] the cache at `path` is, following the core's marker precedence
/// ([`stowage_core::recognize`]): a `stowage.json` naming [`FORMAT_NAME`] is stowage's; any other
/// stowage marker belongs to another backend, even when DNANet's files are there too; only a
/// directory without a marker is probed for DNANet's files.
///
/// Errors: a `stowage.json` or `stowage.log` that cannot be read or does not parse.
pub(crate) fn recognize(path: &Path) -> Result<Option<&'static Format>> {
    Ok(match recognize::marker(path)? {
        Marker::StowageJson(format) if format == FORMAT_NAME => Some(&STOWAGE_MEMMAP),
        Marker::StowageJson(_) | Marker::StowageLog(_) => None,
        Marker::None if Layout::new(path).has_dnanet_files() => Some(&DNANET_MEMMAP),
        Marker::None => None,
    })
}
