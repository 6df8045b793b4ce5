//! Writing a [`Tensor`] as a numpy `.npy` file.

use std::io::Write;
use std::path::Path;

use stowage_core::file_safety::atomic_write_with;
use stowage_core::{DType, Tensor};
use stowage_npy::npy_header::{storage_descr, write_header};

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

/// Whether `dtype` is written as a different numpy dtype (bfloat16 as `<u2`).
pub fn has_no_numpy_dtype(dtype: DType) -> bool {
    dtype.numpy_descr().is_none()
}

#[cfg(test)]
mod tests {
    use super::*;
    use stowage_npy::npy_header::parse;

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
