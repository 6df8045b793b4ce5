//! [`RemoteCache`]: a cache on a store, opened for reading, or for writing as one rank among
//! any number of others.
//!
//! # Writing
//! Each handle opened for writing is a *rank*: it puts samples into a buffer (visible to its own
//! `get` at once), and `flush` uploads them as one part (its three objects, [`crate::part`]),
//! creates the rank's next commit, then merges the pending commits of every rank into the next
//! version ([`crate::merge`]). Once the commit exists the samples are durable; the merge only
//! makes them visible to other readers, so a merge that keeps losing races is not an error of
//! the flush (the next merge, by anyone, folds the commit in). `finalize` flushes and merges,
//! and fails when it cannot.
//!
//! Ranks take no lock: two handles write one cache at once, in one process or on two machines,
//! each under its own prefix. A key is written once: a rank refuses a key its view of the cache
//! already holds (`Error::Unsupported`, "overwrite of an existing key"), and between ranks that
//! wrote one key in commits no rank saw, the first part in (rank, sequence) order wins.
//!
//! # Reading
//! Opening reads the identity object and the newest version: four small requests at any key
//! count. A part's row table is fetched whole into the node cache on the first read that needs
//! it; then a cold `get` is one range request for the row's record, checked against its
//! checksum before it is decoded.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use stowage_core::describe::Description;
use stowage_core::{
    Backend, Capabilities, DType, Error, Format, Reader, Result, Sample, Schema, ValidationLevel,
    ValidationReport,
};

use crate::commits::{self, CommitRecord};
use crate::identity::{FORMAT_ID, Identity};
use crate::key_count::count_keys;
use crate::manifest::{LAYOUT, PartRef};
use crate::merge::{self, Merged};
use crate::node_cache::NodeCache;
use crate::part::{MAX_KEY_BYTES, PartBuilder};
use crate::row_record;
use crate::row_table::RowTable;
use crate::store::RemoteStore;
use crate::versions;
use crate::view::{Part, View};

/// The backend's name, as in errors and `--to`.
pub const BACKEND_NAME: &str = "remote";

/// The format of caches on a store (and of local directories written through `file://`).
pub const FORMAT: Format = Format {
    id: FORMAT_ID,
    description: "stowage cache on object storage",
    signature: "stowage.json naming \"stowage-remote\", versions/, commits/, ranks/",
};

/// A writer commits its buffer as a part once it holds this many bytes of records, so that a
/// writer's memory stays bounded whatever it puts between flushes.
pub const AUTO_COMMIT_BYTES: usize = 64 << 20;

/// What every remote cache can do.
pub fn capabilities() -> Capabilities {
    let mut caps = Capabilities::none();
    caps.dtypes = DType::ALL.to_vec();
    caps.variable_shapes = true;
    caps.ragged = true;
    caps.nullable = true;
    caps.bytes_fields = true;
    caps.json_fields = true;
    caps.resume = true;
    caps.durable_flush = true;
    caps.checksums = true;
    caps.concurrent_readers = true;
    caps.concurrent_writers = true;
    caps.max_rank = Some(row_record::MAX_RANK);
    caps.max_key_bytes = Some(MAX_KEY_BYTES);
    caps
}

/// Opens the store of a cache URL with the given settings, in place of
/// [`RemoteStore::open_with`]: for stores made in code, such as a
/// [`crate::faults::FaultyStore`] that a test makes fail.
pub type StoreOpener = Arc<dyn Fn(&str, &[(&str, &str)]) -> Result<RemoteStore> + Send + Sync>;

/// How a cache on a store is opened: the writer's rank, the node cache, the store's settings.
#[derive(Clone, Default)]
pub struct RemoteOptions {
    /// The rank a writer commits as (1-64 of `[A-Za-z0-9._-]`). `None`: a name of its own for
    /// every handle (host, process and a counter), so that writers never collide; give each
    /// process of a long job a fixed rank to keep the number of ranks, and so the cost of a
    /// merge, bounded.
    pub rank: Option<String>,
    /// The node cache's directory. `None`: `$STOWAGE_NODE_CACHE`, else
    /// `$XDG_CACHE_HOME/stowage/node`, else `~/.cache/stowage/node`.
    pub node_cache: Option<PathBuf>,
    /// The node cache's byte budget. `None`: `$STOWAGE_NODE_CACHE_BYTES`, else 8 GiB.
    pub node_budget: Option<u64>,
    /// The store's settings (`object_store` configuration keys, as `aws_endpoint`), on top of
    /// the environment's.
    pub store_options: Vec<(String, String)>,
    /// Read rows from whole copies of the parts' rows objects in the node cache (a part's
    /// first read fetches all of it; later reads are local) instead of one range request per
    /// row. For epochs that read most of a cache again and again on one node.
    pub cache_rows: bool,
    /// Opens the stores instead of [`RemoteStore::open_with`] (`None`: that).
    pub store_opener: Option<StoreOpener>,
}

impl std::fmt::Debug for RemoteOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RemoteOptions")
            .field("rank", &self.rank)
            .field("node_cache", &self.node_cache)
            .field("node_budget", &self.node_budget)
            .field("store_options", &self.store_options)
            .field("cache_rows", &self.cache_rows)
            .field("store_opener", &self.store_opener.as_ref().map(|_| "custom"))
            .finish()
    }
}

impl RemoteOptions {
    /// The node cache these options name, opened.
    ///
    /// Errors: those of [`NodeCache::open`].
    pub fn open_node_cache(&self) -> Result<Arc<NodeCache>> {
        let dir = match &self.node_cache {
            Some(dir) => dir.clone(),
            None => default_node_cache_dir(),
        };
        let budget = self.node_budget.unwrap_or_else(|| {
            std::env::var("STOWAGE_NODE_CACHE_BYTES")
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(8 << 30)
        });
        Ok(Arc::new(NodeCache::open(dir, budget)?))
    }

    /// The store at `url`, with these options' settings.
    ///
    /// Errors: those of [`RemoteStore::open_with`].
    pub fn open_store(&self, url: &str) -> Result<RemoteStore> {
        let options: Vec<(&str, &str)> =
            self.store_options.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        match &self.store_opener {
            Some(open) => open(url, &options),
            None => RemoteStore::open_with(url, &options),
        }
    }
}

/// The default node cache directory (see [`RemoteOptions::node_cache`]).
fn default_node_cache_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("STOWAGE_NODE_CACHE") {
        return PathBuf::from(dir);
    }
    let base = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".cache")))
        .unwrap_or_else(std::env::temp_dir);
    base.join("stowage").join("node")
}

/// A fresh rank name for a writer that was given none: host, process id, and a counter and
/// clock reading that keep two handles of one process apart.
fn fresh_rank() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let mut host = [0u8; 64];
    // SAFETY: the buffer is valid for its length; gethostname writes at most that much.
    let ok = unsafe { libc::gethostname(host.as_mut_ptr().cast(), host.len()) } == 0;
    let host: String = if ok {
        let end = host.iter().position(|b| *b == 0).unwrap_or(host.len());
        host[..end]
            .iter()
            .map(|b| if b.is_ascii_alphanumeric() || *b == b'-' { *b as char } else { '-' })
            .take(24)
            .collect()
    } else {
        "host".to_owned()
    };
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    format!("w-{host}-{}-{n}-{:x}", std::process::id(), nanos & 0xffff_ffff)
}

/// What a writing handle keeps besides its view.
#[derive(Debug)]
struct Writing {
    rank: String,
    next_seq: u64,
    buffer: PartBuilder,
    buffered: HashMap<String, usize>,
    /// The sequence numbers of this rank's parts that the view's manifest does not fold yet.
    unmerged: Vec<u64>,
    poisoned: Option<String>,
    finalized: bool,
}

/// A cache on a store (see the module docs).
///
/// ```
/// use stowage_core::{Backend, DType, Reader, Sample, Schema, ShapeRule, Tensor};
/// use stowage_remote::{RemoteCache, RemoteOptions};
///
/// let dir = tempfile::tempdir().unwrap();
/// let options = RemoteOptions { node_cache: Some(dir.path().into()), ..Default::default() };
/// let schema = Schema::new().tensor("x", DType::F32, ShapeRule::Fixed(vec![2]));
/// let mut cache = RemoteCache::create("memory://cache-doc/c", &schema, &options).unwrap();
/// let sample = Sample::new().with("x", Tensor::from_slice(&[2], &[1.0f32, 2.0]).unwrap());
/// cache.put("a", &sample).unwrap();
/// cache.finalize().unwrap();
///
/// let reader = RemoteCache::open("memory://cache-doc/c", &options).unwrap();
/// assert_eq!(reader.get("a").unwrap().unwrap(), sample);
/// assert!(reader.is_finalized());
/// ```
#[derive(Debug)]
pub struct RemoteCache {
    path: PathBuf,
    view: View,
    capabilities: Capabilities,
    writing: Option<Writing>,
}

impl RemoteCache {
    /// Creates a new cache of `schema` at `url` and opens it for writing.
    ///
    /// Errors: [`Error::AlreadyExists`] when `url` holds a cache (or another format's marker);
    /// [`Error::Unsupported`] for a schema outside [`capabilities`]; the store's errors.
    pub fn create(url: &str, schema: &Schema, options: &RemoteOptions) -> Result<RemoteCache> {
        Self::create_in(options.open_store(url)?, schema, options)
    }

    /// [`RemoteCache::create`] in `store` (a store made in code, such as a
    /// [`crate::faults::FaultyStore`]'s).
    pub fn create_in(
        store: RemoteStore,
        schema: &Schema,
        options: &RemoteOptions,
    ) -> Result<RemoteCache> {
        Self::create_at(store.url().as_str().into(), store, schema, options)
    }

    /// [`RemoteCache::open`] (`write` false) or [`RemoteCache::open_append`] (`write` true) in
    /// `store`.
    pub fn open_in(
        store: RemoteStore,
        options: &RemoteOptions,
        write: bool,
    ) -> Result<RemoteCache> {
        Self::open_at(store.url().as_str().into(), store, options, write)
    }

    /// Opens the cache at `url` read-only.
    ///
    /// Errors: [`Error::NotFound`] when `url` holds no cache; [`Error::Incompatible`] for
    /// another format or layout; [`Error::Corrupted`] for a damaged identity or manifest.
    pub fn open(url: &str, options: &RemoteOptions) -> Result<RemoteCache> {
        Self::open_at(url.into(), options.open_store(url)?, options, false)
    }

    /// Opens the cache at `url` for writing as a rank (resuming a rank's numbering when
    /// `options.rank` names one that committed before).
    ///
    /// Errors: as [`RemoteCache::open`]; [`Error::InvalidArgument`] for a bad rank name.
    pub fn open_append(url: &str, options: &RemoteOptions) -> Result<RemoteCache> {
        Self::open_at(url.into(), options.open_store(url)?, options, true)
    }

    /// Creates the cache of `schema` at `url` unless it exists with that schema, then opens it
    /// for writing: what each rank of a job that writes one cache calls.
    ///
    /// Errors: [`Error::Incompatible`] when the cache there has another schema; as
    /// [`RemoteCache::create`].
    pub fn create_or_open(
        url: &str,
        schema: &Schema,
        options: &RemoteOptions,
    ) -> Result<RemoteCache> {
        capabilities().check_schema(schema, BACKEND_NAME)?;
        let store = options.open_store(url)?;
        Identity::new(schema).create(&store).map_err(|e| match e {
            Error::AlreadyExists { path } => Error::Incompatible {
                path,
                detail: "a cache with another schema or format is there".into(),
            },
            other => other,
        })?;
        Self::open_at(url.into(), store, options, true)
    }

    /// [`RemoteCache::create`] with the handle's path and store given.
    pub(crate) fn create_at(
        path: PathBuf,
        store: RemoteStore,
        schema: &Schema,
        options: &RemoteOptions,
    ) -> Result<RemoteCache> {
        capabilities().check_schema(schema, BACKEND_NAME)?;
        // Looked for first: `put_new` answers "already there" both for a cache that existed
        // and for this create's own put whose answer was lost (resolved by reading back).
        if store.head(crate::identity::IDENTITY)?.is_some() {
            return Err(Error::AlreadyExists { path: store.url().as_str().into() });
        }
        Identity::new(schema).create(&store)?;
        Self::open_at(path, store, options, true)
    }

    /// [`RemoteCache::open`] or [`RemoteCache::open_append`] with the handle's path and store
    /// given.
    pub(crate) fn open_at(
        path: PathBuf,
        store: RemoteStore,
        options: &RemoteOptions,
        write: bool,
    ) -> Result<RemoteCache> {
        let identity = Identity::read(&store)?.ok_or_else(|| Error::NotFound {
            what: format!("a stowage cache at {} (no {})", store.url().as_str(), "stowage.json"),
        })?;
        let node = options.open_node_cache()?;
        let view = View::newest(store, node, identity.schema, options.cache_rows)?;
        let writing = if write {
            let rank = options.rank.clone().unwrap_or_else(fresh_rank);
            let next_seq = commits::next_seq(&view.store, &rank)?;
            Some(Writing {
                rank,
                next_seq,
                buffer: PartBuilder::default(),
                buffered: HashMap::new(),
                unmerged: Vec::new(),
                poisoned: None,
                finalized: false,
            })
        } else {
            None
        };
        let mut cache = RemoteCache { path, view, capabilities: capabilities(), writing };
        if write {
            // A writer resumes what an earlier one left: commits it made durable but did not
            // merge (it died in between, or its merge failed) become visible now.
            cache.merge(false)?;
        }
        Ok(cache)
    }

    /// The rank this handle writes as (`None` for a read-only handle).
    pub fn rank(&self) -> Option<&str> {
        self.writing.as_ref().map(|w| w.rank.as_str())
    }

    /// The version this handle reads (`None`: the cache has none yet).
    pub fn version(&self) -> Option<u64> {
        self.view.manifest.as_ref().map(|m| m.version)
    }

    /// The store the cache lives in.
    pub fn store(&self) -> &RemoteStore {
        &self.view.store
    }

    /// Reads the newest version, for a long-lived reader that wants what was merged since it
    /// opened (3 requests). A writer keeps its own parts not merged yet.
    ///
    /// Errors: as [`RemoteCache::open`].
    pub fn refresh(&mut self) -> Result<()> {
        let newest = versions::newest(&self.view.store)?;
        self.adopt(newest)
    }

    /// Switches the view to `manifest`, keeping this rank's parts it does not fold yet.
    fn adopt(&mut self, manifest: Option<crate::manifest::Manifest>) -> Result<()> {
        if let Some(w) = &mut self.writing {
            let mark = manifest.as_ref().and_then(|m| m.watermarks.get(&w.rank)).copied();
            w.unmerged.retain(|seq| mark.is_none_or(|mark| mark < *seq));
        }
        let own = self.writing.as_ref().map(|w| (w.rank.clone(), w.unmerged.clone()));
        self.view.adopt(manifest, own.as_ref().map(|(rank, seqs)| (rank.as_str(), seqs.as_slice())))
    }

    /// The writing state, or the error a write on this handle gets.
    fn writing(&mut self, operation: &str) -> Result<&mut Writing> {
        let finalized = self.view.manifest.as_ref().is_some_and(|m| m.finalized);
        let path = self.path.clone();
        let w = self.writing.as_mut().ok_or_else(|| {
            Error::unsupported(BACKEND_NAME, format!("{operation} on a read-only handle"))
        })?;
        if let Some(cause) = &w.poisoned {
            return Err(Error::poisoned(path, cause));
        }
        if (finalized || w.finalized) && operation == "put" {
            return Err(Error::Finalized { path });
        }
        Ok(w)
    }

    /// Makes the handle refuse further writes after `error`.
    fn poison(&mut self, error: &Error) {
        if let Some(w) = &mut self.writing {
            w.poisoned.get_or_insert_with(|| error.to_string());
        }
    }

    /// Uploads the buffer as this rank's next part and commits it; returns whether there was
    /// anything to commit.
    fn commit_buffer(&mut self) -> Result<bool> {
        let store = self.view.store.clone();
        let w = self.writing("flush")?;
        if w.buffer.is_empty() {
            return Ok(false);
        }
        let buffer = std::mem::take(&mut w.buffer);
        let built = buffer.finish(&w.rank);
        let objects = built.objects();
        let record = CommitRecord {
            layout: LAYOUT,
            rank: w.rank.clone(),
            seq: w.next_seq,
            format: FORMAT_ID.to_owned(),
            rows: built.row_count,
            objects: objects.to_vec(),
        };
        let uploaded = (|| {
            for (name, bytes) in [&built.rows, &built.table, &built.keys] {
                store.put_new(name, bytes.clone())?;
            }
            commits::commit(&store, &record)
        })();
        if let Err(e) = uploaded {
            w.poisoned = Some(e.to_string());
            return Err(e);
        }
        let table = RowTable::parse(&built.table.0, built.table.1.clone())?;
        let name = CommitRecord::name_of(&w.rank, w.next_seq);
        let reference = PartRef {
            rank: w.rank.clone(),
            seq: w.next_seq,
            commit: crate::manifest::ObjectRef::of(&name, &record.to_bytes()),
            rows: built.row_count,
            objects: record.objects.clone(),
        };
        w.unmerged.push(w.next_seq);
        w.next_seq += 1;
        w.buffered.clear();
        self.view.parts.push(Part::with_table(reference, objects, table));
        Ok(true)
    }

    /// Merges every pending commit into the next version (marking it complete with
    /// `finalize`), then reads that version.
    fn merge(&mut self, finalize: bool) -> Result<Merged> {
        let view = &self.view;
        let table_of = |object: &crate::manifest::ObjectRef| view.table_of(object);
        let count = |_: &crate::manifest::Manifest,
                     base: Option<&crate::manifest::Manifest>,
                     p: &[_]| { count_keys(&table_of, base, p) };
        let merged = merge::merge_with(&view.store, FORMAT_ID, finalize, &count)?;
        self.refresh()?;
        Ok(merged)
    }
}

impl Reader for RemoteCache {
    fn name(&self) -> &'static str {
        BACKEND_NAME
    }

    fn format(&self) -> &'static Format {
        &FORMAT
    }

    fn capabilities(&self) -> &Capabilities {
        &self.capabilities
    }

    fn schema(&self) -> &Schema {
        &self.view.schema
    }

    fn path(&self) -> &Path {
        &self.path
    }

    fn get(&self, key: &str) -> Result<Option<Sample>> {
        if let Some(w) = &self.writing
            && let Some(i) = w.buffered.get(key)
        {
            let record = w.buffer.record(*i).to_vec();
            let source = self.view.store.url().as_str().to_owned();
            return row_record::decode(&self.view.schema, &source, key, record.into()).map(Some);
        }
        self.view.get(key)
    }

    fn get_batch(&self, keys: &[&str]) -> Result<Vec<Option<Sample>>> {
        let buffered = self.writing.as_ref().is_some_and(|w| !w.buffered.is_empty());
        if buffered {
            return keys.iter().map(|key| self.get(key)).collect();
        }
        self.view.get_batch(keys)
    }

    fn contains(&self, key: &str) -> Result<bool> {
        if self.writing.as_ref().is_some_and(|w| w.buffered.contains_key(key)) {
            return Ok(true);
        }
        Ok(self.view.find(key)?.is_some())
    }

    fn len(&self) -> usize {
        let merged = self.view.manifest.as_ref().map_or(0, |m| m.keys);
        // This rank's parts the manifest does not fold yet hold only new keys (a rank refuses a
        // key its view holds), as does its buffer.
        let own = self.writing.as_ref().map_or(0, |w| {
            let unmerged =
                self.view.parts.iter().filter(|p| {
                    p.reference.rank == w.rank && w.unmerged.contains(&p.reference.seq)
                });
            unmerged.map(|p| p.reference.rows).sum::<u64>() + w.buffer.len() as u64
        });
        (merged + own) as usize
    }

    fn keys(&self) -> Result<Vec<String>> {
        let mut keys = self.view.keys()?;
        if let Some(w) = &self.writing {
            let mut buffered: Vec<(&String, &usize)> = w.buffered.iter().collect();
            buffered.sort_by_key(|(_, i)| **i);
            keys.extend(buffered.into_iter().map(|(k, _)| k.clone()));
        }
        Ok(keys)
    }

    fn is_finalized(&self) -> bool {
        self.view.manifest.as_ref().is_some_and(|m| m.finalized)
    }

    fn validate(&self, level: ValidationLevel) -> Result<ValidationReport> {
        let mut report = ValidationReport::default();
        crate::check::check_versions(&self.view, level, &mut report)?;
        self.view.validate(level == ValidationLevel::Full, &mut report);
        Ok(report)
    }

    fn describe(&self) -> Result<Description> {
        Description::of_reader(self)
    }
}

impl Backend for RemoteCache {
    fn put(&mut self, key: &str, sample: &Sample) -> Result<()> {
        self.writing("put")?;
        if key.is_empty() {
            return Err(Error::invalid("the empty key"));
        }
        let record = row_record::encode(&self.view.schema, key, sample)?;
        if self.contains(key)? {
            return Err(Error::unsupported(BACKEND_NAME, "overwrite of an existing key"));
        }
        let w = self.writing("put")?;
        w.buffer.push(key, &record)?;
        w.buffered.insert(key.to_owned(), w.buffer.len() - 1);
        if w.buffer.bytes() >= AUTO_COMMIT_BYTES {
            self.commit_buffer()?;
        }
        Ok(())
    }

    fn flush(&mut self) -> Result<()> {
        if self.commit_buffer()? {
            // The commit is durable, but a flush returns only once its samples are visible to
            // a reader that opens the cache: a failed merge fails the flush (the next writer
            // to open the cache merges the commit).
            if let Err(e) = self.merge(false) {
                self.poison(&e);
                return Err(e);
            }
        }
        Ok(())
    }

    fn finalize(&mut self) -> Result<()> {
        self.commit_buffer()?;
        self.writing("finalize")?;
        if let Err(e) = self.merge(true) {
            self.poison(&e);
            return Err(e);
        }
        if let Some(w) = &mut self.writing {
            w.finalized = true;
        }
        Ok(())
    }
}
