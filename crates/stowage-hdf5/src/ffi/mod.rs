//! The HDF5 operations hdf5-metno's high-level API does not cover, written once against the C API
//! (`hdf5_sys`): variable-length rows of numeric elements through libhdf5's conversion path (read
//! one, write a batch: for layouts the direct reader and writer leave to libhdf5), attributes in
//! the exact encodings PyTables accepts (fixed-length UTF-8 strings, `H5T_NATIVE_B8` bools, i64),
//! a tolerant attribute reader (NULL-dataspace strings, enum bools, variable-length strings), and
//! copying an object's attributes between files; [`storage`] asks where a file keeps its bytes
//! (and reserves file space) for the direct reader and writer.
//!
//! Every call runs under hdf5-metno's global reentrant lock ([`locked`]): Debian's libhdf5 is not
//! built thread-safe, and the same lock serializes the high-level API, so the two never run
//! concurrently. The lock also silences libhdf5's automatic error printing; a failed call is turned
//! into the message on top of libhdf5's error stack ([`Failure`]), never into a print or an abort.

use std::ffi::{CString, c_void};
use std::fmt;
use std::ptr;

use hdf5_sys::h5::{hsize_t, htri_t};
use hdf5_sys::h5a::{
    H5Acreate2, H5Adelete, H5Aexists, H5Aget_space, H5Aget_type, H5Aopen, H5Aread, H5Awrite,
};
use hdf5_sys::h5d::{H5Dget_space, H5Dget_type, H5Dread, H5Dset_extent, H5Dvlen_reclaim, H5Dwrite};
use hdf5_sys::h5f::H5Fget_filesize;
use hdf5_sys::h5i::{H5Idec_ref, H5Iget_file_id, hid_t};
use hdf5_sys::h5p::H5P_DEFAULT;
use hdf5_sys::h5s::{
    H5S_class_t, H5S_seloper_t, H5Screate, H5Screate_simple, H5Sget_simple_extent_dims,
    H5Sget_simple_extent_npoints, H5Sget_simple_extent_type, H5Sselect_hyperslab,
};
use hdf5_sys::h5t::{
    H5T_class_t, H5T_cset_t, H5T_sign_t, H5T_str_t, H5Tcopy, H5Tdetect_class, H5Tget_class,
    H5Tget_member_offset, H5Tget_member_type, H5Tget_nmembers, H5Tget_sign, H5Tget_size,
    H5Tget_strpad, H5Tis_variable_str, H5Tset_cset, H5Tset_size, H5Tset_strpad, H5Tvlen_create,
    hvl_t,
};

pub(crate) mod helper;
pub mod storage;

/// A failed HDF5 call: what was being done and libhdf5's own message.
#[derive(Debug, Clone)]
pub struct Failure(pub String);

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for Failure {}

impl From<hdf5::Error> for Failure {
    fn from(error: hdf5::Error) -> Failure {
        Failure(error.to_string())
    }
}

/// Result of a low-level call.
pub type Outcome<T> = Result<T, Failure>;

/// Runs `f` under hdf5-metno's global lock (initializing the library and silencing its error
/// printing on first use). Every libhdf5 call of this crate goes through here or through the
/// high-level API, which takes the same lock.
pub fn locked<T>(f: impl FnOnce() -> T) -> T {
    hdf5::sync::sync(f)
}

/// The failure for a negative return of the call `what`, with libhdf5's message.
fn failure(what: &str) -> Failure {
    let detail = hdf5::Error::query().map(|e| e.to_string()).unwrap_or_default();
    if detail.is_empty() { Failure(what.to_owned()) } else { Failure(format!("{what}: {detail}")) }
}

/// Checks an `herr_t`/`htri_t`-style return: negative is a failure.
fn check<T: Into<i64> + Copy>(ret: T, what: &str) -> Outcome<T> {
    if ret.into() < 0 { Err(failure(what)) } else { Ok(ret) }
}

/// An identifier this module created, released when dropped.
struct Id(hid_t);

impl Id {
    fn new(id: hid_t, what: &str) -> Outcome<Id> {
        if id < 0 { Err(failure(what)) } else { Ok(Id(id)) }
    }
}

impl Drop for Id {
    fn drop(&mut self) {
        // SAFETY: `self.0` is a valid identifier this module owns one reference to; releasing it
        // under the lock is the only use after this point.
        locked(|| unsafe { H5Idec_ref(self.0) });
    }
}

fn c_name(name: &str) -> Outcome<CString> {
    CString::new(name).map_err(|_| Failure(format!("name {name:?} contains a NUL byte")))
}

/// The native element type of a variable-length row: HDF5 converts the file's element type to it
/// on read (so an f32 row reads as f64 when asked) and from it on write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Element {
    /// `H5T_NATIVE_UINT8` (also bytes, bool and UTF-8 text).
    U8,
    /// `H5T_NATIVE_UINT16` (also the raw bits of float16 and bfloat16).
    U16,
    /// `H5T_NATIVE_UINT32`.
    U32,
    /// `H5T_NATIVE_UINT64`.
    U64,
    /// `H5T_NATIVE_INT8`.
    I8,
    /// `H5T_NATIVE_INT16`.
    I16,
    /// `H5T_NATIVE_INT32`.
    I32,
    /// `H5T_NATIVE_INT64`.
    I64,
    /// `H5T_NATIVE_FLOAT`.
    F32,
    /// `H5T_NATIVE_DOUBLE`.
    F64,
}

impl Element {
    /// Bytes per element.
    pub fn size(self) -> usize {
        match self {
            Element::U8 | Element::I8 => 1,
            Element::U16 | Element::I16 => 2,
            Element::U32 | Element::I32 | Element::F32 => 4,
            Element::U64 | Element::I64 | Element::F64 => 8,
        }
    }

    /// The library's native type id; only valid under [`locked`] (the library is initialized).
    fn native(self) -> hid_t {
        use hdf5_sys::h5t as t;
        match self {
            Element::U8 => *t::H5T_NATIVE_UINT8,
            Element::U16 => *t::H5T_NATIVE_UINT16,
            Element::U32 => *t::H5T_NATIVE_UINT32,
            Element::U64 => *t::H5T_NATIVE_UINT64,
            Element::I8 => *t::H5T_NATIVE_INT8,
            Element::I16 => *t::H5T_NATIVE_INT16,
            Element::I32 => *t::H5T_NATIVE_INT32,
            Element::I64 => *t::H5T_NATIVE_INT64,
            Element::F32 => *t::H5T_NATIVE_FLOAT,
            Element::F64 => *t::H5T_NATIVE_DOUBLE,
        }
    }
}

/// A memory type `VLEN<element>`, created once per reader or writer of a dataset.
pub struct VlenType {
    id: Id,
    element: Element,
}

impl VlenType {
    /// `H5Tvlen_create(native element type)`.
    pub fn new(element: Element) -> Outcome<VlenType> {
        locked(|| {
            // SAFETY: the native type id is valid once the library is initialized (we hold the
            // lock, which initialized it); H5Tvlen_create only reads it.
            let id = unsafe { H5Tvlen_create(element.native()) };
            Ok(VlenType { id: Id::new(id, "H5Tvlen_create")?, element })
        })
    }

    /// The element type (the crate's integration tests read it; the crate itself keeps
    /// `element` at hand where it builds the type).
    #[cfg(feature = "test-support")]
    pub fn element(&self) -> Element {
        self.element
    }
}

/// Number of rows (the first dimension) of a 1-D dataset.
pub fn row_count(dataset: hid_t) -> Outcome<u64> {
    locked(|| {
        // SAFETY: `dataset` is a valid dataset id held open by the caller.
        let space = Id::new(unsafe { H5Dget_space(dataset) }, "H5Dget_space")?;
        let mut dims = [0 as hsize_t; 1];
        // SAFETY: `dims` has room for the one dimension checked below; the rank is returned first
        // with a null buffer so that a dataset of higher rank never writes past `dims`.
        let rank = unsafe { H5Sget_simple_extent_dims(space.0, ptr::null_mut(), ptr::null_mut()) };
        if check(rank, "H5Sget_simple_extent_dims")? != 1 {
            return Err(Failure(format!("dataset has rank {rank}, expected 1")));
        }
        // SAFETY: rank is 1, so one element of `dims` is written.
        let ret = unsafe { H5Sget_simple_extent_dims(space.0, dims.as_mut_ptr(), ptr::null_mut()) };
        check(ret, "H5Sget_simple_extent_dims")?;
        Ok(dims[0])
    })
}

/// Bytes in the file holding `object` (any id of an open file: a group, dataset or attribute),
/// as libhdf5 sees it: what sizes read from that file are checked against.
pub fn file_size(object: hid_t) -> Outcome<u64> {
    locked(|| {
        // SAFETY: `object` is a valid id; the file id returned holds a reference of its own.
        let file = Id::new(unsafe { H5Iget_file_id(object) }, "H5Iget_file_id")?;
        let mut size: hsize_t = 0;
        // SAFETY: valid file id; one value is written.
        check(unsafe { H5Fget_filesize(file.0, &raw mut size) }, "H5Fget_filesize")?;
        Ok(size)
    })
}

/// Checks that every member of the stored element type of `dataset` lies inside the element
/// (nested compounds too): libhdf5's compound conversion copies each member from its stored
/// offset without checking it against the element's size, so a damaged datatype message makes
/// it read and write past its buffers.
pub fn check_member_layout(dataset: hid_t) -> Outcome<()> {
    fn check_type(datatype: hid_t, depth: usize) -> Outcome<()> {
        // SAFETY: valid datatype id.
        if unsafe { H5Tget_class(datatype) } != H5T_class_t::H5T_COMPOUND {
            return Ok(());
        }
        if depth > 8 {
            return Err(Failure("compound types nested more than 8 deep".into()));
        }
        // SAFETY: valid compound type id.
        let (size, members) = unsafe { (H5Tget_size(datatype), H5Tget_nmembers(datatype)) };
        let members = u32::try_from(members).map_err(|_| failure("H5Tget_nmembers"))?;
        for member in 0..members {
            // SAFETY: `member` is below the member count.
            let offset = unsafe { H5Tget_member_offset(datatype, member) };
            // SAFETY: as above; the id returned is released by `Id`.
            let member_type =
                Id::new(unsafe { H5Tget_member_type(datatype, member) }, "H5Tget_member_type")?;
            // SAFETY: valid datatype id.
            let member_size = unsafe { H5Tget_size(member_type.0) };
            if offset.checked_add(member_size).is_none_or(|end| end > size) {
                return Err(Failure(format!(
                    "member {member} of the stored element type ({member_size} bytes at offset \
                     {offset}) lies past the element's {size} bytes"
                )));
            }
            check_type(member_type.0, depth + 1)?;
        }
        Ok(())
    }
    locked(|| {
        // SAFETY: `dataset` is a valid dataset id held open by the caller.
        let datatype = Id::new(unsafe { H5Dget_type(dataset) }, "H5Dget_type")?;
        check_type(datatype.0, 0)
    })
}

/// Selects rows `start..start + count` of a 1-D file dataspace.
fn select_rows(space: &Id, start: u64, count: u64) -> Outcome<()> {
    let (start, count) = ([start as hsize_t], [count as hsize_t]);
    // SAFETY: `space` is a valid rank-1 dataspace; the start and count arrays have rank elements.
    let ret = unsafe {
        H5Sselect_hyperslab(
            space.0,
            H5S_seloper_t::H5S_SELECT_SET,
            start.as_ptr(),
            ptr::null(),
            count.as_ptr(),
            ptr::null(),
        )
    };
    check(ret, "H5Sselect_hyperslab").map(|_| ())
}

/// Reads row `row` of a 1-D `VLEN<...>` dataset as the bytes of `vlen.element()` values (HDF5
/// converts the stored element type). Fails (never panics) on an out-of-range row, a stored type
/// that does not convert, or damage libhdf5 detects (Fletcher32, deflate, heap).
pub fn read_vlen_row(dataset: hid_t, row: u64, vlen: &VlenType) -> Outcome<Vec<u8>> {
    locked(|| {
        let rows = row_count(dataset)?;
        if row >= rows {
            return Err(Failure(format!("row {row} is past the dataset's {rows} rows")));
        }
        let mut one = read_vlen_rows(dataset, row, 1, vlen)?;
        Ok(one.pop().expect("one row was read"))
    })
}

/// Reads rows `start..start + count` of a 1-D `VLEN<...>` dataset in one call, each as the bytes
/// of `vlen.element()` values.
pub fn read_vlen_rows(
    dataset: hid_t,
    start: u64,
    count: u64,
    vlen: &VlenType,
) -> Outcome<Vec<Vec<u8>>> {
    locked(|| {
        let rows = row_count(dataset)?;
        if start.checked_add(count).is_none_or(|end| end > rows) {
            return Err(Failure(format!(
                "rows {start}..{start}+{count} exceed the dataset's {rows} rows"
            )));
        }
        if count == 0 {
            return Ok(Vec::new());
        }
        // libhdf5 follows each row's global heap reference unchecked: stowage checks them
        // first, which also bounds `count` by what the file holds.
        crate::direct::libhdf5_guard::check_vlen_rows(dataset, start, count)?;
        // SAFETY: `dataset` is a valid dataset id held open by the caller.
        let file_space = Id::new(unsafe { H5Dget_space(dataset) }, "H5Dget_space")?;
        select_rows(&file_space, start, count)?;
        let dims = [count as hsize_t];
        // SAFETY: a rank-1 simple dataspace of `count` elements.
        let memory_space = Id::new(
            unsafe { H5Screate_simple(1, dims.as_ptr(), ptr::null()) },
            "H5Screate_simple",
        )?;
        let mut cells = vec![hvl_t { len: 0, p: ptr::null_mut() }; count as usize];
        // SAFETY: `count` elements are selected in each space and `cells` holds `count` `hvl_t`s.
        let read = unsafe {
            H5Dread(
                dataset,
                vlen.id.0,
                memory_space.0,
                file_space.0,
                H5P_DEFAULT,
                cells.as_mut_ptr().cast(),
            )
        };
        check(read, "H5Dread of variable-length rows")?;
        let size = vlen.element.size();
        let copied = cells
            .iter()
            .map(|cell| match cell.len.checked_mul(size) {
                Some(0) => Ok(Vec::new()),
                Some(n) if !cell.p.is_null() => {
                    // SAFETY: libhdf5 allocated `cell.len` elements at `cell.p`, valid until
                    // the reclaim below.
                    let bytes = unsafe { std::slice::from_raw_parts(cell.p.cast::<u8>(), n) };
                    Ok(bytes.to_vec())
                }
                _ => Err(Failure(format!("variable-length row of {} elements", cell.len))),
            })
            .collect();
        // SAFETY: frees what H5Dread allocated for these cells, once.
        unsafe {
            H5Dvlen_reclaim(vlen.id.0, memory_space.0, H5P_DEFAULT, cells.as_mut_ptr().cast())
        };
        copied
    })
}

/// Appends `rows` (each the bytes of a whole number of `vlen.element()` values) at row `start` of
/// an extendible 1-D `VLEN<...>` dataset, growing it to `start + rows.len()` rows, in one write.
pub fn write_vlen_rows(dataset: hid_t, start: u64, rows: &[&[u8]], vlen: &VlenType) -> Outcome<()> {
    if rows.is_empty() {
        return Ok(());
    }
    let size = vlen.element.size();
    let cells: Vec<hvl_t> = rows
        .iter()
        .map(|row| {
            if row.len() % size != 0 {
                return Err(Failure(format!(
                    "{} bytes is not a whole number of {size}-byte elements",
                    row.len()
                )));
            }
            // libhdf5 only reads through `p` on write; the cast away from const is its API's.
            Ok(hvl_t { len: row.len() / size, p: row.as_ptr().cast_mut().cast::<c_void>() })
        })
        .collect::<Outcome<_>>()?;
    locked(|| {
        let end = [start as hsize_t + rows.len() as hsize_t];
        // SAFETY: `dataset` is a valid, chunked, extendible rank-1 dataset; `end` has rank elements.
        check(unsafe { H5Dset_extent(dataset, end.as_ptr()) }, "H5Dset_extent")?;
        // SAFETY: as above; the dataspace is fetched after the extent changed.
        let file_space = Id::new(unsafe { H5Dget_space(dataset) }, "H5Dget_space")?;
        select_rows(&file_space, start, rows.len() as u64)?;
        let count = [rows.len() as hsize_t];
        // SAFETY: a rank-1 simple dataspace of `rows.len()` elements.
        let memory_space = Id::new(
            unsafe { H5Screate_simple(1, count.as_ptr(), ptr::null()) },
            "H5Screate_simple",
        )?;
        // SAFETY: `cells` holds one `hvl_t` per selected element, each pointing at `len` elements
        // of the memory element type that stay borrowed (alive) for this call.
        let written = unsafe {
            H5Dwrite(
                dataset,
                vlen.id.0,
                memory_space.0,
                file_space.0,
                H5P_DEFAULT,
                cells.as_ptr().cast::<c_void>(),
            )
        };
        check(written, "H5Dwrite of variable-length rows").map(|_| ())
    })
}

/// Removes attribute `name` of `object` when it exists, so that it can be written anew.
fn delete_attribute(object: hid_t, name: &CString) -> Outcome<()> {
    // SAFETY: `object` is a valid object id; `name` is NUL-terminated.
    let exists: htri_t = unsafe { H5Aexists(object, name.as_ptr()) };
    if check(exists, "H5Aexists")? > 0 {
        // SAFETY: as above; the attribute exists.
        check(unsafe { H5Adelete(object, name.as_ptr()) }, "H5Adelete")?;
    }
    Ok(())
}

/// Writes a scalar attribute of type `datatype` from `value` (`H5Tget_size(datatype)` bytes), or
/// with a NULL dataspace when `value` is `None`.
fn write_attribute(
    object: hid_t,
    name: &str,
    datatype: hid_t,
    value: Option<&[u8]>,
) -> Outcome<()> {
    let c = c_name(name)?;
    locked(|| {
        delete_attribute(object, &c)?;
        let class = if value.is_some() { H5S_class_t::H5S_SCALAR } else { H5S_class_t::H5S_NULL };
        // SAFETY: creating a dataspace has no preconditions.
        let space = Id::new(unsafe { H5Screate(class) }, "H5Screate")?;
        // SAFETY: valid object, type and space ids; `c` is NUL-terminated.
        let attribute = Id::new(
            unsafe { H5Acreate2(object, c.as_ptr(), datatype, space.0, H5P_DEFAULT, H5P_DEFAULT) },
            "H5Acreate2",
        )?;
        if let Some(bytes) = value {
            // SAFETY: the caller passes exactly one element of `datatype` in `bytes`.
            let ret = unsafe { H5Awrite(attribute.0, datatype, bytes.as_ptr().cast::<c_void>()) };
            check(ret, "H5Awrite")?;
        }
        Ok(())
    })
}

/// Writes `value` as a scalar fixed-length string attribute, UTF-8 cset, null-terminated padding,
/// size = its byte length: what PyTables writes and reads back as `str`. The empty string is
/// written as PyTables writes it, with a NULL dataspace.
pub fn write_utf8_attribute(object: hid_t, name: &str, value: &str) -> Outcome<()> {
    locked(|| {
        // SAFETY: copying the predefined C string type has no other precondition.
        let datatype = Id::new(unsafe { H5Tcopy(*hdf5_sys::h5t::H5T_C_S1) }, "H5Tcopy")?;
        // SAFETY: `datatype` is our own modifiable string type.
        unsafe {
            check(H5Tset_size(datatype.0, value.len().max(1)), "H5Tset_size")?;
            check(H5Tset_strpad(datatype.0, H5T_str_t::H5T_STR_NULLTERM), "H5Tset_strpad")?;
            check(H5Tset_cset(datatype.0, H5T_cset_t::H5T_CSET_UTF8), "H5Tset_cset")?;
        }
        let bytes = (!value.is_empty()).then_some(value.as_bytes());
        write_attribute(object, name, datatype.0, bytes)
    })
}

/// Writes `value` as a scalar `H5T_NATIVE_B8` bitfield attribute (PyTables' bool; never an enum,
/// which PyTables reads as `None`).
pub fn write_bool_attribute(object: hid_t, name: &str, value: bool) -> Outcome<()> {
    locked(|| {
        write_attribute(object, name, *hdf5_sys::h5t::H5T_NATIVE_B8, Some(&[u8::from(value)]))
    })
}

/// Writes `value` as a scalar little-endian i64 attribute.
pub fn write_i64_attribute(object: hid_t, name: &str, value: i64) -> Outcome<()> {
    locked(|| {
        write_attribute(object, name, *hdf5_sys::h5t::H5T_STD_I64LE, Some(&value.to_le_bytes()))
    })
}

/// An attribute value as a reader needs it.
#[derive(Debug, Clone, PartialEq)]
pub enum AttributeValue {
    /// A string (fixed or variable length; a NULL dataspace reads as the empty string).
    Text(String),
    /// A bitfield, or an enum (h5py's bool), as true when non-zero.
    Bool(bool),
    /// An integer.
    Int(i64),
    /// A float.
    Float(f64),
    /// Anything else: what it is, for messages.
    Other(String),
}

impl AttributeValue {
    /// What kind of value it is, for messages: `string`, `bool`, `int`, `float`, or the other type.
    pub fn kind(&self) -> String {
        match self {
            AttributeValue::Text(_) => "string".into(),
            AttributeValue::Bool(_) => "bool".into(),
            AttributeValue::Int(_) => "int".into(),
            AttributeValue::Float(_) => "float".into(),
            AttributeValue::Other(what) => what.clone(),
        }
    }
}

/// Reads attribute `name` of `object`, or `None` when it does not exist. Tolerant of every
/// encoding PyTables and h5py write for a scalar string, bool or number.
pub fn read_attribute(object: hid_t, name: &str) -> Outcome<Option<AttributeValue>> {
    let c = c_name(name)?;
    locked(|| {
        // SAFETY: `object` is a valid object id; `c` is NUL-terminated.
        if check(unsafe { H5Aexists(object, c.as_ptr()) }, "H5Aexists")? == 0 {
            return Ok(None);
        }
        // SAFETY: as above; the attribute exists.
        let attribute = Id::new(unsafe { H5Aopen(object, c.as_ptr(), H5P_DEFAULT) }, "H5Aopen")?;
        // SAFETY: `attribute` is a valid attribute id.
        let space = Id::new(unsafe { H5Aget_space(attribute.0) }, "H5Aget_space")?;
        // SAFETY: as above.
        let datatype = Id::new(unsafe { H5Aget_type(attribute.0) }, "H5Aget_type")?;
        // SAFETY: valid dataspace and datatype ids.
        let (space_class, points, class, size) = unsafe {
            (
                H5Sget_simple_extent_type(space.0),
                H5Sget_simple_extent_npoints(space.0),
                H5Tget_class(datatype.0),
                H5Tget_size(datatype.0),
            )
        };
        if space_class == H5S_class_t::H5S_NULL {
            return Ok(Some(match class {
                H5T_class_t::H5T_STRING => AttributeValue::Text(String::new()),
                _ => AttributeValue::Other("empty (NULL dataspace) non-string".into()),
            }));
        }
        if points != 1 {
            return Ok(Some(AttributeValue::Other(format!("{points} elements, not a scalar"))));
        }
        // The value is stored in the file (in the object's header): a larger type is damage,
        // and must not size the buffer it is read into.
        let file_bytes = file_size(object)?;
        if size as u64 > file_bytes {
            return Err(Failure(format!(
                "attribute {name} claims {size}-byte values; the file holds {file_bytes} bytes"
            )));
        }
        Some(read_scalar(&attribute, &datatype, class, size)).transpose()
    })
}

/// Reads the one element of an attribute of type class `class`.
fn read_scalar(
    attribute: &Id,
    datatype: &Id,
    class: H5T_class_t,
    size: usize,
) -> Outcome<AttributeValue> {
    use hdf5_sys::h5t as t;
    match class {
        H5T_class_t::H5T_STRING => {
            // SAFETY: `datatype` is a valid string type.
            if check(unsafe { H5Tis_variable_str(datatype.0) }, "H5Tis_variable_str")? > 0 {
                // libhdf5 follows the value's global heap reference unchecked: tried in a child
                // process first.
                let keep = storage::libhdf5_descriptor(attribute.0)?;
                helper::survives_in_child("a variable-length string attribute", keep, || {
                    let _ = read_variable_string(attribute, datatype);
                })?;
                return read_variable_string(attribute, datatype);
            }
            let mut buffer = vec![0u8; size];
            // SAFETY: reading one element of the attribute's own fixed-size type: `size` bytes.
            let ret = unsafe { H5Aread(attribute.0, datatype.0, buffer.as_mut_ptr().cast()) };
            check(ret, "H5Aread")?;
            // SAFETY: `datatype` is a valid string type.
            let pad = unsafe { H5Tget_strpad(datatype.0) };
            let end = match pad {
                H5T_str_t::H5T_STR_SPACEPAD => {
                    buffer.iter().rposition(|&b| b != b' ').map_or(0, |i| i + 1)
                }
                _ => buffer.iter().position(|&b| b == 0).unwrap_or(buffer.len()),
            };
            buffer.truncate(end);
            String::from_utf8(buffer)
                .map(AttributeValue::Text)
                .map_err(|e| Failure(format!("string attribute is not UTF-8: {e}")))
        }
        H5T_class_t::H5T_BITFIELD | H5T_class_t::H5T_ENUM if (1..=8).contains(&size) => {
            // Raw bytes in the stored type (no conversion path exists from an enum to an
            // integer); little- or big-endian, zero is false either way.
            let mut buffer = [0u8; 8];
            // SAFETY: one element of the attribute's own type, at most 8 bytes.
            let ret = unsafe { H5Aread(attribute.0, datatype.0, buffer.as_mut_ptr().cast()) };
            check(ret, "H5Aread")?;
            Ok(AttributeValue::Bool(buffer[..size].iter().any(|&b| b != 0)))
        }
        H5T_class_t::H5T_INTEGER => {
            // SAFETY: `datatype` is a valid integer type.
            let unsigned = unsafe { H5Tget_sign(datatype.0) } == H5T_sign_t::H5T_SGN_NONE;
            let mut value = [0u8; 8];
            let memory = if unsigned { *t::H5T_NATIVE_UINT64 } else { *t::H5T_NATIVE_INT64 };
            // SAFETY: one element converted to a native 8-byte integer.
            check(unsafe { H5Aread(attribute.0, memory, value.as_mut_ptr().cast()) }, "H5Aread")?;
            let int = if unsigned {
                i64::try_from(u64::from_ne_bytes(value))
                    .map_err(|_| Failure("unsigned attribute beyond i64".into()))?
            } else {
                i64::from_ne_bytes(value)
            };
            Ok(AttributeValue::Int(int))
        }
        H5T_class_t::H5T_FLOAT => {
            let mut value = [0u8; 8];
            // SAFETY: one element converted to a native double.
            let ret =
                unsafe { H5Aread(attribute.0, *t::H5T_NATIVE_DOUBLE, value.as_mut_ptr().cast()) };
            check(ret, "H5Aread")?;
            Ok(AttributeValue::Float(f64::from_ne_bytes(value)))
        }
        other => Ok(AttributeValue::Other(format!("HDF5 type class {other:?}"))),
    }
}

/// Reads a scalar variable-length string attribute.
fn read_variable_string(attribute: &Id, datatype: &Id) -> Outcome<AttributeValue> {
    let mut pointer: *mut std::ffi::c_char = ptr::null_mut();
    // SAFETY: reading one variable-length string: libhdf5 stores one `char *` it allocated.
    let ret = unsafe { H5Aread(attribute.0, datatype.0, (&raw mut pointer).cast()) };
    check(ret, "H5Aread")?;
    let text = if pointer.is_null() {
        Ok(String::new())
    } else {
        // SAFETY: libhdf5 returned a NUL-terminated string it allocated.
        let bytes = unsafe { std::ffi::CStr::from_ptr(pointer) }.to_bytes().to_vec();
        String::from_utf8(bytes).map_err(|e| Failure(format!("string attribute is not UTF-8: {e}")))
    };
    // SAFETY: creating a scalar dataspace has no preconditions.
    let space = Id::new(unsafe { H5Screate(H5S_class_t::H5S_SCALAR) }, "H5Screate")?;
    // SAFETY: frees the one string H5Aread allocated for this type and space.
    unsafe { H5Dvlen_reclaim(datatype.0, space.0, H5P_DEFAULT, (&raw mut pointer).cast()) };
    text.map(AttributeValue::Text)
}

/// Copies attribute `name` of `source` to `target` as stored: same type, same dataspace, same
/// bytes (variable-length values included), replacing an attribute of that name.
pub fn copy_attribute(source: hid_t, target: hid_t, name: &str) -> Outcome<()> {
    let c = c_name(name)?;
    locked(|| {
        // SAFETY: valid object id, NUL-terminated name.
        let attribute = Id::new(unsafe { H5Aopen(source, c.as_ptr(), H5P_DEFAULT) }, "H5Aopen")?;
        // SAFETY: `attribute` is valid; H5Aget_type returns the type in its memory form, so
        // variable-length values read as pointers libhdf5 allocates.
        let datatype = Id::new(unsafe { H5Aget_type(attribute.0) }, "H5Aget_type")?;
        // SAFETY: as above.
        let space = Id::new(unsafe { H5Aget_space(attribute.0) }, "H5Aget_space")?;
        // SAFETY: valid ids.
        let (points, size) =
            unsafe { (H5Sget_simple_extent_npoints(space.0), H5Tget_size(datatype.0)) };
        let points =
            usize::try_from(points).map_err(|_| failure("H5Sget_simple_extent_npoints"))?;
        // Each value takes at least its size in the file (a variable-length one: its 16-byte
        // heap reference, more than the pointer it reads as): more is damage.
        let file_bytes = file_size(source)?;
        let bytes = points.checked_mul(size).filter(|&bytes| bytes as u64 <= file_bytes);
        let bytes = bytes.ok_or_else(|| {
            Failure(format!(
                "attribute {name}: {points} values of {size} bytes; the file holds {file_bytes}"
            ))
        })?;
        delete_attribute(target, &c)?;
        // SAFETY: valid ids; `c` is NUL-terminated.
        let copy = Id::new(
            unsafe {
                H5Acreate2(target, c.as_ptr(), datatype.0, space.0, H5P_DEFAULT, H5P_DEFAULT)
            },
            "H5Acreate2",
        )?;
        if points == 0 {
            return Ok(());
        }
        let mut buffer = vec![0u8; bytes];
        // SAFETY: valid datatype id.
        if check(unsafe { H5Tdetect_class(datatype.0, H5T_class_t::H5T_VLEN) }, "H5Tdetect_class")?
            > 0
            // SAFETY: as above.
            || check(unsafe { H5Tis_variable_str(datatype.0) }, "H5Tis_variable_str")? > 0
        {
            // Its values are global heap references libhdf5 follows unchecked: tried in a
            // child process first.
            let mut scratch = buffer.clone();
            let keep = storage::libhdf5_descriptor(source)?;
            helper::survives_in_child(&format!("variable-length attribute {name}"), keep, || {
                // SAFETY: as below, into the child's copy of the buffer (never freed: the child
                // leaves at once).
                unsafe { H5Aread(attribute.0, datatype.0, scratch.as_mut_ptr().cast()) };
            })?;
        }
        // SAFETY: `buffer` holds `points` elements of the memory type.
        check(unsafe { H5Aread(attribute.0, datatype.0, buffer.as_mut_ptr().cast()) }, "H5Aread")?;
        // SAFETY: writes the same elements back under the same type.
        let written = unsafe { H5Awrite(copy.0, datatype.0, buffer.as_ptr().cast()) };
        // SAFETY: frees what H5Aread allocated for variable-length members (a no-op otherwise).
        unsafe { H5Dvlen_reclaim(datatype.0, space.0, H5P_DEFAULT, buffer.as_mut_ptr().cast()) };
        check(written, "H5Awrite").map(|_| ())
    })
}

/// Copies object `name` (a group with everything below it, or a dataset) of the file `source`
/// to the same name in the file `target`, as stored: types, filters, chunking, attributes.
pub fn copy_object(source: hid_t, name: &str, target: hid_t) -> Outcome<()> {
    let c = c_name(name)?;
    locked(|| {
        // SAFETY: valid location ids of two open files; `c` is NUL-terminated; default property
        // lists.
        let ret = unsafe {
            hdf5_sys::h5o::H5Ocopy(source, c.as_ptr(), target, c.as_ptr(), H5P_DEFAULT, H5P_DEFAULT)
        };
        check(ret, "H5Ocopy").map(|_| ())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attributes_round_trip_in_their_pytables_encodings() {
        let dir = tempfile::tempdir().unwrap();
        let file = hdf5::File::create(dir.path().join("a.h5")).unwrap();
        let id = file.id();
        write_utf8_attribute(id, "s", "gë").unwrap();
        write_utf8_attribute(id, "empty", "").unwrap();
        write_bool_attribute(id, "t", true).unwrap();
        write_bool_attribute(id, "f", false).unwrap();
        write_i64_attribute(id, "i", -7).unwrap();
        assert_eq!(read_attribute(id, "s").unwrap(), Some(AttributeValue::Text("gë".into())));
        assert_eq!(read_attribute(id, "empty").unwrap(), Some(AttributeValue::Text(String::new())));
        assert_eq!(read_attribute(id, "t").unwrap(), Some(AttributeValue::Bool(true)));
        assert_eq!(read_attribute(id, "f").unwrap(), Some(AttributeValue::Bool(false)));
        assert_eq!(read_attribute(id, "i").unwrap(), Some(AttributeValue::Int(-7)));
        assert_eq!(read_attribute(id, "absent").unwrap(), None);
        write_i64_attribute(id, "i", 8).unwrap();
        assert_eq!(read_attribute(id, "i").unwrap(), Some(AttributeValue::Int(8)), "replaced");
    }

    #[test]
    fn damaged_heaps_under_variable_length_string_attributes_are_errors() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.h5");
        {
            let file = hdf5::File::create(&path).unwrap();
            let value: hdf5::types::VarLenUnicode = "float64".parse().unwrap();
            let attribute = file.new_attr::<hdf5::types::VarLenUnicode>().create("s").unwrap();
            attribute.write_scalar(&value).unwrap();
        }
        let intact = std::fs::read(&path).unwrap();
        let read = |bytes: &[u8]| {
            std::fs::write(&path, bytes).unwrap();
            let file = hdf5::File::open(&path).unwrap();
            read_attribute(file.id(), "s")
        };
        assert_eq!(read(&intact).unwrap(), Some(AttributeValue::Text("float64".into())));
        let heap = intact.windows(4).position(|w| w == b"GCOL").expect("a global heap");
        // The object's index, its size, the collection's size: each libhdf5 trusts.
        for (at, value) in [(16, 0x00), (16, 0x07), (24 + 5, 0x10), (24, 0xF1), (9, 0x00)] {
            let mut bad = intact.clone();
            bad[heap + at] = value;
            // A value or an error, whatever libhdf5 does with it: never a crash of this process.
            let outcome = read(&bad);
            eprintln!("heap byte {at} = {value:#x}: {outcome:?}");
            match outcome {
                Ok(value) => assert!(matches!(value, Some(AttributeValue::Text(_))), "{value:?}"),
                Err(e) => assert!(!e.to_string().is_empty()),
            }
        }
    }

    #[test]
    fn vlen_rows_round_trip_and_convert_on_read() {
        let dir = tempfile::tempdir().unwrap();
        let file = hdf5::File::create(dir.path().join("v.h5")).unwrap();
        let dataset = file
            .new_dataset::<hdf5::types::VarLenArray<f32>>()
            .chunk(4)
            .shape(0..)
            .create("values")
            .unwrap();
        let f32s = VlenType::new(Element::F32).unwrap();
        let rows: [Vec<f32>; 3] = [vec![1.5, 2.5], vec![], vec![-3.0]];
        let bytes: Vec<Vec<u8>> =
            rows.iter().map(|r| r.iter().flat_map(|v| v.to_le_bytes()).collect()).collect();
        let slices: Vec<&[u8]> = bytes.iter().map(Vec::as_slice).collect();
        write_vlen_rows(dataset.id(), 0, &slices[..2], &f32s).unwrap();
        write_vlen_rows(dataset.id(), 2, &slices[2..], &f32s).unwrap();
        assert_eq!(row_count(dataset.id()).unwrap(), 3);
        assert_eq!(read_vlen_row(dataset.id(), 0, &f32s).unwrap(), bytes[0]);
        assert!(read_vlen_row(dataset.id(), 1, &f32s).unwrap().is_empty());
        let f64s = VlenType::new(Element::F64).unwrap();
        assert_eq!(read_vlen_row(dataset.id(), 2, &f64s).unwrap(), (-3.0f64).to_le_bytes());
        let past = read_vlen_row(dataset.id(), 3, &f32s).unwrap_err();
        assert!(past.to_string().contains("past the dataset's 3 rows"), "{past}");
    }
}
