//! stowage's checksums of the rows of an aenet cache, kept in `/torch_cache/stowage_checksums`,
//! a group aenet never reads:
//!
//! ```text
//! /torch_cache/stowage_checksums                    attr checksum_format "stowage.hdf5.aenet_row_checksums.v1"
//! /torch_cache/stowage_checksums/features           compound {index_row i64, xxh3 u64}
//! /torch_cache/stowage_checksums/force_derivatives  compound {index_row i64, xxh3 u64}
//! ```
//!
//! One row per index row that stowage wrote (or adopted): the position of the row in the
//! section's `index` table and an xxh3-64 over that index row's fields and its payload rows.
//! Index rows listed nowhere were added by another writer (aenet's per-entry appends) and are
//! reported as unchecked until adopted. The tables are chunked with Fletcher32, so damage to
//! them is an error when they are read.
//!
//! What is hashed, each part prefixed with its length as a little-endian u64: the index row's
//! members in the table's (alphabetical) order as little-endian integers, then each payload row's
//! values as stored (float32/float64 per `storage_dtype`, int64 indices), little-endian; for a
//! derivative row the 11 payload rows in [`crate::layout::DERIVATIVE_ARRAYS`] order.

use std::path::Path;

use hdf5::{Group, H5Type};
use stowage_core::{Error, Result};
use xxhash_rust::xxh3::Xxh3;

use crate::attributes::Attributes;
use crate::error::{read_error, write_error};
use crate::ffi;
use crate::index_tables::{DerivativeIndexRow, FeatureIndexRow};
use crate::layout::{self, DEFLATE_LEVEL, attr};

/// One row of a checksum table.
#[derive(H5Type, Debug, Clone, Copy, PartialEq, Eq)]
#[repr(C, packed)]
pub(crate) struct ChecksumRow {
    pub index_row: i64,
    pub xxh3: u64,
}

/// Rows per chunk of a checksum table (64 KiB of 16-byte rows).
const CHUNK_ROWS: usize = 4096;

fn hash<'a>(parts: impl IntoIterator<Item = &'a [u8]>) -> u64 {
    let mut hasher = Xxh3::new();
    for part in parts {
        hasher.update(&(part.len() as u64).to_le_bytes());
        hasher.update(part);
    }
    hasher.digest()
}

/// The checksum of a feature index row and its values row.
pub(crate) fn feature_checksum(row: &FeatureIndexRow, values: &[u8]) -> u64 {
    let FeatureIndexRow { cache_row, entry_idx, n_atoms, n_features } = *row;
    let mut fields = Vec::with_capacity(24);
    fields.extend_from_slice(&cache_row.to_le_bytes());
    fields.extend_from_slice(&entry_idx.to_le_bytes());
    fields.extend_from_slice(&n_atoms.to_le_bytes());
    fields.extend_from_slice(&n_features.to_le_bytes());
    hash([fields.as_slice(), values])
}

/// The checksum of a derivative index row and its 11 payload rows.
pub(crate) fn derivative_checksum(row: &DerivativeIndexRow, arrays: &[&[u8]]) -> u64 {
    let DerivativeIndexRow { cache_row, entry_idx, n_angular_triplets, n_atoms, n_radial_edges } =
        *row;
    let mut fields = Vec::with_capacity(28);
    fields.extend_from_slice(&cache_row.to_le_bytes());
    fields.extend_from_slice(&entry_idx.to_le_bytes());
    fields.extend_from_slice(&n_angular_triplets.to_le_bytes());
    fields.extend_from_slice(&n_atoms.to_le_bytes());
    fields.extend_from_slice(&n_radial_edges.to_le_bytes());
    hash(std::iter::once(fields.as_slice()).chain(arrays.iter().copied()))
}

/// Writes the checksum group into `cache` (of the file at `path`): one table per section given.
pub(crate) fn write(path: &Path, cache: &Group, sections: &[(&str, &[ChecksumRow])]) -> Result<()> {
    let failed = |what: &str| {
        let what = format!("{}/{}{what}", cache.name(), layout::CHECKSUMS);
        move |e: hdf5::Error| write_error(path, &what, e)
    };
    let group = cache.create_group(layout::CHECKSUMS).map_err(failed(""))?;
    ffi::write_utf8_attribute(group.id(), attr::CHECKSUM_FORMAT, layout::CHECKSUM_FORMAT)
        .map_err(|e| write_error(path, &format!("{} attributes", layout::CHECKSUMS), e))?;
    for (section, rows) in sections {
        let table = format!("/{section}");
        let dataset = group
            .new_dataset::<ChecksumRow>()
            .chunk(CHUNK_ROWS)
            .shuffle()
            .deflate(DEFLATE_LEVEL)
            .fletcher32()
            .shape(0..)
            .create(*section)
            .map_err(failed(&table))?;
        if !rows.is_empty() {
            dataset.resize(rows.len()).map_err(failed(&table))?;
            dataset.write_raw(rows).map_err(failed(&table))?;
        }
    }
    Ok(())
}

/// The checksums of one section by index row: `None` for a row stowage's checksums do not
/// cover.
pub(crate) type Coverage = Vec<Option<u64>>;

/// Reads the checksums of `section` from `cache` (of the file at `path`) for an index of
/// `index_rows` rows: every row uncovered when the file has no checksum group or no table for
/// the section.
///
/// Errors: `Error::Incompatible` for a checksum format this version does not know;
/// `Error::Corrupted` for a damaged table (Fletcher32), a row outside the index or listed twice.
pub(crate) fn read(
    path: &Path,
    cache: &Group,
    section: &str,
    index_rows: usize,
) -> Result<Coverage> {
    let mut coverage = vec![None; index_rows];
    if !cache.link_exists(layout::CHECKSUMS) {
        return Ok(coverage);
    }
    let name = format!("{}/{}", cache.name(), layout::CHECKSUMS);
    let group = cache.group(layout::CHECKSUMS).map_err(|e| read_error(path, &name, e))?;
    let format = Attributes { file: path, object: &group }.text(attr::CHECKSUM_FORMAT)?;
    if format != layout::CHECKSUM_FORMAT {
        return Err(Error::Incompatible {
            path: path.to_path_buf(),
            detail: format!(
                "{name} has checksum_format '{format}'; this version reads '{}'",
                layout::CHECKSUM_FORMAT
            ),
        });
    }
    if !group.link_exists(section) {
        return Ok(coverage);
    }
    let table = format!("{name}/{section}");
    let dataset = group.dataset(section).map_err(|e| read_error(path, &table, e))?;
    let rows = crate::index_tables::read_table::<ChecksumRow>(path, &dataset, &table)?;
    for ChecksumRow { index_row, xxh3 } in rows {
        let slot = usize::try_from(index_row).ok().and_then(|i| coverage.get_mut(i));
        match slot {
            Some(slot @ None) => *slot = Some(xxh3),
            Some(Some(_)) => {
                return Err(Error::corrupted(
                    path,
                    format!("{table} lists index row {index_row} twice"),
                ));
            }
            None => {
                return Err(Error::corrupted(
                    path,
                    format!("{table} lists index row {index_row}, the index has {index_rows} rows"),
                ));
            }
        }
    }
    Ok(coverage)
}

/// The table rows of a coverage: the covered index rows and their checksums.
pub(crate) fn rows_of(coverage: &[Option<u64>]) -> Vec<ChecksumRow> {
    coverage
        .iter()
        .enumerate()
        .filter_map(|(row, sum)| sum.map(|xxh3| ChecksumRow { index_row: row as i64, xxh3 }))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checksums_cover_every_field_and_byte() {
        let row = FeatureIndexRow { cache_row: 1, entry_idx: 2, n_atoms: 3, n_features: 4 };
        let base = feature_checksum(&row, &[1, 2, 3]);
        assert_ne!(base, feature_checksum(&FeatureIndexRow { entry_idx: 5, ..row }, &[1, 2, 3]));
        assert_ne!(base, feature_checksum(&FeatureIndexRow { n_features: 5, ..row }, &[1, 2, 3]));
        assert_ne!(base, feature_checksum(&row, &[1, 2, 4]));
        let d = DerivativeIndexRow {
            cache_row: 0,
            entry_idx: 0,
            n_angular_triplets: 1,
            n_atoms: 2,
            n_radial_edges: 3,
        };
        // Moving bytes between arrays changes the checksum: every part is length-prefixed.
        assert_ne!(
            derivative_checksum(&d, &[&[1, 2], &[3]]),
            derivative_checksum(&d, &[&[1], &[2, 3]])
        );
    }

    #[test]
    fn tables_round_trip_and_damage_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sums.h5");
        let file = hdf5::File::create(&path).unwrap();
        let cache = file.create_group("torch_cache").unwrap();
        assert_eq!(read(&path, &cache, "features", 2).unwrap(), vec![None, None]);
        let rows = [ChecksumRow { index_row: 1, xxh3: 7 }];
        write(&path, &cache, &[("features", &rows), ("force_derivatives", &[])]).unwrap();
        assert_eq!(read(&path, &cache, "features", 3).unwrap(), vec![None, Some(7), None]);
        assert_eq!(read(&path, &cache, "force_derivatives", 1).unwrap(), vec![None]);
        assert_eq!(rows_of(&[None, Some(7), None]), rows.to_vec());
        let short = read(&path, &cache, "features", 1).unwrap_err().to_string();
        assert!(short.contains("lists index row 1, the index has 1 rows"), "{short}");
    }
}
