//! The conformance suite's view of caches on a store: a cache's objects by name, through
//! [`RemoteStore`], for the cases that damage or inspect a cache's files.

use std::io;
use std::path::Path;

use stowage_conformance::storage::CacheStorage;
use stowage_core::Error;
use stowage_core::bytes::Bytes;
use stowage_remote::RemoteStore;

/// Caches at `<base>/<path>`, as [`stowage_remote::RemoteFactory::mapped`] keeps them.
pub struct StoreStorage {
    /// The base URL the factory maps paths under.
    pub base: String,
    /// The store's settings.
    pub options: Vec<(String, String)>,
    /// What it is, for messages.
    pub name: &'static str,
    /// Whether other processes see the same store (S3: yes; memory://: no).
    pub shared: bool,
}

impl StoreStorage {
    fn store(&self, cache: &Path) -> io::Result<RemoteStore> {
        let url = format!("{}/{}", self.base, cache.to_string_lossy().trim_start_matches('/'));
        let options: Vec<(&str, &str)> =
            self.options.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        RemoteStore::open_with(&url, &options).map_err(to_io)
    }
}

fn to_io(e: Error) -> io::Error {
    match e {
        Error::NotFound { what } => io::Error::new(io::ErrorKind::NotFound, what),
        other => io::Error::other(other.to_string()),
    }
}

impl CacheStorage for StoreStorage {
    fn name(&self) -> &str {
        self.name
    }

    fn is_local_files(&self) -> bool {
        false
    }

    fn shared_between_processes(&self) -> bool {
        self.shared
    }

    fn list(&self, cache: &Path) -> io::Result<Vec<String>> {
        let listed = self.store(cache)?.list("").map_err(to_io)?;
        Ok(listed.into_iter().map(|object| object.name).collect())
    }

    fn read(&self, cache: &Path, name: &str) -> io::Result<Vec<u8>> {
        Ok(self.store(cache)?.get(name).map_err(to_io)?.to_vec())
    }

    fn write(&self, cache: &Path, name: &str, bytes: &[u8]) -> io::Result<()> {
        self.store(cache)?.put_pointer(name, Bytes::copy_from_slice(bytes)).map_err(to_io)
    }

    fn remove(&self, cache: &Path, name: &str) -> io::Result<()> {
        let store = self.store(cache)?;
        if store.head(name).map_err(to_io)?.is_none() {
            return Err(io::Error::new(io::ErrorKind::NotFound, name.to_owned()));
        }
        store.delete(name).map_err(to_io)
    }
}
