//! Carrying the cache already in a dataset file into the file [`crate::TorchCacheWriter`]
//! rebuilds: refused when the new rows could not join it (another signature, schema or storage
//! dtype; nodes stowage does not know and would drop; derivative datasets out of lockstep), else
//! every payload row copied as stored, in order, so every index row keeps its `cache_row`, and
//! the index tables copied row for row. Rows stowage's checksums cover are checked on the way
//! (a rebuild never carries damaged stowage rows); adopting also checks and checksums the rest.

use std::collections::HashSet;
use std::path::Path;

use hdf5::Group;
use stowage_core::{Error, Result};

use crate::columns::{ColumnReader, ColumnWriter};
use crate::compat::{DescriptorCompat, StorageDtype};
use crate::error::read_error;
use crate::ffi::storage;
use crate::index_tables::{DerivativeIndexRow, FeatureIndexRow};
use crate::layout;
use crate::reader::{CacheVersion, TorchCache, derivative_element, float_element};
use crate::row_checksums::{self, Coverage};

/// Refuses to add rows for `compat`, stored as `storage`, to `cache`: aenet would refuse the
/// result (another signature), or the rows could not share its datasets (another storage dtype
/// or derivative layout). Errors name the file and both sides.
pub(crate) fn check_joinable(
    cache: &TorchCache,
    compat: &DescriptorCompat,
    storage: StorageDtype,
) -> Result<()> {
    let path = cache.path();
    cache.check_compatible(compat)?;
    let stored = cache.signature().storage_dtype;
    if stored != storage {
        return Err(Error::Incompatible {
            path: path.to_path_buf(),
            detail: format!(
                "the cache stores its rows as {} (storage_dtype), the writer was asked for {}: \
                 rows of both cannot share its datasets",
                stored.name(),
                storage.name()
            ),
        });
    }
    if let Some(section) = &cache.derivatives {
        let stored = section.layout;
        let wanted = (compat.n_radial_features(), compat.n_angular_features(), compat.multi());
        if (stored.n_radial_features, stored.n_angular_features, stored.multi) != wanted {
            return Err(Error::Incompatible {
                path: path.to_path_buf(),
                detail: format!(
                    "the derivative section has n_radial_features {}, n_angular_features {}, \
                     multi {}; the descriptor gives {}, {}, {}",
                    stored.n_radial_features,
                    stored.n_angular_features,
                    stored.multi,
                    wanted.0,
                    wanted.1,
                    wanted.2
                ),
            });
        }
    }
    Ok(())
}

/// The members a group of a v2 cache may hold: anything else would be dropped by the rebuild.
fn known_members(group: &str) -> &'static [&'static str] {
    match group {
        "torch_cache" => &[layout::FEATURES, layout::DERIVATIVES, layout::CHECKSUMS],
        "torch_cache/features" => &[layout::INDEX, layout::VALUES],
        "torch_cache/force_derivatives" => &[layout::INDEX, "radial", "angular"],
        "torch_cache/force_derivatives/radial" => {
            &["center_idx", "neighbor_idx", "dG_drij", "neighbor_typespin"]
        }
        "torch_cache/force_derivatives/angular" => &[
            "center_idx",
            "neighbor_j_idx",
            "neighbor_k_idx",
            "grads_i",
            "grads_j",
            "grads_k",
            "triplet_typespin",
        ],
        "torch_cache/stowage_checksums" => &[layout::FEATURES, layout::DERIVATIVES],
        _ => &[],
    }
}

/// Refuses a cache the rebuild could not carry whole: a node of `/torch_cache` stowage does not
/// know (or a section the root attributes do not declare, which aenet ignores and the rebuild
/// would drop), derivative datasets of unequal lengths (an interrupted append), or a payload
/// dataset whose element type is not the one the cache declares.
pub(crate) fn check_carriable(file: &hdf5::File, cache: &TorchCache) -> Result<()> {
    let path = cache.path();
    if cache.version() == CacheVersion::V2 {
        let mut groups = vec![layout::TORCH_CACHE.to_owned()];
        while let Some(name) = groups.pop() {
            let group = file.group(&name).map_err(|e| read_error(path, &name, e))?;
            let members = group.member_names().map_err(|e| read_error(path, &name, e))?;
            for member in members {
                let declared = match (name.as_str(), member.as_str()) {
                    ("torch_cache", layout::FEATURES) => cache.features.is_some(),
                    ("torch_cache", layout::DERIVATIVES) => cache.derivatives.is_some(),
                    _ => true,
                };
                if !known_members(&name).contains(&member.as_str()) || !declared {
                    return Err(Error::Incompatible {
                        path: path.to_path_buf(),
                        detail: format!(
                            "/{name}/{member} is not part of the cache stowage knows (or its \
                             section is not declared by the contains_* attributes): rebuilding \
                             the cache would drop it, so stowage does not write to this file"
                        ),
                    });
                }
                if group.group(&member).is_ok() {
                    groups.push(format!("{name}/{member}"));
                }
            }
        }
    }
    let storage = cache.signature().storage_dtype;
    if let Some(section) = &cache.features {
        check_element(path, &section.values, float_element(storage))?;
    }
    if let Some(section) = &cache.derivatives {
        let rows: Vec<u64> = section.columns.iter().map(ColumnReader::rows).collect();
        if rows.iter().any(|&n| n != rows[0]) {
            let counts: Vec<String> = layout::DERIVATIVE_ARRAYS
                .iter()
                .zip(&rows)
                .map(|(name, n)| format!("{name} {n}"))
                .collect();
            return Err(Error::corrupted(
                path,
                format!(
                    "the derivative datasets hold different row counts ({}): an interrupted \
                     append; stowage does not rebuild such a cache",
                    counts.join(", ")
                ),
            ));
        }
        for (i, column) in section.columns.iter().enumerate() {
            check_element(path, column, derivative_element(i, storage))?;
        }
    }
    Ok(())
}

/// Refuses a payload dataset stored in another element type than `expected` (as far as the
/// layout tells: other byte orders are converted by libhdf5 on read, exactly).
fn check_element(path: &Path, column: &ColumnReader, expected: crate::ffi::Element) -> Result<()> {
    let Some(dataset) = column.dataset_id() else { return Ok(()) }; // aenet's never detach
    let stored = storage::vlen_storage(dataset)
        .map_err(|e| read_error(path, column.name(), e))?
        .and_then(|layout| layout.element);
    match stored {
        Some(stored) if stored != expected => Err(Error::Incompatible {
            path: path.to_path_buf(),
            detail: format!(
                "{} stores {stored:?} values, the cache declares {expected:?}: stowage does not \
                 rebuild a cache whose rows it would convert",
                column.name()
            ),
        }),
        _ => Ok(()),
    }
}

/// What carrying one section produced: its index table, row for row, its coverage, and the
/// entries whose rows were newly checksummed (adopted).
pub(crate) struct Carried<T> {
    pub index: Vec<T>,
    pub coverage: Coverage,
    pub adopted: HashSet<i64>,
}

/// Copies the feature section of `cache` into `values`, checking the rows stowage's checksums
/// cover and, when `adopt`, checking and checksumming the others.
pub(crate) fn features(
    cache: &TorchCache,
    values: &mut ColumnWriter,
    adopt: bool,
) -> Result<Carried<FeatureIndexRow>> {
    let section = cache.features.as_ref().expect("the caller checked the section");
    let element = float_element(cache.signature().storage_dtype);
    for row in 0..section.values.rows() {
        values.push(section.values.read(row, element, "carried over")?)?;
    }
    let mut coverage = section.index.coverage.clone();
    let mut adopted = HashSet::new();
    for (position, sum) in coverage.iter_mut().enumerate() {
        if sum.is_none() && !adopt {
            continue;
        }
        // Reads with the counts checked, and the checksum when there is one.
        let (_, bytes) = cache.feature_row(section, position)?;
        if sum.is_none() {
            let row = section.index.rows[position];
            *sum = Some(row_checksums::feature_checksum(&row, &bytes));
            adopted.insert(row.entry_idx);
        }
    }
    Ok(Carried { index: section.index.rows.clone(), coverage, adopted })
}

/// Copies the derivative section of `cache` into `columns` (in
/// [`layout::DERIVATIVE_ARRAYS`] order), as [`features`] does.
pub(crate) fn derivatives(
    cache: &TorchCache,
    columns: &mut [ColumnWriter],
    adopt: bool,
) -> Result<Carried<DerivativeIndexRow>> {
    let section = cache.derivatives.as_ref().expect("the caller checked the section");
    let storage = cache.signature().storage_dtype;
    for (i, (from, to)) in section.columns.iter().zip(columns.iter_mut()).enumerate() {
        for row in 0..from.rows() {
            to.push(from.read(row, derivative_element(i, storage), "carried over")?)?;
        }
    }
    let mut coverage = section.index.coverage.clone();
    let mut adopted = HashSet::new();
    for (position, sum) in coverage.iter_mut().enumerate() {
        if sum.is_none() && !adopt {
            continue;
        }
        let arrays = cache.derivative_row(section, position)?.arrays;
        if sum.is_none() {
            let row = section.index.rows[position];
            let parts: Vec<&[u8]> = arrays.iter().map(Vec::as_slice).collect();
            *sum = Some(row_checksums::derivative_checksum(&row, &parts));
            adopted.insert(row.entry_idx);
        }
    }
    Ok(Carried { index: section.index.rows.clone(), coverage, adopted })
}

/// Copies every attribute of the old group `name` of `old` onto `new` (PyTables' titles, and
/// anything another writer added); the writer then writes its own over them.
pub(crate) fn copy_group_attributes(
    old: &hdf5::File,
    name: &str,
    new: &Group,
    path: &Path,
) -> Result<()> {
    let Ok(group) = old.group(name) else { return Ok(()) };
    let names = group.attr_names().map_err(|e| read_error(path, name, e))?;
    for attribute in names {
        crate::ffi::copy_attribute(group.id(), new.id(), &attribute).map_err(|e| {
            crate::error::write_error(path, &format!("copying attribute {attribute} of /{name}"), e)
        })?;
    }
    Ok(())
}
