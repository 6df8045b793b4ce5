//! Where libhdf5 keeps a file's bytes: what the direct reader and writer need to read and write
//! variable-length rows themselves. The identity of the file libhdf5 has open, its base address
//! and address sizes; a dataset's chunking, filter pipeline and element type; the location of one
//! chunk. For writing: file space reserved for global heap collections ([`reserve`]), a chunk
//! written as stored ([`write_chunk`]), a dataset's row count ([`set_rows`]). Only metadata goes
//! through here, once per file, dataset, chunk or batch; no row goes through libhdf5.

use std::fs::File;
use std::os::fd::{BorrowedFd, FromRawFd, RawFd};
use std::os::unix::fs::MetadataExt;
use std::ptr;

use hdf5_sys::h5::{HADDR_UNDEF, haddr_t, hsize_t};
use hdf5_sys::h5d::{
    H5D_alloc_time_t, H5D_fill_time_t, H5D_fill_value_t, H5D_layout_t, H5Dcreate_anon,
    H5Dget_chunk_info_by_coord, H5Dget_create_plist, H5Dget_offset, H5Dget_type, H5Dset_extent,
    H5Dwrite_chunk,
};
use hdf5_sys::h5f::{
    H5F_scope_t, H5Fflush, H5Fget_access_plist, H5Fget_create_plist, H5Fget_intent,
    H5Fget_vfd_handle,
};
use hdf5_sys::h5i::{H5Iget_file_id, hid_t};
use hdf5_sys::h5o::H5Oincr_refcount;
use hdf5_sys::h5p::{
    H5P_DEFAULT, H5Pcreate, H5Pfill_value_defined, H5Pget_chunk, H5Pget_driver, H5Pget_filter2,
    H5Pget_layout, H5Pget_nfilters, H5Pget_sizes, H5Pget_userblock, H5Pset_alloc_time,
    H5Pset_fill_time, H5Pset_layout,
};
use hdf5_sys::h5s::H5Screate_simple;
use hdf5_sys::h5t::{H5T_class_t, H5Tequal, H5Tget_class, H5Tget_size, H5Tget_super};

use super::{Element, Failure, Id, Outcome, check, locked};

/// The storage facts of an open file a reader of its raw bytes needs.
#[derive(Debug)]
pub struct FileStorage {
    /// Device and inode of the file libhdf5 has open: a reader opening the path again checks it
    /// got the same file (the path may have been replaced since).
    pub identity: (u64, u64),
    /// Byte offset that file addresses are relative to (the user block size).
    pub base: u64,
    /// Bytes of a file address (`H5Pget_sizes`' `sizeof_addr`).
    pub address_size: usize,
    /// Bytes of a length field (`sizeof_size`).
    pub length_size: usize,
}

/// The storage of an open file, or `None` when libhdf5 does not read it through the POSIX
/// (`sec2`) driver, whose handle is a plain file descriptor.
pub fn file_storage(file: hid_t) -> Outcome<Option<FileStorage>> {
    locked(|| {
        // SAFETY: `file` is a valid file id held open by the caller.
        let access = Id::new(unsafe { H5Fget_access_plist(file) }, "H5Fget_access_plist")?;
        // SAFETY: `access` is a valid file access property list.
        let driver = unsafe { H5Pget_driver(access.0) };
        if driver < 0 || driver != *hdf5::globals::H5FD_SEC2 {
            return Ok(None);
        }
        let mut handle: *mut std::ffi::c_void = ptr::null_mut();
        // SAFETY: valid file and property list ids; libhdf5 stores one pointer in `handle`.
        check(unsafe { H5Fget_vfd_handle(file, access.0, &raw mut handle) }, "H5Fget_vfd_handle")?;
        if handle.is_null() {
            return Ok(None);
        }
        let metadata = handle_metadata(handle)?;
        // SAFETY: `file` is a valid file id.
        let create = Id::new(unsafe { H5Fget_create_plist(file) }, "H5Fget_create_plist")?;
        let (mut base, mut address_size, mut length_size) = (0 as hsize_t, 0usize, 0usize);
        // SAFETY: `create` is a valid file creation property list; each out-pointer is ours.
        unsafe {
            check(H5Pget_userblock(create.0, &raw mut base), "H5Pget_userblock")?;
            check(
                H5Pget_sizes(create.0, &raw mut address_size, &raw mut length_size),
                "H5Pget_sizes",
            )?;
        }
        let identity = (metadata.dev(), metadata.ino());
        Ok(Some(FileStorage { identity, base, address_size, length_size }))
    })
}

/// The metadata of the file behind the sec2 driver's `handle`, from libhdf5's own descriptor:
/// borrowed, not duplicated, so that it needs no descriptor (a process out of descriptors gets
/// its `EMFILE` where it opens files, never here) and leaves nothing open.
fn handle_metadata(handle: *mut std::ffi::c_void) -> Outcome<std::fs::Metadata> {
    // SAFETY: for the sec2 driver the handle points at the `int` descriptor of the open file,
    // which stays open while the file id is (the caller holds it).
    let fd: RawFd = unsafe { *handle.cast::<RawFd>() };
    // SAFETY: `fd` is open for the duration of this borrow, and the `File` is never dropped
    // (`ManuallyDrop`), so libhdf5's descriptor is not closed.
    let borrowed = std::mem::ManuallyDrop::new(unsafe { File::from_raw_fd(fd) });
    borrowed.metadata().map_err(|e| Failure(format!("inspecting libhdf5's file descriptor: {e}")))
}

/// A descriptor of its own on the file behind the sec2 driver's `handle` (a pointer to the `int`
/// descriptor of the open file).
fn duplicate_handle(handle: *mut std::ffi::c_void) -> Outcome<File> {
    // SAFETY: for the sec2 driver the handle points at the `int` descriptor of the open file,
    // which stays open while the file id is (the caller holds it); it is only borrowed here to
    // be duplicated.
    let fd: RawFd = unsafe { *handle.cast::<RawFd>() };
    // SAFETY: as above: `fd` is open for the duration of this borrow.
    let borrowed = unsafe { BorrowedFd::borrow_raw(fd) };
    borrowed
        .try_clone_to_owned()
        .map(File::from)
        .map_err(|e| Failure(format!("duplicating libhdf5's file descriptor: {e}")))
}

/// The file libhdf5 has open as `file` (any object id of it), on a descriptor of its own, with
/// its storage facts; `None` when it is not read through the POSIX (`sec2`) driver. For reading
/// the very bytes libhdf5 reads (`pread` leaves libhdf5's offset alone); the caller closes the
/// descriptor before the file is closed (else it keeps libhdf5's lock alive).
pub(crate) fn open_same_file(object: hid_t) -> Outcome<Option<(File, FileStorage)>> {
    locked(|| {
        // SAFETY: `object` is a valid id of an open file's object; the file id returned holds a
        // reference of its own, released by `Id`.
        let file = Id::new(unsafe { H5Iget_file_id(object) }, "H5Iget_file_id")?;
        let Some(storage) = file_storage(file.0)? else { return Ok(None) };
        // SAFETY: valid file id.
        let access = Id::new(unsafe { H5Fget_access_plist(file.0) }, "H5Fget_access_plist")?;
        let mut handle: *mut std::ffi::c_void = ptr::null_mut();
        // SAFETY: valid file and property list ids; libhdf5 stores one pointer in `handle`.
        let ret = unsafe { H5Fget_vfd_handle(file.0, access.0, &raw mut handle) };
        check(ret, "H5Fget_vfd_handle")?;
        if handle.is_null() {
            return Ok(None);
        }
        let mut intent = 0u32;
        // SAFETY: valid file id; H5Fget_intent writes one unsigned.
        check(unsafe { H5Fget_intent(file.0, &raw mut intent) }, "H5Fget_intent")?;
        if intent & hdf5_sys::h5f::H5F_ACC_RDWR != 0 {
            // A file this process writes: what libhdf5 would read may still be in its caches.
            // SAFETY: valid file id.
            let flushed = unsafe { H5Fflush(file.0, H5F_scope_t::H5F_SCOPE_LOCAL) };
            check(flushed, "H5Fflush")?;
        }
        Ok(Some((duplicate_handle(handle)?, storage)))
    })
}

/// The descriptor libhdf5 reads the file holding `object` through, when that is the POSIX
/// (`sec2`) driver: borrowed, valid while the file is open.
pub(crate) fn libhdf5_descriptor(object: hid_t) -> Outcome<Option<RawFd>> {
    locked(|| {
        // SAFETY: `object` is a valid id; the file id returned holds a reference of its own.
        let file = Id::new(unsafe { H5Iget_file_id(object) }, "H5Iget_file_id")?;
        // SAFETY: valid file id.
        let access = Id::new(unsafe { H5Fget_access_plist(file.0) }, "H5Fget_access_plist")?;
        // SAFETY: valid property list.
        let driver = unsafe { H5Pget_driver(access.0) };
        if driver < 0 || driver != *hdf5::globals::H5FD_SEC2 {
            return Ok(None);
        }
        let mut handle: *mut std::ffi::c_void = ptr::null_mut();
        // SAFETY: valid file and property list ids; libhdf5 stores one pointer in `handle`.
        let ret = unsafe { H5Fget_vfd_handle(file.0, access.0, &raw mut handle) };
        check(ret, "H5Fget_vfd_handle")?;
        // SAFETY: for the sec2 driver the handle points at the file's `int` descriptor.
        Ok((!handle.is_null()).then(|| unsafe { *handle.cast::<RawFd>() }))
    })
}

/// HDF5's identifier of the deflate filter.
pub const FILTER_DEFLATE: i32 = hdf5_sys::h5z::H5Z_FILTER_DEFLATE;
/// HDF5's identifier of the shuffle filter.
pub const FILTER_SHUFFLE: i32 = hdf5_sys::h5z::H5Z_FILTER_SHUFFLE;

/// One filter of a dataset's pipeline, as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Filter {
    /// The filter's identifier ([`FILTER_DEFLATE`], [`FILTER_SHUFFLE`], ...).
    pub id: i32,
    /// Its client data (for shuffle, the element size; for deflate, the level).
    pub client_data: Vec<u32>,
}

/// How a 1-D `VLEN<number>` dataset stores its rows, when it is chunked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VlenStorage {
    /// Rows per chunk.
    pub chunk_rows: u64,
    /// The filter pipeline in the order it was applied on write.
    pub filters: Vec<Filter>,
    /// The stored element type, when it is one of the little-endian standard types of
    /// [`Element`] (`None` for anything else: another byte order, a compound, ...).
    pub element: Option<Element>,
    /// Bytes of one stored element (`H5Tget_size` of the base type, any type).
    pub element_size: usize,
    /// Whether the stored element is a plain number (integer or float class): no references
    /// into the file inside it (a nested `VLEN`, a reference, a compound holding one).
    pub element_is_number: bool,
    /// Whether the dataset has a fill value of its own (`H5D_FILL_VALUE_USER_DEFINED`): rows of
    /// chunks never written read as it instead of as empty rows.
    pub user_fill: bool,
}

impl Element {
    /// The little-endian standard type of the element as libhdf5 names it.
    fn standard_le(self) -> hid_t {
        use hdf5_sys::h5t as t;
        match self {
            Element::U8 => *t::H5T_STD_U8LE,
            Element::U16 => *t::H5T_STD_U16LE,
            Element::U32 => *t::H5T_STD_U32LE,
            Element::U64 => *t::H5T_STD_U64LE,
            Element::I8 => *t::H5T_STD_I8LE,
            Element::I16 => *t::H5T_STD_I16LE,
            Element::I32 => *t::H5T_STD_I32LE,
            Element::I64 => *t::H5T_STD_I64LE,
            Element::F32 => *t::H5T_IEEE_F32LE,
            Element::F64 => *t::H5T_IEEE_F64LE,
        }
    }
}

/// The chunking, filters and stored element of the variable-length dataset `dataset`, or `None`
/// when it is not a chunked rank-1 `VLEN` sequence.
pub fn vlen_storage(dataset: hid_t) -> Outcome<Option<VlenStorage>> {
    locked(|| {
        // SAFETY: `dataset` is a valid dataset id held open by the caller.
        let datatype = Id::new(unsafe { H5Dget_type(dataset) }, "H5Dget_type")?;
        // SAFETY: valid datatype id.
        if unsafe { H5Tget_class(datatype.0) } != H5T_class_t::H5T_VLEN {
            return Ok(None);
        }
        // SAFETY: a VLEN type has a base type.
        let base = Id::new(unsafe { H5Tget_super(datatype.0) }, "H5Tget_super")?;
        let element = ELEMENTS.into_iter().find(|e| {
            // SAFETY: both are valid datatype ids; H5Tequal only compares them.
            unsafe { H5Tequal(base.0, e.standard_le()) > 0 }
        });
        // SAFETY: valid datatype id.
        let (element_size, base_class) = unsafe { (H5Tget_size(base.0), H5Tget_class(base.0)) };
        let element_is_number =
            matches!(base_class, H5T_class_t::H5T_INTEGER | H5T_class_t::H5T_FLOAT);
        // SAFETY: as above.
        let create = Id::new(unsafe { H5Dget_create_plist(dataset) }, "H5Dget_create_plist")?;
        // SAFETY: valid dataset creation property list.
        if unsafe { H5Pget_layout(create.0) } != H5D_layout_t::H5D_CHUNKED {
            return Ok(None);
        }
        let mut dims = [0 as hsize_t; 1];
        // SAFETY: at most one dimension is written into `dims`.
        let rank = unsafe { H5Pget_chunk(create.0, 1, dims.as_mut_ptr()) };
        if check(rank, "H5Pget_chunk")? != 1 || dims[0] == 0 {
            return Ok(None);
        }
        // SAFETY: valid property list.
        let count = check(unsafe { H5Pget_nfilters(create.0) }, "H5Pget_nfilters")?;
        // libhdf5 holds at most 32 filters per pipeline (`H5Z_MAX_NFILTERS`).
        let mut filters = Vec::with_capacity((count as usize).min(32));
        for index in 0..count as u32 {
            let mut flags = 0u32;
            let mut client_data = [0u32; 8];
            let mut elements = client_data.len();
            let mut config = 0u32;
            // SAFETY: `elements` tells libhdf5 how many values `client_data` holds (it writes at
            // most that many and returns the stored count); no name buffer is asked for.
            let id = unsafe {
                H5Pget_filter2(
                    create.0,
                    index,
                    &raw mut flags,
                    &raw mut elements,
                    client_data.as_mut_ptr(),
                    0,
                    ptr::null_mut(),
                    &raw mut config,
                )
            };
            check(id, "H5Pget_filter2")?;
            let kept = elements.min(client_data.len());
            filters.push(Filter { id, client_data: client_data[..kept].to_vec() });
        }
        let mut fill = H5D_fill_value_t::H5D_FILL_VALUE_ERROR;
        // SAFETY: valid property list; one value is written.
        check(unsafe { H5Pfill_value_defined(create.0, &raw mut fill) }, "H5Pfill_value_defined")?;
        let user_fill = fill == H5D_fill_value_t::H5D_FILL_VALUE_USER_DEFINED;
        Ok(Some(VlenStorage {
            chunk_rows: dims[0],
            filters,
            element,
            element_size,
            element_is_number,
            user_fill,
        }))
    })
}

/// Every element type, for lookups.
const ELEMENTS: [Element; 10] = [
    Element::U8,
    Element::U16,
    Element::U32,
    Element::U64,
    Element::I8,
    Element::I16,
    Element::I32,
    Element::I64,
    Element::F32,
    Element::F64,
];

/// Where one stored chunk lies in the file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChunkLocation {
    /// File address (relative to [`FileStorage::base`]).
    pub address: u64,
    /// Stored (filtered) bytes.
    pub size: u64,
    /// Bit `i` set: filter `i` of the pipeline was skipped for this chunk.
    pub filter_mask: u32,
}

/// The chunk of the 1-D chunked `dataset` starting at row `first_row`, or `None` when that chunk
/// was never written (its rows read as the fill value).
pub fn chunk_location(dataset: hid_t, first_row: u64) -> Outcome<Option<ChunkLocation>> {
    locked(|| {
        let offset = [first_row as hsize_t];
        let (mut filter_mask, mut address, mut size) = (0u32, HADDR_UNDEF as haddr_t, 0 as hsize_t);
        // SAFETY: `dataset` is a valid chunked rank-1 dataset; `offset` has rank elements and
        // each out-pointer is ours.
        let ret = unsafe {
            H5Dget_chunk_info_by_coord(
                dataset,
                offset.as_ptr(),
                &raw mut filter_mask,
                &raw mut address,
                &raw mut size,
            )
        };
        check(ret, "H5Dget_chunk_info_by_coord")?;
        Ok((address != HADDR_UNDEF).then_some(ChunkLocation { address, size, filter_mask }))
    })
}

/// Reserves `bytes` contiguous bytes of file space that libhdf5 will never use for anything
/// else, and returns their file offset (the base address included). They are the storage of an
/// anonymous, never-linked `u8` dataset, allocated at once and never filled, whose reference
/// count is raised so that it stays allocated when the file closes: readers never see it (it has
/// no name), and it keeps the space from being reused or cut off. The caller writes the bytes
/// itself.
pub fn reserve(location: hid_t, bytes: u64) -> Outcome<u64> {
    locked(|| {
        let dims = [bytes as hsize_t];
        // SAFETY: a rank-1 dataspace of `bytes` elements; `dims` has rank elements.
        let space = Id::new(
            unsafe { H5Screate_simple(1, dims.as_ptr(), ptr::null()) },
            "H5Screate_simple",
        )?;
        // SAFETY: the class id is valid once the library is initialized (we hold the lock).
        let create =
            Id::new(unsafe { H5Pcreate(*hdf5_sys::h5p::H5P_CLS_DATASET_CREATE) }, "H5Pcreate")?;
        // SAFETY: `create` is our own dataset creation property list.
        unsafe {
            check(H5Pset_layout(create.0, H5D_layout_t::H5D_CONTIGUOUS), "H5Pset_layout")?;
            let early = H5D_alloc_time_t::H5D_ALLOC_TIME_EARLY;
            check(H5Pset_alloc_time(create.0, early), "H5Pset_alloc_time")?;
            let never = H5D_fill_time_t::H5D_FILL_TIME_NEVER;
            check(H5Pset_fill_time(create.0, never), "H5Pset_fill_time")?;
        }
        // SAFETY: `location` is a valid file or group id held open by the caller; the type,
        // space and property list ids are valid.
        let dataset = Id::new(
            unsafe {
                H5Dcreate_anon(
                    location,
                    *hdf5_sys::h5t::H5T_STD_U8LE,
                    space.0,
                    create.0,
                    H5P_DEFAULT,
                )
            },
            "H5Dcreate_anon",
        )?;
        // SAFETY: `dataset` is the contiguous dataset just created, its storage allocated.
        let offset = unsafe { H5Dget_offset(dataset.0) };
        if offset == HADDR_UNDEF {
            return Err(Failure("the reserved space has no address".into()));
        }
        // SAFETY: as above; one more reference keeps the unlinked object (and its space) alive.
        check(unsafe { H5Oincr_refcount(dataset.0) }, "H5Oincr_refcount")?;
        Ok(offset)
    })
}

/// Writes the stored (filtered) bytes of the chunk of the 1-D chunked `dataset` starting at row
/// `first_row`, with `filter_mask` telling readers which filters were skipped.
pub fn write_chunk(dataset: hid_t, first_row: u64, filter_mask: u32, bytes: &[u8]) -> Outcome<()> {
    locked(|| {
        let offset = [first_row as hsize_t];
        // SAFETY: `dataset` is a valid chunked rank-1 dataset whose extent covers `first_row`;
        // `offset` has rank elements; `bytes` is readable for its length during the call.
        let ret = unsafe {
            H5Dwrite_chunk(
                dataset,
                H5P_DEFAULT,
                filter_mask,
                offset.as_ptr(),
                bytes.len(),
                bytes.as_ptr().cast(),
            )
        };
        check(ret, "H5Dwrite_chunk").map(|_| ())
    })
}

/// Sets the row count of the extendible 1-D `dataset`.
pub fn set_rows(dataset: hid_t, rows: u64) -> Outcome<()> {
    locked(|| {
        let dims = [rows as hsize_t];
        // SAFETY: `dataset` is a valid, chunked, extendible rank-1 dataset; `dims` has rank
        // elements.
        check(unsafe { H5Dset_extent(dataset, dims.as_ptr()) }, "H5Dset_extent").map(|_| ())
    })
}
