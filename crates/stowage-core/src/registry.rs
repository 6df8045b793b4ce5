//! [`Registry`]: the backends a program knows, and opening any path or URL with the one that
//! recognizes it.

use crate::{BackendFactory, DynReader, Error, Format, Result};
use std::path::Path;
use std::sync::Arc;

/// An ordered list of backend factories. [`Registry::open`] opens a path with the first factory
/// that recognizes it, so that a program (the `stowage` command) reads every registered format,
/// a third party's included, without knowing any of them.
///
/// A URL (`s3://bucket/cache`, [`crate::location::url_scheme`]) is asked only of the factories
/// that serve its scheme ([`BackendFactory::url_schemes`]): one no factory serves is refused by
/// name, never taken for the relative path `s3:/bucket/cache`.
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

    /// The URL schemes the factories serve ([`BackendFactory::url_schemes`]), each once, in the
    /// order they are registered.
    pub fn url_schemes(&self) -> Vec<&'static str> {
        let mut schemes: Vec<&'static str> = Vec::new();
        for scheme in self.factories().flat_map(|factory| factory.url_schemes().iter()) {
            if !schemes.contains(scheme) {
                schemes.push(scheme);
            }
        }
        schemes
    }

    /// Every format of every factory, in the order they are recognized.
    pub fn formats(&self) -> impl Iterator<Item = &'static Format> + '_ {
        self.factories().flat_map(|factory| factory.formats().iter())
    }

    /// The first factory that recognizes `path`, and the format it recognized; `Ok(None)` when
    /// none does. A factory's error (a marker that claims its format but is unreadable) stops the
    /// search: it is never guessed around.
    ///
    /// A local path is asked of every factory; a URL only of those serving its scheme, and one
    /// that no factory serves is `Error::Unsupported` naming the schemes that are served
    /// ([`crate::location::refuse_unserved`]).
    pub fn recognize(&self, path: &Path) -> Result<Option<(&dyn BackendFactory, &'static Format)>> {
        crate::location::refuse_unserved(path, &self.url_schemes())?;
        let scheme = crate::location::url_scheme(path);
        let asked = self.factories().filter(|factory| match &scheme {
            None => true,
            Some(scheme) => factory.url_schemes().contains(&scheme.as_str()),
        });
        for factory in asked {
            if let Some(format) = factory.recognize(path)? {
                return Ok(Some((factory, format)));
            }
        }
        Ok(None)
    }

    /// Opens the cache at `path` read-only with the first factory that recognizes it.
    ///
    /// Errors: `Error::Unsupported` for a URL whose scheme no factory serves
    /// ([`Registry::recognize`]); `Error::NotFound` for a missing path, a URL where no factory
    /// serving its scheme recognized a cache, or a path no factory recognizes, listing what each
    /// format looks for; `Error::Incompatible` for a stowage cache whose format no factory
    /// registered; otherwise the factory's error.
    pub fn open(&self, path: &Path) -> Result<Box<DynReader>> {
        match self.recognize(path)? {
            Some((factory, _)) => factory.open_reader(path),
            None => Err(self.not_a_cache(path)),
        }
    }

    /// The error for a path no factory recognizes: the stowage format its marker names that no
    /// factory registered, or what each registered format looks for. For a URL (which is never
    /// looked at as a local path): the refusal of a scheme no factory serves, or
    /// `Error::NotFound` naming the URL and the factories that looked.
    pub fn not_a_cache(&self, path: &Path) -> Error {
        if let Some(scheme) = crate::location::url_scheme(path) {
            if let Err(refused) = crate::location::refuse_unserved(path, &self.url_schemes()) {
                return refused;
            }
            let looked: Vec<&str> = self
                .factories()
                .filter(|factory| factory.url_schemes().contains(&scheme.as_str()))
                .map(|factory| factory.name())
                .collect();
            return Error::NotFound {
                what: format!(
                    "no stowage cache at {} (the {} backend{} serving {scheme}:// found none)",
                    path.display(),
                    looked.join(", "),
                    if looked.len() == 1 { "" } else { "s" }
                ),
            };
        }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{
        Backend, Capabilities, DynBackend, OpenMode, Reader, Sample, Schema, ValidationLevel,
        ValidationReport,
    };
    use std::collections::HashMap;
    use std::path::PathBuf;
    use std::sync::Mutex;

    const MEM: Format = Format {
        id: "mem-test",
        description: "in-process test cache",
        signature: "mem-test://NAME",
    };

    /// The caches a [`MemFactory`] holds: name (the URL without `mem-test://`) to keys.
    type Store = Arc<Mutex<HashMap<String, Vec<String>>>>;

    /// Every path a factory was asked to recognize.
    type Asked = Arc<Mutex<Vec<PathBuf>>>;

    /// A factory serving `mem-test://NAME` from an in-process map.
    struct MemFactory {
        store: Store,
        asked: Asked,
    }

    /// A factory of local caches that recognizes none, recording what it is asked.
    struct LocalSpy {
        asked: Asked,
    }

    /// One `mem-test://` cache, read-only.
    struct MemCache {
        path: PathBuf,
        keys: Vec<String>,
        schema: Schema,
        caps: Capabilities,
    }

    impl MemFactory {
        fn name_of(path: &Path) -> Option<String> {
            let scheme = crate::location::url_scheme(path)?;
            let (_, name) = path.to_str()?.split_once("://")?;
            (scheme == "mem-test").then(|| name.to_owned())
        }
    }

    impl BackendFactory for MemFactory {
        fn name(&self) -> &'static str {
            "mem"
        }
        fn capabilities(&self) -> Capabilities {
            Capabilities::none()
        }
        fn formats(&self) -> &'static [Format] {
            std::slice::from_ref(&MEM)
        }
        fn url_schemes(&self) -> &'static [&'static str] {
            &["mem-test"]
        }
        fn recognize(&self, path: &Path) -> Result<Option<&'static Format>> {
            self.asked.lock().unwrap().push(path.to_path_buf());
            let held =
                Self::name_of(path).is_some_and(|n| self.store.lock().unwrap().contains_key(&n));
            Ok(held.then_some(&MEM))
        }
        fn create(&self, _: &Path, _: &Schema) -> Result<Box<DynBackend>> {
            Err(Error::unsupported("mem", "create"))
        }
        fn open(&self, path: &Path, _: OpenMode) -> Result<Box<DynBackend>> {
            let keys =
                Self::name_of(path).and_then(|n| self.store.lock().unwrap().get(&n).cloned());
            let keys = keys.ok_or_else(|| Error::NotFound { what: path.display().to_string() })?;
            let (schema, caps) = (Schema::new(), Capabilities::none());
            Ok(Box::new(MemCache { path: path.to_path_buf(), keys, schema, caps }))
        }
    }

    impl BackendFactory for LocalSpy {
        fn name(&self) -> &'static str {
            "local-spy"
        }
        fn capabilities(&self) -> Capabilities {
            Capabilities::none()
        }
        fn formats(&self) -> &'static [Format] {
            &[]
        }
        fn recognize(&self, path: &Path) -> Result<Option<&'static Format>> {
            self.asked.lock().unwrap().push(path.to_path_buf());
            Ok(None)
        }
        fn create(&self, _: &Path, _: &Schema) -> Result<Box<DynBackend>> {
            Err(Error::unsupported("local-spy", "create"))
        }
        fn open(&self, path: &Path, _: OpenMode) -> Result<Box<DynBackend>> {
            Err(Error::NotFound { what: path.display().to_string() })
        }
    }

    impl Reader for MemCache {
        fn name(&self) -> &'static str {
            "mem"
        }
        fn format(&self) -> &'static Format {
            &MEM
        }
        fn capabilities(&self) -> &Capabilities {
            &self.caps
        }
        fn schema(&self) -> &Schema {
            &self.schema
        }
        fn path(&self) -> &Path {
            &self.path
        }
        fn get(&self, key: &str) -> Result<Option<Sample>> {
            Ok(self.keys.iter().any(|k| k == key).then(Sample::new))
        }
        fn contains(&self, key: &str) -> Result<bool> {
            Ok(self.keys.iter().any(|k| k == key))
        }
        fn len(&self) -> usize {
            self.keys.len()
        }
        fn keys(&self) -> Result<Vec<String>> {
            Ok(self.keys.clone())
        }
        fn is_finalized(&self) -> bool {
            true
        }
        fn validate(&self, _: ValidationLevel) -> Result<ValidationReport> {
            Ok(ValidationReport::default())
        }
    }

    impl Backend for MemCache {
        fn put(&mut self, _: &str, _: &Sample) -> Result<()> {
            Err(Error::unsupported("mem", "put"))
        }
        fn flush(&mut self) -> Result<()> {
            Ok(())
        }
        fn finalize(&mut self) -> Result<()> {
            Ok(())
        }
    }

    /// A registry of a [`LocalSpy`] then a [`MemFactory`] holding `mem-test://a` (keys x, y),
    /// with what each is asked.
    fn registry() -> (Registry, Asked, Asked) {
        let (local, mem) = (Asked::default(), Asked::default());
        let store = Store::default();
        store.lock().unwrap().insert("a".into(), vec!["x".into(), "y".into()]);
        let registry = Registry::new()
            .with(LocalSpy { asked: local.clone() })
            .with(MemFactory { store, asked: mem.clone() });
        (registry, local, mem)
    }

    #[test]
    fn a_url_is_asked_only_of_the_factories_serving_its_scheme() {
        let (registry, local, mem) = registry();
        assert_eq!(registry.url_schemes(), ["mem-test"]);
        let reader = registry.open(Path::new("mem-test://a")).unwrap();
        assert_eq!(reader.keys().unwrap(), ["x", "y"]);
        assert_eq!(reader.path(), Path::new("mem-test://a"));
        // The scheme is matched whatever its case, as RFC 3986 says.
        let (factory, format) = registry.recognize(Path::new("MEM-TEST://a")).unwrap().unwrap();
        assert_eq!((factory.name(), format.id), ("mem", MEM.id));
        assert!(local.lock().unwrap().is_empty(), "{:?}", local.lock().unwrap());

        // A local path is still asked of every factory, in order.
        let missing = Path::new("/definitely/not/here");
        assert!(matches!(registry.open(missing), Err(Error::NotFound { .. })));
        assert_eq!(*local.lock().unwrap(), [missing]);
        assert_eq!(mem.lock().unwrap().last().map(PathBuf::as_path), Some(missing));
    }

    #[test]
    fn a_url_where_no_cache_is_is_not_found_naming_the_url_and_who_looked() {
        let (registry, local, _) = registry();
        let url = Path::new("mem-test://missing");
        let err = registry.open(url).err().expect("no cache there");
        let Error::NotFound { what } = &err else { panic!("{err}") };
        assert!(what.contains("no stowage cache at mem-test://missing"), "{what}");
        assert!(what.contains("the mem backend serving mem-test://"), "{what}");
        assert!(local.lock().unwrap().is_empty());
    }

    #[test]
    fn a_url_no_factory_serves_is_refused_naming_the_schemes_served() {
        let (registry, local, mem) = registry();
        for ask in [
            registry.recognize(Path::new("s3://bucket/cache")).map(|_| ()),
            registry.open(Path::new("s3://bucket/cache")).map(|_| ()),
            Err(registry.not_a_cache(Path::new("s3://bucket/cache"))),
        ] {
            let err = ask.unwrap_err();
            assert!(matches!(err, Error::Unsupported { .. }), "{err}");
            let text = err.to_string();
            assert!(text.contains("s3://bucket/cache is a URL (s3://)"), "{text}");
            assert!(text.contains("they serve mem-test://"), "{text}");
        }
        assert!(local.lock().unwrap().is_empty() && mem.lock().unwrap().is_empty());

        let local_only = Registry::new().with(LocalSpy { asked: Asked::default() });
        assert!(local_only.url_schemes().is_empty());
        let text = local_only.open(Path::new("mem-test://a")).err().unwrap().to_string();
        assert!(text.contains("no registered backend serves URLs"), "{text}");
    }

    #[test]
    fn each_served_scheme_is_listed_once() {
        let registry = Registry::new()
            .with(MemFactory { store: Store::default(), asked: Asked::default() })
            .with(LocalSpy { asked: Asked::default() })
            .with(MemFactory { store: Store::default(), asked: Asked::default() });
        assert_eq!(registry.url_schemes(), ["mem-test"]);
    }
}
