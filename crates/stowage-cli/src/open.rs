//! Opening a detected cache read-only (no lock: a writer is never blocked).

use std::path::{Path, PathBuf};

use stowage_arrow::{ArrowBackend, ArrowOptions};
use stowage_core::OpenMode;
use stowage_hdf5::Hdf5Backend;
use stowage_memmap::{MemmapBackend, MemmapOptions};
use stowage_npy::{NpyBackend, NpyOptions};

use crate::detect::{CacheKind, detect};
use crate::error::CliError;
use crate::source::{AenetSource, BackendSource, SampleSource, TorchcachexSource};
use crate::walk::{find_caches, relative};

/// A cache, opened read-only.
pub enum Cache {
    /// A cache with keys.
    Source(Box<dyn SampleSource>),
    /// A bare hangar NUMPY_10 data directory (no keys here).
    HangarNumpy10,
    /// A directory holding caches: their paths, in walk order.
    Directory(Vec<PathBuf>),
}

impl Cache {
    /// The cache with keys, or the cache back when it holds none.
    pub fn into_source(self) -> Result<Box<dyn SampleSource>, Cache> {
        match self {
            Cache::Source(source) => Ok(source),
            other => Err(other),
        }
    }

    /// Why `stowage <what>` cannot use this cache at `path` (it holds no keys), and what to do
    /// instead; `None` for a cache with keys.
    pub fn why_no_keys(&self, path: &Path, what: &str) -> Option<String> {
        match self {
            Cache::Source(_) => None,
            Cache::HangarNumpy10 => Some(format!(
                "{} is a {}: it holds no keys for `stowage {what}` (hangar keeps its records \
                 in its LMDB database); read one sample with `stowage get {} --record RECORD \
                 --out FILE.npy`",
                path.display(),
                CacheKind::HangarNumpy10.description(),
                path.display()
            )),
            Cache::Directory(caches) => {
                let names: Vec<String> = caches.iter().map(|c| relative(c, path)).collect();
                let first = caches.first().map_or(path.to_path_buf(), Clone::clone);
                Some(format!(
                    "{} is a {} ({}): `stowage {what}` reads one cache, so name it, as in \
                     `stowage {what} {}`; `stowage inspect {}` reports them all",
                    path.display(),
                    CacheKind::CacheRoot.description(),
                    names.join(", "),
                    first.display(),
                    path.display()
                ))
            }
        }
    }
}

/// Opens the cache at `path`, which is of kind `kind`, for reading samples; `None` for the kinds
/// without keys (a bare hangar directory, a directory of caches).
pub fn open_kind(path: &Path, kind: CacheKind) -> Result<Option<Box<dyn SampleSource>>, CliError> {
    let backend = |backend: Box<dyn stowage_core::Backend>| -> Box<dyn SampleSource> {
        Box::new(BackendSource { kind, backend })
    };
    Ok(Some(match kind {
        CacheKind::StowageNpy => {
            backend(Box::new(NpyBackend::open_read_only(path, NpyOptions::default())?))
        }
        CacheKind::StowageMemmap | CacheKind::DnanetMemmap => {
            backend(Box::new(MemmapBackend::open_read_only(path, MemmapOptions::default())?))
        }
        CacheKind::StowageArrow => backend(Box::new(ArrowBackend::open(
            path,
            OpenMode::ReadOnly,
            ArrowOptions::default(),
        )?)),
        CacheKind::StowageHdf5 => backend(Box::new(Hdf5Backend::open(path, OpenMode::ReadOnly)?)),
        CacheKind::Torchcachex => Box::new(TorchcachexSource::open(path)?),
        CacheKind::AenetHdf5 => Box::new(AenetSource::open(path)?),
        CacheKind::HangarNumpy10 | CacheKind::CacheRoot => return Ok(None),
    }))
}

/// Detects and opens `path` read-only.
pub fn open(path: &Path) -> Result<Cache, CliError> {
    let kind = detect(path)?;
    if let Some(source) = open_kind(path, kind)? {
        return Ok(Cache::Source(source));
    }
    Ok(match kind {
        CacheKind::HangarNumpy10 => Cache::HangarNumpy10,
        _ => Cache::Directory(find_caches(path)?.into_iter().map(|(p, _)| p).collect()),
    })
}

/// Opens `path` as a cache with keys, or says why a bare data directory or a directory of caches
/// has no keys for `stowage <what>` (`"keys"`, `"get KEY"`).
pub fn open_source(path: &Path, what: &str) -> Result<Box<dyn SampleSource>, CliError> {
    open(path)?
        .into_source()
        .map_err(|cache| CliError::new(cache.why_no_keys(path, what).unwrap_or_default()))
}
