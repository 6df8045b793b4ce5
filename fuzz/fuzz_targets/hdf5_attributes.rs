//! The attribute decoding stowage does on libhdf5's reads (`stowage_hdf5::fuzzing::read_attribute`,
//! which `Attributes::text`, `flag` and `int` and so every cache open go through): attributes of
//! every type class and size it handles (fixed strings with each padding, variable strings,
//! bitfields, h5py enum bools, signed and unsigned integers and floats of both byte orders,
//! non-scalar and NULL dataspaces, an opaque type) holding hostile bytes, written into an
//! in-memory HDF5 file and read back; a text read is then interpreted as a storage dtype name, as
//! the aenet reader does. Input: a type selector byte, a size/variant byte, then the bytes.
//!
//! The file structure stays well-formed (libhdf5 writes it), so this fuzzes stowage's decoding,
//! not libhdf5's parser of hostile files (which stowage keeps away from unverified bytes: the
//! backend checks each segment's xxh3 before libhdf5 opens it).
#![no_main]

use hdf5_sys::h5::hsize_t;
use hdf5_sys::h5a::{H5Aclose, H5Acreate2, H5Adelete, H5Aexists, H5Awrite};
use hdf5_sys::h5i::hid_t;
use hdf5_sys::h5p::H5P_DEFAULT;
use hdf5_sys::h5s::{H5S_class_t, H5Sclose, H5Screate, H5Screate_simple};
use hdf5_sys::h5t::{self as t, H5T_cset_t, H5T_str_t, H5Tclose, H5Tcopy};
use libfuzzer_sys::fuzz_target;
use std::ffi::{CString, c_void};
use std::sync::OnceLock;

/// The in-memory file (core driver, never written to disk) and the group the attribute is on.
fn group() -> &'static hdf5::Group {
    static GROUP: OnceLock<(hdf5::File, hdf5::Group)> = OnceLock::new();
    &GROUP
        .get_or_init(|| {
            let path = stowage_fuzz::scratch_path("attributes.h5");
            let file = hdf5::File::with_options()
                .with_fapl(|p| p.core_filebacked(false))
                .create(&path)
                .expect("creating the in-memory HDF5 file");
            let group = file.create_group("g").expect("creating the group");
            (file, group)
        })
        .1
}

/// The attribute's type for `selector` and `variant`, and how many bytes one element takes
/// (`None`: a variable-length string, written from a pointer).
fn attribute_type(selector: u8, variant: u8) -> (hid_t, Option<usize>) {
    // SAFETY: copies of libhdf5's predefined types, each changed only through its own id.
    unsafe {
        match selector % 8 {
            0 => {
                let size = 1 + usize::from(variant % 64);
                let id = H5Tcopy(*t::H5T_C_S1);
                t::H5Tset_size(id, size);
                let pad = [
                    H5T_str_t::H5T_STR_NULLTERM,
                    H5T_str_t::H5T_STR_NULLPAD,
                    H5T_str_t::H5T_STR_SPACEPAD,
                ];
                t::H5Tset_strpad(id, pad[usize::from(variant / 64) % 3]);
                let cset = if variant & 1 == 0 {
                    H5T_cset_t::H5T_CSET_ASCII
                } else {
                    H5T_cset_t::H5T_CSET_UTF8
                };
                t::H5Tset_cset(id, cset);
                (id, Some(size))
            }
            1 => {
                let id = H5Tcopy(*t::H5T_C_S1);
                t::H5Tset_size(id, t::H5T_VARIABLE);
                (id, None)
            }
            2 => {
                let types =
                    [*t::H5T_STD_B8LE, *t::H5T_STD_B16LE, *t::H5T_STD_B32BE, *t::H5T_STD_B64LE];
                let sizes = [1, 2, 4, 8];
                let i = usize::from(variant) % 4;
                (H5Tcopy(types[i]), Some(sizes[i]))
            }
            3 => {
                // h5py's bool: an int8 enum FALSE = 0, TRUE = 1.
                let id = t::H5Tenum_create(*t::H5T_NATIVE_INT8);
                for (name, value) in [(c"FALSE", 0i8), (c"TRUE", 1i8)] {
                    t::H5Tenum_insert(id, name.as_ptr(), (&raw const value).cast());
                }
                (id, Some(1))
            }
            4 => {
                let types = [
                    *t::H5T_STD_I8LE,
                    *t::H5T_STD_U8LE,
                    *t::H5T_STD_I16BE,
                    *t::H5T_STD_U16LE,
                    *t::H5T_STD_I32LE,
                    *t::H5T_STD_U32BE,
                    *t::H5T_STD_I64LE,
                    *t::H5T_STD_U64BE,
                ];
                let sizes = [1, 1, 2, 2, 4, 4, 8, 8];
                let i = usize::from(variant) % 8;
                (H5Tcopy(types[i]), Some(sizes[i]))
            }
            5 => {
                let types = [
                    *t::H5T_IEEE_F32LE,
                    *t::H5T_IEEE_F64BE,
                    *t::H5T_IEEE_F32BE,
                    *t::H5T_IEEE_F64LE,
                ];
                let sizes = [4, 8, 4, 8];
                let i = usize::from(variant) % 4;
                (H5Tcopy(types[i]), Some(sizes[i]))
            }
            6 => {
                let size = 1 + usize::from(variant % 16);
                let id = t::H5Tcreate(t::H5T_class_t::H5T_OPAQUE, size);
                (id, Some(size))
            }
            _ => (H5Tcopy(*t::H5T_STD_I32LE), Some(4)),
        }
    }
}

fuzz_target!(|data: &[u8]| {
    let mut fields = stowage_fuzz::Fields::new(data);
    let (selector, variant, shape) = (fields.u8(), fields.u8(), fields.u8());
    let bytes = fields.rest();
    let group = group();
    let name = c"a";
    hdf5::sync::sync(|| {
        // SAFETY: valid ids of this process's file; every id created here is closed here; the
        // buffer handed to H5Awrite holds as many elements of the type as the dataspace has.
        unsafe {
            if H5Aexists(group.id(), name.as_ptr()) > 0 {
                H5Adelete(group.id(), name.as_ptr());
            }
            let (datatype, element) = attribute_type(selector, variant);
            let points: usize = match shape % 4 {
                0 | 1 => 1,
                2 => 2,
                _ => 0,
            };
            let space = match shape % 4 {
                0 | 1 => H5Screate(H5S_class_t::H5S_SCALAR),
                2 => H5Screate_simple(1, [2 as hsize_t].as_ptr(), std::ptr::null()),
                _ => H5Screate(H5S_class_t::H5S_NULL),
            };
            let attribute =
                H5Acreate2(group.id(), name.as_ptr(), datatype, space, H5P_DEFAULT, H5P_DEFAULT);
            if attribute >= 0 && points > 0 {
                match element {
                    Some(size) => {
                        let mut buffer = bytes.to_vec();
                        buffer.resize(size * points, 0);
                        H5Awrite(attribute, datatype, buffer.as_ptr().cast::<c_void>());
                    }
                    None => {
                        let text: Vec<u8> = bytes.iter().copied().filter(|&b| b != 0).collect();
                        let text = CString::new(text).expect("no NUL left");
                        let pointers = vec![text.as_ptr(); points];
                        H5Awrite(attribute, datatype, pointers.as_ptr().cast::<c_void>());
                    }
                }
            }
            if attribute >= 0 {
                H5Aclose(attribute);
            }
            H5Sclose(space);
            H5Tclose(datatype);
        }
    });
    if let Ok(Some(stowage_hdf5::fuzzing::AttributeValue::Text(text))) =
        stowage_hdf5::fuzzing::read_attribute(group.id(), "a")
    {
        let _ = stowage_hdf5::StorageDtype::from_name(&text);
    }
});
