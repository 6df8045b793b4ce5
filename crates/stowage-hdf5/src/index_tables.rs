//! The compound index tables of the aenet sections, members in PyTables' alphabetical packed
//! order (24 and 28 bytes), and reading and writing them.

use std::path::Path;

use hdf5::{Dataset, Group, H5Type};
use stowage_core::{Error, Result};

use crate::direct::MAX_INFLATE_RATIO;
use crate::error::{read_error, write_error};
use crate::ffi;
use crate::layout::{DEFLATE_LEVEL, INDEX};

/// One row of `features/index`.
#[derive(H5Type, Debug, Clone, Copy, PartialEq, Eq)]
#[repr(C, packed)]
pub(crate) struct FeatureIndexRow {
    pub cache_row: i64,
    pub entry_idx: i64,
    pub n_atoms: i32,
    pub n_features: i32,
}

/// One row of `force_derivatives/index`.
#[derive(H5Type, Debug, Clone, Copy, PartialEq, Eq)]
#[repr(C, packed)]
pub(crate) struct DerivativeIndexRow {
    pub cache_row: i64,
    pub entry_idx: i64,
    pub n_angular_triplets: i32,
    pub n_atoms: i32,
    pub n_radial_edges: i32,
}

/// Writes `rows` as the chunked (`chunk_rows` rows, at least 1), extendible, shuffled and
/// deflated table `index` of `group`.
pub(crate) fn write_index<T: H5Type>(
    file: &Path,
    group: &Group,
    rows: &[T],
    fletcher32: bool,
    chunk_rows: usize,
) -> Result<Dataset> {
    let failed = |e| write_error(file, &format!("{}/{INDEX}", group.name()), e);
    let builder =
        group.new_dataset::<T>().chunk(chunk_rows.max(1)).shuffle().deflate(DEFLATE_LEVEL);
    let builder = if fletcher32 { builder.fletcher32() } else { builder };
    let dataset = builder.shape(0..).create(INDEX).map_err(failed)?;
    if !rows.is_empty() {
        dataset.resize(rows.len()).map_err(failed)?;
        dataset.write_raw(rows).map_err(failed)?;
    }
    Ok(dataset)
}

/// Reads the whole table `index` of `group`; members are matched by name, so a foreign table with
/// other member order, padding or extra members reads the same.
pub(crate) fn read_index<T: H5Type>(file: &Path, group: &Group) -> Result<Vec<T>> {
    let what = format!("{}/{INDEX}", group.name());
    let dataset = group.dataset(INDEX).map_err(|e| read_error(file, &what, e))?;
    read_table(file, &dataset, &what)
}

/// Reads every row of the 1-D table `dataset` (`what` names it in errors), once its row count is
/// checked against the file: the count is the file's word, and the rows are allocated before
/// libhdf5 reads them. A table's rows lie in stored chunks, each inflating to at most
/// [`MAX_INFLATE_RATIO`] times its size, so a count past that is damage (an intact table never
/// reads rows from chunks it did not write: those would all be the fill value).
pub(crate) fn read_table<T: H5Type>(file: &Path, dataset: &Dataset, what: &str) -> Result<Vec<T>> {
    let failed = |e: ffi::Failure| read_error(file, what, e);
    let rows = ffi::row_count(dataset.id()).map_err(failed)?;
    let file_bytes = ffi::file_size(dataset.id()).map_err(failed)?;
    let row_bytes = std::mem::size_of::<T>().max(1) as u64;
    let most = file_bytes.saturating_mul(MAX_INFLATE_RATIO as u64) / row_bytes;
    if rows > most {
        return Err(Error::corrupted(
            file,
            format!(
                "{what} claims {rows} rows of {row_bytes} bytes; a file of {file_bytes} bytes \
                 holds at most {most}"
            ),
        ));
    }
    ffi::check_member_layout(dataset.id()).map_err(failed)?;
    dataset.read_raw::<T>().map_err(|e| read_error(file, what, e))
}
