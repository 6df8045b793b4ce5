//! One version of a cache as a reader sees it: its parts, their row tables (fetched whole into
//! the node cache on first need) and the reads of single rows.
//!
//! A key is looked up in the parts in precedence order (the manifest's order: for a key that
//! several parts hold, the first wins). A read is one range request for the row's record,
//! checked against the xxh3-64 the part's row table keeps before it is decoded; the record
//! holds its key, so a hash collision in the table is an error, never another key's sample.

use std::collections::{HashMap, HashSet};
use std::ops::Range;
use std::path::Path;
use std::sync::{Arc, OnceLock};

use stowage_core::bytes::Bytes;
use stowage_core::{Error, Result, Sample, Schema, ValidationReport};

use crate::manifest::{Manifest, ObjectRef, PartRef};
use crate::node_cache::{NodeCache, ObjectDigest};
use crate::part::{PartObjects, parse_keys};
use crate::row_record;
use crate::row_table::{self, RowEntry, RowTable};
use crate::store::RemoteStore;

/// One part of the view, with its row table once fetched.
#[derive(Debug)]
pub struct Part {
    /// The part as the manifest (or the writer's own commit) names it.
    pub reference: PartRef,
    /// Its objects by role.
    pub objects: PartObjects,
    table: OnceLock<RowTable>,
    /// The rows object's node-cache copy, when rows are read from copies.
    rows_copy: OnceLock<Bytes>,
}

impl Part {
    /// A part whose table will be fetched on first need.
    ///
    /// Errors: [`Error::Corrupted`] naming `source` when its objects are not a part's three.
    pub fn new(source: &str, reference: PartRef) -> Result<Part> {
        let objects = PartObjects::of(source, &reference.objects)?;
        Ok(Part { reference, objects, table: OnceLock::new(), rows_copy: OnceLock::new() })
    }

    /// A part whose table is already at hand (the writer's own, just uploaded).
    pub fn with_table(reference: PartRef, objects: PartObjects, table: RowTable) -> Part {
        Part { reference, objects, table: OnceLock::from(table), rows_copy: OnceLock::new() }
    }
}

/// A version of the cache, as read (see the module docs).
#[derive(Debug)]
pub struct View {
    /// The store the cache lives in.
    pub store: RemoteStore,
    /// Where row tables are kept.
    pub node: Arc<NodeCache>,
    /// The cache's schema.
    pub schema: Schema,
    /// The version read, `None` when the cache has none yet.
    pub manifest: Option<Manifest>,
    /// Its parts in precedence order, then the writer's own parts not merged yet.
    pub parts: Vec<Part>,
    /// Whether rows are read from whole copies of the rows objects in the node cache (fetched
    /// on a part's first read) instead of one range request per row.
    pub cache_rows: bool,
}

impl View {
    /// The newest version of the cache in `store` (3 requests: see [`crate::versions::newest`]).
    ///
    /// Errors: the store's; [`Error::Corrupted`] for a manifest that does not parse or a part
    /// that is not one.
    pub fn newest(
        store: RemoteStore,
        node: Arc<NodeCache>,
        schema: Schema,
        cache_rows: bool,
    ) -> Result<View> {
        let manifest = crate::versions::newest(&store)?;
        let mut view = View { store, node, schema, manifest: None, parts: Vec::new(), cache_rows };
        view.adopt(manifest, None)?;
        Ok(view)
    }

    /// Switches to `manifest`, keeping of the current parts those of `own`: a writer's rank
    /// and the sequence numbers of its parts that `manifest` does not fold yet.
    ///
    /// Errors: [`Error::Corrupted`] for a part that is not one.
    pub fn adopt(&mut self, manifest: Option<Manifest>, own: Option<(&str, &[u64])>) -> Result<()> {
        let source = match &manifest {
            Some(m) => self.store.url().object_url(&Manifest::name_of(m.version)),
            None => String::new(),
        };
        let mut parts = Vec::new();
        for reference in manifest.iter().flat_map(|m| m.parts.iter()) {
            parts.push(Part::new(&source, reference.clone())?);
        }
        let kept: Vec<Part> = std::mem::take(&mut self.parts)
            .into_iter()
            .filter(|part| {
                own.is_some_and(|(rank, seqs)| {
                    part.reference.rank == rank && seqs.contains(&part.reference.seq)
                })
            })
            .filter(|part| {
                let folded = manifest.as_ref().and_then(|m| m.watermarks.get(&part.reference.rank));
                folded.is_none_or(|mark| *mark < part.reference.seq)
            })
            .collect();
        parts.extend(kept);
        self.parts = parts;
        self.manifest = manifest;
        Ok(())
    }

    /// The row table of part `i`, fetched and checked on first need.
    ///
    /// Errors: the node cache's (a copy that does not match its digest is
    /// [`Error::Corrupted`]); [`Error::Corrupted`] for a table that does not parse.
    pub fn table(&self, i: usize) -> Result<&RowTable> {
        let part = &self.parts[i];
        if let Some(table) = part.table.get() {
            return Ok(table);
        }
        let table = fetch_table(&self.store, &self.node, &part.objects.table)?;
        Ok(part.table.get_or_init(|| table))
    }

    /// Row table `object`: the one a part of this view already holds, else read through the
    /// node cache (for a merge, which needs the tables of every part).
    ///
    /// Errors: as [`View::table`].
    pub fn table_of(&self, object: &ObjectRef) -> Result<RowTable> {
        let held = self.parts.iter().find(|p| p.objects.table == *object);
        match held.and_then(|part| part.table.get()) {
            Some(table) => Ok(table.clone()),
            None => fetch_table(&self.store, &self.node, object),
        }
    }

    /// Where `key`'s row lies: the first part whose table holds its hash, and the entry.
    ///
    /// Errors: those of [`View::table`].
    pub fn find(&self, key: &str) -> Result<Option<(usize, RowEntry)>> {
        let hash = row_table::key_hash(key);
        for i in 0..self.parts.len() {
            if let Some(entry) = self.table(i)?.find(hash) {
                return Ok(Some((i, entry)));
            }
        }
        Ok(None)
    }

    /// `key`'s sample, or `None` when no part holds it.
    ///
    /// Errors: the store's; [`Error::Corrupted`] naming the rows object and the key when the
    /// record does not match its checksum or does not decode.
    pub fn get(&self, key: &str) -> Result<Option<Sample>> {
        let Some((part, entry)) = self.find(key)? else { return Ok(None) };
        let rows = &self.parts[part].objects.rows;
        let range = record_range(rows, &entry, key)?;
        let record = match self.rows_copy(part)? {
            Some(copy) => copy.slice(range.start as usize..range.end as usize),
            None => self.store.get_range(&rows.name, range)?,
        };
        self.decode(rows, &entry, key, record).map(Some)
    }

    /// Part `i`'s rows object from its node-cache copy, fetched on first need, when the view
    /// reads rows from copies; `None` when it reads them from the store.
    ///
    /// Errors: the node cache's (a copy that does not match its digest is corruption).
    fn rows_copy(&self, i: usize) -> Result<Option<&Bytes>> {
        if !self.cache_rows {
            return Ok(None);
        }
        let part = &self.parts[i];
        if let Some(copy) = part.rows_copy.get() {
            return Ok(Some(copy));
        }
        let rows = &part.objects.rows;
        let copy = self.node.fetch(&self.store, &rows.name, rows.digest()?)?;
        Ok(Some(part.rows_copy.get_or_init(|| copy.bytes().clone())))
    }

    /// The samples of `keys`, in order: each part's records fetched together (neighbouring
    /// ranges share a request, many requests in flight).
    ///
    /// Errors: as [`View::get`].
    pub fn get_batch(&self, keys: &[&str]) -> Result<Vec<Option<Sample>>> {
        let mut by_part: HashMap<usize, Vec<(usize, RowEntry)>> = HashMap::new();
        for (slot, key) in keys.iter().enumerate() {
            if let Some((part, entry)) = self.find(key)? {
                by_part.entry(part).or_default().push((slot, entry));
            }
        }
        let mut out: Vec<Option<Sample>> = vec![None; keys.len()];
        let mut remote = Vec::new();
        for (part, wanted) in by_part {
            let rows = &self.parts[part].objects.rows;
            let ranges = wanted
                .iter()
                .map(|(slot, entry)| record_range(rows, entry, keys[*slot]))
                .collect::<Result<Vec<Range<u64>>>>()?;
            match self.rows_copy(part)? {
                Some(copy) => {
                    for ((slot, entry), r) in wanted.into_iter().zip(ranges) {
                        let record = copy.slice(r.start as usize..r.end as usize);
                        out[slot] = Some(self.decode(rows, &entry, keys[slot], record)?);
                    }
                }
                None => remote.push((rows, wanted, ranges)),
            }
        }
        // Every part's records in one round of requests, many in flight.
        let asked: Vec<(&str, &[Range<u64>])> = remote
            .iter()
            .map(|(rows, _, ranges)| (rows.name.as_str(), ranges.as_slice()))
            .collect();
        let fetched = self.store.get_ranges_of(&asked)?;
        for ((rows, wanted, _), records) in remote.iter().zip(fetched) {
            for ((slot, entry), record) in wanted.iter().zip(records) {
                out[*slot] = Some(self.decode(rows, entry, keys[*slot], record)?);
            }
        }
        Ok(out)
    }

    /// Checks `record` against `entry`'s checksum, then decodes it as `key`'s.
    fn decode(
        &self,
        rows: &ObjectRef,
        entry: &RowEntry,
        key: &str,
        record: Bytes,
    ) -> Result<Sample> {
        // The URL is made only for an error: a warm get is a few hundred nanoseconds.
        let source = || self.store.url().object_url(&rows.name);
        let got = xxhash_rust::xxh3::xxh3_64(&record);
        if got != entry.checksum {
            return Err(Error::corrupted(
                source(),
                format!(
                    "the record at {}..{} has xxh3-64 {got:016x}; the row table records {:016x}",
                    entry.offset,
                    entry.offset + u64::from(entry.len),
                    entry.checksum
                ),
            )
            .for_key(key));
        }
        row_record::decode(&self.schema, &rows.name, key, record).map_err(|e| match e {
            Error::Corrupted { key, detail, .. } => {
                Error::Corrupted { path: source().into(), key, detail }
            }
            other => other,
        })
    }

    /// Every key, each once, in part order and each part's put order.
    ///
    /// Errors: the store's; [`Error::Corrupted`] for a keys object that does not match its
    /// digest or does not parse.
    pub fn keys(&self) -> Result<Vec<String>> {
        let mut seen = HashSet::new();
        let mut keys = Vec::new();
        for part in &self.parts {
            for key in self.part_keys(part)? {
                if seen.insert(key.clone()) {
                    keys.push(key);
                }
            }
        }
        Ok(keys)
    }

    /// The keys of `part`, read and checked against its digest.
    pub fn part_keys(&self, part: &Part) -> Result<Vec<String>> {
        let object = &part.objects.keys;
        let bytes = get_checked(&self.store, object)?;
        parse_keys(&self.store.url().object_url(&object.name), &bytes, part.reference.rows)
    }

    /// Checks every object of every part from the store's bytes (not the node cache's copies),
    /// and with `full` every record: its checksum, its key, its decoding.
    pub fn validate(&self, full: bool, report: &mut ValidationReport) {
        for part in &self.parts {
            let objects = std::iter::once(&part.reference.commit).chain(&part.reference.objects);
            let mut fetched = HashMap::new();
            for object in objects {
                report.files_checked += 1;
                let url = self.store.url().object_url(&object.name);
                let result = if full {
                    // Kept even when damaged: the records are then checked one by one, so that
                    // the report names the keys the damage reaches.
                    self.store.get(&object.name).map(|bytes| {
                        if let Err(e) = check_digest(&self.store, object, &bytes) {
                            report.problem(Some(Path::new(&url)), None, e.to_string());
                        }
                        Some(bytes)
                    })
                } else {
                    self.store.head(&object.name).and_then(|info| match info {
                        None => Err(Error::NotFound { what: url.clone() }),
                        Some(info) if info.size != object.size => Err(Error::corrupted(
                            &url,
                            format!("{} bytes, the manifest records {}", info.size, object.size),
                        )),
                        Some(_) => Ok(None),
                    })
                };
                match result {
                    Ok(Some(bytes)) => {
                        fetched.insert(object.name.clone(), bytes);
                    }
                    Ok(None) => {}
                    Err(e) => report.problem(Some(Path::new(&url)), None, e.to_string()),
                }
            }
            if full {
                self.check_records(part, &fetched, report);
            }
        }
    }

    /// Every record of `part`, from its objects' checked bytes in `fetched`.
    fn check_records(
        &self,
        part: &Part,
        fetched: &HashMap<String, Bytes>,
        report: &mut ValidationReport,
    ) {
        let (Some(rows), Some(table), Some(keys)) = (
            fetched.get(&part.objects.rows.name),
            fetched.get(&part.objects.table.name),
            fetched.get(&part.objects.keys.name),
        ) else {
            return; // Already reported: an object is missing or damaged.
        };
        let url = |object: &ObjectRef| self.store.url().object_url(&object.name);
        let checked = RowTable::parse(&url(&part.objects.table), table.clone()).and_then(|t| {
            let keys = parse_keys(&url(&part.objects.keys), keys, part.reference.rows)?;
            Ok((t, keys))
        });
        let (table, keys) = match checked {
            Ok(both) => both,
            Err(e) => return report.problem(None, None, e.to_string()),
        };
        if table.len() != keys.len() {
            let detail = format!("{} table entries for {} keys", table.len(), keys.len());
            return report.problem(Some(Path::new(&url(&part.objects.table))), None, detail);
        }
        for key in &keys {
            report.samples_checked += 1;
            let Some(entry) = table.find(row_table::key_hash(key)) else {
                let detail = "the row table has no entry for this key";
                report.problem(Some(Path::new(&url(&part.objects.table))), Some(key), detail);
                continue;
            };
            let end = entry.offset.checked_add(u64::from(entry.len));
            let record = match end.filter(|end| *end <= rows.len() as u64) {
                Some(end) => rows.slice(entry.offset as usize..end as usize),
                None => {
                    let detail = format!("the record runs past the end of {}", rows.len());
                    report.problem(Some(Path::new(&url(&part.objects.rows))), Some(key), detail);
                    continue;
                }
            };
            if let Err(e) = self.decode(&part.objects.rows, &entry, key, record) {
                report.problem(Some(Path::new(&url(&part.objects.rows))), Some(key), e.to_string());
            }
        }
    }
}

/// The byte range of `entry`'s record in `rows`.
///
/// Errors: [`Error::Corrupted`] naming the object and `key` when the entry runs past the end
/// of the object the manifest describes (a damaged table).
fn record_range(rows: &ObjectRef, entry: &RowEntry, key: &str) -> Result<Range<u64>> {
    let end = entry.offset.checked_add(u64::from(entry.len)).filter(|end| *end <= rows.size);
    match end {
        Some(end) if entry.len > 0 => Ok(entry.offset..end),
        _ => Err(Error::corrupted(
            &rows.name,
            format!(
                "the row table places the record at {} (+{}), outside the {} bytes of the object",
                entry.offset, entry.len, rows.size
            ),
        )
        .for_key(key)),
    }
}

/// Row table `object`, through the node cache.
///
/// Errors: as [`View::table`].
pub fn fetch_table(store: &RemoteStore, node: &NodeCache, object: &ObjectRef) -> Result<RowTable> {
    let copy = node.fetch(store, &object.name, object.digest()?)?;
    RowTable::parse(&store.url().object_url(&object.name), copy.bytes().clone())
}

/// The whole of `object`, checked against its digest.
///
/// Errors: the store's; [`Error::Corrupted`] naming the object and both sides.
pub fn get_checked(store: &RemoteStore, object: &ObjectRef) -> Result<Bytes> {
    let bytes = store.get(&object.name)?;
    check_digest(store, object, &bytes)?;
    Ok(bytes)
}

/// Whether `bytes` are `object`'s.
///
/// Errors: [`Error::Corrupted`] naming the object and both sides.
fn check_digest(store: &RemoteStore, object: &ObjectRef, bytes: &[u8]) -> Result<()> {
    let want = object.digest()?;
    let got = ObjectDigest::of(bytes);
    if got != want {
        return Err(Error::corrupted(
            store.url().object_url(&object.name),
            format!(
                "{} bytes with xxh3-128 {:032x}; the manifest records {} bytes with {:032x}",
                got.size, got.xxh3_128, want.size, want.xxh3_128
            ),
        ));
    }
    Ok(())
}
