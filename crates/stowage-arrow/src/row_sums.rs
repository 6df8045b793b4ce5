//! `segment_<id>.sums`: one checksum per row of a segment, so that a get never returns a flipped
//! byte as data (torchcachex stores no checksums; it never sees this file).
//!
//! ```text
//! header (crate::framed): magic "STWSUMS1" | rows
//! body: one u64 per row, xxh3 of the row's key and sample (see `of_sample`)
//! ```
//!
//! A row's checksum covers what a reader decodes: the key, then every field by name, sorted,
//! with its kind, and for a tensor its dtype, shape and bytes. A writer hashes a sample in its
//! stored form (a null blob is stored, and read back, as empty bytes).

use std::path::{Path, PathBuf};

use stowage_core::{Result, Sample, Value};
use xxhash_rust::xxh3::Xxh3;

use crate::framed::{self, Framed, HEADER};

const MAGIC: &[u8; 8] = b"STWSUMS1";

/// The checksum file's path beside its segment: `segment_<id>.sums`.
pub fn sums_path(segment: &Path) -> PathBuf {
    segment.with_extension("sums")
}

/// The checksum of one row: its key and the fields of `sample`, by name.
///
/// ```
/// use stowage_core::{Sample, Tensor};
/// let a = Sample::new().with("x", Tensor::from_slice(&[2], &[1.0f32, 2.0])?);
/// let b = Sample::new().with("x", Tensor::from_slice(&[2], &[1.0f32, 2.5])?);
/// use stowage_arrow::row_sums::of_sample;
/// assert_ne!(of_sample("k", &a), of_sample("k", &b));
/// assert_ne!(of_sample("k", &a), of_sample("j", &a));
/// # Ok::<(), stowage_core::Error>(())
/// ```
pub fn of_sample(key: &str, sample: &Sample) -> u64 {
    let mut hasher = Xxh3::new();
    let mut field = |bytes: &[u8]| {
        hasher.update(&(bytes.len() as u64).to_le_bytes());
        hasher.update(bytes);
    };
    field(key.as_bytes());
    let mut fields: Vec<(&str, &Value)> = sample.fields().collect();
    fields.sort_unstable_by_key(|(name, _)| *name);
    for (name, value) in fields {
        field(name.as_bytes());
        match value {
            Value::Null => field(b"null"),
            Value::Tensor(tensor) => {
                field(tensor.dtype().torch_name().as_bytes());
                let dims: Vec<u8> =
                    tensor.shape().iter().flat_map(|&d| (d as u64).to_le_bytes()).collect();
                field(&dims);
                field(tensor.bytes());
            }
            Value::Bytes(bytes) => {
                field(b"bytes");
                field(&bytes[..]);
            }
            Value::Json(text) => {
                field(b"json");
                field(text.as_bytes());
            }
        }
    }
    hasher.digest()
}

/// The bytes of the checksum file of a segment whose rows have checksums `sums`.
pub fn encode(sums: &[u64]) -> Vec<u8> {
    let body: Vec<u8> = sums.iter().flat_map(|s| s.to_le_bytes()).collect();
    framed::encode(MAGIC, &[sums.len() as u64], &body)
}

/// An open checksum file.
#[derive(Debug)]
pub struct RowSums {
    file: Framed,
    rows: usize,
}

impl RowSums {
    /// Maps `path` and checks its header and size.
    ///
    /// Errors: [`Error::Corrupted`](stowage_core::Error::Corrupted) naming the file;
    /// [`Error::Io`](stowage_core::Error::Io) (`NotFound` included).
    pub fn open(path: &Path) -> Result<RowSums> {
        let file = Framed::open(path, MAGIC, "checksum file")?;
        let rows = file.field(0);
        let Some(rows) =
            usize::try_from(rows).ok().filter(|r| r.checked_mul(8) == Some(file.body().len()))
        else {
            return Err(
                file.corrupted(format!("{} bytes for {rows} rows", HEADER + file.body().len()))
            );
        };
        Ok(RowSums { file, rows })
    }

    /// Rows it covers.
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// The stored checksum of row `row`.
    pub fn get(&self, row: usize) -> Option<u64> {
        let bytes = self.file.body().get(row.checked_mul(8)?..)?.get(..8)?;
        Some(u64::from_le_bytes(bytes.try_into().expect("8 bytes")))
    }

    /// Checks the stored checksums against their own checksum.
    pub fn verify(&self) -> Result<()> {
        self.file.verify()
    }

    /// The file.
    pub fn path(&self) -> &Path {
        self.file.path()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use stowage_core::{Error, Tensor};

    #[test]
    fn written_sums_read_back_and_damage_is_corruption() {
        let dir = tempfile::tempdir().unwrap();
        let segment = dir.path().join("segment_000003.arrow");
        let path = sums_path(&segment);
        std::fs::write(&path, encode(&[7, 8, u64::MAX])).unwrap();
        assert!(path.ends_with("segment_000003.sums"));
        let sums = RowSums::open(&path).unwrap();
        sums.verify().unwrap();
        assert_eq!((sums.rows(), sums.get(2), sums.get(3)), (3, Some(u64::MAX), None));
        let good = std::fs::read(&path).unwrap();
        for at in 0..good.len() {
            let mut bad = good.clone();
            bad[at] ^= 1;
            std::fs::write(&path, &bad).unwrap();
            let damaged = RowSums::open(&path).and_then(|s| s.verify());
            assert!(matches!(damaged, Err(Error::Corrupted { .. })), "byte {at}");
        }
        std::fs::write(&path, &good[..good.len() - 1]).unwrap();
        assert!(RowSums::open(&path).is_err());
    }

    #[test]
    fn every_part_of_a_row_counts() {
        let base = Sample::new()
            .with("a", Tensor::from_slice(&[2], &[1i32, 2]).unwrap())
            .with("b", Value::Bytes(b"xy".to_vec().into()));
        let sum = of_sample("k", &base);
        let reshaped = base.clone().with("a", Tensor::from_slice(&[1, 2], &[1i32, 2]).unwrap());
        let retyped = base.clone().with("a", Tensor::from_slice(&[2], &[1u32, 2]).unwrap());
        let renamed = Sample::new()
            .with("c", Tensor::from_slice(&[2], &[1i32, 2]).unwrap())
            .with("b", Value::Bytes(b"xy".to_vec().into()));
        let nulled = base.clone().with("b", Value::Null);
        for other in [reshaped, retyped, renamed, nulled] {
            assert_ne!(of_sample("k", &other), sum);
        }
        let reordered = Sample::new()
            .with("b", Value::Bytes(b"xy".to_vec().into()))
            .with("a", Tensor::from_slice(&[2], &[1i32, 2]).unwrap());
        assert_eq!(of_sample("k", &reordered), sum, "fields count by name, not by order");
    }
}
