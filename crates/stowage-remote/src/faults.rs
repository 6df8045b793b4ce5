//! A store that fails on purpose: the faults a network and a loaded server produce, injected
//! between stowage and a real store, plus a log of every request (how many a read or a commit
//! costs).
//!
//! Faults sit above object_store's own retries, where stowage must handle them: an answer lost
//! after the operation took effect, a 503 or 409 that outlived the retries, a body cut short,
//! a slow request. Used by this crate's tests and the reliability campaigns; nothing else should
//! wrap a store in it.

use std::fmt;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use futures_util::StreamExt;
use futures_util::stream::BoxStream;
use object_store::path::Path;
use object_store::{
    CopyOptions, GetOptions, GetResult, GetResultPayload, ListResult, MultipartUpload, ObjectMeta,
    ObjectStore, PutMultipartOptions, PutOptions, PutPayload, PutResult, RenameOptions,
};

use crate::{RemoteStore, RemoteUrl};

/// The kinds of request a fault can be aimed at.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Operation {
    /// A single-request put (`put_opts`), conditional or not.
    Put,
    /// The start of a multipart upload.
    Upload,
    /// A get, whole or ranged (each coalesced range of `get_ranges` is one).
    Get,
    /// A head (a get of the metadata only).
    Head,
    /// A listing.
    List,
    /// A copy or rename.
    Copy,
}

/// What an injected fault does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// The operation takes effect, then its answer is lost (a timeout or a dropped connection
    /// after the server committed it).
    LoseResponse,
    /// `503 Service Unavailable`, outliving object_store's retries: nothing is done.
    Unavailable,
    /// `409 Conflict` (S3's `ConditionalRequestConflict` under concurrent conditional puts):
    /// nothing is done.
    Conflict,
    /// A get's body ends after `keep` bytes, as when a connection drops mid-body.
    TruncateBody {
        /// How many bytes of the body arrive.
        keep: usize,
    },
    /// The request waits this long before it is sent.
    Slow(Duration),
}

/// One injected fault: which requests it hits, and what it does to them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rule {
    /// The kind of request it hits.
    pub operation: Operation,
    /// Only requests whose object path contains this (empty: every object).
    pub path_contains: String,
    /// How many matching requests pass untouched before the fault strikes.
    pub skip: usize,
    /// How many matching requests it strikes after those (then it is spent).
    pub times: usize,
    /// What it does.
    pub fault: Fault,
}

impl Rule {
    /// A rule that strikes the next matching request once.
    ///
    /// ```
    /// use stowage_remote::faults::{Fault, Operation, Rule};
    /// let rule = Rule::once(Operation::Put, "versions/", Fault::LoseResponse);
    /// assert_eq!((rule.skip, rule.times), (0, 1));
    /// ```
    pub fn once(operation: Operation, path_contains: &str, fault: Fault) -> Rule {
        Rule { operation, path_contains: path_contains.to_owned(), skip: 0, times: 1, fault }
    }

    /// This rule, striking `times` matching requests instead.
    pub fn times(mut self, times: usize) -> Rule {
        self.times = times;
        self
    }

    /// This rule, letting `skip` matching requests pass first.
    pub fn after(mut self, skip: usize) -> Rule {
        self.skip = skip;
        self
    }
}

/// A request the store received: its kind and object path (the prefix, for a listing).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Request {
    /// The kind of request.
    pub operation: Operation,
    /// The object path.
    pub path: String,
    /// The fault injected into it, if any.
    pub fault: Option<Fault>,
}

/// An [`ObjectStore`] that passes every request to `inner`, logs it, and injects the faults of
/// its rules.
///
/// ```
/// use std::sync::Arc;
/// use stowage_core::bytes::Bytes;
/// use stowage_remote::faults::{Fault, FaultyStore, Operation, Rule};
/// use stowage_remote::{Created, RemoteUrl};
///
/// let faulty = FaultyStore::new(Arc::new(object_store::memory::InMemory::new()));
/// faulty.inject(Rule::once(Operation::Put, "versions/1", Fault::LoseResponse));
/// let store = faulty.store(RemoteUrl::parse("memory://faulty-doc/cache").unwrap());
/// // The put took effect but its answer was lost: reading back finds it, nothing is put twice.
/// let created = store.put_new("versions/1", Bytes::from_static(b"m")).unwrap();
/// assert_eq!(created, Created::AlreadyThere);
/// assert_eq!(faulty.count(Operation::Put), 1);
/// ```
pub struct FaultyStore {
    inner: Arc<dyn ObjectStore>,
    rules: Mutex<Vec<Rule>>,
    log: Mutex<Vec<Request>>,
}

impl FaultyStore {
    /// Wraps `inner`, with no fault injected yet.
    pub fn new(inner: Arc<dyn ObjectStore>) -> Arc<FaultyStore> {
        Arc::new(FaultyStore { inner, rules: Mutex::new(Vec::new()), log: Mutex::new(Vec::new()) })
    }

    /// A [`RemoteStore`] for `url` whose every request goes through this store (in every
    /// process: a forked child keeps this wrapper, as it keeps an in-memory store).
    pub fn store(self: &Arc<Self>, url: RemoteUrl) -> RemoteStore {
        let faulty = Arc::clone(self);
        RemoteStore::with_maker(
            url,
            Arc::new(move || Ok(Arc::clone(&faulty) as Arc<dyn ObjectStore>)),
        )
    }

    /// Adds `rule`; rules are tried in the order they were added, and the first that matches a
    /// request decides it.
    pub fn inject(&self, rule: Rule) {
        self.rules.lock().unwrap_or_else(PoisonError::into_inner).push(rule);
    }

    /// Removes every rule (spent or not): the outage is over, and every request passes.
    pub fn clear_rules(&self) {
        self.rules.lock().unwrap_or_else(PoisonError::into_inner).clear();
    }

    /// A faulty store over the store `url` names (object_store's own client for it, built by
    /// [`object_store::parse_url_opts`] with `options`, e.g. an S3 endpoint and credentials),
    /// and the [`RemoteStore`] for `url` through it: for campaigns that count or fail the
    /// requests of a process writing to a `file://` or `s3://` cache other processes share.
    /// Made in the process that uses it (the client is not remade after a fork); a `memory://`
    /// URL gets a fresh in-memory store of its own, not the one [`RemoteStore::open`] shares.
    ///
    /// Errors: [`stowage_core::Error::InvalidArgument`] for a URL or options the store refuses.
    ///
    /// ```
    /// use stowage_core::bytes::Bytes;
    /// use stowage_remote::faults::{FaultyStore, Operation};
    ///
    /// let dir = tempfile::tempdir().unwrap();
    /// let url = format!("file://{}/cache", dir.path().display());
    /// let (store, faulty) = FaultyStore::wrap(&url, &[]).unwrap();
    /// store.put_new("objects/a", Bytes::from_static(b"abc")).unwrap();
    /// assert_eq!(faulty.count(Operation::Put), 1);
    /// assert!(dir.path().join("cache/objects/a").exists());
    /// ```
    pub fn wrap(
        url: &str,
        options: &[(&str, &str)],
    ) -> stowage_core::Result<(RemoteStore, Arc<FaultyStore>)> {
        let remote = RemoteUrl::parse(url)?;
        let refused = |e: &dyn fmt::Display| stowage_core::Error::invalid(format!("{url}: {e}"));
        let parsed = url::Url::parse(url).map_err(|e| refused(&e))?;
        let (inner, _) = object_store::parse_url_opts(&parsed, options.iter().copied())
            .map_err(|e| refused(&e))?;
        let faulty = FaultyStore::new(Arc::from(inner));
        Ok((faulty.store(remote), faulty))
    }

    /// Every request received so far, in order.
    pub fn requests(&self) -> Vec<Request> {
        self.log.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// How many requests of kind `operation` were received.
    pub fn count(&self, operation: Operation) -> usize {
        self.requests().iter().filter(|r| r.operation == operation).count()
    }

    /// Forgets the requests logged so far.
    pub fn clear_log(&self) {
        self.log.lock().unwrap_or_else(PoisonError::into_inner).clear();
    }

    /// Logs a request and returns the fault that strikes it, if any.
    fn request(&self, operation: Operation, path: &Path) -> Option<Fault> {
        let path = path.to_string();
        let fault = {
            let mut rules = self.rules.lock().unwrap_or_else(PoisonError::into_inner);
            rules
                .iter_mut()
                .find(|rule| {
                    rule.operation == operation
                        && rule.times > 0
                        && path.contains(rule.path_contains.as_str())
                })
                .and_then(|rule| {
                    if rule.skip > 0 {
                        rule.skip -= 1;
                        None
                    } else {
                        rule.times -= 1;
                        Some(rule.fault)
                    }
                })
        };
        let request = Request { operation, path, fault };
        self.log.lock().unwrap_or_else(PoisonError::into_inner).push(request);
        fault
    }
}

/// The error an injected fault answers with.
fn injected(what: &str) -> object_store::Error {
    object_store::Error::Generic {
        store: "FaultyStore",
        source: format!("{what} (injected)").into(),
    }
}

/// Applies the part of `fault` that happens before the request is sent: `Err` when it is not
/// sent at all.
async fn before(fault: Option<Fault>) -> object_store::Result<()> {
    match fault {
        Some(Fault::Unavailable) => Err(injected("503 Service Unavailable")),
        Some(Fault::Conflict) => Err(injected("409 Conflict")),
        Some(Fault::Slow(delay)) => {
            tokio::time::sleep(delay).await;
            Ok(())
        }
        _ => Ok(()),
    }
}

/// Applies the part of `fault` that happens to the answer.
fn after<T>(fault: Option<Fault>, answer: object_store::Result<T>) -> object_store::Result<T> {
    match (fault, answer) {
        (Some(Fault::LoseResponse), Ok(_)) => {
            Err(injected("answer lost after the request took effect"))
        }
        (_, answer) => answer,
    }
}

impl fmt::Debug for FaultyStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FaultyStore").field("inner", &self.inner).finish_non_exhaustive()
    }
}

impl fmt::Display for FaultyStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "FaultyStore({})", self.inner)
    }
}

#[async_trait]
impl ObjectStore for FaultyStore {
    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> object_store::Result<PutResult> {
        let fault = self.request(Operation::Put, location);
        before(fault).await?;
        after(fault, self.inner.put_opts(location, payload, opts).await)
    }

    async fn put_multipart_opts(
        &self,
        location: &Path,
        opts: PutMultipartOptions,
    ) -> object_store::Result<Box<dyn MultipartUpload>> {
        let fault = self.request(Operation::Upload, location);
        before(fault).await?;
        after(fault, self.inner.put_multipart_opts(location, opts).await)
    }

    async fn get_opts(
        &self,
        location: &Path,
        options: GetOptions,
    ) -> object_store::Result<GetResult> {
        let operation = if options.head { Operation::Head } else { Operation::Get };
        let fault = self.request(operation, location);
        before(fault).await?;
        let result = after(fault, self.inner.get_opts(location, options).await)?;
        match fault {
            Some(Fault::TruncateBody { keep }) => {
                let (meta, range, attributes) =
                    (result.meta.clone(), result.range.clone(), result.attributes.clone());
                let extensions = result.extensions.clone();
                let body = result.bytes().await?;
                let cut = body.slice(..keep.min(body.len()));
                let stream = futures_util::stream::once(async move { Ok(cut) }).boxed();
                Ok(GetResult {
                    payload: GetResultPayload::Stream(stream),
                    meta,
                    range,
                    attributes,
                    extensions,
                })
            }
            _ => Ok(result),
        }
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, object_store::Result<Path>>,
    ) -> BoxStream<'static, object_store::Result<Path>> {
        self.inner.delete_stream(locations)
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, object_store::Result<ObjectMeta>> {
        let fault = self.request(Operation::List, prefix.unwrap_or(&Path::default()));
        match fault {
            Some(Fault::Unavailable | Fault::Conflict | Fault::LoseResponse) => {
                futures_util::stream::once(async { Err(injected("503 Service Unavailable")) })
                    .boxed()
            }
            _ => self.inner.list(prefix),
        }
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> object_store::Result<ListResult> {
        let fault = self.request(Operation::List, prefix.unwrap_or(&Path::default()));
        before(fault).await?;
        after(fault, self.inner.list_with_delimiter(prefix).await)
    }

    async fn copy_opts(
        &self,
        from: &Path,
        to: &Path,
        options: CopyOptions,
    ) -> object_store::Result<()> {
        let fault = self.request(Operation::Copy, to);
        before(fault).await?;
        after(fault, self.inner.copy_opts(from, to, options).await)
    }

    async fn rename_opts(
        &self,
        from: &Path,
        to: &Path,
        options: RenameOptions,
    ) -> object_store::Result<()> {
        let fault = self.request(Operation::Copy, to);
        before(fault).await?;
        after(fault, self.inner.rename_opts(from, to, options).await)
    }
}
