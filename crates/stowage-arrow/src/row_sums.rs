//! `segment_<id>.sums`: one checksum per row of a segment, so that a get never returns a flipped
//! byte as data (torchcachex stores no checksums; it never sees this file).
//!
//! ```text
//! header (32 bytes, little-endian): magic "STWSUMS1" | rows u64 | sums xxh3 u64 | header xxh3 u64
//! then one u64 per row: xxh3 of the row's key and sample (see `of_sample`)
//! ```
//!
//! A row's checksum covers what a reader decodes: the key, then every field by name, sorted,
//! with its kind, and for a tensor its dtype, shape and bytes. A writer hashes a sample in its
//! stored form (a null blob is stored, and read back, as empty bytes).

use std::path::{Path, PathBuf};

use memmap2::Mmap;
use stowage_core::file_safety::atomic_write;
use stowage_core::{Error, IoResultExt, Result, Sample, Value};
use xxhash_rust::xxh3::{Xxh3, xxh3_64};

const MAGIC: &[u8; 8] = b"STWSUMS1";
const HEADER: usize = 32;

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

/// Writes the checksums of a segment's rows atomically.
pub fn write(segment: &Path, sums: &[u64]) -> Result<PathBuf> {
    let mut out = vec![0u8; HEADER];
    out.extend(sums.iter().flat_map(|s| s.to_le_bytes()));
    out[..8].copy_from_slice(MAGIC);
    out[8..16].copy_from_slice(&(sums.len() as u64).to_le_bytes());
    let body = xxh3_64(&out[HEADER..]);
    out[16..24].copy_from_slice(&body.to_le_bytes());
    let header = xxh3_64(&out[..24]);
    out[24..32].copy_from_slice(&header.to_le_bytes());
    let path = sums_path(segment);
    atomic_write(&path, &out)?;
    Ok(path)
}

/// An open checksum file.
#[derive(Debug)]
pub struct RowSums {
    path: PathBuf,
    map: Mmap,
    rows: usize,
}

impl RowSums {
    /// Maps `path` and checks its header and size.
    ///
    /// Errors: [`Error::Corrupted`] naming the file; [`Error::Io`] (`NotFound` included).
    pub fn open(path: &Path) -> Result<RowSums> {
        let file = std::fs::File::open(path).at(path)?;
        // SAFETY: written whole under a temporary name and renamed into place, never modified.
        let map = unsafe { Mmap::map(&file) }.at(path)?;
        let bad = |what: String| Error::corrupted(path, what);
        if map.len() < HEADER || &map[..8] != MAGIC {
            return Err(bad(format!(
                "not a checksum file ({} bytes, no STWSUMS1 magic)",
                map.len()
            )));
        }
        let word = |at: usize| u64::from_le_bytes(map[at..at + 8].try_into().expect("8 bytes"));
        if word(24) != xxh3_64(&map[..24]) {
            return Err(bad("header checksum mismatch".into()));
        }
        let rows = usize::try_from(word(8)).ok();
        if rows.and_then(|r| r.checked_mul(8)).and_then(|n| n.checked_add(HEADER))
            != Some(map.len())
        {
            return Err(bad(format!("{} bytes for {} rows", map.len(), word(8))));
        }
        Ok(RowSums { path: path.to_path_buf(), map, rows: rows.expect("checked") })
    }

    /// Rows it covers.
    pub fn rows(&self) -> usize {
        self.rows
    }

    /// The stored checksum of row `row`.
    pub fn get(&self, row: usize) -> Option<u64> {
        (row < self.rows).then(|| {
            let at = HEADER + row * 8;
            u64::from_le_bytes(self.map[at..at + 8].try_into().expect("8 bytes"))
        })
    }

    /// Checks the stored checksums against their own checksum.
    pub fn verify(&self) -> Result<()> {
        let stored = u64::from_le_bytes(self.map[16..24].try_into().expect("8 bytes"));
        if stored != xxh3_64(&self.map[HEADER..]) {
            return Err(Error::corrupted(&self.path, "checksum area mismatch"));
        }
        Ok(())
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use stowage_core::Tensor;

    #[test]
    fn written_sums_read_back_and_damage_is_corruption() {
        let dir = tempfile::tempdir().unwrap();
        let segment = dir.path().join("segment_000003.arrow");
        let path = write(&segment, &[7, 8, u64::MAX]).unwrap();
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
