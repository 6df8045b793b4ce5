//! The failures particular to NUMPY_10 caches, each mapped into one of the core's categories
//! ([`stowage_core::Error`]), so that a caller matches on what went wrong without knowing the
//! backend, while this crate names each failure by what it is.

use crate::BACKEND_NAME;
use crate::layout::{FORMAT_NAME, FORMAT_VERSION};
use std::path::PathBuf;
use stowage_core::npy_header::storage_descr;
use stowage_core::{DType, Error, shape};

/// A failure of a NUMPY_10 cache or collection file. Its message is the detail of the core error
/// it becomes; the core error adds the file.
#[derive(Debug, thiserror::Error)]
pub(crate) enum NpyError {
    /// The xxh64 of a sample's stored bytes differs from the one its record carries.
    #[error("{sample}: checksum {got:016x} != recorded {want:016x}")]
    ChecksumMismatch {
        /// The collection file.
        path: PathBuf,
        /// The slot or record read, as it appears in messages.
        sample: String,
        /// The xxh64 of the bytes in the file.
        got: u64,
        /// The xxh64 the record carries.
        want: u64,
    },

    /// The data size a collection file's header declares does not fit in memory after the header.
    #[error("header + {data_len} data bytes overflow")]
    DataSizeOverflow {
        /// The collection file.
        path: PathBuf,
        /// The data bytes the header declares.
        data_len: usize,
    },

    /// A collection file is shorter than its header says it is.
    #[error(
        "file is {len} bytes, expected at least {needed}: {header_len}-byte header + {data_len} \
         data bytes for {descr} array of shape {}",
        shape::display(.shape)
    )]
    ShortCollectionFile {
        /// The collection file.
        path: PathBuf,
        /// Its size.
        len: usize,
        /// The size its header needs: `header_len + data_len`.
        needed: usize,
        /// The header's length.
        header_len: usize,
        /// The data bytes of the declared array.
        data_len: usize,
        /// The header's dtype descr.
        descr: String,
        /// The header's shape.
        shape: Vec<usize>,
    },

    /// A `.npy` file holding a 0-d array, which has no slots.
    #[error("a 0-d .npy array has no slots; a collection file has shape (rows, ...)")]
    NoSlots {
        /// The file.
        path: PathBuf,
    },

    /// A collection file this cache's records point into whose header does not hold the slots its
    /// field needs: the file was changed or replaced.
    #[error(
        "header says {descr} {}, field {field:?} needs {} ({dtype}) slots {} in {rows} rows",
        shape::display(.shape),
        storage_descr(*.dtype),
        shape::display(.slots)
    )]
    HeaderMismatch {
        /// The collection file.
        path: PathBuf,
        /// The header's dtype descr.
        descr: String,
        /// The header's shape (rows first).
        shape: Vec<usize>,
        /// The field whose samples the records say the file holds.
        field: String,
        /// The field's dtype.
        dtype: DType,
        /// The field's slot shape.
        slots: Vec<usize>,
        /// The cache's slots per collection file.
        rows: usize,
    },

    /// A collection file another writer added, read through a record of a field whose dtype or
    /// slot shape it does not have: it belongs to another column.
    #[error(
        "header says {descr} {} (slots {}), field {field:?} is {} ({dtype}) with slots {}: the \
         file belongs to another column",
        shape::display(.shape),
        shape::display(&.shape[1..]),
        storage_descr(*.dtype),
        shape::display(.slots)
    )]
    ForeignHeaderMismatch {
        /// The collection file.
        path: PathBuf,
        /// The header's dtype descr.
        descr: String,
        /// The header's shape (rows first, at least one dimension).
        shape: Vec<usize>,
        /// The field the record was read for.
        field: String,
        /// The field's dtype.
        dtype: DType,
        /// The field's slot shape.
        slots: Vec<usize>,
    },

    /// `_COMPLETE` does not describe the record log it was written after.
    #[error(
        "_COMPLETE says the finalized log holds {marked} records, it holds {found} (finalize \
         record present: {finalize_record})"
    )]
    CommitMismatch {
        /// `records.log`.
        path: PathBuf,
        /// The records `_COMPLETE` counts.
        marked: u64,
        /// The records the log holds.
        found: u64,
        /// Whether the log ends with a finalize record.
        finalize_record: bool,
    },

    /// `stowage.json` names another format or a version this crate does not read.
    #[error(
        "format {format:?} version {version}, this reader handles {FORMAT_NAME:?} version \
         {FORMAT_VERSION}"
    )]
    OtherFormat {
        /// `stowage.json`.
        path: PathBuf,
        /// The format it names.
        format: String,
        /// The version it names.
        version: u32,
    },

    /// `stowage.json` does not match its own checksum.
    #[error("checksum {computed} != recorded {recorded}: the file changed after it was written")]
    MetadataChecksum {
        /// `stowage.json`.
        path: PathBuf,
        /// The digest of its contents.
        computed: String,
        /// The digest it records.
        recorded: String,
    },

    /// Keys were asked of a bare hangar data directory, which holds none.
    #[error(
        "reading keys of a bare hangar NUMPY_10 data directory: hangar keeps its records in its \
         LMDB database"
    )]
    BareHangarDirectory,
}

impl From<NpyError> for Error {
    fn from(e: NpyError) -> Error {
        let detail = e.to_string();
        match e {
            NpyError::ChecksumMismatch { path, .. }
            | NpyError::DataSizeOverflow { path, .. }
            | NpyError::ShortCollectionFile { path, .. }
            | NpyError::HeaderMismatch { path, .. }
            | NpyError::CommitMismatch { path, .. }
            | NpyError::MetadataChecksum { path, .. } => Error::corrupted(path, detail),
            NpyError::NoSlots { path }
            | NpyError::ForeignHeaderMismatch { path, .. }
            | NpyError::OtherFormat { path, .. } => Error::Incompatible { path, detail },
            NpyError::BareHangarDirectory => Error::unsupported(BACKEND_NAME, detail),
        }
    }
}

/// Names `field` in the detail of an [`Error::Corrupted`] (a sample's key goes in its own slot,
/// [`Error::for_key`]); other errors are returned unchanged.
pub(crate) fn in_field(err: Error, field: &str) -> Error {
    match err {
        Error::Corrupted { path, key, detail } => {
            Error::Corrupted { path, key, detail: format!("field {field:?}: {detail}") }
        }
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_failure_lands_in_its_category_naming_the_file() {
        let corrupted = Error::from(NpyError::ChecksumMismatch {
            path: "/c/data/10/abcd1234.npy".into(),
            sample: "slot 3".into(),
            got: 1,
            want: 2,
        });
        assert!(
            matches!(&corrupted, Error::Corrupted { key: None, detail, .. }
                if detail == "slot 3: checksum 0000000000000001 != recorded 0000000000000002"),
            "{corrupted}"
        );
        assert!(corrupted.to_string().contains("abcd1234.npy"));

        let foreign = Error::from(NpyError::ForeignHeaderMismatch {
            path: "/c/data/10/hangar01.npy".into(),
            descr: "<f8".into(),
            shape: vec![10, 4],
            field: "x".into(),
            dtype: DType::F32,
            slots: vec![4],
        });
        assert!(matches!(foreign, Error::Incompatible { .. }), "{foreign}");
        let text = foreign.to_string();
        assert!(
            text.contains("<f8 (10, 4) (slots (4,))") && text.contains("<f4 (float32)"),
            "{text}"
        );

        let bare = Error::from(NpyError::BareHangarDirectory);
        assert!(matches!(bare, Error::Unsupported { backend: "npy", .. }), "{bare}");
    }

    #[test]
    fn in_field_names_the_field_of_corrupted_data_only() {
        let err =
            in_field(Error::corrupted("/c/f.npy", "checksum 1 != recorded 2").for_key("k"), "x");
        assert_eq!(
            err.to_string(),
            "corrupted data in /c/f.npy, key \"k\": field \"x\": checksum 1 != recorded 2"
        );
        let other = in_field(Error::invalid("bad"), "x");
        assert_eq!(other.to_string(), "invalid argument: bad");
    }
}
