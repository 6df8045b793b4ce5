//! [`RemoteFactory`]: creates, opens and recognizes caches on stores, for the registry, the
//! `stowage` command and the conformance suite.
//!
//! A cache is named by its URL (`s3://bucket/prefix`, `gs://`, `az://`, `file:///dir`,
//! `memory://name/prefix`), given where a path is taken. A plain local path is taken as
//! `file://` of that directory, so that the same layout serves several writers of a cache on a
//! local (or shared) file system; it is recognized by its `stowage.json`, like every stowage
//! cache.
//!
//! [`RemoteFactory::mapped`] is for test harnesses that hand out local paths (the conformance
//! suite): it keeps every cache under one base URL instead, at the path's text.

use std::path::Path;

use stowage_core::location::url_scheme;
use stowage_core::recognize::marker;
use stowage_core::{
    BackendFactory, Capabilities, DynBackend, Error, Format, OpenMode, Result, Schema,
};

use crate::cache::{BACKEND_NAME, FORMAT, RemoteCache, RemoteOptions, capabilities};
use crate::identity::{FORMAT_ID, IDENTITY, marker_format};
use crate::store::RemoteStore;

/// The URL schemes the factory serves.
pub const URL_SCHEMES: &[&str] = &["s3", "gs", "az", "file", "memory"];

/// Creates, opens and recognizes caches on stores (see the module docs).
///
/// ```
/// use std::path::Path;
/// use stowage_core::{BackendFactory, DType, OpenMode, Reader, Schema, ShapeRule};
/// use stowage_remote::{RemoteFactory, RemoteOptions};
///
/// let dir = tempfile::tempdir().unwrap();
/// let factory = RemoteFactory::new(RemoteOptions {
///     node_cache: Some(dir.path().into()),
///     ..Default::default()
/// });
/// let schema = Schema::new().tensor("x", DType::U8, ShapeRule::Fixed(vec![3]));
/// let url = Path::new("memory://factory-doc/cache");
/// factory.create(url, &schema).unwrap().finalize().unwrap();
/// assert_eq!(factory.recognize(url).unwrap().unwrap().id, "stowage-remote");
/// assert!(factory.open(url, OpenMode::ReadOnly).unwrap().is_finalized());
/// ```
#[derive(Clone, Debug, Default)]
pub struct RemoteFactory {
    options: RemoteOptions,
    base: Option<String>,
}

impl RemoteFactory {
    /// A factory that opens caches with `options`.
    pub fn new(options: RemoteOptions) -> RemoteFactory {
        RemoteFactory { options, base: None }
    }

    /// A factory that keeps the cache of local path `/a/b` at `<base>/a/b` (for test harnesses
    /// that hand out local paths).
    pub fn mapped(base: &str, options: RemoteOptions) -> RemoteFactory {
        RemoteFactory { options, base: Some(base.trim_end_matches('/').to_owned()) }
    }

    /// The options caches are opened with.
    pub fn options(&self) -> &RemoteOptions {
        &self.options
    }

    /// The URL of the cache at `path`, and whether `path` is a plain local directory.
    ///
    /// Errors: [`Error::Unsupported`] for a URL of a scheme this factory does not serve;
    /// [`Error::InvalidArgument`] for a local path that is not absolute and cannot be made so.
    pub fn url_of(&self, path: &Path) -> Result<(String, bool)> {
        if let Some(base) = &self.base {
            let text = path.to_string_lossy();
            return Ok((format!("{base}/{}", text.trim_start_matches('/')), false));
        }
        if let Some(scheme) = url_scheme(path) {
            if !URL_SCHEMES.contains(&scheme.as_str()) {
                // RemoteUrl::parse names the URL and the schemes served.
                crate::RemoteUrl::parse(&path.to_string_lossy())?;
            }
            return Ok((path.to_string_lossy().into_owned(), false));
        }
        let absolute = std::path::absolute(path).map_err(|e| Error::io(path, e))?;
        let url = url::Url::from_directory_path(&absolute).map_err(|()| {
            Error::invalid(format!("{} cannot be written as a file:// URL", absolute.display()))
        })?;
        Ok((url.as_str().trim_end_matches('/').to_owned(), true))
    }

    fn store(&self, url: &str) -> Result<RemoteStore> {
        self.options.open_store(url)
    }
}

impl BackendFactory for RemoteFactory {
    fn name(&self) -> &'static str {
        BACKEND_NAME
    }

    fn capabilities(&self) -> Capabilities {
        capabilities()
    }

    fn formats(&self) -> &'static [Format] {
        std::slice::from_ref(&FORMAT)
    }

    fn url_schemes(&self) -> &'static [&'static str] {
        // A mapped factory takes local-looking paths only (they name objects under its base).
        if self.base.is_some() { &[] } else { URL_SCHEMES }
    }

    fn recognize(&self, path: &Path) -> Result<Option<&'static Format>> {
        let (url, local) = self.url_of(path)?;
        if local {
            // A local directory is judged by its marker, as every factory judges one.
            return Ok((marker(path)?.format() == Some(FORMAT_ID)).then_some(&FORMAT));
        }
        let store = self.store(&url)?;
        match store.get_at_most(IDENTITY, 16 << 20) {
            Ok(bytes) => {
                let format = marker_format(&store.url().object_url(IDENTITY), &bytes)?;
                Ok((format == FORMAT_ID).then_some(&FORMAT))
            }
            Err(Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(e),
        }
    }

    fn create(&self, dir: &Path, schema: &Schema) -> Result<Box<DynBackend>> {
        let (url, local) = self.url_of(dir)?;
        capabilities().check_schema(schema, BACKEND_NAME)?;
        if local && holds_anything(dir)? && marker(dir)?.format() != Some(FORMAT_ID) {
            return Err(Error::AlreadyExists { path: dir.to_path_buf() });
        }
        let store = self.store(&url)?;
        Ok(Box::new(RemoteCache::create_at(dir.to_path_buf(), store, schema, &self.options)?))
    }

    fn open(&self, dir: &Path, mode: OpenMode) -> Result<Box<DynBackend>> {
        let (url, local) = self.url_of(dir)?;
        if local && !dir.join(IDENTITY).exists() {
            return Err(Error::NotFound {
                what: format!("a stowage cache at {} (no {IDENTITY})", dir.display()),
            });
        }
        let store = self.store(&url)?;
        let write = mode == OpenMode::Append;
        Ok(Box::new(RemoteCache::open_at(dir.to_path_buf(), store, &self.options, write)?))
    }
}

/// Whether local directory `dir` exists and holds any entry.
fn holds_anything(dir: &Path) -> Result<bool> {
    match std::fs::read_dir(dir) {
        Ok(mut entries) => Ok(entries.next().is_some()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
        Err(e) if e.kind() == std::io::ErrorKind::NotADirectory => Ok(true),
        Err(e) => Err(Error::io(dir, e)),
    }
}
