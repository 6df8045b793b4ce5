//! What a path is: a cache that one of the registered factories recognizes
//! ([`Registry::recognize`]), or a directory holding caches below it.
//!
//! Recognizing is the factories' job, in registration order, and follows the core's marker rule
//! ([`stowage_core::recognize`]): a directory with a `stowage.json` or `stowage.log` is the
//! stowage cache its marker names, whatever else it holds; only a directory without one is probed
//! for the original tools' layouts. A marker that does not parse, or names a format no registered
//! factory reads, is an error here: it is never guessed around.
//!
//! The "directory of caches" (DNANet's cache root, a folder of experiments) is this command's own
//! concept, not a format: `inspect` walks it ([`crate::walk`]); the commands that read one cache
//! name the caches in it instead.
//!
//! A URL (`s3://bucket/cache`) is only ever a cache: it is asked of the factories serving its
//! scheme and never looked at on the local file system (no stat, no marker, no walk).

use std::path::Path;

use stowage_core::recognize::{Marker, marker};
use stowage_core::{BackendFactory, Format, Registry};

use crate::error::{CliError, io_error};
use crate::walk::{Found, find_caches};

/// A directory holding caches below it: what `inspect` walks. Not a format any factory reads,
/// so it is never in a [`Registry`]; it has the shape of one for the reports and error messages.
pub const DIRECTORY: Format = Format {
    id: "directory",
    description: "directory of caches",
    signature: "subdirectories holding caches",
};

/// A cache a registered factory recognized: the factory and which of its formats the cache is.
#[derive(Clone, Copy)]
pub struct Recognized<'r> {
    /// The factory that recognized it, which opens and validates it.
    pub factory: &'r dyn BackendFactory,
    /// The format it is: the factory's own, or an original tool's it reads.
    pub format: &'static Format,
}

impl std::fmt::Debug for Recognized<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} (factory {})", self.format.id, self.factory.name())
    }
}

/// What a path is.
#[derive(Debug)]
pub enum Located<'r> {
    /// A cache of a registered format.
    Cache(Recognized<'r>),
    /// A directory that is none, with caches below it: each, in walk order.
    Directory(Vec<Found<'r>>),
}

/// Finds out what `path` is.
///
/// Errors name the path and say what was looked for: a path that does not exist, a marker that
/// does not parse or names a format no registered factory reads, a file no factory recognizes, a
/// directory that is none of the registered formats and holds no cache below it.
pub fn locate<'r>(registry: &'r Registry, path: &Path) -> Result<Located<'r>, CliError> {
    if let Some(recognized) = recognize_here(registry, path)? {
        return Ok(Located::Cache(recognized));
    }
    if is_url(path) {
        return Err(registry.not_a_cache(path).into());
    }
    if !path.is_dir() {
        return Err(CliError::new(format!(
            "{} is a file, not a cache directory, and no registered format reads it as a file; \
             the formats are: {}",
            path.display(),
            formats_looked_for(registry, "; ")
        )));
    }
    let found = find_caches(registry, path)?;
    if found.is_empty() {
        return Err(CliError::new(format!(
            "{} is not a cache: found neither {} nor {} ({})",
            path.display(),
            formats_looked_for(registry, " nor "),
            DIRECTORY.signature,
            DIRECTORY.description
        )));
    }
    Ok(Located::Directory(found))
}

/// The cache `path` itself is, without looking below it: `Ok(None)` when no registered factory
/// recognizes it (and it has no stowage marker). A URL is asked only of the factories serving
/// its scheme ([`Registry::recognize`]).
///
/// Errors: `path` cannot be read; a URL of a scheme no registered factory serves; a factory's
/// error (a path that claims to be its cache but cannot be read); a `stowage.json` or
/// `stowage.log` that does not parse or names a format no registered factory reads.
pub fn recognize_here<'r>(
    registry: &'r Registry,
    path: &Path,
) -> Result<Option<Recognized<'r>>, CliError> {
    if is_url(path) {
        let found = registry.recognize(path)?;
        return Ok(found.map(|(factory, format)| Recognized { factory, format }));
    }
    std::fs::metadata(path).map_err(|e| io_error(path, &e))?;
    if let Some((factory, format)) = registry.recognize(path)? {
        return Ok(Some(Recognized { factory, format }));
    }
    // No factory claimed it. A stowage marker is never guessed around: one that does not parse
    // is an error (whether or not a factory said so), and so is one naming a format no
    // registered factory reads.
    let (file, format) = match marker(path)? {
        Marker::None => return Ok(None),
        Marker::StowageJson(format) => ("stowage.json", format),
        Marker::StowageLog(format) => ("stowage.log", format),
    };
    Err(CliError::new(format!(
        "{}: format {format:?} is not one this command reads (it reads {})",
        path.join(file).display(),
        formats_looked_for(registry, "; ")
    )))
}

/// Whether `path` is written as a URL (`s3://...`): a cache for the factories serving its scheme,
/// never a local path.
pub fn is_url(path: &Path) -> bool {
    stowage_core::location::url_scheme(path).is_some()
}

/// `Err` naming `path` when it is a URL, for `stowage <what>`, which works on local files only
/// (`why` says what it does to them).
pub fn local_only(path: &Path, what: &str, why: &str) -> Result<(), CliError> {
    match stowage_core::location::url_scheme(path) {
        None => Ok(()),
        Some(scheme) => Err(CliError::new(format!(
            "{} is a URL ({scheme}://): `stowage {what}` {why}, so it takes a local path only",
            path.display()
        ))),
    }
}

/// Every registered format as `signature (description)`, joined by `separator`: what
/// recognizing looks for, for the "not a cache" errors.
fn formats_looked_for(registry: &Registry, separator: &str) -> String {
    let parts: Vec<String> = registry
        .formats()
        .map(|format| format!("{} ({})", format.signature, format.description))
        .collect();
    if parts.is_empty() {
        "no format (no backend is registered)".to_owned()
    } else {
        parts.join(separator)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_directory_of_nothing_lists_every_registered_format() {
        let dir = tempfile::tempdir().unwrap();
        let registry = crate::default_registry();
        let e = locate(&registry, dir.path()).unwrap_err().to_string();
        assert!(e.contains("is not a cache: found neither stowage.json"), "{e}");
        for format in registry.formats() {
            assert!(e.contains(format.signature) && e.contains(format.description), "{e}");
        }
        assert!(e.ends_with("subdirectories holding caches (directory of caches)"), "{e}");

        let e = locate(&Registry::new(), dir.path()).unwrap_err().to_string();
        assert!(e.contains("no format (no backend is registered)"), "{e}");
    }

    #[test]
    fn a_marker_naming_an_unregistered_format_is_an_error_naming_the_file() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("stowage.json"), br#"{"format": "someone-else"}"#).unwrap();
        let registry = crate::default_registry();
        let e = recognize_here(&registry, dir.path()).unwrap_err().to_string();
        assert!(e.contains("stowage.json: format \"someone-else\" is not one this command reads"));
        assert!(e.contains(stowage_npy::STOWAGE_NPY.signature), "{e}");
    }
}
