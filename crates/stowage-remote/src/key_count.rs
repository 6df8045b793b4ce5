//! Counting a version's distinct keys when a merge folds parts in, so that `len` is exact
//! without reading any key list: the manifest carries the count.
//!
//! The count is the size of the union of the parts' key hashes, which does not depend on the
//! order the commits were folded in: the base's count, plus every key hash of the new parts that
//! neither the base's parts nor an earlier new part hold. The caller says where row tables come
//! from ([`crate::view::View::table_of`]: the tables a view holds, else the node cache).

use std::collections::HashSet;

use stowage_core::Result;

use crate::manifest::{Manifest, ObjectRef};
use crate::merge::Pending;
use crate::part::PartObjects;
use crate::row_table::RowTable;

/// The distinct keys of the version that folds `pending` into `base`.
///
/// Errors: [`stowage_core::Error::Corrupted`] for a part that is not one; `table_of`'s.
pub fn count_keys(
    table_of: &dyn Fn(&ObjectRef) -> Result<RowTable>,
    base: Option<&Manifest>,
    pending: &[Pending],
) -> Result<u64> {
    let mut total = base.map_or(0, |b| b.keys);
    let mut base_tables = Vec::new();
    for part in base.iter().flat_map(|b| b.parts.iter()) {
        let objects = PartObjects::of(&part.commit.name, &part.objects)?;
        base_tables.push(table_of(&objects.table)?);
    }
    let mut new = HashSet::new();
    for commit in pending {
        let objects = PartObjects::of(&commit.reference.name, &commit.record.objects)?;
        let table = table_of(&objects.table)?;
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
