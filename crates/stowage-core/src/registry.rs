//! [`Registry`]: the backends a program knows, and opening any path with the one that
//! recognizes it.

use crate::{BackendFactory, DynReader, Error, Format, Result};
use std::path::Path;
use std::sync::Arc;

/// An ordered list of backend factories. [`Registry::open`] opens a path with the first factory
/// that recognizes it, so that a program (the `stowage` command) reads every registered format,
/// a third party's included, without knowing any of them.
///
/// ```
/// use stowage_core::Registry;
/// let registry = Registry::new();
/// let opened = registry.open(std::path::Path::new("/definitely/not/here"));
/// assert!(matches!(opened, Err(stowage_core::Error::NotFound { .. })));
/// // A URL is refused by name, never looked for as a relative path `s3:/bucket/cache`.
/// let opened = registry.open(std::path::Path::new("s3://bucket/cache"));
/// assert!(matches!(opened, Err(stowage_core::Error::Unsupported { .. })));
/// ```
#[derive(Clone, Default)]
pub struct Registry {
    factories: Vec<Arc<dyn BackendFactory>>,
}

impl std::fmt::Debug for Registry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.factories.iter().map(|factory| factory.name())).finish()
    }
}

impl Registry {
    /// An empty registry.
    pub fn new() -> Registry {
        Registry::default()
    }

    /// Adds `factory` after the ones registered so far (it is asked after them).
    pub fn register(&mut self, factory: impl BackendFactory + 'static) -> &mut Registry {
        self.factories.push(Arc::new(factory));
        self
    }

    /// [`Registry::register`], by value, for chaining.
    pub fn with(mut self, factory: impl BackendFactory + 'static) -> Registry {
        self.register(factory);
        self
    }

    /// The factories, in the order they are asked.
    pub fn factories(&self) -> impl Iterator<Item = &dyn BackendFactory> {
        self.factories.iter().map(|factory| &**factory)
    }

    /// The factory named `name` ([`BackendFactory::name`]).
    pub fn factory(&self, name: &str) -> Option<&dyn BackendFactory> {
        self.factories().find(|factory| factory.name() == name)
    }

    /// Every format of every factory, in the order they are recognized.
    pub fn formats(&self) -> impl Iterator<Item = &'static Format> + '_ {
        self.factories().flat_map(|factory| factory.formats().iter())
    }

    /// The first factory that recognizes `path`, and the format it recognized; `Ok(None)` when
    /// none does. A factory's error (a marker that claims its format but is unreadable) stops the
    /// search: it is never guessed around.
    pub fn recognize(&self, path: &Path) -> Result<Option<(&dyn BackendFactory, &'static Format)>> {
        crate::location::refuse_url(path)?;
        for factory in self.factories() {
            if let Some(format) = factory.recognize(path)? {
                return Ok(Some((factory, format)));
            }
        }
        Ok(None)
    }

    /// Opens the cache at `path` read-only with the first factory that recognizes it.
    ///
    /// Errors: `Error::Unsupported` for a URL (`s3://...`, [`crate::location::refuse_url`]);
    /// `Error::NotFound` for a missing path or one no factory recognizes, listing what
    /// each format looks for; `Error::Incompatible` for a stowage cache whose format no factory
    /// registered; otherwise the factory's error.
    pub fn open(&self, path: &Path) -> Result<Box<DynReader>> {
        match self.recognize(path)? {
            Some((factory, _)) => factory.open_reader(path),
            None => Err(self.not_a_cache(path)),
        }
    }

    /// The error for a path no factory recognizes: the stowage format its marker names that no
    /// factory registered, or what each registered format looks for.
    pub fn not_a_cache(&self, path: &Path) -> Error {
        if std::fs::symlink_metadata(path).is_err() {
            return Error::NotFound {
                what: format!("{} (no such file or directory)", path.display()),
            };
        }
        if let Ok(marker) = crate::recognize::marker(path)
            && let Some(format) = marker.format()
        {
            let known: Vec<String> = self.formats().map(|f| format!("{:?}", f.id)).collect();
            return Error::Incompatible {
                path: path.to_path_buf(),
                detail: format!(
                    "a stowage cache of format {format:?}, which no registered backend reads \
                     (they read {})",
                    known.join(", ")
                ),
            };
        }
        let expected: Vec<String> = self
            .formats()
            .map(|format| format!("{} ({})", format.description, format.signature))
            .collect();
        Error::NotFound {
            what: format!(
                "a cache at {}: it is none of the registered formats: {}",
                path.display(),
                if expected.is_empty() {
                    "none registered".to_owned()
                } else {
                    expected.join("; ")
                }
            ),
        }
    }
}
