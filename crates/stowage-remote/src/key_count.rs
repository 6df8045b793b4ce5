//! Counting a version's distinct keys when a merge folds parts in, so that `len` is exact
//! without reading any key list: the manifest carries the count.
//!
//! The count is the size of the union of the parts' key hashes, which does not depend on the
//! order the commits were folded in: the base's count, plus every key hash of the new parts that
//! neither the base's parts nor an earlier new part hold. The merger fetches the row tables it
//! needs into its node cache (a writer has its own already).

use std::collections::HashSet;

use stowage_core::Result;

use crate::manifest::Manifest;
use crate::merge::Pending;
use crate::node_cache::NodeCache;
use crate::part::PartObjects;
use crate::store::RemoteStore;
use crate::view::fetch_table;

/// The distinct keys of the version that folds `pending` into `base`.
///
/// Errors: [`stowage_core::Error::Corrupted`] for a part that is not one or a table that does
/// not match its digest; the store's and the node cache's errors.
pub fn count_keys(
    store: &RemoteStore,
    node: &NodeCache,
    base: Option<&Manifest>,
    pending: &[Pending],
) -> Result<u64> {
    let mut total = base.map_or(0, |b| b.keys);
    let mut base_tables = Vec::new();
    for part in base.iter().flat_map(|b| b.parts.iter()) {
        let objects = PartObjects::of(&part.commit.name, &part.objects)?;
        base_tables.push(fetch_table(store, node, &objects.table)?);
    }
    let mut new = HashSet::new();
    for commit in pending {
        let objects = PartObjects::of(&commit.reference.name, &commit.record.objects)?;
        let table = fetch_table(store, node, &objects.table)?;
        for i in 0..table.len() {
            let hash = table.entry(i).key_hash;
            if !new.contains(&hash) && base_tables.iter().all(|t| t.find(hash).is_none()) {
                new.insert(hash);
                total += 1;
            }
        }
    }
    Ok(total)
}
