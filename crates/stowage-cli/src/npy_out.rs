//! Writing a [`Tensor`] as a numpy `.npy` file.

use std::io::Write;
use std::path::Path;

use stowage_core::file_safety::atomic_write_with;
use stowage_core::npy_header::{storage_descr, write_header};
use stowage_core::{DType, Tensor};

use crate::error::CliError;

/// Writes `tensor` to `path` as `.npy` format 1.0: C order, little-endian, the tensor's own shape,
/// with the header `numpy.save` writes (numpy >= 1.24, byte for byte). `numpy.load` reads it back.
///
/// numpy has no bfloat16: a bfloat16 tensor is written as `<u2` (its raw 16-bit patterns), which
/// the caller should tell the user about. Returns the `descr` written (`<f4`, `|b1`, `<u2`...).
///
/// The file is replaced atomically (temp file + rename): a reader never sees half a file, and a
/// symlink at `path` is replaced, not followed.
pub fn write_npy(path: &Path, tensor: &Tensor) -> Result<&'static str, CliError> {
    let header = write_header(tensor.dtype(), tensor.shape());
    atomic_write_with(path, |out| {
        out.write_all(&header)?;
        out.write_all(tensor.bytes())
    })?;
    Ok(storage_descr(tensor.dtype()))
}

/// The most dimensions `numpy.load` accepts (`NPY_MAXDIMS` of numpy 1.x; numpy 2 takes 64).
pub const NUMPY_MAX_DIMS: usize = 32;

/// Whether numpy can load `tensor` written as `.npy`; why not otherwise.
///
/// numpy refuses an array of more than [`NUMPY_MAX_DIMS`] dimensions, and one whose non-zero
/// dimensions times its item size exceed the largest `intp` (`i64::MAX`), even when another
/// dimension is 0 and the array holds no byte: a shape a hostile or damaged cache can hold.
pub fn numpy_loadable(tensor: &Tensor) -> Result<(), String> {
    let shape = tensor.shape();
    let refuse = |why: String| {
        Err(format!(
            "shape {} cannot be written as .npy: {why}; no numpy array has this shape (is the \
             cache damaged? `stowage verify` checks it)",
            stowage_core::shape::display(shape)
        ))
    };
    if shape.len() > NUMPY_MAX_DIMS {
        return refuse(format!("{} dimensions, numpy loads at most {NUMPY_MAX_DIMS}", shape.len()));
    }
    let mut bytes = tensor.dtype().item_size() as u128;
    for &dim in shape.iter().filter(|d| **d != 0) {
        bytes = bytes.saturating_mul(dim as u128);
        if bytes > i64::MAX as u128 {
            return refuse("its dimensions multiply past the largest array numpy can index".into());
        }
    }
    Ok(())
}

/// Whether `dtype` is written as a different numpy dtype (bfloat16 as `<u2`).
pub fn has_no_numpy_dtype(dtype: DType) -> bool {
    dtype.numpy_descr().is_none()
}

#[cfg(test)]
mod tests {
    use super::*;
    use stowage_core::npy_header::parse;

    fn round_trip(tensor: &Tensor) -> (String, Vec<usize>, Vec<u8>) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.npy");
        write_npy(&path, tensor).unwrap();
        let bytes = std::fs::read(&path).unwrap();
        let header = parse(&bytes).unwrap();
        assert!(!header.fortran_order);
        assert_eq!(header.data_offset % 64, 0);
        (header.descr, header.shape, bytes[header.data_offset..].to_vec())
    }

    #[test]
    fn tensors_round_trip_through_the_header_parser() {
        let cases = [
            (Tensor::from_slice(&[2, 3], &[1f32, 2., 3., 4., 5., 6.]).unwrap(), "<f4"),
            (Tensor::scalar(7i64), "<i8"),
            (Tensor::from_bools(&[3], &[true, false, true]).unwrap(), "|b1"),
            (Tensor::zeros(DType::U8, &[0, 4]).unwrap(), "|u1"),
            (
                Tensor::from_slice(&[2], &[stowage_core::half::f16::from_f32(1.5); 2]).unwrap(),
                "<f2",
            ),
        ];
        for (tensor, descr) in cases {
            let (got_descr, shape, data) = round_trip(&tensor);
            assert_eq!(got_descr, descr);
            assert_eq!(shape, tensor.shape());
            assert_eq!(data, tensor.bytes());
        }
    }

    #[test]
    fn shapes_numpy_cannot_load_are_refused() {
        let huge = Tensor::zeros(DType::F32, &[0, 1 << 40, 1 << 30]).unwrap();
        let e = numpy_loadable(&huge).unwrap_err();
        assert!(e.contains("(0, 1099511627776, 1073741824)") && e.contains("multiply"), "{e}");
        let deep = Tensor::zeros(DType::U8, &[1; 33]).unwrap();
        assert!(numpy_loadable(&deep).unwrap_err().contains("33 dimensions"));
        assert_eq!(numpy_loadable(&Tensor::zeros(DType::U8, &[1; 32]).unwrap()), Ok(()));
        assert_eq!(numpy_loadable(&Tensor::zeros(DType::F64, &[0, 1 << 40]).unwrap()), Ok(()));
    }

    #[test]
    fn bfloat16_is_written_as_u2() {
        let values =
            [stowage_core::half::bf16::from_f32(1.5), stowage_core::half::bf16::from_f32(-2.)];
        let tensor = Tensor::from_slice(&[2], &values).unwrap();
        assert!(has_no_numpy_dtype(tensor.dtype()));
        let (descr, shape, data) = round_trip(&tensor);
        assert_eq!(
            (descr.as_str(), shape.as_slice(), data.as_slice()),
            ("<u2", &[2][..], tensor.bytes())
        );
    }
}
