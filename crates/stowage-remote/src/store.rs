//! Blocking access to the objects of one cache URL, with the checks every caller needs.
//!
//! [`RemoteStore`] wraps an `object_store` client for the store a [`RemoteUrl`] names and calls it
//! through this process's runtime ([`crate::runtime`]). The client is made again in a forked
//! child (its connections belong to the parent), so a store opened before a fork works in the
//! DataLoader workers after it.
//!
//! What it adds to object_store:
//! - names are relative to the cache's prefix and may never leave it;
//! - a range read returns exactly the bytes asked for, or an error: a body cut short by the
//!   network is retried, never returned as data;
//! - [`RemoteStore::put_new`] creates an object only if it does not exist (`PutMode::Create`, a
//!   conditional put on every store), and resolves a response lost after a successful put by
//!   reading the object back instead of retrying blindly;
//! - errors name the object's URL.

use std::collections::HashMap;
use std::fmt;
use std::ops::Range;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

use futures_util::{StreamExt, TryStreamExt};
#[cfg(feature = "cloud")]
use object_store::aws::AmazonS3Builder;
#[cfg(feature = "cloud")]
use object_store::azure::MicrosoftAzureBuilder;
#[cfg(feature = "cloud")]
use object_store::gcp::GoogleCloudStorageBuilder;
use object_store::local::LocalFileSystem;
use object_store::memory::InMemory;
use object_store::{ObjectStore, ObjectStoreExt, PutMode, PutOptions, PutPayload};
use stowage_core::bytes::Bytes;
use stowage_core::{Error, Result};

use crate::coalesce;
use crate::remote_url::{RemoteUrl, Scheme};
use crate::runtime::block_on;

/// How many times a read is tried before its error is returned: object_store retries failed HTTP
/// requests itself; these attempts cover what it cannot see, such as a body that ended early.
pub const READ_ATTEMPTS: usize = 3;

/// Ranges of one object closer than this are fetched by one request (object_store's own
/// default): a request costs more than a megabyte of transfer on every store.
pub const COALESCE_GAP: u64 = object_store::OBJECT_STORE_COALESCE_DEFAULT;

/// How many requests of one [`RemoteStore::get_ranges`] are in flight at once.
pub const RANGES_IN_FLIGHT: usize = 16;

/// How many times [`RemoteStore::put_new`] sends its put when the store's answer is lost and
/// reading back finds no object.
pub const PUT_ATTEMPTS: usize = 3;

/// Makes the object_store client of a [`RemoteStore`]; called once per process.
pub type StoreMaker = Arc<dyn Fn() -> Result<Arc<dyn ObjectStore>> + Send + Sync>;

/// What [`RemoteStore::put_new`] found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Created {
    /// The store acknowledged the conditional put: the object is new.
    New,
    /// The object already holds exactly these bytes: an earlier attempt whose answer was lost
    /// wrote it, or another writer wrote the same content.
    AlreadyThere,
}

/// One object as a listing or a `head` reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ObjectInfo {
    /// Its name relative to the cache's prefix, e.g. `versions/1`.
    pub name: String,
    /// Its size in bytes.
    pub size: u64,
    /// The store's entity tag, when it reports one.
    pub e_tag: Option<String>,
}

/// The objects of one cache URL, read and written with blocking calls.
///
/// ```
/// use stowage_remote::{Created, RemoteStore};
/// use stowage_core::bytes::Bytes;
///
/// let store = RemoteStore::open("memory://doc-store/cache").unwrap();
/// let created = store.put_new("versions/1", Bytes::from_static(b"manifest")).unwrap();
/// assert_eq!(created, Created::New);
/// assert_eq!(store.get_range("versions/1", 0..3).unwrap().as_ref(), b"man");
/// // The same bytes again are found, not written twice; other bytes are a conflict.
/// assert_eq!(store.put_new("versions/1", Bytes::from_static(b"manifest")).unwrap(), Created::AlreadyThere);
/// assert!(store.put_new("versions/1", Bytes::from_static(b"other")).is_err());
/// ```
pub struct RemoteStore {
    url: RemoteUrl,
    make: StoreMaker,
    /// The client made in this process, with the process id it was made in.
    client: Mutex<Option<(u32, Arc<dyn ObjectStore>)>>,
}

impl fmt::Debug for RemoteStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RemoteStore").field("url", &self.url.as_str()).finish_non_exhaustive()
    }
}

impl Clone for RemoteStore {
    /// The same store, sharing this process's client.
    fn clone(&self) -> RemoteStore {
        let client = self.client.lock().unwrap_or_else(PoisonError::into_inner).clone();
        RemoteStore {
            url: self.url.clone(),
            make: Arc::clone(&self.make),
            client: Mutex::new(client),
        }
    }
}

impl RemoteStore {
    /// Opens the store `url` names, configured from the environment (`AWS_ENDPOINT_URL`,
    /// `AWS_ACCESS_KEY_ID`, `GOOGLE_SERVICE_ACCOUNT`, `AZURE_STORAGE_ACCOUNT_NAME`, ...: the
    /// variables object_store's builders read).
    ///
    /// Errors: those of [`RemoteUrl::parse`], and [`Error::InvalidArgument`] when the store
    /// cannot be configured (naming the store and object_store's reason).
    pub fn open(url: &str) -> Result<RemoteStore> {
        RemoteStore::open_with(url, &[])
    }

    /// Like [`RemoteStore::open`], with configuration `options` (object_store's keys, e.g.
    /// `("aws_endpoint", "http://127.0.0.1:9000")`, `("aws_allow_http", "true")`) applied over
    /// the environment's. A `file://` or `memory://` store takes no options.
    pub fn open_with(url: &str, options: &[(&str, &str)]) -> Result<RemoteStore> {
        let url = RemoteUrl::parse(url)?;
        let options: Vec<(String, String)> =
            options.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
        let for_maker = url.clone();
        let make: StoreMaker = Arc::new(move || make_client(&for_maker, &options));
        let store = RemoteStore::with_maker(url, make);
        // Made now, so that a configuration error surfaces at open, not at the first read.
        store.client()?;
        Ok(store)
    }

    /// A store whose client `make` builds (once per process: again in a forked child). For
    /// wrappers such as [`crate::faults::FaultyStore`] and for stores configured in code.
    pub fn with_maker(url: RemoteUrl, make: StoreMaker) -> RemoteStore {
        RemoteStore { url, make, client: Mutex::new(None) }
    }

    /// The cache URL.
    pub fn url(&self) -> &RemoteUrl {
        &self.url
    }

    /// This process's client, made on first use and again after a fork.
    fn client(&self) -> Result<Arc<dyn ObjectStore>> {
        let pid = std::process::id();
        let mut slot = self.client.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some((made_in, client)) = slot.as_ref()
            && *made_in == pid
        {
            return Ok(Arc::clone(client));
        }
        let client = (self.make)()?;
        // The parent's client is forgotten, not dropped: its connections and timers belong to
        // the parent's runtime, whose threads this process does not have.
        if let Some(inherited) = slot.take() {
            std::mem::forget(inherited);
        }
        *slot = Some((pid, Arc::clone(&client)));
        Ok(client)
    }

    /// The whole object `name`.
    ///
    /// Errors: [`Error::NotFound`] naming its URL; [`Error::Io`] when the store fails
    /// ([`READ_ATTEMPTS`] tries) or returns a body of another length than the object's.
    pub fn get(&self, name: &str) -> Result<Bytes> {
        self.get_at_most(name, u64::MAX)
    }

    /// The whole object `name`, refused before its body is read when the store says it is
    /// larger than `max` bytes (a bound on what a hostile store can make a reader allocate).
    ///
    /// Errors: as [`RemoteStore::get`]; [`Error::Corrupted`] naming the object when it is larger
    /// than `max`.
    pub fn get_at_most(&self, name: &str, max: u64) -> Result<Bytes> {
        let path = self.url.object(name)?;
        let client = self.client()?;
        self.read_retrying(name, || async {
            let result = client.get(&path).await?;
            if result.meta.size > max {
                return Ok(Err(Error::corrupted(
                    self.url.object_url(name),
                    format!("{} bytes, above the {max} this object may have", result.meta.size),
                )));
            }
            let expected = result.range.end - result.range.start;
            Ok(Ok((result.bytes().await?, expected)))
        })
    }

    /// Bytes `range` of object `name`, exactly: a shorter body is retried, then an error.
    ///
    /// Errors: as [`RemoteStore::get`]; [`Error::InvalidArgument`] for an empty or reversed
    /// range.
    pub fn get_range(&self, name: &str, range: Range<u64>) -> Result<Bytes> {
        check_range(&self.url, name, &range)?;
        let path = self.url.object(name)?;
        let client = self.client()?;
        let expected = range.end - range.start;
        self.read_retrying(name, || async {
            Ok(Ok((client.get_range(&path, range.clone()).await?, expected)))
        })
    }

    /// Each of `ranges` of object `name`, fetched together: ranges closer than
    /// [`COALESCE_GAP`] share one request, and up to [`RANGES_IN_FLIGHT`] requests are in flight
    /// at once. Each part is exactly as long as its range.
    ///
    /// Errors: as [`RemoteStore::get_range`].
    pub fn get_ranges(&self, name: &str, ranges: &[Range<u64>]) -> Result<Vec<Bytes>> {
        let mut got = self.get_ranges_of(&[(name, ranges)])?;
        Ok(got.pop().expect("one object asked for"))
    }

    /// [`RemoteStore::get_ranges`] of several objects at once: each object's ranges coalesced as
    /// there, and up to [`RANGES_IN_FLIGHT`] requests in flight across all of them (a batch of
    /// keys spread over many objects waits for the slowest requests once, not once per object).
    ///
    /// Errors: as [`RemoteStore::get_range`], naming the object.
    pub fn get_ranges_of(&self, wanted: &[(&str, &[Range<u64>])]) -> Result<Vec<Vec<Bytes>>> {
        let mut paths = Vec::with_capacity(wanted.len());
        let mut fetched = Vec::with_capacity(wanted.len());
        for (name, ranges) in wanted {
            for range in *ranges {
                check_range(&self.url, name, range)?;
            }
            paths.push(self.url.object(name)?);
            fetched.push(coalesce::merge(ranges, COALESCE_GAP));
        }
        let requests: Vec<(usize, Range<u64>)> = fetched
            .iter()
            .enumerate()
            .flat_map(|(i, merged)| merged.iter().map(move |range| (i, range.clone())))
            .collect();
        let client = self.client()?;
        let mut last_error = None;
        'attempts: for _ in 0..READ_ATTEMPTS {
            let sent = futures_util::stream::iter(requests.iter().cloned())
                .map(|(i, range)| {
                    let (client, path) = (&client, &paths[i]);
                    async move { client.get_range(path, range).await.map_err(|e| (i, e)) }
                })
                .buffered(RANGES_IN_FLIGHT)
                .try_collect::<Vec<Bytes>>();
            let mut parts = match block_on(sent)? {
                Ok(parts) => parts.into_iter(),
                Err((i, e)) if is_final(&e) => return Err(store_error(&self.url, wanted[i].0, e)),
                Err((i, e)) => {
                    last_error = Some(store_error(&self.url, wanted[i].0, e));
                    continue;
                }
            };
            let mut out = Vec::with_capacity(wanted.len());
            for ((name, ranges), merged) in wanted.iter().zip(&fetched) {
                let object_parts: Vec<Bytes> = parts.by_ref().take(merged.len()).collect();
                match coalesce::cut(ranges, merged, &object_parts) {
                    Some(cut) => out.push(cut),
                    None => {
                        let (range, part) = merged
                            .iter()
                            .zip(&object_parts)
                            .find(|(range, part)| part.len() as u64 != range.end - range.start)
                            .expect("cut fails only on a short part");
                        last_error =
                            Some(short_body(&self.url, name, range.end - range.start, part.len()));
                        continue 'attempts;
                    }
                }
            }
            return Ok(out);
        }
        Err(last_error.expect("READ_ATTEMPTS > 0"))
    }

    /// The size and entity tag of object `name`, or `None` when there is none.
    ///
    /// Errors: [`Error::Io`] when the store fails.
    pub fn head(&self, name: &str) -> Result<Option<ObjectInfo>> {
        let path = self.url.object(name)?;
        let client = self.client()?;
        match block_on(client.head(&path))? {
            Ok(meta) => {
                Ok(Some(ObjectInfo { name: name.to_owned(), size: meta.size, e_tag: meta.e_tag }))
            }
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(store_error(&self.url, name, e)),
        }
    }

    /// Every object under `under` (a relative name such as `versions`; empty for the whole
    /// cache), sorted by name, with names relative to the cache's prefix.
    ///
    /// Errors: [`Error::Io`] when the store fails.
    pub fn list(&self, under: &str) -> Result<Vec<ObjectInfo>> {
        let path =
            if under.is_empty() { self.url.prefix().clone() } else { self.url.object(under)? };
        let client = self.client()?;
        let listed =
            self.list_retrying(under, || client.list(Some(&path)).try_collect::<Vec<_>>())?;
        Ok(self.infos(listed))
    }

    /// Removes object `name` (absent is not an error). stowage removes only objects it wrote
    /// and no reader needs; tests use it to damage caches.
    ///
    /// Errors: [`Error::Io`] when the store fails.
    pub fn delete(&self, name: &str) -> Result<()> {
        let path = self.url.object(name)?;
        let client = self.client()?;
        match block_on(client.delete(&path))? {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(store_error(&self.url, name, e)),
        }
    }

    /// Listed objects as [`ObjectInfo`]s named relative to the prefix, sorted by name.
    fn infos(&self, listed: Vec<object_store::ObjectMeta>) -> Vec<ObjectInfo> {
        let prefix_parts = self.url.prefix().parts().count();
        let mut objects: Vec<ObjectInfo> = listed
            .into_iter()
            .map(|meta| {
                let name: Vec<String> = meta
                    .location
                    .parts()
                    .skip(prefix_parts)
                    .map(|p| p.as_ref().to_owned())
                    .collect();
                ObjectInfo { name: name.join("/"), size: meta.size, e_tag: meta.e_tag }
            })
            .collect();
        objects.sort_by(|a, b| a.name.cmp(&b.name));
        objects
    }

    /// The objects under `under` whose names sort after `after` (a name under `under`), sorted:
    /// one request on S3 (`StartAfter`), whatever came before.
    ///
    /// Errors: as [`RemoteStore::list`].
    pub fn list_after(&self, under: &str, after: &str) -> Result<Vec<ObjectInfo>> {
        let path = self.url.object(under)?;
        let offset = self.url.object(after)?;
        let client = self.client()?;
        let listed = self.list_retrying(under, || {
            client.list_with_offset(Some(&path), &offset).try_collect::<Vec<_>>()
        })?;
        Ok(self.infos(listed))
    }

    /// The names of the "directories" directly under `under` (common prefixes of the objects'
    /// names, as S3 reports them for a `/` delimiter): for `commits`, every rank that committed.
    /// One request per thousand names.
    ///
    /// Errors: as [`RemoteStore::list`].
    pub fn list_dirs(&self, under: &str) -> Result<Vec<String>> {
        let path = self.url.object(under)?;
        let client = self.client()?;
        let listed = self.list_retrying(under, || client.list_with_delimiter(Some(&path)))?;
        let mut names: Vec<String> = listed
            .common_prefixes
            .iter()
            .filter_map(|prefix| prefix.parts().next_back().map(|p| p.as_ref().to_owned()))
            .collect();
        names.sort();
        Ok(names)
    }

    /// Runs the listing `list` of `under` up to [`READ_ATTEMPTS`] times while the store fails in
    /// a way another try can mend (a 503, a dropped connection).
    fn list_retrying<T, F, Fut>(&self, under: &str, list: F) -> Result<T>
    where
        F: Fn() -> Fut,
        Fut: Future<Output = object_store::Result<T>>,
    {
        let mut last_error = None;
        for _ in 0..READ_ATTEMPTS {
            match block_on(list())? {
                Ok(listed) => return Ok(listed),
                Err(e) if is_final(&e) => return Err(store_error(&self.url, under, e)),
                Err(e) => last_error = Some(store_error(&self.url, under, e)),
            }
        }
        Err(last_error.expect("READ_ATTEMPTS > 0"))
    }

    /// Writes object `name`, replacing any object of that name: only for stowage's advisory
    /// pointers (such as `latest`), which readers check and never trust alone.
    ///
    /// Errors: [`Error::Io`] when the store fails.
    pub fn put_pointer(&self, name: &str, bytes: Bytes) -> Result<()> {
        let path = self.url.object(name)?;
        let client = self.client()?;
        block_on(client.put(&path, PutPayload::from(bytes)))?
            .map(|_| ())
            .map_err(|e| store_error(&self.url, name, e))
    }

    /// Creates object `name` holding `bytes` only if no object has that name (`PutMode::Create`:
    /// `If-None-Match: *` on S3).
    ///
    /// When the store's answer is lost (a timeout, a dropped connection, an error after the put
    /// took effect), the object is read back: holding `bytes`, it was created
    /// ([`Created::AlreadyThere`]); absent, the put is sent again (at most [`PUT_ATTEMPTS`]).
    ///
    /// Errors: [`Error::AlreadyExists`] naming the object's URL when it holds other bytes (the
    /// caller lost a race: for a version manifest, it tries the next version); [`Error::Io`]
    /// when the store keeps failing.
    pub fn put_new(&self, name: &str, bytes: Bytes) -> Result<Created> {
        let path = self.url.object(name)?;
        let client = self.client()?;
        let mut last_error = None;
        for _ in 0..PUT_ATTEMPTS {
            let options = PutOptions { mode: PutMode::Create, ..PutOptions::default() };
            let sent = block_on(client.put_opts(&path, PutPayload::from(bytes.clone()), options))?;
            match sent {
                Ok(_) => return Ok(Created::New),
                Err(
                    object_store::Error::AlreadyExists { .. }
                    | object_store::Error::Precondition { .. },
                ) => {
                    return self.compare_existing(name, &bytes);
                }
                // A local store has no answer to lose: its error (a failed write or sync) is the
                // outcome, and the file a failed sync left must not be taken for durable.
                Err(e) if is_final(&e) || self.is_local() => {
                    return Err(store_error(&self.url, name, e));
                }
                Err(e) => {
                    // The put may have taken effect before its answer was lost: look.
                    last_error = Some(store_error(&self.url, name, e));
                    match self.get(name) {
                        Ok(existing) if existing == bytes => return Ok(Created::AlreadyThere),
                        Ok(_) => return Err(self.conflict(name)),
                        Err(Error::NotFound { .. }) => continue,
                        Err(_) => continue,
                    }
                }
            }
        }
        Err(last_error.expect("PUT_ATTEMPTS > 0"))
    }

    /// Whether the store is this machine's file system (`file://`): its errors are outcomes
    /// (a failed write or sync), never lost answers. (`memory://` is treated as a network
    /// store, so that tests inject network faults into it.)
    pub fn is_local(&self) -> bool {
        self.url.scheme() == Scheme::File
    }

    fn compare_existing(&self, name: &str, bytes: &Bytes) -> Result<Created> {
        if self.get(name)? == *bytes { Ok(Created::AlreadyThere) } else { Err(self.conflict(name)) }
    }

    fn conflict(&self, name: &str) -> Error {
        Error::AlreadyExists { path: self.url.object_url(name).into() }
    }

    /// Runs `read` (which returns the body and the length it must have, or an error of its own
    /// that ends the read) up to [`READ_ATTEMPTS`] times until it returns a whole body.
    fn read_retrying<F, Fut>(&self, name: &str, read: F) -> Result<Bytes>
    where
        F: Fn() -> Fut,
        Fut: Future<Output = object_store::Result<Result<(Bytes, u64)>>>,
    {
        let mut last_error = None;
        for _ in 0..READ_ATTEMPTS {
            match block_on(read())? {
                Ok(Err(refused)) => return Err(refused),
                Ok(Ok((body, expected))) if body.len() as u64 == expected => return Ok(body),
                Ok(Ok((body, expected))) => {
                    last_error = Some(short_body(&self.url, name, expected, body.len()))
                }
                Err(e) if is_final(&e) => return Err(store_error(&self.url, name, e)),
                Err(e) => last_error = Some(store_error(&self.url, name, e)),
            }
        }
        Err(last_error.expect("READ_ATTEMPTS > 0"))
    }
}

/// Whether trying again cannot help: the answer is about the object or the request, not the
/// network.
fn is_final(error: &object_store::Error) -> bool {
    !matches!(error, object_store::Error::Generic { .. } | object_store::Error::JoinError { .. })
}

fn check_range(url: &RemoteUrl, name: &str, range: &Range<u64>) -> Result<()> {
    if range.start >= range.end {
        return Err(Error::invalid(format!(
            "range {}..{} of {}: ranges are non-empty, start < end",
            range.start,
            range.end,
            url.object_url(name)
        )));
    }
    Ok(())
}

fn short_body(url: &RemoteUrl, name: &str, expected: u64, got: usize) -> Error {
    Error::io(
        url.object_url(name),
        std::io::Error::new(
            std::io::ErrorKind::UnexpectedEof,
            format!("the store returned {got} bytes where {expected} were asked for"),
        ),
    )
}

/// An object_store error as a stowage error naming the object's URL.
fn store_error(url: &RemoteUrl, name: &str, error: object_store::Error) -> Error {
    let what = url.object_url(name);
    match error {
        object_store::Error::NotFound { .. } => Error::NotFound { what },
        object_store::Error::AlreadyExists { .. } => Error::AlreadyExists { path: what.into() },
        other => Error::io(what, std::io::Error::other(other)),
    }
}

/// The object_store client for `url`, configured from the environment and then `options`.
fn make_client(url: &RemoteUrl, options: &[(String, String)]) -> Result<Arc<dyn ObjectStore>> {
    #[cfg(feature = "cloud")]
    let config_error =
        |e: object_store::Error| Error::invalid(format!("{}: {e}", url.store_name()));
    // A cloud store's builder from the environment and the URL, then `options` over them (the
    // three builders share these calls, not a trait).
    #[cfg(feature = "cloud")]
    macro_rules! configured {
        ($builder:ty) => {{
            let mut builder = <$builder>::from_env().with_url(url.as_str());
            for (key, value) in options {
                builder = builder.with_config(key.parse().map_err(config_error)?, value);
            }
            Arc::new(builder.build().map_err(config_error)?)
        }};
    }
    let refuse_options = || -> Result<()> {
        match options.first() {
            None => Ok(()),
            Some((key, _)) => Err(Error::invalid(format!(
                "{}: a {}:// store takes no configuration (option {key:?} given)",
                url.as_str(),
                url.scheme()
            ))),
        }
    };
    let client: Arc<dyn ObjectStore> = match url.scheme() {
        #[cfg(not(feature = "cloud"))]
        Scheme::S3 | Scheme::Gcs | Scheme::Azure => {
            return Err(Error::unsupported(
                "remote",
                format!(
                    "{}: stowage-remote was built without its `cloud` feature, which serves \
                     s3://, gs:// and az://",
                    url.as_str()
                ),
            ));
        }
        #[cfg(feature = "cloud")]
        Scheme::S3 => configured!(AmazonS3Builder),
        #[cfg(feature = "cloud")]
        Scheme::Gcs => configured!(GoogleCloudStorageBuilder),
        #[cfg(feature = "cloud")]
        Scheme::Azure => configured!(MicrosoftAzureBuilder),
        Scheme::File => {
            refuse_options()?;
            // Synced: a put that returned is on disk, file and directory entry alike.
            Arc::new(LocalFileSystem::new().with_fsync(true))
        }
        Scheme::Memory => {
            refuse_options()?;
            memory_store(url.bucket())
        }
    };
    Ok(client)
}

/// The in-memory store named `name`, shared by every handle of this process that names it.
fn memory_store(name: &str) -> Arc<dyn ObjectStore> {
    static STORES: OnceLock<Mutex<HashMap<String, Arc<InMemory>>>> = OnceLock::new();
    let mut stores =
        STORES.get_or_init(Default::default).lock().unwrap_or_else(PoisonError::into_inner);
    let store = stores.entry(name.to_owned()).or_insert_with(|| Arc::new(InMemory::new()));
    Arc::clone(store) as Arc<dyn ObjectStore>
}
