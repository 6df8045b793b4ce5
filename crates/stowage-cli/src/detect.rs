//! What kind of cache a path is.
//!
//! Detection is a few tables, each one `match` with an arm per kind:
//!
//! 1. A directory with a `stowage.json` is a stowage cache, whatever else it holds (a stowage
//!    NUMPY_10 cache also has a hangar-style `data/10` tree). Its `"format"` names the backend:
//!    [`CacheKind::stowage_format`]. A `stowage.json` that does not parse, or names a format this
//!    command does not know, is an error: it is never guessed around.
//! 2. A directory with a `stowage.log` (and no `stowage.json`) is a stowage segment cache: the
//!    log's first record names the backend ([`CacheKind::log_format`]), Arrow or HDF5. The same
//!    rule holds: a log that cannot be read or names another format is an error.
//! 3. Otherwise the layouts the original tools write are probed in [`CacheKind::FOREIGN`] order:
//!    [`CacheKind::probe_foreign`] (DNANet's memmap files, torchcachex's segments, hangar's
//!    `data/10`). A regular file is probed as an aenet HDF5 dataset file with a `/torch_cache`
//!    (or legacy `/force_derivatives`).
//! 4. A directory that is none of these but holds caches somewhere below it (DNANet's cache
//!    root, a folder of experiments) is a [`CacheKind::CacheRoot`]: `inspect` walks it
//!    ([`crate::walk`]), the other commands name the caches in it.
//!
//! A new backend adds a [`CacheKind`] variant and one arm in each `match` below (its names, its
//! signature, its `stowage.json` or `stowage.log` format or the original tool's layout), then an
//! arm in [`crate::open::open`]; the compiler points at each `match`.

use std::io::Read;
use std::path::{Path, PathBuf};

use stowage_core::file_safety::AppendLog;

use crate::error::CliError;

/// The largest `stowage.json` detection reads; real ones are a few KiB.
const MAX_METADATA_BYTES: u64 = 16 << 20;

/// The 8 bytes every HDF5 file starts with (at offset 0, or after a user block).
const HDF5_MAGIC: &[u8; 8] = b"\x89HDF\r\n\x1a\n";

/// A kind of cache the command can read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CacheKind {
    /// A stowage NUMPY_10 cache: `stowage.json` with `"format": "stowage-npy"`.
    StowageNpy,
    /// A memmap row cache stowage wrote: `stowage.json` with `"format": "dnanet-memmap-row"`.
    StowageMemmap,
    /// An Arrow segment cache stowage wrote: `stowage.log` whose header names `stowage-arrow`.
    StowageArrow,
    /// An HDF5 segment cache stowage wrote: `stowage.log` whose header names `stowage-hdf5`.
    StowageHdf5,
    /// A memmap row cache DNANet wrote (no `stowage.json`): finished (`_COMPLETE`,
    /// `index.parquet`, `shapes.json`) or half-built (`manifest.jsonl` and `.bin` files).
    DnanetMemmap,
    /// An Arrow segment cache torchcachex wrote: `segments/segment_*.arrow`, `schema.json`
    /// and/or `index.pkl`, no `stowage.log`.
    Torchcachex,
    /// A bare hangar NUMPY_10 data directory: `data/10/*.npy` collection files, with or without
    /// `store_data/10` and `stage_data/10` markers. The records are not there (hangar keeps them in
    /// its LMDB database), so it holds no keys.
    HangarNumpy10,
    /// An aenet HDF5 dataset file holding a `/torch_cache` (v2) or a legacy
    /// `/force_derivatives` (v1): a file, not a directory. Its keys are entry indices.
    AenetHdf5,
    /// A directory holding caches below it (DNANet's cache root is one): `inspect` reports each;
    /// it holds no keys itself.
    CacheRoot,
}

impl CacheKind {
    /// Every kind, in the order an error message lists them.
    pub const ALL: [CacheKind; 9] = [
        CacheKind::StowageNpy,
        CacheKind::StowageMemmap,
        CacheKind::StowageArrow,
        CacheKind::StowageHdf5,
        CacheKind::DnanetMemmap,
        CacheKind::Torchcachex,
        CacheKind::HangarNumpy10,
        CacheKind::AenetHdf5,
        CacheKind::CacheRoot,
    ];

    /// The directory layouts written by the original tools, recognized by their files, in
    /// probing order.
    pub const FOREIGN: [CacheKind; 3] =
        [CacheKind::DnanetMemmap, CacheKind::Torchcachex, CacheKind::HangarNumpy10];

    /// The short name used in `--json` output: `stowage-npy`, `torchcachex`, `aenet-hdf5`.
    pub fn id(self) -> &'static str {
        match self {
            CacheKind::StowageNpy => "stowage-npy",
            CacheKind::StowageMemmap => "stowage-memmap",
            CacheKind::StowageArrow => "stowage-arrow",
            CacheKind::StowageHdf5 => "stowage-hdf5",
            CacheKind::DnanetMemmap => "dnanet-memmap",
            CacheKind::Torchcachex => "torchcachex",
            CacheKind::HangarNumpy10 => "hangar-numpy10",
            CacheKind::AenetHdf5 => "aenet-hdf5",
            CacheKind::CacheRoot => "directory",
        }
    }

    /// What the kind is called in output: `stowage NUMPY_10 cache`.
    pub fn description(self) -> &'static str {
        match self {
            CacheKind::StowageNpy => "stowage NUMPY_10 cache",
            CacheKind::StowageMemmap => "stowage memmap row cache",
            CacheKind::StowageArrow => "stowage Arrow segment cache",
            CacheKind::StowageHdf5 => "stowage HDF5 segment cache",
            CacheKind::DnanetMemmap => "DNANet memmap row cache",
            CacheKind::Torchcachex => "torchcachex Arrow segment cache",
            CacheKind::HangarNumpy10 => "hangar NUMPY_10 data directory",
            CacheKind::AenetHdf5 => "aenet HDF5 torch cache",
            CacheKind::CacheRoot => "directory of caches",
        }
    }

    /// What detection looks for, for the "not a cache" error.
    pub fn signature(self) -> &'static str {
        match self {
            CacheKind::StowageNpy => "stowage.json with format \"stowage-npy\"",
            CacheKind::StowageMemmap => "stowage.json with format \"dnanet-memmap-row\"",
            CacheKind::StowageArrow => "stowage.log with format \"stowage-arrow\"",
            CacheKind::StowageHdf5 => "stowage.log with format \"stowage-hdf5\"",
            CacheKind::DnanetMemmap => {
                "_COMPLETE, index.parquet, shapes.json, fingerprint.json or manifest.jsonl"
            }
            CacheKind::Torchcachex => "segments/segment_*.arrow, schema.json or index.pkl",
            CacheKind::HangarNumpy10 => "data/10/*.npy",
            CacheKind::AenetHdf5 => "an HDF5 file with /torch_cache or /force_derivatives",
            CacheKind::CacheRoot => "subdirectories holding caches",
        }
    }

    /// The `"format"` of `stowage.json` for a kind described by one; `None` for the others.
    pub fn stowage_format(self) -> Option<&'static str> {
        match self {
            CacheKind::StowageNpy => Some(stowage_npy::layout::FORMAT_NAME),
            CacheKind::StowageMemmap => Some(stowage_memmap::row_format::FORMAT_NAME),
            CacheKind::StowageArrow
            | CacheKind::StowageHdf5
            | CacheKind::DnanetMemmap
            | CacheKind::Torchcachex
            | CacheKind::HangarNumpy10
            | CacheKind::AenetHdf5
            | CacheKind::CacheRoot => None,
        }
    }

    /// The format the header of `stowage.log` names for a kind described by one; `None` for
    /// the others.
    pub fn log_format(self) -> Option<&'static str> {
        match self {
            CacheKind::StowageArrow => Some(stowage_arrow::commit_log::FORMAT_NAME),
            CacheKind::StowageHdf5 => Some(stowage_hdf5::commit_log::FORMAT_NAME),
            CacheKind::StowageNpy
            | CacheKind::StowageMemmap
            | CacheKind::DnanetMemmap
            | CacheKind::Torchcachex
            | CacheKind::HangarNumpy10
            | CacheKind::AenetHdf5
            | CacheKind::CacheRoot => None,
        }
    }

    /// Whether directory `dir` has the layout of this foreign kind. The other kinds return
    /// `false`.
    pub fn probe_foreign(self, dir: &Path) -> Result<bool, CliError> {
        match self {
            CacheKind::DnanetMemmap => Ok(has_dnanet_memmap_files(dir)),
            CacheKind::Torchcachex => Ok(has_torchcachex_files(dir)),
            CacheKind::HangarNumpy10 => crate::hangar::looks_like_data_dir(dir),
            CacheKind::StowageNpy
            | CacheKind::StowageMemmap
            | CacheKind::StowageArrow
            | CacheKind::StowageHdf5
            | CacheKind::AenetHdf5
            | CacheKind::CacheRoot => Ok(false),
        }
    }
}

/// The files DNANet's memmap writer leaves in a cache directory, finished or not (its own
/// inspection tool looks for the first three).
const DNANET_MEMMAP_FILES: [&str; 5] =
    ["shapes.json", "index.parquet", "fingerprint.json", "_COMPLETE", "manifest.jsonl"];

fn has_dnanet_memmap_files(dir: &Path) -> bool {
    DNANET_MEMMAP_FILES.iter().any(|name| dir.join(name).exists())
}

/// torchcachex's files: a segment, `schema.json` or `index.pkl`.
fn has_torchcachex_files(dir: &Path) -> bool {
    let layout = stowage_arrow::layout::Layout::new(dir);
    layout.schema().is_file()
        || layout.pickled_index().is_file()
        || layout.list_segments().is_ok_and(|segments| !segments.is_empty())
}

/// The kind a `stowage.json` `"format"` value stands for.
pub fn kind_of_stowage_format(format: &str) -> Option<CacheKind> {
    CacheKind::ALL.into_iter().find(|kind| kind.stowage_format() == Some(format))
}

/// The kind a `stowage.log` header's format stands for.
pub fn kind_of_log_format(format: &str) -> Option<CacheKind> {
    CacheKind::ALL.into_iter().find(|kind| kind.log_format() == Some(format))
}

/// Finds out what kind of cache `path` is.
///
/// Errors name the path and say what was looked for: a path that does not exist, a file that is
/// not an aenet HDF5 cache, a `stowage.json` or `stowage.log` that does not parse or names an
/// unknown format, or a directory with none of the known layouts and no cache below it.
pub fn detect(path: &Path) -> Result<CacheKind, CliError> {
    match detect_here(path)? {
        Some(kind) => Ok(kind),
        None if path.is_dir() && !crate::walk::find_caches(path)?.is_empty() => {
            Ok(CacheKind::CacheRoot)
        }
        None if path.is_dir() => Err(CliError::new(format!(
            "{} is not a cache: found neither {}",
            path.display(),
            looked_for()
        ))),
        None => Err(CliError::new(format!(
            "{} is a file, not a cache directory (a cache is a directory holding {}, or {})",
            path.display(),
            looked_for_in_directories(),
            CacheKind::AenetHdf5.signature()
        ))),
    }
}

/// The kind of cache `path` itself is, without looking below it: `Ok(None)` when it has none of
/// the known layouts (or is a file that is not HDF5, or an HDF5 file without a torch cache).
///
/// Errors: `path` cannot be read; a `stowage.json` or `stowage.log` that does not parse or names
/// an unknown format; an HDF5 file whose cache cannot be opened.
pub fn detect_here(path: &Path) -> Result<Option<CacheKind>, CliError> {
    let meta = std::fs::metadata(path).map_err(|e| io_error(path, &e))?;
    if !meta.is_dir() {
        return detect_file(path, &meta);
    }
    if let Some(format) = stowage_format(path)? {
        return kind_of_stowage_format(&format).map(Some).ok_or_else(|| {
            unknown_format(&path.join("stowage.json"), &format, CacheKind::stowage_format)
        });
    }
    if let Some(format) = log_format(path)? {
        return kind_of_log_format(&format).map(Some).ok_or_else(|| {
            unknown_format(&path.join("stowage.log"), &format, CacheKind::log_format)
        });
    }
    for kind in CacheKind::FOREIGN {
        if kind.probe_foreign(path)? {
            return Ok(Some(kind));
        }
    }
    Ok(None)
}

/// `<file>: format "x" is not one this command reads (it reads "a", "b")`.
fn unknown_format(
    file: &Path,
    format: &str,
    format_of: fn(CacheKind) -> Option<&'static str>,
) -> CliError {
    let known: Vec<String> =
        CacheKind::ALL.iter().filter_map(|k| format_of(*k)).map(|f| format!("{f:?}")).collect();
    CliError::new(format!(
        "{}: format {format:?} is not one this command reads (it reads {})",
        file.display(),
        known.join(", ")
    ))
}

/// A regular file is a cache only when it is an HDF5 file holding an aenet torch cache.
fn detect_file(path: &Path, meta: &std::fs::Metadata) -> Result<Option<CacheKind>, CliError> {
    if !meta.is_file() || !is_hdf5_file(path, meta.len()) {
        return Ok(None);
    }
    match stowage_hdf5::TorchCache::open(path) {
        Ok(Some(_)) => Ok(Some(CacheKind::AenetHdf5)),
        Ok(None) => Ok(None),
        Err(e) => Err(CliError::new(format!(
            "{}: an HDF5 file whose torch cache cannot be opened: {e}",
            path.display()
        ))),
    }
}

/// Whether the file starts with the HDF5 signature, at offset 0 or after a user block (512,
/// 1024, 2048, ... bytes).
pub fn is_hdf5_file(path: &Path, len: u64) -> bool {
    let Ok(mut file) = std::fs::File::open(path) else { return false };
    let mut offset = 0u64;
    while offset + 8 <= len {
        let mut magic = [0u8; 8];
        use std::io::Seek;
        if file.seek(std::io::SeekFrom::Start(offset)).is_err()
            || file.read_exact(&mut magic).is_err()
        {
            return false;
        }
        if &magic == HDF5_MAGIC {
            return true;
        }
        offset = if offset == 0 { 512 } else { offset * 2 };
    }
    false
}

/// "stowage.json with ... (stowage NUMPY_10 cache) nor data/10/*.npy (...)".
fn looked_for() -> String {
    let parts: Vec<String> =
        CacheKind::ALL.iter().map(|k| format!("{} ({})", k.signature(), k.description())).collect();
    parts.join(" nor ")
}

/// What a cache directory holds, for the "is a file" error: every kind but the file and the
/// root.
fn looked_for_in_directories() -> String {
    let parts: Vec<&str> = CacheKind::ALL
        .iter()
        .filter(|k| !matches!(k, CacheKind::AenetHdf5 | CacheKind::CacheRoot))
        .map(|k| k.signature())
        .collect();
    parts.join(", ")
}

/// Reads `<dir>/<name>` up to [`MAX_METADATA_BYTES`]: `None` when it does not exist.
fn read_small(dir: &Path, name: &str) -> Result<Option<(PathBuf, Vec<u8>)>, CliError> {
    let path = dir.join(name);
    let file = match std::fs::File::open(&path) {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io_error(&path, &e)),
    };
    let mut text = Vec::new();
    file.take(MAX_METADATA_BYTES + 1).read_to_end(&mut text).map_err(|e| io_error(&path, &e))?;
    if text.len() as u64 > MAX_METADATA_BYTES {
        return Err(CliError::new(format!(
            "{}: larger than {MAX_METADATA_BYTES} bytes, not a stowage cache description",
            path.display()
        )));
    }
    Ok(Some((path, text)))
}

/// The `"format"` of `<dir>/stowage.json`, or `None` when there is no such file.
fn stowage_format(dir: &Path) -> Result<Option<String>, CliError> {
    let Some((path, text)) = read_small(dir, "stowage.json")? else { return Ok(None) };
    let json: serde_json::Value = serde_json::from_slice(&text).map_err(|e| {
        CliError::new(format!(
            "{}: does not parse as JSON ({e}); a stowage cache's stowage.json names its format",
            path.display()
        ))
    })?;
    match json.get("format").and_then(serde_json::Value::as_str) {
        Some(format) => Ok(Some(format.to_owned())),
        None => Err(CliError::new(format!(
            "{}: has no \"format\" string; a stowage cache's stowage.json names its format",
            path.display()
        ))),
    }
}

/// The format named by the header record of `<dir>/stowage.log` (`{"cache": {"format": ...}}`),
/// or `None` when there is no such file.
fn log_format(dir: &Path) -> Result<Option<String>, CliError> {
    let path = dir.join("stowage.log");
    if !path.is_file() {
        return match std::fs::symlink_metadata(&path) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(io_error(&path, &e)),
            Ok(_) => Err(CliError::new(format!("{}: is not a regular file", path.display()))),
        };
    }
    let recovered = AppendLog::read_all(&path)?;
    let Some(first) = recovered.records.first() else {
        return Err(CliError::new(format!(
            "{}: holds no complete record; a stowage segment cache's log starts with a header \
             naming its format",
            path.display()
        )));
    };
    let json: serde_json::Value = serde_json::from_slice(first).map_err(|e| {
        CliError::new(format!("{}: its header record does not parse as JSON ({e})", path.display()))
    })?;
    match json.pointer("/cache/format").and_then(serde_json::Value::as_str) {
        Some(format) => Ok(Some(format.to_owned())),
        None => Err(CliError::new(format!(
            "{}: its first record is not a header naming the cache format",
            path.display()
        ))),
    }
}

/// An I/O error on `path` as one message.
pub fn io_error(path: &Path, e: &std::io::Error) -> CliError {
    match e.kind() {
        std::io::ErrorKind::NotFound => {
            CliError::new(format!("{}: no such file or directory", path.display()))
        }
        _ => CliError::new(format!("{}: {e}", path.display())),
    }
}
