//! The formats the npy factory recognizes: stowage's own NUMPY_10 cache, and hangar's bare
//! NUMPY_10 data directory (collection files without the records, which hangar keeps in its LMDB
//! database).

use crate::layout::{FORMAT_NAME, Layout};
use std::path::Path;
use stowage_core::recognize::{self, Marker};
use stowage_core::{Error, Format, Result};

/// A NUMPY_10 cache stowage wrote: `stowage.json` naming `FORMAT_NAME`, the record log and the
/// hangar-style `data/10` tree.
pub const STOWAGE_NPY: Format = Format {
    id: "stowage-npy",
    description: "stowage NUMPY_10 cache",
    signature: "stowage.json with format \"stowage-npy\"",
};

/// A bare hangar NUMPY_10 data directory: `data/10/<uid>.npy` collection files, with or without
/// the `store_data/10` and `stage_data/10` markers. It holds no keys: each sample is read through
/// its record ([`crate::read_hangar_record`]).
pub const HANGAR_NUMPY10: Format = Format {
    id: "hangar-numpy10",
    description: "hangar NUMPY_10 data directory",
    signature: "data/10/*.npy",
};

/// Every format the factory recognizes, its own first.
pub(crate) static FORMATS: [Format; 2] = [STOWAGE_NPY, HANGAR_NUMPY10];

/// Which of [`FORMATS`] `path` is. A stowage marker decides alone: a `stowage.json` naming
/// [`FORMAT_NAME`] is [`STOWAGE_NPY`], any other stowage marker is another backend's cache (its
/// `data/10`, if any, is never taken for hangar's). Only a path without a marker is probed for
/// hangar's layout.
///
/// Errors: a marker that cannot be read or does not parse; a `data/10` that cannot be listed.
pub(crate) fn recognize(path: &Path) -> Result<Option<&'static Format>> {
    match recognize::marker(path)? {
        Marker::StowageJson(format) if format == FORMAT_NAME => Ok(Some(&STOWAGE_NPY)),
        Marker::StowageJson(_) | Marker::StowageLog(_) => Ok(None),
        Marker::None if is_hangar_data_dir(path)? => Ok(Some(&HANGAR_NUMPY10)),
        Marker::None => Ok(None),
    }
}

/// Whether `dir/data/10` is a directory holding at least one `.npy` file (following links, as
/// hangar opens them).
fn is_hangar_data_dir(dir: &Path) -> Result<bool> {
    let data = Layout::new(dir).data_dir();
    if !data.is_dir() {
        return Ok(false);
    }
    let entries = std::fs::read_dir(&data).map_err(|e| Error::io(&data, e))?;
    for entry in entries {
        let path = entry.map_err(|e| Error::io(&data, e))?.path();
        if path.extension().is_some_and(|e| e == "npy") && path.is_file() {
            return Ok(true);
        }
    }
    Ok(false)
}
