//! What kind of cache a path is, and opening it.
//!
//! Detection is two tables, each one `match` with an arm per kind:
//!
//! 1. A directory with a `stowage.json` is a stowage cache, whatever else it holds (a stowage
//!    NUMPY_10 cache also has a hangar-style `data/10` tree). Its `"format"` names the backend:
//!    [`CacheKind::stowage_format`]. A `stowage.json` that does not parse, or names a format this
//!    command does not know, is an error: it is never guessed around.
//! 2. Otherwise the layouts the original tools write are probed in [`CacheKind::FOREIGN`] order:
//!    [`CacheKind::probe_foreign`]. Last comes DNANet's cache root, a directory whose key
//!    directories hold memmap row caches: `inspect` walks it, the other commands name its caches.
//!
//! A new backend (Arrow segments, HDF5) adds a [`CacheKind`] variant, an arm in
//! [`CacheKind::stowage_format`] for its `stowage.json` format, an arm in
//! [`CacheKind::probe_foreign`] for the original tool's layout (`index.pkl`, a `torch_cache` HDF5
//! group), and an arm in [`open`]; the compiler points at each `match`.

use std::io::Read;
use std::path::Path;

use stowage_core::Backend;
use stowage_memmap::{MemmapBackend, MemmapOptions};
use stowage_npy::{NpyBackend, NpyOptions};

use crate::error::CliError;
use crate::hangar::HangarDir;

/// The largest `stowage.json` detection reads; real ones are a few KiB.
const MAX_METADATA_BYTES: u64 = 16 << 20;

/// A kind of cache the command can read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CacheKind {
    /// A stowage NUMPY_10 cache: `stowage.json` with `"format": "stowage-npy"`.
    StowageNpy,
    /// A memmap row cache stowage wrote: `stowage.json` with `"format": "dnanet-memmap-row"`.
    StowageMemmap,
    /// A memmap row cache DNANet wrote (no `stowage.json`): finished (`_COMPLETE`,
    /// `index.parquet`, `shapes.json`) or half-built (`manifest.jsonl` and `.bin` files).
    DnanetMemmap,
    /// A bare hangar NUMPY_10 data directory: `data/10/*.npy` collection files, with or without
    /// `store_data/10` and `stage_data/10` markers. The records are not there (hangar keeps them in
    /// its LMDB database), so it holds no keys.
    HangarNumpy10,
    /// DNANet's cache root: a directory whose key directories hold memmap row caches. `inspect`
    /// reports each; it holds no keys itself.
    MemmapCacheRoot,
}

impl CacheKind {
    /// Every kind, in the order an error message lists them.
    pub const ALL: [CacheKind; 5] = [
        CacheKind::StowageNpy,
        CacheKind::StowageMemmap,
        CacheKind::DnanetMemmap,
        CacheKind::HangarNumpy10,
        CacheKind::MemmapCacheRoot,
    ];

    /// The kinds written by the original tools, recognized by their layout, in probing order.
    /// The cache root comes last: its probe looks into every subdirectory.
    pub const FOREIGN: [CacheKind; 3] =
        [CacheKind::DnanetMemmap, CacheKind::HangarNumpy10, CacheKind::MemmapCacheRoot];

    /// What the kind is called in output: `stowage NUMPY_10 cache`.
    pub fn description(self) -> &'static str {
        match self {
            CacheKind::StowageNpy => "stowage NUMPY_10 cache",
            CacheKind::StowageMemmap => "stowage memmap row cache",
            CacheKind::DnanetMemmap => "DNANet memmap row cache",
            CacheKind::HangarNumpy10 => "hangar NUMPY_10 data directory",
            CacheKind::MemmapCacheRoot => "directory of memmap row caches",
        }
    }

    /// What detection looks for, for the "not a cache" error.
    pub fn signature(self) -> &'static str {
        match self {
            CacheKind::StowageNpy => "stowage.json with format \"stowage-npy\"",
            CacheKind::StowageMemmap => "stowage.json with format \"dnanet-memmap-row\"",
            CacheKind::DnanetMemmap => {
                "_COMPLETE, index.parquet, shapes.json, fingerprint.json or manifest.jsonl"
            }
            CacheKind::HangarNumpy10 => "data/10/*.npy",
            CacheKind::MemmapCacheRoot => "subdirectories holding memmap row caches",
        }
    }

    /// The `"format"` of `stowage.json` for a kind stowage writes; `None` for the layouts of the
    /// original tools, which have no `stowage.json`.
    pub fn stowage_format(self) -> Option<&'static str> {
        match self {
            CacheKind::StowageNpy => Some(stowage_npy::layout::FORMAT_NAME),
            CacheKind::StowageMemmap => Some(stowage_memmap::row_format::FORMAT_NAME),
            CacheKind::DnanetMemmap | CacheKind::HangarNumpy10 | CacheKind::MemmapCacheRoot => None,
        }
    }

    /// Whether `dir` has the layout of this foreign kind. Kinds recognized by `stowage.json`
    /// return `false`.
    pub fn probe_foreign(self, dir: &Path) -> Result<bool, CliError> {
        match self {
            CacheKind::StowageNpy | CacheKind::StowageMemmap => Ok(false),
            CacheKind::DnanetMemmap => Ok(has_dnanet_memmap_files(dir)),
            CacheKind::HangarNumpy10 => crate::hangar::looks_like_data_dir(dir),
            CacheKind::MemmapCacheRoot => Ok(!memmap_cache_dirs(dir)?.is_empty()),
        }
    }

    /// Whether this is a memmap row cache (stowage's or DNANet's).
    pub fn is_memmap(self) -> bool {
        matches!(self, CacheKind::StowageMemmap | CacheKind::DnanetMemmap)
    }
}

/// The files DNANet's memmap writer leaves in a cache directory, finished or not (its own
/// inspection tool looks for the first three).
const DNANET_MEMMAP_FILES: [&str; 5] =
    ["shapes.json", "index.parquet", "fingerprint.json", "_COMPLETE", "manifest.jsonl"];

fn has_dnanet_memmap_files(dir: &Path) -> bool {
    DNANET_MEMMAP_FILES.iter().any(|name| dir.join(name).exists())
}

/// Every subdirectory of `dir`, sorted by name (symlinks to directories included).
pub fn subdirectories(dir: &Path) -> Result<Vec<std::path::PathBuf>, CliError> {
    let mut dirs = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(|e| io_error(dir, &e))? {
        let path = entry.map_err(|e| io_error(dir, &e))?.path();
        if path.is_dir() {
            dirs.push(path);
        }
    }
    dirs.sort();
    Ok(dirs)
}

/// The subdirectories of `dir` that are memmap row caches, sorted. A subdirectory whose
/// `stowage.json` cannot be read is not counted (detecting it on its own names the problem).
pub fn memmap_cache_dirs(dir: &Path) -> Result<Vec<std::path::PathBuf>, CliError> {
    let mut caches = subdirectories(dir)?;
    caches.retain(|sub| match stowage_format(sub) {
        Ok(Some(format)) => format == stowage_memmap::row_format::FORMAT_NAME,
        Ok(None) => has_dnanet_memmap_files(sub),
        Err(_) => false,
    });
    Ok(caches)
}

/// The kind a `stowage.json` `"format"` value stands for.
pub fn kind_of_stowage_format(format: &str) -> Option<CacheKind> {
    CacheKind::ALL.into_iter().find(|kind| kind.stowage_format() == Some(format))
}

/// Finds out what kind of cache `path` is.
///
/// Errors name the path and say what was looked for: a path that does not exist or is not a
/// directory, a `stowage.json` that does not parse or names an unknown format, or a directory with
/// none of the known layouts.
pub fn detect(path: &Path) -> Result<CacheKind, CliError> {
    let meta = std::fs::metadata(path).map_err(|e| io_error(path, &e))?;
    if !meta.is_dir() {
        return Err(CliError::new(format!(
            "{} is a file, not a cache directory (a cache is a directory holding {})",
            path.display(),
            looked_for()
        )));
    }
    if let Some(format) = stowage_format(path)? {
        return kind_of_stowage_format(&format).ok_or_else(|| {
            let known: Vec<String> = CacheKind::ALL
                .iter()
                .filter_map(|k| k.stowage_format())
                .map(|f| format!("{f:?}"))
                .collect();
            CliError::new(format!(
                "{}: format {format:?} is not one this command reads (it reads {})",
                path.join("stowage.json").display(),
                known.join(", ")
            ))
        });
    }
    for kind in CacheKind::FOREIGN {
        if kind.probe_foreign(path)? {
            return Ok(kind);
        }
    }
    Err(CliError::new(format!("{} is not a cache: found neither {}", path.display(), looked_for())))
}

/// "stowage.json with ... (stowage NUMPY_10 cache) nor data/10/*.npy (...)".
fn looked_for() -> String {
    let parts: Vec<String> =
        CacheKind::ALL.iter().map(|k| format!("{} ({})", k.signature(), k.description())).collect();
    parts.join(" nor ")
}

/// The `"format"` of `<dir>/stowage.json`, or `None` when there is no such file.
fn stowage_format(dir: &Path) -> Result<Option<String>, CliError> {
    let path = dir.join("stowage.json");
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

/// An I/O error on `path` as one message.
pub fn io_error(path: &Path, e: &std::io::Error) -> CliError {
    match e.kind() {
        std::io::ErrorKind::NotFound => {
            CliError::new(format!("{}: no such file or directory", path.display()))
        }
        _ => CliError::new(format!("{}: {e}", path.display())),
    }
}

/// A cache, opened read-only.
pub enum Cache {
    /// A stowage NUMPY_10 cache.
    StowageNpy(Box<NpyBackend>),
    /// A memmap row cache, stowage's or DNANet's (the kind says which).
    Memmap(CacheKind, Box<MemmapBackend>),
    /// A bare hangar NUMPY_10 data directory.
    HangarNumpy10(HangarDir),
    /// A directory of memmap row caches: their paths, sorted.
    MemmapCacheRoot(Vec<std::path::PathBuf>),
}

impl Cache {
    /// The cache behind the [`Backend`] trait, or the cache back when it holds no keys (a bare
    /// hangar data directory).
    pub fn into_backend(self) -> Result<Box<dyn Backend>, Cache> {
        match self {
            Cache::StowageNpy(backend) => Ok(backend),
            Cache::Memmap(_, backend) => Ok(backend),
            other @ (Cache::HangarNumpy10(_) | Cache::MemmapCacheRoot(_)) => Err(other),
        }
    }

    /// The kind of cache.
    pub fn kind(&self) -> CacheKind {
        match self {
            Cache::StowageNpy(_) => CacheKind::StowageNpy,
            Cache::Memmap(kind, _) => *kind,
            Cache::HangarNumpy10(_) => CacheKind::HangarNumpy10,
            Cache::MemmapCacheRoot(_) => CacheKind::MemmapCacheRoot,
        }
    }

    /// Why `stowage <what>` cannot use this cache at `path` (it holds no keys), and what to do
    /// instead; `None` for a cache with keys.
    pub fn why_no_keys(&self, path: &Path, what: &str) -> Option<String> {
        let kind = self.kind().description();
        match self {
            Cache::StowageNpy(_) | Cache::Memmap(..) => None,
            Cache::HangarNumpy10(_) => Some(format!(
                "{} is a {kind}: it holds no keys for `stowage {what}` (hangar keeps its records \
                 in its LMDB database); read one sample with `stowage get {} --record RECORD \
                 --out FILE.npy`",
                path.display(),
                path.display()
            )),
            Cache::MemmapCacheRoot(caches) => {
                let names: Vec<String> = caches
                    .iter()
                    .map(|c| c.file_name().unwrap_or_default().to_string_lossy().into_owned())
                    .collect();
                let first = caches.first().map_or(path.to_path_buf(), Clone::clone);
                Some(format!(
                    "{} is a {kind} ({}): `stowage {what}` reads one cache, so name it, as in \
                     `stowage {what} {}`; `stowage inspect {}` reports them all",
                    path.display(),
                    names.join(", "),
                    first.display(),
                    path.display()
                ))
            }
        }
    }
}

/// Detects and opens `path` read-only (no lock; a writer is never blocked).
pub fn open(path: &Path) -> Result<Cache, CliError> {
    Ok(match detect(path)? {
        CacheKind::StowageNpy => {
            Cache::StowageNpy(Box::new(NpyBackend::open_read_only(path, NpyOptions::default())?))
        }
        kind @ (CacheKind::StowageMemmap | CacheKind::DnanetMemmap) => Cache::Memmap(
            kind,
            Box::new(MemmapBackend::open_read_only(path, MemmapOptions::default())?),
        ),
        CacheKind::HangarNumpy10 => Cache::HangarNumpy10(HangarDir::scan(path)?),
        CacheKind::MemmapCacheRoot => Cache::MemmapCacheRoot(memmap_cache_dirs(path)?),
    })
}

/// Opens `path` as a [`Backend`], or says why a bare data directory or a directory of caches has
/// no keys for `stowage <what>` (`"keys"`, `"get KEY"`).
pub fn open_backend(path: &Path, what: &str) -> Result<Box<dyn Backend>, CliError> {
    open(path)?
        .into_backend()
        .map_err(|cache| CliError::new(cache.why_no_keys(path, what).unwrap_or_default()))
}
