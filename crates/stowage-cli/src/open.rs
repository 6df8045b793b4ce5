//! Opening a path read-only as a cache with keys, through the registry (no lock: a writer is
//! never blocked), or saying why a path holds no keys and what to do instead.

use std::path::Path;

use stowage_core::{DynReader, Error, Format, Registry};

use crate::builtin::Builtin;
use crate::error::CliError;
use crate::locate::{DIRECTORY, Located, Recognized, locate};
use crate::walk::Found;
use stowage_core::describe::relative_name;

/// Opens the cache at `path` for `stowage <what>` (`"keys"`, `"get KEY"`): the reader of the
/// factory that recognizes it, and the format it recognized. A directory of caches, a bare hangar
/// data directory (whose records are in hangar's database) or a format whose factory reads no
/// samples is an error saying why and what to do instead.
pub fn open_reader(
    registry: &Registry,
    path: &Path,
    what: &str,
) -> Result<(Box<DynReader>, &'static Format), CliError> {
    match locate(registry, path)? {
        Located::Cache(recognized) => {
            Ok((open_recognized(recognized, path, what)?, recognized.format))
        }
        Located::Directory(found) => Err(directory_has_no_keys(path, &found, what)),
    }
}

/// Opens the cache at `path`, which `recognized` says what it is, for `stowage <what>`.
pub fn open_recognized(
    recognized: Recognized<'_>,
    path: &Path,
    what: &str,
) -> Result<Box<DynReader>, CliError> {
    if Builtin::HangarNumpy10.is(recognized.format) {
        return Err(CliError::new(format!(
            "{} is a {}: it holds no keys for `stowage {what}` (hangar keeps its records in its \
             LMDB database); read one sample with `stowage get {} --record RECORD --out \
             FILE.npy`",
            path.display(),
            recognized.format.description,
            path.display()
        )));
    }
    recognized.factory.open_reader(path).map_err(|e| match e {
        Error::Unsupported { .. } => CliError::new(format!(
            "{} is a {}: the {} backend reads no samples from it for `stowage {what}` ({e})",
            path.display(),
            recognized.format.description,
            recognized.factory.name()
        )),
        other => other.into(),
    })
}

/// Why `stowage <what>` cannot use the directory of caches at `path`, and what to do instead.
pub fn directory_has_no_keys(path: &Path, found: &[Found<'_>], what: &str) -> CliError {
    let names: Vec<String> = found.iter().map(|(cache, _)| relative_name(cache, path)).collect();
    let first = found.first().map_or(path.to_path_buf(), |(cache, _)| cache.clone());
    CliError::new(format!(
        "{} is a {} ({}): `stowage {what}` reads one cache, so name it, as in `stowage {what} \
         {}`; `stowage inspect {}` reports them all",
        path.display(),
        DIRECTORY.description,
        names.join(", "),
        first.display(),
        path.display()
    ))
}
